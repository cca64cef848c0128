"""Each configuration's server as a child process: started on a free loopback port, waited for
until its health path answers 200, stopped (SIGTERM to its process group, SIGKILL after the
grace), its output kept in a log file.

A configuration that cannot serve is a value, not an exception: `launch` returns a
`RunningServer` whose `status` says what happened, with the last lines of its log:

- `ok`: healthy (and, once stopped, it was alive until `stop()`);
- `exited`: the process ended (or could not start) before it was healthy;
- `unhealthy`: not healthy within `ready_timeout_s`; the tool stopped it;
- `died`: healthy, then ended before `stop()` (found by `alive()` or at `stop()`).

Its row (`entry`) also lists the known performance warnings its log holds (`known_warnings`).

No server outlives the tool: each starts in its own session and process group (so a terminal's
Ctrl-C reaches the tool, which stops it, and `stop()` reaches its own children too); on Linux it
asks the kernel (`prctl(PR_SET_PDEATHSIG, SIGKILL)`) to be killed when the tool's thread that
started it ends, even by SIGKILL; and the tool stops every server still running when it exits
(`atexit`). The parent-death signal reaches the process the tool started, not its own children:
those are stopped with its group by `stop()`, and a server that forks workers should have them
watch their parent (SGLang's do).
"""

from __future__ import annotations

import atexit
import ctypes
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from loadlib.sweep.known_warnings import scan_log

if TYPE_CHECKING:  # the report reads this module's statuses without loading the profile schema
    from loadlib.sweep.grid import ServerConfig
    from loadlib.sweep.spec import ServerSpec

OK, EXITED, UNHEALTHY, DIED = "ok", "exited", "unhealthy", "died"
STATUSES = (OK, EXITED, UNHEALTHY, DIED)
LOOPBACK = "127.0.0.1"
TAIL_LINES = 20
TAIL_BYTES = 64 * 1024  # read from the log's end for its last lines
POLL_FIRST_S, POLL_MAX_S = 0.05, 0.5  # health polls back off from the first to the longest pause
PROBE_TIMEOUT_S = 2.0  # one health request
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None  # loaded before any fork
_RUNNING: set["RunningServer"] = set()  # servers not yet stopped, for `atexit`
_HEALTH = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


class RunningServer:
    """One configuration's server process (see the module's doc). `host` is its base URL."""

    def __init__(self, config: ServerConfig, spec: ServerSpec, log_path: Path, port: int,
                 proc: subprocess.Popen | None) -> None:
        self.config = config
        self.log_path = log_path
        self.port = port
        self.host = f"http://{LOOPBACK}:{port}"
        self.started_at = time.time()
        self.ready_s: float | None = None  # seconds from start to healthy
        self.ended_at: float | None = None
        self._grace_s = spec.stop_grace_s
        self._proc = proc
        self._status = EXITED if proc is None else OK
        self._stopped = False

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    @property
    def status(self) -> str:
        """`ok`, `exited`, `unhealthy` or `died` (see the module's doc)."""
        if self._status == OK and not self._stopped and not self.alive():
            self._status = DIED
        return self._status

    def alive(self) -> bool:
        """Whether the process is still running (a server that died is reaped here)."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after the grace; reaps it. Safe to call twice."""
        if self._stopped:
            return
        self._status = self.status  # one that ended before it was asked to stop died
        self._stopped = True
        _RUNNING.discard(self)
        if self._proc is not None:
            _signal_group(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(self._grace_s)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(self._proc.pid, signal.SIGKILL)  # the leader's children too, if any stayed
            self._proc.wait()
        self.ended_at = time.time()

    def log_tail(self, n: int = TAIL_LINES) -> list[str]:
        """The last `n` lines of its log (stdout and stderr together)."""
        return log_tail(self.log_path, n)

    def entry(self) -> dict[str, Any]:
        """Its row of the manifest's `sweep` list (what `loadlib.figures.sweep` reads)."""
        return {"label": self.config.label, "config": dict(self.config.values), "status": self.status,
                "log_tail": self.log_tail(), "warnings": scan_log(self.log_path),
                "host": self.host, "pid": self.pid, "command": self.config.command,
                "log": self.log_path.name, "returncode": self.returncode, "started_at": self.started_at,
                "ready_s": self.ready_s, "ended_at": self.ended_at}

    def __enter__(self) -> "RunningServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch(config: ServerConfig, spec: ServerSpec, log_path: str | os.PathLike[str]) -> RunningServer:
    """Starts the configuration's server on a free port of 127.0.0.1 (its command split like a
    shell's, run without one, the spec's `env` added to the environment), its output appended to
    `log_path`, and waits until `GET {health}` answers 200: `status` `ok`. A process that ends
    first returns at once (`exited`); one not healthy within `ready_timeout_s` is stopped
    (`unhealthy`). An interrupt while waiting stops it before it propagates.

    Call it from a thread that lives as long as the server (the main thread): the kernel's
    parent-death signal follows the thread that started the process."""
    log_path = Path(log_path)
    port = free_port()
    argv = config.argv(port)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **spec.env}  # Python servers' logs current, for their tail
    with open(log_path, "ab") as log:
        log.write(f"# uni-locust: {config.label}: {' '.join(argv)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))
        except OSError as exc:
            log.write(f"# uni-locust: cannot start {argv[0]!r}: {exc.strerror or exc}\n".encode())
            return RunningServer(config, spec, log_path, port, None)
    server = RunningServer(config, spec, log_path, port, proc)
    _RUNNING.add(server)
    try:
        server._status = _wait_until_healthy(proc, server.host + spec.health, spec.ready_timeout_s)
    except BaseException:
        server.stop()
        raise
    if server._status == OK:
        server.ready_s = time.time() - server.started_at
    else:
        server.stop()
    return server


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago (the server binds it next)."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def log_tail(path: str | os.PathLike[str], n: int = TAIL_LINES) -> list[str]:
    """The last `n` lines of a log file (none when it is missing), undecodable bytes replaced."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - TAIL_BYTES))
            data = log.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-n:] if n > 0 else []


def _wait_until_healthy(proc: subprocess.Popen, url: str, timeout_s: float) -> str:
    """Polls `url` until it answers 200 (`ok`), the process ends (`exited`) or `timeout_s` passes
    (`unhealthy`), pausing a little longer each time up to `POLL_MAX_S`."""
    deadline = time.monotonic() + timeout_s
    pause = POLL_FIRST_S
    while True:
        if proc.poll() is not None:
            return EXITED
        left = deadline - time.monotonic()
        if _healthy(url, min(PROBE_TIMEOUT_S, max(left, 0.01))):
            return OK
        left = deadline - time.monotonic()
        if left <= 0:
            return UNHEALTHY
        time.sleep(min(pause, left))
        pause = min(pause * 2, POLL_MAX_S)


def _healthy(url: str, timeout_s: float) -> bool:
    try:
        with _HEALTH.open(url, timeout=timeout_s) as response:
            return response.status == 200
    except (OSError, http.client.HTTPException):  # refused, reset, timed out, an HTTP error status
        return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # the server leads its own group: its pid is the group's id
    except (ProcessLookupError, PermissionError):
        pass


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """The child's last step before exec: be SIGKILLed when the tool dies (Linux), and die now if
    it already has (it died between the fork and this)."""
    if _LIBC is None:
        return None

    def preexec() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
    return preexec


@atexit.register
def _stop_all() -> None:
    """Stops every server still running when the tool exits (not on SIGKILL: see the module's doc)."""
    for server in list(_RUNNING):
        server.stop()
