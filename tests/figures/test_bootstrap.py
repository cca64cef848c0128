"""The one bootstrap (loadlib.figures.bootstrap): circular blocks of consecutive units, the ordinary
bootstrap at a block of one, a block length that follows a series' autocorrelation, and the
resampling done in chunks of bounded memory with the answer of one pass."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from loadlib.figures import bootstrap
from loadlib.figures.bootstrap import block_length, resample_indices, resampled, resampled_quantiles, row_quantiles


def test_circular_blocks_are_runs_of_consecutive_units_wrapping_past_the_end():
    drawn = resample_indices(np.random.default_rng(0), 10, 50, block=3)
    assert drawn.shape == (50, 10) and drawn.min() == 0 and drawn.max() == 9
    steps = np.diff(drawn[:, :9].reshape(50, 3, 3), axis=2)
    assert np.all((steps == 1) | (steps == -9))


def test_a_block_of_one_is_the_ordinary_bootstrap():
    ordinary = np.random.default_rng(5).integers(0, 10, (4, 10))
    assert (resample_indices(np.random.default_rng(5), 10, 4) == ordinary).all()


def test_an_independent_series_keeps_blocks_of_one_or_two_and_aligned_series_take_the_longest():
    rng = np.random.default_rng(3)
    independent = rng.normal(0, 1, 400)
    assert block_length(independent) <= 2
    assert block_length(np.arange(3.0)) == 1
    slow = np.repeat(rng.normal(0, 1, 20), 20)  # runs of 20 alike values
    assert block_length(slow) > 10 and block_length(independent, slow) == block_length(slow)
    assert block_length(np.full(50, 1.0)) == block_length(np.full(50, 0.05)) == 1  # no spread (0.05's mean rounds)


def test_chunks_bound_the_memory_and_every_resample_is_made(monkeypatch):
    values = np.arange(1000.0)
    mean = lambda index: values[index[0]].mean(axis=1)  # noqa: E731
    whole = resampled(mean, [1000], [1], np.random.default_rng(1), 300)
    monkeypatch.setattr(bootstrap, "CHUNK_VALUES", 1000 * 64)  # 64 resamples a chunk
    chunked = resampled(mean, [1000], [1], np.random.default_rng(1), 300)
    assert whole.shape == chunked.shape == (300,)
    assert abs(chunked.mean() - 499.5) < 2 and abs(whole.mean() - 499.5) < 2


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_each_rows_quantile_is_numpys_with_nan_left_out(q):
    rng = np.random.default_rng(7)
    values = rng.exponential(size=(200, 31))
    assert np.array_equal(row_quantiles(values, q), np.quantile(values, q, axis=1))
    values[rng.random(values.shape) < 0.3] = np.nan  # failed requests
    values[5] = np.nan  # a resample of failures only
    values[6, 1:] = np.nan  # one value
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = np.nanquantile(values, q, axis=1)
    assert np.array_equal(row_quantiles(values, q), expected, equal_nan=True)


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 0.97, 1.0])
def test_a_resamples_quantile_from_ranks_is_the_quantile_of_its_values_to_the_bit(q):
    rng = np.random.default_rng(11)
    for n, nan_share in ((1, 0.0), (2, 0.0), (37, 0.0), (400, 0.0), (37, 0.3), (400, 0.05), (5, 1.0)):
        values = np.round(rng.exponential(size=n), 2)  # ties among them
        values[rng.random(n) < nan_share] = np.nan  # failed requests
        rows = resample_indices(rng, n, 300)
        assert np.array_equal(resampled_quantiles(values, rows, q), row_quantiles(values[rows], q), equal_nan=True)
    wide = rng.exponential(size=70_000)  # more requests than a 16-bit integer's ranks hold
    rows = resample_indices(rng, len(wide), 3)
    assert np.array_equal(resampled_quantiles(wide, rows, q), np.quantile(wide[rows], q, axis=1))
