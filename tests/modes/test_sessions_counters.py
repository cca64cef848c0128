"""A sessions cell's achieved prefix hit where no answer carried `usage.prompt_tokens_details.
cached_tokens`: taken from the server's prefix-cache counters over the cell, said so, with no
interval over sessions. Its known answer: the simulator without its cache report
(`--no-enable-cache-report`) serves the same sessions as with it, so on an unbounded cache the
counters must give what the answers' usage gave, and the ideal, within a hash block per turn (behind
a router too, the instances' counters added up); on a small cache well below the ideal. Which source
a cell's figure takes, and how pages are added up, are the fast half."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from importlib.util import find_spec

import numpy as np
import pandas as pd
import pytest

from loadlib.figures import sessions as figures
from loadlib.record_table import records_frame
from loadlib.report.contents import run_sections, session_cells
from loadlib.run_view import RunView, read_run
from loadlib.scenarios.cc_traces import write_jsonl
from loadlib.scenarios.cc_traces_gen import generate
from loadlib.sim.process import start_simulator
from loadlib.truth.server_figures import CellSpan, PrefixCounters, prefix_counters
from tests.conftest import free_port, sglang_router
from tests.modes.test_sessions import SHAPE, profile
from tests.profile_runs import run_profiles_together

UNBOUNDED = "--time-scale 0.02 --radix-cache-tokens 100000000"
SMALL = "--time-scale 0.02 --radix-cache-tokens 12000"
NO_USAGE = " --no-enable-cache-report"
BLOCK = 64
ROUTER = find_spec("sglang_router") is not None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three local-scope sessions at once, on an unbounded cache with and without the cache report,
    on a small one without it, and behind the real sglang-router (`manual`: each session on one
    instance) over two unbounded instances without it, whose pages are scraped as workers': name ->
    (summary printed, the run read back). No sub-agents: no two turns race for one prefix, so an
    unbounded cache serves each turn its ideal."""
    work = tmp_path_factory.mktemp("counters")
    write_jsonl(generate(3, seed=5, scope="local", shape=replace(SHAPE, subagent_share=0.0)), work / "local.jsonl")
    text = profile(str(work / "local.jsonl"))
    plays = {name: ("--sim-args", sim) for name, sim in (
        ("usage", UNBOUNDED), ("counters", UNBOUNDED + NO_USAGE), ("counters, small cache", SMALL + NO_USAGE))}
    with ExitStack() as stack:
        if ROUTER:
            sim = stack.enter_context(start_simulator(["--instances", "2", *UNBOUNDED.split(), NO_USAGE.strip()]))
            router = stack.enter_context(sglang_router(sim.urls, "--policy", "manual",
                                                       "--prometheus-port", str(free_port())))
            plays["counters, router"] = ("--host", router, "--worker-metrics", *sim.urls)
        done = run_profiles_together({name: (work / str(i), text, 1, *args)
                                      for i, (name, args) in enumerate(plays.items())}, timeout=120)
    return {name: (done[name][0].stdout, read_run(work / str(i) / "run")) for i, name in enumerate(plays)}


def answered_prompt_tokens(run: RunView) -> float:
    return run.records.loc[run.records["ok"], "prompt_tokens"].sum()


@pytest.mark.processes
def test_without_usage_the_counters_give_the_usage_figure_and_the_ideal_within_a_block_per_turn(runs):
    with_usage, without = runs["usage"][1], runs["counters"][1]
    assert without.records["cached_tokens"].isna().all() and with_usage.records["cached_tokens"].notna().all()
    usage, counted = session_cells(with_usage).iloc[0], session_cells(without).iloc[0]
    assert usage["achieved_via"] == figures.USAGE and pd.notna(usage["achieved_prefix_hit_ci_low"])
    assert counted["achieved_via"] == figures.COUNTERS
    assert np.isnan(counted["achieved_prefix_hit_ci_low"]) and np.isnan(counted["turns_missing_ideal"])
    a_block_per_turn = BLOCK * without.records["ok"].sum() / answered_prompt_tokens(without)
    assert counted["achieved_prefix_hit"] == pytest.approx(usage["achieved_prefix_hit"], abs=a_block_per_turn)
    assert counted["achieved_prefix_hit"] == pytest.approx(counted["ideal_prefix_hit"], abs=a_block_per_turn)
    assert counted["ideal_prefix_hit"] > 0.5  # a trace whose cache matters
    # the counters over the cell counted every prompt token of its turns, and nothing else
    [(_hit, queried)] = figures.counted_hits(prefix_counters(without.scrapes)).values()
    assert queried == answered_prompt_tokens(without)
    print(f"achieved: usage {usage['achieved_prefix_hit']:.4f} (ideal {usage['ideal_prefix_hit']:.4f}), "
          f"counters {counted['achieved_prefix_hit']:.4f} (ideal {counted['ideal_prefix_hit']:.4f}); "
          f"a block per turn {a_block_per_turn:.4f}")


def sessions_row(summary: str) -> str:
    """The sessions table's row of the cell, in the summary printed."""
    lines = summary[summary.index("Agent sessions per cell"):].splitlines()
    return next(line for line in lines if line.strip().startswith("sessions-u3"))


@pytest.mark.processes
def test_the_summary_report_html_and_json_say_where_the_hit_came_from(runs):
    summary, without = runs["counters"]
    line = sessions_row(summary)
    assert "server counters" in line and "none: cell-wide counters" in line
    assert "server counters" in (without.path / "report.html").read_text(encoding="utf-8")
    _sections, found = run_sections(without, report=True)
    [row] = found["sessions"]
    assert row["achieved_via"] == "server counters" and 0 < row["achieved_prefix_hit"] <= 1
    assert row["achieved_prefix_hit_ci_low"] is None and row["achieved_prefix_hit_ci_high"] is None
    usage_line = sessions_row(runs["usage"][0])
    assert " usage " in usage_line and "server counters" not in usage_line


@pytest.mark.processes
def test_behind_a_router_the_instances_counters_add_up_to_the_cell(runs):
    """The router's page counts no prefix cache: each instance's counts its own sessions' turns."""
    if not ROUTER:
        pytest.skip("sglang-router is not installed (pip install -e '.[router]')")
    _summary, behind = runs["counters, router"]
    by_source = {c.source: c.queried_tokens for c in prefix_counters(behind.scrapes)}
    assert set(by_source) <= {"worker 1", "worker 2"}  # the instances a session landed on
    assert sum(by_source.values()) == answered_prompt_tokens(behind)
    row = session_cells(behind).iloc[0]
    a_block_per_turn = BLOCK * behind.records["ok"].sum() / answered_prompt_tokens(behind)
    assert row["achieved_via"] == figures.COUNTERS
    assert row["achieved_prefix_hit"] == pytest.approx(row["ideal_prefix_hit"], abs=a_block_per_turn)
    print(f"behind the router: counters {row['achieved_prefix_hit']:.4f} (ideal {row['ideal_prefix_hit']:.4f}), "
          f"prompt tokens by instance {by_source}")


@pytest.mark.processes
def test_on_a_small_cache_the_counters_fall_well_below_the_ideal(runs):
    row = session_cells(runs["counters, small cache"][1]).iloc[0]
    assert row["achieved_via"] == figures.COUNTERS
    assert row["achieved_prefix_hit"] < row["ideal_prefix_hit"] - 0.1
    print(f"small cache: counters {row['achieved_prefix_hit']:.4f} (ideal {row['ideal_prefix_hit']:.4f})")


# --- the fast half -------------------------------------------------------------------------------


def turn(conversation: str, sent: float, prompt: int, cached: int | None, ideal: int) -> dict:
    return {"request_id": f"{conversation}{sent}", "scenario": "agent", "cell": "sessions-u2", "case": "sessions",
            "kind": "agent-trace", "concurrency": 2, "round": 0, "slot": 0, "target": "", "conversation": conversation,
            "copy": 0, "agent": "main", "turn": 0, "ideal_cached_tokens": ideal, "sent_at": sent, "ttft_s": 0.1,
            "total_s": 1.0, "completion_tokens": 10, "prompt_tokens": prompt, "cached_tokens": cached,
            "error": None, "worker": 0, "user": 0}


def counters(source: str, cell: str, hit: float, queried: float, index: int = 0) -> PrefixCounters:
    return PrefixCounters(source, CellSpan(index, cell, "sessions", 0.0, 10.0), hit, queried)


NO_USAGE_TURNS = [turn("a", 0.0, 1000, None, 900), turn("b", 0.5, 3000, None, 2100)]


@pytest.mark.parametrize("records, counted, via, achieved, ideal", [
    (NO_USAGE_TURNS, {"sessions-u2": (2400.0, 4000.0)}, figures.COUNTERS, 0.6, 3000 / 4000),
    (NO_USAGE_TURNS, {}, None, None, 3000 / 4000),
    # one turn with usage: the usage figure over it, never mixed with the counters
    ([turn("a", 0.0, 1000, 800, 900), turn("b", 0.5, 3000, None, 2100)], {"sessions-u2": (2400.0, 4000.0)},
     figures.USAGE, 0.8, 0.9),
], ids=["counters", "neither", "usage"])
def test_a_cell_takes_usage_where_any_turn_has_it_else_the_counters_else_none(records, counted, via, achieved, ideal):
    row = figures.cell_table(records_frame(records), counted=counted).iloc[0]
    assert row["achieved_via"] == via and row["ideal_prefix_hit"] == pytest.approx(ideal)
    assert (np.isnan(row["achieved_prefix_hit"]) if achieved is None
            else row["achieved_prefix_hit"] == pytest.approx(achieved))
    assert pd.isna(row["achieved_prefix_hit_ci_low"])  # one session with usage; none by counters


def test_the_targets_page_speaks_for_the_server_else_its_workers_added_up_over_every_span():
    found = figures.counted_hits([
        counters("target", "sessions-u2", 30.0, 100.0), counters("worker 1", "sessions-u2", 10.0, 50.0),
        counters("worker 1", "sessions-u4", 10.0, 50.0), counters("worker 2", "sessions-u4", 40.0, 50.0),
        counters("worker 1", "sessions-u4", 5.0, 10.0, index=1)])
    assert found == {"sessions-u2": (30.0, 100.0), "sessions-u4": (55.0, 110.0)}


def test_the_summary_says_in_words_where_the_hit_came_from_or_that_none_did():
    from loadlib.report.sections import sessions_section
    from loadlib.figures.goodput import DEFAULT_SLO

    table = pd.concat([figures.cell_table(records_frame(NO_USAGE_TURNS), counted=counted)
                       for counted in ({"sessions-u2": (2400.0, 4000.0)}, {})], ignore_index=True)
    view = sessions_section(table, DEFAULT_SLO).view
    assert view["achieved hit"].tolist() == ["60.0%", "not reported"]
    assert view["via"].tolist() == ["server counters",
                                    "neither usage cached_tokens nor the server's prefix-cache counters"]
    assert view["95% CI"].tolist() == ["none: cell-wide counters", "-"]
