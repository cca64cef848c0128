"""Wrong endpoints said plainly through real headless runs: a model the server does not list, a
models list that cannot be had, a run whose first requests all fail alike (stopped with the
reason, or run on with --keep-going), and https:// against a plain-HTTP port (refused at once)."""

from __future__ import annotations

import time

import orjson
import pytest

from loadlib.records import read_records
from tests.conftest import FAST_SIM, protocol_profile, run_locust

CLOSED = protocol_profile("closed", 16, duration_s=60, jitter_s=0.1)


@pytest.mark.processes
def test_a_model_the_server_does_not_list_is_warned_about_once(tmp_path):
    result = run_locust(["--headless", "-u", "2", "--rounds", "1", "--concurrency", "2", "--scenarios", "code",
                         "--model", "nope", "--run-dir", str(tmp_path / "r"), "--sim-args", FAST_SIM], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("--model nope: the server lists Qwen3.8-27B-AWQ") == 1
    manifest = orjson.loads((tmp_path / "r" / "manifest.json").read_bytes())
    assert manifest["model_warning"].startswith("--model nope")


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
