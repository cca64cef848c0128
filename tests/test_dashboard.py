"""The Grafana dashboard in dashboards/: importable JSON whose every query names metrics that the
tool exports (`loadlib.run.metrics_export`) or that the server serves (the simulator's SGLang and
vLLM pages). That each query returns data from a real Prometheus is checked by
tests/run/test_metrics_export.py."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadlib.run.metrics_export import LiveState, RunMetrics
from loadlib.sim import metrics as sim_metrics
from loadlib.sim.engine import Engine
from loadlib.sim.presets import PRESETS

DASHBOARD = Path(__file__).resolve().parent.parent / "dashboards" / "uni-locust.json"
METRIC = re.compile(r"\b(?:uni_locust_\w+|sglang:\w+|vllm:\w+)")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panel_queries() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel.get("targets", [])]


def queries() -> list[str]:
    """The panels' queries and the variables'."""
    return panel_queries() + [var["query"]["query"] for var in dashboard()["templating"]["list"]]


def sample_names(text: str) -> set[str]:
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def tool_names() -> set[str]:
    metrics = RunMetrics(lambda: LiveState("r", 1, 1, 2, 0))
    record = {"case": "single", "cell": "single", "scenario": "code", "error": None, "ttft_s": 0.1, "total_s": 1.0,
              "ttfo_s": 0.5, "last_chunk_s": 0.9, "chunks": 10, "completion_tokens": 50, "prompt_tokens": 5,
              "cached_tokens": 1, "reasoning_tokens": 2}
    metrics.observe(record, "r")
    metrics.observe({**record, "error": "http 500"}, "r")
    from prometheus_client import generate_latest
    return sample_names(generate_latest(metrics.registry).decode())


def server_names() -> set[str]:
    names: set[str] = set()
    for flavor in ("sglang", "vllm"):
        engine = Engine(dataclasses.replace(PRESETS["3090x2-tp2-dflash"], flavor=flavor))
        names |= sample_names(sim_metrics.render(engine).decode())
    return names


def test_the_dashboard_is_importable_with_a_prometheus_input_and_run_and_target_variables():
    board = dashboard()
    assert [i["pluginId"] for i in board["__inputs"]] == ["prometheus"]
    assert {"run", "target"} <= {var["name"] for var in board["templating"]["list"]}
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}" and panel["targets"], panel["title"]


def test_every_query_names_only_metrics_the_tool_or_the_server_exports():
    known = tool_names() | server_names()
    for query in queries():
        names = METRIC.findall(query)
        assert names, f"names no metric of the tool or a server: {query}"
        assert set(names) <= known, f"{query}: unknown {sorted(set(names) - known)}"


@pytest.mark.parametrize("prefix", ["uni_locust_", "sglang:", "vllm:"])
def test_client_and_both_servers_have_panels(prefix):
    assert any(prefix in query for query in queries())


def test_client_panels_select_the_run_and_the_target():
    for query in panel_queries():
        for selector in re.findall(r"uni_locust_(?:ttft|ttfo|chunk|request|decode|tokens)\w*\{([^}]*)\}", query):
            assert 'run=~"$run"' in selector and 'target=~"$target"' in selector, query
