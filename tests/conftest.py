"""Shared fixtures: real processes (Locust, the simulator), always stopped.

A test that starts a process (Locust, the simulator, sglang-router, Prometheus, a browser) is
marked `processes`: `python -m pytest -q -m "not processes"` is the fast half. The mark is kept
true by a guard: an unmarked test (or a fixture it sets up) that starts a process fails.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

# The tests stop runs with SIGINT, as Ctrl-C does. A shell starting the suite in the background (`pytest &` in a
# script) has it ignored, and every child would inherit that and sit through the interrupt: give it its default back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent
LOCUSTFILE = REPO / "locustfiles" / "dflash.py"
FAST_SIM = "--time-scale 0.05"
# A simulator whose clock runs 1.08 times slower decodes 7.4 % lower; two runs of one configuration differ by up
# to about 1 % (the simulator's own timing under the client's load), so a verdict's interval may miss it by that much.
SLOWER_BY_1_08_PCT = (1 / 1.08 - 1) * 100
RUN_TO_RUN_PCT = 1.0
# A tiny protocol load for profiles in tests: one prompt alone, then 2 streams, 2 rounds, 64 tokens.
TINY_ROUNDS = """
[request]
max_tokens = 64
thinking = false
[load]
mode = "rounds"
rounds = 2
concurrency = [2]
[scenarios.protocol]
single = ["code"]
"""
# A tiny capacity search over closed-loop users with a loose SLO (every level holds).
TINY_SEARCH = """
seed = 1
[request]
max_tokens = 64
thinking = false
[load]
mode = "search"
variable = "users"
start = 1
step = 2
warmup_s = 0.3
duration_s = 1.5
[scenarios.distinct-issues]
[slo]
ttft_s = 5.0
ttft_p = 90
"""


def protocol_profile(mode: str, max_tokens: int, **load: float) -> str:
    """A profile of the protocol's prompts under one load mode: `max_tokens`, then `[load]` with
    `mode` and the keys given (`duration_s=60, jitter_s=0.1`). The tests' profiles of this shape
    differ only in these values, which a call shows at a glance."""
    keys = "".join(f"{key} = {value}\n" for key, value in load.items())
    return f'[request]\nmax_tokens = {max_tokens}\n[load]\nmode = "{mode}"\n{keys}[scenarios.protocol]\n'


@contextmanager
def _processes_refused_unless_marked(item: pytest.Item) -> Iterator[None]:
    if item.get_closest_marker("processes") is not None:
        yield
        return
    start = subprocess.Popen._execute_child

    def refuse(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        raise AssertionError(f"{item.nodeid} starts a process ({args!r:.120}): mark it @pytest.mark.processes")

    subprocess.Popen._execute_child = refuse
    try:
        yield
    finally:
        subprocess.Popen._execute_child = start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _processes_refused_unless_marked(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _processes_refused_unless_marked(item):
        yield


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for Locust's master/worker link)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def sglang_router(worker_urls: list[str], *extra_args: str) -> Iterator[str]:
    """The real sglang-router (round_robin) on a free loopback port in front of `worker_urls`:
    yields its URL once it answers /health, and always stops it."""
    port = free_port()
    router = subprocess.Popen(
        [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *worker_urls,
         "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warn",
         *extra_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if urllib.request.urlopen(url + "/health", timeout=1).status == 200:
                    break
            except OSError:
                if time.monotonic() > deadline or router.poll() is not None:
                    pytest.fail("sglang-router did not become healthy")
                time.sleep(0.1)
        yield url
    finally:
        router.terminate()
        try:
            router.wait(10)
        except subprocess.TimeoutExpired:
            router.kill()
            router.wait()


@contextmanager
def served(server: Any) -> Iterator[Any]:
    """A test's own HTTP server (a `socketserver` server) answering on a thread while the block runs."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def run_locust(args: list[str], cwd: Path, env: dict[str, str] | None = None,
               timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    """Runs `locust -f locustfiles/dflash.py ARGS` to its end and returns what it printed."""
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def run_together(commands: dict[Any, tuple[Any, ...]], env: dict[str, str] | None = None,
                 timeout: float = 240.0) -> dict[Any, subprocess.CompletedProcess[str]]:
    """Runs several independent commands at once (name -> (command, cwd), or (command, cwd, its own
    env)), each to its end, and returns what each printed, by name, with `.elapsed_s`, the seconds
    from its start to its end."""
    started = {}
    try:
        for name, (command, cwd, *own_env) in commands.items():
            out, err = tempfile.TemporaryFile(mode="w+"), tempfile.TemporaryFile(mode="w+")
            proc = subprocess.Popen(command, cwd=cwd, env=own_env[0] if own_env else env, stdout=out, stderr=err,
                                    text=True)
            started[name] = (proc, out, err, time.monotonic())
        deadline = time.monotonic() + timeout
        ended: dict[Any, float] = {}
        while len(ended) < len(started):
            for name, (proc, _out, _err, _at) in started.items():
                if name not in ended and proc.poll() is not None:
                    ended[name] = time.monotonic()
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired([str(name) for name in started if name not in ended], timeout)
            time.sleep(0.05)
        results = {}
        for name, (proc, out, err, at) in started.items():
            out.seek(0)
            err.seek(0)
            results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
            results[name].elapsed_s = ended[name] - at
        return results
    finally:
        for proc, out, err, _at in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            out.close()
            err.close()


def run_locust_together(runs: dict[Any, tuple[Any, ...]], env: dict[str, str] | None = None,
                        timeout: float = 240.0) -> dict[Any, subprocess.CompletedProcess[str]]:
    """Runs several independent `locust -f locustfiles/dflash.py ARGS` at once (name -> (ARGS, cwd),
    or (ARGS, cwd, its own env)), each to its end, and returns what each printed, by name: a run on
    the time-scaled simulator mostly waits, so a module's runs take about as long together as the
    longest alone."""
    return run_together({name: ([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args], *rest)
                         for name, (args, *rest) in runs.items()}, env=env, timeout=timeout)


@pytest.fixture
def simulator(tmp_path):
    """A time-scaled simulator subprocess with a trace file; yields (process, trace path)."""
    from loadlib.sim.process import start_simulator

    trace = tmp_path / "sim-trace.jsonl"
    sim = start_simulator(["--time-scale", "0.05", "--trace", str(trace)])
    try:
        yield sim, trace
    finally:
        sim.stop()
