"""A server that goes away ends the run: its simulator killed mid-run (one process and two), the
run stops CUT SHORT with the time and exit code 1 instead of firing its plan at a dead port; a
live server that cuts most streams, and one that answers 503 or 429, is never taken for gone."""

from __future__ import annotations

import socket
import socketserver
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler

import orjson
import pytest

from loadlib.records import read_records
from loadlib.run.early_stop import GONE_AFTER, ConnectionStreaks, EarlyStop
from loadlib.sim.process import start_simulator
from tests.conftest import FAST_SIM, LOCUSTFILE, free_port, run_locust, served

REFUSED = "connect to 127.0.0.1:9: connection refused"


def test_a_streak_counts_connection_failures_after_the_server_answered_and_an_answer_ends_it():
    streaks = ConnectionStreaks()
    assert not any(streaks.see("", REFUSED, None, t) for t in range(10)), "never answered: the first rule's"
    streaks.see("", None, 200, 10.0)
    seen = [streaks.see("", REFUSED, None, 11.0 + t) for t in range(GONE_AFTER + 2)]
    assert seen == [False] * (GONE_AFTER - 1) + [True, False, False]  # once per streak
    assert streaks.streaks[""].since == 11.0 and streaks.streaks[""].count == GONE_AFTER + 2
    streaks.see("", "http 503: overloaded (Retry-After: 1)", 503, 20.0)  # alive: it answered
    assert not streaks.active
    streaks.see("", "timeout before headers", None, 21.0)  # says nothing either way
    assert [streaks.see("", "connection reset before headers", None, 22.0) for _ in range(GONE_AFTER)][-1]


def test_a_burst_of_503_429_and_cut_streams_is_never_a_streak_that_outlives_an_answer():
    streaks = ConnectionStreaks()
    fired = 0
    for n in range(400):
        answer = [(None, 200), ("http 503: busy", 503), ("http 429: slow down", 429),
                  ("connection closed mid-stream", 200)][n % 4]
        fired += streaks.see("", *answer, float(n))
    assert fired == 0


def test_an_ab_runs_targets_have_streaks_of_their_own():
    streaks = ConnectionStreaks()
    streaks.see("A", None, 200, 0.0)
    streaks.see("B", None, 200, 0.0)
    fired = []
    for n in range(GONE_AFTER):
        fired.append(streaks.see("B", REFUSED, None, 1.0 + n))
        streaks.see("A", None, 200, 1.0 + n)
    assert fired[-1] and "A" not in streaks.streaks


def test_a_workers_batches_keep_a_targets_first_answers_after_the_first_requests():
    """A worker's batch drops successes once no streak is open, but not before every target has
    answered: B's first answers come after the first requests, and its silence must still count."""
    early = EarlyStop("http://a", lambda reason: None, targets=("A", "B"))

    def batch(target: str, error: str | None, status: int | None, count: int) -> bytes:
        return b"\n".join(orjson.dumps({"sent_at": 1.0, "total_s": 0.1, "error": error, "http_status": status,
                                         "target": target, "ok": error is None}) for _ in range(count))

    early.see_lines(batch("A", None, 200, 8))  # the first requests' rule has seen its 8
    assert not early.first.watching
    early.see_lines(batch("B", None, 200, 2))
    assert early.streaks.answered == {"A", "B"}
    early.see_lines(batch("B", REFUSED, None, GONE_AFTER))
    assert early.streaks.streaks["B"].count == GONE_AFTER


class _Busy(BaseHTTPRequestHandler):
    """A server that is there but sheds every request: 503 with Retry-After."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(503)
        self.send_header("Retry-After", "1")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _streak_of(early: EarlyStop, target: str = "") -> None:
    early.see([{"sent_at": 1.0, "total_s": 0.5, "error": None, "http_status": 200, "target": target}])
    for n in range(GONE_AFTER):
        early.see([{"sent_at": 2.0 + n, "total_s": 0.0, "error": REFUSED, "http_status": None, "target": target}])


def test_the_probe_ends_the_run_only_when_the_server_does_not_answer_at_all():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        gone_url = f"http://127.0.0.1:{closed.getsockname()[1]}"  # bound, not listening: refused
        said: list[str] = []
        early = EarlyStop(gone_url, said.append, started_at=0.0)
        _streak_of(early)
        early._probe("")
    assert len(said) == 1 and said[0].startswith(f"the server {gone_url} went away 2.0 s into the run (at ")
    assert f"{GONE_AFTER} requests in a row failed at the connection (the first: {REFUSED})" in said[0]
    assert said[0].endswith("GET /v1/models gets no answer (connect to 127.0.0.1:"
                            f"{gone_url.rsplit(':', 1)[1]}: connection refused)")

    with served(socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Busy)) as busy:
        said = []
        early = EarlyStop(f"http://127.0.0.1:{busy.server_address[1]}", said.append)
        _streak_of(early)
        early._probe("")
    assert said == [] and not early.streaks.active, "a 503 on /v1/models: the server is there"


def _wait_for_successes(run_dir, count: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / "records.jsonl").exists() and \
                sum(1 for r in read_records(run_dir) if r["error"] is None) >= count:
            return
        if proc.poll() is not None:
            pytest.fail(f"locust ended before the kill: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    pytest.fail("no successful request came")


@pytest.mark.processes
@pytest.mark.parametrize("processes", [1, 2])
def test_a_server_killed_mid_run_ends_it_cut_short_with_the_time(tmp_path, processes):
    """The plan (3 rounds of 2 and 4 streams after 2 prompts, 512 tokens) would fire ~30 more
    requests at the dead port within a second; the run stops after those in flight."""
    sim = start_simulator(FAST_SIM.split())
    distributed = []
    if processes > 1:
        port = str(free_port())
        distributed = ["--processes", str(processes), "--master-bind-host", "127.0.0.1",
                       "--master-bind-port", port, "--master-port", port]
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "4", *distributed,
               "--concurrency", "2,4", "--scenarios", "code,en_tech", "--host", sim.url,
               "--run-dir", str(tmp_path / "r")]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_successes(tmp_path / "r", 3, proc)
        sim.proc.kill()  # SIGKILL, as kill -9
        killed_at = time.time()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        sim.stop()
    assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]
    first = out.splitlines()[0]
    assert f"CUT SHORT (stopped early: the server {sim.url} went away " in first, first
    assert "requests in a row failed at the connection" in first and "GET /v1/models gets no answer" in first
    stopping = [line for line in err.splitlines() if "stopping early: the server" in line]
    assert len(stopping) == 1, err[-3000:]
    records = list(read_records(tmp_path / "r"))
    late = [r for r in records if r["sent_at"] > killed_at]
    assert len(late) <= 8, f"{len(late)} requests sent after the kill: the plan went on"
    manifest = orjson.loads((tmp_path / "r" / "manifest.json").read_bytes())
    assert manifest["finished"] is False and manifest["stopped_early"].startswith(f"the server {sim.url} went away")


@pytest.mark.processes
def test_a_live_server_that_cuts_most_streams_is_not_taken_for_gone(tmp_path):
    """drop@0.8 with the simulator's fault seed 0: the first request is whole, the next five
    single-stream requests are cut mid-way ('connection closed mid-stream', a connection failure),
    a streak that makes the run probe the server; it answers, so the whole plan runs."""
    result = run_locust(["--headless", "-u", "2", "--concurrency", "2", "--rounds", "2", "--max-tokens", "64",
                         "--scenarios", "code,en_tech,cn_chat", "--run-dir", str(tmp_path / "r"),
                         "--sim-args", f"{FAST_SIM} --fault drop@0.8"], cwd=tmp_path, timeout=120)
    assert "stopping early" not in result.stderr and "CUT SHORT" not in result.stdout, result.stderr[-3000:]
    cut = [bool(r["error"]) for r in read_records(tmp_path / "r")]
    assert cut[:6] == [False] + [True] * 5, cut
    assert all(r["error"] in (None, "connection closed mid-stream") for r in read_records(tmp_path / "r"))
    assert orjson.loads((tmp_path / "r" / "manifest.json").read_bytes())["finished"] is True
