"""Headless progress: one log line when each cell starts and one when it ends, with its requests,
failures and headline figure, the summary's own (real headless runs on the simulator, and the
end line's wording on records whose figures are known)."""

from __future__ import annotations

import re

import pytest

from loadlib.figures import free_running, protocol_tables
from loadlib.record_table import records_frame
from loadlib.records import read_records
from loadlib.report.text import num
from loadlib.run.progress import label, outcome
from loadlib.scenarios import Cell
from tests.analysis.builders import build_record, free_running_records
from tests.conftest import FAST_SIM, TINY_ROUNDS, TINY_SEARCH, run_locust_together

LADDER = """
[request]
max_tokens = 64
[load]
mode = "ladder"
levels = [1, 2]
duration_s = 1.5
warmup_s = 0.5
[scenarios.distinct-issues]
"""

SWEEP = TINY_ROUNDS + """
[server]
command = "{python} -m loadlib.sim --host 127.0.0.1 --port {port} --time-scale 0.05 --max-running-requests {mrr}"
ready_timeout_s = 20
[server.grid]
mrr = [1, 2]
"""

LINE = re.compile(r"INFO/uni-bench: cell (?P<cell>.+?) (?P<phase>starts|done): (?P<said>.*)$")


def test_the_end_line_counts_requests_and_failures_and_gives_the_cells_figure():
    single = [build_record(round=0, ttft_s=0.1, total_s=2.1, comp=401), build_record(round=1, ttft_s=0.2,
                                                                                     total_s=1.8, comp=401)]
    assert outcome(single) == "2 requests, 0 failed; decode 225.0 t/s"  # (200 + 250) / 2
    pair = [build_record("c2-same", slot=slot, ttft_s=0.1, total_s=2.1, comp=401) for slot in range(2)]
    assert outcome(pair) == "2 requests, 0 failed; aggregate 400.0 t/s"  # 800 / 2.0
    steady = free_running.steady_state_table(records_frame(free_running_records())).iloc[0]
    assert outcome(free_running_records()) == \
        f"7 requests, 1 failed; {steady['requests_per_s']:.2f} req/s, TTFT p50 0.500 s"


def test_a_cell_where_nothing_succeeded_has_no_figure_and_a_warmup_none_measured():
    assert outcome([build_record(round=r, comp=None, error="no_usage") for r in range(3)]) == "3 requests, 3 failed"
    failed_rounds = [build_record("c2-same", round=r, slot=s, comp=None, error="http_500")
                     for r in range(2) for s in range(2)]
    assert outcome(failed_rounds) == "4 requests, 4 failed"
    assert outcome([build_record("warmup", case="closed", measured=False)]) == "1 request, 0 failed"


def test_a_single_stream_cell_is_named_with_its_prompt_and_an_ab_runs_with_its_server():
    from loadlib.scenarios.prompts import ProtocolScenario

    cells = ProtocolScenario(["en_tech"], {}, "any").round_cells([2], 3)
    assert label(cells[0]) == "single (en_tech)"
    assert label(Cell("c2-same", "same", cells[1].scenario, 2, 3, target="B")) == "c2-same on B"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The protocol's rounds (two prompts, then 2 streams), a ladder with its warm-up, a capacity
    search and a sweep of two configurations, at INFO."""
    work = tmp_path_factory.mktemp("progress")
    for name, text in (("ladder", LADDER), ("search", TINY_SEARCH), ("sweep", SWEEP)):
        (work / f"{name}.toml").write_text(text)
    results = run_locust_together({
        "rounds": (["--headless", "-u", "2", "--rounds", "2", "--scenarios", "code,cn_chat", "--concurrency", "2",
                    "--run-dir", str(work / "rounds"), "--sim-args", FAST_SIM], work),
        **{name: (["--headless", "-u", "2", "--profile", str(work / f"{name}.toml"), "--run-dir", str(work / name),
                   "--sim-args", FAST_SIM], work) for name in ("ladder", "search", "sweep")},
    })
    for name, result in results.items():
        assert result.returncode == 0, f"{name}: {result.stderr[-3000:]}"
    return {name: (results[name].stderr, work / name) for name in results}


def progress_lines(stderr: str) -> list[tuple[str, str, str]]:
    return [(m["cell"], m["phase"], m["said"]) for m in map(LINE.search, stderr.splitlines()) if m]


@pytest.mark.processes
def test_each_rounds_cell_starts_and_ends_in_one_line_with_the_summarys_figure(runs):
    stderr, run_dir = runs["rounds"]
    df = records_frame(read_records(run_dir))
    single = protocol_tables.single_stream_table(df)
    aggregate = protocol_tables.concurrency_table(df).set_index("cell")["aggregate_tps"]
    assert progress_lines(stderr) == [
        ("single (code)", "starts", "2 rounds of 1 stream"),
        ("single (code)", "done", f"2 requests, 0 failed; decode {num(single.loc['code', 'decode_tps'])} t/s"),
        ("single (cn_chat)", "starts", "2 rounds of 1 stream"),
        ("single (cn_chat)", "done", f"2 requests, 0 failed; decode {num(single.loc['cn_chat', 'decode_tps'])} t/s"),
        ("c2-same", "starts", "2 rounds of 2 streams"),
        ("c2-same", "done", f"4 requests, 0 failed; aggregate {num(aggregate['c2-same'])} t/s"),
        ("c2-different", "starts", "2 rounds of 2 streams"),
        ("c2-different", "done", f"4 requests, 0 failed; aggregate {num(aggregate['c2-different'])} t/s"),
    ]
    assert num(single.loc["code", "decode_tps"]) in (run_dir / "summary.txt").read_text(encoding="utf-8")


@pytest.mark.processes
def test_each_free_running_cell_ends_with_its_rate_and_ttft(runs):
    stderr, run_dir = runs["ladder"]
    lines = progress_lines(stderr)
    assert [(cell, phase) for cell, phase, _said in lines] == [
        ("warmup", "starts"), ("warmup", "done"), ("ladder-u1", "starts"), ("ladder-u1", "done"),
        ("ladder-u2", "starts"), ("ladder-u2", "done")]
    assert lines[0][2] == "1 user for 0.5 s (not measured)" and lines[4][2] == "2 users for 1.5 s"
    assert re.fullmatch(r"\d+ requests, 0 failed", lines[1][2])  # the warm-up: no figure
    assert re.fullmatch(r"\d+ requests, 0 failed; \d+\.\d\d req/s, TTFT p50 \d\.\d\d\d s", lines[3][2])
    df = records_frame(read_records(run_dir))  # the last cell's requests all ended before its line
    steady = free_running.steady_state_table(df).set_index("cell").loc["ladder-u2"]
    p50 = free_running.steady_percentiles(df).query("cell == 'ladder-u2' and figure == 'ttft_s'")["p50"].iloc[0]
    n = int((df["cell"] == "ladder-u2").sum())
    assert lines[5][2] == f"{n} requests, 0 failed; {num(steady['requests_per_s'], 2)} req/s, TTFT p50 {num(p50, 3)} s"


@pytest.mark.processes
def test_a_capacity_search_says_which_level_runs(runs):
    stderr, _run_dir = runs["search"]
    levels = re.findall(r"INFO/uni-bench: search: (level \d+, \d+ users?)$", stderr, re.M)
    assert levels == ["level 1, 1 user", "level 2, 2 users"]
    ends = [(cell, said) for cell, phase, said in progress_lines(stderr) if phase == "done"]
    assert [cell for cell, _said in ends] == ["search-u1", "search-u2"]
    assert all(re.fullmatch(r"\d+ requests, 0 failed; \d+\.\d\d req/s, TTFT p50 \d\.\d\d\d s", said)
               for _cell, said in ends), ends


@pytest.mark.processes
def test_a_sweep_says_which_configuration_runs_and_names_it_in_each_cells_line(runs):
    stderr, _run_dir = runs["sweep"]
    configurations = re.findall(r"INFO/uni-bench: sweep: (configuration .*)$", stderr, re.M)
    assert configurations == ["configuration 1 of 2, mrr=1", "configuration 2 of 2, mrr=2"]
    cells = [cell for cell, phase, _said in progress_lines(stderr) if phase == "done"]
    assert cells == [f"{name} on mrr={mrr}" for mrr in (1, 2) for name in ("single (code)", "c2-same", "c2-different")]
