"""report.html in Debian's headless Chromium with the network blocked: the page a real Locust run
wrote when it was stopped by SIGTERM, a comparison built afterwards, and the page of a real server
sweep. No console error, no request beyond the file, the charts drawn, the figures those of
`report --json` and `compare --json`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import orjson
import pytest

from analysis.__main__ import main
from tests.analysis.builders import protocol_run
from tests.conftest import LOCUSTFILE, TINY_ROUNDS, run_locust
from tests.run.test_webui import ARTIFACTS, chromium_page

PARTS = ("top", "what", "verdicts", "tables", "charts", "requests")
# The built-in simulator as the sweep's server, at 20x: two draft sizes that serve and one it refuses
# (draft 0: it exits before it is healthy), under a tiny protocol load.
SWEEP = TINY_ROUNDS + """[server]
command = "{python} -m loadlib.sim --host 127.0.0.1 --port {port} --time-scale 0.05 --speculative-num-draft-tokens {draft} \
  --mem-fraction-static 0.94"
ready_timeout_s = 20
stop_grace_s = 2
[server.grid]
draft = [4, 8, 0]
"""


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A protocol run on the built-in simulator, ended by SIGTERM after its first requests."""
    tmp = tmp_path_factory.mktemp("run")
    run_dir = tmp / "r"
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2", "--rounds", "3",
               "--scenarios", "code,en_tech", "--concurrency", "2", "--sim-args", "--time-scale 0.3",
               "--metrics-interval", "0.5", "--run-dir", str(run_dir), "--loglevel", "WARNING"]
    log = open(tmp / "locust.log", "wb")
    proc = subprocess.Popen(command, cwd=tmp, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            journal = run_dir / "records.jsonl"
            if journal.exists() and journal.read_bytes().count(b"\n") >= 5:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    return run_dir


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    """A server sweep played by real headless Locust, each configuration's simulator launched by it."""
    tmp = tmp_path_factory.mktemp("sweep")
    (tmp / "sweep.toml").write_text(SWEEP, encoding="utf-8")
    result = run_locust(["--headless", "-u", "2", "--profile", str(tmp / "sweep.toml"), "--run-dir", str(tmp / "r"),
                         "--loglevel", "WARNING"], cwd=tmp, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp / "r"


@pytest.fixture(scope="module")
def browser_page():
    """One page for the module, every non-file request aborted and kept in `page.attempted`."""
    with chromium_page() as page:
        page.attempted, page.errors = [], []
        page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: page.errors.append(str(e)))

        def files_only(route):
            if route.request.url.startswith("file:"):
                route.continue_()
            else:
                page.attempted.append(route.request.url)
                route.abort()
        page.route("**/*", files_only)
        yield page


def opened(page, path, name):
    """Opens the page, waits for its script to finish, screenshots each part to test-artifacts/."""
    page.errors.clear()
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-rendered=yes]")
    ARTIFACTS.mkdir(exist_ok=True)
    for part in PARTS:
        page.locator(f"#{part}").screenshot(path=ARTIFACTS / f"report-{name}-{part}.png")
    assert page.errors == [] and page.attempted == []
    sizes = page.locator("[data-chart] canvas").evaluate_all("cs => cs.map(c => [c.width, c.height])")
    assert len(sizes) >= 5 and all(w > 0 and h > 0 for w, h in sizes)
    return page.evaluate("JSON.parse(document.getElementById('report-data').textContent)")


def cli_json(capsys, *args):
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.processes
def test_page_of_a_run_stopped_by_sigterm_renders_offline_with_report_json_figures(stopped_run, browser_page,
                                                                                    capsys):
    page_file = stopped_run / "report.html"
    assert page_file.exists()
    data = opened(browser_page, page_file, "run")
    report = cli_json(capsys, "report", str(stopped_run), "--json")
    own = data["runs"][0]
    assert {s["key"]: s["data"] for s in own["sections"]} == \
        {key: rows for key, rows in report["tables"].items() if key in {s["key"] for s in own["sections"]}}
    assert own["summary"]["single"] == report["single"]
    glance = browser_page.locator("[data-part=what] tbody tr td:first-child").all_inner_texts()
    assert "target.url" in glance and "command" in glance and len(glance) <= 30  # the rest folded
    assert "server.launch.page_size" not in glance
    shown = browser_page.locator("table[data-section=single] tbody tr").count()
    assert shown == len(report["tables"]["single"]) > 0
    (distributions,) = [chart for figure in data["charts"] for chart in figure["charts"] if chart["id"] == "ttft-distribution"]
    successful = sum(int(re.search(r"\(n (\d+)\)", s["label"]).group(1)) for s in distributions["series"])
    assert own["requests"]["total"] == successful + sum(1 for e in own["requests"]["columns"]["error"] if e)
    ttft = browser_page.locator("[data-chart=timeline-ttft] .u-over")
    ttft.scroll_into_view_if_needed()
    box = ttft.bounding_box()
    browser_page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] / 2)
    assert "request_id" in browser_page.locator("#tip").inner_text()  # the hovered point's record


@pytest.mark.processes
def test_comparison_page_shows_compare_json_verdicts_one_colour_per_run(tmp_path, browser_page, capsys):
    dirs = []
    for name, scale, ttft in (("fast", 1.0, 1.0), ("slow", 1.3, 0.7)):  # slow: decodes slower, answers sooner
        run = tmp_path / name
        run.mkdir()
        records = [{**r, "total_s": r["total_s"] * scale if r["total_s"] else None,
                    "ttft_s": r["ttft_s"] * ttft if r["ttft_s"] else None} for r in protocol_run()]
        (run / "records.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
        launch = {"speculative_num_draft_tokens": 8 if name == "fast" else 4, "page_size": 1}
        (run / "manifest.json").write_bytes(orjson.dumps({"server": {"kind": "sglang", "launch": launch}}))
        dirs.append(str(run))
    out = tmp_path / "compare.html"
    assert main(["html", *dirs, "--out", str(out)]) == 0
    capsys.readouterr()
    opened(browser_page, out, "comparison")
    compared = cli_json(capsys, "compare", *dirs, "--json")
    rows = browser_page.locator("[data-part=verdicts] tbody tr")
    assert rows.count() == len(compared["verdicts"]) > 0
    shown = rows.evaluate_all("rs => rs.map(r => [r.cells[0].innerText, Number(r.dataset.diffPct), r.dataset.verdict])")
    assert {figure: (round(diff, 9), verdict) for figure, diff, verdict in shown} == \
        {v["figure"]: (round(v["diff_pct"], 9), v["verdict"]) for v in compared["verdicts"]}
    judged = {figure: (verdict, cls) for figure, verdict, cls in rows.evaluate_all(
        "rs => rs.map(r => [r.cells[0].innerText, r.dataset.verdict, r.cells[7].classList.value])")}
    sooner, slower = judged["cn_essay TTFT s"], judged["c2-same per-stream decode t/s"]
    assert sooner[0] == "lower" and "better" in sooner[1]  # a lower TTFT is better, not coloured as worse
    assert slower[0] == "lower" and "worse" in slower[1]
    # what was run, at a glance: the keys told apart first, a key alike in both runs folded away
    glance = browser_page.locator("[data-part=what] tbody tr td:first-child").all_inner_texts()
    assert glance == ["server.kind", "server.launch.speculative_num_draft_tokens"]
    assert "server.launch.page_size" in browser_page.locator("#what details").text_content()
    colours = browser_page.locator("#top .runs .chip").evaluate_all("cs => cs.map(c => c.style.background)")
    assert len(colours) == 2 and len(set(colours)) == 2


@pytest.mark.processes
def test_page_of_a_sweep_shows_its_table_logs_and_chart_as_report_json(sweep_run, browser_page, capsys, tmp_path):
    opened(browser_page, sweep_run / "report.html", "sweep")
    report = cli_json(capsys, "report", str(sweep_run), "--json")
    assert [(r["label"], r["status"]) for r in report["sweep"]] == [("draft=4", "ok"), ("draft=8", "ok"),
                                                                    ("draft=0", "exited")]
    rows = browser_page.locator("table[data-section=sweep] tbody tr").evaluate_all(
        "rs => rs.map(r => Array.from(r.cells, c => c.innerText))")
    columns = browser_page.locator("table[data-section=sweep] th").all_inner_texts()
    shown = [(row[columns.index("configuration")], row[columns.index("status")], int(row[columns.index("n")]))
             for row in rows]
    assert shown == [(r["label"], r["status"], r["n"]) for r in report["sweep"]] and shown[0][2] > 0
    # 0.94 leaves the DFLASH draft's CUDA graph no room: the servers' logs say so, their rows too
    warned = browser_page.locator("table[data-section=sweep] tbody tr").evaluate_all(
        f"rs => rs.map(r => [r.cells[{columns.index('warnings')}].innerText, r.cells[{columns.index('warnings')}].className])")
    assert [(text.startswith("SGLang: DFLASH draft CUDA graph off: only 0.93 GB free"), "bad" in cls)
            for text, cls in warned] == [(True, True), (True, True), (False, False)]
    logs = browser_page.locator("table[data-section=sweep_logs] tbody tr").all_inner_texts()
    assert len(logs) == 1 and "draft=0" in logs[0] and "must be above 0" in logs[0]  # the simulator's own refusal
    drawn = browser_page.locator("[data-figure^=sweep] [data-chart]").evaluate_all(
        "cs => cs.map(c => [c.dataset.chart, c.querySelector('canvas')?.width ?? 0])")
    # no capacity search and no free-running cell in a rounds load: no such panel; the server's accept length
    assert [key for key, width in drawn if width > 0] == ["sweep-decode-p50", "sweep-ttft-p50", "sweep-accept-length"]
    browser_page.locator("[data-figure^=sweep]").screenshot(path=ARTIFACTS / "report-sweep-charts.png")
    assert browser_page.errors == []
    assert main(["plot", str(sweep_run), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "sweep_r.png").read_bytes().startswith(b"\x89PNG")
