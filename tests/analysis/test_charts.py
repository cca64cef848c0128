"""Each chart is declared once (`loadlib.report.charts`) and drawn in every medium that shows it:
report.html (in Debian's headless Chromium, no console error), the PNGs (files made, not empty), the
live page (`tests/run/test_webui.py`). A new chart is one declaration: a toy chart registered here
appears in all of them, and so does a swim lane (a span per request). The runs here have, between
them, data for every declared chart."""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pytest

from loadlib.figures import series as points
from loadlib.outputs.png import plot
from loadlib.record_table import records_frame
from loadlib.report import charts
from loadlib.report.charts import PALETTE, Axis, Chart, ChartRun, Series, drawn, drawn_charts
from loadlib.report.html_data import page_data
from loadlib.report.html_page import write_page
from loadlib.run_view import RunView, read_run
from tests.analysis.builders import extended_run, free_running_records, protocol_run
from tests.figures.test_sweep import T0, closed, entry

PNG = b"\x89PNG\r\n\x1a\n"
SLO = {"ttft_s": 1.0, "ttft_p": 90, "decode_tps": 20.0, "decode_p": 90, "goodput": 0.9}
TOY = Chart("toy-completion-tokens", "Toy: completion tokens of each request at its send time", "toy",
            Axis("time since the first request", "s"), Axis("completion tokens", zero=True),
            (Series("", lambda run: points.request_points(run.requests, "completion_tokens", run.origin),
                    per_request=True),),
            kind="scatter", live=True)


def _lanes(run: ChartRun):
    """Each request from its send to its end on its stream's lane (`slot`): a swim lane."""
    df = run.requests
    return points.request_points(df, "total_s", run.origin).assign(end=lambda p: p["x"] + p["y"], y=df["slot"])


LANES = Chart("toy-lanes", "Toy: each request on its stream's lane, from its send to its end", "toy_lanes",
              Axis("time since the first request", "s"), Axis("stream"), (Series("", _lanes),), kind="span")


def level(value: int, verdict: str, ttft: float) -> dict:
    """A capacity search's level as the manifest keeps it."""
    return {"value": value, "cells": [f"search-u{value}"], "verdict": verdict, "n": 20, "failed": 0, "ttft_p": 90,
            "decode_p": 90, "ttft_s": ttft, "ttft_low": ttft * 0.9, "ttft_high": ttft * 1.1, "decode_tps": 100.0,
            "decode_low": 90.0, "decode_high": 110.0, "goodput": 1.0, "goodput_low": 0.95, "goodput_high": 1.0,
            "pass_share": 1.0}


SEARCH = {"variable": "users", "best": 1, "slo": SLO, "levels": [level(1, "held", 0.5), level(2, "broke", 1.5)]}


def search_records(target: str = "") -> list[dict]:
    return closed(target, 0.5, 100, 25, cell="search-u1", streams=1) + closed(target, 1.5, 100, 25, cell="search-u2")


def scrapes(cell: str, start: float, end: float) -> list[dict]:
    """A SGLang server's start and end scrapes of one cell: its accept-length gauge from 1 to 3,
    2,000 tokens generated, requests running and queued."""
    def scrape(phase: str, t: float, gauge: float, generated: int, running: int) -> dict:
        text = ("# TYPE sglang:spec_accept_length gauge\n" f"sglang:spec_accept_length {gauge}\n"
                "# TYPE sglang:generation_tokens_total counter\n" f"sglang:generation_tokens_total {generated}\n"
                "# TYPE sglang:num_running_reqs gauge\n" f"sglang:num_running_reqs {running}\n"
                "# TYPE sglang:num_queue_reqs gauge\n" "sglang:num_queue_reqs 0\n")
        return {"t": t, "source": "target", "url": "http://127.0.0.1:30000/metrics", "phase": phase,
                "cell_index": 0, "cell": cell, "case": "closed", "error": None, "text": text}
    return [scrape("start", start, 1.0, 0, 0), scrape("end", end, 3.0, 2000, 2)]


def gpu_scrapes(cell: str, start: float, end: float) -> list[dict]:
    """A DCGM exporter's start and end scrapes of one cell: one GPU drawing 400 W throughout."""
    def scrape(phase: str, t: float) -> dict:
        text = ("# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n" 'DCGM_FI_DEV_POWER_USAGE{gpu="0",modelName="GPU"} 400\n'
                "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
                f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",modelName="GPU"}} {(t - start) * 400_000 + 1e9:.0f}\n')
        return {"t": t, "source": "gpu", "url": "http://127.0.0.1:9400/metrics", "phase": phase, "cell_index": 0,
                "cell": cell, "case": "closed", "error": None, "text": text}
    return [scrape("start", start), scrape("end", end)]


def with_account(record: dict) -> dict:
    """A request with the server's account of its speculative decoding: 10 steps, 13 drafts accepted."""
    return {**record, "spec_verify_steps": 10, "spec_accepted_tokens": 13, "spec_draft_tokens": 30,
            "spec_accept_histogram": "4,2,1,3"}


def write_run(path: Path, records: list[dict], manifest: dict, scraped: list[dict] = ()) -> Path:
    path.mkdir(parents=True)
    (path / "records.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    if scraped:
        (path / "metrics.jsonl").write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in scraped))
    return path


@pytest.fixture(scope="module")
def every_chart(tmp_path_factory) -> list[Path]:
    """Three run directories: the protocol's cells with cache hits, a free-running cell, a capacity
    search, the server's scrapes and Locust's CSV history; a sweep without a search or scrapes; a
    sweep with both."""
    tmp = tmp_path_factory.mktemp("every-chart")
    main = write_run(tmp / "main", [with_account(r) for r in extended_run()] + free_running_records() + search_records(),
                     {"search": SEARCH}, scrapes("steady", T0, T0 + 8) + gpu_scrapes("steady", T0, T0 + 8))
    (main / "locust_stats.csv").write_text("Type,Name,Request Count\n,Aggregated,10\n", encoding="utf-8")
    (main / "locust_stats_history.csv").write_text(
        "Timestamp,User Count,Requests/s\n" + "".join(f"{int(T0) + s},{min(s, 2)},1.0\n" for s in range(9)),
        encoding="utf-8")
    plain = write_run(tmp / "sweep-plain", closed("draft=4", 0.5, 100, 25) + closed("draft=8", 0.25, 200, 20),
                      {"sweep": [entry("draft=4", draft=4), entry("draft=8", draft=8),
                                 entry("draft=0", "exited", draft=0)]})
    searched = write_run(tmp / "sweep-searched", search_records("mrr=2"),
                         {"sweep": [{**entry("mrr=2", mrr=2), "search": SEARCH}]})
    write_run(searched / "targets" / "mrr=2", [], {}, scrapes("search-u1", T0 - 1, T0 + 30))
    return [main, plain, searched]


def chart_ids(data: dict) -> list[str]:
    return [chart["id"] for figure in data["charts"] for chart in figure["charts"]]


def test_these_runs_draw_every_declared_chart_in_report_html_and_as_pngs(every_chart, tmp_path):
    in_pages = {chart for run in every_chart for chart in chart_ids(page_data([read_run(run)]))}
    assert in_pages == {chart.id for chart in charts.CHARTS}
    written = [path for run in every_chart for path in plot([read_run(run)], tmp_path / run.name)]
    assert all(path.stat().st_size > 10_000 and path.read_bytes().startswith(PNG) for path in written)
    names = {path.name for path in written}
    wanted = {chart.figure.format(run=run.name) + ".png" for chart in charts.CHARTS for run in every_chart[:1]
              if not chart.whole_run} | {"sweep_sweep-plain.png", "sweep_sweep-searched.png"}
    assert wanted <= names
    assert "Locust users (from its CSV history)" in str(plot_data(every_chart[0], "timeline-streams"))


def plot_data(run_dir: Path, chart_id: str) -> dict | None:
    """A chart over the run as `plot` reads it (Locust's CSV history too)."""
    chart = next(chart for chart in charts.CHARTS if chart.id == chart_id)
    return drawn(chart, [ChartRun(read_run(run_dir))])


def test_a_new_chart_is_one_declaration(every_chart, tmp_path, monkeypatch):
    monkeypatch.setattr(charts, "CHARTS", [*charts.CHARTS, TOY, LANES])
    run = every_chart[0]
    data = page_data([read_run(run)])
    (toy,) = [chart for figure in data["charts"] for chart in figure["charts"] if chart["id"] == TOY.id]
    records = data["runs"][0]["requests"]
    assert len(toy_points(toy)) == sum(e is None for e in records["columns"]["error"])
    written = plot([read_run(run)], tmp_path)
    assert {tmp_path / "toy.png", tmp_path / "toy_lanes.png"} <= set(written)
    assert all((tmp_path / name).read_bytes().startswith(PNG) for name in ("toy.png", "toy_lanes.png"))
    (lanes,) = [chart for figure in data["charts"] for chart in figure["charts"] if chart["id"] == LANES.id]
    spans = [(x, end) for s in lanes["series"] for x, end in zip(s["x"], s["end"])]
    assert len(spans) == len(toy_points(toy)) and all(end > x for x, end in spans)
    live = ChartRun(RunView(records_frame(protocol_run()), {}), live={"t_s": [], "in_flight": [], "tokens_per_s": [],
                                                                      "ttft": []})
    assert TOY.id in [chart["id"] for chart in drawn_charts([live], live=True)]


def toy_points(chart: dict) -> list[float]:
    return [x for s in chart["series"] for x in s["x"]]


def test_several_runs_each_have_their_colour_and_label_and_bars_stand_side_by_side():
    runs = [ChartRun(RunView(records_frame(protocol_run()), {}, label=label)) for label in ("a", "b")]
    bars = drawn(next(chart for chart in charts.CHARTS if chart.id == "decode-per-scenario"), runs)
    assert [(s["label"], s["color"]) for s in bars["series"]] == [("a: mean over rounds", PALETTE[0]),
                                                                   ("b: mean over rounds", PALETTE[1])]
    assert bars["x"]["ticks"] == ["code (code generation)", "cn_essay (Chinese essay)"]
    assert [s["x"] for s in bars["series"]] == [[-0.2, 0.8], [0.2, 1.2]] and bars["series"][0]["width"] == 0.4
    assert bars["series"][0]["y"] == pytest.approx([203.3333, 75.0])  # the single-stream table's means
    one = drawn(next(chart for chart in charts.CHARTS if chart.id == "ttft-distribution"), runs[:1])
    assert [s["color"] for s in one["series"]] == list(PALETTE[:len(one["series"])])  # one run: a colour a cell


@pytest.mark.processes
def test_every_chart_and_a_new_one_draw_in_report_html_without_a_console_error(every_chart, tmp_path, monkeypatch):
    from tests.run.test_webui import ARTIFACTS, chromium_page

    monkeypatch.setattr(charts, "CHARTS", [*charts.CHARTS, TOY, LANES])
    drawn_ids = set()
    with chromium_page() as page:
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        for run in every_chart:
            out = write_page([read_run(run)], tmp_path / f"{run.name}.html")
            page.goto(out.resolve().as_uri())
            page.wait_for_selector("body[data-rendered=yes]")
            ARTIFACTS.mkdir(exist_ok=True)
            page.locator("#charts").screenshot(path=ARTIFACTS / f"charts-{run.name}.png")
            declared = chart_ids(json.loads(re.search(r'id="report-data">(.*?)</script>',
                                                      out.read_text(encoding="utf-8"), re.S).group(1)))
            canvases = page.locator("[data-chart]").evaluate_all(
                "cs => cs.map(c => [c.dataset.chart, c.querySelector('canvas')?.width ?? 0])")
            assert [key for key, width in canvases if width > 0] == declared
            drawn_ids |= set(declared)
        assert errors == []
    assert drawn_ids == {chart.id for chart in charts.CHARTS}
