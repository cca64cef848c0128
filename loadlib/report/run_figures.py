"""One run's figures for every output that shows them, each computed once on first use: the end of a
run writes summary.txt and report.html from the same `RunFigures`, and `python -m analysis report`
reads the same sections.

A run of one server is its `RunData`. A run of several (an A/B run, a sweep) is split by server
once (`loadlib.report.targets`), and everything else reads that split: each target's sections as
a run of its own would have them, then the verdicts of every target against the first (the
profile's order); a sweep has its table of configurations (`loadlib.report.sweep`) and the
verdicts of each configuration that served against the first instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Sequence

import pandas as pd

from loadlib.figures.sweep import ConfigRun, compared, config_runs
from loadlib.figures.validity import validity_summary
from loadlib.report.contents import RunData
from loadlib.report.document import Section, rows
from loadlib.report.protocol import summary_dict
from loadlib.report.sweep import sweep_sections
from loadlib.report.targets import TargetRun, several, target_runs, target_sections
from loadlib.report.validity import judged
from loadlib.report.verdicts import judge


@dataclass
class RunFigures:
    """A run (`run`) and, where it had several servers, each server's figures as a run of its own."""

    run: RunData
    _verdicts: dict[tuple[str, ...], tuple[pd.DataFrame, Section]] = field(default_factory=dict, repr=False)

    @cached_property
    def servers(self) -> list[TargetRun]:
        """Every server the records name (`targets.target_runs`), goodput against the run's SLO."""
        return target_runs(self.run.df, self.run.manifest, self.run.run_dir, self.run.targets)

    @property
    def targets(self) -> list[TargetRun]:
        """The servers read as runs of their own: [] for a run of one server."""
        return several(self.servers)

    def verdicts(self, labels: Sequence[str]) -> tuple[pd.DataFrame, Section]:
        """The headline figures of the servers named and the verdicts of each against the first
        (`verdicts.judge`), judged once however many outputs show them (a sweep's summary judges
        the configurations that served, its page every one with records: mostly the same)."""
        key = tuple(labels)
        if key not in self._verdicts:
            by_label = {server.label: server for server in self.servers}
            sides = [by_label[label] for label in key]
            self._verdicts[key] = judge(sides, [side.data.slo for side in sides])
        return self._verdicts[key]

    @cached_property
    def configs(self) -> list[ConfigRun]:
        """A sweep's configurations in the order run, each with its server's figures; [] for a run
        that is not a sweep."""
        return config_runs({server.label: server.data for server in self.servers}, self.run.manifest.get("sweep") or [])

    @cached_property
    def sweep(self) -> tuple[list[Section], dict[str, Any]] | None:
        """A sweep's sections and `report --json` keys: its table and the logs of the configurations
        that did not serve (`sweep.sweep_sections`), then the verdicts of those that served against
        the first; None for a run that is not a sweep."""
        if not self.run.manifest.get("sweep"):
            return None
        sections, found = sweep_sections(self.configs, self.run.slo)
        served = [config.label for config in compared(self.configs)]
        if len(served) > 1:
            _figures, verdicts = self.verdicts(served)
            sections, found = [*sections, verdicts], {**found, "verdicts": rows(verdicts.data)}
        return sections, found

    def split_sections(self, report: bool = False) -> tuple[list[Section], dict[str, Any]] | None:
        """The sections and JSON keys of a run with several servers: each target's sections, a
        sweep's or else the targets' verdicts; with `report` also each target's tables and validity
        (`"targets"`, `"validity"`). None for a run of one server."""
        targets = self.targets
        if not targets and self.sweep is None:
            return None
        sections = target_sections(targets, report)
        if self.sweep is not None:
            more, found = self.sweep
            sections, found = [*sections, *more], dict(found)
        else:
            _figures, verdicts = self.verdicts([target.label for target in targets])
            sections, found = [*sections, verdicts], {"verdicts": rows(verdicts.data)}
        if report and targets:
            found["targets"] = {target.label: summary_dict(target.data.tables) for target in targets}
            found["validity"] = {target.label: validity_summary(target.data.checks) for target in targets
                                 if judged(target.path, target.manifest)}
        return sections, found
