"""`panorama`: configurations x (same, different) per concurrency, and scaling against the first run."""

from __future__ import annotations

import pytest

from analysis.panorama import panorama
from tests.analysis.builders import build_record, build_run


def system(label, single_decode_time, cells):
    """A run with single-stream code decode 200/`single_decode_time` t/s and one round per cell;
    `cells` maps (N, case) to the decode time of each of the N streams (200 tokens each)."""
    records = [build_record(ttft_s=0.1, total_s=0.1 + single_decode_time, comp=201)]
    for (n, case), decode_time in cells.items():
        records += [build_record(f"c{n}-{case}", slot=slot, ttft_s=0.1, total_s=0.1 + decode_time, comp=201)
                    for slot in range(n)]
    return build_run(records, label)


def test_panorama_grid_has_one_row_per_configuration():
    instance = system("1 instance", 2.0, {(2, "same"): 2.0, (2, "different"): 4.0, (4, "same"): 4.0})
    router = system("2 instances", 2.0, {(8, "same"): 4.0, (8, "different"): 5.0})
    view = panorama([instance, router]).sections[0].view.set_index("run")
    assert list(view.columns) == ["1 stream code", "2 × same prompt (radix hit)", "2 × different prompts",
                                  "4 × same prompt (radix hit)", "8 × same prompt (radix hit)",
                                  "8 × different prompts"]
    assert view.loc["1 instance"].tolist() == ["100.0", "200.0", "100.0", "200.0", "-", "-"]
    assert view.loc["2 instances"].tolist() == ["100.0", "-", "-", "-", "400.0", "320.0"]


def test_scaling_compares_each_runs_top_concurrency_with_the_first_runs():
    instance = system("one", 2.0, {(4, "same"): 4.0, (4, "different"): 5.0})  # 200 and 160 t/s
    pair = system("two", 2.0, {(8, "same"): 4.0, (8, "different"): 5.0})  # 400 and 320 t/s
    data = panorama([instance, pair]).sections[1].data.set_index("comparison")
    assert data.loc["two vs one: 1 stream code decode", "ratio"] == pytest.approx(1.0)
    row = data.loc["two c8 vs one c4: same prompt (radix hit)"]
    assert (row["ratio"], row["linear"], row["efficiency"]) == pytest.approx((2.0, 2.0, 1.0))
    assert data.loc["two c8 vs one c4: different prompts", "ratio"] == pytest.approx(2.0)
