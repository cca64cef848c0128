"""The protocol's figures, defined once (see PROTOCOL.md, "uni-bench").

Per-request formulas are plain arithmetic, so the same function serves a float (the live path,
one request at a time) and a pandas Series (the post-processor, a whole run at once). Table
functions take the DataFrame of records (`records_frame`) and return DataFrames.

Validity is decided once, by the client: a request that has no first token, no usage, or
`completion_tokens <= 1` carries an `error`, and only records without one enter the figures.
"""

from __future__ import annotations

from typing import Any, Iterable, TypeVar

import numpy as np
import pandas as pd

Num = TypeVar("Num", float, pd.Series)

RECORD_COLUMNS = [
    "request_id", "scenario", "cell", "concurrency", "case", "round", "slot", "worker", "user",
    "sent_at", "ttft_s", "total_s", "last_chunk_s", "completion_tokens", "prompt_tokens",
    "cached_tokens", "chunks", "finish_reason", "http_status", "error", "output_sha",
    "max_tokens", "thinking",
]
PERCENTILES = (0.5, 0.9, 0.99)
# The protocol's measurement cases; any other `case` is a free-running mode (steady-state figures).
SINGLE_CASE = "single"
CONCURRENT_CASES = ("same", "different")


# --- per request -------------------------------------------------------------------------------

def decode_tps(completion_tokens: Num, ttft_s: Num, total_s: Num) -> Num:
    """Decode rate in tokens/s: `(comp - 1) / (total - ttft)`.

    The first token is excluded because it arrives at `ttft`; the rest arrive between `ttft`
    and the end of the stream.
    """
    return (completion_tokens - 1) / (total_s - ttft_s)


def tok_per_chunk(completion_tokens: Num, chunks: Num) -> Num:
    """`comp / non-empty chunks`: the client-side ("stream-chunk") accept length estimate.

    Not the server's verify-step accept length; never report the two as one figure.
    """
    return completion_tokens / chunks


def end_to_end_tps(completion_tokens: Num, total_s: Num) -> Num:
    """`comp / total`: output rate with prefill and queueing included."""
    return completion_tokens / total_s


def prefill_tps(prompt_tokens: Num, ttft_s: Num) -> Num:
    """Cold prefill rate `prompt_tokens / ttft` (meaningful only without a prefix-cache hit)."""
    return prompt_tokens / ttft_s


def forward_rate(decode: Num, tokens_per_chunk: Num) -> Num:
    """Estimated verify steps per second: decode / tok-per-chunk (roughly constant per setup)."""
    return decode / tokens_per_chunk


# --- tables --------------------------------------------------------------------------------------

def records_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Records (dicts) as a DataFrame with the per-request figures as columns.

    Adds `ok` (no error) and, for ok rows, `decode_tps`, `tok_per_chunk`, `e2e_tps`,
    `prefill_tps`; failed rows hold NaN there so that they never enter a mean.
    """
    df = pd.DataFrame.from_records(list(records), columns=RECORD_COLUMNS)
    for col in ("ttft_s", "total_s", "last_chunk_s", "sent_at"):
        df[col] = df[col].astype("float64")
    for col in ("completion_tokens", "prompt_tokens", "cached_tokens", "chunks"):
        df[col] = df[col].astype("float64")
    df["ok"] = df["error"].isna()
    ok = df["ok"]
    df["decode_tps"] = decode_tps(df["completion_tokens"], df["ttft_s"], df["total_s"]).where(ok)
    df["tok_per_chunk"] = tok_per_chunk(df["completion_tokens"], df["chunks"].replace(0, np.nan)).where(ok)
    df["e2e_tps"] = end_to_end_tps(df["completion_tokens"], df["total_s"]).where(ok)
    df["prefill_tps"] = prefill_tps(df["prompt_tokens"], df["ttft_s"]).where(ok)
    return df


def round_aggregates(df: pd.DataFrame) -> pd.DataFrame:
    """One row per concurrent round: `aggregate_tps = sum(comp - 1) / max(total - ttft)`.

    This is the protocol's formula with its quirk: the denominator is the longest single
    stream's decode time and ignores that streams started their decode at different moments.
    A round counts (`complete`) only when every one of its streams succeeded.
    """
    conc = df[df["case"].isin(CONCURRENT_CASES)]
    if conc.empty:
        return pd.DataFrame(columns=["cell", "round", "concurrency", "case", "streams", "ok_streams",
                                     "aggregate_tps", "complete"])
    work = conc.assign(
        decode_tokens=(conc["completion_tokens"] - 1).where(conc["ok"]),
        decode_time=(conc["total_s"] - conc["ttft_s"]).where(conc["ok"]),
    )
    rounds = work.groupby(["cell", "round"], sort=False).agg(
        concurrency=("concurrency", "first"),
        case=("case", "first"),
        streams=("request_id", "size"),
        ok_streams=("ok", "sum"),
        decode_tokens=("decode_tokens", "sum"),
        decode_time=("decode_time", "max"),
    ).reset_index()
    rounds["complete"] = rounds["ok_streams"] == rounds["concurrency"]
    rounds["aggregate_tps"] = (rounds["decode_tokens"] / rounds["decode_time"]).where(rounds["complete"])
    return rounds.drop(columns=["decode_tokens", "decode_time"])


def single_stream_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per scenario, single-stream means over successful rounds with min-max of decode and n."""
    single = df[(df["case"] == SINGLE_CASE) & df["ok"]]
    table = single.groupby("scenario", sort=False).agg(
        decode_tps=("decode_tps", "mean"),
        decode_min=("decode_tps", "min"),
        decode_max=("decode_tps", "max"),
        ttft_s=("ttft_s", "mean"),
        tok_per_chunk=("tok_per_chunk", "mean"),
        e2e_tps=("e2e_tps", "mean"),
        n=("request_id", "size"),
    )
    table["forward_rate"] = forward_rate(table["decode_tps"], table["tok_per_chunk"])
    return table


def concurrency_table(df: pd.DataFrame, single: pd.DataFrame | None = None,
                      reference_scenario: str = "code") -> pd.DataFrame:
    """Per (concurrency, case): mean aggregate over complete rounds, min, max, n, overlap.

    `overlap = aggregate / single-stream decode` of `reference_scenario` (the thread's "1.89x").
    """
    rounds = round_aggregates(df)
    rounds = rounds[rounds["complete"].astype(bool)]
    table = rounds.groupby(["concurrency", "case"], sort=True).agg(
        aggregate_tps=("aggregate_tps", "mean"),
        min=("aggregate_tps", "min"),
        max=("aggregate_tps", "max"),
        n=("aggregate_tps", "size"),
    ).reset_index()
    if single is None:
        single = single_stream_table(df)
    base = single["decode_tps"].get(reference_scenario, np.nan) if not single.empty else np.nan
    table["overlap"] = table["aggregate_tps"] / base
    table["case"] = pd.Categorical(table["case"], ["same", "different"], ordered=True)
    return table.sort_values(["concurrency", "case"]).reset_index(drop=True).assign(
        case=lambda t: t["case"].astype(str))


def ttft_percentiles(df: pd.DataFrame, by: str = "cell") -> pd.DataFrame:
    """TTFT p50/p90/p99 in seconds from raw records of successful requests, grouped by `by`."""
    ok = df[df["ok"]]
    if ok.empty:
        return pd.DataFrame(columns=["p50", "p90", "p99", "n"])
    pct = ok.groupby(by, sort=False)["ttft_s"].quantile(list(PERCENTILES)).unstack()
    pct.columns = [f"p{int(q * 100)}" for q in PERCENTILES]
    pct["n"] = ok.groupby(by, sort=False).size()
    return pct


def failures_table(df: pd.DataFrame) -> pd.DataFrame:
    """Failed requests counted by cell and reason."""
    failed = df[~df["ok"]]
    return (failed.groupby(["cell", "error"], sort=False).size().rename("count").reset_index()
            if not failed.empty else pd.DataFrame(columns=["cell", "error", "count"]))
