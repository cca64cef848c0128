"""Capacity with its uncertainty: how sure a capacity search's level is of its SLO, what it
delivered, and whether its figures agree with Little's law.

A capacity search (`loadlib.modes.search`) judges each level by the criteria of the profile's
`[slo]` (`goodput.Slo`): TTFT's `ttft_p`th percentile at most `ttft_s`; `decode_p` % of requests
decoding at least `decode_tps` (the (100 - `decode_p`)th percentile of per-request decode);
`goodput`: that share of requests meeting both targets (`formulas.meets_slo`). A level's
requests are resampled (`loadlib.figures.bootstrap`), and the share of resamples in which every
criterion holds (`slo_resamples.slo_statistics`, `slo_holds`) says how sure the level is: the search judges with
resamples of single requests (`block=1`), cheap and live; the report adds a block bootstrap
(`slo_met_share`): resamples made of blocks of consecutive requests in send order, as long as the
level's TTFT, decode and SLO met move together from one request to the next
(`bootstrap.block_length`), so that a slow spell (a queue that built up for a while) stays
together and counts for what it is: one spell, not independent requests. Both are seeded by the
level's cells (`level_seed`), so a recomputation agrees.

What a level delivered (`level_flow`), over the steady window of each of its cells
(`free_running.steady_window`): the successful requests that ended within it per second, the mean
latency of the requests sent within it (`free_running.steady_requests`, the selection every
steady-state figure uses) and the mean requests in flight. And Little's law there (`littles_law`),
L = lambda x W, checked against what the level set: a closed loop of N users holds L = N streams,
so its throughput times its mean latency should come to N (short of it, the streams sat idle
between requests: the client, not the server, may have set the pace); an open loop offers
lambda requests/s, so lambda times the mean latency should come to the mean in flight measured
(above it, the requests ended more slowly than they arrived: a queue building up, not a steady
level). `LITTLE_TOLERANCE` is the agreement asked for. A level of N agent sessions sets neither:
a lane idles between turns while its agent thinks, so it is not checked.

What a user waits for (`judged_requests`): where a level's requests were sent on a schedule (a
search over a rate: their records carry the wait for a free user, `queue_s`), TTFT is judged from
the intended send (`free_running.slo_ttft`), so a client that fell behind cannot hide the queue its
requests met. And a level offered a rate must keep pace with it (`delivery`): a server (or client)
that delivers r requests a second of the R offered queues the rest, so each request waits longer
than the one before and the latency from the intended send grows by R / r - 1 seconds a second. The
median latency of the level's last third of requests against its middle third (the first third
left to a server still filling up) gives that growth, so r; the medians' distribution-free
intervals (`uncertainty.LEVEL`, order statistics: whatever the spread of the latencies) give its
range. The last third above the middle beyond both intervals is a shortfall beyond the noise, and
the level does not hold. Counting the requests that ended per second instead would mistake a wide
spread of latencies, beside a short level, for a shortfall. Little's law states the same
shortfall for an open loop (offered x latency above the requests in flight by offered / delivered
- 1 in a steady state), but with a tolerance, not a noise model: it is shown beside the verdict;
the growth decides.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from loadlib.figures.bootstrap import RESAMPLES, block_length
from loadlib.figures.formulas import meets_slo
from loadlib.figures.free_running import SteadyCell, slo_ttft, steady_cell, steady_requests
from loadlib.figures.goodput import Slo
from loadlib.figures.slo_resamples import resampled_statistics
from loadlib.figures.uncertainty import RankedSample

LITTLE_TOLERANCE = 0.10  # in flight and throughput x latency agree within this share
DEFAULT_P = 90.0  # the percentile taken of a figure the SLO does not judge


def level_seed(cells: Iterable[str]) -> int:
    """The resampling's seed for a level: from its cells, so the same records give the same answer."""
    return zlib.crc32(",".join(cells).encode())


def slo_holds(stats: np.ndarray, criteria: Slo) -> np.ndarray:
    """Per column of `slo_statistics`: every criterion the SLO sets holds (a missing figure does not)."""
    held = np.ones(stats.shape[1], dtype=bool)
    if criteria.ttft_p is not None:
        held &= stats[0] <= criteria.ttft_s
    if criteria.decode_p is not None:
        held &= stats[1] >= criteria.decode_tps
    if criteria.goodput is not None:
        held &= stats[2] >= criteria.goodput
    return held


def quantiles(criteria: Slo) -> tuple[float, float]:
    """The quantiles of TTFT and of decode that the criteria judge (`DEFAULT_P` where not set)."""
    return (criteria.ttft_p or DEFAULT_P) / 100, 1 - (criteria.decode_p or DEFAULT_P) / 100


def judged_requests(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A level's requests as its SLO judges them (`records_frame` rows): whether each succeeded,
    its TTFT (from the intended send where it had one: `free_running.slo_ttft`) and its decode,
    NaN for a failure. The live search and the report both judge these."""
    ok = frame["ok"].to_numpy(dtype=bool)
    return (ok, np.where(ok, slo_ttft(frame), np.nan),
            np.where(ok, frame["decode_tps"].to_numpy(dtype=float), np.nan))


def slo_met_share(ok: np.ndarray, ttft: np.ndarray, decode: np.ndarray, criteria: Slo, seed: int,
                  block: int | None = None, resamples: int = RESAMPLES) -> float | None:
    """The share of block resamples of a level's requests (in send order, as `judged_requests`
    gives them) in which every criterion holds; blocks of `level_block` unless `block` is given.
    None: no requests."""
    if not len(ok):
        return None
    meets = meets_slo(ok, ttft, decode, criteria.ttft_s, criteria.decode_tps)
    stats = resampled_statistics(ttft, decode, meets, *quantiles(criteria), seed, resamples,
                                 level_block(ttft, decode, meets) if block is None else block)
    return float(slo_holds(stats, criteria).mean())


def level_block(ttft: np.ndarray, decode: np.ndarray, meets: np.ndarray) -> int:
    """The block of a level's requests in send order: as long as its TTFT, its decode or whether
    it met the SLO needs (`bootstrap.block_length`)."""
    return block_length(ttft, decode, meets.astype("float64"))


@dataclass(frozen=True)
class Median:
    """A median with its `uncertainty.LEVEL` interval (order statistics, distribution-free; -inf or
    inf where too few values bound a side)."""

    value: float
    low: float
    high: float

    @classmethod
    def of(cls, values: np.ndarray) -> "Median":
        sample = RankedSample(values, [0.5])
        return cls(sample.percentiles()[0], *sample.intervals()[0])


@dataclass(frozen=True)
class Delivery:
    """Whether a level kept pace with the rate it was offered, from its requests' latency from the
    intended send (see the module docstring): the median latency of the middle third of its
    requests in intended-send order (`middle`) and of the last third (`last`). Between their median
    requests `arrived` requests were due in `apart_s` seconds; a server that keeps up ends them in
    as long (the two thirds wait alike), one that ends fewer a second queues the rest, and they end
    in `apart_s` plus the latency's growth. Several cells (a level run again): their means."""

    offered_rps: float
    middle: Median
    last: Median
    arrived: float
    apart_s: float

    @property
    def arrived_rps(self) -> float:
        """The rate the requests were due at: the offered rate, give or take Poisson arrivals' noise."""
        return self.arrived / self.apart_s

    @property
    def rate_rps(self) -> float:
        """The rate delivered: the requests between the two medians over the time between their ends."""
        return self._rate(self.last.value - self.middle.value)

    @property
    def interval(self) -> tuple[float, float]:
        """The rate delivered from the ends of the medians' intervals: the most growth of latency the
        two intervals allow (last.high - middle.low) and the least (last.low - middle.high)."""
        return self._rate(self.last.high - self.middle.low), self._rate(self.last.low - self.middle.high)

    @property
    def short(self) -> bool:
        """The last third waited longer than the middle beyond both intervals: the level's queue grew,
        and the rate delivered is below the rate the requests were due at beyond the noise."""
        return self.last.low > self.middle.high

    def words(self) -> str:
        """`delivery_text` of this delivery."""
        return delivery_text(self.rate_rps, *self.interval, self.offered_rps, self.arrived_rps, self.short,
                             self.middle.value, self.last.value)

    def _rate(self, growth_s: float) -> float:
        return self.arrived / (self.apart_s + growth_s) if self.apart_s + growth_s > 0 else math.inf


def delivery(frame: pd.DataFrame, offered_rps: float) -> Delivery | None:
    """How a level offered `offered_rps` kept pace (`Delivery`), from its records (`cell`, `ok`,
    `sent_at`, `queue_s`, `end_at`): in each of its cells the successful requests in intended-send
    order, cut in thirds; the middle and last thirds of every cell pooled. None: no cell of three
    successful requests or more."""
    middle, last, arrived, apart = [], [], [], []
    for _cell, group in frame.groupby("cell", sort=False, observed=True):
        ended = group[group["ok"].to_numpy(dtype=bool) & group["end_at"].notna().to_numpy()]
        intended = (ended["sent_at"] - ended["queue_s"].fillna(0.0)).to_numpy(dtype=float)
        order = np.argsort(intended, kind="stable")
        intended, latency = intended[order], ended["end_at"].to_numpy(dtype=float)[order] - intended[order]
        first = len(latency) // 3
        if not first:
            continue
        middle.append(latency[first:2 * first])
        last.append(latency[2 * first:])
        arrived.append((len(latency) - first) / 2)  # from the middle third's median request to the last third's
        apart.append(float(np.median(intended[2 * first:]) - np.median(intended[first:2 * first])))
    if not middle or sum(apart) <= 0:
        return None
    return Delivery(float(offered_rps), Median.of(np.concatenate(middle)), Median.of(np.concatenate(last)),
                    float(np.mean(arrived)), float(np.mean(apart)))


def delivery_text(delivered: float, low: float, high: float, offered: float, arrived: float, short: bool,
                  middle_s: float, last_s: float) -> str:
    """A level's delivery in words, the same live and in the report: "delivered 24.10 req/s of 32
    offered (22.51–25.43; short of it: latency from the intended send 0.75 s, then 1.20 s)"; arrivals
    due at a rate 5 % or more off the offered one (Poisson) are named: "(30.12 due; ...)"."""
    due = f"{arrived:.2f} due; " if abs(arrived / offered - 1) >= 0.05 else ""
    why = f"; short of it: latency from the intended send {middle_s:.2f} s, then {last_s:.2f} s" if short else ""
    return f"delivered {delivered:.2f} req/s of {offered:g} offered ({due}{_rate(low)}–{_rate(high)}{why})"


def _rate(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:.2f}"


@dataclass(frozen=True)
class Flow:
    """What a level delivered over the steady windows of its cells (see the module docstring).
    Times in seconds."""

    window_s: float  # the steady windows' length, summed
    n: int  # requests sent within them
    delivered_rps: float  # successful requests that ended within them, per second
    throughput_rps: float  # requests that ended within them, failed or not, per second
    latency_s: float  # mean time from send to end of the requests sent within them (a failure without an end: 0)
    in_flight: float  # time-average requests in flight, whenever sent


NO_FLOW = Flow(0.0, 0, math.nan, math.nan, math.nan, math.nan)


def flow(sent: np.ndarray, end: np.ndarray, ok: np.ndarray, start: float, stop: float) -> Flow:
    """`Flow` over one window `[start, stop]`: completions that ended within it, the latency of
    the requests sent within it (`steady_requests`), every request's time in flight within it.
    Times in any one origin."""
    sent, end, ok = np.asarray(sent, dtype=float), np.asarray(end, dtype=float), np.asarray(ok, dtype=bool)
    end = np.where(np.isnan(end), sent, end)  # a request that never ended held no stream
    length = stop - start
    pick = steady_requests(sent, start, stop)
    if length <= 0 or not pick.any():
        return NO_FLOW
    ended = (end >= start) & (end <= stop)
    busy = float((np.clip(end, start, stop) - np.clip(sent, start, stop)).sum())
    return Flow(length, int(pick.sum()), float((ended & ok).sum()) / length, float(ended.sum()) / length,
                float((end[pick] - sent[pick]).mean()), busy / length)


def pooled(flows: Iterable[Flow]) -> Flow:
    """Several windows as one (a level run again): rates over the windows' summed length, latency
    over their requests."""
    flows = [one for one in flows if one.n]
    window = sum(one.window_s for one in flows)
    n = sum(one.n for one in flows)
    if not n or window <= 0:
        return NO_FLOW
    total = lambda rate: sum(getattr(one, rate) * one.window_s for one in flows)  # noqa: E731
    return Flow(window, n, total("delivered_rps") / window, total("throughput_rps") / window,
                sum(one.latency_s * one.n for one in flows) / n, total("in_flight") / window)


def level_flow(cells: Iterable[SteadyCell]) -> Flow:
    """A level's `Flow`: each of its cells (`free_running.steady_cell`) over that cell's steady
    window, pooled."""
    return pooled(flow(sent, end, group["ok"].to_numpy(dtype=bool), start, stop)
                  for _name, group, _origin, sent, end, start, stop in cells)


@dataclass(frozen=True)
class Little:
    """Little's law at a level, L = lambda x W: the requests in flight L against the rate lambda
    times the mean latency W. Closed loop (users): L is the level's users, lambda its throughput;
    open loop (rate): L is the mean in flight measured, lambda the rate offered."""

    in_flight: float  # L
    rate_rps: float  # lambda
    latency_s: float  # W

    @property
    def expected_in_flight(self) -> float:
        """lambda x W: the requests in flight that the rate and the latency imply."""
        return self.rate_rps * self.latency_s

    @property
    def gap(self) -> float:
        """lambda x W / L - 1: below 0, fewer in flight than L (users: streams idle between requests);
        above 0, more (rate: the arrivals came faster than the requests ended); NaN without data."""
        return self.expected_in_flight / self.in_flight - 1 if self.in_flight > 0 else math.nan

    @property
    def holds(self) -> bool | None:
        return None if math.isnan(self.gap) else abs(self.gap) <= LITTLE_TOLERANCE


NO_LAW = Little(math.nan, math.nan, math.nan)  # a level of agent sessions: think time keeps no stream busy


def littles_law(level: Flow, users: float | None = None, offered_rps: float | None = None) -> Little:
    """Little's law at a level of `users` closed-loop streams (L = the users, lambda = the
    throughput), or of an open-loop rate `offered_rps` (L = the mean in flight, lambda = that rate)."""
    if users is not None:
        return Little(float(users), level.throughput_rps, level.latency_s)
    return Little(level.in_flight, math.nan if offered_rps is None else float(offered_rps), level.latency_s)


LEVEL_COLUMNS = ["value", "n", "block", "resamples", "pass_share_blocks", "window_s", "delivered_rps",
                 "delivered_low_rps", "delivered_high_rps", "arrived_rps", "short", "latency_middle_s",
                 "latency_last_s", "throughput_rps", "latency_s", "in_flight", "little_in_flight", "little_rate_rps",
                 "little_expected_in_flight", "little_gap", "little_holds"]


def level_table(df: pd.DataFrame, search: Mapping[str, Any] | None,
                cells: Iterable[SteadyCell] | None = None) -> pd.DataFrame:
    """Per level of a capacity search as the manifest keeps it (`search["variable"]`, `search["slo"]`,
    `search["levels"]`, each with its `value` and `cells`): its requests (`n`), the moving-block
    bootstrap's `block` (`level_block`) and `resamples`, `pass_share_blocks` (`slo_met_share` over the level's
    `judged_requests` in send order, seeded by `level_seed`), its `Flow` (`level_flow`), and Little's
    law there (`littles_law`: `little_holds` within `LITTLE_TOLERANCE`). A level of a rate says what
    it delivered against its offered rate (`delivery`): `delivered_rps` with its interval
    (`delivered_low_rps`, `delivered_high_rps`), the rate its requests were due at (`arrived_rps`),
    whether it fell `short`, and the median latencies from the intended send it was judged by
    (`latency_middle_s`, `latency_last_s`); a level of users the successful requests ended per second
    of its steady windows (`Flow.delivered_rps`). `cells` saves recomputing the cells' steady windows
    for a caller that has them (`free_running.steady_cells`)."""
    search = search or {}
    levels = search.get("levels") or []
    if not levels:
        return pd.DataFrame(columns=LEVEL_COLUMNS)
    criteria = Slo.of(search.get("slo"))
    variable = search.get("variable")
    if cells is None:
        cells = [steady_cell(str(name), group)
                 for name, group in df.groupby("cell", sort=False, observed=True)] if len(df) else []
    by_cell = {cell[0]: cell for cell in cells}
    rows = []
    for level in levels:
        found = [by_cell[cell] for cell in level["cells"] if cell in by_cell]
        frame = pd.concat([cell[1] for cell in found]).sort_values("sent_at", kind="stable") if found \
            else df.iloc[:0]
        n = len(frame)
        ok, ttft, decode = judged_requests(frame)
        block = level_block(ttft, decode, meets_slo(ok, ttft, decode, criteria.ttft_s, criteria.decode_tps))
        share = slo_met_share(ok, ttft, decode, criteria, level_seed(level["cells"]), block)
        measured = level_flow(found)
        law = (littles_law(measured, users=level["value"]) if variable == "users"
               else littles_law(measured, offered_rps=level["value"]) if variable == "rate" else NO_LAW)
        rows.append({"value": level["value"], "n": n, "block": block if n else None,
                     "resamples": RESAMPLES if n else 0, "pass_share_blocks": share, "window_s": measured.window_s,
                     **_delivered(measured, delivery(frame, level["value"]) if variable == "rate" else None,
                                  variable != "rate"),
                     "throughput_rps": measured.throughput_rps,
                     "latency_s": measured.latency_s, "in_flight": measured.in_flight,
                     "little_in_flight": law.in_flight, "little_rate_rps": law.rate_rps,
                     "little_expected_in_flight": law.expected_in_flight, "little_gap": law.gap,
                     "little_holds": law.holds if measured.n and law is not NO_LAW else None})
    return pd.DataFrame(rows, columns=LEVEL_COLUMNS)


def _delivered(measured: Flow, delivered: Delivery | None, users: bool) -> dict[str, Any]:
    """`level_table`'s delivered columns: a level of users its steady windows' rate; a level of a
    rate its `Delivery`: the rate, its interval, the rate its requests were due at, whether it fell
    short and the two thirds' median latencies from the intended send (NaN and None: too few requests)."""
    columns = {"delivered_rps": math.nan, "delivered_low_rps": math.nan, "delivered_high_rps": math.nan,
               "arrived_rps": math.nan, "short": None, "latency_middle_s": math.nan, "latency_last_s": math.nan}
    if users:
        columns["delivered_rps"] = measured.delivered_rps
    elif delivered is not None:
        low, high = delivered.interval
        columns.update(delivered_rps=delivered.rate_rps, delivered_low_rps=low, delivered_high_rps=high,
                       arrived_rps=delivered.arrived_rps, short=delivered.short,
                       latency_middle_s=delivered.middle.value, latency_last_s=delivered.last.value)
    return columns
