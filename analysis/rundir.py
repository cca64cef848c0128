"""Reading a run directory: its records, its manifest, and Locust's own CSV files beside them.

Reading is strict where the input is wrong (a missing journal or an unreadable manifest raise
`RunDirError` with a one-line message naming the file) and lenient where a run was merely cut
short (a torn last line is skipped with a warning, because the journal is flushed per line).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import orjson
import pandas as pd

from analysis.locust_csv import LocustCsv, read_locust_csv
from loadlib import metrics
from loadlib.records import RECORDS_FILE

MANIFEST_FILE = "manifest.json"
BLOCK_BYTES = 4 << 20  # journal bytes parsed at a time
GROUPING_COLUMNS = ("cell", "case", "scenario")


class RunDirError(Exception):
    """The input is not a readable run; the message is one line naming the input."""


class SkippedLinesWarning(UserWarning):
    """Some journal lines could not be parsed and were left out."""


@dataclass(frozen=True)
class Run:
    """One run, loaded once: every command works from this."""

    path: Path
    label: str
    records: pd.DataFrame  # `read_records_frame` of the journal
    manifest: dict[str, Any]
    locust: LocustCsv


def load_run(run_dir: str | Path, label: str | None = None) -> Run:
    """Loads a run directory; the label defaults to the directory's name."""
    path = Path(run_dir)
    return Run(path, label or path.resolve().name, read_records_frame(path), read_manifest(path),
               read_locust_csv(path))


def read_records_frame(run_dir: str | Path) -> pd.DataFrame:
    """The `metrics.records_frame` of a run directory's journal (or of a records.jsonl itself),
    parsed a block of lines per orjson call: turning a million JSON lines into Python objects is
    the slowest step of every command. The columns that every table groups by are categorical,
    so that each is factorised once instead of once per table."""
    path = _journal(Path(run_dir))
    tally = _Tally()
    frame = metrics.frame_from_batches(_parsed(_blocks(path), tally), categorical=GROUPING_COLUMNS)
    if tally.bad == [tally.lines]:
        warnings.warn(f"{path}: skipped a torn last line (line {tally.lines})", SkippedLinesWarning, stacklevel=2)
    elif tally.bad:
        warnings.warn(f"{path}: skipped {len(tally.bad)} unreadable line(s), first at line {tally.bad[0]}",
                      SkippedLinesWarning, stacklevel=2)
    return frame


def _journal(path: Path) -> Path:
    if not path.exists():
        raise RunDirError(f"no such run directory: {path}")
    journal = path / RECORDS_FILE if path.is_dir() else path
    if not journal.is_file():
        raise RunDirError(f"cannot read records {journal}: No such file or directory")
    return journal


def _blocks(path: Path) -> Iterator[bytes]:
    """Whole lines of the journal, about `BLOCK_BYTES` at a time (memory stays small and is reused)."""
    with open(path, "rb") as handle:
        rest = b""
        while block := handle.read(BLOCK_BYTES):
            cut = block.rfind(b"\n")
            if cut < 0:  # a line longer than a block
                rest += block
                continue
            yield rest + block[:cut]
            rest = block[cut + 1:]
        yield rest


@dataclass
class _Tally:
    lines: int = 0
    bad: list[int] = field(default_factory=list)  # 1-based numbers of the lines that did not parse


def _parsed(blocks: Iterator[bytes], tally: _Tally) -> Iterator[list[dict[str, Any]]]:
    """Each block parsed with one orjson call (its newlines made commas of one JSON array), line
    by line only when it holds a bad or blank line."""
    for block in blocks:
        if not block.strip():
            continue
        try:
            records = orjson.loads(b"[" + block.replace(b"\n", b",") + b"]")
        except orjson.JSONDecodeError:
            records = []
            for line in filter(bytes.strip, block.split(b"\n")):
                tally.lines += 1
                try:
                    records.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    tally.bad.append(tally.lines)
        else:
            tally.lines += len(records)
        yield records


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """The run's manifest, or {} when the run has none (records written by other tools)."""
    path = Path(run_dir) / MANIFEST_FILE
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunDirError(f"cannot read manifest {path}: {exc}") from None
    if not isinstance(manifest, dict):
        raise RunDirError(f"cannot read manifest {path}: not a JSON object")
    return manifest
