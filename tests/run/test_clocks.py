"""Workers' clocks against the master's: the offset estimated from round trips whose truth is known,
the validity check on healthy and broken runs' manifests, and real runs of a master and two
workers on this host, one worker's clock shifted or drifting by the test-only hook
(`UNI_LOCUST_TEST_CLOCK`): the shift is measured and corrected, the drift is said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadlib import clock
from loadlib.figures.validity import CLOCK_LIMIT_S, clocks_agree
from loadlib.records import read_records
from loadlib.run.clock_sync import estimate
from loadlib.run_view import read_run
from tests.conftest import FAST_SIM, LOCUSTFILE, run_together


def pings(offset: float, ways: list[tuple[float, float]], hold: float = 0.0001) -> list[tuple[float, ...]]:
    """(t0, t1, t2, t3) of pings from a worker whose clock is `offset` behind the master's, each
    taking (there, back) seconds on the way, the master holding each `hold` seconds."""
    samples, t = [], 1000.0
    for there, back in ways:
        t1 = t + there + offset
        samples.append((t, t1, t1 + hold, t + there + hold + back))
        t += 0.05
    return samples


def test_the_offset_is_the_least_delayed_pings_and_right_within_half_its_round_trip():
    ways = [(0.004, 0.020), (0.0003, 0.0004), (0.030, 0.001), (0.002, 0.002)]
    offset, uncertainty = estimate(pings(-30.0, ways))
    assert uncertainty == pytest.approx((0.0003 + 0.0004) / 2)
    assert abs(offset - -30.0) <= uncertainty  # the way there and back split unevenly: within half the trip
    assert estimate([]) is None


def test_a_lopsided_only_ping_is_still_within_its_uncertainty():
    offset, uncertainty = estimate(pings(0.2, [(0.0001, 0.009)]))
    assert abs(offset - 0.2) <= uncertainty + 1e-12 and uncertainty == pytest.approx(0.0091 / 2)


def offsets(*workers: dict) -> dict:
    return {"clock_offsets": [{"worker": f"host{i}_abc", "index": i, **w} for i, w in enumerate(workers)]}


HEALTHY = {"measurements": 3, "offset_s": -30.0002, "uncertainty_s": 0.0004, "largest_step_s": 0.0003,
           "drift_s": 0.0001}


def test_the_clock_check_passes_workers_known_to_within_the_limit_and_is_no_check_without_workers():
    ok, detail = clocks_agree(offsets(HEALTHY, {**HEALTHY, "offset_s": 0.0001}))
    assert ok is True and "-30000.2, +0.1 ms" in detail, detail
    assert clocks_agree({}) is None  # one process, one clock


@pytest.mark.parametrize("broken, said", [
    ({"uncertainty_s": CLOCK_LIMIT_S * 2}, "known only to ±20.0 ms"),
    ({"largest_step_s": CLOCK_LIMIT_S * 3, "drift_s": 0.05}, "drifted 30.0 ms between two measurements"),
    ({"measurements": 0}, "never measured"),
])
def test_the_clock_check_fails_naming_the_worker_whose_clock_is_not_known(broken, said):
    ok, detail = clocks_agree(offsets(HEALTHY, {**HEALTHY, **broken}))
    assert ok is False and "worker 1 (host1_abc)" in detail and said in detail and "worker 0" not in detail, detail


def test_the_test_hook_shifts_this_hosts_clock_and_the_offset_brings_it_back(monkeypatch):
    monkeypatch.setattr(clock, "_SHIFT_S", 30.0)
    stamp = time.time()
    assert clock.host_time(stamp) == pytest.approx(stamp + 30.0)
    monkeypatch.setattr(clock, "_offset_s", -30.0)
    assert clock.coordinator_time(stamp) == pytest.approx(stamp) and abs(clock.now() - time.time()) < 0.01


# --- a master and two workers on this host ---------------------------------------------------------

PROTOCOL = ["--rounds", "2", "--scenarios", "code", "--concurrency", "2", "--max-tokens", "64"]


def distributed(work: Path, port: int, worker_clocks: tuple[str, str]) -> tuple[list[str], list[tuple]]:
    """(master command, worker commands with their env): a protocol run of 2 streams whose master
    listens on 127.0.0.1:`port`, each worker's clock under the test hook as given ("" none)."""
    locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--loglevel", "WARNING"]
    master = [*locust, "--headless", "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
              "--expect-workers", "2", "-u", "2", *PROTOCOL, "--run-dir", str(work / "r"), "--sim-args", FAST_SIM]
    workers = [([*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)], work,
                {**os.environ, clock.TEST_CLOCK_ENV: shift}) for shift in worker_clocks]
    return master, workers


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs at once: worker 0's clock 30 s ahead (corrected), and one worker gaining 50 ms a second."""
    work = tmp_path_factory.mktemp("clocks")
    commands, started = {}, time.time()
    for name, port, clocks in (("shifted", 24511, ("30", "")), ("drifting", 24513, ("", "0,0.05"))):
        (work / name).mkdir()
        master, workers = distributed(work / name, port, clocks)
        commands[(name, "master")] = (master, work / name)
        commands.update({(name, f"worker{i}"): worker for i, worker in enumerate(workers)})
    results = run_together(commands, timeout=120)
    return {name: (work / name / "r", results[(name, "master")]) for name in ("shifted", "drifting")}, \
        (started, time.time())


@pytest.mark.processes
def test_a_worker_whose_clock_is_30_s_ahead_is_measured_and_its_records_carry_the_masters_time(runs):
    (run_dir, master), (began, ended) = runs[0]["shifted"], runs[1]
    assert master.returncode == 0, master.stderr[-3000:]
    entries = json.loads((run_dir / "manifest.json").read_text())["clock_offsets"]
    [ahead] = [e for e in entries if e["offset_s"] < -1]
    [right] = [e for e in entries if e is not ahead]
    assert ahead["measurements"] >= 2 and abs(ahead["offset_s"] + 30.0) <= ahead["uncertainty_s"] + 0.002, ahead
    assert abs(right["offset_s"]) <= right["uncertainty_s"] + 0.002, right
    records = [r for r in read_records(run_dir) if r["measured"]]
    assert len(records) == 2 + 2 * 2 * 2 and all(r["error"] is None for r in records)
    assert {r["worker"] for r in records} == {0, 1}
    assert all(began <= r["sent_at"] <= ended for r in records)  # uncorrected, worker 0's would be 30 s ahead
    for cell in ("c2-same", "c2-different"):
        for index in (0, 1):
            pair = [r for r in records if r["cell"] == cell and r["round"] == index]
            assert {r["worker"] for r in pair} == {0, 1}  # one stream on each worker
            sent = [r["sent_at"] for r in pair]
            assert max(sent) - min(sent) < 0.05, (cell, index, pair)  # started together, in the master's clock
    checks = [c for c in read_run(run_dir).checks if c.name == "clocks"]
    assert checks and all(c.ok is True for c in checks), checks


@pytest.mark.processes
def test_a_worker_whose_clock_drifts_is_a_validity_failure_naming_it(runs):
    run_dir, master = runs[0]["drifting"]
    entries = json.loads((run_dir / "manifest.json").read_text())["clock_offsets"]
    [drifting] = [e for e in entries if e["largest_step_s"] > CLOCK_LIMIT_S]
    checks = [c for c in read_run(run_dir).checks if c.name == "clocks"]
    assert checks and all(c.ok is False and f"worker {drifting['index']} ({drifting['worker']})" in c.detail
                          and "drifted" in c.detail for c in checks), checks
    summary = (run_dir / "summary.txt").read_text(encoding="utf-8")
    assert "drifted" in summary and drifting["worker"] in summary, summary
