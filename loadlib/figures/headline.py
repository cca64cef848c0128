"""The headline figures of one run as one long table, the common ground of compare and panorama.

One row per figure: its name, value, the min-max range over rounds where the figure has one,
whether it misleads (the protocol's aggregate and the overlaps made from it, in a cell whose
streams did not run together, `protocol_tables.concurrency_table`'s `misleads`, where the
wall-clock ("window") aggregate is the figure to read), and which way is `better`: "higher" for a
rate, "lower" for a time, None where neither is (tok/chunk: how the stream is cut, not a speed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from loadlib.figures import free_running
from loadlib.figures.goodput import Slo
from loadlib.figures.protocol_tables import CONCURRENT_CASES, ProtocolTables, concurrency_table, single_stream_table
from loadlib.scenarios.base import SINGLE

FIGURE_COLUMNS = ["figure", "value", "low", "high", "n", "misleads", "better"]
HIGHER, LOWER = "higher", "lower"  # which way a figure is better
PROTOCOL_AGGREGATE, WINDOW_AGGREGATE = "{} aggregate t/s (protocol)", "{} aggregate t/s (window)"


@dataclass(frozen=True)
class PublishedFigures:
    """Headline figures another tool published without the samples they came from (a vLLM result
    without its per-request arrays): shown beside the others, with no interval and no verdict."""

    figures: pd.DataFrame  # FIGURE_COLUMNS, low and high missing
    source: str  # what they are, in the words that say why they have no interval


def headline_figures(df: pd.DataFrame, slo: Slo, tables: ProtocolTables | None = None,
                     steady: pd.DataFrame | None = None) -> pd.DataFrame:
    """Figures in reading order: single stream, concurrency, steady state (goodput against `slo`),
    TTFT percentiles. `tables` and `steady` (the records' `ProtocolTables` and steady-state table
    against `slo`) where the caller has them already."""
    tables = ProtocolTables.from_frame(df) if tables is None else tables
    single, conc = tables.single, tables.concurrent
    parts = [
        _rows(single, "{} decode t/s", "decode_tps", "decode_min", "decode_max"),
        _rows(single, "{} TTFT s", "ttft_s", better=LOWER),
        _rows(single, "{} tok/chunk", "tok_per_chunk", better=None),
        _rows(single, "{} end-to-end t/s", "e2e_tps"),
        _rows(single, "{} forward rate /s", "forward_rate"),
    ]
    conc = conc.set_index("cell")
    misleads = conc["misleads"]
    parts += [
        _rows(conc, PROTOCOL_AGGREGATE, "aggregate_tps", "min", "max", misleads=misleads),
        _rows(conc, WINDOW_AGGREGATE, "window_tps", "window_min", "window_max"),
        _rows(conc, "{} per-stream decode t/s", "stream_decode_tps"),
        _rows(conc, "{} overlap vs per-stream decode x", "overlap_vs_stream_decode", misleads=misleads),
        _rows(conc, "{} overlap vs single-stream decode x", "overlap_vs_single_decode", misleads=misleads),
    ]
    steady = (free_running.steady_state_table(df, slo.ttft_s, slo.decode_tps) if steady is None else steady).set_index("cell")
    parts += [_rows(steady, "{} steady all-streams t/s", "decode_tps"),
              _rows(steady, "{} goodput req/s", "goodput_rps")]
    ttft = tables.ttft
    parts += [_rows(ttft, "{} TTFT p50 s", "p50", better=LOWER), _rows(ttft, "{} TTFT p99 s", "p99", better=LOWER)]
    return pd.concat(parts, ignore_index=True)


def _rows(table: pd.DataFrame, name: str, value: str, low: str | None = None, high: str | None = None,
          misleads: pd.Series | None = None, better: str | None = HIGHER) -> pd.DataFrame:
    n = table["n"] if "n" in table.columns else pd.Series(np.nan, index=table.index)
    return pd.DataFrame({
        "figure": [name.format(label) for label in table.index],
        "value": table[value].to_numpy(dtype="float64"),
        "low": table[low].to_numpy(dtype="float64") if low else np.nan,
        "high": table[high].to_numpy(dtype="float64") if high else np.nan,
        "n": n.to_numpy(dtype="float64"),
        "misleads": misleads.to_numpy(dtype=bool) if misleads is not None else np.zeros(len(table), dtype=bool),
        "better": better,
    }, columns=FIGURE_COLUMNS)


def cell_headline(df: pd.DataFrame) -> list[tuple[str, float]]:
    """The figures that say how one cell went, from its records alone, as the summary's tables
    compute them: a single-stream cell's decode t/s; an N-stream cell's aggregate t/s (over the
    rounds that count); a free-running cell's completions/s and TTFT p50 over its steady window.
    Each is (name, value), its unit the name's last word; none where nothing succeeded."""
    if df.empty:
        return []
    case = df["case"].iloc[0]
    if case == SINGLE:
        single = single_stream_table(df)
        return [] if single.empty else [("decode t/s", single["decode_tps"].iloc[0])]
    if case in CONCURRENT_CASES:
        row = concurrency_table(df).iloc[0]
        return [("aggregate t/s", row["aggregate_tps"])] if row["n"] else []
    cells = free_running.steady_cells(df)
    steady = free_running.steady_state_table(df, cells=cells)
    ttft = free_running.steady_percentiles(df, cells).query("figure == 'ttft_s'")
    return [("req/s", steady["requests_per_s"].iloc[0])] + [("TTFT p50 s", p50) for p50 in ttft["p50"]]


def leading_honest_figures(figures: pd.DataFrame) -> pd.DataFrame:
    """Several runs' `headline_figures` (a `run` column) reordered so that in every cell where the
    protocol's aggregate misleads on some run, the wall-clock aggregate comes first: the figure to
    read leads, the misleading one follows."""
    misled = figures.loc[figures["misleads"], "figure"]
    cells = {name[:-len(PROTOCOL_AGGREGATE.format(""))] for name in misled
             if name.endswith(PROTOCOL_AGGREGATE.format(""))}
    if not cells:
        return figures
    order = list(dict.fromkeys(figures["figure"]))
    for cell in cells:
        protocol, window = PROTOCOL_AGGREGATE.format(cell), WINDOW_AGGREGATE.format(cell)
        if protocol in order and window in order:
            order.remove(window)
            order.insert(order.index(protocol), window)
    rank = {figure: i for i, figure in enumerate(order)}
    return figures.iloc[sorted(range(len(figures)), key=lambda i: rank[figures["figure"].iat[i]])].reset_index(drop=True)
