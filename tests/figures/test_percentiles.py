"""Honest percentiles: each comes with its n and a distribution-free 95 % confidence interval
(`loadlib.figures.uncertainty`, checked against known answers and on samples whose true
percentile is known), and one resting on too few samples is marked, never shown bare."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.report import run_report
from loadlib.figures import free_running, protocol_tables
from loadlib.figures.uncertainty import (RankedSample, enough_samples, percentile_interval, percentile_uncertainty,
                                         rank_interval, samples_needed, uncertainty_columns)
from loadlib.outputs import json as json_format
from loadlib.record_table import records_frame
from loadlib.report.summary import render_summary
from tests.analysis.builders import build_record, build_run

T0 = 1_700_000_000.0


# --- the interval on ranks ------------------------------------------------------------------------

@pytest.mark.parametrize(("n", "q", "ranks"), [
    (10, 0.5, (2, 9)),  # the textbook median intervals (Conover, Practical Nonparametric Statistics)
    (20, 0.5, (6, 15)),
    (100, 0.5, (40, 61)),
    (100, 0.9, (84, 96)),
    (100, 0.1, (5, 17)),  # the mirror of p90: 101 - 96, 101 - 84
    (1000, 0.99, (983, 997)),
])
def test_the_ranks_bracketing_a_percentile_are_the_binomial_ones(n, q, ranks):
    assert rank_interval(n, q) == ranks


@pytest.mark.parametrize(("q", "first_bounded"), [(0.5, 6), (0.9, 36), (0.99, 368)])
def test_too_few_samples_leave_the_interval_open_above(q, first_bounded):
    """The largest of n samples is below the true q-quantile with probability q^n: it bounds the
    quantile at 95 % only once q^n <= 2.5 % (0.5^6, 0.9^36, 0.99^368)."""
    below = first_bounded - 1
    assert rank_interval(below, q)[1] == below + 1 and rank_interval(first_bounded, q)[1] <= first_bounded


def test_a_median_of_five_has_no_bound_at_all():
    assert rank_interval(5, 0.5) == (0, 6)
    assert percentile_interval([0.1, 0.2, 0.3, 0.5, 0.7], 0.5) == (-math.inf, math.inf)


def test_the_interval_is_read_off_the_sorted_sample_and_skips_missing_values():
    values = np.random.default_rng(0).permutation(np.arange(1.0, 101.0))
    assert percentile_interval(np.append(values, np.nan), 0.5) == (40.0, 61.0)
    assert math.isnan(percentile_interval([], 0.5)[0])


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_the_interval_covers_a_known_percentile_95_percent_of_the_time(q):
    """Exponential samples (true q-quantile -ln(1 - q)), 1000 samples of 400 each: the interval
    holds the truth in about 95 % of them (at least 95 % by construction, a little more since
    ranks are whole numbers), an open end counting as holding it."""
    rng = np.random.default_rng(7)
    truth = -math.log(1 - q)
    held = [low <= truth <= high for low, high in
            (percentile_interval(rng.exponential(size=400), q) for _ in range(1000))]
    assert 0.93 <= np.mean(held) <= 0.99


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 99, 100, 101, 368, 1001, 20_000])
def test_one_partial_sort_gives_numpys_and_pandas_percentiles_to_the_last_bit(n):
    """`RankedSample` reads the percentiles off the order statistics it put in place for the
    intervals: they must be numpy's quantile (the steady-state tables) and pandas' grouped quantile
    (the TTFT tables) exactly, ties and whole-number positions included."""
    rng = np.random.default_rng(n)
    for values in (rng.gamma(4.0, 0.05, n), rng.integers(0, 4, n).astype(float), np.round(rng.normal(1, 0.3, n), 2)):
        sample = RankedSample(np.append(values, np.nan), (0.5, 0.9, 0.99))
        assert sample.n == n
        assert sample.percentiles() == np.quantile(values, (0.5, 0.9, 0.99)).tolist()
        grouped = pd.Series(values).groupby(np.zeros(n)).quantile([0.5, 0.9, 0.99])
        assert sample.grouped_percentiles() == grouped.tolist()
        assert sample.uncertainty() == percentile_uncertainty(values, (0.5, 0.9, 0.99))


def test_a_sample_without_values_has_no_percentiles():
    sample = RankedSample([np.nan], (0.5, 0.9))
    assert sample.n == 0 and all(math.isnan(v) for v in sample.percentiles() + sample.grouped_percentiles())


def test_a_percentile_needs_one_over_its_tail_samples():
    assert [samples_needed(q) for q in (0.5, 0.9, 0.99)] == [2, 10, 100]
    assert not enough_samples(99, 0.99) and enough_samples(100, 0.99)
    assert not enough_samples(9, 0.9) and enough_samples(10, 0.9)


def test_uncertainty_columns_per_percentile():
    assert percentile_uncertainty(np.arange(1.0, 101.0), (0.5, 0.99), prefix="ttfo_") == {
        "ttfo_p50_ci_low": 40.0, "ttfo_p50_ci_high": 61.0, "ttfo_p99_ci_low": 97.0, "ttfo_p99_ci_high": math.inf,
        "ttfo_p50_enough": True, "ttfo_p99_enough": True}


# --- in the tables and the summary ---------------------------------------------------------------

def single_cell(ttfts: list[float]) -> list[dict]:
    return [build_record(round=i, ttft_s=t, total_s=t + 1.0) for i, t in enumerate(ttfts)]


def test_the_protocols_percentiles_keep_the_threads_values_and_gain_their_uncertainty():
    df = records_frame(single_cell([0.1, 0.2, 0.3, 0.5, 0.7]))
    plain, honest = protocol_tables.ttft_percentiles(df), protocol_tables.ttft_percentiles_ci(df)
    assert honest[plain.columns].equals(plain)
    row = honest.loc["single"]
    assert (row["p90_ci_low"], row["p99_ci_low"]) == (0.3, 0.5)
    assert (bool(row["p50_enough"]), bool(row["p90_enough"]), bool(row["p99_enough"])) == (True, False, False)


def test_no_successful_request_leaves_the_ttft_tables_empty_with_their_columns():
    df = records_frame([build_record(error="http_500", ttft_s=None, total_s=0.2)])
    plain, honest = protocol_tables.ttft_percentiles(df), protocol_tables.ttft_percentiles_ci(df)
    assert plain.empty and list(plain.columns) == ["p50", "p90", "p99", "n"]
    assert honest.empty and list(honest.columns[4:]) == uncertainty_columns((0.5, 0.9, 0.99))
    assert str(honest["p90_ci_low"].dtype) == "float64"


def test_a_tail_percentile_on_too_few_samples_is_marked_with_a_footnote():
    text = render_summary(single_cell([0.1 * (i + 1) for i in range(20)]), {})
    ttft = next(part for part in text.split("\n\n") if part.startswith("TTFT percentiles"))
    title, header, row = ttft.splitlines()
    assert ("~ : fewer than 100 samples for p99, the value is the sample's maximum region, not a tail estimate"
            in title)
    assert header.split() == ["cell", "p50", "p90", "p99", "n", "p50", "CI", "p90", "CI", "p99", "CI"]
    # 20 values 0.1..2.0: the median between ranks 6 and 15; p90 (rank 15 up) and p99 (rank 19 up)
    # have no upper bound from 20 samples; p90 rests on enough (10), p99 not (100)
    assert row.split() == ["single", "1.050", "1.810", "1.981~", "20", "0.600–1.500", "≥", "1.500", "≥", "1.900"]


def test_a_percentile_on_enough_samples_reads_as_before_with_its_interval():
    text = render_summary(single_cell([0.001 * i for i in range(1, 401)]), {})
    ttft = next(part for part in text.split("\n\n") if part.startswith("TTFT percentiles"))
    assert "~" not in ttft and "no upper bound" not in ttft
    # 400 values 0.001..0.400: ranks (180, 221), (348, 372), (392, 400)
    assert ttft.splitlines()[2].split() == ["single", "0.201", "0.360", "0.396", "400", "0.180–0.221",
                                            "0.348–0.372", "0.392–0.400"]
    assert max(len(line) for line in ttft.splitlines()[1:]) <= 160


def test_json_has_each_percentiles_interval_and_whether_it_had_enough_samples():
    payload = json.loads(json_format.render_document(run_report([build_run(single_cell([0.1, 0.2, 0.3, 0.5, 0.7]))])))
    row = payload["tables"]["ttft_percentiles"][0]
    assert (row["p90"], row["p90_ci_low"], row["p90_ci_high"], row["p90_enough"]) == (pytest.approx(0.62), 0.3,
                                                                                      None, False)
    assert row["p99_enough"] is False and payload["ttft_percentiles"]["single"]["p99_ci_low"] == 0.5


def test_thinking_runs_show_ttfo_percentiles_with_theirs_in_a_table_of_their_own():
    records = [build_record(round=i, ttft_s=0.1, ttfo_s=1.0 + i / 10, total_s=3.0) for i in range(12)]
    document = run_report([build_run(records)])
    sections = {section.key: section for section in document.sections}
    ttfo = sections["ttfo_percentiles"]
    assert "TTFO = time to the first answer token after the reasoning" in ttfo.title
    assert list(ttfo.view.columns) == ["cell", "TTFO p50", "TTFO p90", "TTFO p99", "n", "p50 CI", "p90 CI", "p99 CI"]
    # 12 values 1.0..2.1: ranks (3, 10), (8, -) and (11, -); p90 of 12 rests on enough, p99 not
    assert ttfo.view.iloc[0].tolist() == ["single", "1.550", "1.990", "2.089~", "12", "1.200–1.900", "≥ 1.700",
                                          "≥ 2.000"]
    assert "ttfo_p50" not in sections["ttft_percentiles"].data


def test_steady_percentiles_carry_their_intervals():
    """One closed-loop stream of 50 back-to-back requests, all in the steady window."""
    ttfts = [0.1 + i / 1000 for i in range(50)]
    records = [build_record("closed", round=i, sent_at=T0 + i, ttft_s=t, total_s=1.0, concurrency=1, case="closed")
               for i, t in enumerate(ttfts)]
    table = free_running.steady_percentiles(records_frame(records)).set_index("figure")
    assert table.loc["ttft_s", "n"] == 50
    assert (table.loc["ttft_s", "p90_ci_low"], table.loc["ttft_s", "p90_ci_high"]) == percentile_interval(ttfts, 0.9)
    assert bool(table.loc["ttft_s", "p90_enough"]) and not bool(table.loc["ttft_s", "p99_enough"])
