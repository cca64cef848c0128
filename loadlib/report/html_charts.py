"""What report.html draws for one run, as JSON-ready columns: every aggregate comes from the
figure functions the text report uses (`loadlib.figures`), the page only draws it.

Per-request points are thinned to `MAX_POINTS` a run (every failure and the slowest TTFTs kept,
the rest an even sample in send order), so a 100,000-request run stays a few MB; no aggregate is
computed from the thinned points."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from loadlib.figures import free_running
from loadlib.figures.capacity import level_table
from loadlib.figures.protocol_tables import cell_order
from loadlib.report.document import rows
from loadlib.report.html_server import server_series

if TYPE_CHECKING:
    from loadlib.run_view import RunView

MAX_POINTS = 4000  # per-request points (and table rows) a run; more adds bytes, not information
SLOWEST = 200  # the highest TTFTs, always among them
SHARES = np.linspace(0, 100, 101)  # the distributions' percentiles
REQUEST_COLUMNS = ["request_id", "cell", "scenario", "round", "slot", "worker", "sent_s", "ttft_s", "total_s",
                   "decode_tps", "prompt_tokens", "cached_tokens", "completion_tokens", "chunks", "finish_reason",
                   "http_status", "error"]


def run_charts(run: RunView) -> dict[str, Any]:
    """Everything one run's charts need, on one clock: seconds since its first send."""
    df = run.records
    origin = float(df["sent_at"].min())
    return {
        "origin": origin,
        "timeline": columns(free_running.timeline(df).round(4)),
        "cells": cell_spans(df, origin),
        "requests": requests(df, origin),
        "server": server_series(run.scrapes, origin),
        "distributions": distributions(df),
        "aggregate": aggregate(run),
        "search": search_levels(run),
        "by_length": rows(free_running.by_length_table(df)),
    }


def columns(frame: pd.DataFrame) -> dict[str, list[Any]]:
    """A table as {column: values}, NaN as None: the compact shape for charts."""
    clean = frame.astype(object).where(frame.notna(), None)
    return {str(col): clean[col].tolist() for col in clean.columns}


def cell_spans(df: pd.DataFrame, origin: float) -> list[dict[str, Any]]:
    """Each cell's first send and last end, in the records' cell order: the timeline's boundaries."""
    spans = df.groupby("cell", observed=True).agg(start=("sent_at", "min"), end=("end_at", "max"))
    return [{"cell": str(cell), "start_s": round(float(spans.at[cell, "start"]) - origin, 3),
             "end_s": round(float(spans.at[cell, "end"]) - origin, 3)} for cell in cell_order(df) if cell in spans.index]


def thinned(df: pd.DataFrame, limit: int = MAX_POINTS) -> np.ndarray:
    """Row positions kept: every failure and the `SLOWEST` TTFTs, then an even sample, in send order."""
    if len(df) <= limit:
        return np.argsort(df["sent_at"].to_numpy(), kind="stable")
    failed = np.flatnonzero(~df["ok"].to_numpy())[: limit // 2]
    ttft = df["ttft_s"].to_numpy()
    slowest = np.argsort(np.nan_to_num(ttft, nan=-1.0))[::-1][:SLOWEST]
    even = np.linspace(0, len(df) - 1, max(limit - len(failed) - len(slowest), 0)).astype(int)
    keep = np.unique(np.concatenate([failed, slowest, even]))
    return keep[np.argsort(df["sent_at"].to_numpy()[keep], kind="stable")]


def requests(df: pd.DataFrame, origin: float) -> dict[str, Any]:
    """The kept requests' record fields (the hover and the table), and how many the run has."""
    kept = df.iloc[thinned(df)]
    frame = kept.assign(sent_s=kept["sent_at"] - origin).reindex(columns=REQUEST_COLUMNS)
    frame = frame.round({"sent_s": 4, "ttft_s": 4, "total_s": 4, "decode_tps": 2})
    return {"total": len(df), "shown": len(frame), "columns": columns(frame)}


def distributions(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Per cell, TTFT and decode t/s at each percentile of `SHARES` (linear interpolation) over
    every successful request: exact, from all the records."""
    ok = df[df["ok"]]
    found = []
    for cell in cell_order(df):
        own = ok[ok["cell"] == cell]
        entry: dict[str, Any] = {"cell": str(cell), "n": len(own)}
        for figure in ("ttft_s", "decode_tps"):
            values = own[figure].dropna().to_numpy()
            entry[figure] = np.round(np.percentile(values, SHARES), 5).tolist() if len(values) else None
        found.append(entry)
    return found


def aggregate(run: RunView) -> dict[str, Any]:
    """Aggregate t/s against concurrency: the protocol's cells (`ProtocolTables.concurrent`, with
    the single-stream code decode at N = 1) and the free-running cells' steady state."""
    tables = run.tables
    concurrent = tables.concurrent.assign(kind=tables.concurrent["cell"].map(tables.kinds))
    single = tables.single["decode_tps"].get("code", np.nan) if not tables.single.empty else np.nan
    steady = run.steady[["cell", "in_flight", "decode_tps"]] if not run.steady.empty else run.steady
    return {"concurrent": rows(concurrent[["cell", "kind", "concurrency", "aggregate_tps", "min", "max"]]),
            "single_code_tps": None if pd.isna(single) else float(single),
            "steady": rows(steady)}


def search_levels(run: RunView) -> dict[str, Any] | None:
    """A capacity search's levels (`level_table`) with the verdict the search gave each."""
    search = run.manifest.get("search")
    if not search or not search.get("levels"):
        return None
    levels = rows(level_table(run.records, search, run.steady_cells))
    for row, level in zip(levels, search["levels"]):
        row["verdict"] = level.get("verdict")
    return {"variable": search.get("variable"), "levels": levels, "result": {
        key: value for key, value in search.items() if key not in ("levels",)}}
