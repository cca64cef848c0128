"""report.html without a browser: one self-contained file whose figures are `report --json`'s and
`compare --json`'s, no secret in it, an A/B run read as a comparison, bad input one line and exit 2."""

from __future__ import annotations

import json
import re

import orjson
import pytest

from analysis.__main__ import main
from loadlib.record_table import records_frame
from loadlib.report.html_charts import MAX_POINTS
from loadlib.report.html_data import page_data
from loadlib.report.html_page import render_page, write_page
from loadlib.run_view import RunView, read_run
from tests.analysis.builders import build_record, free_running_records, protocol_run
from tests.figures.test_sweep import closed, entry


def write_run(path, records, manifest=None):
    path.mkdir()
    (path / "records.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    (path / "manifest.json").write_text(json.dumps(manifest or {"model": "m"}), encoding="utf-8")
    return path


def embedded(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


def cli_json(capsys, *args) -> dict:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def test_page_inlines_everything_and_names_no_outside_address(tmp_path):
    run = write_run(tmp_path / "a", protocol_run() + free_running_records())
    page = write_page([read_run(run)], tmp_path / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)  # nothing fetched, even from disk
    assert "uPlot" in page and "report-data" in page
    assert not re.search(r"(src|href|url)\(?=?[\"']?https?://", page)


def test_page_tables_equal_report_json(tmp_path, capsys):
    run = write_run(tmp_path / "a", protocol_run() + free_running_records())
    data = embedded(write_page([read_run(run)], tmp_path / "r.html").read_text(encoding="utf-8"))
    report = cli_json(capsys, "report", str(run), "--json")
    own = data["runs"][0]
    assert {s["key"]: s["data"] for s in own["sections"]} == \
        {key: rows for key, rows in report["tables"].items() if key in {s["key"] for s in own["sections"]}}
    assert {key: own["summary"][key] for key in ("single", "concurrent", "ttft_percentiles", "failures")} == \
        {key: report[key] for key in ("single", "concurrent", "ttft_percentiles", "failures")}
    assert own["requests"]["total"] == len(protocol_run() + free_running_records())


def test_comparison_verdicts_equal_compare_json(tmp_path, capsys):
    slower = [{**r, "total_s": r["total_s"] * 1.3 if r["total_s"] else None} for r in protocol_run()]
    a, b = write_run(tmp_path / "a", protocol_run()), write_run(tmp_path / "b", slower)
    data = embedded(write_page([read_run(a), read_run(b)], tmp_path / "r.html").read_text(encoding="utf-8"))
    compared = cli_json(capsys, "compare", str(a), str(b), "--json")
    key = lambda v: (v["run_b"], v["figure"])  # noqa: E731
    assert sorted(data["comparison"]["verdicts"], key=key) == sorted(compared["verdicts"], key=key)
    decode = next(v for v in data["comparison"]["verdicts"] if v["figure"] == "code decode t/s")
    assert decode["diff_pct"] < -20  # 1.3 times longer requests: slower decode, with its interval


def test_two_targets_in_one_run_read_as_a_comparison_of_them():
    records = [{**r, "target": "A"} for r in protocol_run()] + \
              [{**r, "request_id": r["request_id"] + "b", "target": "B"} for r in protocol_run()]
    run = RunView(records_frame(records), {}, label="ab")
    assert [view.label for view in run.by_target(prefixed=False)] == ["A", "B"]
    data = page_data([run])
    assert data["comparison"]["verdicts"] and {v["run_b"] for v in data["comparison"]["verdicts"]} == {"B"}


def test_no_secret_reaches_the_page():
    manifest = {"model": "m", "target": {"url": "http://h", "api_key": "sk-live-123"}, "Authorization": "Bearer x1"}
    page = render_page(page_data([RunView(records_frame(protocol_run()), manifest, label="a")]))
    assert "sk-live-123" not in page and "Bearer x1" not in page and "http://h" in page


def test_a_long_run_keeps_every_failure_and_its_exact_distribution_when_thinned():
    records = [build_record("closed", sent_at=1_700_000_000.0 + i * 0.01, ttft_s=0.1 + (i % 97) / 1000,
                            concurrency=4, case="closed", error="http_500" if i % 1000 == 0 else None,
                            comp=None if i % 1000 == 0 else 101) for i in range(20_000)]
    data = page_data([RunView(records_frame(records), {}, label="a")])
    requests = data["runs"][0]["requests"]
    shown = requests["columns"]
    assert requests["shown"] <= MAX_POINTS < requests["total"] == 20_000
    assert sum(e is not None for e in shown["error"]) == 20
    charts = {chart["id"]: chart for figure in data["charts"] for chart in figure["charts"]}
    (distribution,) = charts["ttft-distribution"]["series"]
    ttft = distribution["y"]
    assert distribution["label"] == "closed (n 19980)"  # every successful request
    assert ttft[0] == pytest.approx(0.1) and ttft[100] == pytest.approx(0.196) and ttft[50] == pytest.approx(0.148)
    points = [s for s in charts["timeline-ttft"]["series"] if "rows" in s]  # a point per kept request, naming its row
    assert sum(len(s["x"]) for s in points) == requests["shown"] - 20
    assert charts["timeline-ttft"]["sampled"] == [{"run": 0, "shown": requests["shown"], "total": 20_000}]


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "missing", "no such run directory"),
    (lambda tmp: write_run(tmp / "empty", []), "no measured request"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, make, message):
    assert main(["html", str(make(tmp_path)), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "r.html").exists()


def test_a_sweep_page_has_its_table_and_the_logs_of_those_that_did_not_serve_as_report_json(tmp_path, capsys):
    manifest = {"sweep": [entry("draft=4", draft=4), entry("draft=8", draft=8),
                          {**entry("draft=0", "exited", draft=0), "log_tail": ["loading", "error: draft must be above 0"]}]}
    run = write_run(tmp_path / "s", closed("draft=4", 0.5, 100, 25) + closed("draft=8", 0.25, 200, 20), manifest)
    data = embedded(write_page([read_run(run)], tmp_path / "r.html").read_text(encoding="utf-8"))
    report = cli_json(capsys, "report", str(run), "--json")
    (sweep,) = data["sweeps"]
    shown = {s["key"]: s for s in sweep["sections"]}
    assert {key: s["data"] for key, s in shown.items()} == {key: report["tables"][key] for key in ("sweep", "sweep_logs")}
    assert [row["label"] for row in shown["sweep"]["data"]] == [row["label"] for row in report["sweep"]]
    assert shown["sweep_logs"]["view"] == [["draft=0", "exited", "loading | error: draft must be above 0"]]
    assert data["labels"] == ["draft=4", "draft=8"]  # each configuration that served is a run of the page
    assert data["comparison"]["verdicts"] == report["verdicts"]  # B/A against the first that served


def test_each_target_of_an_ab_run_names_only_its_own_server():
    records = [{**r, "target": "A"} for r in protocol_run()] + \
              [{**r, "request_id": r["request_id"] + "b", "target": "B"} for r in protocol_run()]
    manifest = {"model": "m", "targets": [{"label": "A", "url": "http://a:30000"}, {"label": "B", "url": "http://b:30000"}],
                "profile": {"targets": [{"label": "A", "host": "http://a:30000"}, {"label": "B", "host": "http://b:30000"}]}}
    data = page_data([RunView(records_frame(records), manifest, label="ab")])
    for run, own, other in zip(data["runs"], ("http://a:30000", "http://b:30000"), ("http://b:30000", "http://a:30000")):
        assert own in run["heading"] and other not in run["heading"]
        assert dict(run["what"])["target.url"] == own and other not in str(run["what"])
    assert {v["run_b"] for v in data["comparison"]["verdicts"]} == {"B"}
