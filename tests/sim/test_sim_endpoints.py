"""SGLang's side endpoints: server and model info, health_generate, flush_cache, metrics."""

from __future__ import annotations

import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sim_http import chat, metric, request

from loadlib.scenarios.thread import PROTOCOL_PROMPTS
from loadlib.sim.presets import DEFAULT_PRESET, PRESETS
from loadlib.sim.process import start_simulator


@pytest.mark.processes
def test_server_info_reports_launch_flags_version_and_accept_length(sim):
    chat(sim.url, max_tokens=512)  # over 40 decode batches: one decode log at least
    for path in ("/get_server_info", "/server_info"):
        info = request(sim.url, "GET", path).body
        assert info["max_running_requests"] == 2 and info["chunked_prefill_size"] == 2048
        assert info["speculative_algorithm"] == "DFLASH" and info["speculative_num_draft_tokens"] == 8
        assert info["tp_size"] == 2 and info["kv_cache_dtype"] == "fp8_e5m2"
        assert info["version"].startswith("0.5")
        assert 1 < info["internal_states"][0]["avg_spec_accept_length"] <= 8


@pytest.mark.processes
def test_spec_accept_length_gauge_is_the_last_decode_log_interval_server_info_the_lifetime():
    # SGLang's decode log sets the gauge every --decode-log-interval decode batches from those
    # batches alone; /get_server_info averages every completed interval since start.
    accept = PRESETS[DEFAULT_PRESET].accept
    with start_simulator(["--time-scale", "0.02", "--decode-log-interval", "20"]) as sim:
        gauge = lambda: metric(request(sim.url, "GET", "/metrics").body.decode(), "sglang:spec_accept_length")
        state = lambda: request(sim.url, "GET", "/get_server_info").body["internal_states"][0]
        assert gauge() == 0 and "avg_spec_accept_length" not in state()
        chat(sim.url, prompt=PROTOCOL_PROMPTS["code"], max_tokens=512)  # ~80 decode batches
        code = gauge()
        chat(sim.url, prompt=PROTOCOL_PROMPTS["cn_essay"], max_tokens=512)  # ~310 batches
        essay, lifetime = gauge(), state()["avg_spec_accept_length"]
        rate = metric(request(sim.url, "GET", "/metrics").body.decode(), "sglang:spec_accept_rate")
    assert abs(code - accept["code"]) < 0.6 and abs(essay - accept["cn_essay"]) < 0.45
    assert essay < lifetime < (essay + code) / 2  # many more essay batches than code ones
    assert rate == pytest.approx((essay - 1) / 7)


@pytest.mark.processes
def test_model_info_and_health_generate(sim):
    for path in ("/get_model_info", "/model_info"):
        info = request(sim.url, "GET", path).body
        assert info["is_generation"] is True and info["model_path"]
    assert request(sim.url, "GET", "/health_generate").status == 200


@pytest.mark.processes
def test_metrics_use_sglang_names_and_count_tokens(sim):
    before = request(sim.url, "GET", "/metrics").body.decode()
    reply = chat(sim.url, max_tokens=50)
    text = request(sim.url, "GET", "/metrics").body.decode()
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:spec_accept_length",
                 "sglang:cache_hit_rate", "sglang:gen_throughput", "sglang:token_usage"):
        assert f"# TYPE {name} gauge" in text
    grew = metric(text, "sglang:generation_tokens_total") - metric(before, "sglang:generation_tokens_total")
    assert grew == 50
    assert metric(text, "sglang:prompt_tokens_total") - metric(before, "sglang:prompt_tokens_total") == reply.usage["prompt_tokens"]
    assert metric(text, "sglang:time_to_first_token_seconds_count") >= 1
    assert metric(text, "loadlib_sim:scheduling_lag_seconds", quantile="0.99") >= 0
    assert re.search(r'^sglang:e2e_request_latency_seconds_bucket\{.*le="\+Inf"\} \d+$', text, re.M)


@pytest.mark.processes
def test_flush_cache_empties_the_radix_cache_but_not_while_requests_run(sim):
    prompt = f"Summarize item {uuid.uuid4().hex} for me."
    chat(sim.url, prompt=prompt, max_tokens=4)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(chat, sim.url, max_tokens=1024)
        for _ in range(500):
            if metric(request(sim.url, "GET", "/metrics").body.decode(), "sglang:num_running_reqs"):
                break
            time.sleep(0.002)
        refused = request(sim.url, "POST", "/flush_cache")
        running.result()
    assert refused.status == 400
    assert chat(sim.url, prompt=prompt, max_tokens=4).usage["prompt_tokens_details"]["cached_tokens"] > 10
    flushed = request(sim.url, "POST", "/flush_cache")
    assert flushed.status == 200 and flushed.body.startswith(b"Cache flushed.")
    assert chat(sim.url, prompt=prompt, max_tokens=4).usage["prompt_tokens_details"]["cached_tokens"] == 0
