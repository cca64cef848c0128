"""Verdicts between two runs (`loadlib.figures.verdicts`), on synthetic samples whose truth is known:
a known shift is found and its interval holds it in about 95 % of data sets, no shift reads "not
distinguishable", an autocorrelated series gets a wider (honest) interval than an independent
bootstrap would give, and every headline figure has the sample it is computed from."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadlib.figures import verdicts
from loadlib.figures.bootstrap import block_length
from loadlib.figures.goodput import DEFAULT_SLO
from loadlib.figures.headline import headline_figures
from loadlib.figures.verdicts import HIGHER, LOWER, SAME, TOO_FEW, Sample, verdict
from loadlib.record_table import records_frame
from tests.analysis.builders import build_record, extended_run, free_running_records, profile_run, protocol_run

DATA_SETS = 40  # synthetic data sets per property; the bootstrap's own seed stays fixed


def normal_runs(seed, n, shift, sd=5.0):
    """Two runs of n independent samples around 100 and 100 * shift (true B/A - 1 = shift - 1)."""
    rng = np.random.default_rng(1000 + seed)
    return Sample.of(rng.normal(100, sd, n)), Sample.of(rng.normal(100 * shift, sd, n))


def holds(found, true_pct):
    return found.ci_low_pct <= true_pct <= found.ci_high_pct


@pytest.mark.parametrize("shift", [1.08, 1 / 1.08])
def test_a_known_shift_is_found_and_its_interval_holds_it_in_about_95_percent_of_data_sets(shift):
    found = [verdict(*normal_runs(seed, 30, shift)) for seed in range(DATA_SETS)]
    true_pct = (shift - 1) * 100
    assert sum(holds(v, true_pct) for v in found) >= 0.85 * DATA_SETS  # 95 % expected: 38 of 40
    assert sum(v.verdict == (HIGHER if shift > 1 else LOWER) for v in found) >= DATA_SETS - 1


def test_three_rounds_give_a_wide_interval_that_still_holds_the_truth():
    """The plain percentile bootstrap of 3 values is far too narrow; the expanded one is about as
    wide as their spread, so it holds the truth as often as it should and says few samples."""
    found = [verdict(*normal_runs(seed, 3, 1.08, sd=2.0)) for seed in range(DATA_SETS)]
    assert sum(holds(v, 8.0) for v in found) >= 0.85 * DATA_SETS
    assert all(v.few_samples and v.n_a == v.n_b == 3 for v in found)
    rounds_a, rounds_b = np.array([100.0, 102.0, 98.0]), np.array([108.0, 106.0, 110.0])
    one = verdict(Sample.of(rounds_a), Sample.of(rounds_b))
    spread = (rounds_b.min() / rounds_a.max() - 1) * 100, (rounds_b.max() / rounds_a.min() - 1) * 100
    assert one.ci_low_pct <= spread[0] + 1 and one.ci_high_pct >= spread[1] - 1  # about the whole spread
    assert one.verdict == HIGHER


def test_no_shift_reads_not_distinguishable():
    found = [verdict(*normal_runs(seed, 30, 1.0)) for seed in range(DATA_SETS)]
    assert sum(v.verdict == SAME for v in found) >= DATA_SETS - 3  # at most 5 % false alarms, 2 of 40
    assert sum(holds(v, 0.0) for v in found) >= 0.85 * DATA_SETS


def test_a_difference_within_one_percent_is_not_distinguishable_even_with_a_tight_interval():
    """Two runs of one configuration differ by a few tenths of a percent (their conditions are not
    all the same), often with an interval that excludes 0: not a difference to act on."""
    rng = np.random.default_rng(7)
    a, b = Sample.of(rng.normal(1000, 0.5, 10)), Sample.of(rng.normal(1005, 0.5, 10))  # +0.5 %
    found = verdict(a, b)
    assert found.ci_low_pct > 0 and found.verdict == SAME
    assert verdict(a, b, margin_pct=0.0).verdict == HIGHER


def ar1(rng, n, phi, mean):
    """An AR(1) series around `mean`: x_t = phi x_(t-1) + e_t, unit innovations, stationary start."""
    noise = rng.normal(0.0, 1.0, n)
    series = np.empty(n)
    series[0] = noise[0] / math.sqrt(1 - phi ** 2)
    for t in range(1, n):
        series[t] = phi * series[t - 1] + noise[t]
    return mean + series


def test_an_autocorrelated_series_gets_blocks_and_an_interval_wider_than_an_independent_bootstrap():
    """AR(1) with phi 0.8: the mean's variance is (1 + phi) / (1 - phi) = 9 times what independent
    samples would give, so a naive bootstrap's interval is about 3 times too narrow and misses the
    truth often; the block bootstrap's holds it about as often as it should."""
    block_held = naive_held = 0
    for seed in range(30):
        rng = np.random.default_rng(2000 + seed)
        a, b = ar1(rng, 400, 0.8, 100.0), ar1(rng, 400, 0.8, 108.0)
        blocked = verdict(Sample.of(a, block=block_length(a)), Sample.of(b, block=block_length(b)))
        naive = verdict(Sample.of(a), Sample.of(b))
        assert 8 <= block_length(a) <= 60
        assert blocked.ci_high_pct - blocked.ci_low_pct > 1.8 * (naive.ci_high_pct - naive.ci_low_pct)
        block_held += holds(blocked, 8.0)
        naive_held += holds(naive, 8.0)
    assert block_held >= 26  # 95 % expected: 28.5 of 30 (29 here)
    assert naive_held <= 24  # about 2 in 3 (20 here)


def test_fewer_than_two_samples_on_either_side_is_too_few_samples():
    found = verdict(Sample.of([100.0]), Sample.of([110.0, 111.0, 109.0]))
    assert found.verdict == TOO_FEW and found.diff_pct == pytest.approx(10.0)
    assert math.isnan(found.ci_low_pct) and math.isnan(found.ci_high_pct)
    assert (found.n_a, found.n_b, found.reason) == (1, 3, "fewer than 2 samples")


def test_a_p99_from_fewer_than_100_values_is_too_few_samples():
    rng = np.random.default_rng(4)
    few = verdict(*(Sample.of(rng.exponential(1, 60), verdicts.quantile(0.99), min_values=100) for _ in range(2)))
    enough = verdict(*(Sample.of(rng.exponential(1, 400), verdicts.quantile(0.99), min_values=100) for _ in range(2)))
    assert few.verdict == TOO_FEW and few.reason == "60 values where it needs 100"
    assert enough.verdict in (SAME, HIGHER, LOWER) and not math.isnan(enough.ci_low_pct)


def test_the_same_samples_always_give_the_same_interval():
    a, b = normal_runs(0, 12, 1.03)
    assert verdict(a, b) == verdict(a, b)
    assert verdict(a, b, seed=1) != verdict(a, b)


def test_the_t_quantile_is_close_to_the_tables():
    assert verdicts.t_quantile(0.975, 2) == pytest.approx(4.303, rel=0.01)
    assert verdicts.t_quantile(0.975, 9) == pytest.approx(2.262, rel=0.001)
    assert verdicts.t_quantile(0.975, 29) == pytest.approx(2.045, rel=0.001)


def scheduled_run():
    """A trace replay whose client fell behind: every third request waited 1.5 s for a free user, so
    its TTFT from the intended send misses the 2 s SLO although its TTFT from the send meets it."""
    t0 = 1_700_000_000.0
    return [build_record("trace", sent_at=t0 + i * 0.5, ttft_s=0.8, total_s=2.0 + (i % 4) * 0.5, comp=151,
                         queue_s=1.5 if i % 3 == 0 else 0.0, concurrency=4, case="trace") for i in range(40)]


@pytest.mark.parametrize("records", [protocol_run, extended_run, free_running_records, profile_run, scheduled_run])
def test_every_headline_figure_has_its_sample_and_the_sample_gives_the_figure(records):
    df = records_frame(records())
    figures = headline_figures(df, DEFAULT_SLO).set_index("figure")["value"]
    samples = verdicts.headline_samples(df, DEFAULT_SLO)
    assert set(samples) <= set(figures.index)
    for figure, value in figures.dropna().items():
        assert samples[figure].sample.value == pytest.approx(value, rel=1e-9), figure


def test_a_concurrency_cell_is_resampled_by_round_and_counts_rounds():
    samples = verdicts.headline_samples(records_frame(protocol_run()), DEFAULT_SLO)
    assert samples["c2-same aggregate t/s (protocol)"].sample.n == 2  # rounds, not the 4 streams
    assert samples["c2-different aggregate t/s (protocol)"].sample.n == 1  # round 1 lost a stream
    assert samples["c2-same TTFT p50 s"].sample.groups[0].shape == (2, 2)  # 2 rounds of 2 streams
    assert samples["c2-same overlap vs single-stream decode x"].cell == "c2-same"


def test_verdicts_table_compares_the_figures_both_runs_have():
    a = verdicts.headline_samples(records_frame(protocol_run()), DEFAULT_SLO)
    b = verdicts.headline_samples(records_frame(protocol_run()[:6]), DEFAULT_SLO)  # single stream only
    table = verdicts.verdicts_table(a, b).set_index("figure")
    assert list(table.columns) == verdicts.VERDICT_COLUMNS[1:]
    assert set(table.index) == set(b) & set(a)
    row = table.loc["code decode t/s"]
    assert (row["a"], row["b"], row["diff_pct"], row["verdict"]) == (pytest.approx(203.33, abs=0.01),
                                                                     pytest.approx(203.33, abs=0.01), 0.0, SAME)


def test_the_servers_accept_length_is_judged_from_the_requests_that_carry_its_account():
    def spec(steps, accepted, sent_at):
        return build_record("single", "code", sent_at=sent_at, spec_verify_steps=steps, spec_accepted_tokens=accepted)
    # 10 steps keep 40 drafts, 30 keep 30: (110) / 40 = 2.75 tokens a step, each step weighed once
    a = verdicts.headline_samples(records_frame([spec(10, 40, 1.0), spec(30, 30, 2.0), build_record(sent_at=3.0)]),
                                  DEFAULT_SLO)
    sample = a["code accept length (server)"].sample
    assert sample.n == 2 and sample.value == pytest.approx(2.75)
    b = verdicts.headline_samples(records_frame([spec(10, 10, float(t)) for t in range(12)]), DEFAULT_SLO)
    found = verdicts.verdicts_table({k: v for k, v in a.items() if "accept" in k},
                                    {k: v for k, v in b.items() if "accept" in k})
    [row] = found.to_dict("records")
    assert row["b"] == 2.0 and row["diff_pct"] == pytest.approx((2.0 / 2.75 - 1) * 100)
    assert row["verdict"] == verdicts.SAME  # two requests that disagree (5.0 and 2.0 a step): no telling
    assert "accept length" not in " ".join(verdicts.headline_samples(records_frame([build_record()]), DEFAULT_SLO))
