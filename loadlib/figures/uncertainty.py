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
    return _intervals(_samples(values), [q], level)[0]


def _samples(values: Iterable[float]) -> np.ndarray:
    data = np.asarray(values, dtype="float64")
    return data[~np.isnan(data)]


def _intervals(data: np.ndarray, quantiles: list[float], level: float) -> list[tuple[float, float]]:
    """Each quantile's interval: only the order statistics it needs are put in place
    (`np.partition`, linear), not the whole sample sorted."""
    n = int(data.size)
    if not n:
        return [(math.nan, math.nan)] * len(quantiles)
    ranks = [rank_interval(n, q, level) for q in quantiles]
    needed = sorted({r - 1 for pair in ranks for r in pair if 1 <= r <= n})
    placed = np.partition(data, needed) if needed else data
    return [(float(placed[lower - 1]) if lower >= 1 else -math.inf,
             float(placed[upper - 1]) if upper <= n else math.inf) for lower, upper in ranks]


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
    data, quantiles = _samples(values), list(quantiles)
    columns: dict[str, float | bool] = {}
    enough: dict[str, float | bool] = {}
    for q, interval in zip(quantiles, _intervals(data, quantiles, level)):
        name = prefix + percentile_name(q)
        columns[f"{name}_ci_low"], columns[f"{name}_ci_high"] = interval
        enough[f"{name}_enough"] = enough_samples(int(data.size), q)
    return {**columns, **enough}


def uncertainty_columns(quantiles: Iterable[float], prefix: str = "") -> list[str]:
    """The names `percentile_uncertainty` gives, in its order."""
    names = [prefix + percentile_name(q) for q in quantiles]
    return [f"{name}_ci_{end}" for name in names for end in ("low", "high")] + [f"{name}_enough" for name in names]


def block_resample_indices(rng: np.random.Generator, n: int, rows: int, block: int = 1,
                           circular: bool = False) -> np.ndarray:
    """`rows` block-bootstrap resamples of `range(n)` (rows x n): each row is ceil(n / block) runs
    of `block` consecutive indices, cut to n. Moving blocks start anywhere from 0 to n - block;
    `circular` blocks start anywhere and wrap past the end, so every index is as likely as any
    other. With `block` 1 both are the ordinary bootstrap (the draws of `rng.integers(0, n, (rows, n))`)."""
    block = min(max(block, 1), n)
    count = -(-n // block)
    starts = rng.integers(0, n if circular else n - block + 1, (rows, count))
    if block == 1:
        return starts
    index = (starts[:, :, None] + np.arange(block)).reshape(rows, count * block)[:, :n]
    return index % n if circular else index
