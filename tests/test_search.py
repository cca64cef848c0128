"""The capacity search's judging and stepping (loadlib.modes.search), without Locust: a level's verdict
from its requests and their bootstrap range, and the levels a search tries against a server of
known capacity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadlib.modes.search import BROKE, CLOSE, FAILED, HELD, Judgement, Search, cell_name, judge, level_seed
from loadlib.profiles import Slo

TTFT_P90 = Slo(ttft_s=0.1, ttft_p=90)


def level(ttft: list[float] | np.ndarray, decode: float = 50.0, failed: int = 0) -> pd.DataFrame:
    """A level's records as `records_frame` has them: `ok`, `ttft_s`, `decode_tps`."""
    n = len(ttft) + failed
    return pd.DataFrame({"ok": [True] * len(ttft) + [False] * failed,
                         "ttft_s": list(ttft) + [np.nan] * failed, "decode_tps": [decode] * len(ttft) + [np.nan] * failed},
                        index=range(n))


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
