"""`--metrics-port`: the run's live metrics for Prometheus, checked by a real Prometheus server
that scrapes a real distributed run (two workers, one of them killed) and two simulators, and by
the registry fed with records."""

from __future__ import annotations

import bisect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import psutil
import pytest

from loadlib.figures import formulas
from loadlib.records import read_records
from loadlib.run.metrics_export import MAX_REASONS, SECONDS_BUCKETS, LiveState, RunMetrics, figures_of
from tests.conftest import FAST_SIM, free_port

PROMETHEUS = shutil.which("prometheus")
DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "uni-locust.json"
OWN_LOCUSTFILE = '''
from locust import constant, task
from loadlib import LLMUser


class Chat(LLMUser):
    wait_time = constant(0.05)

    @task(3)
    def ask(self):
        self.chat([{"role": "user", "content": "Name a prime."}], name="prime", max_tokens=64)

    @task
    def think(self):
        self.chat([{"role": "user", "content": "Why is 7 prime?"}], name="think", max_tokens=1400, thinking="on")
'''


def record(**fields: Any) -> dict[str, Any]:
    base = {"request_id": "r", "scenario": "code", "cell": "c2-same", "case": "same", "measured": True,
            "error": None, "ttft_s": 0.2, "total_s": 2.2, "last_chunk_s": 2.1, "chunks": 101,
            "completion_tokens": 401, "prompt_tokens": 50, "cached_tokens": 40, "reasoning_tokens": 7,
            "ttfo_s": 0.9}
    return {**base, **fields}


# --- the registry, fed with records ------------------------------------------------------------

def test_a_records_figures_are_the_protocols_formulas():
    figures = figures_of(record())
    assert figures.decode_tps == formulas.decode_tps(401, 0.2, 2.2) == pytest.approx(200.0)
    assert figures.chunk_gap_s == pytest.approx(0.019) and figures.ttfo_s == 0.9 and figures.total_s == 2.2
    failed = figures_of(record(error="http 503: overloaded (Retry-After: 1)", ttft_s=None))
    assert not failed.ok and failed.reason == "http 503" and failed.ttft_s is None and failed.decode_tps is None


def test_measured_records_become_histograms_and_counters_by_outcome_reason_and_labels():
    metrics = RunMetrics(lambda: None)
    for ttft in (0.04, 0.06, 0.3):
        metrics.observe(record(ttft_s=ttft), "run-a")
    metrics.observe(record(error="worker lost: its process ended", ttft_s=None, total_s=None), "run-a")
    metrics.observe(record(measured=False, ttft_s=9.0), "run-a")  # warm-up: left out
    metrics.observe(record(target="B"), "run-a")
    get = metrics.registry.get_sample_value
    labels = {"name": "c2-same", "cell": "c2-same", "target": "", "run": "run-a"}
    assert get("uni_locust_ttft_seconds_count", labels) == 3
    assert get("uni_locust_ttft_seconds_bucket", {**labels, "le": "0.05"}) == 1
    assert get("uni_locust_ttft_seconds_bucket", {**labels, "le": "0.3"}) == 3
    assert get("uni_locust_requests_total", {**labels, "outcome": "ok", "reason": ""}) == 3
    assert get("uni_locust_requests_total", {**labels, "outcome": "failed", "reason": "worker lost"}) == 1
    assert get("uni_locust_tokens_total", {**labels, "kind": "completion"}) == 4 * 401
    assert get("uni_locust_tokens_total", {**labels, "kind": "reasoning"}) == 4 * 7
    assert get("uni_locust_decode_tokens_per_second_sum", labels) == \
        pytest.approx(sum(formulas.decode_tps(401, ttft, 2.2) for ttft in (0.04, 0.06, 0.3)))
    assert get("uni_locust_ttft_seconds_count", {**labels, "target": "B"}) == 1
    assert get("uni_locust_ttfo_seconds_count", labels) == 3
    metrics.observe(record(cell="single", case="single", ttfo_s=None), "run-a")  # no TTFO: no empty series
    single = {**labels, "name": "code", "cell": "single"}
    assert get("uni_locust_ttft_seconds_count", single) == 1 and get("uni_locust_ttfo_seconds_count", single) is None


def test_agent_sessions_export_their_ideal_and_achieved_prefix_hit():
    metrics = RunMetrics(lambda: None)
    turn = {"cell": "sessions-u2", "case": "sessions", "scenario": "agent"}
    metrics.observe(record(**turn, prompt_tokens=1000, cached_tokens=600, ideal_cached_tokens=960), "run-a")
    metrics.observe(record(**turn, prompt_tokens=3000, cached_tokens=2800, ideal_cached_tokens=2880), "run-a")
    metrics.observe(record(**turn, error="context overflow: 9000 + 10 > 8192", ttft_s=None, prompt_tokens=None,
                           cached_tokens=None, ideal_cached_tokens=8000), "run-a")  # refused: not in the ratio
    metrics.observe(record(), "run-a")  # not a session: no ratio
    get = metrics.registry.get_sample_value
    labels = {"name": "sessions-u2: agent", "cell": "sessions-u2", "target": "", "run": "run-a"}
    assert get("uni_locust_session_prefix_hit_ratio", {**labels, "kind": "achieved"}) == pytest.approx(3400 / 4000)
    assert get("uni_locust_session_prefix_hit_ratio", {**labels, "kind": "ideal"}) == pytest.approx(3840 / 4000)
    assert get("uni_locust_tokens_total", {**labels, "kind": "ideal_cached"}) == 3840
    protocol = {"name": "c2-same", "cell": "c2-same", "target": "", "run": "run-a"}
    assert get("uni_locust_session_prefix_hit_ratio", {**protocol, "kind": "achieved"}) is None


def test_failure_reasons_beyond_the_limit_count_as_other():
    metrics = RunMetrics(lambda: None)
    for i in range(MAX_REASONS + 5):
        metrics.observe(record(error=f"kind {i}: detail", ttft_s=None), "r")
    labels = {"name": "c2-same", "cell": "c2-same", "target": "", "run": "r", "outcome": "failed"}
    assert metrics.registry.get_sample_value("uni_locust_requests_total", {**labels, "reason": "other"}) == 5
    assert metrics.registry.get_sample_value("uni_locust_requests_total", {**labels, "reason": "kind 0"}) == 1


def test_gauges_are_read_when_scraped_and_workers_only_shown_with_workers():
    state = {"now": LiveState("r", streams_in_flight=3, users=4, workers=2, workers_lost=1)}
    metrics = RunMetrics(lambda: state["now"])
    get = metrics.registry.get_sample_value
    assert (get("uni_locust_streams_in_flight", {"run": "r"}), get("uni_locust_users", {"run": "r"}),
            get("uni_locust_workers", {"run": "r"}), get("uni_locust_workers_lost_total", {"run": "r"})) == (3, 4, 2, 1)
    state["now"] = LiveState("r", streams_in_flight=0, users=4, workers=None, workers_lost=0)
    assert get("uni_locust_streams_in_flight", {"run": "r"}) == 0 and get("uni_locust_workers", {"run": "r"}) is None


def test_the_servers_account_of_speculative_decoding_and_each_cells_energy_are_live_series():
    energy = ({"cell": "c2-same", "gpu": "all", "joules": 400.0, "mean_watts": 400.0, "peak_watts": 410.0,
               "joules_per_token": 0.5, "tokens_per_joule": 2.0, "target": ""},
              {"cell": "c2-same", "gpu": "1", "joules": None, "mean_watts": None, "peak_watts": 100.0,
               "joules_per_token": None, "tokens_per_joule": None, "target": ""})
    metrics = RunMetrics(lambda: LiveState("r", 0, 2, None, 0, energy))
    metrics.observe(record(spec_verify_steps=10, spec_accepted_tokens=40), "r")
    metrics.observe(record(spec_verify_steps=30, spec_accepted_tokens=30), "r")
    metrics.observe(record(), "r")  # no account: no figure of it
    get = metrics.registry.get_sample_value
    labels = {"name": "c2-same", "cell": "c2-same", "target": "", "run": "r"}
    assert get("uni_locust_spec_verify_steps_total", labels) == 40
    assert get("uni_locust_spec_accepted_tokens_total", labels) == 70
    assert get("uni_locust_spec_accept_length", labels) == pytest.approx(110 / 40)  # each step weighs once
    gpu = {"cell": "c2-same", "gpu": "all", "target": "", "run": "r"}
    assert (get("uni_locust_gpu_energy_joules", gpu), get("uni_locust_gpu_tokens_per_joule", gpu),
            get("uni_locust_gpu_peak_watts", {**gpu, "gpu": "1"})) == (400.0, 2.0, 100.0)
    assert get("uni_locust_gpu_energy_joules", {**gpu, "gpu": "1"}) is None  # unknown: no sample, not 0
    again = {**energy[0], "joules": 500.0}  # the cell ran again: one series, its last figures
    metrics = RunMetrics(lambda: LiveState("r", 0, 2, None, 0, (*energy, again)))
    assert metrics.registry.get_sample_value("uni_locust_gpu_energy_joules", gpu) == 500.0


# --- bad ports -----------------------------------------------------------------------------------

@pytest.mark.processes
def test_a_bad_metrics_port_is_one_line_and_exit_code_2(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        for port, said in (("70000", "must be a port from 1 to 65535, got 70000"),
                           (str(port := taken.getsockname()[1]),
                            f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}: Address already in use")):
            (tmp_path / "own.py").write_text(OWN_LOCUSTFILE)
            proc = subprocess.run([sys.executable, "-m", "locust", "-f", "own.py", "--headless", "-t", "2s",
                                   "--metrics-port", port, "--host", "http://127.0.0.1:9"], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=60)
            errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
            assert proc.returncode == 2 and len(errors) == 1 and errors[0].endswith(said), proc.stderr[-2000:]
            assert "Traceback" not in proc.stderr
    finally:
        taken.close()


# --- a real Prometheus scrapes a real run ------------------------------------------------------

def prometheus_query(url: str, query: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": query, **({"time": f"{at:.3f}"} if at is not None else {})}
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=5) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_until(check: Any, timeout: float, what: str, proc: subprocess.Popen[str] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        assert proc is None or proc.poll() is None, f"locust ended before {what}"
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.25)


def start_prometheus(tmp_path: Path, targets: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """Debian's prometheus on a free loopback port, scraping `targets` (job -> host:port) every second."""
    port = free_port()
    jobs = "".join(f"  - job_name: {job}\n    static_configs:\n      - targets: ['{address}']\n"
                   for job, address in targets.items())
    config = tmp_path / "prometheus.yml"
    config.write_text(f"global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n{jobs}")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/-/ready", timeout=1).status == 200, 20, "prometheus ready")
    return proc, url


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def scraped_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A 12 s run with two workers on an SGLang-style simulator (5 % HTTP 503), one worker
    SIGKILLed once Prometheus has seen both; a vLLM-style simulator beside it gets a few requests;
    Prometheus scrapes the tool and both simulators every second."""
    if PROMETHEUS is None:
        pytest.skip("Debian's prometheus is not installed (apt-get install prometheus)")
    from loadlib.sim.process import start_simulator

    tmp = tmp_path_factory.mktemp("scraped")
    (tmp / "own.py").write_text(OWN_LOCUSTFILE)
    sglang = start_simulator([*FAST_SIM.split(), "--fault", "http503@0.05"])
    vllm = start_simulator([*FAST_SIM.split(), "--flavor", "vllm"])
    metrics_port, run_dir = free_port(), tmp / "run"
    prometheus, url = start_prometheus(tmp, {"uni-locust": f"127.0.0.1:{metrics_port}",
                                            "sglang": sglang.url.split("//")[1], "vllm": vllm.url.split("//")[1]})
    locust = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", "own.py", "--headless", "-u", "4", "-r", "4", "-t", "12s",
         "--processes", "2", "--host", sglang.url, "--metrics-port", str(metrics_port),
         "--loglevel", "WARNING", "--run-dir", str(run_dir)],
        cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_until(lambda: prometheus_query(url, "uni_locust_workers == 2"), 20, "two workers scraped", locust)
        workers = [child for child in psutil.Process(locust.pid).children()]
        os.kill(workers[0].pid, signal.SIGKILL)
        wait_until(lambda: prometheus_query(url, "vllm:time_to_first_token_seconds_count == 0"), 10, "vllm idle")
        for _ in range(3):  # the vLLM-style server's own histograms and counters get some data
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16})
            urllib.request.urlopen(urllib.request.Request(f"{vllm.url}/v1/chat/completions", body.encode(),
                                                          {"Content-Type": "application/json"}), timeout=10).read()
        wait_until(lambda: prometheus_query(url, "vllm:time_to_first_token_seconds_count > 0"), 10, "vllm scraped")
        _, err = locust.communicate(timeout=60)
        samples = prometheus_query(url, f'uni_locust_users{{run="{run_dir.name}"}}[1m]')
        yield {"url": url, "run_dir": run_dir, "stderr": err, "killed": workers[0].pid,
               "last": max(float(t) for t, _ in samples[0]["values"])}
    finally:
        if locust.poll() is None:
            os.killpg(locust.pid, signal.SIGKILL)
            locust.wait()
        stop(prometheus)
        sglang.stop()
        vllm.stop()


@pytest.mark.processes
def test_promql_median_ttft_lands_within_one_bucket_of_the_records_p50(scraped_run):
    run, at = scraped_run["run_dir"].name, scraped_run["last"]
    [result] = prometheus_query(scraped_run["url"], "histogram_quantile(0.5, sum by (le) "
                                f'(uni_locust_ttft_seconds_bucket{{run="{run}"}}))', at)
    promql_p50 = float(result["value"][1])
    ttfts = [r["ttft_s"] for r in read_records(scraped_run["run_dir"]) if r["measured"] and r["error"] is None]
    records_p50 = float(np.median(ttfts))
    print(f"TTFT p50: PromQL {promql_p50 * 1000:.2f} ms, records {records_p50 * 1000:.2f} ms (n {len(ttfts)})")
    assert abs(bisect.bisect_left(SECONDS_BUCKETS, promql_p50) - bisect.bisect_left(SECONDS_BUCKETS, records_p50)) <= 1


@pytest.mark.processes
def test_prometheus_counts_every_workers_records_and_sees_the_lost_worker(scraped_run):
    url, run, at = scraped_run["url"], scraped_run["run_dir"].name, scraped_run["last"]
    records = [r for r in read_records(scraped_run["run_dir"]) if r["measured"]]
    ended_before = sum(1 for r in records if r["sent_at"] + (r["total_s"] or 0) < at - 1.5)

    def total(query: str) -> float:
        return sum(float(sample["value"][1]) for sample in prometheus_query(url, query, at))

    counted = total(f'sum(uni_locust_requests_total{{run="{run}"}})')
    assert ended_before <= counted <= len(records), (ended_before, counted, len(records))
    assert {r["worker"] for r in records if r["worker"] >= 0} == {0, 1}  # both workers' records counted
    failed = total(f'sum(uni_locust_requests_total{{run="{run}", outcome="failed", reason="http 503"}})')
    assert 0 < failed < counted
    assert total(f'sum(uni_locust_tokens_total{{run="{run}", kind="reasoning"}})') > 0
    [series] = prometheus_query(url, f'uni_locust_workers{{run="{run}"}}[1m]', at)
    workers = [int(float(value)) for _, value in series["values"]]
    assert 2 in workers and 1 in workers[workers.index(2):], workers  # alive: 2, then 1 after the kill
    assert total(f'uni_locust_workers_lost_total{{run="{run}"}}') == 1
    assert "Traceback" not in scraped_run["stderr"], scraped_run["stderr"][-3000:]


@pytest.mark.processes
def test_every_dashboard_query_returns_data_from_the_tool_and_the_servers(scraped_run):
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert len(queries) >= 20
    run = scraped_run["run_dir"].name
    for query in queries:
        expr = (query.replace("$__rate_interval", "1m").replace("$run", run).replace("$target", ".*")
                .replace("$instance", ".*"))
        result = prometheus_query(scraped_run["url"], expr, scraped_run["last"])
        values = [float(sample["value"][1]) for sample in result]
        assert any(np.isfinite(values)), f"{query}: {result}"


@pytest.mark.processes
def test_with_the_web_ui_the_same_page_is_also_at_uni_metrics(tmp_path):
    (tmp_path / "own.py").write_text(OWN_LOCUSTFILE)
    metrics_port, web_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "locust", "-f", "own.py", "--autostart", "-u", "2", "-r", "2",
                             "-t", "20s", "--web-port", str(web_port), "--metrics-port", str(metrics_port),
                             "--sim-args", FAST_SIM, "--loglevel", "WARNING", "--run-dir", str(tmp_path / "run")],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def pages() -> list[str] | None:
        texts = [urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2).read().decode()
                 for port, path in ((metrics_port, "/metrics"), (web_port, "/uni/metrics"))]
        return texts if all('uni_locust_requests_total{' in text for text in texts) else None

    try:
        own, web_ui = wait_until(pages, 30, "requests on both pages", proc)
        names = [{line.split("{")[0] for line in text.splitlines() if not line.startswith("#")}
                 for text in (own, web_ui)]
        assert names[0] == names[1] and "uni_locust_ttft_seconds_bucket" in names[0], names
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
