"""The self-watch: loop lag measured while requests are in flight, in bounded memory, and the
master's own limits worded for what they mean."""

from __future__ import annotations

import time

import gevent

from loadlib.figures.client_limits import client_limited
from loadlib.run.selfwatch import LAG_BUCKETS, SelfWatch


def test_a_blocked_loop_shows_as_lag_while_requests_are_in_flight_and_memory_stays_fixed():
    watch = SelfWatch(interval_s=0.01)
    watch.start()
    gevent.sleep(0.2)  # nothing in flight: no lag samples
    assert watch.snapshot()["samples"] == 0
    watch.in_flight = 1
    for _ in range(5):
        gevent.sleep(0.03)
        _busy(0.02)  # blocks the loop for 20 ms
    gevent.sleep(0.05)
    watch.stop()
    snap = watch.snapshot()
    assert snap["samples"] >= 5 and len(watch.lag_counts) == LAG_BUCKETS
    assert 0.015 <= snap["loop_lag_max_s"] < 0.1 and 0.015 <= snap["loop_lag_p99_s"] <= snap["loop_lag_max_s"]
    assert snap["role"] == "client"


def _busy(seconds: float) -> None:
    """Holds the CPU without yielding (time.sleep may be gevent's, which yields, once Locust is imported)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_master_short_of_cpu_is_named_as_the_master():
    reasons = client_limited([{"role": "master", "cpu_share_max": 0.97}, {"role": "client", "cpu_share_max": 0.2}])
    assert len(reasons) == 1 and reasons[0].startswith(
        "client short of CPU: the master (it receives every record and spawns the users) used 97% of a core")


def test_lag_on_a_busy_machine_is_told_apart_from_a_client_short_of_cpu():
    busy = {"cpu_share_max": 0.07, "loop_lag_p99_s": 0.035, "cores": 2, "run_queue_max": 6,
            "steal_share_max": 0.0, "involuntary_switches_per_s": 40.0}
    idle = {**busy, "run_queue_max": 1, "involuntary_switches_per_s": 2.0}
    assert client_limited([busy])[0].startswith("machine busy, not the client: a client process used only 7%")
    assert client_limited([idle])[0].startswith("client event-loop lag p99 was 35.0 ms")


def test_one_stall_in_a_short_run_is_an_event_not_a_lagging_loop():
    """69 samples: their p99 is their maximum; one 23 ms stall must not condemn the client, two must."""
    one = {"cpu_share_max": 0.08, "loop_lag_p99_s": 0.023, "samples": 69, "loop_lag_over_limit": 1,
           "cores": 2, "run_queue_max": 2, "involuntary_switches_per_s": 27.0}
    assert client_limited([one]) == []
    assert client_limited([{**one, "loop_lag_over_limit": 2}])[0].startswith("client event-loop lag p99 was 23.0 ms")
    many = {**one, "samples": 1000, "loop_lag_over_limit": 10}  # 1 %: the p99 itself is at the limit
    assert client_limited([many]) == [] and client_limited([{**many, "loop_lag_over_limit": 11}])


def test_the_watch_counts_the_samples_that_lagged_beyond_the_limit():
    watch = SelfWatch(interval_s=0.01)
    watch.start()
    watch.in_flight = 1
    gevent.sleep(0.2)
    _busy(0.03)  # one stall of the loop
    gevent.sleep(0.2)
    watch.stop()
    snap = watch.snapshot()
    assert snap["loop_lag_over_limit"] >= 1 and snap["loop_lag_max_s"] >= 0.02
    assert snap["loop_lag_over_limit"] < snap["samples"] / 4


def test_the_watch_reads_how_busy_the_machine_is():
    watch = SelfWatch(interval_s=0.01)
    watch.start()
    gevent.sleep(1.2)
    watch.stop()
    snap = watch.snapshot()
    assert snap["cores"] >= 1 and snap["run_queue_max"] >= 0 and 0.0 <= snap["steal_share_max"] <= 1.0
    assert snap["involuntary_switches_per_s"] >= 0.0
