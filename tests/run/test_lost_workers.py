"""Distributed runs on one machine (`--processes`): a worker killed mid-run is said, counted and
survived within seconds, with no traceback; two such runs side by side never join each other."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from loadlib.records import read_records
from loadlib.run.workers import WORKER_LOST
from tests.conftest import FAST_SIM, LOCUSTFILE

pytestmark = pytest.mark.processes

OWN_LOCUSTFILE = '''
from locust import constant, task
from loadlib import LLMUser


class Chat(LLMUser):
    wait_time = constant(0.05)

    @task
    def ask(self):
        self.chat([{"role": "user", "content": "Name a prime."}], name="prime", max_tokens=64)
'''

AB_PROFILE = """
[request]
max_tokens = 1024
thinking = false
[load]
mode = "rounds"
rounds = 3
concurrency = [2]
[scenarios.protocol]
single = []
[[targets]]
label = "A"
sim_args = "%s"
[[targets]]
label = "B"
sim_args = "%s"
""" % (FAST_SIM, FAST_SIM)


def locust(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "locust", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def kill_one_worker(proc: subprocess.Popen[str]) -> int:
    """SIGKILLs one of the run's worker processes (a child of the master that is no simulator)."""
    workers = [child for child in psutil.Process(proc.pid).children()
               if "loadlib.sim" not in " ".join(child.cmdline())]
    assert len(workers) == 2, [w.cmdline() for w in workers]
    os.kill(workers[0].pid, signal.SIGKILL)
    return workers[0].pid


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """Three runs with 2 worker processes, started together, each with one worker SIGKILLed once
    its first records are in: the protocol (2 records), your own locustfile (4 records) and an A/B
    run of the protocol's rounds (2 records). Yields name -> (run directory, proc, pid killed, when,
    stdout, stderr, seconds from the kill to the end)."""
    work = tmp_path_factory.mktemp("lost")
    (work / "own").mkdir()
    (work / "own" / "mylocust.py").write_text(OWN_LOCUSTFILE)
    (work / "ab.toml").write_text(AB_PROFILE)
    runs = {
        "protocol": (work / "protocol" / "r", 2, locust(
            ["-f", str(LOCUSTFILE), "--headless", "-u", "4", "--processes", "2", "--rounds", "3", "--scenarios", "",
             "--concurrency", "2,4", "--max-tokens", "1024", "--loglevel", "WARNING",
             "--run-dir", str(work / "protocol" / "r"), "--sim-args", FAST_SIM], work)),
        "own": (work / "own" / "r", 4, locust(
            ["-f", "mylocust.py", "--headless", "-u", "4", "-r", "4", "-t", "8s", "--processes", "2",
             "--loglevel", "WARNING", "--run-dir", str(work / "own" / "r"), "--sim-args", FAST_SIM], work / "own")),
        "ab": (work / "ab" / "r", 2, locust(
            ["-f", str(LOCUSTFILE), "--headless", "-u", "2", "--processes", "2", "--profile", str(work / "ab.toml"),
             "--loglevel", "WARNING", "--run-dir", str(work / "ab" / "r")], work)),
    }
    kills = {}
    try:
        deadline = time.time() + 60
        while len(kills) < len(runs):  # each worker killed as soon as its run has its first records
            for name, (run_dir, count, proc) in runs.items():
                if name not in kills and (run_dir / "records.jsonl").exists() and \
                        len(list(read_records(run_dir))) >= count:
                    killed_at = time.time()
                    kills[name] = (kill_one_worker(proc), killed_at)
                elif name not in kills:
                    assert proc.poll() is None, proc.communicate()[1][-3000:]
                    assert time.time() < deadline, f"{name}: fewer than {count} records after 60 s"
            time.sleep(0.1)
    except BaseException:
        for _run_dir, _count, proc in runs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        raise

    def end(name: str, timeout: float):
        out, err = finish(runs[name][2], timeout)
        return out, err, time.time() - kills[name][1]

    with ThreadPoolExecutor(len(runs)) as pool:  # each run's end timed on its own
        ends = {"protocol": pool.submit(end, "protocol", 90), "own": pool.submit(end, "own", 60),
                "ab": pool.submit(end, "ab", 90)}
        return {name: (runs[name][0], runs[name][2], *kills[name], *ends[name].result()) for name in runs}


def test_a_worker_killed_in_the_protocol_is_said_and_the_run_ends_on_its_own_without_traceback(killed):
    run_dir, proc, pid, killed_at, out, err, took = killed["protocol"]
    assert proc.returncode == 1, err[-3000:]  # Locust's --exit-code-on-error: the lost requests failed
    assert "Traceback" not in err and "ChildProcessError" not in err, err[-3000:]
    assert took < 45, f"the run took {took:.0f} s after the worker died"  # not a 60 s wait for users
    manifest = json.loads((run_dir / "manifest.json").read_text())
    [lost] = manifest["lost_workers"]
    assert lost["pid"] == pid and lost["users"] >= 1 and lost["exit"] == "killed by signal 9"
    assert killed_at - 1 <= lost["at"] <= killed_at + 10
    summary = (run_dir / "summary.txt").read_text(encoding="utf-8")
    assert "WORKERS LOST: 1 worker process" in summary and str(pid) in summary
    records = list(read_records(run_dir))
    assert len(records) == 2 * 3 * (2 + 4)  # every assignment has a record, the lost ones as failures


def test_with_your_own_locustfile_a_lost_worker_is_named_in_the_summary_and_manifest(killed):
    run_dir, _proc, pid, killed_at, out, err, _took = killed["own"]
    assert "Traceback" not in err and "ChildProcessError" not in err, err[-3000:]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    [lost] = manifest["lost_workers"]
    assert lost["pid"] == pid and lost["users"] == 2 and killed_at - 1 <= lost["at"] <= killed_at + 10
    summary = (run_dir / "summary.txt").read_text(encoding="utf-8")
    assert "WORKERS LOST: 1 worker process" in summary and "with 2 users" in summary, summary


def test_in_an_ab_run_the_requests_of_a_lost_worker_count_against_their_own_server(killed):
    run_dir, proc, _pid, _killed_at, _out, err, _took = killed["ab"]
    assert proc.returncode == 1, err[-3000:]  # the lost requests failed
    records = list(read_records(run_dir))
    lost = [record for record in records if record["error"] == WORKER_LOST]
    assert lost, "the killed worker held no request"
    assert {record["target"] for record in lost} <= {"A", "B"}
    for target in ("A", "B"):  # every assignment of each server has its record, the lost ones as failures
        assert len([record for record in records if record["target"] == target]) == 3 * 2 * 2, target  # same, different


def test_two_local_processes_runs_on_one_machine_each_keep_their_own_workers(tmp_path):
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        runs.append(locust(["-f", str(LOCUSTFILE), "--headless", "-u", "2", "--processes", "2", "--rounds", "1",
                            "--scenarios", "code", "--concurrency", "2", "--loglevel", "WARNING",
                            "--run-dir", str(tmp_path / name / "r"), "--sim-args", FAST_SIM], tmp_path / name))
        time.sleep(0.5)
    for name, proc in zip(("a", "b"), runs):
        out, err = finish(proc, timeout=120)
        assert proc.returncode == 0, f"run {name}: {err[-3000:]}"
        records = [r for r in read_records(tmp_path / name / "r") if r["measured"]]
        assert len(records) == 1 + 2 * 2 and all(r["error"] is None for r in records), (name, records)
        assert not json.loads((tmp_path / name / "r" / "manifest.json").read_text()).get("lost_workers")
