"""The runs one report.html shows, as (label, `RunData`) pairs: a run directory is read here, and
a run whose records name more than one `target` becomes one pair per target, so that an A/B run
reads like a comparison of its targets (the first target is the reference)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence, Union

from loadlib.records import read_records_frame
from loadlib.report.contents import RunData
from loadlib.report.targets import split_targets, target_data

RunInput = Union[RunData, str, Path]


def read_runs(pairs: Sequence[tuple[str, RunInput]]) -> list[tuple[str, RunData]]:
    """Each pair's run, a run directory read."""
    return [(label, run if isinstance(run, RunData) else read_run(run)) for label, run in pairs]


def as_runs(runs: Sequence[tuple[str, RunData]]) -> list[tuple[str, RunData]]:
    """The runs as the page shows them: split by target where a run has several."""
    return [pair for label, data in runs for pair in by_target(label, data, several_runs=len(runs) > 1)]


def read_run(run_dir: str | Path) -> RunData:
    """A run directory's records and manifest ({} when it has none)."""
    path = Path(run_dir)
    manifest_file = path / "manifest.json"
    manifest = json.loads(manifest_file.read_text(encoding="utf-8")) if manifest_file.exists() else {}
    return RunData(read_records_frame(path), manifest, path)


def by_target(label: str, data: RunData, several_runs: bool = False) -> list[tuple[str, RunData]]:
    """One pair per target of an A/B run (`loadlib.report.targets`: its records, its manifest
    entry and server files), in the profile's order; the run itself when it has one target. With
    `several_runs` a target's label keeps its run's in front ("a/B")."""
    targets = split_targets(data.df, data.manifest, data.run_dir)
    if not targets:
        return [(label, data)]
    return [(f"{label}/{target.label}" if several_runs else target.label, target_data(target, data.targets))
            for target in targets]
