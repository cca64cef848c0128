"""The real sglang-router (round_robin) in front of two simulated instances."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from sim_http import chat, read_trace

from loadlib.sim.process import start_simulator

pytest.importorskip("sglang_router", reason="sglang-router is not installed (pip install -e '.[router]')")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    trace = tmp_path_factory.mktemp("router") / "trace.jsonl"
    with start_simulator(["--instances", "2", "--time-scale", "0.02", "--trace", str(trace)]) as sim:
        port = free_port()
        router = subprocess.Popen(
            [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *sim.urls,
             "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(port),
             "--log-level", "warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(150):
                try:
                    if urllib.request.urlopen(url + "/health", timeout=1).status == 200:
                        break
                except OSError:
                    time.sleep(0.2)
            else:
                pytest.fail("sglang-router did not become healthy")
            yield url, sim, trace
        finally:
            router.terminate()
            try:
                router.wait(10)
            except subprocess.TimeoutExpired:
                router.kill()
                router.wait()


def test_router_round_robins_protocol_requests_over_both_instances(routed):
    url, sim, trace = routed
    ids = [f"routed-{i}" for i in range(4)]
    replies = [chat(url, max_tokens=64, headers={"X-Request-Id": rid}) for rid in ids]
    assert all(r.status == 200 and r.usage["completion_tokens"] == 64 for r in replies)
    assert all(r.events[-1] == "[DONE]" for r in replies)
    assert len({r.text for r in replies}) == 1  # identical prompt, identical output
    read_trace(trace, *ids)
    for instance in sim.urls:
        served = chat(instance, max_tokens=4).usage["prompt_tokens_details"]["cached_tokens"]
        assert served > 10  # both instances saw the routed prompt, so both have it cached
