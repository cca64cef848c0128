"""Figures of the free-running modes (closed, ladder, open, trace, search): a timeline of streams
and tokens/s, steady-state levels, percentiles and goodput, TTFT and decode by prompt and answer
length, and with thinking the time to the first answer token after the reasoning (TTFO).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd

from loadlib.figures.columns import coded, first_seen, isin
from loadlib.figures.formulas import from_intended_send, longest_chunk_gap_s, meets_slo
from loadlib.figures.goodput import DEFAULT_SLO
from loadlib.figures.protocol_tables import CONCURRENT_CASES, PERCENTILES
from loadlib.figures.uncertainty import RankedSample, uncertainty_columns
from loadlib.records import chunk_gaps_s
from loadlib.scenarios.base import SINGLE, TRACE_KIND

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
    free = df["ok"].to_numpy(dtype=bool) & ~isin(df["case"], (SINGLE, *CONCURRENT_CASES))
    codes, cells = pd.factorize(df["cell"])
    parts = []
    for figure, tokens in BY_LENGTH:
        values, counts = df[figure].to_numpy(), df[tokens].to_numpy()
        use = free & ~np.isnan(values) & ~np.isnan(counts)  # decode: not for one-read answers
        edges = length_edges(counts[use])
        if len(edges) < 2:
            continue
        buckets = len(edges) - 1
        keys = codes[use] * buckets + _buckets(counts[use], edges)
        order = _stable_order(keys)
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


def _buckets(counts: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Which bucket `[edges[i], edges[i + 1])` each count is in, all of them being within the edges
    (`length_edges`): a comparison per inner edge, a few passes where a binary search per count
    costs more than all of them."""
    found = np.zeros(len(counts), dtype=np.intp)
    for edge in edges[1:-1]:
        found += counts >= edge
    return found


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """`np.argsort(keys, kind="stable")` of non-negative group numbers: as 16-bit integers where they
    fit, which numpy sorts by radix (linear, ten times faster on a million keys than timsort)."""
    fits = keys.size and keys.max() < np.iinfo(np.int16).max
    return np.argsort(keys.astype(np.int16) if fits else keys, kind="stable")


DIRECT_EDGES = 8  # up to this many points, `_cumulative_overlap` sums directly (O(n) each) instead of sorting


def _cumulative_overlap(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray,
                        at: np.ndarray) -> np.ndarray:
    """For each t in `at`: sum_i weights_i * (clip(t, start_i, end_i) - start_i).

    The integral up to t of the weighted count of intervals open at t; with weights 1 it is
    busy stream-seconds, with token rates it is tokens delivered. Sorting plus cumulative
    sums make it O((n + len(at)) log n); for a few points a direct sum per point is cheaper.
    Times must be relative (small), not epoch seconds.
    """
    if len(at) <= DIRECT_EDGES:  # a window's two edges: a weighted sum per edge, no sort
        return np.array([float(np.dot(weights, np.clip(t, starts, ends) - starts)) for t in at])

    def swept(points: np.ndarray) -> np.ndarray:
        order = np.argsort(points, kind="stable")
        sorted_points, w = points[order], weights[order]
        total_w = np.concatenate([[0.0], np.cumsum(w)])
        total_wp = np.concatenate([[0.0], np.cumsum(w * sorted_points)])
        k = np.searchsorted(sorted_points, at, side="right")
        return at * total_w[k] - total_wp[k]

    return swept(starts) - swept(ends)


def _decode_intervals(df: pd.DataFrame, origin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode tokens (comp - 1) of ok requests, spread evenly from first to last token: each
    request's first and last token (s from `origin`) and its rate between them (0 where they
    coincide). Computed in place where it can be: a million-row cell's arrays are 8 MB each."""
    ok = df["ok"].to_numpy(dtype=bool)
    start, end = df["first_token_at"].to_numpy()[ok], df["last_token_at"].to_numpy()[ok]
    start -= origin
    end -= origin
    span = end - start
    rate = np.divide(df["completion_tokens"].to_numpy()[ok] - 1, span, out=np.zeros_like(span), where=span > 0)
    return start, end, np.nan_to_num(rate, copy=False)


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
    drain, whatever the load shape). Its requests are those sent within it (`steady_requests`)."""
    times, level = _in_flight(sent_at, end_at)
    held = np.diff(times)
    if held.sum() <= 0:
        return float(times[0]), float(times[-1])
    time_at_level = np.cumsum(np.bincount(level[:-1], weights=held))
    median = int(np.searchsorted(time_at_level, time_at_level[-1] / 2))
    at_or_above = level[:-1] >= median
    first, last = int(np.argmax(at_or_above)), len(at_or_above) - 1 - int(np.argmax(at_or_above[::-1]))
    return float(times[first]), float(times[last + 1])


# A million requests make two million events: `_in_flight` and `_merged` keep as few arrays of that
# length alive at once as they can, counts in 32 bits and flags in 8, since fresh memory costs more
# than the arithmetic on a small machine.


def _in_flight(sent_at: np.ndarray, end_at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each moment a request is sent or ends, once, and the requests in flight from it to the next
    (sent by then minus ended by then)."""
    events, sends = _merged(sent_at, end_at)
    running = np.cumsum(np.where(sends, np.int8(1), np.int8(-1)), dtype=np.int32)
    moments = np.append(events[1:] != events[:-1], True)  # each moment once, after all its events
    return events[moments], running[moments]


def _merged(sent_at: np.ndarray, end_at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every send and end time in order, and which of them are sends."""
    # stable (timsort): a journal comes nearly in end order, which it sorts in close to one pass
    events = np.concatenate([np.sort(sent_at, kind="stable"), np.sort(end_at, kind="stable")])
    sends = np.argsort(events, kind="stable") < len(sent_at)  # two sorted runs: merged in O(n)
    events.sort(kind="stable")  # the same order, in place
    return events, sends


def steady_requests(sent: np.ndarray, start: float, stop: float) -> np.ndarray:
    """Which requests belong to the steady window `[start, stop]`: those sent within it, however
    late they end. A request meets the load in flight when it is sent (its queueing, so its TTFT,
    is set then): one sent during the ramp-up ran under a lighter load than the window's, even if
    it ended inside it. Every per-request figure of the window (completions/s, goodput, SLO
    attainment, n, failures, percentiles) counts these requests and no others."""
    return (sent >= start) & (sent <= stop)


SteadyCell = tuple[str, pd.DataFrame, float, np.ndarray, np.ndarray, float, float]


STEADY_INPUTS = ["cell", "case", "sent_at", "end_at", "first_token_at", "last_token_at", "completion_tokens", "ok",
                 "ttft_s", "ttfo_s", "total_s", "decode_tps", "e2e_tps", "tok_per_chunk", "queue_s", "reasoning_tokens",
                 "chunk_gaps_ms"]


STEADY_FIGURES = ["ttft_s", "intended_ttft_s", "ttfo_s", "decode_tps", "e2e_tps", "tok_per_chunk", "max_chunk_gap_s",
                  "total_s", "intended_total_s", "queue_s", "reasoning_tokens"]


STEADY_OPTIONAL = ("ttfo_s", "max_chunk_gap_s", "queue_s", "reasoning_tokens")  # left out where no request has them


SCHEDULED_FIGURES = ("intended_ttft_s", "total_s", "intended_total_s")  # only in cells sent on a schedule


STEADY_COLUMNS = ["cell", "window_start_s", "window_s", "in_flight", "decode_tps", "requests_per_s",
                  "goodput_rps", "slo_attainment", "slo_attainment_from_send", "slo_ttft_from", "n", "failed"]


INTENDED_SEND, SEND = "intended_send", "send"  # what a cell's TTFT SLO counts from (`slo_ttft_from`)


def steady_state_table(df: pd.DataFrame, slo_ttft_s: float = DEFAULT_SLO.ttft_s,
                       slo_decode_tps: float = DEFAULT_SLO.decode_tps,
                       cells: list[SteadyCell] | None = None) -> pd.DataFrame:
    """Steady-state levels of each free-running cell (a `case` that is not the protocol's).

    Over the steady window (`steady_window`): mean requests in flight and decode tokens/s of all
    streams. Of the window's requests (`steady_requests`): `n`, `failed`, successful completions
    per second of the window, goodput (those per second that also had TTFT <= `slo_ttft_s` and
    decode >= `slo_decode_tps`; an answer that came in one read, with no decode rate, is judged
    on its TTFT), and `slo_attainment`, the share that met the SLO (failures count as misses).
    So goodput_rps = slo_attainment * n / window_s and requests_per_s = (n - failed) / window_s.
    In a cell sent on a schedule (`scheduled`) the SLO's TTFT counts from the intended send
    (`slo_ttft`), elsewhere from the send: `slo_ttft_from` says which
    ("intended_send", "send"), and `slo_attainment_from_send` is the share judged on TTFT from the
    send (the same figure where there is no schedule).
    Times are seconds from the cell's first send. `cells` saves recomputing `steady_cells(df)`
    for a caller that has them.
    """
    rows = []
    for cell, group, origin, sent, end, start, stop in steady_cells(df) if cells is None else cells:
        length = stop - start
        pick = steady_requests(sent, start, stop)
        ok, ttft, decode = (group[col].to_numpy()[pick] for col in ("ok", "ttft_s", "decode_tps"))
        met = meets_slo(ok, slo_ttft(group)[pick], decode, slo_ttft_s, slo_decode_tps)
        met_from_send = meets_slo(ok, ttft, decode, slo_ttft_s, slo_decode_tps)
        edges = np.array([start, stop])
        busy = np.diff(_cumulative_overlap(sent, end, np.ones_like(sent), edges))[0]
        tokens = np.diff(_cumulative_overlap(*_decode_intervals(group, origin), edges))[0]
        rate = 1 / length if length > 0 else np.nan
        rows.append({
            "cell": cell, "window_start_s": start, "window_s": length, "in_flight": busy * rate,
            "decode_tps": tokens * rate, "requests_per_s": ok.sum() * rate, "goodput_rps": met.sum() * rate,
            "slo_attainment": met.mean() if len(met) else np.nan,
            "slo_attainment_from_send": met_from_send.mean() if len(met) else np.nan,
            "slo_ttft_from": slo_ttft_from(group), "n": len(met),
            "failed": int((~ok).sum()),
        })
    return pd.DataFrame(rows, columns=STEADY_COLUMNS)


def slo_ttft(group: pd.DataFrame) -> np.ndarray:
    """Per request, the TTFT an SLO judges (goodput, "SLO met", a capacity search's levels): from
    the intended send (`formulas.from_intended_send`) where the record has one (`queue_s`), else
    from the send (`ttft_s`)."""
    return from_intended_send(group["ttft_s"].to_numpy(dtype="float64"), group["queue_s"].to_numpy(dtype="float64"))


def scheduled(group: pd.DataFrame) -> bool:
    """Whether requests were sent on a schedule: their records have an intended send time
    (`scheduled_at`), so the wait for a free user (`queue_s`). The record says so, whichever mode
    sent it."""
    return bool(group["queue_s"].notna().any())


def slo_ttft_from(group: pd.DataFrame) -> str:
    """What the SLO's TTFT of these requests counts from (`slo_ttft`): `INTENDED_SEND` or `SEND`."""
    return INTENDED_SEND if scheduled(group) else SEND


STREAMS_HELD_SHARE = 0.9  # a closed-loop cell holding fewer of its streams in flight is flagged


def streams_held(steady: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Per closed-loop cell (its records' `closed_loop`: closed, ladder levels, a users search's
    levels): the streams asked for (the records' `concurrency`), the mean in flight over the steady
    window, and their ratio. Open-loop and a locustfile's own cells are left out: their in-flight
    count follows arrivals and wait times."""
    closed_loop = df.loc[df["closed_loop"].to_numpy(dtype=bool), ["cell", "concurrency"]]
    asked = closed_loop.groupby("cell", observed=True)["concurrency"].max()
    table = steady[steady["cell"].isin(asked.index)][["cell", "in_flight"]].copy()
    table["asked"] = table["cell"].map(asked).astype(float)
    table["held_share"] = table["in_flight"] / table["asked"]
    return table.reset_index(drop=True)


def trace_replay(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell that replays a trace (its records' `kind`): requests, the rate the trace scheduled
    and the rate achieved (both over first to last send), lateness percentiles (send time minus
    scheduled time, `queue_s`), and answers the server stopped before their forced length
    (`completion_tokens` below `max_tokens` although `ignore_eos` asked for all of it)."""
    rows = []
    trace = df.loc[isin(df["kind"], (TRACE_KIND,)), ["cell", "sent_at", "queue_s", "ok", "completion_tokens",
                                                     "max_tokens"]]
    for cell, group in trace.groupby("cell", observed=True, sort=False):
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


PERCENTILE_COLUMNS = ["cell", "figure", "p50", "p90", "p99", "n", *uncertainty_columns(PERCENTILES)]


def steady_percentiles(df: pd.DataFrame, cells: list[SteadyCell] | None = None) -> pd.DataFrame:
    """p50/p90/p99 of TTFT, decode, end-to-end, tok/chunk, and where recorded TTFO, each request's
    longest chunk gap (`--chunk-times`), client-side queueing and reasoning tokens (shown only when
    some request reasoned: SGLang reports 0 for every answer without thinking), per free-running
    cell, from the raw records of successful requests sent within the cell's steady window (`cells`
    as in `steady_state_table`). A cell sent on a schedule (`scheduled`) adds the latencies from the
    intended send beside those from the send (`formulas.from_intended_send`): `intended_ttft_s`
    beside `ttft_s`, `intended_total_s` beside `total_s`. Each percentile comes with its 95 %
    confidence interval and whether it rests on enough samples
    (`uncertainty.percentile_uncertainty`: `p90_ci_low`, `p90_ci_high`, `p90_enough`, ...)."""
    parts = []
    for cell, group, _origin, sent, _end, start, stop in steady_cells(df) if cells is None else cells:
        pick = group["ok"].to_numpy(dtype=bool) & steady_requests(sent, start, stop)
        for name, values in _steady_figures(group, pick):
            sample = RankedSample(values, PERCENTILES)
            parts.append({"cell": cell, "figure": name, **dict(zip(PERCENTILE_COLUMNS[2:5], sample.percentiles())),
                          "n": sample.n, **sample.uncertainty()})
    return pd.DataFrame(parts, columns=PERCENTILE_COLUMNS)


def _steady_figures(group: pd.DataFrame, pick: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """Each of `STEADY_FIGURES` that has values (no NaN) over the `pick`ed requests of a cell, with
    them: the latencies from the intended send only in a cell sent on a schedule, an optional
    figure only where some request has it. One figure at a time, as arrays: a million-row cell is
    neither copied whole nor held as ten copies of its columns at once."""
    on_schedule = scheduled(group)
    for name in STEADY_FIGURES:
        if name in SCHEDULED_FIGURES and not on_schedule:
            continue
        column = _steady_column(group, name)
        values = column[pick & ~np.isnan(column)]
        present = bool((values > 0).any()) if name == "reasoning_tokens" else values.size > 0
        if name in STEADY_OPTIONAL and not present:
            continue
        if values.size:
            yield name, values


def _steady_column(group: pd.DataFrame, name: str) -> np.ndarray:
    """One of `STEADY_FIGURES` for every request of the cell (the intended-send latencies computed)."""
    if name in ("intended_ttft_s", "intended_total_s"):
        latency = group[name.removeprefix("intended_")].to_numpy(dtype="float64")
        return from_intended_send(latency, group["queue_s"].to_numpy(dtype="float64"))
    if name == "max_chunk_gap_s":  # measured gaps only: a run without --chunk-times has none
        gaps = group["chunk_gaps_ms"]
        kept = gaps.notna().to_numpy()
        longest = np.full(len(gaps), np.nan)
        longest[kept] = [longest_chunk_gap_s(chunk_gaps_s(text)) for text in gaps[kept]]
        return longest
    return group[name].to_numpy(dtype="float64")


def steady_cells(df: pd.DataFrame) -> list[SteadyCell]:
    """Each free-running cell as `steady_cell` finds it: what the steady-state tables share, found
    once (a million records take a noticeable time to sort)."""
    free = ~isin(df["case"], (SINGLE, *CONCURRENT_CASES))
    if not free.any():
        return []
    cells, names = coded(df["cell"])
    in_order = cells[free][first_seen(cells[free])]
    return [steady_cell(str(names[code]), rows_where(df, free & (cells == code))) for code in in_order]


def rows_where(df: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """The rows of `df` where `mask` holds: a slice (a view, nothing copied) when they are one
    run of rows, as a cell's are in a journal, else a copy of just the `STEADY_INPUTS` columns."""
    first, last = int(np.argmax(mask)), len(mask) - 1 - int(np.argmax(mask[::-1]))
    if last - first + 1 == np.count_nonzero(mask):
        return df.iloc[first:last + 1]
    return df.loc[mask, STEADY_INPUTS]


def steady_cell(name: str, group: pd.DataFrame) -> SteadyCell:
    """One cell's records (`sent_at`, `end_at`, ...) with its first send (epoch s), its send and
    end times (s from that first send) and its steady window (`steady_window`)."""
    origin = float(group["sent_at"].min())
    sent = group["sent_at"].to_numpy(dtype=float) - origin
    end = group["end_at"].to_numpy(dtype=float) - origin
    np.copyto(end, sent, where=np.isnan(end))  # a request that never ended held no stream
    return (name, group, origin, sent, end, *steady_window(sent, end))

