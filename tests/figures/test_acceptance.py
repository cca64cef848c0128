"""Speculative acceptance from the server's own account of each request: the figures on hand-built
records whose answers are worked out in the comments, and the simulator's known acceptance read back
through real headless Locust runs on each server flavour."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from analysis.report import run_report
from loadlib.figures import acceptance
from loadlib.figures.validity import spec_account_agrees
from loadlib.record_table import read_records_frame, records_frame
from loadlib.report.document import rows
from loadlib.report.sections import acceptance_section, position_section
from loadlib.report.summary import render_summary
from loadlib.run_view import read_run
from loadlib.sim.presets import DEFAULT_PRESET, PRESETS
from loadlib.truth.server_figures import CellSpan, SpecCounters
from tests.analysis.builders import build_record
from tests.conftest import FAST_SIM, run_locust_together


def spec_record(cell="single", scenario="code", steps=10, accepted=40, drafts=70, histogram=None, *,
                ttft_s=0.5, total_s=2.5, comp=51, chunks=10, **fields):
    """A record with the server's account: `steps` verify steps that accepted `accepted` drafts."""
    return build_record(cell, scenario, ttft_s=ttft_s, total_s=total_s, comp=comp, chunks=chunks,
                        spec_verify_steps=steps, spec_accepted_tokens=accepted, spec_draft_tokens=drafts,
                        spec_accept_histogram=histogram, **fields)


def test_the_accept_length_is_tokens_per_verify_step():
    assert acceptance.accept_length(10, 40) == 5.0  # 40 drafts kept + 10 tokens of the target's own, over 10 steps
    assert acceptance.accept_length(4, 0) == 1.0
    assert acceptance.accept_length(0, 0) != acceptance.accept_length(0, 0)  # NaN: no step, no figure


def test_per_scenario_the_sums_weigh_each_verify_step_once_beside_the_clients_tok_per_chunk():
    frame = records_frame([
        # code: 10 steps keep 40 drafts (5.0 a step) and 30 steps keep 30 (2.0): (70 + 40) / 40 = 2.75,
        # where the mean of the two requests' figures would say 3.5
        spec_record(steps=10, accepted=40, drafts=70, comp=51, chunks=10, ttft_s=0.5, total_s=2.5),
        spec_record(steps=30, accepted=30, drafts=210, comp=61, chunks=30, ttft_s=0.5, total_s=4.5),
        # cn_essay: (12 + 20) / 20 = 1.6
        spec_record(scenario="cn_essay", steps=20, accepted=12, drafts=140, comp=33, chunks=20, ttft_s=0.2,
                    total_s=1.8),
        build_record(scenario="cn_essay"),  # no account: not in the figures
        spec_record(scenario="cn_essay", error="http 500"),  # failed: not in the figures
    ])
    table = acceptance.acceptance_table(frame).set_index("scenario")
    code, essay = table.loc["code"], table.loc["cn_essay"]
    assert list(table.index) == ["code", "cn_essay"] and (code["requests"], essay["requests"]) == (2, 1)
    assert code["accept_length"] == pytest.approx(110 / 40) and essay["accept_length"] == pytest.approx(1.6)
    assert code["draft_acceptance"] == pytest.approx(70 / 280)
    assert code["client_tok_per_chunk"] == pytest.approx(112 / 40)  # Σcomp / Σchunks of the same requests
    # decode = verify steps/s x accept length: 40 steps over 2 + 4 s of decode, x 2.75 = 110 tokens / 6 s
    assert code["verify_steps_per_s"] == pytest.approx(40 / 6)
    assert code["decode_tps"] == pytest.approx(110 / 6) == code["client_decode_tps"]  # (50 + 60) / 6


def test_per_cell_and_scenario_a_mixed_cell_is_split_by_content():
    frame = records_frame([spec_record("c2-different", "code", steps=10, accepted=50),
                           spec_record("c2-different", "cn_essay", steps=10, accepted=5)])
    table = acceptance.acceptance_table(frame, by=("cell", "scenario"))
    assert rows(table[["cell", "scenario", "accept_length"]]) == [
        {"cell": "c2-different", "scenario": "code", "accept_length": 6.0},
        {"cell": "c2-different", "scenario": "cn_essay", "accept_length": 1.5}]


def test_a_server_that_sends_no_account_gives_empty_tables_and_no_section():
    frame = records_frame([build_record(), build_record("c2-same", slot=1)])
    table = acceptance.acceptance_table(frame)
    assert table.empty and list(table.columns) == ["scenario", *acceptance.ACCEPT_COLUMNS]
    assert acceptance.position_table(frame).empty
    assert acceptance_section(table).optional
    assert "Speculative decoding" not in render_summary([build_record()], {})


def test_shares_by_position_from_histograms_and_what_they_imply_for_shorter_drafts():
    # 10 steps: 4 accepted none, 2 one, 1 two, 3 three: at least 1: 6/10, at least 2: 4/10, at least 3: 3/10
    shares, steps = acceptance.shares_from_histograms(["4,2", "0,0,1,3"])
    assert steps == 10 and shares == pytest.approx([0.6, 0.4, 0.3])
    # E[tokens | n] = 1 + Σ_{k<=n} p_k; at the full length it is the accept length: (2 + 2 + 9 + 10) / 10 = 2.3
    assert acceptance.expected_tokens(shares) == pytest.approx([1.6, 2.0, 2.3])
    assert acceptance.accept_length(10, 2 * 1 + 1 * 2 + 3 * 3) == pytest.approx(2.3)
    assert acceptance.shares_from_histograms([]) == ([], 0)


def test_the_position_curve_comes_from_the_counters_where_the_cell_has_them_else_from_the_histograms():
    frame = records_frame([spec_record("c2-same", steps=10, accepted=9, histogram="4,2,1,3", sent_at=100.0),
                           spec_record("single", steps=10, accepted=9, histogram="4,2,1,3", sent_at=200.0)])
    counted = SpecCounters("target", "vllm", CellSpan(0, "c2-same", "same", 99.0, 101.0), verify_steps=20.0,
                           accepted_tokens=19.0, accepted_per_position=(12.0, 5.0, 2.0))
    table = acceptance.position_table(frame, [counted])
    by_cell = {cell: group for cell, group in table.groupby("cell")}
    assert set(by_cell) == {"c2-same", "single"}
    same, single = by_cell["c2-same"], by_cell["single"]
    assert set(same["basis"]) == {acceptance.COUNTERS} and list(same["accepted_share"]) == pytest.approx([0.6, 0.25, 0.1])
    assert list(same["expected_tokens"]) == pytest.approx([1.6, 1.85, 1.95])  # 1 + 19 / 20 at the full length
    assert set(single["basis"]) == {acceptance.HISTOGRAMS} and list(single["position"]) == [1, 2, 3]
    assert list(single["accepted_share"]) == pytest.approx([0.6, 0.4, 0.3]) and set(single["scenario"]) == {"code"}


def test_the_summary_shows_one_curve_a_row_labelled_an_estimate_of_acceptance_not_of_speed():
    frame = records_frame([spec_record("c2-same", steps=10, accepted=13, histogram="4,2,1,3"),
                           spec_record("c2-same", scenario="cn_essay", steps=10, accepted=5, histogram="5,5")])
    section = position_section(acceptance.curves(acceptance.position_table(frame)))
    assert "an estimate of acceptance had the draft been cut to n, not of speed" in section.title
    assert section.view.to_dict("records") == [
        {"cell": "c2-same code", "from": "per-request histograms", "verify steps": "10", "p(k), k = 1..N": "0.60 0.40 0.30",
         "expected tokens/step at draft length 1..N": "1.60 2.00 2.30"},
        {"cell": "c2-same cn_essay", "from": "per-request histograms", "verify steps": "10", "p(k), k = 1..N": "0.50",
         "expected tokens/step at draft length 1..N": "1.50"}]
    # a locustfile's own task: the cell is named after its scenario, and said once
    own = records_frame([spec_record("short", scenario="short", steps=10, accepted=5, histogram="5,5", case="locust")])
    assert position_section(acceptance.curves(acceptance.position_table(own))).view["cell"].tolist() == ["short"]
    # the curve at the length run is the accept length measured
    assert acceptance.accept_length(10, 13) == pytest.approx(2.3)
    text = render_summary([spec_record("c2-same", steps=10, accepted=13, histogram="4,2,1,3")], {})
    assert "Speculative acceptance by draft position" in text and "1.60 2.00 2.30" in text


def test_the_requests_account_against_the_counters_over_a_cell():
    # the span's scrapes came at 0 and 10 (asked 0.25 s before); both requests ran between them
    span = CellSpan(0, "c2-same", "same", 1_700_000_000.0, 1_700_000_010.0)
    records = records_frame([spec_record("c2-same", steps=50, accepted=200, sent_at=1_700_000_001.0),
                             spec_record("c2-same", steps=50, accepted=200, sent_at=1_700_000_001.0, slot=1)])
    agree = SpecCounters("target", "vllm", span, verify_steps=101.0, accepted_tokens=400.0, accepted_per_position=())
    ok, detail = spec_account_agrees(records, [agree])
    assert ok is True and "100 verify steps by the requests' account, server 101" in detail  # within 2 %
    skewed = SpecCounters("target", "vllm", span, verify_steps=100.0, accepted_tokens=440.0, accepted_per_position=())
    ok, detail = spec_account_agrees(records, [skewed])
    assert ok is False and detail == ("client and server disagree: client counted 400 accepted drafts by the requests' "
                                      "account, server 440 (+10.0%): the server counted more (other clients)")
    # llama-server: the requests count its passes, its counter those that verified a draft (n-gram
    # drafting: a few in a thousand, as a real one counted 4 of 254): at most the requests' passes
    fewer = SpecCounters("target", "llamacpp", span, verify_steps=97.0, accepted_tokens=400.0, accepted_per_position=())
    assert spec_account_agrees(records, [fewer])[0] is True
    ngram = SpecCounters("target", "llamacpp", span, verify_steps=4.0, accepted_tokens=400.0, accepted_per_position=())
    ok, detail = spec_account_agrees(records, [ngram])
    assert ok is True and "100 target passes by the requests' account (the server counts those with a draft)" in detail
    more = SpecCounters("target", "llamacpp", span, verify_steps=120.0, accepted_tokens=400.0, accepted_per_position=())
    assert spec_account_agrees(records, [more])[0] is False  # more drafting passes than passes: another client
    assert spec_account_agrees(records, [SpecCounters(
        "target", "vllm", span, verify_steps=97.0, accepted_tokens=400.0, accepted_per_position=())])[0] is False
    no_counter = SpecCounters("target", "sglang", span, verify_steps=None, accepted_tokens=None, accepted_per_position=())
    assert spec_account_agrees(records, [no_counter])[0] is None
    silent = records_frame([build_record("c2-same", sent_at=1_700_000_001.0)])
    assert spec_account_agrees(silent, [agree]) == (
        None, "no request of the cell carries the server's account of speculative decoding")


def test_a_request_at_the_cells_edge_or_without_an_account_widens_the_range():
    span = CellSpan(1, "closed", "closed", 1_700_000_010.0, 1_700_000_020.0)
    records = records_frame([
        spec_record("closed", steps=50, accepted=100, sent_at=1_700_000_011.0),  # within: counts whole
        spec_record("warmup", steps=40, accepted=80, sent_at=1_700_000_008.0, total_s=4.0),  # ran across the start
        spec_record("closed", steps=None, accepted=None, drafts=None, sent_at=1_700_000_012.0, comp=30,
                    error="http 500"),  # failed: may have been counted, up to its 30 tokens
        spec_record("closed", steps=30, accepted=60, sent_at=1_700_000_030.0)])  # after the end: never
    counted = lambda steps, accepted: SpecCounters("target", "vllm", span, verify_steps=steps,  # noqa: E731
                                                   accepted_tokens=accepted, accepted_per_position=())
    assert spec_account_agrees(records, [counted(50.0, 100.0)])[0] is True  # the edge's request counted none
    assert spec_account_agrees(records, [counted(110.0, 200.0)])[0] is True  # all of it, and the failed one's 20
    ok, detail = spec_account_agrees(records, [counted(160.0, 200.0)])  # more than 50 + 40 + 30 steps: another client
    assert ok is False and "verify steps" in detail and "2 request(s) at the cell's edges" in detail
    assert spec_account_agrees(records, [counted(45.0, 100.0)])[0] is False  # fewer than the whole request's 50


# --- known answers: the simulator's preset acceptance comes back from the per-request account ---

RUN = ["--headless", "-u", "2", "--rounds", "1", "--concurrency", "2", "--scenarios", "code,cn_essay",
       "--loglevel", "WARNING"]
FLAVOURS = ("sglang", "vllm", "llamacpp")


@pytest.fixture(scope="module")
def flavour_runs(tmp_path_factory):
    """One protocol run per server flavour the simulator plays, and SGLang with `--spec-details off`."""
    work = tmp_path_factory.mktemp("acceptance")
    runs = {name: ([*RUN, "--run-dir", str(work / name), "--sim-args", f"{FAST_SIM} --flavor {name}"], work)
            for name in FLAVOURS}
    runs["off"] = ([*RUN, "--spec-details", "off", "--run-dir", str(work / "off"), "--sim-args", FAST_SIM], work)
    results = run_locust_together(runs)
    return {name: (result, work / name) for name, result in results.items()}


@pytest.mark.processes
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_each_flavour_gives_back_the_presets_acceptance_by_scenario(flavour_runs, flavour):
    result, run_dir = flavour_runs[flavour]
    assert result.returncode == 0, result.stderr[-3000:]
    frame = read_records_frame(run_dir)
    assert frame["spec_verify_steps"].notna().all()  # every request carries the server's account
    table = acceptance.acceptance_table(frame).set_index("scenario")
    preset = PRESETS[DEFAULT_PRESET].accept
    for scenario, known in (("code", preset["code"]), ("cn_essay", preset["cn_essay"])):
        assert table.loc[scenario, "accept_length"] == pytest.approx(known, rel=0.05), (scenario, known)
    assert table.loc["code", "decode_tps"] == pytest.approx(table.loc["code", "client_decode_tps"], rel=1e-9)
    assert "Speculative decoding per scenario" in result.stderr + result.stdout


@pytest.mark.processes
def test_report_json_carries_the_section_and_sglang_is_asked_only_as_the_option_says(flavour_runs):
    asked, run_dir = flavour_runs["sglang"]
    report = subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir), "--json"],
                            capture_output=True, text=True, timeout=60)
    found = json.loads(report.stdout)["tables"]["acceptance"]
    assert [row["scenario"] for row in found] == ["code", "cn_essay", "code_b"] and found[0]["accept_length"] > 5
    assert read_run(run_dir).manifest["protocol"]["spec_details"] is True
    off, off_dir = flavour_runs["off"]
    assert off.returncode == 0, off.stderr[-3000:]
    assert read_records_frame(off_dir)["spec_verify_steps"].isna().all()
    assert {s.key: s for s in run_report([read_run(off_dir)]).sections}["acceptance"].data.empty


@pytest.mark.processes
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_on_a_healthy_server_the_requests_account_adds_up_to_its_counters_in_every_cell(flavour_runs, flavour):
    _result, run_dir = flavour_runs[flavour]
    run = read_run(run_dir)
    made = {c.cell: c for c in run.checks if c.name == "spec_account"}
    assert set(made) == set(run.records["cell"]), made  # a check in every cell
    assert [(c.cell, c.detail) for c in made.values() if c.ok is not True] == []
    off = read_run(flavour_runs["off"][1])
    assert {c.ok for c in off.checks if c.name == "spec_account"} == {None}  # no account sent: not made
