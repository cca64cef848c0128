"""The protocol's figures, defined once (see PROTOCOL.md, "uni-bench").

Per-request formulas are plain arithmetic, so the same function serves a float (the live path,
one request at a time) and a pandas Series (the post-processor, a whole run at once). Table
functions take the DataFrame of records (`records_frame`) and return DataFrames.

Beyond the protocol, and labelled as such wherever shown: the wall-clock window aggregate,
prefill excluding cached tokens, a timeline of streams and tokens/s, steady-state levels,
percentiles and goodput for free-running modes, TTFT and decode by prompt and answer length, and
with thinking the time to the first answer token after the reasoning (TTFO).

Validity is decided once, by the client: a request that has no first token, no usage, or
`completion_tokens <= 1` carries an `error`, and only records without one enter the figures.
A successful request whose whole answer arrived in one read (total = TTFT) has no decode rate:
it is left out of the decode figures only, and counted in `exclusions_table`.
"""

from __future__ import annotations

import gc
import itertools
from contextlib import contextmanager
from operator import itemgetter
from typing import Any, Collection, Iterable, Iterator, Mapping, TypeVar

import numpy as np
import pandas as pd

Num = TypeVar("Num", float, pd.Series)

RECORD_COLUMNS = [
    "request_id", "scenario", "cell", "concurrency", "case", "round", "slot", "worker", "user",
    "sent_at", "ttft_s", "total_s", "last_chunk_s", "completion_tokens", "prompt_tokens",
    "cached_tokens", "chunks", "finish_reason", "http_status", "error", "output_sha",
    "max_tokens", "thinking", "cache_intended", "cache_observed", "queue_s", "turn", "measured", "ttfo_s",
    "reasoning_tokens",
]
FLOAT_COLUMNS = ("sent_at", "ttft_s", "total_s", "last_chunk_s", "completion_tokens", "prompt_tokens",
                 "cached_tokens", "chunks", "http_status", "max_tokens", "queue_s", "turn", "ttfo_s",
                 "reasoning_tokens")  # None becomes NaN
INT_COLUMNS = ("concurrency", "round", "slot", "worker", "user")
_ABSENT = dict.fromkeys(RECORD_COLUMNS)
FRAME_BATCH = 65_536  # records turned into columns at a time
PERCENTILES = (0.5, 0.9, 0.99)
# The protocol's measurement cases; any other `case` is a free-running mode (steady-state figures).
SINGLE_CASE = "single"
CONCURRENT_CASES = ("same", "different")
ONE_READ = "whole answer in one read (total = TTFT): no decode rate"
ROUND_RULE = "a round counts only when all N streams succeeded"  # see `round_aggregates`
COLD, HIT, UNKNOWN = 0, 1, 2  # prefix-cache states (`cache_states`)
CACHE_NAMES = {COLD: "cold", HIT: "hit", UNKNOWN: "unknown"}
# `thinking` as sent: enable_thinking true or false, or not sent at all (the server's template decides)
THINKING_MODES = ("server", "on", "off")
THINKING_WORDS: dict[Any, str] = {True: "on", False: "off", None: "server", **{w: w for w in THINKING_MODES}}
_TEXT_TYPES = frozenset((str, type(None)))
TEXT_DTYPE = pd.Series(["text"]).dtype  # pandas 3: its string dtype; pandas 2: object


# --- per request -------------------------------------------------------------------------------

def decode_tps(completion_tokens: Num, ttft_s: Num, total_s: Num) -> Num:
    """Decode rate in tokens/s: `(comp - 1) / (total - ttft)`.

    The first token is excluded because it arrives at `ttft`; the rest arrive between `ttft`
    and the end of the stream (infinite when they all came with the first: see `records_frame`).
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


def uncached_prefill_tps(prompt_tokens: Num, cached_tokens: Num, ttft_s: Num) -> Num:
    """`(prompt_tokens - cached_tokens) / ttft`: prefill rate over the tokens actually computed.

    With a prefix (radix) cache hit only the uncached tail is prefilled, so this stays
    comparable with the cold figure where `prefill_tps` would be inflated by the hit.
    """
    return (prompt_tokens - cached_tokens) / ttft_s


def forward_rate(decode: Num, tokens_per_chunk: Num) -> Num:
    """Estimated verify steps per second: decode / tok-per-chunk (roughly constant per setup)."""
    return decode / tokens_per_chunk


# --- tables --------------------------------------------------------------------------------------

def records_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Records (dicts) as a DataFrame with the per-request figures as columns.

    Requests that were not measurements (`measured` false: warm-up, priming, calibration) are
    left out here, so that no figure can count them. Adds `ok` (no error) and, for ok rows,
    `decode_tps`, `tok_per_chunk`, `e2e_tps`, `prefill_tps`, `uncached_prefill_tps`; failed rows
    hold NaN there so that they never enter a mean, and so does `decode_tps` where the answer
    came in one read (total = TTFT: no time to decode over). Also adds wall-clock instants (epoch s):
    `first_token_at`, `last_token_at` (last content chunk, else end of stream) and `end_at`.
    """
    return frame_from_batches(_batches(iter(records), FRAME_BATCH))


def frame_from_batches(batches: Iterable[list[Any]], categorical: Collection[str] = ()) -> pd.DataFrame:
    """`records_frame` for a reader that parses many records at once (e.g. one orjson call per
    block of a journal): `record_columns`, then `frame_from_columns`. Text columns named in
    `categorical` are built as categoricals (for a reader whose tables group by them)."""
    columns = record_columns(batches)
    return frame_from_columns({col: pd.Categorical(values) if col in categorical else values
                               for col, values in columns.items()})


def record_columns(batches: Iterable[list[Any]]) -> dict[str, np.ndarray]:
    """The records' `RECORD_COLUMNS` as typed arrays (float, int, bool, or object for text).

    Each batch becomes column arrays straight away, so a million records load in seconds and
    their Python objects are freed batch by batch. A record that is not an object, or a field
    whose value cannot be read as its column's type, raises `RecordError` with the record's
    position among all the records given."""
    arrays: dict[str, list[np.ndarray]] = {col: [] for col in RECORD_COLUMNS}
    offset = 0
    with _gc_paused():
        for batch in batches:
            try:
                columns = [_column(col, values) for col, values in zip(RECORD_COLUMNS, _columns(batch))]
            except (TypeError, ValueError, KeyError):
                raise _first_bad_record(batch, offset) from None
            for col, values in zip(RECORD_COLUMNS, columns):
                arrays[col].append(values)
            offset += len(batch)
    return {col: np.concatenate(parts) if parts else _column(col, ()) for col, parts in arrays.items()}


def frame_from_columns(columns: Mapping[str, Any]) -> pd.DataFrame:
    """The records frame (see `records_frame`) from `record_columns`' arrays (or categoricals)."""
    df = pd.DataFrame(dict(columns))
    if TEXT_DTYPE != object:  # pandas 3 infers its string dtype, except for text columns with no text at all
        untyped = [col for col in df.columns if df[col].dtype == object]
        df[untyped] = df[untyped].astype(TEXT_DTYPE)
    if not df["measured"].all():
        df = df[df["measured"]].reset_index(drop=True)
    ok = df["ok"] = df["error"].isna()
    comp, ttft, total = df["completion_tokens"], df["ttft_s"], df["total_s"]
    df["decode_tps"] = decode_tps(comp, ttft, total).where(ok & (total > ttft))
    df["tok_per_chunk"] = tok_per_chunk(comp, df["chunks"].replace(0, np.nan)).where(ok)
    df["e2e_tps"] = end_to_end_tps(comp, total).where(ok)
    df["prefill_tps"] = prefill_tps(df["prompt_tokens"], ttft).where(ok)
    df["uncached_prefill_tps"] = uncached_prefill_tps(df["prompt_tokens"], df["cached_tokens"], ttft).where(ok)
    df["first_token_at"] = df["sent_at"] + ttft
    df["last_token_at"] = df["sent_at"] + df["last_chunk_s"].fillna(total)
    df["end_at"] = df["sent_at"] + total
    return df


class RecordError(ValueError):
    """A record that cannot be read: `index` is its position (from 0) among the records given,
    the message says what is wrong with it in one line."""

    def __init__(self, index: int, problem: str) -> None:
        super().__init__(problem)
        self.index = index


def _batches(items: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    while batch := list(itertools.islice(items, size)):
        yield batch


def _columns(batch: list[Any]) -> Iterator[tuple[Any, ...]]:
    """The batch's values column by column, in `RECORD_COLUMNS` order."""
    pick = itemgetter(*RECORD_COLUMNS)
    try:
        rows = list(map(pick, batch))
    except KeyError:  # older records, or another tool's, may lack fields: they are missing values
        rows = [pick({**_ABSENT, **record}) for record in batch]
    return zip(*rows)


def _column(name: str, values: tuple[Any, ...]) -> np.ndarray:
    """One column's values as a typed array; TypeError or ValueError for a value of the wrong type."""
    if name in FLOAT_COLUMNS or name in INT_COLUMNS:
        try:
            numbers = np.array(values, dtype="int64" if name in INT_COLUMNS else "float64")
        except TypeError:  # a missing value in an int column (else a value that is no number)
            numbers = np.array(values, dtype="float64")
        if numbers.ndim != 1:  # a list where a number belongs
            raise ValueError(name)
        return numbers
    if name == "thinking":  # as words: "server" (nothing sent) is neither on nor off
        try:
            return np.array(list(map(THINKING_WORDS.__getitem__, values)), dtype=object)
        except KeyError:
            raise ValueError("thinking") from None
    if name == "measured":  # records from before the field existed were all measurements
        return np.array([value is not False for value in values], dtype=bool)
    if not _TEXT_TYPES.issuperset(map(type, values)):  # a number or a list where text belongs
        raise TypeError(f"{name}: expected text")
    return np.array(values, dtype=object)  # pandas infers its string dtype


def _first_bad_record(batch: list[Any], offset: int) -> RecordError:
    """The first record of a batch that failed to convert, and what is wrong with it."""
    for index, record in enumerate(batch):
        if not isinstance(record, dict):
            return RecordError(offset + index, f"not a JSON object: {record!r:.60}")
        for name in RECORD_COLUMNS:
            value = record.get(name)
            try:
                _column(name, (value,))
            except (TypeError, ValueError):
                return RecordError(offset + index, f"{name}: {_expected(name)}, got {value!r:.40}")
    return RecordError(offset, "a record that cannot be read")


def _expected(name: str) -> str:
    if name == "thinking":
        return f"expected true, false, null or one of {', '.join(THINKING_MODES)}"
    return "expected a number" if name in FLOAT_COLUMNS or name in INT_COLUMNS else "expected text"


@contextmanager
def _gc_paused() -> Iterator[None]:
    """A million small containers trigger full collections that find nothing to free."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def round_aggregates(df: pd.DataFrame) -> pd.DataFrame:
    """One row per concurrent round, with the protocol's aggregate and the wall-clock one.

    `aggregate_tps = sum(comp - 1) / max(total - ttft)` is the protocol's formula with its quirk:
    the denominator is the longest single stream's decode time and ignores that streams started
    their decode at different moments. `window_tps = sum(comp - 1) / (last token - first token
    across the round's streams)` measures the wall-clock window instead; the two agree when all
    streams get their first token at the same moment. `stream_decode_tps` is the mean
    per-stream decode. A round whose streams all answered in one read has no aggregate (NaN),
    like such a stream.

    Rounds with failures (`ROUND_RULE`): a round counts (`complete`) only when all N of its
    streams succeeded. The thread's script skips a round with fewer than 2 successful streams
    (`if len(rs) < 2: continue`) at its only N, 2, which is the same thing; read as "all N" it
    stays the N-stream figure at any N, where "at least 2" would average 8-stream rounds with
    rounds that lost streams early and ran the rest with less contention.
    """
    conc = df[df["case"].isin(CONCURRENT_CASES)]
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
        streams=("request_id", "size"),
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
    complete = rounds["complete"] = (rounds["ok_streams"] == rounds["concurrency"]).astype(bool)
    decode_time = rounds["decode_time"]
    rounds["aggregate_tps"] = (rounds["decode_tokens"] / decode_time).where(complete & (decode_time > 0))
    window = rounds["last_token_at"] - rounds["first_token_at"]
    rounds["window_tps"] = (rounds["decode_tokens"] / window).where(complete & (window > 0))
    rounds["cached_tokens"] = rounds["cached_tokens"].where(rounds["cache_known"] > 0)
    return rounds.drop(columns=["decode_tokens", "decode_time", "first_token_at", "last_token_at",
                                "cache_known"])


def single_stream_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per scenario, single-stream means over successful rounds with min-max of decode and n.

    `ttfo_s` (mean time to the first answer token after the reasoning) is NaN without thinking.
    `failed` counts the scenario's requests left out of every figure.
    """
    single = df[df["case"] == SINGLE_CASE]
    ok = single[single["ok"]]
    table = ok.groupby("scenario", sort=False, observed=True).agg(
        decode_tps=("decode_tps", "mean"),
        decode_min=("decode_tps", "min"),
        decode_max=("decode_tps", "max"),
        ttft_s=("ttft_s", "mean"),
        ttfo_s=("ttfo_s", "mean"),
        tok_per_chunk=("tok_per_chunk", "mean"),
        e2e_tps=("e2e_tps", "mean"),
        n=("request_id", "size"),
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
    table["_case"] = table["case"].map({case: i for i, case in enumerate(CONCURRENT_CASES)}).astype("int64")
    table = table.astype({"cell": str, "case": str}).sort_values(["concurrency", "_case", "cell"])
    return table[["cell", "concurrency", "case", "aggregate_tps", "min", "max", "n", "failed_rounds",
                  "overlap_vs_stream_decode", "overlap_vs_single_decode", "window_tps", "window_min", "window_max",
                  "stream_decode_tps", "cached_share"]].reset_index(drop=True)


def ttft_percentiles(df: pd.DataFrame, by: str = "cell") -> pd.DataFrame:
    """TTFT p50/p90/p99 in seconds from raw records of successful requests, grouped by `by`.

    Where any of them has a TTFO (thinking: the first answer token after the reasoning), its
    p50/p90/p99 and count follow as `ttfo_p50`, `ttfo_p90`, `ttfo_p99`, `ttfo_n` (NaN and 0 for
    a group without)."""
    ok = df.loc[df["ok"], [by, "ttft_s", "ttfo_s"]]
    if ok.empty:
        return pd.DataFrame(columns=["p50", "p90", "p99", "n"])
    grouped = ok.groupby(by, sort=False, observed=True)
    pct = _percentiles(grouped["ttft_s"])
    pct["n"] = grouped.size()
    if ok["ttfo_s"].notna().any():
        ttfo = _percentiles(grouped["ttfo_s"])
        pct[[f"ttfo_{col}" for col in ttfo.columns]] = ttfo
        pct["ttfo_n"] = grouped["ttfo_s"].count()
    return pct


def _percentiles(grouped: Any) -> pd.DataFrame:
    """`PERCENTILES` of a grouped Series, one column each (p50, p90, p99)."""
    pct = grouped.quantile(list(PERCENTILES)).unstack()
    pct.columns = [f"p{int(q * 100)}" for q in PERCENTILES]
    return pct


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
    fallback = np.where(np.isnan(cached), UNKNOWN, np.where(cached > 0, HIT, COLD))
    return np.where(observed.notna().to_numpy(), np.where(warm, HIT, COLD), fallback)


def prefill_table(df: pd.DataFrame) -> pd.DataFrame:
    """Prefill per (cell, scenario, cache state) outside the concurrency cells, by prompt size.

    `cache` (`cache_states`) is "cold" (`prefill_tps` is the protocol's cold prefill), "hit"
    (part of the prompt came from the prefix cache: only `uncached_prefill_tps` is a prefill
    rate) or "unknown" (the server did not report cached tokens). Concurrent streams are left
    out: their TTFT includes waiting for each other's prefill.
    """
    rows = df.loc[df["ok"] & df["prompt_tokens"].notna() & ~df["case"].isin(CONCURRENT_CASES),
                  ["cell", "scenario", "request_id", "prompt_tokens", "cached_tokens", "cache_observed", "ttft_s",
                   "prefill_tps", "uncached_prefill_tps"]]
    table = rows.assign(cache=cache_states(rows)).groupby(["cell", "scenario", "cache"], sort=False,
                                                          observed=True).agg(
        prompt_tokens=("prompt_tokens", "mean"),
        cached_tokens=("cached_tokens", "mean"),
        ttft_s=("ttft_s", "mean"),
        prefill_tps=("prefill_tps", "mean"),
        uncached_prefill_tps=("uncached_prefill_tps", "mean"),
        n=("request_id", "size"),
    ).reset_index()
    table = table.sort_values(["prompt_tokens", "cache"], kind="stable").reset_index(drop=True)
    return table.assign(cache=table["cache"].map(CACHE_NAMES))


# --- free-running modes: figures by length --------------------------------------------------------

MAX_LENGTH_BUCKETS = 8
BY_LENGTH = (("ttft_s", "prompt_tokens"), ("decode_tps", "completion_tokens"))  # (figure, by tokens)
BY_LENGTH_COLUMNS = ["cell", "figure", "tokens", "low", "high", "p50", "p90", "p99", "n"]


def length_edges(tokens: np.ndarray, max_buckets: int = MAX_LENGTH_BUCKETS) -> np.ndarray:
    """Edges of token-count buckets `[edge_i, edge_i+1)`, chosen from the counts themselves.

    Powers of two with the half step between them (..., 256, 384, 512, 768, 1024, ...), from the
    largest at or below the smallest count to the smallest above the largest; where that makes
    more than `max_buckets` buckets, powers of two alone, then every second power (x4), every
    third (x8) and so on, until at most `max_buckets` remain. So a narrow spread (outputs of 300
    to 512 tokens) still splits into a few buckets and a wide one (10 to 100,000-token prompts)
    into a few wide ones, always on round numbers. No counts of at least 1: no edges.
    """
    values = np.asarray(tokens, dtype="float64")
    values = values[np.isfinite(values) & (values >= 1)]
    if not values.size:
        return np.array([], dtype="int64")
    lowest, highest = float(values.min()), float(values.max())
    bottom, top = int(np.floor(np.log2(lowest))), int(np.floor(np.log2(highest))) + 1
    powers = {2 ** k for k in range(bottom, top + 1)}
    half_steps = np.array(sorted(powers | {3 << (k - 1) for k in range(max(bottom, 1), top + 1)}))
    edges = half_steps[(half_steps >= half_steps[half_steps <= lowest].max())
                       & (half_steps <= half_steps[half_steps > highest].min())]
    octaves = 1
    while len(edges) - 1 > max_buckets:
        edges = 2 ** np.arange(bottom, top + octaves, octaves)
        edges = edges[:int(np.searchsorted(edges, highest, side="right")) + 1]
        octaves += 1
    return edges.astype("int64")


def by_length_table(df: pd.DataFrame) -> pd.DataFrame:
    """TTFT by prompt length and decode by answer length in each free-running cell (a `case`
    that is not the protocol's): p50/p90/p99 and n of `figure` per bucket `[low, high)` of
    `tokens` (`usage.prompt_tokens`, `usage.completion_tokens`), from the raw records of every
    successful request of the cell (ramp-up and drain included: a request's length does not
    depend on when it ran, and a bucket needs all the requests it can get). The edges
    (`length_edges`) are computed once per figure from all those requests, so the cells of a run
    share them. Empty buckets are left out; cells keep their order in the records."""
    free = (df["ok"] & ~df["case"].isin((SINGLE_CASE, *CONCURRENT_CASES))).to_numpy()
    codes, cells = pd.factorize(df["cell"])
    parts = []
    for figure, tokens in BY_LENGTH:
        values, counts = df[figure].to_numpy(), df[tokens].to_numpy()
        use = free & ~np.isnan(values) & ~np.isnan(counts)  # decode: not for one-read answers
        edges = length_edges(counts[use])
        if len(edges) < 2:
            continue
        buckets = len(edges) - 1
        keys = codes[use] * buckets + np.searchsorted(edges, counts[use], "right") - 1
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[use][order]
        starts = np.flatnonzero(np.diff(keys, prepend=-1))
        stops = np.append(starts[1:], len(keys))
        pct = np.array([np.quantile(values[a:b], PERCENTILES) for a, b in zip(starts, stops)])
        cell, bucket = np.divmod(keys[starts], buckets)
        parts.append(pd.DataFrame({
            "cell": np.asarray(cells, dtype=object)[cell], "figure": figure, "tokens": tokens,
            "low": edges[bucket], "high": edges[bucket + 1],
            **{f"p{int(q * 100)}": pct[:, i] for i, q in enumerate(PERCENTILES)}, "n": stops - starts}))
    if not parts:
        return pd.DataFrame(columns=BY_LENGTH_COLUMNS)
    return pd.concat(parts, ignore_index=True)[BY_LENGTH_COLUMNS]


# --- free-running modes: time series and steady state -------------------------------------------

def _cumulative_overlap(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray,
                        at: np.ndarray) -> np.ndarray:
    """For each t in `at`: sum_i weights_i * (clip(t, start_i, end_i) - start_i).

    The integral up to t of the weighted count of intervals open at t; with weights 1 it is
    busy stream-seconds, with token rates it is tokens delivered. Sorting plus cumulative
    sums make it O((n + len(at)) log n). Times must be relative (small), not epoch seconds.
    """
    def swept(points: np.ndarray) -> np.ndarray:
        order = np.argsort(points, kind="stable")
        sorted_points, w = points[order], weights[order]
        total_w = np.concatenate([[0.0], np.cumsum(w)])
        total_wp = np.concatenate([[0.0], np.cumsum(w * sorted_points)])
        k = np.searchsorted(sorted_points, at, side="right")
        return at * total_w[k] - total_wp[k]

    return swept(starts) - swept(ends)


def _decode_intervals(df: pd.DataFrame, origin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode tokens (comp - 1) of ok requests, spread evenly from first to last token."""
    ok = df.loc[df["ok"], ["first_token_at", "last_token_at", "completion_tokens"]]
    start = (ok["first_token_at"] - origin).to_numpy()
    end = (ok["last_token_at"] - origin).to_numpy()
    span = end - start
    rate = np.where(span > 0, (ok["completion_tokens"].to_numpy() - 1) / np.where(span > 0, span, 1), 0.0)
    return start, end, np.nan_to_num(rate)


def timeline(df: pd.DataFrame, bin_s: float | None = None) -> pd.DataFrame:
    """Active streams and decode tokens/s over time, in bins from the first request's send.

    `active_streams` is the time-averaged number of requests in flight in the bin (sent, not yet
    ended, failed ones included); `decode_tps` counts the decode tokens of successful requests,
    assumed evenly spread between their first and last token. `bin_s` defaults to 1/200 of the
    run.
    """
    if df.empty:
        return pd.DataFrame(columns=["t_s", "active_streams", "decode_tps"])
    origin = df["sent_at"].min()
    sent = (df["sent_at"] - origin).to_numpy()
    end = (df["end_at"] - origin).to_numpy()
    end = np.where(np.isnan(end), sent, end)
    span = float(np.nanmax(end)) or 1.0
    bin_s = bin_s or span / 200
    edges = np.arange(0.0, span + bin_s, bin_s)
    busy = _cumulative_overlap(sent, end, np.ones_like(sent), edges)
    tokens = _cumulative_overlap(*_decode_intervals(df, origin), edges)
    return pd.DataFrame({"t_s": edges[:-1], "active_streams": np.diff(busy) / bin_s,
                         "decode_tps": np.diff(tokens) / bin_s})


def steady_window(sent_at: np.ndarray, end_at: np.ndarray) -> tuple[float, float]:
    """The steady part of a free-running run: from the first to the last moment the number of
    requests in flight is at or above its time-weighted median (this leaves out ramp-up and
    drain, whatever the load shape)."""
    sent_sorted, end_sorted = np.sort(sent_at), np.sort(end_at)
    times = np.unique(np.concatenate([sent_sorted, end_sorted]))
    # in flight from times[i] to times[i + 1]: sent by then minus ended by then
    level = np.searchsorted(sent_sorted, times, "right") - np.searchsorted(end_sorted, times, "right")
    held = np.diff(times)
    if held.sum() <= 0:
        return float(times[0]), float(times[-1])
    time_at_level = np.cumsum(np.bincount(level[:-1], weights=held))
    median = int(np.searchsorted(time_at_level, time_at_level[-1] / 2))
    at_or_above = np.flatnonzero(level[:-1] >= median)
    return float(times[at_or_above[0]]), float(times[at_or_above[-1] + 1])


SteadyCell = tuple[str, pd.DataFrame, float, np.ndarray, np.ndarray, float, float]
STEADY_INPUTS = ["cell", "sent_at", "end_at", "first_token_at", "last_token_at", "completion_tokens", "ok",
                 "ttft_s", "ttfo_s", "decode_tps", "e2e_tps", "tok_per_chunk", "queue_s", "reasoning_tokens"]
STEADY_FIGURES = ["ttft_s", "ttfo_s", "decode_tps", "e2e_tps", "tok_per_chunk", "queue_s", "reasoning_tokens"]
STEADY_OPTIONAL = ("ttfo_s", "queue_s", "reasoning_tokens")  # left out where no request has them
STEADY_COLUMNS = ["cell", "window_start_s", "window_s", "in_flight", "decode_tps", "requests_per_s",
                  "goodput_rps", "slo_attainment", "n", "failed"]


def meets_slo(ok: np.ndarray, ttft_s: np.ndarray, decode_tps: np.ndarray, slo_ttft_s: float | None,
              slo_decode_tps: float | None) -> np.ndarray:
    """Per request, whether it meets the SLO: it succeeded, its TTFT is at most `slo_ttft_s` and
    its decode at least `slo_decode_tps` (an answer in one read has no decode rate, NaN, and is
    judged on its TTFT); a target of None is not checked. Goodput counts these requests."""
    meets = np.asarray(ok, dtype=bool).copy()
    if slo_ttft_s is not None:
        meets &= np.asarray(ttft_s) <= slo_ttft_s
    if slo_decode_tps is not None:
        meets &= ~(np.asarray(decode_tps) < slo_decode_tps)
    return meets


def steady_state_table(df: pd.DataFrame, slo_ttft_s: float = 2.0, slo_decode_tps: float = 20.0,
                       cells: list[SteadyCell] | None = None) -> pd.DataFrame:
    """Steady-state levels of each free-running cell (a `case` that is not the protocol's).

    Within the steady window (`steady_window`): mean requests in flight, decode tokens/s of all
    streams, successful completions/s, and goodput: completions/s of requests that succeeded
    with TTFT <= `slo_ttft_s` and decode >= `slo_decode_tps` (an answer that came in one read,
    with no decode rate, is judged on its TTFT). `slo_attainment` is the share of
    requests sent in the window that met the SLO (failures count as misses); `n` and `failed`
    count the requests sent in the window. Times are seconds from the cell's first send.
    `cells` saves recomputing `steady_cells(df)` for a caller that has them.
    """
    rows = []
    for cell, group, origin, sent, end, start, stop in steady_cells(df) if cells is None else cells:
        length = stop - start
        in_window = (sent >= start) & (sent <= stop)
        ended_in_window = (end >= start) & (end <= stop)
        ok = group["ok"].to_numpy()
        met = meets_slo(ok, group["ttft_s"].to_numpy(), group["decode_tps"].to_numpy(), slo_ttft_s, slo_decode_tps)
        edges = np.array([start, stop])
        busy = np.diff(_cumulative_overlap(sent, end, np.ones_like(sent), edges))[0]
        tokens = np.diff(_cumulative_overlap(*_decode_intervals(group, origin), edges))[0]
        rate = 1 / length if length > 0 else np.nan
        rows.append({
            "cell": cell, "window_start_s": start, "window_s": length, "in_flight": busy * rate,
            "decode_tps": tokens * rate, "requests_per_s": (ok & ended_in_window).sum() * rate,
            "goodput_rps": (met & ended_in_window).sum() * rate,
            "slo_attainment": met[in_window].mean() if in_window.any() else np.nan,
            "n": int(in_window.sum()), "failed": int((~ok & in_window).sum()),
        })
    return pd.DataFrame(rows, columns=STEADY_COLUMNS)


STREAMS_HELD_SHARE = 0.9  # a closed-loop cell holding fewer of its streams in flight is flagged


def streams_held(steady: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Per closed-loop cell (closed, ladder levels): the streams asked for (the records'
    `concurrency`), the mean in flight over the steady window, and their ratio. Open-loop and a
    locustfile's own cells are left out: their in-flight count follows arrivals and wait times."""
    asked = df[df["case"].isin(("closed", "ladder"))].groupby("cell", observed=True)["concurrency"].max()
    table = steady[steady["cell"].isin(asked.index)][["cell", "in_flight"]].copy()
    table["asked"] = table["cell"].map(asked).astype(float)
    table["held_share"] = table["in_flight"] / table["asked"]
    return table.reset_index(drop=True)


def trace_replay(df: pd.DataFrame) -> pd.DataFrame:
    """Per replayed trace cell (case "trace"): requests, the rate the trace scheduled and the rate
    achieved (both over first to last send), lateness percentiles (send time minus scheduled
    time, `queue_s`), and answers the server stopped before their forced length (`completion_tokens`
    below `max_tokens` although `ignore_eos` asked for all of it)."""
    rows = []
    for cell, group in df[df["case"] == "trace"].groupby("cell", observed=True, sort=False):
        sent = np.sort(group["sent_at"].to_numpy())
        scheduled = np.sort((group["sent_at"] - group["queue_s"].fillna(0.0)).to_numpy())
        late = group["queue_s"].dropna()
        span = lambda times: (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] \
            else np.nan  # noqa: E731
        rows.append({"cell": cell, "n": len(group), "scheduled_rps": span(scheduled), "achieved_rps": span(sent),
                     **{f"late_p{round(q * 100)}_s": late.quantile(q) if len(late) else np.nan for q in PERCENTILES},
                     "stopped_early": int((group["ok"] & (group["completion_tokens"] < group["max_tokens"])).sum())})
    return pd.DataFrame(rows, columns=["cell", "n", "scheduled_rps", "achieved_rps", "late_p50_s", "late_p90_s",
                                       "late_p99_s", "stopped_early"])


def steady_percentiles(df: pd.DataFrame, cells: list[SteadyCell] | None = None) -> pd.DataFrame:
    """p50/p90/p99 of TTFT, decode, end-to-end, tok/chunk, and where recorded TTFO, client-side
    queueing and reasoning tokens (shown only when some request reasoned: SGLang reports 0 for
    every answer without thinking), per free-running cell, from the raw records of successful
    requests sent within the cell's steady window (`cells` as in `steady_state_table`)."""
    parts = []
    for cell, group, _origin, sent, _end, start, stop in steady_cells(df) if cells is None else cells:
        steady = group[group["ok"].to_numpy() & (sent >= start) & (sent <= stop)]
        figures = steady[[col for col in STEADY_FIGURES if col not in STEADY_OPTIONAL
                          or (steady[col] > 0 if col == "reasoning_tokens" else steady[col].notna()).any()]]
        pct = figures.quantile(list(PERCENTILES)).T
        pct.columns = [f"p{int(q * 100)}" for q in PERCENTILES]
        pct = pct.assign(n=figures.count())
        parts.append(pct[pct["n"] > 0].rename_axis("figure").reset_index().assign(cell=cell))
    if not parts:
        return pd.DataFrame(columns=["cell", "figure", "p50", "p90", "p99", "n"])
    return pd.concat(parts, ignore_index=True)[["cell", "figure", "p50", "p90", "p99", "n"]]


def steady_cells(df: pd.DataFrame) -> list[SteadyCell]:
    """Each free-running cell with its records, its first send (epoch s), its send and end times
    (s from that first send) and its steady window (`steady_window`): what the steady-state
    tables share, found once (a million records take a noticeable time to sort)."""
    free = df.loc[~df["case"].isin((SINGLE_CASE, *CONCURRENT_CASES)), STEADY_INPUTS]
    cells = []
    for cell, group in free.groupby("cell", sort=False, observed=True):
        origin = float(group["sent_at"].min())
        sent = (group["sent_at"] - origin).to_numpy()
        end = (group["end_at"] - origin).to_numpy()
        end = np.where(np.isnan(end), sent, end)  # a request that never ended held no stream
        cells.append((str(cell), group, origin, sent, end, *steady_window(sent, end)))
    return cells
