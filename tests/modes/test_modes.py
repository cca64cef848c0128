"""Each load mode through real headless Locust against the time-scaled simulator, checked by the
load it must produce: concurrency held, arrivals on schedule, levels stepped and measured apart."""

from __future__ import annotations

import random

import numpy as np
import pytest

from loadlib.figures import free_running
from loadlib.modes.ladder import ladder_levels
from loadlib.modes.arrivals import arrival_offsets
from loadlib.record_table import records_frame
from tests.conftest import free_port, protocol_profile
from tests.profile_runs import max_in_flight, run_profile

CLOSED = protocol_profile("closed", 32, warmup_s=0.5, duration_s=2, jitter_s=0.5)


@pytest.mark.processes
def test_closed_mode_keeps_u_streams_busy_after_a_jittered_start_and_leaves_out_the_warmup(tmp_path):
    result, df = run_profile(tmp_path, CLOSED, 4)
    assert df["error"].isna().all()
    warmup, run = df[~df["measured"]], df[df["measured"]]
    assert set(warmup["cell"]) == {"warmup"} and set(run["cell"]) == {"closed"}
    assert (df["case"] == "closed").all()
    assert max_in_flight(df) == 4
    first = df.sort_values("sent_at").groupby("slot")["sent_at"].first()
    # spread, not one burst: 4 uniform draws over 0.5 s fall within 5 ms of each other once in 250,000 runs
    assert len(first) == 4 and 0.005 < first.max() - first.min() < 0.6
    for _slot, stream in df.sort_values("sent_at").groupby("slot"):  # one request at a time per stream
        ends = (stream["sent_at"] + stream["total_s"]).to_numpy()
        assert (stream["sent_at"].to_numpy()[1:] >= ends[:-1] - 0.001).all()
    assert run["sent_at"].min() >= warmup["sent_at"].max() - 0.3  # the warm-up comes first
    steady = free_running.steady_state_table(records_frame(df.to_dict("records")))
    assert list(steady["cell"]) == ["closed"] and steady["in_flight"].iloc[0] == pytest.approx(4, rel=0.1)
    assert "Steady state of free-running cells" in result.stdout and "warmup" not in result.stdout


@pytest.mark.processes
def test_closed_mode_runs_across_two_processes(tmp_path):
    master = str(free_port())  # not Locust's default *:5557, which other runs may hold
    _result, df = run_profile(tmp_path, CLOSED, 4, "--processes", "2", "--master-bind-host", "127.0.0.1",
                              "--master-bind-port", master, "--master-port", master)
    assert df["error"].isna().all() and set(df["worker"]) == {0, 1}
    assert max_in_flight(df) == 4
    assert df.groupby("slot")["worker"].nunique().eq(1).all()  # a stream stays on its worker


OPEN = """
[request]
max_tokens = 32
[load]
mode = "open"
rate_rps = 20
warmup_s = 0.5
duration_s = 2
[scenarios.distinct-issues]
"""


@pytest.mark.processes
def test_open_mode_holds_the_arrival_rate_without_bursts(tmp_path):
    result, df = run_profile(tmp_path, OPEN, 8)
    assert df["error"].isna().all()
    run = df[df["measured"]].sort_values("sent_at")
    assert len(run) == 40 and (~df["measured"]).sum() == 10 and set(run["cell"]) == {"open-20rps"}
    sent = run["sent_at"].to_numpy()
    achieved = (len(sent) - 1) / (sent[-1] - sent[0])
    assert achieved == pytest.approx(20, rel=0.05)
    # each send keeps its place on the evenly spaced schedule: a burst (two arrivals sent together)
    # is half an interval off it; a one-off scheduling hiccup of a few ms on a busy machine is not
    off_schedule = sent - (sent[0] + np.arange(len(sent)) / achieved)
    assert np.abs(off_schedule - np.median(off_schedule)).max() < 0.4 / 20
    assert np.diff(sent).max() < 2 / 20  # and no holes
    assert run["queue_s"].max() < 0.05  # a free user was always there
    assert "open-20rps" in result.stdout


@pytest.mark.processes
def test_open_mode_does_not_wait_for_responses_and_records_the_client_queue_apart(tmp_path):
    """One user and arrivals faster than the server answers: requests wait on the client, the
    wait is `queue_s`, and TTFT (from the send) does not include it."""
    profile = protocol_profile("open", 256, rate_rps=10, duration_s=1)
    _result, df = run_profile(tmp_path, profile, 1, sim="--time-scale 0.2")
    run = df.sort_values("sent_at")
    assert len(run) == 10 and run["error"].isna().all()
    assert run["queue_s"].iloc[-1] > 0.5 and run["queue_s"].is_monotonic_increasing
    assert run["ttft_s"].max() < 0.2 < run["queue_s"].max()


LADDER = protocol_profile("ladder", 32, duration_s=1.2, jitter_s=0.1)


@pytest.mark.processes
def test_ladder_steps_users_up_to_u_and_measures_each_level_apart(tmp_path):
    result, df = run_profile(tmp_path, LADDER, 4)
    assert df["error"].isna().all()
    levels = df.groupby("cell", sort=False).agg(start=("sent_at", "min"), slots=("slot", "nunique")).sort_values("start")
    assert list(levels.index) == ["ladder-u1", "ladder-u2", "ladder-u4"]
    assert list(levels["slots"]) == [1, 2, 4] and df["user"].nunique() == 4
    for cell, level in (("ladder-u1", 1), ("ladder-u2", 2), ("ladder-u4", 4)):
        assert max_in_flight(df[df["cell"] == cell]) <= level
    steady = free_running.steady_state_table(records_frame(df.to_dict("records"))).set_index("cell")
    assert steady.loc["ladder-u1", "in_flight"] == pytest.approx(1, rel=0.15)
    assert steady.loc["ladder-u4", "in_flight"] == pytest.approx(4, rel=0.15)
    assert all(cell in result.stdout for cell in levels.index)


def test_ladder_levels_double_up_to_u():
    assert ladder_levels(8) == [1, 2, 4, 8]
    assert ladder_levels(6) == [1, 2, 4, 6]
    assert ladder_levels(1) == [1]
    assert ladder_levels(4, [2, 3, 8]) == [2, 3]


def test_arrivals_are_evenly_spaced_or_poisson():
    assert arrival_offsets(4, "constant", 1.0, random.Random(0)) == [0, 0.25, 0.5, 0.75]
    gaps = np.diff(arrival_offsets(50, "poisson", 100.0, random.Random(1)))
    assert len(gaps) == pytest.approx(5000, rel=0.05)
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.05) and gaps.std() / gaps.mean() == pytest.approx(1, abs=0.05)
