"""Every section of a run's summary and report, in reading order: the one list that both the
end-of-run summary (`loadlib.report.summary`) and `python -m analysis report` render.

An entry names the function that builds its section(s) from a run's view (`loadlib.run_view.RunView`), and when it is
shown: `report_only` entries come after the summary's in the report alone, `when` leaves an entry
out of runs it does not fit. A new report figure is a table function in `loadlib/figures/`, a
section function that labels it (`loadlib/report/sections.py`) and one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

from loadlib.figures import acceptance, energy, free_running, protocol_tables, scenario_tables, sessions
from loadlib.figures.capacity import level_table
from loadlib.figures.columns import distinct, isin
from loadlib.figures.sweep import compared
from loadlib.figures.validity import validity_summary
from loadlib.report import protocol as summary
from loadlib.report import sections, server_view
from loadlib.report.document import Section, rows
from loadlib.report.lost_workers import lost_workers_section
from loadlib.report.search import search_section
from loadlib.report.sweep import sweep_sections
from loadlib.report.validity import checks_section
from loadlib.scenarios.base import LONG_CONTEXT_KIND
from loadlib.truth import server_figures

if TYPE_CHECKING:
    from loadlib.run_view import RunView


def long_context_run(run: RunView) -> bool:
    """Whether the run has long-context scenarios (its records' `kind`), whose prefill per size the
    summary shows."""
    return bool(isin(run.records["kind"], (LONG_CONTEXT_KIND,)).any())


@dataclass(frozen=True)
class Entry:
    """One place in the contents: what builds its section(s), and when they are shown."""

    build: Callable[[RunView], Section | list[Section]]
    report_only: bool = False
    when: Callable[[RunView], bool] = lambda run: True


def _ran_protocol(run: RunView) -> bool:
    return any(case in summary.PROTOCOL_CASES for case in distinct(run.records["case"]))


def _prefill(run: RunView) -> Section:
    return sections.prefill(protocol_tables.prefill_table(run.records))


def session_cells(run: RunView) -> pd.DataFrame:
    """The agent sessions' cells of a run of one server (`figures.sessions.cell_table`), hash blocks
    as the run noted them, its prefix-cache counters for the cells whose turns carry no cached tokens."""
    block = run.manifest.get("agent_trace_block_size") or sessions.DEFAULT_BLOCK_TOKENS
    return run.once("session_cells", lambda: sessions.cell_table(
        run.records, block, run.slo, sessions.counted_hits(server_figures.prefix_counters(run.scrapes))))


CONTENTS: list[Entry] = [
    Entry(lambda run: search_section(run.manifest, level_table(run.records, run.manifest.get("search"),
                                                               run.steady_cells))),
    Entry(lambda run: summary.protocol_sections(run.tables), when=_ran_protocol),
    Entry(lambda run: sections.steady_state(run.steady, run.slo)),
    Entry(lambda run: sections.streams_held(free_running.streams_held(run.steady, run.records))),
    Entry(lambda run: sections.trace_replay(free_running.trace_replay(run.records), run.manifest.get("trace_skipped"))),
    Entry(lambda run: sections.steady_percentiles(free_running.steady_percentiles(run.records, run.steady_cells))),
    Entry(lambda run: summary.failures_section(run.tables.failures)),
    Entry(lambda run: sections.exclusions_section(protocol_tables.exclusions_table(run.records))),
    Entry(_prefill, when=long_context_run),
    Entry(lambda run: sections.sessions_section(session_cells(run), run.slo)),
    Entry(lambda run: sections.session_context_section(sessions.context_table(run.records))),
    Entry(lambda run: sections.cache_section(scenario_tables.cache_state_table(run.records))),
    Entry(lambda run: sections.turn_section(scenario_tables.turn_table(run.records))),
    Entry(lambda run: sections.client_watch_section(run.manifest)),
    Entry(lambda run: lost_workers_section(run.manifest)),
    Entry(lambda run: server_view.server_sections(run.scrapes, run.records, run.manifest),
          when=lambda run: run.path is not None),
    Entry(lambda run: sections.acceptance_section(acceptance.acceptance_table(run.records))),
    Entry(lambda run: sections.position_section(acceptance.curves(run.positions))),
    Entry(lambda run: sections.energy_section(run.energy), when=lambda run: run.path is not None),
    Entry(lambda run: checks_section(run.checks), when=lambda run: run.judged),
    # the report's own, after the summary
    Entry(lambda run: summary.single_details(run.tables), report_only=True),
    Entry(lambda run: summary.concurrency_details(run.tables), report_only=True),
    Entry(lambda run: sections.by_length(free_running.by_length_table(run.records)), report_only=True),
    Entry(lambda run: sections.session_list_section(sessions.sessions_table(run.records)), report_only=True),
    Entry(_prefill, report_only=True, when=lambda run: not long_context_run(run)),
]


def build_sections(run: RunView, report: bool = False) -> list[Section]:
    """The summary's sections of the run in order, and with `report` the report's own after them;
    each entry built once per view, whichever outputs show it."""
    found: list[Section] = []
    for place, entry in enumerate(CONTENTS):
        if (report or not entry.report_only) and entry.when(run):
            built = run.once(("contents", place), lambda: entry.build(run))
            found += built if isinstance(built, list) else [built]
    return found


def run_sections(run: RunView, report: bool = False) -> tuple[list[Section], dict[str, Any]]:
    """The sections of a run and `report --json`'s keys beside its tables. A run of one server: its
    sections (`build_sections`) and, with `report`, its protocol's keys (`summary_dict`) and validity.
    A run of several servers (an A/B run, a sweep): each target's sections as a run of its own has
    them, then a sweep's table and the verdicts of each configuration that served against the
    first, or else the targets' verdicts against the first (the profile's order); with `report`
    also each target's protocol keys and validity (`"targets"`, `"validity"`). With `report`, the
    GPUs' energy per cell (`"energy"`, `figures.energy.json_rows`; each row with its `target` in a
    run of several servers)."""
    targets = run.targets
    sweep = sweep_of(run)
    if not targets and sweep is None:
        found: dict[str, Any] = {}
        if report:
            found |= summary.summary_dict(run.tables) | {"energy": energy.json_rows(run.energy)}
            if run.judged:
                found["validity"] = validity_summary(run.checks)
        return build_sections(run, report), with_sessions(run, found, report)
    sections_ = target_sections(targets, report)
    if sweep is not None:
        more, found = sweep
        sections_, found = [*sections_, *more], dict(found)
    else:
        _figures, verdicts = run.verdicts([target.label for target in targets])
        sections_, found = [*sections_, verdicts], {"verdicts": rows(verdicts.data)}
    if report and targets:
        found["targets"] = {target.label: summary.summary_dict(target.tables) for target in targets}
        found["energy"] = [row for target in targets for row in energy.json_rows(target.energy, target=target.label)]
        found["validity"] = {target.label: validity_summary(target.checks) for target in targets if target.judged}
    return sections_, with_sessions(run, found, report)


def with_sessions(run: RunView, found: dict[str, Any], report: bool) -> dict[str, Any]:
    """`report --json`'s "sessions": the agent sessions' cells, each server's as a run of its own
    has them, where the run has any."""
    if not report:
        return found
    found_rows = [row for server in run.servers or [run] for row in rows(session_cells(server))]
    return {**found, "sessions": found_rows} if found_rows else found


def sweep_of(run: RunView) -> tuple[list[Section], dict[str, Any]] | None:
    """A sweep's sections and `report --json` keys: its table and the logs of the configurations
    that did not serve (`sweep.sweep_sections`), then the verdicts of those that served against
    the first; None for a run that is not a sweep."""
    if run.sweep_table is None:
        return None

    def make() -> tuple[list[Section], dict[str, Any]]:
        found_sections, found = sweep_sections(run.sweep_table, run.slo)
        served = [config.label for config in compared(run.configs)]
        if len(served) > 1:
            _figures, verdicts = run.verdicts(served)
            found_sections, found = [*found_sections, verdicts], {**found, "verdicts": rows(verdicts.data)}
        return found_sections, found

    return run.once("sweep", make)


def target_sections(targets: list[RunView], report: bool = False) -> list[Section]:
    """Each target's sections as a run of its own has them (`build_sections`), titles and keys
    prefixed with its label (and URL)."""
    found: list[Section] = []
    for target in targets:
        url = target.manifest.get("target", {}).get("url")
        found += [replace(section, key=f"{target.label}.{section.key}",
                          title=f"[{target.label}{f' {url}' if url else ''}] {section.title}")
                  for section in build_sections(target, report)]
    return found
