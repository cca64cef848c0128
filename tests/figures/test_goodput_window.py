"""Goodput and SLO attainment of a free-running cell judge one set of requests: those sent within
its steady window (`free_running.steady_requests`), on hand-made closed-loop records."""

from __future__ import annotations

import numpy as np
import pytest

from loadlib.figures import free_running
from loadlib.record_table import records_frame
from tests.analysis.builders import build_record, free_running_records

T0 = 1_700_000_000.0
SLO = {"slo_ttft_s": 0.5, "slo_decode_tps": 20.0}


def burst_start(fast: set[tuple[int, int]]) -> list[dict]:
    """Two closed-loop streams, three 2 s requests each; stream 1 starts 0.1 ms after stream 0, so
    the steady window (two in flight) is [0.0001, 6.0]: stream 0's first request is sent before it
    and stream 1's last ends after it. Requests (stream, turn) in `fast` have TTFT 0.2 s (within
    the SLO), the others 1.0 s; all decode at 100 t/s."""
    return [build_record("closed", round=turn, slot=slot, sent_at=T0 + 2.0 * turn + 0.0001 * slot,
                         ttft_s=0.2 if (slot, turn) in fast else 1.0, total_s=2.0,
                         comp=181 if (slot, turn) in fast else 101, concurrency=2, case="closed")
            for slot in (0, 1) for turn in range(3)]


def steady_row(records: list[dict], **slo: float):
    return free_running.steady_state_table(records_frame(records), **slo).iloc[0]


def test_steady_window_starts_at_the_second_send_of_a_burst():
    row = steady_row(burst_start(set()))
    assert (row["window_start_s"], row["window_s"]) == pytest.approx((0.0001, 5.9999), abs=1e-6)  # epoch floats


def test_a_request_sent_before_the_window_counts_in_neither_goodput_nor_slo_attainment():
    """The issue's row: the first send ran alone and met the SLO, every request of the window
    missed it; goodput was 1/6 req/s beside "SLO met 0 %"."""
    row = steady_row(burst_start({(0, 0)}), **SLO)
    assert row["n"] == 5 and row["slo_attainment"] == 0.0
    assert row["goodput_rps"] == 0.0


def test_a_request_sent_in_the_window_counts_in_goodput_however_late_it_ends():
    row = steady_row(burst_start({(1, 2)}), **SLO)  # sent at 4.0001, ends at 6.0001
    assert row["n"] == 5 and row["slo_attainment"] == pytest.approx(1 / 5)
    assert row["goodput_rps"] == pytest.approx(1 / 5.9999)


@pytest.mark.parametrize("records", [
    burst_start({(0, 0)}), burst_start({(1, 2)}), burst_start({(0, 1), (1, 0)}), free_running_records(),
    free_running_records()[:-2],  # the last stream stops early: drain with one request left
], ids=["ramp-met", "tail-met", "middle-met", "builders", "uneven-drain"])
def test_every_figure_of_the_row_counts_the_same_requests(records):
    df = records_frame(records)
    row = free_running.steady_state_table(df, **SLO).iloc[0]
    assert row["goodput_rps"] * row["window_s"] == pytest.approx(row["slo_attainment"] * row["n"])
    assert row["requests_per_s"] * row["window_s"] == pytest.approx(row["n"] - row["failed"])
    percentiles = free_running.steady_percentiles(df).set_index("figure")
    assert percentiles.loc["ttft_s", "n"] == row["n"] - row["failed"]


def test_steady_requests_are_those_sent_within_the_window_bounds_included():
    sent = [0.0, 0.0001, 3.0, 6.0, 6.0001]
    assert free_running.steady_requests(np.array(sent), 0.0001, 6.0).tolist() == [False, True, True, True, False]
