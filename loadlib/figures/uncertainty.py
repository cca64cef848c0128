"""How far a percentile can be trusted: its 95 % confidence interval and whether it rests on
enough samples to be a tail estimate at all.

The interval is distribution-free, from order statistics (no assumption on how TTFT or decode is
distributed): of n independent samples, the number K that fall below the true q-quantile is
binomial, K ~ Bin(n, q), so the k-th smallest sample X_(k) lies at or below the quantile exactly
when K >= k. The interval [X_(l), X_(u)] covers the quantile with probability
P(l <= K <= u - 1) = F(u - 1) - F(l - 1), F the binomial CDF; `rank_interval` takes the
narrowest equal-tailed pair with at most (1 - level) / 2 on each side, so the coverage is at
least `level`. Few samples cannot bound every side: a p99 from fewer than 368 samples has no
upper bound (the largest sample is below the true p99 more than 2.5 % of the time: 0.99^n), nor
has a p90 from fewer than 36, and a median from fewer than 6 has no bound at all. Such an end is
infinite.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Iterable

import numpy as np

LEVEL = 0.95


def percentile_name(q: float) -> str:
    """The column name of a quantile: 0.9 -> "p90", 0.99 -> "p99"."""
    return f"p{round(q * 100):g}"


@lru_cache(maxsize=4096)
def rank_interval(n: int, q: float, level: float = LEVEL) -> tuple[int, int]:
    """The 1-based ranks (l, u) of the order statistics X_(l) <= X_(u) that bracket the true
    q-quantile of n samples with probability at least `level`: l is the largest rank with
    P(K < l) <= (1 - level) / 2 and u the smallest with P(K >= u) <= (1 - level) / 2, K ~ Bin(n, q).
    l = 0 means the samples give no lower bound, u = n + 1 no upper bound.

    n = 100, q = 0.5: (40, 61), coverage 96.5 %. The binomial CDF is summed only where it is
    neither ~0 nor ~1 (a window of 12 standard deviations and 40 ranks each side), so a million
    samples cost a few thousand terms.
    """
    if not 0 < q < 1:
        raise ValueError(f"quantile {q} is not between 0 and 1")
    if n <= 0:
        return 0, 1
    tail = (1 - level) / 2
    spread = 12 * math.sqrt(n * q * (1 - q)) + 40
    first, last = max(0, math.floor(n * q - spread)), min(n, math.ceil(n * q + spread))
    ks = np.arange(first, last + 1)
    log_first = (math.lgamma(n + 1) - math.lgamma(first + 1) - math.lgamma(n - first + 1)
                 + first * math.log(q) + (n - first) * math.log1p(-q))
    steps = np.log((n - ks[:-1]) / (ks[:-1] + 1)) + math.log(q) - math.log1p(-q)
    cdf = np.cumsum(np.exp(log_first + np.concatenate([[0.0], np.cumsum(steps)])))  # P(K <= k); P(K < first) ~ 0
    lower = first + int(np.count_nonzero(cdf <= tail))
    upper = first + int(np.count_nonzero(cdf < 1 - tail)) + 1
    return lower, min(upper, n + 1)


def percentile_interval(values: Iterable[float], q: float, level: float = LEVEL) -> tuple[float, float]:
    """(low, high): the `level` confidence interval of the q-quantile of `values` (NaN left out),
    from `rank_interval`; -inf or inf where the samples give no bound on that side, NaN for no
    samples."""
    return RankedSample(values, [q], level).intervals()[0]


def _samples(values: Iterable[float]) -> np.ndarray:
    """The values without NaN (the values themselves, not a copy, where there is none)."""
    data = np.asarray(values, dtype="float64")
    missing = np.isnan(data)
    return data[~missing] if missing.any() else data


class RankedSample:
    """One sample (NaN left out) with the order statistics that its percentiles and their
    confidence intervals need put in place by a single partial sort (`np.partition`, linear): a
    million values are neither sorted whole nor partitioned once for the percentiles and again
    for each interval. The percentiles come out as numpy's or pandas' own functions give them,
    to the last bit (`percentiles`, `grouped_percentiles`)."""

    def __init__(self, values: Iterable[float], quantiles: Iterable[float], level: float = LEVEL) -> None:
        data = _samples(values)
        self.n = int(data.size)
        self.quantiles = [float(q) for q in quantiles]
        self.ranks = [rank_interval(self.n, q, level) for q in self.quantiles]
        below = [int((self.n - 1) * q) for q in self.quantiles]  # the order statistics a percentile lies between
        needed = {r - 1 for pair in self.ranks for r in pair if 1 <= r <= self.n}
        needed |= {i for b in below for i in (b, b + 1) if i < self.n}
        self._placed = np.partition(data, sorted(needed)) if needed else data

    def percentiles(self) -> list[float]:
        """As `np.quantile(values, quantiles)` (its default linear interpolation, done its way:
        from the upper neighbour when the fraction is at least a half); NaN without samples."""
        return [self._numpy_linear(q) for q in self.quantiles]

    def grouped_percentiles(self) -> list[float]:
        """As pandas' `groupby(...).quantile(quantiles)` (linear interpolation, always from the lower
        neighbour: a + (b - a) * fraction); NaN without samples."""
        return [self._pandas_linear(q) for q in self.quantiles]

    def intervals(self) -> list[tuple[float, float]]:
        """Each quantile's `percentile_interval`: order statistics at `rank_interval`'s ranks."""
        if not self.n:
            return [(math.nan, math.nan)] * len(self.ranks)
        return [(self._at(lower - 1) if lower >= 1 else -math.inf, self._at(upper - 1) if upper <= self.n else math.inf)
                for lower, upper in self.ranks]

    def uncertainty(self, prefix: str = "") -> dict[str, float | bool]:
        """`percentile_uncertainty` of this sample."""
        columns: dict[str, float | bool] = {}
        enough: dict[str, float | bool] = {}
        for q, interval in zip(self.quantiles, self.intervals()):
            name = prefix + percentile_name(q)
            columns[f"{name}_ci_low"], columns[f"{name}_ci_high"] = interval
            enough[f"{name}_enough"] = enough_samples(self.n, q)
        return {**columns, **enough}

    def _at(self, index: int) -> float:
        return float(self._placed[index])

    def _numpy_linear(self, q: float) -> float:
        if not self.n:
            return math.nan
        virtual = (self.n - 1) * q
        below = math.floor(virtual)
        if virtual >= self.n - 1:  # numpy reads the last value from both sides (index -1)
            below, low, high = -1, self._at(-1), self._at(-1)
        else:
            low, high = self._at(below), self._at(below + 1)
        gamma = virtual - below
        diff = high - low
        return high - diff * (1 - gamma) if gamma >= 0.5 else low + diff * gamma

    def _pandas_linear(self, q: float) -> float:
        if not self.n:
            return math.nan
        position = q * (self.n - 1)
        below, fraction = int(position), position % 1
        low = self._at(below)
        return low if fraction == 0.0 else low + (self._at(below + 1) - low) * fraction


def samples_needed(q: float) -> int:
    """The fewest samples whose q-percentile estimates the distribution's tail: 1 / (1 - q), i.e.
    100 for p99, 10 for p90, 2 for p50. With fewer, less than one sample is expected above the
    quantile, so the interpolated value is the sample's maximum region (a p99 of 20 requests lies
    between the two largest), not a tail estimate."""
    return math.ceil(1 / (1 - q) - 1e-9)


def enough_samples(n: int, q: float) -> bool:
    """Whether a q-percentile of n samples rests on enough of them (`samples_needed`)."""
    return n >= samples_needed(q)


def percentile_uncertainty(values: Iterable[float], quantiles: Iterable[float], prefix: str = "",
                           level: float = LEVEL) -> dict[str, float | bool]:
    """For one sample, per quantile: `{prefix}p90_ci_low`, `{prefix}p90_ci_high`
    (`percentile_interval`) and `{prefix}p90_enough` (`enough_samples`), in that order of
    columns for all quantiles."""
    return RankedSample(values, quantiles, level).uncertainty(prefix)


def uncertainty_columns(quantiles: Iterable[float], prefix: str = "") -> list[str]:
    """The names `percentile_uncertainty` gives, in its order."""
    names = [prefix + percentile_name(q) for q in quantiles]
    return [f"{name}_ci_{end}" for name in names for end in ("low", "high")] + [f"{name}_enough" for name in names]
