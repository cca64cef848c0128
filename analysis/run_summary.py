"""The end-of-run summary: what the session prints and saves as `summary.txt`, and what
`python -m analysis report` prints right after the manifest.

Its text depends only on the records, the run's final manifest and the server's scrapes in the
run directory, so the live summary and the report of the same run directory agree to the
character. A capacity search's result comes first; the protocol's tables appear when the
protocol's cells ran, the steady state when free-running cells did; what a profile's scenarios add (prefill per size, cache state, turns),
the client's own limits and the server's view follow when the run has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from analysis import sections, server_view
from analysis.document import Document
from analysis.formats import console
from analysis.summary import PROTOCOL_CASES, ProtocolTables, failures_section, protocol_sections, settings_line
from loadlib.figures import free_running, protocol_tables
from loadlib.records import records_frame

LONG_CONTEXT = "long-context"  # scenario names of the long-context kind start with it


@dataclass(frozen=True)
class GoodputSlo:
    """Goodput targets: a request counts when it meets both."""

    ttft_s: float = 2.0
    decode_tps: float = 20.0


def goodput_slo(manifest: Mapping[str, Any], ttft_s: float | None = None,
                decode_tps: float | None = None) -> GoodputSlo:
    """The given targets, else the profile's `[slo]` as the manifest recorded it, else 2 s and 20 t/s."""
    profile = (manifest.get("profile") or {}).get("slo") or {}
    default = GoodputSlo()
    return GoodputSlo(ttft_s or profile.get("ttft_s") or default.ttft_s,
                      decode_tps or profile.get("decode_tps") or default.decode_tps)


def render_summary(records: Iterable[dict[str, Any]], manifest: Mapping[str, Any] | None = None,
                   run_dir: str | Path | None = None) -> str:
    """The summary's text from the records (dicts) and the final manifest; with `run_dir`, also
    the server's view from its `metrics.jsonl`."""
    return console.render(summary_document(records_frame(records), manifest or {}, run_dir))


def summary_document(df: pd.DataFrame, manifest: Mapping[str, Any], run_dir: str | Path | None = None,
                     slo: GoodputSlo | None = None, tables: ProtocolTables | None = None) -> Document:
    """The summary as a document (no manifest block): the settings line, then its sections.

    `slo` defaults to `goodput_slo(manifest)`; `tables` saves recomputing them for a caller that
    has them.
    """
    slo = slo or goodput_slo(manifest)
    tables = tables or ProtocolTables.from_frame(df)
    found = [sections.search_section(manifest)]
    found += protocol_sections(tables) if df["case"].isin(PROTOCOL_CASES).any() else []
    steady = free_running.steady_cells(df)
    steady_table = free_running.steady_state_table(df, slo.ttft_s, slo.decode_tps, steady)
    found += [sections.steady_state(steady_table, slo.ttft_s, slo.decode_tps),
              sections.streams_held(free_running.streams_held(steady_table, df)),
              sections.trace_replay(free_running.trace_replay(df), manifest.get("trace_skipped")),
              sections.steady_percentiles(free_running.steady_percentiles(df, steady)),
              failures_section(tables.failures), sections.exclusions_section(protocol_tables.exclusions_table(df))]
    if any(str(name).startswith(LONG_CONTEXT) for name in df["scenario"].unique()):
        found.append(sections.prefill(protocol_tables.prefill_table(df)))
    found += [sections.cache_section(df), sections.turn_section(df), sections.client_watch_section(manifest)]
    if run_dir is not None:
        found += server_view.server_sections(Path(run_dir), df, manifest)
    return Document(settings_line(df, manifest), found)
