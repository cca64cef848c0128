"""The runs one report.html shows, as (label, `RunData`) pairs: a run directory is read here, and
a run whose records name more than one `target` becomes one pair per target, so that an A/B run
reads like a comparison of its targets (the first target is the reference). Each run comes with
its `RunFigures`, which the end of a run shares with its summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence, Union

from loadlib.record_table import read_records_frame
from loadlib.report.contents import RunData
from loadlib.report.run_figures import RunFigures

RunInput = Union[RunFigures, RunData, str, Path]


def read_runs(pairs: Sequence[tuple[str, RunInput]]) -> list[tuple[str, RunFigures]]:
    """Each pair's run with its figures, a run directory read."""
    return [(label, figures_of(run)) for label, run in pairs]


def figures_of(run: RunInput) -> RunFigures:
    """The run's figures: those given, else a new `RunFigures` of the run (read where a directory)."""
    if isinstance(run, RunFigures):
        return run
    return RunFigures(run if isinstance(run, RunData) else read_run(run))


def as_runs(runs: Sequence[tuple[str, RunInput]]) -> list[tuple[str, RunData]]:
    """The runs as the page shows them: split by target where a run has several."""
    read = read_runs(runs)
    return [pair for label, figures in read for pair in by_target(label, figures, several_runs=len(read) > 1)]


def read_run(run_dir: str | Path) -> RunData:
    """A run directory's records and manifest ({} when it has none)."""
    path = Path(run_dir)
    manifest_file = path / "manifest.json"
    manifest = json.loads(manifest_file.read_text(encoding="utf-8")) if manifest_file.exists() else {}
    return RunData(read_records_frame(path), manifest, path)


def by_target(label: str, figures: RunFigures, several_runs: bool = False) -> list[tuple[str, RunData]]:
    """One pair per target of an A/B run (`RunFigures.targets`: its records, its manifest entry and
    server files), in the profile's order; the run itself when it has one target. With
    `several_runs` a target's label keeps its run's in front ("a/B")."""
    if not figures.targets:
        return [(label, figures.run)]
    return [(f"{label}/{target.label}" if several_runs else target.label, target.data) for target in figures.targets]
