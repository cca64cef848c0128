"""Agent sessions behind the real sglang-router, in front of two simulated instances, each with its
own prefix cache: with the routing key every request carries (`X-SMG-Routing-Key`, read by the
router's `manual` policy) each session stays on one instance and the cache serves the ideal; round
robin without it spreads a session's turns and loses hits."""

from __future__ import annotations

import pytest

from loadlib.figures import sessions as figures
from loadlib.scenarios.cc_traces import write_jsonl
from loadlib.scenarios.cc_traces_gen import generate
from loadlib.sim.process import start_simulator
from tests.conftest import free_port, sglang_router
from tests.modes.test_sessions import SHAPE, frame, profile
from tests.profile_runs import run_profiles_together

pytest.importorskip("sglang_router", reason="sglang-router is not installed (pip install -e '.[router]')")


@pytest.mark.processes
def test_the_session_key_keeps_each_session_on_one_instance_and_round_robin_loses_hits(tmp_path):
    write_jsonl(generate(4, seed=7, scope="local", shape=SHAPE), tmp_path / "local.jsonl")
    text = profile(str(tmp_path / "local.jsonl"), sessions=4)
    with start_simulator(["--instances", "2", "--time-scale", "0.02", "--radix-cache-tokens", "100000000"]) as sim:
        # two routers at once: each its own metrics port
        with sglang_router(sim.urls, "--policy", "manual", "--prometheus-port", str(free_port())) as sticky, \
                sglang_router(sim.urls, "--prometheus-port", str(free_port())) as rotating:
            runs = run_profiles_together({
                "sticky": (tmp_path / "sticky", text, 1, "--host", sticky),
                "round robin": (tmp_path / "rr", text, 1, "--host", rotating),
            }, timeout=180)
    table = {name: figures.cell_table(frame(records)).iloc[0] for name, (_result, records) in runs.items()}
    ideal = table["sticky"]["ideal_prefix_hit"]
    assert table["round robin"]["ideal_prefix_hit"] == pytest.approx(ideal, abs=0.01)
    assert table["sticky"]["achieved_prefix_hit"] == pytest.approx(ideal, abs=0.02)
    assert table["round robin"]["achieved_prefix_hit"] < ideal - 0.1
