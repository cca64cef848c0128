"""Each configuration's server as a real child process: the simulator launched as a sweep server
answers; a server that exits, never becomes healthy or dies mid-run is a status with its log's
last lines; stop() reaps it and its own children; and no server outlives the tool, even when the
tool is SIGKILLed or interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from loadlib.sweep.grid import configurations
from loadlib.sweep.launch import DIED, EXITED, OK, UNHEALTHY, launch
from loadlib.sweep.spec import ServerSpec
from tests.conftest import REPO

pytestmark = pytest.mark.processes

PY = sys.executable
SIM = f"{PY} -m loadlib.sim --host 127.0.0.1 --port {{port}} --time-scale 0.05"
FAKE = f"{PY} {Path(__file__).with_name('fake_server.py')} {{port}}"


def only(spec: ServerSpec):
    [config] = configurations(spec)
    return config


def gone(pid: int) -> bool:
    """Whether the process has ended (a zombie nobody has reaped yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def test_the_simulator_serves_as_a_sweep_server_with_the_grids_flags(tmp_path):
    spec = ServerSpec(command=SIM + " --speculative-num-draft-tokens {draft} --max-running-requests {mrr}",
                      grid={"draft": [4], "mrr": [3]}, ready_timeout_s=30)
    with launch(only(spec), spec, tmp_path / "draft=4.log") as server:
        assert server.status == OK and server.alive()
        assert server.host.startswith("http://127.0.0.1:") and server.ready_s > 0
        info = get_json(server.host + "/get_server_info")
        assert (info["speculative_num_draft_tokens"], info["max_running_requests"]) == (4, 3)
        body = json.dumps({"model": "default", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
                           "stream": False}).encode()
        request = urllib.request.Request(server.host + "/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.load(response)
        assert answer["usage"]["completion_tokens"] == 8
        pid = server.pid
    assert wait_gone(pid, 1) and server.status == OK
    entry = server.entry()
    assert (entry["label"], entry["config"], entry["status"], entry["pid"]) == ("draft=4,mrr=3", {"draft": 4, "mrr": 3},
                                                                               OK, pid)
    assert entry["ended_at"] >= entry["started_at"]
    assert any("loadlib.sim listening on" in line for line in entry["log_tail"])


def test_a_server_that_exits_at_once_is_exited_with_its_log_tail(tmp_path):
    spec = ServerSpec(command=f"{PY} -c \"import sys; print('error: unknown flag --spec-nope'); sys.exit(3)\" {{port}}",
                      ready_timeout_s=30)
    started = time.monotonic()
    server = launch(only(spec), spec, tmp_path / "bad.log")
    assert time.monotonic() - started < 10  # it did not wait for ready_timeout_s
    assert server.status == EXITED and not server.alive() and server.returncode == 3
    assert server.log_tail()[-1] == "error: unknown flag --spec-nope"
    assert server.entry()["log_tail"][-1] == "error: unknown flag --spec-nope"


def test_a_command_that_cannot_start_is_exited_with_the_reason_in_its_log(tmp_path):
    spec = ServerSpec(command="no-such-server-binary --port {port}")
    server = launch(only(spec), spec, tmp_path / "missing.log")
    assert server.status == EXITED and server.pid is None
    assert "cannot start 'no-such-server-binary'" in server.log_tail()[-1]


def test_a_server_that_never_answers_health_is_unhealthy_and_stopped(tmp_path):
    spec = ServerSpec(command=f"{PY} -c \"import time; print('loading weights', flush=True); time.sleep(60)\" {{port}}",
                      ready_timeout_s=1, stop_grace_s=2)
    started = time.monotonic()
    server = launch(only(spec), spec, tmp_path / "slow.log")
    assert 1 <= time.monotonic() - started < 6
    assert server.status == UNHEALTHY and gone(server.pid)
    assert server.log_tail()[-1] == "loading weights"


def test_a_server_killed_mid_run_has_died(tmp_path):
    spec = ServerSpec(command=SIM, ready_timeout_s=30)
    server = launch(only(spec), spec, tmp_path / "sim.log")
    assert server.status == OK
    os.kill(server.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while server.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.alive() and server.status == DIED
    server.stop()
    assert server.entry()["status"] == DIED and server.returncode == -signal.SIGKILL


def test_stop_kills_a_server_that_ignores_sigterm_and_its_own_children_after_the_grace(tmp_path):
    pidfile = tmp_path / "worker.pid"
    spec = ServerSpec(command=f"{FAKE} --ignore-term --child {pidfile}", stop_grace_s=0.5, ready_timeout_s=20)
    server = launch(only(spec), spec, tmp_path / "stubborn.log")
    assert server.status == OK
    worker = int(pidfile.read_text())
    started = time.monotonic()
    server.stop()
    assert 0.5 <= time.monotonic() - started < 5
    assert gone(server.pid) and wait_gone(worker, 2)
    assert server.status == OK  # it was alive until it was asked to stop
    server.stop()  # a second stop does nothing


TOOL = """
import sys, time
from loadlib.sweep.grid import configurations
from loadlib.sweep.launch import launch
from loadlib.sweep.spec import ServerSpec
spec = ServerSpec(command=sys.argv[1], ready_timeout_s=30)
server = launch(configurations(spec)[0], spec, sys.argv[2])
print(server.status, server.pid, flush=True)
time.sleep(60)
"""


def start_tool(tmp_path) -> tuple[subprocess.Popen, int]:
    """A small program that launches the simulator through the API and then waits; returns it and
    the simulator's pid."""
    tool = subprocess.Popen([PY, "-c", TOOL, SIM, str(tmp_path / "sim.log")], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    status, pid = tool.stdout.readline().split()
    assert status == OK
    return tool, int(pid)


def test_no_server_outlives_a_tool_that_is_sigkilled(tmp_path):
    tool, sim = start_tool(tmp_path)
    assert not gone(sim)
    tool.kill()
    tool.wait()
    assert wait_gone(sim, 5)


def test_ctrl_c_in_the_tool_stops_its_server(tmp_path):
    tool, sim = start_tool(tmp_path)
    tool.send_signal(signal.SIGINT)
    tool.wait(10)
    assert wait_gone(sim, 5)
    assert "loadlib.sim listening on" in (tmp_path / "sim.log").read_text()
