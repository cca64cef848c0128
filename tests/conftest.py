"""Shared fixtures: real processes (Locust, the simulator), always stopped."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LOCUSTFILE = REPO / "locustfiles" / "dflash.py"
FAST_SIM = "--time-scale 0.05"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for Locust's master/worker link)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_locust(args: list[str], cwd: Path, env: dict[str, str] | None = None,
               timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    """Runs `locust -f locustfiles/dflash.py ARGS` to its end and returns what it printed."""
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


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
