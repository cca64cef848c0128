"""The end-of-run summary: issue 8's JSON schema and the thread's table layout on a hand-computed
protocol run, the steady state of a free-running one, and what both add."""

from __future__ import annotations

import math

import pytest

from loadlib.report.protocol import protocol_summary
from loadlib.report.summary import render_summary
from tests.analysis.builders import build_record, free_running_records


def test_summary_has_the_issue_8_schema_with_hand_computed_figures(protocol_records):
    summary = protocol_summary(protocol_records)
    assert list(summary["single"]) == ["code", "cn_essay"]
    assert summary["single"]["code"] == pytest.approx(
        {"decode_tps": 610 / 3, "decode_min": 160.0, "decode_max": 250.0, "ttft_s": 0.2,
         "tok_per_chunk": 4.01, "n": 3})
    assert summary["single"]["cn_essay"] == pytest.approx(
        {"decode_tps": 75.0, "decode_min": 50.0, "decode_max": 100.0, "ttft_s": 0.6,
         "tok_per_chunk": 2.02, "n": 2})
    same, different = summary["concurrent"]
    # per-stream decode: c2-same rounds (100 + 200) / 2 and (200 + 200) / 2 -> 175; c2-different round 0 125
    assert same == {"cell": "c2-same", "concurrency": 2, "case": "same", "aggregate_tps": 300.0, "min": 200.0,
                    "max": 400.0, "n": 2, "failed_rounds": 0, "overlap_vs_stream_decode": pytest.approx(300 / 175),
                    "overlap_vs_single_decode": pytest.approx(300 / (610 / 3))}
    assert different == {"cell": "c2-different", "concurrency": 2, "case": "different", "aggregate_tps": 200.0,
                         "min": 200.0, "max": 200.0, "n": 1, "failed_rounds": 1,
                         "overlap_vs_stream_decode": pytest.approx(200 / 125),
                         "overlap_vs_single_decode": pytest.approx(200 / (610 / 3))}


def test_summary_counts_are_python_ints_ready_for_json(protocol_records):
    summary = protocol_summary(protocol_records)
    assert type(summary["single"]["code"]["n"]) is int
    assert type(summary["concurrent"][0]["concurrency"]) is int


def test_summary_adds_ttft_percentiles_and_failures(protocol_records):
    """The thread's percentiles, each with its 95 % interval from order statistics: of 5 TTFTs
    (0.1, 0.2, 0.3, 0.5, 0.7) the median has no bound (fewer than 6 samples), p90 is at least the
    3rd smallest and p99 the 4th, neither bounded above; p90 and p99 rest on too few samples."""
    summary = protocol_summary(protocol_records)
    assert summary["ttft_percentiles"]["single"] == pytest.approx({
        "p50": 0.3, "p90": 0.62, "p99": 0.692, "n": 5,
        "p50_ci_low": -math.inf, "p50_ci_high": math.inf, "p90_ci_low": 0.3, "p90_ci_high": math.inf,
        "p99_ci_low": 0.5, "p99_ci_high": math.inf, "p50_enough": True, "p90_enough": False, "p99_enough": False})
    assert summary["failures"] == [{"cell": "single", "error": "no_usage", "count": 1},
                                   {"cell": "c2-different", "error": "http_500", "count": 1}]


def test_a_cell_without_complete_rounds_stays_in_the_table_with_n_0_and_none(make_record):
    summary = protocol_summary([
        make_record("c2-same", slot=0), make_record("c2-same", slot=1, comp=None, error="timeout"),
    ])
    assert summary["single"] == {}
    assert summary["concurrent"] == [{"cell": "c2-same", "concurrency": 2, "case": "same", "aggregate_tps": None,
                                      "min": None, "max": None, "n": 0, "failed_rounds": 1,
                                      "overlap_vs_stream_decode": None, "overlap_vs_single_decode": None}]


def test_single_stream_overlap_is_none_without_a_code_baseline(make_record):
    summary = protocol_summary([make_record("c2-same", slot=0), make_record("c2-same", slot=1)])
    assert summary["concurrent"][0]["overlap_vs_single_decode"] is None
    assert summary["concurrent"][0]["overlap_vs_stream_decode"] == pytest.approx(2.0)


GOLDEN = """\
uni-bench summary: model qwen, target http://127.0.0.1:30000, max_tokens 512, thinking off, 3 rounds, 14 requests, 2 failed

Single stream (decode = (comp-1)/(total-ttft); tok/chunk on the stream-chunk basis)
  scenario                   decode t/s         range   TTFT s   tok/chunk   n
  code (code generation)          203.3   160.0–250.0    0.200        4.01   3
  cn_essay (Chinese essay)         75.0    50.0–100.0    0.600        2.02   2

Concurrency (aggregate = sum(comp-1)/max(total-ttft) per round, mean over rounds: a round counts only when all N streams succeeded, dropped = rounds left out; overlap = aggregate / mean per-stream decode of those rounds (the thread's), and aggregate / single-stream code decode)
  N   case                      aggregate t/s         range   n   dropped   overlap vs per-stream   vs single code
  2   same prompt (radix hit)           300.0   200.0–400.0   2         0                   1.71x            1.48x
  2   different prompts                 200.0   200.0–200.0   1         1                   1.60x            0.98x

TTFT percentiles (s, from raw records of successful requests; CI = 95% confidence interval (order statistics, distribution-free, ≥ x: no upper bound from so few samples, -: no bound); ~ : fewer than 100 samples for p99 / 10 for p90, the value is the sample's maximum region, not a tail estimate)
  cell             p50      p90      p99   n   p50 CI    p90 CI    p99 CI
  single         0.300   0.620~   0.692~   5        -   ≥ 0.300   ≥ 0.500
  c2-same        0.100   0.170~   0.197~   4        -   ≥ 0.100   ≥ 0.100
  c2-different   0.100   0.100~   0.100~   3        -   ≥ 0.100   ≥ 0.100

Failures by reason (excluded from every figure above)
  cell           error      count
  single         no_usage       1
  c2-different   http_500       1"""


def test_rendered_summary_matches_the_thread_layout(protocol_records):
    manifest = {"model": "qwen", "target": "http://127.0.0.1:30000"}
    assert render_summary(protocol_records, manifest) == GOLDEN


def test_rendered_summary_says_when_thinking_was_on(make_record):
    text = render_summary([make_record(thinking=True)])
    assert "thinking ON" in text.splitlines()[0]


def test_records_arriving_out_of_order_from_two_workers_render_in_protocol_order(protocol_records):
    shuffled = protocol_records[::-1]
    manifest = {"model": "qwen", "target": "http://127.0.0.1:30000"}
    assert render_summary(shuffled, manifest) == GOLDEN


FREE_RUNNING = """\
uni-bench summary: steady run, model qwen, target http://h:1 (built-in simulator), max_tokens 512, thinking off, 7 requests, 1 failed

Steady state of free-running cells (window: in-flight requests at or above their median; all-streams t/s = decode tokens of every stream per second of the window; goodput = completions/s meeting TTFT <= 1 s and decode >= 20 t/s)
  cell     window s   in flight   all-streams t/s   req/s   goodput req/s   SLO met   n   failed
  steady    1.0+5.2         2.0             123.1    0.96            0.77       67%   6        1

Steady-state percentiles (raw records sent within the window; CI = 95% confidence interval (order statistics, distribution-free, ≥ x: no upper bound from so few samples, -: no bound); ~ : fewer than 100 samples for p99 / 10 for p90, the value is the sample's maximum region, not a tail estimate)
  cell     figure            p50      p90      p99   n   p50 CI    p90 CI    p99 CI
  steady   ttft_s          0.500   0.500~   0.500~   5        -   ≥ 0.500   ≥ 0.500
  steady   decode_tps      100.0   100.0~   100.0~   5        -   ≥ 100.0   ≥ 100.0
  steady   e2e_tps          75.5    75.5~    75.5~   5        -    ≥ 75.5    ≥ 75.5
  steady   tok_per_chunk    6.04    6.04~    6.04~   5        -    ≥ 6.04    ≥ 6.04

Failures by reason (excluded from every figure above)
  cell     error      count
  steady   http_500       1"""


def test_a_free_running_run_has_no_rounds_and_no_protocol_tables():
    """Window [1, 6.2] and figures as in tests/test_metrics.py; the SLO is the profile's (TTFT 1 s),
    the decode target the default 20 t/s."""
    manifest = {"model": "qwen", "target": {"url": "http://h:1", "builtin_simulator": True},
                "profile": {"slo": {"ttft_s": 1.0, "decode_tps": None}}}
    assert render_summary(free_running_records(), manifest) == FREE_RUNNING


CLIENT_NOTE = """

CLIENT MAY HAVE LIMITED THESE FIGURES: client short of CPU: a client process used 95% of a core, so it may have capped the load and read streams late (event-loop lag p99 12.0 ms)
  process   CPU share mean   CPU share max   loop lag p50 ms   loop lag p99 ms   loop lag max ms   samples
        2              50%             95%               0.5              12.0              20.0       100"""
CALM = {"cpu_share_mean": 0.2, "cpu_share_max": 0.3, "loop_lag_p50_s": 0.0, "loop_lag_p99_s": 0.001,
        "loop_lag_max_s": 0.002, "samples": 100}
BUSY = {"cpu_share_mean": 0.5, "cpu_share_max": 0.95, "loop_lag_p50_s": 0.0005, "loop_lag_p99_s": 0.012,
        "loop_lag_max_s": 0.02, "samples": 100}


def test_the_summary_says_when_a_client_process_may_have_limited_the_figures(protocol_records):
    manifest = {"model": "qwen", "target": "http://127.0.0.1:30000", "client_watch": [CALM, BUSY]}
    assert render_summary(protocol_records, manifest) == GOLDEN + CLIENT_NOTE
    assert render_summary(protocol_records, {**manifest, "client_watch": [CALM]}) == GOLDEN


def test_a_profiles_cell_is_named_beside_the_protocols_of_the_same_n_and_case(make_record):
    records = [make_record(f"c2-{name}", slot=slot, case="different") for name in ("different", "distinct-issues")
               for slot in (0, 1)]
    concurrency = next(part for part in render_summary(records).split("\n\n") if part.startswith("Concurrency"))
    assert concurrency.splitlines()[2:] == [
        "  2   different prompts                               200.0   200.0–200.0   1         0                   2.00x"
        "                -",
        "  2   different prompts, c2-distinct-issues           200.0   200.0–200.0   1         0                   2.00x"
        "                -"]


def test_the_settings_line_says_when_thinking_was_on_for_some_requests_only(make_record):
    text = render_summary([make_record(thinking=True), make_record(round=1)])
    assert "thinking on and off" in text.splitlines()[0] and "2 rounds" in text.splitlines()[0]


def test_the_settings_line_says_when_thinking_was_left_to_the_servers_template(make_record):
    """`thinking: null` (or "server"): no chat_template_kwargs was sent."""
    assert "thinking server default (not sent)," in render_summary([make_record(thinking=None)]).splitlines()[0]
    mixed = render_summary([make_record(thinking="server"), make_record(round=1, thinking="off")])
    assert "thinking off and server default," in mixed.splitlines()[0]


def test_an_answer_in_one_read_shows_no_decode_and_is_counted_as_left_out(make_record):
    """Round 1's 5 tokens came in one chunk with the first (total = TTFT): decode stays round 0's 100 t/s,
    TTFT (0.1 + 0.3) / 2, tok/chunk (101/25 + 5/1) / 2 = 4.52."""
    text = render_summary([make_record(round=0), make_record(round=1, ttft_s=0.3, total_s=0.3, comp=5, chunks=1)])
    assert "  code (code generation)        100.0   100.0–100.0    0.200        4.52   2" in text
    assert text.endswith(
        "Successful requests left out of one figure (they count in every other)\n"
        "  cell     reason                                                    count\n"
        "  single   whole answer in one read (total = TTFT): no decode rate       1")


def _closed_records(asked: int, busy: int) -> list[dict]:
    """`busy` of `asked` closed-loop streams sending back to back for 20 s (1 s requests)."""
    return [build_record("closed", "code", slot=slot, sent_at=1_700_000_000.0 + t, ttft_s=0.1, total_s=0.99,
                         concurrency=asked, case="closed")
            for slot in range(busy) for t in range(20)]


def test_a_closed_loop_holding_fewer_streams_than_asked_is_flagged():
    short = render_summary(_closed_records(asked=8, busy=5), {})
    assert "STREAMS BELOW ASKED: closed held 5.0 of 8 streams in flight" in short
    held = render_summary(_closed_records(asked=4, busy=4), {})
    assert "STREAMS BELOW ASKED" not in held
