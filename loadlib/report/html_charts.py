"""What report.html draws: every declared chart (`loadlib.report.charts`) over the page's runs, and
each run's requests for its table and for the record a hovered point shows.

Per-request points are thinned to `MAX_POINTS` a run (every failure and the slowest TTFTs kept,
the rest an even sample in send order), so a 100,000-request run stays a few MB; the charts draw
their points of one request each from the same kept requests, so a point names its row of the
table. No aggregate is computed from the thinned points."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd

from loadlib.report.charts import ChartRun, drawn_charts, figures

if TYPE_CHECKING:
    from loadlib.run_view import RunView

MAX_POINTS = 4000  # per-request points (and table rows) a run; more adds bytes, not information
SLOWEST = 200  # the highest TTFTs, always among them
REQUEST_COLUMNS = ["request_id", "cell", "scenario", "round", "slot", "worker", "sent_s", "ttft_s", "total_s",
                   "decode_tps", "prompt_tokens", "cached_tokens", "completion_tokens", "chunks", "finish_reason",
                   "http_status", "error"]


def page_charts(shown: Sequence[RunView], given: Sequence[RunView]) -> list[dict[str, Any]]:
    """Every chart the page's runs (`shown`: split by server) have data for, a whole-run chart (a
    sweep's) over the runs as `given`, by figure (`charts.figures`); a request's point from the
    run's kept requests."""
    return figures(drawn_charts([ChartRun(view, sample=kept(view.records)) for view in shown],
                                [ChartRun(view) for view in given]))


def columns(frame: pd.DataFrame) -> dict[str, list[Any]]:
    """A table as {column: values}, NaN as None: the compact shape for the requests' table."""
    clean = frame.astype(object).where(frame.notna(), None)
    return {str(col): clean[col].tolist() for col in clean.columns}


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


def kept(df: pd.DataFrame) -> pd.DataFrame:
    """The requests the page shows (`thinned`), in send order, indexed by their row in its table."""
    return df.iloc[thinned(df)].reset_index(drop=True)


def requests(df: pd.DataFrame) -> dict[str, Any]:
    """The kept requests' record fields (the hover and the table), and how many the run has."""
    shown = kept(df)
    frame = shown.assign(sent_s=shown["sent_at"] - df["sent_at"].min()).reindex(columns=REQUEST_COLUMNS)
    frame = frame.round({"sent_s": 4, "ttft_s": 4, "total_s": 4, "decode_tps": 2})
    return {"total": len(df), "shown": len(frame), "columns": columns(frame)}
