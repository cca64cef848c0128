"""A server-configuration sweep as one table: per configuration, what its server did (its status
and log tail, from the manifest's `sweep` list) and the figures a sweep is run to compare, each
computed by the function the report already uses for it:

- capacity within the SLO: the capacity search's best level (`search["best"]`, in users or
  req/s) and the requests/s delivered there (`capacity.level_table`), where the configuration
  ran a search (its sweep entry's `search`, shaped as the manifest's);
- decode: per-request decode t/s, p50 with its 95 % interval (`uncertainty.percentile_uncertainty`),
  and the steady-state decode t/s of all streams of its busiest free-running cell
  (`free_running.steady_state_table`);
- TTFT p50 and p90 with their intervals (`protocol_tables.ttft_percentiles_ci`);
- SLO met: the share of the steady windows' requests that met the goodput SLO (the steady-state
  table's attainment, pooled over the cells by their requests);
- accept length: the client's tok/chunk (`server_figures.client_tok_per_chunk`, stream-chunk
  basis) and, where the server's /metrics were scraped, its own accept length per verify step;
  where the server gave its acceptance by draft position, the expected tokens per verify step at
  draft lengths 1..N over the configuration's cells (`acceptance.pooled_expected_tokens`: an
  estimate of acceptance at shorter drafts, not of speed), so that a sweep over draft tokens can be
  read against it;
- energy, where the GPUs were read (`--gpu-power`): completion tokens per joule and joules per
  token over its cells, every GPU together (`energy.pooled`);
- warnings: the known performance warnings in its server's log (`loadlib.sweep.known_warnings`,
  read by the sweep into its entry).

A configuration's records, and the figures of them its own sections show too (its steady-state
table, its cells' steady windows), are those its report computed once for its server
(`loadlib.run_view.RunView.servers`): the sweep reads them, it does not split or measure again. Pure
functions; `loadlib.report.sweep` words them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd

from loadlib.figures import acceptance, energy, free_running, protocol_tables
from loadlib.figures.capacity import level_table
from loadlib.figures.uncertainty import percentile_uncertainty
from loadlib.record_table import records_frame
from loadlib.sweep.launch import OK
from loadlib.truth import server_figures

SWEEP_COLUMNS = ["label", "config", "status", "n", "failed", "capacity", "capacity_variable", "capacity_rps",
                 "decode_p50_tps", "decode_p50_ci_low", "decode_p50_ci_high", "steady_decode_tps",
                 "ttft_p50_s", "ttft_p50_ci_low", "ttft_p50_ci_high", "ttft_p90_s", "ttft_p90_ci_low",
                 "ttft_p90_ci_high", "slo_met", "tok_per_chunk", "accept_length", "expected_tokens", "tokens_per_joule",
                 "joules_per_token", "warnings", "log_tail"]
FIGURES = SWEEP_COLUMNS[5:-2]  # NaN where a configuration has none


class Measured(Protocol):
    """What a configuration's server measured, as its view holds it (`loadlib.run_view.RunView`):
    its records, their steady-state table against the sweep's SLO and the cells' steady windows, and
    its server's parsed scrapes (none without), its speculative-decoding counters per cell and its
    GPUs' energy per cell (no rows without a GPU meter)."""

    records: pd.DataFrame
    steady: pd.DataFrame
    steady_cells: list[free_running.SteadyCell]
    scrapes: list[dict[str, Any]]
    spec_counters: list[server_figures.SpecCounters]
    energy: pd.DataFrame


@dataclass(frozen=True)
class ConfigRun:
    """One configuration of a sweep, shaped like a run for the verdicts (`label`, `records`),
    with its sweep entry (`config`, `status`, `log_tail`, and `search` where it ran one) and what
    it measured (None: it has no records)."""

    label: str
    entry: Mapping[str, Any]
    measured: Measured | None = None

    @property
    def status(self) -> str:
        return str(self.entry.get("status") or OK)

    @property
    def records(self) -> pd.DataFrame:
        return self.measured.records if self.measured is not None else records_frame([])


def config_runs(measured: Mapping[str, Measured], entries: Sequence[Mapping[str, Any]]) -> list[ConfigRun]:
    """Each configuration in the sweep's order (`entries`, the manifest's `sweep`), then any server
    of the records (`measured`, by label) that no entry names; each with what its server measured."""
    listed = {str(entry["label"]): entry for entry in entries}
    labels = [*listed, *sorted(str(label) for label in measured if label not in listed)]
    return [ConfigRun(label, listed.get(label, {"label": label}), measured.get(label)) for label in labels]


def compared(runs: Iterable[ConfigRun]) -> list[ConfigRun]:
    """The configurations the verdicts compare: those that served (`ok`) and have records; the
    first of them is the one every other is judged against."""
    return [run for run in runs if run.status == OK and len(run.records)]


def sweep_table(runs: Sequence[ConfigRun]) -> pd.DataFrame:
    """One row per configuration, `SWEEP_COLUMNS` (see the module's doc): a configuration that did
    not serve has its status, its log's warnings and tail, and no figures."""
    rows = [{"label": run.label, "config": dict(run.entry.get("config") or {}), "status": run.status,
             **config_figures(run), "warnings": list(run.entry.get("warnings") or []),
             "log_tail": list(run.entry.get("log_tail") or [])}
            for run in runs]
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)


def config_figures(run: ConfigRun) -> dict[str, Any]:
    """The figures of one configuration (NaN where it has none)."""
    df, measured = run.records, run.measured
    figures: dict[str, Any] = {name: math.nan for name in FIGURES}
    figures.update(n=len(df), failed=int((~df["ok"]).sum()) if len(df) else 0, capacity_variable=None)
    cells = measured.steady_cells if measured is not None else None
    figures.update(capacity_figures(df, run.entry.get("search"), cells))
    if measured is None:
        return figures
    decode = df.loc[df["ok"], "decode_tps"].dropna().to_numpy(dtype="float64")
    if decode.size:
        ci = percentile_uncertainty(decode, [0.5])
        figures.update(decode_p50_tps=float(np.quantile(decode, 0.5)), decode_p50_ci_low=ci["p50_ci_low"],
                       decode_p50_ci_high=ci["p50_ci_high"])
    ttft = protocol_tables.ttft_percentiles_ci(df, by="target")  # one group: the configuration's label
    if not ttft.empty:
        row = ttft.iloc[0]
        figures.update({f"ttft_{p}_s": row[p] for p in ("p50", "p90")})
        figures.update({f"ttft_{p}_ci_{end}": row[f"{p}_ci_{end}"] for p in ("p50", "p90") for end in ("low", "high")})
    steady = measured.steady
    if not steady.empty:
        figures["steady_decode_tps"] = float(steady["decode_tps"].max())
        weights = steady["n"].to_numpy(dtype="float64")
        if weights.sum() > 0:
            figures["slo_met"] = float(np.nansum(steady["slo_attainment"].to_numpy(dtype="float64") * weights)
                                       / weights.sum())
    tok_per_chunk = server_figures.client_tok_per_chunk(df)
    figures["tok_per_chunk"] = math.nan if tok_per_chunk is None else tok_per_chunk
    figures["accept_length"] = server_accept_length(measured.scrapes, df)
    expected = acceptance.pooled_expected_tokens(acceptance.position_table(df, measured.spec_counters))
    figures["expected_tokens"] = expected or math.nan
    figures.update(energy.pooled(measured.energy))
    return figures


def capacity_figures(df: pd.DataFrame, search: Mapping[str, Any] | None,
                     cells: list[free_running.SteadyCell] | None = None) -> dict[str, Any]:
    """A configuration's capacity search: its best level (`capacity`, in `capacity_variable`:
    users, rate or sessions) and the req/s delivered there (`capacity_rps`); none without a search. `cells`:
    the records' steady windows, where known (`level_table`)."""
    if not search or search.get("best") is None:
        return {}
    levels = level_table(df, search, cells)
    at_best = levels.loc[levels["value"] == search["best"], "delivered_rps"]
    return {"capacity": float(search["best"]), "capacity_variable": search.get("variable"),
            "capacity_rps": float(at_best.iloc[-1]) if len(at_best) else math.nan}


def sweep_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The table as `report --json`'s `"sweep"`: `{"config": {...}, "label", "status", ...figures...,
    "warnings": [...], "log_tail": [...]}` per configuration, NaN as None."""
    first = ["config", "label", "status"]
    ordered = table[[*first, *(name for name in table.columns if name not in first)]]
    return ordered.astype(object).where(ordered.notna(), None).to_dict("records")


def server_accept_length(scrapes: list[dict[str, Any]], records: pd.DataFrame) -> float:
    """The server's accept length over the configuration's cells, from its parsed scrapes
    (`pooled_accept_length`); NaN without scrapes."""
    cells = set(records["cell"])
    scraped = server_figures.server_cells(scrapes, records)
    return pooled_accept_length([cell for cell in scraped if cell.span.cell in cells])


def pooled_accept_length(cells: Iterable[server_figures.ServerCell]) -> float:
    """Tokens per verify step over several cells, as the server's counters would pool them:
    Σ tokens / Σ steps, a cell's steps being its generated tokens / its accept length (so a cell
    weighs by its steps, not 1 each). NaN without a cell whose accept length and tokens are known."""
    known = [(cell.generated_tokens, cell.accept_length) for cell in cells if cell.accept_length and cell.generated_tokens]
    steps = sum(tokens / accept for tokens, accept in known)
    return sum(tokens for tokens, _accept in known) / steps if steps else math.nan
