"""`python -m loadlib.sim` as a command: readiness lines, bad flags, clean signals, instances."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest
from sim_http import chat, request

from loadlib.sim.process import start_simulator


@pytest.mark.processes
@pytest.mark.parametrize("args", [["--max-running-requests", "0"], ["--preset", "nope"],
                                  ["--flavor", "tgi"], ["--time-scale", "-1"], ["--bogus"]])
def test_bad_flags_exit_2_with_one_line(args):
    proc = subprocess.run([sys.executable, "-m", "loadlib.sim", *args], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.startswith("loadlib.sim: error: ") and proc.stderr.count("\n") == 1


@pytest.mark.processes
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_it_cleanly(sig):
    sim = start_simulator(["--time-scale", "0.05"])
    sim.proc.send_signal(sig)
    assert sim.proc.wait(10) == 0
    sim._stderr.seek(0)
    assert "Traceback" not in sim._stderr.read()
    sim.stop()


def free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as t:
                t.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    pytest.skip("no two consecutive free ports")


@pytest.mark.processes
def test_instances_listen_on_consecutive_ports_with_separate_engines():
    port = free_port_pair()
    proc = subprocess.Popen([sys.executable, "-m", "loadlib.sim", "--instances", "2", "--port", str(port),
                             "--time-scale", "0.02"], stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        assert lines == [f"loadlib.sim listening on http://127.0.0.1:{port}",
                         f"loadlib.sim listening on http://127.0.0.1:{port + 1}"]
        urls = [line.rsplit(" ", 1)[1] for line in lines]
        prompt = "Describe the cache state of this particular instance."
        chat(urls[0], prompt=prompt, max_tokens=4)
        warm = chat(urls[0], prompt=prompt, max_tokens=4).usage["prompt_tokens_details"]["cached_tokens"]
        other = chat(urls[1], prompt=prompt, max_tokens=4).usage["prompt_tokens_details"]["cached_tokens"]
        assert warm > 10 and other < 10  # each instance has its own radix cache
        assert request(urls[1], "GET", "/health").status == 200
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


@pytest.mark.processes
def test_start_simulator_reports_a_failed_start():
    with pytest.raises(RuntimeError, match="unrecognized arguments"):
        start_simulator(["--no-such-flag"])
