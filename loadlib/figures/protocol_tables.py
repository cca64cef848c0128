"""The protocol's tables, from the DataFrame of records (`loadlib.record_table.records_frame`).

Validity is decided once, by the client: a request that has no first token, no usage, or
`completion_tokens <= 1` carries an `error`, and only records without one enter the figures.
A successful request whose whole answer arrived in one read (total = TTFT) has no decode rate:
it is left out of the decode figures only, and counted in `exclusions_table`.

Beyond the protocol, and labelled as such wherever shown: the wall-clock window aggregate and
prefill excluding cached tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from loadlib.figures.columns import coded, first_seen, isin
from loadlib.figures.formulas import forward_rate
from loadlib.figures.uncertainty import RankedSample, uncertainty_columns
from loadlib.scenarios.base import SINGLE, round_cell_name
from loadlib.scenarios.thread import SINGLE_STREAM_SCENARIOS

PERCENTILES = (0.5, 0.9, 0.99)


# The protocol's measurement cases; any other `case` is a free-running mode (steady-state figures).


CONCURRENT_CASES = ("same", "different")


ONE_READ = "whole answer in one read (total = TTFT): no decode rate"


ROUND_RULE = "a round counts only when all N streams succeeded"  # see `round_aggregates`


# The protocol's aggregate misleads (`concurrency_table`'s `misleads`) where a round's streams did
# not all decode at once, or where it and the wall-clock aggregate differ by more than this share
MISLEAD_LIMIT = 0.10


COLD, HIT, UNKNOWN = 0, 1, 2  # prefix-cache states (`cache_states`)


CACHE_NAMES = {COLD: "cold", HIT: "hit", UNKNOWN: "unknown"}


# The columns a table reads, selected before its rows: filtering the whole frame would copy every
# column, the long text ones (request_id, output_sha) too.
ROUND_INPUTS = ["cell", "round", "concurrency", "case", "ok", "completion_tokens", "total_s", "ttft_s",
                "first_token_at", "last_token_at", "cached_tokens", "prompt_tokens", "decode_tps"]


SINGLE_INPUTS = ["scenario", "ok", "decode_tps", "ttft_s", "ttfo_s", "tok_per_chunk", "e2e_tps"]


def round_aggregates(df: pd.DataFrame) -> pd.DataFrame:
    """One row per concurrent round, with the protocol's aggregate and the wall-clock one.

    `aggregate_tps = sum(comp - 1) / max(total - ttft)` is the protocol's formula with its quirk:
    the denominator is the longest single stream's decode time and ignores that streams started
    their decode at different moments. `window_tps = sum(comp - 1) / (last token - first token
    across the round's streams)` measures the wall-clock window instead; the two agree when all
    streams get their first token at the same moment. `together` is the most streams that decoded
    at once (between their first and last token): N when the server ran them together, fewer
    when it queued some (then the protocol's aggregate leaves the queue out). `stream_decode_tps`
    is the mean per-stream decode. A round whose streams all answered in one read has no
    aggregate (NaN), like such a stream.

    Rounds with failures (`ROUND_RULE`): a round counts (`complete`) only when all N of its
    streams succeeded. The thread's script skips a round with fewer than 2 successful streams
    (`if len(rs) < 2: continue`) at its only N, 2, which is the same thing; read as "all N" it
    stays the N-stream figure at any N, where "at least 2" would average 8-stream rounds with
    rounds that lost streams early and ran the rest with less contention.
    """
    conc = df.loc[isin(df["case"], CONCURRENT_CASES), ROUND_INPUTS]
    ok = conc["ok"]
    work = conc.assign(
        decode_tokens=(conc["completion_tokens"] - 1).where(ok),
        decode_time=(conc["total_s"] - conc["ttft_s"]).where(ok),
        first_token_at=conc["first_token_at"].where(ok),
        last_token_at=conc["last_token_at"].where(ok),
        cached_tokens=conc["cached_tokens"].where(ok),
        prompt_tokens=conc["prompt_tokens"].where(ok & conc["cached_tokens"].notna()),
    )
    rounds = work.groupby(["cell", "round"], sort=False, observed=True).agg(
        concurrency=("concurrency", "first"),
        case=("case", "first"),
        streams=("ok", "size"),
        ok_streams=("ok", "sum"),
        decode_tokens=("decode_tokens", "sum"),
        decode_time=("decode_time", "max"),
        first_token_at=("first_token_at", "min"),
        last_token_at=("last_token_at", "max"),
        stream_decode_tps=("decode_tps", "mean"),
        cached_tokens=("cached_tokens", "sum"),
        cache_known=("cached_tokens", "count"),
        prompt_tokens=("prompt_tokens", "sum"),
    ).reset_index()
    rounds["together"] = _most_at_once(work)
    complete = rounds["complete"] = (rounds["ok_streams"] == rounds["concurrency"]).astype(bool)
    decode_time = rounds["decode_time"]
    rounds["aggregate_tps"] = (rounds["decode_tokens"] / decode_time).where(complete & (decode_time > 0))
    window = rounds["last_token_at"] - rounds["first_token_at"]
    rounds["window_tps"] = (rounds["decode_tokens"] / window).where(complete & (window > 0))
    rounds["cached_tokens"] = rounds["cached_tokens"].where(rounds["cache_known"] > 0)
    return rounds.drop(columns=["decode_tokens", "decode_time", "first_token_at", "last_token_at",
                                "cache_known"])


def _most_at_once(work: pd.DataFrame) -> np.ndarray:
    """Per (cell, round) group of `work`, in groupby's order: the most of its successful streams
    that decoded at once, each from its first token to its last (one that ends as another starts
    does not overlap it). Each group's starts and ends sum to nothing, so one running sum over the
    events sorted by group and time counts within each group."""
    ok = work.dropna(subset=["first_token_at", "last_token_at"])
    groups = work.groupby(["cell", "round"], sort=False, observed=True).ngroup()
    key = groups.loc[ok.index].to_numpy()
    times = np.concatenate([ok["first_token_at"].to_numpy(dtype=float), ok["last_token_at"].to_numpy(dtype=float)])
    steps = np.concatenate([np.ones(len(ok)), -np.ones(len(ok))])
    owner = np.concatenate([key, key])
    order = np.lexsort((steps, times, owner))  # by group, then time, ends before starts
    running = np.cumsum(steps[order])
    most = np.zeros(int(groups.max()) + 1 if len(groups) else 0)
    np.maximum.at(most, owner[order], running)
    return most


def single_stream_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per scenario, single-stream means over successful rounds with min-max of decode and n.

    `ttfo_s` (mean time to the first answer token after the reasoning) is NaN without thinking.
    `failed` counts the scenario's requests left out of every figure.
    """
    single = df.loc[df["case"] == SINGLE, SINGLE_INPUTS]
    ok = single[single["ok"]]
    table = ok.groupby("scenario", sort=False, observed=True).agg(
        decode_tps=("decode_tps", "mean"),
        decode_min=("decode_tps", "min"),
        decode_max=("decode_tps", "max"),
        ttft_s=("ttft_s", "mean"),
        ttfo_s=("ttfo_s", "mean"),
        tok_per_chunk=("tok_per_chunk", "mean"),
        e2e_tps=("e2e_tps", "mean"),
        n=("ok", "size"),
    )
    table["forward_rate"] = forward_rate(table["decode_tps"], table["tok_per_chunk"])
    failed = single.loc[~single["ok"], "scenario"].astype(str).value_counts()
    table.index = table.index.astype(str)
    table["failed"] = failed.reindex(table.index, fill_value=0).astype("int64")
    return table


def concurrency_table(df: pd.DataFrame, single: pd.DataFrame | None = None,
                      reference_scenario: str = "code") -> pd.DataFrame:
    """Per concurrency cell: mean aggregate over complete rounds, min, max, n, and two overlaps.

    One row a cell, with its N and case beside it: two cells of one N and case (a profile's
    `c8-different` and `c8-distinct-issues`) measure different prompts and stay apart.
    `n` counts the rounds that count (`round_aggregates`: all N streams succeeded) and
    `failed_rounds` those left out because a stream failed.
    `overlap_vs_stream_decode = aggregate / mean per-stream decode` of the same rounds: the
    thread's overlap (429.7 / 227.2 = 1.89x at N = 2). `overlap_vs_single_decode = aggregate /
    single-stream decode` of `reference_scenario`, a different figure (429.7 / 246.7 = 1.74x).
    Beside them: the wall-clock window aggregate (`window_tps`, min, max), the mean per-stream
    decode and `cached_share` (cached / prompt tokens: the measured radix state). Rows run by
    N, same before different, then by cell name.

    `together`: the fewest streams that decoded at once in any round that counts; `misleads`:
    the protocol's aggregate misleads, where some round's streams did not all decode at once or
    it is more than `MISLEAD_LIMIT` from the wall-clock aggregate (its denominator, the longest
    stream's decode, leaves out the time the others waited).
    """
    rounds = round_aggregates(df)
    complete = rounds[rounds["complete"]]
    table = complete.groupby("cell", sort=False, observed=True).agg(
        aggregate_tps=("aggregate_tps", "mean"),
        min=("aggregate_tps", "min"),
        max=("aggregate_tps", "max"),
        n=("aggregate_tps", "size"),
        window_tps=("window_tps", "mean"),
        window_min=("window_tps", "min"),
        window_max=("window_tps", "max"),
        stream_decode_tps=("stream_decode_tps", "mean"),
        together=("together", "min"),
        cached_tokens=("cached_tokens", "sum"),
        cache_known=("cached_tokens", "count"),
        prompt_tokens=("prompt_tokens", "sum"),
    )
    cells = rounds.groupby("cell", sort=False, observed=True).agg(
        concurrency=("concurrency", "first"), case=("case", "first"), rounds=("round", "size"))
    table = cells.join(table)
    table["n"] = table["n"].fillna(0).astype("int64")
    table["failed_rounds"] = table["rounds"] - table["n"]
    table["cached_share"] = (table["cached_tokens"] / table["prompt_tokens"]).where(table["cache_known"] > 0)
    table = table.reset_index()
    if single is None:
        single = single_stream_table(df)
    base = single["decode_tps"].get(reference_scenario, np.nan) if not single.empty else np.nan
    table["overlap_vs_stream_decode"] = table["aggregate_tps"] / table["stream_decode_tps"]
    table["overlap_vs_single_decode"] = table["aggregate_tps"] / base
    table["misleads"] = ((table["together"] < table["concurrency"])
                         | ((table["aggregate_tps"] / table["window_tps"] - 1).abs() > MISLEAD_LIMIT)).astype(bool)
    table["_case"] = table["case"].map({case: i for i, case in enumerate(CONCURRENT_CASES)}).astype("int64")
    table = table.astype({"cell": str, "case": str}).sort_values(["concurrency", "_case", "cell"])
    return table[["cell", "concurrency", "case", "aggregate_tps", "min", "max", "n", "failed_rounds",
                  "overlap_vs_stream_decode", "overlap_vs_single_decode", "window_tps", "window_min", "window_max",
                  "stream_decode_tps", "together", "misleads", "cached_share"]].reset_index(drop=True)


def ttft_percentiles(df: pd.DataFrame, by: str = "cell") -> pd.DataFrame:
    """TTFT p50/p90/p99 in seconds from raw records of successful requests, grouped by `by`.

    Where any of them has a TTFO (thinking: the first answer token after the reasoning), its
    p50/p90/p99 and count follow as `ttfo_p50`, `ttfo_p90`, `ttfo_p99`, `ttfo_n` (NaN and 0 for
    a group without)."""
    return _ttft_table(df, by, intervals=False)


def ttft_percentiles_ci(df: pd.DataFrame, by: str = "cell") -> pd.DataFrame:
    """`ttft_percentiles`, each percentile with its 95 % confidence interval and whether it rests on
    enough samples to be a tail estimate (`uncertainty.percentile_uncertainty`: `p90_ci_low`,
    `p90_ci_high`, `p90_enough`, ...; TTFO's, where there is one, as `ttfo_p90_ci_low`, ...). The
    percentiles themselves are unchanged: the thread's figures."""
    return _ttft_table(df, by, intervals=True)


def _ttft_table(df: pd.DataFrame, by: str, intervals: bool) -> pd.DataFrame:
    """`ttft_percentiles`, with `intervals` its `ttft_percentiles_ci`: each group's TTFT (and TTFO)
    put in order once (`RankedSample`) for both its percentiles and their intervals."""
    ok = df.loc[df["ok"], [by, "ttft_s", "ttfo_s"]]
    if ok.empty:
        table = pd.DataFrame(columns=["p50", "p90", "p99", "n"])
        return table.reindex(columns=[*table.columns, *uncertainty_columns(PERCENTILES)]) if intervals else table
    grouped = ok.groupby(by, sort=False, observed=True)
    n = grouped.size()
    rows = [grouped.indices[key] for key in n.index]
    ttft = [RankedSample(values, PERCENTILES) for values in _split(ok["ttft_s"], rows)]
    ttfo = [RankedSample(values, PERCENTILES) for values in _split(ok["ttfo_s"], rows)] \
        if ok["ttfo_s"].notna().any() else []
    names = [f"p{int(q * 100)}" for q in PERCENTILES]
    table = pd.DataFrame([sample.grouped_percentiles() for sample in ttft], index=n.index, columns=names)
    table["n"] = n
    if ttfo:
        table[[f"ttfo_{name}" for name in names]] = [sample.grouped_percentiles() for sample in ttfo]
        table["ttfo_n"] = np.array([sample.n for sample in ttfo], dtype="int64")
    if not intervals:
        return table
    table = table.join(_uncertainty(ttft, table.index))
    return table.join(_uncertainty(ttfo, table.index, "ttfo_")) if ttfo else table


def _split(values: pd.Series, rows: list[np.ndarray]) -> list[np.ndarray]:
    """`values` at each group's `rows` (positions)."""
    array = values.to_numpy(dtype="float64")
    return [array[positions] for positions in rows]


def _uncertainty(samples: list[RankedSample], index: pd.Index, prefix: str = "") -> pd.DataFrame:
    """Each sample's `percentile_uncertainty`, one row a sample (a group of `index`)."""
    return pd.DataFrame([sample.uncertainty(prefix) for sample in samples], index=index,
                        columns=uncertainty_columns(PERCENTILES, prefix))


def failures_table(df: pd.DataFrame) -> pd.DataFrame:
    """Failed requests counted by cell and reason."""
    failed = df.loc[~df["ok"], ["cell", "error"]]
    return (failed.groupby(["cell", "error"], sort=False, observed=True).size().rename("count").reset_index()
            if not failed.empty else pd.DataFrame(columns=["cell", "error", "count"]))


def exclusions_table(df: pd.DataFrame) -> pd.DataFrame:
    """Successful requests left out of a figure, counted by cell and reason: so far the answers
    that came in one read, which have TTFT and tokens but no decode rate."""
    one_read = df.loc[df["ok"] & ~(df["total_s"] > df["ttft_s"]), ["cell"]]
    table = one_read.groupby("cell", sort=False, observed=True).size().rename("count").reset_index()
    return table.assign(reason=ONE_READ)[["cell", "reason", "count"]]


def cache_states(df: pd.DataFrame) -> np.ndarray:
    """The prefix-cache state each request met, as `COLD`, `HIT` or `UNKNOWN` codes.

    The client's `cache_observed` where recorded ("warm" only when more than the chat template's
    framing was cached, since that framing alone makes almost every request a few-token hit);
    else any cached token is a hit, and no reported count is unknown.
    """
    observed, cached = df["cache_observed"], df["cached_tokens"].to_numpy()
    warm = (observed == "warm").to_numpy(dtype=bool, na_value=False)  # one text comparison: they are slow
    cold, hit, unknown = (np.int8(code) for code in (COLD, HIT, UNKNOWN))  # a byte a request, not eight
    fallback = np.where(np.isnan(cached), unknown, np.where(cached > 0, hit, cold))
    return np.where(observed.notna().to_numpy(), np.where(warm, hit, cold), fallback)


def prefill_table(df: pd.DataFrame) -> pd.DataFrame:
    """Prefill per (cell, scenario, cache state) outside the concurrency cells, by prompt size.

    `cache` (`cache_states`) is "cold" (`prefill_tps` is the protocol's cold prefill), "hit"
    (part of the prompt came from the prefix cache: only `uncached_prefill_tps` is a prefill
    rate) or "unknown" (the server did not report cached tokens). Concurrent streams are left
    out: their TTFT includes waiting for each other's prefill.
    """
    pick = (df["ok"] & df["prompt_tokens"].notna()).to_numpy() & ~isin(df["case"], CONCURRENT_CASES)
    rows = df.loc[pick, ["cell", "scenario", "prompt_tokens", "cached_tokens", "ttft_s", "prefill_tps",
                         "uncached_prefill_tps"]]
    cache = cache_states(df)[pick]
    key = _prefill_key(rows["cell"], rows["scenario"], cache)
    table = rows.groupby(key, sort=False).agg(
        prompt_tokens=("prompt_tokens", "mean"),
        cached_tokens=("cached_tokens", "mean"),
        ttft_s=("ttft_s", "mean"),
        prefill_tps=("prefill_tps", "mean"),
        uncached_prefill_tps=("uncached_prefill_tps", "mean"),
        n=("ttft_s", "size"),
    ).reset_index(drop=True)
    firsts = first_seen(key)  # each group's first row, in the groups' order
    named = rows[["cell", "scenario"]].iloc[firsts].assign(cache=cache[firsts]).reset_index(drop=True)
    table = pd.concat([named, table], axis=1).sort_values(["prompt_tokens", "cache"], kind="stable")
    return table.reset_index(drop=True).assign(cache=lambda t: t["cache"].map(CACHE_NAMES))


def _prefill_key(cell: pd.Series, scenario: pd.Series, cache: np.ndarray) -> np.ndarray:
    """(cell, scenario, cache state) as one integer a row: pandas groups a million rows by one
    integer in a fraction of the time and memory that three keys, two of them categorical, take."""
    cells, _ = coded(cell)
    scenarios, names = coded(scenario)
    return (cells.astype(np.int64) * len(names) + scenarios) * len(CACHE_NAMES) + cache


# --- the four tables together, in reading order ----------------------------------------------------

@dataclass(frozen=True)
class ProtocolTables:
    """The four protocol tables of one run, computed once from its records frame, rows in reading
    order (`scenario_order`, `cell_order`), and what kind each concurrency cell is (`cell_kinds`)."""

    single: pd.DataFrame  # index scenario
    concurrent: pd.DataFrame
    ttft: pd.DataFrame  # index cell (`ttft_percentiles_ci`)
    failures: pd.DataFrame
    kinds: dict[str, str]  # concurrency cell -> its kind (`cell_kinds`)

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> "ProtocolTables":
        single = single_stream_table(df)
        single = single.reindex(sorted(single.index, key=scenario_order))
        rank = {cell: i for i, cell in enumerate(cell_order(df))}
        ttft = ttft_percentiles_ci(df)
        ttft = ttft.reindex(sorted(ttft.index, key=rank.__getitem__))
        failures = failures_table(df)
        order = sorted(range(len(failures)), key=lambda i: (rank[failures["cell"].iat[i]], failures["error"].iat[i]))
        return cls(single, concurrency_table(df, single), ttft, failures.iloc[order].reset_index(drop=True),
                   cell_kinds(df))


def scenario_order(name: str) -> tuple[int, str]:
    """The thread's single-stream scenarios in its order, then the rest by name."""
    known = SINGLE_STREAM_SCENARIOS
    return (known.index(name), "") if name in known else (len(known), name)


def cell_order(df: pd.DataFrame) -> list[str]:
    """The run's cells in reading order, from each cell's `case` and `concurrency`: the single
    stream first, then concurrency cells by N with same before different (then by name, as in
    `concurrency_table`), then the free-running cells by name."""
    cells = df[["cell", "case", "concurrency"]].iloc[first_seen(coded(df["cell"])[0])].set_index("cell")

    def key(row: Any) -> tuple[int, int, int, str]:
        if row.case == SINGLE:
            return (0, 0, 0, "")
        if row.case in CONCURRENT_CASES:
            return (1, int(row.concurrency), CONCURRENT_CASES.index(row.case), str(row.Index))
        return (2, 0, 0, str(row.Index))

    return [str(row.Index) for row in sorted(cells.itertuples(), key=key)]


def cell_kinds(df: pd.DataFrame) -> dict[str, str]:
    """Per concurrency cell, the kind of cell it is: its case ("same", "different") for the
    protocol's own cells (named by `round_cell_name(N, case)`), else the scenario
    its streams sent (a profile's kind, e.g. `distinct-issues`), else, for a cell of several
    scenarios, the cell itself. Cells of one kind at several N make one series."""
    conc = df.loc[isin(df["case"], CONCURRENT_CASES), ["cell", "case", "concurrency", "scenario"]]
    cells = conc.groupby("cell", sort=False, observed=True).agg(
        case=("case", "first"), concurrency=("concurrency", "first"), scenario=("scenario", "first"),
        scenarios=("scenario", "nunique"))
    return {str(cell): str(row.case if cell == round_cell_name(row.concurrency, row.case) else
                           row.scenario if row.scenarios == 1 else cell) for cell, row in cells.iterrows()}
