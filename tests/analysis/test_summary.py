"""The protocol summary: issue 8's JSON schema and the thread's table layout, on a hand-computed run."""

from __future__ import annotations

import pytest

from analysis import protocol_summary, render_protocol_summary


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
    assert same == {"concurrency": 2, "case": "same", "aggregate_tps": 300.0, "min": 200.0,
                    "max": 400.0, "n": 2, "overlap": pytest.approx(300 / (610 / 3))}
    assert different == {"concurrency": 2, "case": "different", "aggregate_tps": 200.0, "min": 200.0,
                         "max": 200.0, "n": 1, "overlap": pytest.approx(200 / (610 / 3))}


def test_summary_counts_are_python_ints_ready_for_json(protocol_records):
    summary = protocol_summary(protocol_records)
    assert type(summary["single"]["code"]["n"]) is int
    assert type(summary["concurrent"][0]["concurrency"]) is int


def test_summary_adds_ttft_percentiles_and_failures(protocol_records):
    summary = protocol_summary(protocol_records)
    assert summary["ttft_percentiles"]["single"] == pytest.approx({"p50": 0.3, "p90": 0.62, "p99": 0.692, "n": 5})
    assert summary["failures"] == [{"cell": "single", "error": "no_usage", "count": 1},
                                   {"cell": "c2-different", "error": "http_500", "count": 1}]


def test_a_cell_without_complete_rounds_stays_in_the_table_with_n_0_and_none(make_record):
    summary = protocol_summary([
        make_record("c2-same", slot=0), make_record("c2-same", slot=1, comp=None, error="timeout"),
    ])
    assert summary["single"] == {}
    assert summary["concurrent"] == [{"concurrency": 2, "case": "same", "aggregate_tps": None, "min": None,
                                      "max": None, "n": 0, "overlap": None}]


def test_single_stream_overlap_is_none_without_a_code_baseline(make_record):
    summary = protocol_summary([make_record("c2-same", slot=0), make_record("c2-same", slot=1)])
    assert summary["concurrent"][0]["overlap"] is None


GOLDEN = """\
uni-bench summary: model qwen, target http://127.0.0.1:30000, max_tokens 512, thinking off, 3 rounds, 14 requests, 2 failed

Single stream (decode = (comp-1)/(total-ttft); tok/chunk on the stream-chunk basis)
  scenario                   decode t/s         range   TTFT s   tok/chunk   n
  code (code generation)          203.3   160.0–250.0    0.200        4.01   3
  cn_essay (Chinese essay)         75.0    50.0–100.0    0.600        2.02   2

Concurrency (aggregate = sum(comp-1)/max(total-ttft) per round, mean over rounds; overlap = aggregate / single-stream code decode)
  N   case                      aggregate t/s         range   n   overlap
  2   same prompt (radix hit)           300.0   200.0–400.0   2     1.48x
  2   different prompts                 200.0   200.0–200.0   1     0.98x

TTFT percentiles (s, from raw records of successful requests)
  cell             p50     p90     p99   n
  single         0.300   0.620   0.692   5
  c2-same        0.100   0.170   0.197   4
  c2-different   0.100   0.100   0.100   3

Failures by reason (excluded from every figure above)
  cell           error      count
  single         no_usage       1
  c2-different   http_500       1"""


def test_rendered_summary_matches_the_thread_layout(protocol_records):
    manifest = {"model": "qwen", "target": "http://127.0.0.1:30000"}
    assert render_protocol_summary(protocol_records, manifest) == GOLDEN


def test_rendered_summary_says_when_thinking_was_on(make_record):
    text = render_protocol_summary([make_record(thinking=True)])
    assert "thinking ON" in text.splitlines()[0]


def test_records_arriving_out_of_order_from_two_workers_render_in_protocol_order(protocol_records):
    shuffled = protocol_records[::-1]
    manifest = {"model": "qwen", "target": "http://127.0.0.1:30000"}
    assert render_protocol_summary(shuffled, manifest) == GOLDEN
