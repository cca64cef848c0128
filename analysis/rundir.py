"""Reading a run directory: its records, its manifest, and Locust's own CSV files beside them.

Reading is strict where the input is wrong (a missing journal, an unreadable manifest raise
`RunDirError` with a one-line message naming the file) and lenient where a run was merely cut
short (a torn last line is skipped with a warning, because the journal is flushed per line).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import orjson

from loadlib.records import RECORDS_FILE

MANIFEST_FILE = "manifest.json"


class RunDirError(Exception):
    """The input is not a readable run; the message is one line naming the input."""


class SkippedLinesWarning(UserWarning):
    """Some journal lines could not be parsed and were left out."""


def read_journal(run_dir: str | Path) -> list[dict[str, Any]]:
    """The record dicts of a run directory (or of a records.jsonl file itself)."""
    path = Path(run_dir)
    if not path.exists():
        raise RunDirError(f"no such run directory: {path}")
    if path.is_dir():
        path = path / RECORDS_FILE
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RunDirError(f"cannot read records {path}: {exc.strerror or exc}") from None
    lines = [line for line in data.splitlines() if line.strip()]
    try:  # one parse for the whole file; the common case by far
        return orjson.loads(b"[" + b",".join(lines) + b"]")
    except orjson.JSONDecodeError:
        return _read_lines_skipping_bad(path, lines)


def _read_lines_skipping_bad(path: Path, lines: list[bytes]) -> list[dict[str, Any]]:
    records, bad = [], []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            bad.append(number)
    if bad == [len(lines)]:
        warnings.warn(f"{path}: skipped a torn last line (line {bad[0]})", SkippedLinesWarning, stacklevel=3)
    else:
        warnings.warn(f"{path}: skipped {len(bad)} unreadable line(s): {bad[:10]}", SkippedLinesWarning,
                      stacklevel=3)
    return records


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
