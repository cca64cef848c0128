"""A sweep's text sections and charts: one row per configuration as people read it, the columns no
configuration has left out, the configurations that did not serve with their last log lines."""

from __future__ import annotations

from loadlib.outputs.png import figure_of
from loadlib.outputs.text import render_document
from loadlib.record_table import records_frame
from loadlib.report.charts import ChartRun, drawn_charts
from loadlib.report.contents import sweep_of
from loadlib.report.document import Document
from loadlib.run_view import RunView
from tests.figures.test_sweep import closed, entry
from tests.readme_samples import headings, missing_lines, sample_after

MANIFEST = {"sweep": [entry("draft=4,mrr=2", draft=4, mrr=2), entry("draft=8,mrr=2", draft=8, mrr=2),
                      {**entry("draft=16,mrr=2", "exited"), "log_tail": ["loading", "ValueError: block 16 > 8"]}]}


def records():
    return records_frame(closed("draft=4,mrr=2", 0.5, 100, 25) + closed("draft=8,mrr=2", 0.25, 200, 20))


def test_the_summary_shows_one_row_per_configuration_and_why_one_did_not_serve():
    sections, _json = sweep_of(RunView(records(), MANIFEST))
    out = render_document(Document("uni-bench summary", sections))
    table = out.split("Server sweep")[1].split("\n\n")[0].splitlines()
    assert table[1].split() == ["configuration", "status", "n", "failed", "decode", "p50", "t/s", "all-streams",
                                "t/s", "TTFT", "p50", "s", "TTFT", "p90", "s", "SLO", "met", "tok/chunk"]
    assert table[2].split()[:5] == ["draft=4,mrr=2", "ok", "20", "0", "100.0"]
    assert table[4].split()[:4] == ["draft=16,mrr=2", "exited", "0", "0"]
    assert missing_lines(headings(sample_after("--profile profiles/sweep-sim.toml")), out) == []  # the README's
    assert "draft=16,mrr=2   exited   loading | ValueError: block 16 > 8" in out
    assert "capacity" not in table[1] and "accept len" not in table[1]  # no search, no scrapes


def test_the_chart_has_a_panel_per_figure_a_bar_per_configuration_and_draws_to_a_file(tmp_path):
    panels = [chart for chart in drawn_charts([], [ChartRun(RunView(records(), MANIFEST, label="s"))])
              if chart["figure"] == "sweep_{run}"]
    assert [chart["id"] for chart in panels] == ["sweep-steady-decode", "sweep-decode-p50", "sweep-ttft-p50",
                                                 "sweep-tok-per-chunk"]  # no search, no scrapes
    assert panels[0]["title"].startswith("Server sweep: all-streams t/s (decode tokens of every stream per second")
    decode = panels[1]
    assert decode["y"]["title"] == "decode, t/s per stream"
    (bars,) = decode["series"]
    assert decode["x"]["ticks"] == ["draft=4,mrr=2", "draft=8,mrr=2", "draft=16,mrr=2"]
    assert bars["y"][:2] == [100.0, 200.0] and bars["y"][2] is None and bars["text"] == [None, None, "exited"]
    assert bars["low"][0] <= 100 <= bars["high"][0]
    figure_of(panels, "s").savefig(tmp_path / "sweep.png", dpi=60)
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    assert drawn_charts([], [ChartRun(RunView(records(), {}, label="s"))]) == []  # not a sweep: no sweep chart


def test_a_configurations_known_warnings_are_in_its_row_and_in_the_json():
    flagged = "SGLang: DFLASH draft CUDA graph off: only 0.93 GB free (lower --mem-fraction-static)"
    manifest = {"sweep": [{**MANIFEST["sweep"][0], "warnings": [flagged]}, *MANIFEST["sweep"][1:]]}
    sections, found = sweep_of(RunView(records(), manifest))
    out = render_document(Document("uni-bench summary", sections))
    table = out.split("Server sweep")[1].split("\n\n")[0].splitlines()
    assert table[1].split()[-1] == "warnings" and table[2].endswith(flagged) and table[3].endswith(" -")
    assert [row["warnings"] for row in found["sweep"]] == [[flagged], [], []]
