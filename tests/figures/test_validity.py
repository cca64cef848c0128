"""The validity block: every measured cell's checks (client headroom, client and server counting
the same tokens, requests and requests in flight, Little's law, cache state, accept length), each
passed, failed in words, or not made and why; on hand-built cells with known answers, then on
real runs against the simulator, whose `count_skew` fault makes its token counter disagree with
what it streams."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadlib.figures import free_running
from loadlib.figures.client_limits import client_limited
from loadlib.figures.validity import (EDGE_S, Check, littles_law, server_absence, validity_checks,
                                      validity_summary)
from loadlib.record_table import records_frame
from loadlib.report.document import rows
from loadlib.report.summary import render_summary
from loadlib.report.validity import checks_section, findings
from loadlib.truth.server_figures import CellSpan, ServerCell
from tests.analysis.builders import build_record
from tests.conftest import FAST_SIM, run_locust_together

T0 = 1_800_000_000.0
CALM = {"cpu_share_mean": 0.2, "cpu_share_max": 0.3, "loop_lag_p50_s": 0.0, "loop_lag_p99_s": 0.001,
        "loop_lag_max_s": 0.002, "samples": 100}
BUSY = {**CALM, "cpu_share_max": 0.95, "loop_lag_p99_s": 0.012}
WATCHED = {"client_watch": [CALM], "server": {"metrics": {"interval_s": 5, "sources": {"target": "http://h/metrics"},
                                                          "missing": {}}}}
SERVER = {"sglang": "SGLang", "vllm": "vLLM", "llamacpp": "llama.cpp"}


def c2_same(comp: int = 512, chunks: int = 100) -> list[dict]:
    """Two rounds of two streams between the cell's scrapes (T0, T0 + 10): each sent at 1 s or
    5 s, 3 s long."""
    return [build_record("c2-same", round=r, slot=s, sent_at=T0 + 1 + 4 * r, ttft_s=0.2, total_s=3.0, comp=comp,
                         chunks=chunks) for r in range(2) for s in range(2)]


def server(flavour: str = "sglang", generated: float | None = 2048, requests: float | None = 4,
           held: tuple = ((T0 + 2, 2.0), (T0 + 6, 2.0)), accept: float | None = 5.0, span=None) -> ServerCell:
    """The server's figures over the cell, as `server_figures.server_cells` gives them."""
    return ServerCell("target", SERVER[flavour], flavour, span or CellSpan(0, "c2-same", "same", T0, T0 + 10),
                      accept, "gauge" if accept else None, 0.5, 0.9, "counter", 2.0, 2, 0.0, 0, 0.2, requests,
                      generated, len(held), held)


def judged(records: list[dict], *servers: ServerCell, manifest=WATCHED, absent=None) -> dict[str, Check]:
    checks = validity_checks(records_frame(records), manifest, servers, absent)
    return {c.name: c for c in checks}


# --- client and server agree ----------------------------------------------------------------------

def test_a_rounds_cell_whose_counts_agree_passes_every_check():
    checks = judged(c2_same(), server())
    assert {name: c.ok for name, c in checks.items()} == {
        "client_headroom": True, "tokens": True, "requests": True, "in_flight": True, "accept_length": True}
    assert checks["tokens"].detail == "client counted 2,048 completion tokens, server 2,048"
    assert checks["in_flight"].detail == ("requests in flight: client 2.0, server 2.0 running + queued "
                                          "(mean of 2 scrapes during the cell)")
    assert checks["accept_length"].detail == "client tok/chunk 5.12, server accept length 5.00 by its gauge (+2.4%)"


def test_a_server_that_counts_fewer_tokens_than_it_streamed_fails_the_cell_in_words():
    checks = judged(c2_same(), server(generated=1843))
    assert checks["tokens"].ok is False
    assert checks["tokens"].detail == ("client and server disagree: client counted 2,048 completion tokens, "
                                       "server 1,843 (-10.0%)")
    assert checks["requests"].ok is True  # every request was counted, only its tokens were not
    assert findings(list(checks.values())) == [
        "c2-same: client and server disagree: client counted 2,048 completion tokens, server 1,843 (-10.0%)"]


def test_two_percent_apart_still_agree():
    assert judged(c2_same(), server(generated=2048 * 0.981))["tokens"].ok is True
    assert judged(c2_same(), server(generated=2048 * 1.019))["tokens"].ok is True
    assert judged(c2_same(), server(generated=2048 * 0.97))["tokens"].ok is False


def test_a_server_that_counted_more_requests_than_were_sent_says_who_else_may_have():
    check = judged(c2_same(), server(requests=5))["requests"]
    assert check.ok is False and check.detail == (
        "client and server disagree: client counted 4 requests, server 5 (+25.0%): the server counted more "
        "(other clients, or this run's unmeasured requests)")


def test_the_servers_unmeasured_requests_count_on_the_clients_side_too():
    # a warm-up request sent before the cell and ended within it: the server counted it
    warmup = records_frame([{**build_record("warmup", sent_at=T0 - 2, ttft_s=0.2, total_s=4.0, comp=512),
                             "measured": True}])
    checks = validity_checks(records_frame(c2_same()), WATCHED, [server(generated=2560, requests=5)], None,
                             unmeasured=warmup)
    assert [c.ok for c in checks if c.name in ("tokens", "requests")] == [True, True]


def test_a_failed_request_may_or_may_not_have_been_counted():
    records = c2_same()
    records[3].update(error="http_500", completion_tokens=None)  # max_tokens 512
    for generated, requests in ((1536, 3), (2048, 4)):
        checks = judged(records, server(generated=generated, requests=requests))
        assert checks["tokens"].ok and checks["requests"].ok
    assert "1 request(s) at the cell's edges or failed could count either way" in checks["tokens"].detail


def test_a_request_running_at_the_end_scrape_counts_on_either_side_of_it():
    """Free-running: one request ends 0.1 s after the end scrape came (a server that counts at a
    request's finish may have counted it just before)."""
    span = CellSpan(0, "closed", "closed", T0, T0 + 10, T0 - 0.01, T0 + 10 - 0.01)
    records = [build_record("closed", slot=i, sent_at=T0 + 1 + 2 * i, ttft_s=0.2, total_s=1.5, comp=100,
                            concurrency=2, case="closed") for i in range(4)]
    records.append(build_record("closed", slot=4, sent_at=T0 + 9, ttft_s=0.2, total_s=1.1, comp=100,
                                concurrency=2, case="closed"))
    for generated, requests in ((400, 4), (500, 5)):
        checks = judged(records, server(generated=generated, requests=requests, span=span))
        assert checks["tokens"].ok and checks["requests"].ok, checks
    assert judged(records, server(generated=300, requests=3, span=span))["tokens"].ok is False
    # a server that counts tokens as they are made (vLLM) counted about 90 % of the last one
    vllm = judged(records, server("vllm", generated=490, requests=4, span=span, accept=None))["tokens"]
    assert vllm.ok and vllm.detail.startswith("client counted 489 completion tokens (400 to 500")  # 0.8 of 0.9 s
    far = span.ended_at + EDGE_S + 0.1  # sent after the end scrape came: not the cell's
    records.append(build_record("closed", slot=5, sent_at=far, total_s=1.0, comp=100, concurrency=2, case="closed"))
    assert judged(records, server(generated=400, requests=4, span=span))["tokens"].detail.startswith(
        "client counted 400 completion tokens (400 to 500")


def test_requests_in_flight_the_server_never_held_fail():
    checks = judged(c2_same(), server(held=((T0 + 2, 0.0), (T0 + 6, 1.0))))
    assert checks["in_flight"].ok is False and checks["in_flight"].detail == (
        "client and server disagree on requests in flight: client 2.0, server 0.5 running + queued (mean of 2 "
        "scrapes during the cell): requests wait somewhere else (a proxy, a router, the client's connections)")
    unscraped = judged(c2_same(), server(held=()))["in_flight"]
    assert unscraped.ok is None and unscraped.detail == "no scrape during the cell (it was shorter than --metrics-interval 5 s)"


# --- what a server does not say ----------------------------------------------------------------------

def test_llama_cpp_counts_no_requests_so_that_check_is_not_made():
    checks = judged(c2_same(), server("llamacpp", requests=None))
    assert checks["requests"].ok is None and checks["requests"].detail == "llama.cpp exposes no request counter"
    assert checks["tokens"].ok and checks["accept_length"].ok


def test_a_server_without_a_draft_model_has_no_accept_length():
    check = judged(c2_same(), server("vllm", accept=None))["accept_length"]
    assert check.ok is None and "no speculative draft" in check.detail


def test_without_a_metrics_page_no_server_check_is_made_and_the_block_says_why():
    manifest = {"client_watch": [CALM], "server": {"metrics": {"sources": {"target": "http://h/metrics"},
                                                               "missing": {"target": "HTTP 404"}}}}
    absent = server_absence(manifest, [])
    assert absent == "no /metrics (target: HTTP 404)"
    records = c2_same() + [build_record("single")]
    checks = validity_checks(records_frame(records), manifest, [], absent)
    assert {c.name: c.ok for c in checks if c.cell == "single"} == {
        "client_headroom": True, "tokens": None, "requests": None, "in_flight": None, "accept_length": None}
    assert findings(checks) == [
        f"every cell: {what} not checked: no /metrics (target: HTTP 404)"
        for what in ("completion tokens (client against server)", "requests (client against server)",
                     "requests in flight (client against server)", "accept length (against tok/chunk)")]
    assert server_absence({}, []) == "no /metrics: the server was not watched (no `server` in the manifest)"


# --- client headroom, Little's law, cache state -----------------------------------------------------

def test_a_client_short_of_cpu_flags_every_cell_once():
    manifest = {**WATCHED, "client_watch": [CALM, BUSY]}
    checks = validity_checks(records_frame(c2_same() + [build_record("single")]), manifest, [server()], None)
    headroom = [c for c in checks if c.name == "client_headroom"]
    assert [c.ok for c in headroom] == [False, False]
    assert headroom[0].detail == ("the client may have limited the figures (over the whole run): "
                                  + client_limited([BUSY])[0])
    assert findings(checks)[0] == f"every cell: {headroom[0].detail}"
    assert judged(c2_same(), server(), manifest={})["client_headroom"].ok is None


def closed_loop(streams: int = 4, seconds: float = 60.0, latency: float = 1.0) -> list[dict]:
    return [build_record("closed", slot=s, sent_at=T0 + k * latency, ttft_s=0.1, total_s=latency * 0.99,
                         concurrency=streams, case="closed") for s in range(streams) for k in range(int(seconds / latency))]


def test_littles_law_holds_in_a_steady_closed_loop():
    [cell] = free_running.steady_cells(records_frame(closed_loop()))
    assert littles_law(cell) == (True, ("4.0 requests in flight, throughput 4.00 req/s x mean latency 0.99 s "
                                        "= 4.0 (+0.0%)"))


def test_littles_law_fails_in_a_cell_shorter_than_its_requests():
    """4 requests a second for 30 s, each 20 s long: the window (in flight at or above its median,
    from 12.25 s to 37.5 s) begins with the backlog sent before it, so it holds more in flight
    (70.8) than its own requests' rate x latency (2.81/s x 20 s = 56.2)."""
    records = [build_record("open-4rps", slot=i, sent_at=T0 + i / 4, ttft_s=0.1, total_s=20.0,
                            concurrency=128, case="open") for i in range(120)]
    [cell] = free_running.steady_cells(records_frame(records))
    ok, detail = littles_law(cell)
    assert ok is False and detail.startswith("Little's law does not hold over the steady window: 70.8 requests "
                                             "in flight, throughput 2.81 req/s x mean latency 20.00 s = 56.2 (+25.9%)")
    assert detail.endswith("the cell was not steady (a queue grew or drained during it)")


def test_littles_law_needs_enough_requests():
    [cell] = free_running.steady_cells(records_frame(closed_loop(streams=2, seconds=5)))
    assert littles_law(cell) == (None, "too few requests in the steady window (10; 20 at least)")


def test_a_cold_request_served_from_the_cache_fails_the_cache_state():
    records = [build_record("prefill-3k", slot=i, cache_intended="cold", cache_observed=state, case="single")
               for i, state in enumerate(("cold", "warm", None))]
    checks = judged(records, manifest={"client_watch": [CALM]}, absent="no /metrics")
    assert checks["cache_state"].ok is False
    assert checks["cache_state"].detail == "the cache state was not as intended: 1 of 2 cold requests met a warm cache"
    unknown = [{**r, "cache_observed": None} for r in records]
    assert judged(unknown, absent="no /metrics")["cache_state"].ok is None


# --- the block ---------------------------------------------------------------------------------------

def test_the_block_lists_what_failed_and_keeps_every_check_for_json():
    checks = validity_checks(records_frame(c2_same() + [build_record("single")]),
                             {**WATCHED, "client_watch": [BUSY]}, [server(generated=1843)], None)
    section = checks_section(checks)
    assert section.title.startswith("VALIDITY: 3 of 10 checks failed, 4 could not be made (per cell: ")
    assert section.view["failed or not made"].tolist()[:2] == [
        f"every cell: {checks[0].detail}",
        "c2-same: client and server disagree: client counted 2,048 completion tokens, server 1,843 (-10.0%)"]
    assert rows(section.data)[1] == {"cell": "c2-same", "name": "tokens", "ok": False, "detail": checks[1].detail}
    summary = validity_summary(checks)
    assert summary["ok"] is False and len(summary["checks"]) == 10
    assert set(summary["checks"][0]) == {"cell", "name", "ok", "detail"}
    passing = checks_section(judged(c2_same(), server()).values())
    assert passing.title.startswith("Validity: all 5 checks passed in every cell") and passing.view.empty


def test_the_summary_has_the_block_when_the_run_was_watched(tmp_path):
    assert "Validity: " in render_summary(c2_same(), {"client_watch": [CALM]}, tmp_path)
    assert "alidity" not in render_summary(c2_same(), {"client_watch": [CALM]})  # no run directory
    assert "alidity" not in render_summary(c2_same(), {}, tmp_path)  # a hand-built run: nothing to judge


# --- real runs against the simulator -------------------------------------------------------------------

BASE = ["--headless", "--rounds", "2", "--scenarios", "code", "--concurrency", "2", "-u", "2",
        "--metrics-interval", "0.05", "--loglevel", "WARNING"]


def report_json(run_dir: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir), "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs of the protocol's three cells: on the simulator as SGLang, vLLM and llama.cpp, and on
    one whose token counter leaves out 10 % of what it streams."""
    work = tmp_path_factory.mktemp("validity")
    flavours = {"sglang": "", "vllm": " --flavor vllm", "llamacpp": " --flavor llamacpp",
                "count_skew": " --fault count_skew=0.1"}
    results = run_locust_together({name: ([*BASE, "--run-dir", str(work / name), "--sim-args", FAST_SIM + sim_args],
                                          work) for name, sim_args in flavours.items()})
    done = {}
    for name, result in results.items():
        assert result.returncode == 0, result.stderr[-3000:]
        done[name] = (work / name, result.stdout)
    return done


def verdicts(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """The run's checks (the report's JSON) and its client-watch snapshots."""
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    return report_json(run_dir)["tables"]["validity"], manifest["client_watch"]


@pytest.mark.processes
@pytest.mark.parametrize("flavour", ["sglang", "vllm", "llamacpp"])
def test_a_normal_run_passes_every_check(runs, flavour):
    run_dir, stdout = runs[flavour]
    checks, watch = verdicts(run_dir)
    assert {c["cell"] for c in checks} == {"single", "c2-same", "c2-different"}
    for check in checks:
        if check["name"] == "client_headroom":  # judged on this machine's load, as the self-watch is
            assert check["ok"] is (not client_limited(watch)), check
        elif flavour == "llamacpp" and check["name"] == "requests":
            assert check["ok"] is None and check["detail"] == "llama.cpp exposes no request counter"
        else:
            assert check["ok"] is True, check
    tokens = {c["cell"]: c["detail"] for c in checks if c["name"] == "tokens"}
    assert tokens["single"] == "client counted 1,024 completion tokens, server 1,024"
    assert tokens["c2-same"] == "client counted 2,048 completion tokens, server 2,048"
    summary = (run_dir / "summary.txt").read_text()
    assert ("Validity: " in summary or "VALIDITY: " in summary) and summary in stdout


@pytest.mark.processes
def test_llama_cpp_shows_its_accept_length_and_prefix_hits(runs):
    cells = report_json(runs["llamacpp"][0])["tables"]["server_cells"]
    assert {r["cell"] for r in cells} == {"single", "c2-same", "c2-different"}
    for row in cells:
        assert row["server"] == "llama.cpp" and row["accept_basis"] == "counter" and 5.5 < row["accept_length"] < 7.5
        assert row["prefix_basis"] == "counter" and row["prefix_hit_rate"] > 0
    assert next(r for r in cells if r["cell"] == "c2-same")["prefix_hit_rate"] > 0.9


@pytest.mark.processes
def test_a_server_counting_fewer_tokens_than_it_streams_fails_the_token_check_of_every_cell(runs):
    run_dir, stdout = runs["count_skew"]
    checks, _watch = verdicts(run_dir)
    failed = {(c["cell"], c["name"]) for c in checks if c["ok"] is False and c["name"] != "client_headroom"}
    assert failed == {("single", "tokens"), ("c2-same", "tokens"), ("c2-different", "tokens")}
    assert all(c["ok"] for c in checks if c["name"] in ("requests", "in_flight", "accept_length"))
    summary = (run_dir / "summary.txt").read_text()
    assert "VALIDITY: " in summary
    assert "\n  single: client and server disagree: client counted 1,024 completion tokens, server 922 (-10.0%)\n" \
        in summary
    assert "c2-same: client and server disagree: client counted 2,048 completion tokens, server 1,844 (-10.0%)" \
        in summary
    assert summary in stdout


@pytest.mark.processes
def test_report_json_says_at_its_top_whether_every_check_held(runs):
    run_dir, _stdout = runs["count_skew"]
    report = report_json(run_dir)
    assert report["validity"]["ok"] is False  # the token checks failed
    assert report["validity"]["checks"] == report["tables"]["validity"]
    assert {"cell", "name", "ok", "detail"} <= set(report["validity"]["checks"][0])
