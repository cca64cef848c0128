"""The bootstrap, once: every judgement that resamples its data (compare's verdicts,
`loadlib.figures.verdicts`; a capacity search's levels, `loadlib.figures.capacity`) resamples it
here, with one number of resamples, one scheme, one rule for the block length of a series and one
loop that bounds the memory it holds. The confidence level is `uncertainty.LEVEL`, the one every
interval of the tool states.

The scheme is the circular block bootstrap (Politis & Romano 1992): a resample of n units is
ceil(n / block) runs of `block` consecutive units from uniform starting points, wrapping past the
end, cut to n, so that every unit is as likely as any other; with block 1 it is the ordinary
bootstrap. Consecutive units stay together, so that a series' autocorrelation (a slow request holds
back the next ones; a queue builds up for a while; load comes in waves) widens an interval as it
should instead of passing for more evidence than there is.

The block length (`block_length`) is Politis & White's (2004) optimal length for the mean of an
AR(1) series, (6n)^(1/3) (rho / (1 - rho^2))^(2/3), rho the lag-1 autocorrelation: 1 for a series
whose neighbours do not move together, longer the more they do, at most a `MIN_BLOCKS`th of the
series so that a resample still mixes several blocks.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

RESAMPLES = 2000  # resamples of every bootstrap: enough for the tails of an expanded 95 % interval
CHUNK_VALUES = 2_000_000  # resampled values held at once (a long trace: 2000 x 10,000 requests)
MIN_BLOCKS = 4  # a block is at most a quarter of the series: a resample must mix several
MAX_RHO = 0.99

Statistic = Callable[[list[np.ndarray]], np.ndarray]
"""Figures of a chunk of resamples: given one (rows x n) index array per group of units, one value
per row (or k values per row, k x rows)."""


def resample_indices(rng: np.random.Generator, n: int, rows: int, block: int = 1) -> np.ndarray:
    """`rows` circular-block resamples of `range(n)` (rows x n), blocks of `block` (see the
    module's doc). With block 1, the draws of `rng.integers(0, n, (rows, n))`."""
    block = min(max(block, 1), n)
    count = -(-n // block)
    starts = rng.integers(0, n, (rows, count))
    if block == 1:
        return starts
    index = (starts[:, :, None] + np.arange(block)).reshape(rows, count * block)[:, :n]
    return index % n


def resampled(statistic: Statistic, sizes: Sequence[int], blocks: Sequence[int], rng: np.random.Generator,
              resamples: int = RESAMPLES, widths: Sequence[int] = ()) -> np.ndarray:
    """`statistic` over `resamples` resamples of groups of `sizes` units, each resampled in its own
    block length (`blocks`) from `rng`, group after group, a chunk of resamples at a time so that
    at most `CHUNK_VALUES` values (`widths`: a unit's of each group, default 1) are held; the
    chunks' figures joined along their last axis."""
    held = max((n * width for n, width in zip(sizes, [*widths] or [1] * len(sizes))), default=1)
    chunk = max(1, CHUNK_VALUES // max(held, 1))
    parts = []
    for start in range(0, resamples, chunk):
        count = min(chunk, resamples - start)
        parts.append(statistic([resample_indices(rng, n, count, block) for n, block in zip(sizes, blocks)]))
    return np.concatenate(parts, axis=-1)


def block_length(*series: np.ndarray) -> int:
    """The block length for resampling these aligned series together (see the module's doc): the
    longest any of them needs (NaN left out of each one's autocorrelation; a negative one counts as
    none, where independent resampling is already on the safe side)."""
    return max((_series_block(np.asarray(values, dtype="float64")) for values in series), default=1)


def _series_block(values: np.ndarray) -> int:
    n = len(values)
    present = values[~np.isnan(values)]
    if len(present) < 4 or present.min() == present.max():  # a constant series: its mean's rounding is no spread
        return 1
    centred = present - present.mean()
    spread = float(centred @ centred)
    if spread <= 0:
        return 1
    rho = min(max(float(centred[1:] @ centred[:-1]) / spread, 0.0), MAX_RHO)
    length = round((6 * n) ** (1 / 3) * (rho / (1 - rho ** 2)) ** (2 / 3))
    return int(min(max(length, 1), max(1, n // MIN_BLOCKS)))


def row_quantiles(values: np.ndarray, q: float) -> np.ndarray:
    """Each row's `q` quantile (a resample's figure), NaN left out, NaN for a row of NaN only: what
    `np.nanquantile(values, q, axis=1)` gives, without its loop over the rows (which made a capacity
    level's judgement cost the master most of a second)."""
    if not np.isnan(values).any():
        return np.quantile(values, q, axis=1)
    ordered = np.sort(values, axis=1)  # NaN sorts last
    return _interpolated(lambda at: np.take_along_axis(ordered, at[:, None], axis=1)[:, 0],
                         (~np.isnan(values)).sum(axis=1), q)


def resampled_quantiles(values: np.ndarray, rows: np.ndarray, q: float) -> np.ndarray:
    """`row_quantiles(values[rows], q)`, to the bit: the `q` quantile of each resample of `values`
    (`rows`: a row of indices per resample), found from the values' ranks. Up to 65,536 values the
    ranks are 16-bit integers, which numpy sorts by radix, in a fraction of the time it takes to
    partition the floats (the level's judgement spent most of its time there); each row's order
    statistics are then looked up."""
    n = len(values)
    order = np.argsort(values, kind="stable")  # NaN last
    small = n <= np.iinfo(np.uint16).max + 1
    rank = np.empty(n, dtype=np.uint16 if small else np.int32)
    rank[order] = np.arange(n)
    ranks = rank[rows]
    ranks.sort(axis=1, kind="stable" if small else None)  # "stable": a radix sort for 16-bit integers
    ordered = values[order]
    present = n - int(np.isnan(values).sum())  # the ranks of values that are not NaN: below this
    count = np.full(len(ranks), ranks.shape[1]) if present == n else (ranks < present).sum(axis=1)
    return _interpolated(lambda at: ordered[np.take_along_axis(ranks, at[:, None], axis=1)[:, 0]], count, q)


def _interpolated(value_at: Callable[[np.ndarray], np.ndarray], count: np.ndarray, q: float) -> np.ndarray:
    """Each row's `q` quantile of its `count` values (NaN for none) given `value_at`, its values at
    sorted positions: linear between the two around position (count - 1) q, in numpy's own
    arithmetic (`np.quantile`'s, which takes the far end's side past the middle), so the figure is
    numpy's to the bit however its order statistics were found."""
    last = np.maximum(count - 1, 0)
    position = q * last
    low = np.floor(position).astype(np.int64)
    high = np.minimum(low + 1, last)
    below, above = value_at(low), value_at(high)
    gamma = position - low
    step = above - below
    with np.errstate(invalid="ignore"):
        between = np.where(gamma >= 0.5, above - step * (1 - gamma), below + step * gamma)
        return np.where(count > 0, between, np.nan)
