"""The resampled SLO figures of a capacity level, in shards that any process can draw.

A level's `RESAMPLES` resamples (`loadlib.figures.bootstrap`) come in `SHARDS` shards, each drawn
from its own generator, seeded by the level's seed and the shard's number. A shard's figures
are then the same whichever process draws it and in whatever order: the master can hand the
shards of a level to its workers, idle between levels, and draw itself those no worker answered
(`loadlib.run.shared_resampling`), and a recomputation from the records (the report) draws them
all here and agrees to the bit. Nothing here needs pandas: a worker imports it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from loadlib.figures.bootstrap import RESAMPLES, resampled, resampled_quantiles, row_quantiles

SHARDS = 8  # a level's resamples, in this many shards (a worker draws one or more)

Resample = Callable[[np.ndarray, np.ndarray, np.ndarray, float, float, int], np.ndarray]
"""Draws a level's resampled statistics: (ttft, decode, meets, ttft_q, decode_q, seed) -> 3 x
`RESAMPLES`, as `resampled_statistics` does (which is one)."""


def slo_statistics(ttft: np.ndarray, decode: np.ndarray, meets: np.ndarray, ttft_q: float,
                   decode_q: float) -> np.ndarray:
    """Per row of (resampled) requests: TTFT's `ttft_q` quantile, decode's `decode_q` quantile
    (its slow tail) and the goodput share, as 3 x rows; NaN where a row has no value to take a
    quantile of (failures only)."""
    return np.vstack([row_quantiles(ttft, ttft_q), row_quantiles(decode, decode_q), meets.mean(axis=1)])


def shard_size(shard: int, resamples: int = RESAMPLES) -> int:
    """How many of the `resamples` the shard `shard` holds (the first ones one more where they
    do not divide evenly)."""
    return resamples // SHARDS + (shard < resamples % SHARDS)


def shard_statistics(ttft: np.ndarray, decode: np.ndarray, meets: np.ndarray, ttft_q: float, decode_q: float,
                     seed: int, shard: int, resamples: int = RESAMPLES, block: int = 1) -> np.ndarray:
    """`slo_statistics` of the shard `shard` of `resamples` resamples of the requests (3 x its
    size), by blocks of `block` requests in the order given (`bootstrap.resampled`), from a
    generator of its own (seeded by `seed` and `shard`); each resample's quantiles from the
    requests' ranks (`bootstrap.resampled_quantiles`: the same figures, in half the time)."""
    def statistics(index: list[np.ndarray]) -> np.ndarray:
        rows = index[0]
        return np.vstack([resampled_quantiles(ttft, rows, ttft_q), resampled_quantiles(decode, rows, decode_q),
                          meets[rows].mean(axis=1)])
    size = shard_size(shard, resamples)
    if not size:
        return np.empty((3, 0))
    return resampled(statistics, [len(ttft)], [block], np.random.default_rng([seed, shard]), size, widths=[3])


def resampled_statistics(ttft: np.ndarray, decode: np.ndarray, meets: np.ndarray, ttft_q: float, decode_q: float,
                         seed: int, resamples: int = RESAMPLES, block: int = 1) -> np.ndarray:
    """`slo_statistics` of `resamples` resamples of the requests (3 x resamples): every shard,
    drawn here, in shard order."""
    return np.concatenate([shard_statistics(ttft, decode, meets, ttft_q, decode_q, seed, shard, resamples, block)
                           for shard in range(SHARDS)], axis=1)
