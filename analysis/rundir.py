"""What a run directory is: its records (read by `loadlib.record_table.read_records_frame`), its
manifest, and Locust's own CSV files beside them, under a label.

Reading is strict where the input is wrong: a missing journal, a line in it that is not a record
(not JSON, torn in the middle, without what a record measured, of the wrong types) or an unreadable
manifest raise `RunDirError` with a one-line message naming the file (and line). It is lenient only
where a run was merely cut short: a torn last line is skipped with a warning, because the journal is
flushed per line and a killed run can have left only its last line unfinished.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.locust_csv import LocustCsv, read_locust_csv
from loadlib.record_table import JournalError, read_records_frame
from loadlib.report.targets import split_targets

MANIFEST_FILE = "manifest.json"


class RunDirError(Exception):
    """The input is not a readable run; the message is one line naming the input."""


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
    try:
        records = read_records_frame(path)
    except JournalError as exc:
        raise RunDirError(str(exc)) from None
    return Run(path, label or path.resolve().name, records, read_manifest(path), read_locust_csv(path))


def by_target(run: Run) -> list[Run]:
    """An A/B run's or a sweep's servers as runs of their own ("dir/A", "dir/B"), for comparing
    them with each other or with other runs; the run itself when it had one server."""
    targets = split_targets(run.records, run.manifest, run.path)
    if not targets:
        return [run]
    return [Run(target.path, f"{run.label}/{target.label}", target.records, dict(target.manifest), LocustCsv())
            for target in targets]


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
