"""Reading a run directory: its records, its manifest, and Locust's own CSV files beside them.

Reading is strict where the input is wrong (a missing journal or an unreadable manifest raise
`RunDirError` with a one-line message naming the file) and lenient where a run was merely cut
short (a torn last line is skipped with a warning, because the journal is flushed per line).
"""

from __future__ import annotations

import itertools
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import orjson
import pandas as pd

from analysis.locust_csv import LocustCsv, read_locust_csv
from loadlib import metrics
from loadlib.records import RECORDS_FILE

MANIFEST_FILE = "manifest.json"
BATCH_LINES = 65_536


class RunDirError(Exception):
    """The input is not a readable run; the message is one line naming the input."""


class SkippedLinesWarning(UserWarning):
    """Some journal lines could not be parsed and were left out."""


@dataclass(frozen=True)
class Run:
    """One run, loaded once: every command works from this."""

    path: Path
    label: str
    records: pd.DataFrame  # `metrics.records_frame` of the journal
    manifest: dict[str, Any]
    locust: LocustCsv


def load_run(run_dir: str | Path, label: str | None = None) -> Run:
    """Loads a run directory; the label defaults to the directory's name."""
    path = Path(run_dir)
    records = metrics.records_frame(read_journal(path))
    return Run(path, label or path.resolve().name, records, read_manifest(path), read_locust_csv(path))


def read_journal(run_dir: str | Path) -> Iterator[dict[str, Any]]:
    """The record dicts of a run directory (or of a records.jsonl file itself).

    Parses a batch of lines at a time (one orjson call per batch) and falls back to line by
    line only for a batch that holds a bad line.
    """
    path = Path(run_dir)
    if not path.exists():
        raise RunDirError(f"no such run directory: {path}")
    if path.is_dir():
        path = path / RECORDS_FILE
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise RunDirError(f"cannot read records {path}: {exc.strerror or exc}") from None
    return _parse(path, handle)


def _parse(path: Path, handle: Any) -> Iterator[dict[str, Any]]:
    bad: list[int] = []
    seen = 0
    with handle:
        while lines := [line for line in itertools.islice(handle, BATCH_LINES) if line.strip()]:
            try:
                yield from orjson.loads(b"[" + b",".join(lines) + b"]")
            except orjson.JSONDecodeError:
                for number, line in enumerate(lines, start=seen + 1):
                    try:
                        yield orjson.loads(line)
                    except orjson.JSONDecodeError:
                        bad.append(number)
            seen += len(lines)
    if bad == [seen]:
        warnings.warn(f"{path}: skipped a torn last line (line {seen})", SkippedLinesWarning, stacklevel=2)
    elif bad:
        warnings.warn(f"{path}: skipped {len(bad)} unreadable line(s), first at line {bad[0]}",
                      SkippedLinesWarning, stacklevel=2)


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
