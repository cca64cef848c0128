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
from loadlib.run_view import read_run
from loadlib.truth import server_figures
from loadlib.truth.scrape import parsed
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
           held: tuple = ((T0 + 2.5, 2.0), (T0 + 6.5, 2.0)), accept: float | None = 5.0, span=None,
           per_draft: float | None = None, ttft_s: float = 0.2, first_tokens: float | None = 4) -> ServerCell:
    """The server's figures over the cell, as `server_figures.server_cells` gives them; `held`:
    (when the page came, running + queued) of each scrape during the cell, asked 10 ms before;
    `ttft_s` and `first_tokens`: its TTFT histogram's mean and count over the cell."""
    return ServerCell("target", SERVER[flavour], flavour, span or CellSpan(0, "c2-same", "same", T0, T0 + 10),
                      accept, ("gauge" if flavour == "sglang" else "counter") if accept else None,
                      0.5 if flavour == "sglang" else 0.1, per_draft, 0.9, "counter", 2.0, 2, 0.0, 0, ttft_s,
                      requests, generated, len(held), tuple((t - 0.01, t, n) for t, n in held),
                      first_tokens if flavour != "llamacpp" else None)


def judged(records: list[dict], *servers: ServerCell, manifest=WATCHED, absent=None) -> dict[str, Check]:
    checks = validity_checks(records_frame(records), manifest, servers, absent)
    return {c.name: c for c in checks}


# --- client and server agree ----------------------------------------------------------------------

def test_a_rounds_cell_whose_counts_agree_passes_every_check():
    checks = judged(c2_same(), server())
    assert {name: c.ok for name, c in checks.items()} == {
        "client_headroom": True, "failed_requests": True, "tokens": True, "requests": True, "in_flight": True,
        "ttft": True, "accept_length": True, "overlap": True}
    assert checks["overlap"].detail == ("all 2 streams decoded at once in every round; the protocol's aggregate "
                                        "365.0 t/s is within 10% of the wall-clock 365.0 t/s")
    assert checks["tokens"].detail == "client counted 2,048 completion tokens, server 2,048"
    assert checks["in_flight"].detail == ("requests in flight: client 2.0, server 2.0 running + queued "
                                          "(means over 2 scrapes during the cell)")
    assert checks["accept_length"].detail == ("client tok/chunk 5.12, server accept length 5.00 tokens per forward "
                                              "by its gauge (+2.4%)")


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
        "(other clients)")


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


# --- requests in flight: a gauge read as what it is --------------------------------------------------
# c2-same's streams run from 1 s to 4 s and from 5 s to 8 s, a chunk every 28 ms: SGLang's gauges
# (set every 40 decode batches) may be up to 1.13 s old when scraped.

def test_requests_in_flight_the_server_never_held_fail():
    checks = judged(c2_same(), server(held=((T0 + 2.5, 0.0), (T0 + 6.5, 1.0))))
    assert checks["in_flight"].ok is False and checks["in_flight"].detail == (
        "client and server disagree on requests in flight: client 2.0, server 0.5 running + queued (means over 2 "
        "scrapes during the cell): requests wait somewhere else (a proxy, a router, the client's connections)")
    unscraped = judged(c2_same(), server(held=()))["in_flight"]
    assert unscraped.ok is None and unscraped.detail == "no scrape during the cell (it was shorter than --metrics-interval 5 s)"


def test_a_server_holding_more_than_the_client_sent_serves_other_clients():
    check = judged(c2_same(), server(held=((T0 + 2.5, 5.0), (T0 + 6.5, 5.0))))["in_flight"]
    assert check.ok is False and check.detail.endswith("server 5.0 running + queued (means over 2 scrapes during "
                                                       "the cell): the server also serves other clients")


def test_a_scrape_that_lands_in_a_prefill_cannot_judge_a_proxy():
    """The false alarm of issue 34: one scrape, 50 ms after a round's two requests were sent, reads
    none running or queued (SGLang's prefill batch leaves out the requests it admits; llama.cpp had
    not yet taken them). Neither is evidence of a proxy: the check cannot judge, and says why."""
    sglang = judged(c2_same(), server(held=((T0 + 5.05, 0.0),)))["in_flight"]
    assert sglang.ok is None and sglang.detail == (
        "cannot judge whether requests wait elsewhere: client 0.0 to 2.0, server 0.0 running + queued (means over 1 "
        "scrapes during the cell); at the moments the server's gauges may describe, it surely held none of the "
        "client's requests (SGLang sets them at each prefill batch, leaving out the requests it admits, and once "
        "every decode-log interval, about 1.13 s here)")
    llama = judged(c2_same(), server("llamacpp", held=((T0 + 5.05, 0.0),)))["in_flight"]
    assert llama.ok is None and llama.detail.endswith("(the scrapes fell between requests)")


def test_a_gauge_held_over_an_idle_gap_is_not_another_client():
    """SGLang's gauges keep the last batch's value while the server is idle: 2 running, read 3 s
    after the round ended, is what the server held at its last batch, not a second client. A
    server that counts at the scrape (llama.cpp) held 2 that the client did not send."""
    records = [build_record("c2-same", round=r, slot=s, sent_at=T0 + 1 + 7 * r, ttft_s=0.2, total_s=3.0, comp=512,
                            chunks=100) for r in range(2) for s in range(2)]
    stale = ((T0 + 7.0, 2.0),)
    assert judged(records, server(held=stale))["in_flight"].ok is None
    assert judged(records, server("llamacpp", held=stale))["in_flight"].ok is False


def test_a_wide_client_range_cannot_judge_a_queue_elsewhere():
    """At the scrape the client had 4 in flight, 3 of them sent 20 ms before (within their edge: the
    server may not hold them yet): it surely had 1 and may have had 4. A server counting 1 at the
    scrape agrees with a healthy server and with a queue in front of it alike: cannot judge."""
    records = [build_record("c4-same", slot=0, sent_at=T0 + 1, ttft_s=0.05, total_s=3.0, comp=512, chunks=100)] + [
        build_record("c4-same", slot=s, sent_at=T0 + 2.48, ttft_s=0.05, total_s=1.0, comp=512, chunks=100)
        for s in range(1, 4)]
    span = CellSpan(0, "c4-same", "same", T0, T0 + 10)
    check = judged(records, server("llamacpp", span=span, held=((T0 + 2.5, 1.0),)))["in_flight"]
    assert check.ok is None and "the client's range is too wide" in check.detail, check.detail


# --- TTFT: the client's against the server's own -------------------------------------------------------

def test_a_queue_in_front_shows_as_a_client_ttft_beyond_the_servers():
    """The server counts TTFT from when it received a request: 0.2 s. The client waited 1.2 s for
    the same first tokens: a second each before the server saw them."""
    queued = [build_record("c2-same", round=r, slot=s, sent_at=T0 + 1 + 4 * r, ttft_s=1.2, total_s=3.0, comp=512,
                           chunks=100) for r in range(2) for s in range(2)]
    check = judged(queued, server())["ttft"]
    assert check.ok is False and check.detail == (
        "client and server disagree on TTFT: client TTFT mean 1.200 s, server 0.200 s (4 first tokens by the "
        "client, 4 by the server): the client waited 1.000 s more a request before the server saw it: requests "
        "wait somewhere else (a proxy, a router, the client's connections)")
    assert judged(c2_same(), server())["ttft"].ok is True


def test_ttft_is_not_judged_without_the_servers_histogram_or_on_other_first_tokens():
    assert judged(c2_same(), server("llamacpp"))["ttft"].detail == "llama.cpp exposes no TTFT histogram"
    other = judged(c2_same(), server(first_tokens=9))["ttft"]
    assert other.ok is None and other.detail.startswith("cannot judge: the two sides counted different first tokens")


def four_streams_two_at_a_time() -> list[dict]:
    """One round of four streams sent at 1 s, of which the server runs two at once: two stream
    from 1.2 s to 4 s, the other two wait and stream from 4.2 s to 7 s."""
    return [build_record("c4-same", slot=s, sent_at=T0 + 1, ttft_s=0.2 + 3 * (s // 2), total_s=3.0 + 3 * (s // 2),
                         comp=512, chunks=100) for s in range(4)]


def test_a_queue_in_front_of_a_server_whose_limit_is_known_fails():
    """SGLang with --max-running-requests 2: while two requests decode, a prefill batch can admit
    none, so the two others waiting for a first token must be in its queue. Behind a proxy that
    holds them, the server shows 2 where the client has 4: requests wait elsewhere. Without the
    limit, the two waiting could be the ones a prefill batch admits: it cannot be told."""
    span = CellSpan(0, "c4-same", "same", T0, T0 + 10)
    limited = {**WATCHED, "server": {**WATCHED["server"], "launch": {"max_running_requests": 2}}}
    direct = server(span=span, held=((T0 + 2.5, 4.0), (T0 + 5.5, 2.0)))
    proxied = server(span=span, held=((T0 + 2.5, 2.0), (T0 + 5.5, 2.0)))
    assert judged(four_streams_two_at_a_time(), direct, manifest=limited)["in_flight"].ok is True
    check = judged(four_streams_two_at_a_time(), proxied, manifest=limited)["in_flight"]
    assert check.ok is False and check.detail == (
        "client and server disagree on requests in flight: client 3.0, server 2.0 running + queued (means over 2 "
        "scrapes during the cell): requests wait somewhere else (a proxy, a router, the client's connections)")
    assert judged(four_streams_two_at_a_time(), proxied)["in_flight"].ok is True
    derived = {**WATCHED, "server": {**WATCHED["server"], "launch": {"max_running_requests": None,
                                                                  "effective_max_running_requests_per_dp": 2}}}
    assert judged(four_streams_two_at_a_time(), proxied, manifest=derived)["in_flight"].ok is False  # SGLang's own


# --- the protocol's aggregate, failed requests --------------------------------------------------------

def test_streams_the_server_did_not_run_together_fail_overlap_as_a_caveat_not_a_fault():
    """Four streams of which the server ran two at once: the protocol's aggregate, 2,044 / 2.8 s =
    730 t/s, leaves out the 3 s the other two waited; the wall-clock aggregate is 2,044 / 5.8 s."""
    span = CellSpan(0, "c4-same", "same", T0, T0 + 10)
    checks = validity_checks(records_frame(four_streams_two_at_a_time()), WATCHED,
                             [server(span=span, held=((T0 + 2.5, 4.0), (T0 + 5.5, 2.0)), ttft_s=1.7)], None)
    overlap = next(c for c in checks if c.name == "overlap")
    assert overlap.ok is False and overlap.detail == (
        "the protocol's aggregate misleads: at most 2 of its 4 streams decoded at once (the server ran fewer at a "
        "time and queued the rest), and sum(comp-1)/max(total-ttft) leaves the wait out: 730.0 t/s against 352.4 t/s "
        "wall-clock: read the wall-clock aggregate (a caveat of the figure, not a fault of the server or the client)")
    assert [c.name for c in checks if c.ok is False] == ["overlap"]
    section = checks_section(checks)
    assert section.title.startswith("VALIDITY: 1 of 8 checks failed, all of them the protocol's aggregate misleading: "
                                    "a caveat of the figure, not a fault of the server or the client (per cell: ")
    assert validity_summary(checks)["faults"] == 0 and validity_summary(checks)["caveats"] == 1


def test_streams_that_began_decoding_far_apart_fail_overlap():
    """Two streams decoding together but 1 s apart: max(total-ttft) ignores the offset."""
    records = [build_record("c2-same", slot=s, sent_at=T0 + 1, ttft_s=0.2 + s, total_s=3.0 + s, comp=512, chunks=100)
               for s in range(2)]
    overlap = judged(records, server(held=((T0 + 2.5, 2.0),)))["overlap"]
    assert overlap.ok is False and "its streams began decoding at different moments" in overlap.detail


def test_failed_requests_are_a_failed_check():
    """A run whose requests failed must not read "no check failed"."""
    records = c2_same()
    records[1].update(error="http_500", completion_tokens=None)
    check = judged(records, server(generated=1536, requests=3))["failed_requests"]
    assert check.ok is False and check.detail == "1 of its 4 requests failed (http_500 1); the figures leave them out"
    assert checks_section(validity_checks(records_frame(records), WATCHED, [server(generated=1536, requests=3)],
                                          None)).title.startswith("VALIDITY: 1 of 8 checks failed")


# --- accept length against tok/chunk ------------------------------------------------------------------

def test_tok_per_chunk_above_the_accept_length_is_merging_below_it_one_token_a_chunk():
    """Chunks merged on the way raise tok/chunk above the server's tokens per forward: that fails.
    llama.cpp streams one token a chunk whatever it accepts: tok/chunk 1.00 against 4.00 tokens per
    forward is no merge, and tok/chunk cannot tell the accept length there: not judged, said why."""
    merged = judged(c2_same(chunks=50), server("llamacpp", accept=4.0, per_draft=4.2))["accept_length"]
    assert merged.ok is False and merged.detail == (
        "the client's tok/chunk is above the server's accept length: client tok/chunk 10.24, server accept length "
        "4.00 tokens per forward by its counter; 4.20 per drafting step, the server's own figure (+156.0%), beyond "
        "10%: chunks are merged on the way (SGLang's --stream-interval above 1, or a proxy that re-chunks the stream)")
    one_a_chunk = judged(c2_same(chunks=512), server("llamacpp", accept=4.0, per_draft=4.2))["accept_length"]
    assert one_a_chunk.ok is None and one_a_chunk.detail == (
        "client tok/chunk 1.00, below the server's accept length beyond 10% (the server view has both): the server "
        "streams fewer tokens per chunk than it accepts per forward (llama.cpp sends one token a chunk), so "
        "tok/chunk cannot estimate its accept length: not a fault")


# --- what a server does not say ----------------------------------------------------------------------

def test_llama_cpp_counts_no_requests_so_that_check_is_not_made():
    checks = judged(c2_same(), server("llamacpp", requests=None))
    assert checks["requests"].ok is None and checks["requests"].detail == "llama.cpp exposes no request counter"
    assert checks["tokens"].ok and checks["accept_length"].ok


def test_a_server_whose_draft_counters_went_missing_has_no_accept_length():
    check = judged(c2_same(), server("vllm", accept=None))["accept_length"]
    assert check.ok is None and "accepted-draft counter was missing, or went back" in check.detail


def test_without_a_metrics_page_no_server_check_is_made_and_the_block_says_why():
    manifest = {"client_watch": [CALM], "server": {"metrics": {"sources": {"target": "http://h/metrics"},
                                                               "missing": {"target": "HTTP 404"}}}}
    absent = server_absence(manifest, [])
    assert absent == "no /metrics (target: HTTP 404)"
    records = c2_same() + [build_record("single")]
    checks = validity_checks(records_frame(records), manifest, [], absent)
    assert {c.name: c.ok for c in checks if c.cell == "single"} == {
        "client_headroom": True, "failed_requests": True, "tokens": None, "requests": None, "in_flight": None,
        "ttft": None, "accept_length": None}
    assert findings(checks) == [
        f"every cell: {what} not checked: no /metrics (target: HTTP 404)"
        for what in ("completion tokens (client against server)", "requests (client against server)",
                     "requests in flight (client against server)", "TTFT (client against the server's own)",
                     "accept length (against tok/chunk)")]
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


def open_loop(rate: float, served: float, seconds: float = 60.0) -> list[dict]:
    """Requests due every 1/rate s at a server that serves one at a time, each in 1/served s: each
    is sent when due (queue_s 0) and waits for those before it on the server."""
    records, free_at = [], T0
    for i in range(int(seconds * rate)):
        due = T0 + i / rate
        start = max(due, free_at)
        free_at = start + 1 / served
        records.append(build_record("open", slot=i, sent_at=due, ttft_s=start - due + 0.2 / served,
                                    total_s=free_at - due, concurrency=64, case="open", queue_s=0.0))
    return records


def test_littles_law_fails_where_a_scheduled_cells_queue_grew():
    """Due at 10/s, served at 8/s: the queue grows by 2 a second. Over a window of it the requests
    still end at the rate the server serves (L = λW holds), but the last third waited longer than
    the middle third: not steady. At 6/s the same server keeps up: steady."""
    [growing] = free_running.steady_cells(records_frame(open_loop(10, 8)))
    ok, detail = littles_law(growing)
    assert ok is False and detail.startswith("the queue grew through the cell: its last third of requests waited")
    assert detail.endswith("as it does over a window of a growing queue: the cell was not steady")
    [kept] = free_running.steady_cells(records_frame(open_loop(6, 8)))
    assert littles_law(kept)[0] is True


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
    assert section.title.startswith("VALIDITY: 3 of 15 checks failed, 5 could not be made (per cell: ")
    assert section.view["failed or not made"].tolist()[:2] == [
        f"every cell: {checks[0].detail}",
        "c2-same: client and server disagree: client counted 2,048 completion tokens, server 1,843 (-10.0%)"]
    assert rows(section.data)[2] == {"cell": "c2-same", "name": "tokens", "ok": False, "detail": checks[2].detail}
    summary = validity_summary(checks)
    assert summary["ok"] is False and len(summary["checks"]) == 15
    assert (summary["faults"], summary["caveats"]) == (3, 0)
    assert set(summary["checks"][0]) == {"cell", "name", "ok", "detail"}
    passing = checks_section(judged(c2_same(), server()).values())
    assert passing.title.startswith("Validity: all 8 checks passed in every cell") and passing.view.empty


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
        elif flavour == "llamacpp" and check["name"] == "ttft":
            assert check["ok"] is None and check["detail"] == "llama.cpp exposes no TTFT histogram"
        elif check["name"] == "in_flight":  # a few scrapes of a gauge may leave nothing to judge; never a failure
            assert check["ok"] is True or check["detail"].startswith("cannot judge whether requests wait"), check
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
    assert all(c["ok"] for c in checks if c["name"] in ("requests", "accept_length"))
    assert not [c for c in checks if c["name"] == "in_flight" and c["ok"] is False]
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


# --- a run of several servers: each counts its own unmeasured requests --------------------------------

def counters_page(requests: int, tokens: int) -> str:
    return (f"# TYPE sglang:num_requests_total counter\nsglang:num_requests_total {requests}\n"
            f"# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total {tokens}\n")


def test_each_server_of_a_run_counts_its_own_warm_up_on_the_clients_side(tmp_path):
    """An A/B run (or a sweep): each server's warm-up request ended within its measured cell, so the
    server counted 5 requests where 4 were measured. The warm-up is in the run's journal, not in
    the server's own directory: it is found there, and only that server's."""
    records = []
    for label in ("a", "b"):
        records.append({**build_record("warmup", sent_at=T0 - 1, ttft_s=0.2, total_s=1.5, comp=512, concurrency=2,
                                       case="warmup"), "measured": False, "target": label})
        records += [{**r, "target": label} for r in c2_same()]
    (tmp_path / "records.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    for label in ("a", "b"):
        own = tmp_path / "targets" / label
        own.mkdir(parents=True)
        (own / "metrics.jsonl").write_bytes(b"".join(orjson.dumps(
            {"t": t, "source": "target", "url": "http://h/metrics", "phase": phase, "cell_index": 0, "cell": "c2-same",
             "case": "same", "error": None, "text": counters_page(n, 512 * n)}) + b"\n"
            for t, phase, n in ((T0, "start", 0), (T0 + 10, "end", 5))))
    manifest = {"client_watch": [CALM], "targets": [
        {"label": label, "server": {"metrics": {"interval_s": 5, "sources": {"target": "http://h/metrics"},
                                                "missing": {}}}} for label in ("a", "b")]}
    (tmp_path / "manifest.json").write_text(orjson.dumps(manifest).decode())
    for target in read_run(tmp_path).servers:
        assert len(target.unmeasured) == 1 and set(target.unmeasured["target"]) == {target.label}
        counted = {c.name: c for c in target.checks if c.name in ("tokens", "requests")}
        assert counted["requests"].ok and counted["requests"].detail == "client counted 5 requests, server 5"
        assert counted["tokens"].ok


# --- a locustfile's own users: the scrapes frame the whole run ---------------------------------------

def test_a_locustfiles_own_users_are_checked_over_the_whole_run():
    """Issue 35 item 8: a locustfile's own users start no cells, so the scrapes frame none; they
    still frame the run, from its start to its last scrape before the stop (the run-end scrape
    comes after the users were stopped, when a request cut short leaves no record), over which
    the server's counters are held against every request, whichever stats name it had."""
    records = [build_record(name, slot=i, sent_at=T0 + 1 + 4 * i, ttft_s=0.2, total_s=3.0, comp=512, chunks=100,
                            concurrency=1, case="locust") for i, name in enumerate(("short", "explain"))]
    scrapes = [{"t": T0 + t, "t_asked": T0 + t - 0.01, "source": "target", "phase": phase, "error": None,
                "text": counters_page(n, 512 * n) + f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs {r}\n"}
               for t, phase, n, r in ((0, "run-start", 0, 0), (2.5, "interval", 0, 1), (6.5, "interval", 1, 1),
                                      (9.5, "interval", 2, 0), (10, "run-end", 3, 0))]
    entries = [parsed(e, server_figures.NAMES_READ) for e in scrapes]
    assert server_absence(WATCHED, entries) is None
    checks = validity_checks(records_frame(records), WATCHED, server_figures.server_cells(entries, records_frame(records)),
                             None)
    whole = {c.name: c for c in checks if c.cell == server_figures.WHOLE_RUN}
    assert {name: c.ok for name, c in whole.items()} == {"tokens": True, "requests": True, "in_flight": True,
                                                         "ttft": None, "accept_length": None}
    assert whole["requests"].detail == "client counted 2 requests, server 2"
    assert not [c for c in checks if c.cell != server_figures.WHOLE_RUN and c.name == "tokens"]
    short = [e for e in entries if e["phase"] in ("run-start", "run-end")]  # no scrape while the users ran
    assert server_absence(WATCHED, short).startswith("no scrape of its /metrics during the cells, nor during the run")
