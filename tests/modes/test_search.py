"""The capacity search's judging and stepping (loadlib.modes.search), without Locust: a level's verdict
from its requests and their bootstrap range, the levels a search tries against a server of
known capacity, and what its section says (loadlib.report.search)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadlib.figures.capacity import LEVEL_COLUMNS, level_seed
from loadlib.figures.goodput import Slo
from loadlib.modes.search import BROKE, CLOSE, FAILED, HELD, Judgement, Search, cell_name, judge
from loadlib.report.search import search_section

TTFT_P90 = Slo(ttft_s=0.1, ttft_p=90)


def level(ttft: list[float] | np.ndarray, decode: float = 50.0, failed: int = 0) -> pd.DataFrame:
    """A level's records as `records_frame` has them: `ok`, `ttft_s`, `decode_tps`, and `queue_s`
    (none: closed-loop users have no schedule)."""
    n = len(ttft) + failed
    return pd.DataFrame({"ok": [True] * len(ttft) + [False] * failed,
                         "ttft_s": list(ttft) + [np.nan] * failed, "decode_tps": [decode] * len(ttft) + [np.nan] * failed,
                         "queue_s": np.nan}, index=range(n))


def test_a_level_well_under_its_ttft_percentile_holds_and_one_well_over_breaks():
    fast, slow = judge(level(np.linspace(0.01, 0.05, 60)), TTFT_P90), judge(level(np.linspace(0.1, 0.3, 60)), TTFT_P90)
    assert fast.verdict == HELD and fast.pass_share == 1.0
    assert fast.ttft_s == pytest.approx(np.quantile(np.linspace(0.01, 0.05, 60), 0.9))
    assert fast.ttft_low <= fast.ttft_s <= fast.ttft_high
    assert slow.verdict == BROKE and slow.pass_share == 0.0


def test_a_level_whose_percentile_sits_on_the_target_is_too_close_to_call():
    ttft = np.r_[np.full(54, 0.05), np.full(6, 0.2)]  # p90 on the edge between the two groups
    verdict = judge(level(ttft), Slo(ttft_s=0.1, ttft_p=90))
    assert verdict.verdict == CLOSE and 0.1 < verdict.pass_share < 0.9
    assert verdict.ttft_low < 0.1 < verdict.ttft_high  # the range says why


def test_a_level_of_too_few_requests_for_its_percentile_does_not_hold_however_fast_they_were():
    # 2 requests under the target: every resample passes, but a p90 of 2 is their maximum, not a tail
    few = judge(level([0.01, 0.02]), TTFT_P90)
    assert few.pass_share == 1.0 and few.verdict == CLOSE and few.n == 2
    assert "too few requests to hold: the SLO's percentiles need 10" in few.reason
    assert judge(level(np.full(10, 0.01)), TTFT_P90).verdict == HELD
    assert judge(level(np.full(9, 0.01)), Slo(decode_tps=20, decode_p=90)).verdict == CLOSE  # its slow tail: p10
    assert judge(level([0.5, 0.6]), TTFT_P90).verdict == BROKE  # both over: broken, however few
    assert judge(level([0.01, 0.02]), Slo(ttft_s=0.1, goodput=0.5)).verdict == HELD  # a share, no percentile


def test_any_failed_request_fails_the_level():
    assert judge(level(np.full(40, 0.01), failed=1), TTFT_P90).verdict == FAILED


def test_decode_is_judged_on_its_slow_tail_and_goodput_on_the_share_meeting_both_targets():
    decode = Slo(decode_tps=20, decode_p=90)
    frame = level(np.full(50, 0.01)).assign(decode_tps=np.r_[np.full(40, 30.0), np.full(10, 10.0)])
    judged = judge(frame, decode)
    assert judged.decode_p == 90 and judged.decode_tps < 20 and judged.verdict == BROKE  # 20 % decode below 20 t/s
    goodput = Slo(ttft_s=0.1, decode_tps=20, goodput=0.6)
    judged = judge(frame, goodput)
    assert judged.goodput == pytest.approx(0.8) and judged.verdict == HELD
    assert judge(frame, Slo(ttft_s=0.1, decode_tps=20, goodput=0.95)).verdict == BROKE


def test_the_bootstrap_is_seeded_by_the_level_so_a_recomputation_agrees():
    frame = level(np.random.default_rng(3).uniform(0, 0.12, 40))
    seed = level_seed(("search-u2", "search-u2-r2"))
    assert judge(frame, TTFT_P90, seed) == judge(frame, TTFT_P90, seed)


def verdict(value: float, capacity: float, close: tuple[float, ...] = ()) -> Judgement:
    name = CLOSE if value in close else HELD if value <= capacity else BROKE
    return Judgement(10, 0, 90, 0.1, 0.1, 0.1, 90, 1, 1, 1, None, None, None, 0.5, name)


def run_search(search: Search, capacity: float, close: tuple[float, ...] = ()) -> list[str]:
    """The cells the search runs against a server that holds up to `capacity`."""
    cells = []
    while (step := search.next_step()) is not None:
        cells.append(step.cell)
        search.record(step, verdict(step.value, capacity, close))
    return cells


def test_users_double_until_the_slo_breaks_then_bisect_to_adjacent_levels():
    search = Search("users", 1, top=16)
    assert run_search(search, capacity=5) == ["search-u1", "search-u2", "search-u4", "search-u8", "search-u6",
                                              "search-u5"]
    assert search.best == 5 and search.first_bad == 6 and search.stopped.startswith("bracketed")


def test_the_search_stops_at_the_top_and_says_the_capacity_may_be_higher():
    search = Search("users", 1, top=6)
    assert run_search(search, capacity=100) == ["search-u1", "search-u2", "search-u4", "search-u6"]
    assert search.best == 6 and "the capacity may be higher" in search.stopped


def test_a_first_level_that_does_not_hold_ends_the_search_with_no_capacity():
    search = Search("users", 2, top=8)
    assert run_search(search, capacity=1) == ["search-u2"]
    assert search.best is None and "start lower" in search.stopped


def test_when_one_user_does_not_hold_the_search_says_there_is_no_lower_level_to_try():
    search = Search("users", 1, top=8)
    assert run_search(search, capacity=0) == ["search-u1"]
    assert search.best is None and "start lower" not in search.stopped
    assert "none lower" in search.stopped and "loosen the SLO" in search.stopped


def test_a_first_level_too_close_to_call_asks_for_more_requests_not_a_looser_slo():
    search = Search("users", 1, top=8, repeats=1)
    assert run_search(search, capacity=8, close=(1,)) == ["search-u1", "search-u1-r2"]
    assert search.best is None and "too close to call" in search.stopped and "duration_s" in search.stopped
    assert "loosen the SLO" not in search.stopped


def test_a_close_level_runs_again_and_still_close_counts_as_not_held():
    search = Search("users", 1, top=8, repeats=1)
    cells = run_search(search, capacity=8, close=(4,))
    assert cells == ["search-u1", "search-u2", "search-u4", "search-u4-r2", "search-u3"]
    assert search.best == 3
    result = search.result(TTFT_P90)
    assert result["too_close"] == [4]
    four = next(row for row in result["levels"] if row["value"] == 4)
    assert four["cells"] == ["search-u4", "search-u4-r2"] and four["runs"] == 2 and four["verdict"] == CLOSE


def test_a_rate_search_bisects_until_the_bracket_is_within_its_precision():
    search = Search("rate", 2, top=64, precision=0.1)
    run_search(search, capacity=13)
    good, bad = search.best, search.first_bad
    assert good <= 13 < bad and bad - good <= 0.1 * good
    assert [row["value"] for row in search.result(TTFT_P90)["levels"]][:5] == [2, 4, 8, 16, 12]


def test_level_cells_name_the_variable_and_the_run():
    assert cell_name("users", 4) == "search-u4"
    assert cell_name("rate", 12.5) == "search-12.5rps"
    assert cell_name("rate", 12, 2) == "search-12rps-r2"


def searched(levels: list[tuple[float, str, float]], variable: str = "users") -> dict:
    """A manifest whose search tried `levels` (value, verdict, share of single-request resamples)."""
    search = Search(variable, levels[0][0], top=64)
    for value, name, share in levels:
        step = search.next_step()
        assert step is not None and step.value == value
        search.record(step, Judgement(40, 0, 90, 0.1, 0.08, 0.12, 90, 30, 25, 35, None, None, None, share, name))
    search.next_step()  # says why it stopped, if it did
    return {"search": search.result(Slo(ttft_s=0.1, ttft_p=90))}


def levels_table(rows: list[dict], users: bool = True) -> pd.DataFrame:
    """`capacity.level_table` rows: the moving-block share, delivered req/s (x, with its interval
    `low`-`high` in a rate search), mean latency (w) and Little's law with its `gap`."""
    table = []
    for row in rows:
        rate = row["x"] if users else row["value"]  # Little's lambda: the throughput, or the rate offered
        expected = rate * row["w"]
        held = expected / (1 + row["gap"])  # the users, or the mean in flight measured
        low, high = row.get("low", np.nan), row.get("high", np.nan)
        table.append({"value": row["value"], "n": 40, "block": 3, "resamples": 1000, "pass_share_blocks": row["blocks"],
                      "window_s": 10.0, "delivered_rps": row["x"], "delivered_low_rps": low, "delivered_high_rps": high,
                      "arrived_rps": np.nan if users else row["value"],
                      "short": None if np.isnan(high) else row["value"] > high,
                      "latency_middle_s": row["w"], "latency_last_s": row["w"] * (1 + row["gap"]),
                      "throughput_rps": row["x"],
                      "latency_s": row["w"],
                      "in_flight": held, "little_in_flight": held, "little_rate_rps": rate,
                      "little_expected_in_flight": expected, "little_gap": row["gap"],
                      "little_holds": abs(row["gap"]) <= 0.1})
    return pd.DataFrame(table, columns=LEVEL_COLUMNS)


def test_the_section_says_where_the_search_holds_and_breaks_with_resample_shares_and_requests_per_second():
    manifest = searched([(1, HELD, 1.0), (2, HELD, 0.99), (4, BROKE, 0.0), (3, BROKE, 0.05)])
    levels = levels_table([{"value": 1, "x": 2.0, "w": 0.5, "gap": 0.0, "blocks": 1.0},
                           {"value": 2, "x": 4.0, "w": 0.5, "gap": 0.01, "blocks": 0.97},
                           {"value": 4, "x": 4.6, "w": 0.87, "gap": -0.02, "blocks": 0.0},
                           {"value": 3, "x": 4.5, "w": 0.567, "gap": -0.15, "blocks": 0.04}])
    section = search_section(manifest, levels)
    assert section.title.startswith("Capacity search over closed-loop users: holds at 2 users, 4.00 req/s delivered "
                                    "(SLO met in 97% of resamples); breaks at 3 users, 4.50 req/s delivered "
                                    "(SLO met in 4% of resamples); Little's law: ok at 2 users; at 3 users 4.50 req/s "
                                    "x 0.567 s = 2.55 in flight, 15% fewer than its 3 users (the streams sat idle")
    assert "bracketed: 2 users held, 3 users did not" in section.title
    view = section.view.set_index("users")
    assert view.loc["2", "delivered req/s"] == "4.00" and view.loc["2", "in blocks"] == "97%"
    assert view.loc["2", "SLO met in"] == "99%" and view.loc["2", "Little"] == "ok"
    assert view.loc["3", "Little"] == "-15%"
    data = section.data.set_index("value")  # what JSON and CSV carry
    assert data.loc[3, "pass_share_blocks"] == 0.04 and data.loc[3, "delivered_rps"] == 4.5
    assert data.loc[3, "little_gap"] == -0.15 and not data.loc[3, "little_holds"] and data.loc[2, "pass_share"] == 0.99


def test_a_rate_search_reads_in_offered_and_delivered_requests_per_second_and_says_when_nothing_broke():
    manifest = searched([(2, HELD, 1.0), (4, HELD, 0.95)], variable="rate")
    manifest["search"]["bracket"] = [4, None]
    levels = levels_table([{"value": 2, "x": 2.0, "w": 0.2, "gap": 0.0, "blocks": 1.0, "low": 1.1, "high": 3.2},
                           {"value": 4, "x": 3.9, "w": 0.3, "gap": 0.0, "blocks": 0.93, "low": 2.9, "high": 5.1}],
                          users=False)
    section = search_section(manifest, levels)
    assert ("over the open-loop rate: holds at 4 req/s: delivered 3.90 req/s of 4 offered (2.90–5.10), SLO met "
            "in 93% of resamples; no level broke; Little's law: ok at 4 req/s (") in section.title
    assert "the last third above the middle beyond both is short of the offered rate beyond the noise" in section.title
    assert section.view.set_index("req/s").loc["4", "delivered req/s"] == "3.90 (2.90–5.10)"


def test_a_rate_level_that_fell_short_says_so_with_its_interval():
    manifest = searched([(8, HELD, 1.0), (16, BROKE, 0.0)], variable="rate")
    levels = levels_table([{"value": 8, "x": 8.0, "w": 0.1, "gap": 0.0, "blocks": 1.0, "low": 6.1, "high": 10.2},
                           {"value": 16, "x": 9.6, "w": 0.9, "gap": 0.66, "blocks": 0.0, "low": 8.0, "high": 11.4}],
                          users=False)
    title = search_section(manifest, levels).title
    assert ("holds at 8 req/s: delivered 8.00 req/s of 8 offered (6.10–10.20), SLO met in 100% of resamples; "
            "breaks at 16 req/s: delivered 9.60 req/s of 16 offered (8.00–11.40; short of it: latency from the intended "
            "send 0.90 s, then 1.49 s), SLO met in 0% of resamples; Little's law: ok at 8 req/s; at 16 req/s 16.00 "
            "req/s offered x 0.900 s = 14.40 in flight, 66% more than the 8.67 measured (the requests ended more slowly "
            "than they were offered") in title


def test_no_search_in_the_manifest_is_an_empty_section():
    assert search_section({}, pd.DataFrame(columns=LEVEL_COLUMNS)).data.empty
