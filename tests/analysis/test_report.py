"""`report`: every figure of one run, in four formats, on hand-built records with known answers."""

from __future__ import annotations

import csv
import io
import json

import pytest

from analysis.report import run_report
from loadlib.outputs import csv as csv_format
from loadlib.outputs import json as json_format
from loadlib.outputs import markdown
from loadlib.outputs.text import render_document
from loadlib.report.summary import render_summary
from tests.analysis.builders import build_run, extended_run, free_running_records, profile_run, protocol_run


def sections(document):
    return {section.key: section for section in document.sections}


def test_report_is_the_manifest_then_the_live_summary_then_more_figures(protocol_records):
    manifest = {"model": "qwen", "target": {"url": "http://h:1", "builtin_simulator": False},
                "protocol": {"rounds": 3}}
    text = render_document(run_report([build_run(protocol_records, manifest=manifest)]))
    assert text.startswith("Manifest\n  model: qwen\n  target.url: http://h:1\n  target.builtin_simulator: false\n"
                           "  protocol.rounds: 3\n\n" + render_summary(protocol_records, manifest) +
                           "\n\nSingle stream, more figures")


GOLDEN_EXTRAS = """\
Single stream, more figures (end-to-end = comp/total, prefill included; forward rate = decode / tok-per-chunk, estimated verify steps/s)
  scenario                 end-to-end t/s   forward rate /s   n   failed
  code (code generation)             92.2              24.9   3        0

Concurrency, both aggregate definitions: protocol = sum(comp-1)/max(total-ttft); window = sum(comp-1)/(last token - first token across the round's streams); streams at once = the fewest that decoded at once in a round
  N   case                      protocol t/s   window t/s   window range   per-stream decode t/s   streams at once   cached prompt   n   failed rounds
  2   same prompt (radix hit)          200.0        200.0    200.0–200.0                   100.0                 2             50%   1               0
  2   different prompts                200.0        133.3    133.3–133.3                   100.0                 2              0%   1               1

Prefill (prefill = prompt/TTFT, the protocol's cold figure on cold rows; uncached = (prompt - cached)/TTFT; hit = more than the chat template's framing cached)
  cell     scenario   cache   prompt tokens   cached tokens   TTFT s   prefill t/s   uncached t/s   n
  single   code       cold            1,000               0    0.500         2,000          2,000   1
  single   code       hit             1,000             900    0.050        20,000          2,000   2"""


def test_report_extends_the_protocol_with_window_aggregate_and_prefill():
    text = render_document(run_report([build_run(extended_run())]))
    assert GOLDEN_EXTRAS in text
    assert "Steady state" not in text  # no free-running cell, no empty section


GOLDEN_PROFILE = """\
Prefill (prefill = prompt/TTFT, the protocol's cold figure on cold rows; uncached = (prompt - cached)/TTFT; hit = more than the chat template's framing cached)
  cell         scenario          cache   prompt tokens   cached tokens   TTFT s   prefill t/s   uncached t/s   n
  single       chat              cold              500              20    0.200         2,500          2,400   1
  single       chat              hit             1,000             500    0.100        10,000          5,000   1
  prefill-3k   long-context-3k   cold            3,000              20    1.500         2,000          1,987   1

Cache state (intended by the cell; met = from cached_tokens, warm above the template's framing; MISSED: a cold request served from cache, or a warm one that was not)
  cell           intended   met cold   met warm   unknown   cached prompt   n   flag
  prefill-3k     cold              1          0         0              1%   1
  c2-radix-hit   warm              1          1         0             51%   2   MISSED

Multi-turn: TTFT per turn (s; each turn resends the history, so later turns hit the cache)
  scenario   turn   prompt tokens   cached tokens     p50     p90     p99   n
  chat          0             500              20   0.200   0.200   0.200   1
  chat          1           1,000             500   0.100   0.100   0.100   1"""


def test_report_and_summary_show_prefill_per_size_cache_state_and_turns():
    """Figures by hand in `profile_run`; the framing-only hit of turn 0 counts as cold."""
    summary = render_summary(profile_run())
    assert GOLDEN_PROFILE in summary
    assert summary in render_document(run_report([build_run(profile_run())]))


def test_report_takes_goodput_targets_from_the_runs_profile_and_flags_override_them():
    manifest = {"profile": {"slo": {"ttft_s": 1.0, "decode_tps": 20.0}}}
    steady = sections(run_report([build_run(free_running_records(), manifest=manifest)]))["steady_state"]
    assert "TTFT <= 1 s and decode >= 20 t/s" in steady.title
    assert steady.data.loc[0, "goodput_rps"] == pytest.approx(4 / 5.2)
    tighter = sections(run_report([build_run(free_running_records(), manifest=manifest, slo_ttft_s=0.4)]))
    assert "TTFT <= 0.4 s and decode >= 20 t/s" in tighter["steady_state"].title
    assert tighter["steady_state"].data.loc[0, "goodput_rps"] == 0.0  # every TTFT is 0.5 s


def test_report_shows_steady_state_of_free_running_cells():
    document = run_report([build_run(free_running_records(), slo_ttft_s=1.0, slo_decode_tps=20.0)])
    text = render_document(document)
    assert ("  cell     window s   in flight   all-streams t/s   req/s   goodput req/s   SLO met   n   failed\n"
            "  steady    1.0+5.2         2.0             123.1    0.96            0.77       67%   6        1") in text
    assert "goodput = completions/s meeting TTFT <= 1 s and decode >= 20 t/s" in text
    steady = sections(document)["steady_percentiles"].data.set_index("figure")
    assert steady.loc["e2e_tps", "p50"] == pytest.approx(75.5)


def test_json_report_keeps_the_issue_8_schema_and_adds_every_table():
    payload = json.loads(json_format.render_document(run_report([build_run(extended_run(), manifest={"model": "m"})])))
    assert payload["manifest"] == {"model": "m"}
    assert payload["single"]["code"]["n"] == 3
    assert [row["aggregate_tps"] for row in payload["concurrent"]] == [200.0, 200.0]
    window = {row["case"]: row["window_tps"] for row in payload["tables"]["concurrency"]}
    assert window == {"same": 200.0, "different": pytest.approx(400 / 3)}
    assert payload["tables"]["failures"] == [{"cell": "c2-different", "error": "no_usage", "count": 1}]
    assert payload["tables"]["steady_state"] == []


def test_json_percentiles_carry_their_interval_and_sufficiency_by_percentile():
    payload = json.loads(json_format.render_document(run_report([build_run(extended_run())])))
    rows = [row for rows in payload["tables"].values() for row in rows if "p99_ci_low" in row]
    assert rows, "no table with percentile intervals"
    for row in rows:
        assert row["ci"]["p99"] == [row["p99_ci_low"], row["p99_ci_high"]]
        assert row["enough"] == {"p50": row["p50_enough"], "p90": row["p90_enough"], "p99": row["p99_enough"]}
        assert row["enough"]["p99"] is (row["n"] >= 100)  # 3 rounds: a p99 never rests on enough samples


def test_csv_report_is_one_tidy_table_that_pivots_back():
    rows = list(csv.DictReader(io.StringIO(csv_format.render_document(run_report([build_run(protocol_run())])))))
    assert set(rows[0]) == {"section", "row", "column", "value"}
    decode = {r["row"]: float(r["value"]) for r in rows if r["section"] == "single" and r["column"] == "decode_tps"}
    assert decode == {"code": pytest.approx(610 / 3), "cn_essay": 75.0}
    aggregate = [r for r in rows if r["section"] == "concurrent" and r["column"] == "aggregate_tps"]
    assert [(r["row"], float(r["value"])) for r in aggregate] == [("c2-same", 300.0), ("c2-different", 200.0)]


def test_markdown_report_is_pipe_tables_with_numbers_right_aligned():
    text = markdown.render_document(run_report([build_run(protocol_run(), manifest={"model": "qwen"})]))
    assert "| manifest | value |\n|:---|:---|\n| model | qwen |" in text
    assert ("| scenario | decode t/s | range | TTFT s | tok/chunk | n |\n"
            "|:---|---:|---:|---:|---:|---:|\n"
            "| code (code generation) | 203.3 | 160.0–250.0 | 0.200 | 4.01 | 3 |") in text


def test_markdown_report_leads_with_the_tables_and_ends_with_the_manifest():
    """Issue 35 item 7: a post starts with the answer, the ~50 manifest rows after it."""
    text = markdown.render_document(run_report([build_run(protocol_run(), manifest={"model": "qwen"})]))
    parts = text.split("\n\n")
    assert parts[0].startswith("## uni-bench summary") and parts[1].startswith("**Single stream")
    assert parts[-2] == "**Manifest** (what was run, as the run recorded it)"
    assert parts[-1].startswith("| manifest | value |")
