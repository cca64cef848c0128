"""Latency from the intended send time in the modes that send on a schedule (open, trace): a
request that waited for a free user (`queue_s`) met that wait as latency too, so the free-running
tables show TTFT and total time from the intended send beside those from the send, and the SLO
(goodput, "SLO met") judges TTFT from the intended send (coordinated omission corrected). The
closed and ladder modes have no schedule and keep TTFT from the send."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from loadlib.figures import free_running
from loadlib.figures.formulas import from_intended_send
from loadlib.record_table import records_frame
from loadlib.report.summary import render_summary
from tests.analysis.builders import build_record
from tests.profile_runs import run_profile

T0 = 1_700_000_000.0
SLO = {"slo_ttft_s": 0.5, "slo_decode_tps": 20.0}


def test_the_latency_from_the_intended_send_adds_the_wait_for_a_free_user():
    assert from_intended_send(0.3, 0.5) == pytest.approx(0.8)
    latencies = from_intended_send(pd.Series([0.3, 0.3]), pd.Series([0.25, math.nan]))
    assert latencies.tolist() == pytest.approx([0.55, 0.3])  # no recorded wait: none


def one_user(case: str) -> list[dict]:
    """Ten requests due every second on one user: each is answered in 0.9 s with TTFT 0.3 s (within
    the 0.5 s SLO from its send), but from the sixth on each waited longer for the user than the
    last (0.1, 0.3, ... 0.9 s), so the last five met TTFT 0.4, 0.6, ... 1.2 s from their intended
    send: the sixth still within the SLO, the last four not. A closed-loop cell has no schedule."""
    queue = [0.0] * 5 + [0.1, 0.3, 0.5, 0.7, 0.9]
    return [build_record(case, round=i, sent_at=T0 + i + q, ttft_s=0.3, total_s=0.9, comp=101,
                         queue_s=q if case == "open" else None, concurrency=1, case=case)
            for i, q in enumerate(queue)]


def test_an_open_cells_slo_judges_ttft_from_the_intended_send():
    row = free_running.steady_state_table(records_frame(one_user("open")), **SLO).iloc[0]
    assert row["n"] == 10 and row["slo_ttft_from"] == "intended_send"
    assert row["slo_attainment_from_send"] == 1.0
    assert row["slo_attainment"] == pytest.approx(6 / 10)
    assert row["goodput_rps"] * row["window_s"] == pytest.approx(6)


def test_a_closed_cell_has_no_schedule_and_judges_ttft_from_the_send():
    row = free_running.steady_state_table(records_frame(one_user("closed")), **SLO).iloc[0]
    assert row["slo_ttft_from"] == "send" and row["slo_attainment"] == row["slo_attainment_from_send"] == 1.0


def test_an_open_cells_percentiles_show_latency_from_the_intended_send_beside_the_send():
    table = free_running.steady_percentiles(records_frame(one_user("open"))).set_index("figure")
    assert list(table.index) == ["ttft_s", "intended_ttft_s", "decode_tps", "e2e_tps", "tok_per_chunk", "total_s",
                                 "intended_total_s", "queue_s"]
    assert table.loc["ttft_s", "p50"] == pytest.approx(0.3)
    assert table.loc["intended_ttft_s", "p50"] == pytest.approx(0.35)  # 0.3 five times, then 0.4 ...
    assert table.loc["intended_total_s", "p90"] == pytest.approx(1.6 + 0.1 * (1.8 - 1.6))  # 0.9 five times, 1.0 ...
    closed = free_running.steady_percentiles(records_frame(one_user("closed")))
    assert not closed["figure"].isin(["intended_ttft_s", "total_s", "intended_total_s"]).any()


def test_the_summary_says_which_send_the_slo_counts_from():
    opened = render_summary(one_user("open"), {"profile": {"slo": {"ttft_s": 0.5}}})
    steady = next(part for part in opened.split("\n\n") if part.startswith("Steady state"))
    assert "open: TTFT from the intended send time (coordinated omission corrected)" in steady
    assert steady.splitlines()[1:] == [
        "  cell   window s   in flight   all-streams t/s   req/s   goodput req/s   SLO met   SLO met from send    n   failed",
        "  open   0.0+10.8         0.8              92.6    0.93            0.56       60%                100%   10        0"]
    closed = render_summary(one_user("closed"), {"profile": {"slo": {"ttft_s": 0.5}}})
    assert "intended send" not in closed and "from send" not in closed


OVERLOADED = """
[request]
max_tokens = 256
[load]
mode = "open"
rate_rps = 10
duration_s = 1.5
[scenarios.protocol]
[slo]
ttft_s = 0.3
decode_tps = 1
"""


@pytest.mark.processes
def test_an_open_run_the_server_cannot_hold_reads_worse_from_the_intended_send(tmp_path):
    """One user and arrivals faster than the simulator answers them: the requests queue on the
    client, so TTFT from the intended send exceeds TTFT from the send, and fewer requests meet the
    SLO (TTFT 0.3 s) judged from the intended send than from the send."""
    result, df = run_profile(tmp_path, OVERLOADED, 1, sim="--time-scale 0.2")
    assert df["error"].isna().all() and df["queue_s"].max() > 0.3
    frame = records_frame(df.to_dict("records"))
    steady = free_running.steady_state_table(frame, slo_ttft_s=0.3, slo_decode_tps=1).iloc[0]
    percentiles = free_running.steady_percentiles(frame).set_index("figure")
    assert percentiles.loc["intended_ttft_s", "p50"] > percentiles.loc["ttft_s", "p50"]
    assert steady["slo_ttft_from"] == "intended_send"
    assert steady["slo_attainment"] < steady["slo_attainment_from_send"]
    assert "TTFT from the intended send time (coordinated omission corrected)" in result.stdout + result.stderr
