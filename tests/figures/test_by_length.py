"""Figures by length: bucket edges from the data, TTFT by prompt tokens and decode by completion
tokens per free-running cell, in the report (not the summary) and as charts."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import orjson
import pytest

from analysis.report import run_report
from loadlib.figures import free_running
from loadlib.outputs.text import render_document
from loadlib.record_table import records_frame
from loadlib.records import read_records
from loadlib.report.charts import ChartRun, drawn_charts
from loadlib.report.summary import summary_document
from loadlib.run_view import RunView
from tests.analysis.builders import build_record, build_run
from tests.profile_runs import run_profile

# --- edges ----------------------------------------------------------------------------------------

def test_edges_are_powers_of_two_and_half_steps_around_a_narrow_spread():
    assert free_running.length_edges(np.array([300, 400, 512])).tolist() == [256, 384, 512, 768]
    assert free_running.length_edges(np.array([200, 260, 900])).tolist() == [192, 256, 384, 512, 768, 1024]


def test_one_length_is_one_bucket_around_it():
    assert free_running.length_edges(np.array([44, 44, 44])).tolist() == [32, 48]
    assert free_running.length_edges(np.array([1])).tolist() == [1, 2]
    assert free_running.length_edges(np.array([1, 2, 3])).tolist() == [1, 2, 3, 4]  # whole tokens only


def test_a_wide_spread_merges_octaves_until_at_most_eight_buckets():
    edges = free_running.length_edges(np.array([10, 100_000]))
    assert edges.tolist() == [8, 32, 128, 512, 2048, 8192, 32768, 131072]  # x4: seven buckets
    assert free_running.length_edges(np.arange(1, 2000)).tolist() == [1, 4, 16, 64, 256, 1024, 4096]
    for spread in ([1, 10**6], [3, 7, 5000], [100, 60_000]):
        edges = free_running.length_edges(np.array(spread))
        assert len(edges) - 1 <= free_running.MAX_LENGTH_BUCKETS
        assert edges[0] <= min(spread) and edges[-1] > max(spread)


def test_no_usable_counts_give_no_edges():
    assert free_running.length_edges(np.array([np.nan, 0.0])).size == 0
    assert free_running.length_edges(np.array([])).size == 0


# --- the table ----------------------------------------------------------------------------------

def _free(cell: str, prompt: int, ttft: float, comp: int, total: float, **fields) -> dict:
    return build_record(cell, scenario="synthetic", case="closed", concurrency=2, prompt_tokens=prompt,
                        ttft_s=ttft, comp=comp, total_s=total, **fields)


def _by_length_records() -> list[dict]:
    # prompts 100 and 120 (bucket 96-127), 200 (192-255); answers 101 tokens: decode 100 / (total - ttft)
    return [
        _free("closed", 100, 0.1, 101, 1.1),  # decode 100
        _free("closed", 120, 0.3, 101, 0.8),  # decode 200
        _free("closed", 200, 0.5, 101, 0.5),  # one read: TTFT counts, no decode
        _free("closed", 200, 0.9, 101, 1.9, error="http 500"),  # failed: in no bucket
        build_record("single", prompt_tokens=5000, ttft_s=9.0),  # the protocol's: left out
        _free("open", 100, 0.2, 101, 2.2),  # decode 50, same edges as closed
    ]


def test_buckets_hold_percentiles_from_raw_records_of_successful_free_running_requests():
    table = free_running.by_length_table(records_frame(_by_length_records()))
    ttft = table[table["figure"] == "ttft_s"]
    assert ttft[["cell", "low", "high", "n"]].values.tolist() == [
        ["closed", 96, 128, 2], ["closed", 192, 256, 1], ["open", 96, 128, 1]]
    first = ttft.iloc[0]
    assert (first["p50"], first["p90"], first["p99"]) == pytest.approx((0.2, 0.28, 0.298))  # linear, of 0.1 and 0.3
    decode = table[table["figure"] == "decode_tps"]
    assert decode["tokens"].unique().tolist() == ["completion_tokens"]
    assert decode[["cell", "low", "high", "n"]].values.tolist() == [["closed", 96, 128, 2], ["open", 96, 128, 1]]
    assert decode.iloc[0]["p50"] == pytest.approx(150.0) and decode.iloc[1]["p50"] == pytest.approx(50.0)


def test_a_protocol_only_run_has_no_buckets():
    frame = records_frame([build_record("single"), build_record("c2-same", slot=0)])
    assert free_running.by_length_table(frame).empty
    assert not _by_length_charts([build_record("single")])


def test_buckets_are_in_the_report_and_its_json_but_not_in_the_summary():
    run = build_run(_by_length_records())
    report = run_report([run])
    assert "by_length" not in [s.key for s in summary_document(run).sections]
    text = render_document(report)
    assert "By length, free-running cells: TTFT by prompt tokens and decode by completion tokens" in text
    assert "  closed   TTFT s       prompt 96–127       0.200   0.280   0.298   2\n" in text
    assert "  open     decode t/s   completion 96–127    50.0    50.0    50.0   1\n" in text
    rows = [s for s in report.sections if s.key == "by_length"][0].data
    assert rows.columns.tolist() == free_running.BY_LENGTH_COLUMNS


def _by_length_charts(records: list[dict]) -> dict[str, dict]:
    charts = drawn_charts([ChartRun(RunView(records_frame(records), {}, label="run"))])
    return {chart["id"]: chart for chart in charts if chart["figure"] == "by_length_{run}"}


def test_the_charts_draw_both_figures_per_cell_from_the_reports_buckets():
    records = _by_length_records()
    charts = _by_length_charts(records)
    ttft, decode = charts["by-length-ttft"], charts["by-length-decode"]
    assert ttft["x"]["label"].startswith("prompt tokens") and decode["x"]["label"].startswith("completion tokens")
    labels = [s["label"] for s in ttft["series"]]
    assert labels == ["closed: each request", "open: each request", "closed: p50", "open: p50", "closed: p90",
                      "open: p90"]
    table = free_running.by_length_table(records_frame(records))
    rows = table[(table["figure"] == "ttft_s") & (table["cell"] == "closed")]
    p50 = ttft["series"][labels.index("closed: p50")]
    assert p50["y"] == pytest.approx(rows["p50"].tolist(), abs=1e-4)  # the report's figures, at each bucket's middle
    assert p50["x"] == pytest.approx(np.sqrt(rows["low"] * rows["high"]).tolist(), abs=1e-4)


# --- a real run ---------------------------------------------------------------------------------

PROFILE = """
description = "lengths from distributions, closed loop"
seed = 3

[load]
mode = "closed"
warmup_s = 0.5
duration_s = 6

[scenarios.synthetic]
input_tokens = { dist = "lognormal", mean = 600, std = 500, min = 60, max = 4000 }
output_tokens = { dist = "lognormal", mean = 150, std = 100, max = 600 }
"""


@pytest.mark.processes
def test_a_free_running_profile_run_reports_and_plots_by_length(tmp_path):
    run_profile(tmp_path, PROFILE, 3)
    run_dir = tmp_path / "run"
    report = subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir)], capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    section = report.stdout.split("By length, free-running cells")[1].split("\n\n")[0]
    rows = section.splitlines()[2:]
    assert sum("TTFT s       prompt" in row for row in rows) >= 3
    assert sum("decode t/s   completion" in row for row in rows) >= 2
    assert "By length" not in (run_dir / "summary.txt").read_text()
    tables = orjson.loads(subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir), "--json"],
                                         capture_output=True, timeout=120).stdout)["tables"]
    buckets = tables["by_length"]
    assert {row["cell"] for row in buckets} == {"closed"}
    assert all(row["low"] < row["high"] and row["n"] > 0 for row in buckets)
    ok = [r for r in read_records(run_dir) if r["case"] == "closed" and r["measured"] and r["error"] is None]
    assert sum(row["n"] for row in buckets if row["figure"] == "ttft_s") == len(ok)  # every successful one
    plots = subprocess.run([sys.executable, "-m", "analysis", "plot", str(run_dir), "--out", str(tmp_path / "plots")],
                           capture_output=True, text=True, timeout=120)
    assert plots.returncode == 0, plots.stderr
    assert (tmp_path / "plots" / "by_length_run.png").read_bytes().startswith(b"\x89PNG")
