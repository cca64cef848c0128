"""Wrong endpoints said plainly through real headless runs: a model the server does not list (in
the summary's first lines too), a models list that cannot be had, a server that wants an API key
(the hint names --api-key), a run whose first requests all fail alike (stopped with the reason, or
run on with --keep-going), and https:// against a plain-HTTP port (refused at once)."""

from __future__ import annotations

import socketserver
import time
from http.server import BaseHTTPRequestHandler

import orjson
import pytest

from loadlib.records import read_records
from tests.conftest import FAST_SIM, protocol_profile, run_locust, run_locust_together, served

CLOSED = protocol_profile("closed", 16, duration_s=60, jitter_s=0.1)


@pytest.mark.processes
def test_a_model_the_server_does_not_list_is_warned_about_once(tmp_path):
    result = run_locust(["--headless", "-u", "2", "--rounds", "1", "--concurrency", "2", "--scenarios", "code",
                         "--model", "nope", "--run-dir", str(tmp_path / "r"), "--sim-args", FAST_SIM], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("--model nope: the server lists Qwen3.8-27B-AWQ") == 1
    manifest = orjson.loads((tmp_path / "r" / "manifest.json").read_bytes())
    assert manifest["model_warning"].startswith("--model nope")
    assert result.stdout.splitlines()[1] == f"MODEL NOT CONFIRMED BY THE SERVER: {manifest['model_warning']}"


class _WantsKey(BaseHTTPRequestHandler):
    """A server behind an API key that no request gives right: 401 with llama-server's error body."""

    def _refuse(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = orjson.dumps({"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}})
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _refuse

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.processes
def test_a_401_says_to_give_the_api_key_and_a_wrong_key_is_said_to_be_refused(tmp_path):
    (tmp_path / "p.toml").write_text(CLOSED, encoding="utf-8")
    with served(socketserver.ThreadingTCPServer(("127.0.0.1", 0), _WantsKey)) as server:
        host = f"http://127.0.0.1:{server.server_address[1]}"
        args = ["--headless", "-u", "2", "--profile", "p.toml", "--host", host]
        results = run_locust_together({
            "no key": ([*args, "--run-dir", str(tmp_path / "a")], tmp_path),
            "wrong key": ([*args, "--api-key", "sk-wrong-4242", "--run-dir", str(tmp_path / "b")], tmp_path)},
            timeout=90)
    for name, hint in (("no key", "the server wants an API key: give --api-key or set OPENAI_API_KEY"),
                       ("wrong key", "the server refused the API key: check --api-key or OPENAI_API_KEY")):
        result = results[name]
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
        assert f"GET /v1/models: HTTP 401; requests ask for model 'default' ({hint})" in result.stderr
        assert "give --model" not in result.stderr + result.stdout
        assert f"stopping early: the first 8 requests all failed: http 401: Invalid API Key ({hint})" \
            in result.stderr
        first, second = result.stdout.splitlines()[:2]
        assert "CUT SHORT (stopped early: the first 8 requests all failed: http 401" in first
        assert second == f"MODEL NOT CONFIRMED BY THE SERVER: GET /v1/models: HTTP 401; requests ask for model " \
                         f"'default' ({hint})"
    assert "sk-wrong-4242" not in results["wrong key"].stderr + results["wrong key"].stdout


@pytest.mark.processes
def test_first_requests_all_failing_alike_stop_the_run_with_the_reason(tmp_path):
    (tmp_path / "p.toml").write_text(CLOSED, encoding="utf-8")
    started = time.monotonic()
    result = run_locust(["--headless", "-u", "4", "--profile", "p.toml", "--host", "http://127.0.0.1:9",
                         "--run-dir", str(tmp_path / "r")], cwd=tmp_path, timeout=60)
    assert time.monotonic() - started < 30 and "Traceback" not in result.stderr
    assert "GET /v1/models: connect to 127.0.0.1:9: connection refused" in result.stderr  # said, not silent
    assert "stopping early: the first 8 requests all failed: connect to 127.0.0.1:9: connection refused" \
        in result.stderr
    assert "CUT SHORT (stopped early: the first 8 requests all failed" in result.stdout
    assert len(list(read_records(tmp_path / "r"))) >= 8


@pytest.mark.processes
def test_keep_going_runs_on_through_failures(tmp_path):
    (tmp_path / "p.toml").write_text(CLOSED, encoding="utf-8")
    result = run_locust(["--headless", "-u", "2", "-t", "4s", "--keep-going", "--profile", "p.toml",
                         "--host", "http://127.0.0.1:9", "--model", "m", "--run-dir", str(tmp_path / "r")],
                        cwd=tmp_path, timeout=60)
    assert "stopping early" not in result.stderr
    assert "-t/--run-time 4 s reached" in result.stdout


@pytest.mark.processes
def test_https_against_a_plain_http_port_is_refused_at_once_with_the_url_to_use(tmp_path, simulator):
    sim, _trace = simulator
    (tmp_path / "p.toml").write_text(CLOSED, encoding="utf-8")
    started = time.monotonic()
    result = run_locust(["--headless", "-u", "4", "--profile", "p.toml", "--model", "m",
                         "--host", sim.url.replace("http://", "https://"), "--run-dir", str(tmp_path / "r")],
                        cwd=tmp_path, timeout=90)
    assert time.monotonic() - started < 20, "said before any request is sent, not after the first ones time out"
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and errors[0].endswith(
        f"error: {sim.url.replace('http://', 'https://')} answers plain HTTP, not TLS: use {sim.url}"), errors
    assert not any((tmp_path / "r").iterdir()), "no run started: nothing in --run-dir"
