"""Start the simulator as a subprocess and wait until it listens (for locustfiles, tests and
benchmarks that need a target and must always stop it)."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
import time
from typing import Sequence

READY_PREFIX = "loadlib.sim listening on "


class SimulatorProcess:
    """A running `python -m loadlib.sim`; `.url` is its first instance, `.urls` all of them."""

    def __init__(self, proc: subprocess.Popen, urls: list[str], stderr_file) -> None:
        self.proc = proc
        self.urls = urls
        self._stderr = stderr_file

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 5.0) -> None:
        """Terminates the simulator (SIGTERM, then SIGKILL after `timeout`) and reaps it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self._stderr):
            if stream is not None and not stream.closed:
                stream.close()

    def __enter__(self) -> "SimulatorProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _instances(args: Sequence[str]) -> int:
    args = list(args)
    for i, arg in enumerate(args):
        if arg == "--instances" and i + 1 < len(args):
            return int(args[i + 1])
        if arg.startswith("--instances="):
            return int(arg.split("=", 1)[1])
    return 1


def start_simulator(args: Sequence[str] = (), timeout: float = 20.0) -> SimulatorProcess:
    """Starts `python -m loadlib.sim --port 0 *args` and returns once every instance listens.

    Raises RuntimeError (with the simulator's stderr) if it exits or is not ready in `timeout`.
    """
    expected = _instances(args)
    stderr_file = tempfile.TemporaryFile(mode="w+")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "loadlib.sim", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=stderr_file, env=env)
    urls: list[str] = []
    deadline = time.monotonic() + timeout
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while len(urls) < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not sel.select(remaining):
                break
            data = os.read(proc.stdout.fileno(), 4096)
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\n")
            urls += [line.decode()[len(READY_PREFIX):].strip() for line in lines
                     if line.decode().startswith(READY_PREFIX)]
    if len(urls) < expected:
        sim = SimulatorProcess(proc, urls, None)
        sim.stop()
        stderr_file.seek(0)
        detail = stderr_file.read().strip().splitlines()
        stderr_file.close()
        raise RuntimeError("simulator did not start: "
                           + (detail[-1] if detail else f"not ready within {timeout:g} s"))
    return SimulatorProcess(proc, urls, stderr_file)
