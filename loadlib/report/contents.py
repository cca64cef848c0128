"""Every section of a run's summary and report, in reading order: the one list that both the
end-of-run summary (`loadlib.report.summary`) and `python -m analysis report` render.

An entry names the function that builds its section(s) from a run's `RunData`, and when it is
shown: `report_only` entries come after the summary's in the report alone, `when` leaves an entry
out of runs it does not fit. A new report figure is a table function in `loadlib/figures/`, a
section function that labels it (`loadlib/report/sections.py`) and one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from loadlib.figures import acceptance, energy, free_running, protocol_tables, scenario_tables
from loadlib.figures.capacity import level_table
from loadlib.figures.columns import distinct
from loadlib.figures.goodput import GoodputSlo, goodput_slo
from loadlib.figures.validity import Check
from loadlib.record_table import read_unmeasured_frame
from loadlib.report import protocol as summary
from loadlib.report import sections, server_view
from loadlib.report.document import Section
from loadlib.report.lost_workers import lost_workers_section
from loadlib.report.validity import checks_section, judged, run_checks
from loadlib.report.search import search_section
from loadlib.scenarios.base import LONG_CONTEXT_KIND
from loadlib.truth import energy as gpu_energy
from loadlib.truth.scrape import read_scrapes


@dataclass
class RunData:
    """What the sections are built from: the records frame and the run's manifest; the run
    directory where the server's scrapes may be (`run_dir`);
    tables several sections share are computed once, on first use."""

    df: pd.DataFrame
    manifest: Mapping[str, Any]
    run_dir: Path | None = None
    targets: GoodputSlo | None = None  # None: the profile's, else the defaults (`goodput_slo`)
    # A server of a run of several (`loadlib.report.targets`): its label in the run's journal,
    # which is kept in `journal_dir` (its own files are in `run_dir`)
    label: str | None = None
    journal_dir: Path | None = None

    @cached_property
    def slo(self) -> GoodputSlo:
        return self.targets or goodput_slo(self.manifest)

    @cached_property
    def tables(self) -> protocol_tables.ProtocolTables:
        return protocol_tables.ProtocolTables.from_frame(self.df)

    @cached_property
    def steady_cells(self) -> list[free_running.SteadyCell]:
        return free_running.steady_cells(self.df)

    @cached_property
    def steady(self) -> pd.DataFrame:
        return free_running.steady_state_table(self.df, self.slo.ttft_s, self.slo.decode_tps, self.steady_cells)

    @cached_property
    def unmeasured(self) -> pd.DataFrame | None:
        """The run's unmeasured requests (warm-up, priming, calibration; a server's own in a run of
        several), which its server counted too (`read_unmeasured_frame`); None without any."""
        journal = self.journal_dir or self.run_dir
        found = read_unmeasured_frame(journal) if journal is not None else None
        if found is None or self.label is None:
            return found
        own = found[found["target"] == self.label].reset_index(drop=True)
        return own if len(own) else None

    @cached_property
    def checks(self) -> list[Check]:
        """Each cell's validity checks (`loadlib.report.validity.run_checks`), for its section and JSON."""
        return run_checks(self.run_dir, self.df, self.manifest, self.steady_cells, self.unmeasured,
                          self.tables.concurrent)

    @cached_property
    def long_context(self) -> bool:
        """Whether the run has long-context scenarios, whose prefill per size the summary shows."""
        return any(str(name).startswith(LONG_CONTEXT_KIND) for name in distinct(self.df["scenario"]))


@dataclass(frozen=True)
class Entry:
    """One place in the contents: what builds its section(s), and when they are shown."""

    build: Callable[[RunData], Section | list[Section]]
    report_only: bool = False
    when: Callable[[RunData], bool] = lambda run: True


def _ran_protocol(run: RunData) -> bool:
    return any(case in summary.PROTOCOL_CASES for case in distinct(run.df["case"]))


def _prefill(run: RunData) -> Section:
    return sections.prefill(protocol_tables.prefill_table(run.df))


def _energy(run: RunData) -> Section:
    scrapes = read_scrapes(run.run_dir, gpu_energy.NAMES_READ, sources=(gpu_energy.GPU_SOURCE,))
    return sections.energy_section(energy.energy_table(scrapes, run.df))


CONTENTS: list[Entry] = [
    Entry(lambda run: search_section(run.manifest, level_table(run.df, run.manifest.get("search"), run.steady_cells))),
    Entry(lambda run: summary.protocol_sections(run.tables), when=_ran_protocol),
    Entry(lambda run: sections.steady_state(run.steady, run.slo)),
    Entry(lambda run: sections.streams_held(free_running.streams_held(run.steady, run.df))),
    Entry(lambda run: sections.trace_replay(free_running.trace_replay(run.df), run.manifest.get("trace_skipped"))),
    Entry(lambda run: sections.steady_percentiles(free_running.steady_percentiles(run.df, run.steady_cells))),
    Entry(lambda run: summary.failures_section(run.tables.failures)),
    Entry(lambda run: sections.exclusions_section(protocol_tables.exclusions_table(run.df))),
    Entry(_prefill, when=lambda run: run.long_context),
    Entry(lambda run: sections.cache_section(scenario_tables.cache_state_table(run.df))),
    Entry(lambda run: sections.turn_section(scenario_tables.turn_table(run.df))),
    Entry(lambda run: sections.client_watch_section(run.manifest)),
    Entry(lambda run: lost_workers_section(run.manifest)),
    Entry(lambda run: server_view.server_sections(run.run_dir, run.df, run.manifest),
          when=lambda run: run.run_dir is not None),
    Entry(lambda run: sections.acceptance_section(acceptance.acceptance_table(run.df))),
    Entry(_energy, when=lambda run: run.run_dir is not None),
    Entry(lambda run: checks_section(run.checks),
          when=lambda run: judged(run.run_dir, run.manifest)),
    # the report's own, after the summary
    Entry(lambda run: summary.single_details(run.tables), report_only=True),
    Entry(lambda run: summary.concurrency_details(run.tables), report_only=True),
    Entry(lambda run: sections.by_length(free_running.by_length_table(run.df)), report_only=True),
    Entry(_prefill, report_only=True, when=lambda run: not run.long_context),
]


def build_sections(run: RunData, report: bool = False) -> list[Section]:
    """The summary's sections of the run in order, and with `report` the report's own after them."""
    found: list[Section] = []
    for entry in CONTENTS:
        if (report or not entry.report_only) and entry.when(run):
            built = entry.build(run)
            found += built if isinstance(built, list) else [built]
    return found
