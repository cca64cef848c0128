"""The real sglang-router (round_robin) in front of two simulated instances."""

from __future__ import annotations

import pytest
from sim_http import chat, read_trace

from loadlib.sim.process import start_simulator
from tests.conftest import sglang_router

pytest.importorskip("sglang_router", reason="sglang-router is not installed (pip install -e '.[router]')")


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    trace = tmp_path_factory.mktemp("router") / "trace.jsonl"
    with start_simulator(["--instances", "2", "--time-scale", "0.02", "--trace", str(trace)]) as sim:
        with sglang_router(sim.urls) as url:
            yield url, sim, trace


@pytest.mark.processes
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
