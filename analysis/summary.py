"""The protocol summary in the thread's layout, as a dict (JSON schema of issue 8) and as text.

The live end-of-run summary and `python -m analysis report` both call these two functions on
the same raw records, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from analysis import text
from loadlib import metrics
from loadlib.prompts import SINGLE_STREAM_SCENARIOS

CASE_LABELS = {"same": "same prompt (radix hit)", "different": "different prompts"}
SCENARIO_LABELS = {"code": "code generation", "en_tech": "English technical",
                   "cn_chat": "Chinese chat", "cn_essay": "Chinese essay"}


@dataclass(frozen=True)
class ProtocolTables:
    """The four protocol tables of one run, computed once from its records frame."""

    single: pd.DataFrame  # index scenario
    concurrent: pd.DataFrame
    ttft: pd.DataFrame  # index cell
    failures: pd.DataFrame

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> "ProtocolTables":
        single = metrics.single_stream_table(df)
        single = single.reindex(sorted(single.index, key=_scenario_order))
        ttft = metrics.ttft_percentiles(df)
        ttft = ttft.reindex(sorted(ttft.index, key=cell_order))
        failures = metrics.failures_table(df)
        order = sorted(range(len(failures)), key=lambda i: (cell_order(failures["cell"].iat[i]),
                                                            failures["error"].iat[i]))
        return cls(single, metrics.concurrency_table(df, single), ttft,
                   failures.iloc[order].reset_index(drop=True))


def protocol_summary(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Issue 8's JSON schema, plus `ttft_percentiles` (by cell) and `failures` (by cell and reason).

    Missing figures (no successful rounds) are None.
    """
    return summary_dict(ProtocolTables.from_frame(metrics.records_frame(records)))


def summary_dict(tables: ProtocolTables) -> dict[str, Any]:
    single = tables.single[["decode_tps", "decode_min", "decode_max", "ttft_s", "tok_per_chunk", "n"]]
    concurrent = tables.concurrent[["concurrency", "case", "aggregate_tps", "min", "max", "n", "overlap"]]
    return {
        "single": {name: _plain_row(row) for name, row in single.to_dict("index").items()},
        "concurrent": [_plain_row(row) for row in concurrent.to_dict("records")],
        "ttft_percentiles": {cell: _plain_row(row) for cell, row in tables.ttft.to_dict("index").items()},
        "failures": [_plain_row(row) for row in tables.failures.to_dict("records")],
    }


def render_protocol_summary(records: Iterable[dict[str, Any]],
                            manifest: Mapping[str, Any] | None = None) -> str:
    """The summary as the thread's users post it: single stream, concurrency, TTFT, failures."""
    df = metrics.records_frame(records)
    return render_tables(ProtocolTables.from_frame(df), settings_line(df, manifest))


def render_tables(tables: ProtocolTables, heading: str) -> str:
    return "\n".join([
        heading, "",
        "Single stream (decode = (comp-1)/(total-ttft); tok/chunk on the stream-chunk basis)",
        text.table(single_text(tables.single), left=["scenario"]), "",
        "Concurrency (aggregate = sum(comp-1)/max(total-ttft) per round, mean over rounds; "
        "overlap = aggregate / single-stream code decode)",
        text.table(concurrent_text(tables.concurrent), left=["case"]), "",
        "TTFT percentiles (s, from raw records of successful requests)",
        text.table(ttft_text(tables.ttft), left=["cell"]), "",
        "Failures by reason (excluded from every figure above)",
        text.table(tables.failures.astype({"count": "int64"}).astype(str), left=["cell", "error"]),
    ])


def settings_line(df: pd.DataFrame, manifest: Mapping[str, Any] | None) -> str:
    """What was measured: model and target from the manifest, settings from the records."""
    manifest = manifest or {}
    parts = [f"{key} {manifest[key]}" for key in ("model", "target") if manifest.get(key)]
    max_tokens = sorted(df["max_tokens"].dropna().astype(int).unique())
    if max_tokens:
        parts.append("max_tokens " + "/".join(map(str, max_tokens)))
    parts.append("thinking " + ("ON" if df["thinking"].fillna(False).astype(bool).any() else "off"))
    if len(df):
        parts.append(f"{int(df['round'].max()) + 1} rounds")
    parts.append(f"{len(df)} requests, {int((~df['ok']).sum())} failed")
    return "uni-bench summary: " + ", ".join(parts)


def single_text(single: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "scenario": [f"{name} ({SCENARIO_LABELS[name]})" if name in SCENARIO_LABELS else name
                     for name in single.index],
        "decode t/s": single["decode_tps"].map(text.num).to_numpy(),
        "range": [text.span(lo, hi) for lo, hi in zip(single["decode_min"], single["decode_max"])],
        "TTFT s": single["ttft_s"].map(lambda v: text.num(v, 3)).to_numpy(),
        "tok/chunk": single["tok_per_chunk"].map(lambda v: text.num(v, 2)).to_numpy(),
        "n": single["n"].astype(str).to_numpy(),
    })


def concurrent_text(concurrent: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "N": concurrent["concurrency"].astype(str),
        "case": concurrent["case"].map(lambda c: CASE_LABELS.get(c, c)),
        "aggregate t/s": concurrent["aggregate_tps"].map(text.num),
        "range": [text.span(lo, hi) for lo, hi in zip(concurrent["min"], concurrent["max"])],
        "n": concurrent["n"].astype(str),
        "overlap": concurrent["overlap"].map(text.ratio),
    })


def ttft_text(ttft: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "cell": ttft.index.astype(str),
        **{col: ttft[col].map(lambda v: text.num(v, 3)).to_numpy() for col in ("p50", "p90", "p99")},
        "n": ttft["n"].astype(str).to_numpy(),
    })


def cell_order(cell: str) -> tuple[int, int, str]:
    """single first, then concurrency cells by N with same before different, then the rest."""
    if cell == metrics.SINGLE_CASE:
        return (0, 0, "")
    head, _, case = cell.partition("-")
    if head[:1] == "c" and head[1:].isdigit() and case in metrics.CONCURRENT_CASES:
        return (1, int(head[1:]), str(metrics.CONCURRENT_CASES.index(case)))
    return (2, 0, cell)


def _scenario_order(name: str) -> tuple[int, str]:
    known = SINGLE_STREAM_SCENARIOS
    return (known.index(name), "") if name in known else (len(known), name)


def _plain_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _plain(value) for key, value in row.items()}


def _plain(value: Any) -> Any:
    """JSON-ready scalar: numpy numbers become Python ones, NaN becomes None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value
