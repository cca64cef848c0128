"""The capacity search over agent sessions through real headless Locust against the time-scaled
simulator with two running requests at most: sessions with no think time and long answers keep
one request each in flight, so a third session's turns queue behind a running answer, and an SLO
on TTFT that queueing breaks puts the capacity at 2 sessions. Each level is a sessions cell of N
lanes on texts of its own; the result reaches the summary and report --json. The profile's refusals
are the fast half."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadlib.figures.free_running import INTENDED_SEND
from loadlib.profiles import ProfileError, load_profile
from loadlib.scenarios.cc_traces import write_jsonl
from loadlib.scenarios.cc_traces_gen import SessionShape, generate
from tests.conftest import FAST_SIM
from tests.profile_runs import run_profiles_together

# short prompts, answers of 700-800 tokens (about 0.2 s each on the simulator at this time scale), no sub-agents
BUSY = SessionShape(turns=(3, 4), tool_tokens=(100, 200), system_tokens=(50, 100), first_prompt_tokens=(50, 100),
                    tool_result_tokens=(50, 100), user_message_tokens=(30, 60), tool_call_out=(700, 800),
                    answer_out=(700, 800), subagent_share=0.0)
# TTFT p90 at 2 sessions: 0.03-0.06 s; at 3 (a turn queued behind a running answer): about 0.2 s
SLO_S = 0.14
SEARCH = """
[load]
mode = "search"
variable = "sessions"
duration_s = 2
[scenarios.agent]
kind = "agent-trace"
path = "busy.jsonl"
think_time_scale = 0
[slo]
ttft_s = {slo}
ttft_p = 90
""".format(slo=SLO_S)


@pytest.fixture(scope="module")
def search_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("search-sessions")
    write_jsonl(generate(6, seed=1, scope="local", shape=BUSY), work / "busy.jsonl")
    done = run_profiles_together({"sessions": (work, SEARCH, 8)}, sim=f"{FAST_SIM} --max-running-requests 2")
    result, records = done["sessions"]
    out = subprocess.run([sys.executable, "-m", "analysis", "report", str(work / "run"), "--json"],
                         capture_output=True, text=True, check=True)
    return result, records, json.loads(out.stdout)


@pytest.mark.processes
def test_a_sessions_search_finds_the_two_sessions_the_server_runs_at_once(search_run):
    result, records, report = search_run
    search = report["search"]
    assert search["variable"] == "sessions" and search["best"] == 2 and search["bracket"] == [2, 3]
    levels = {level["value"]: level for level in search["levels"]}
    assert list(levels) == [1, 2, 4, 3]  # doubling until the SLO broke, then the bisection
    assert levels[2]["verdict"] == "held" and levels[3]["verdict"] == "broke"
    assert levels[2]["ttft_s"] <= SLO_S < levels[3]["ttft_s"]
    assert {level["ttft_from"] for level in levels.values()} == {INTENDED_SEND}  # a turn's TTFT from when it was due
    measured = records[records["measured"]]
    cells = {cell: value for value, level in levels.items() for cell in level["cells"]}
    assert set(measured["cell"]) == set(cells) and measured["conversation"].notna().all()
    for level in levels.values():  # judged on its own turns, played by its N lanes
        assert level["n"] == measured["cell"].isin(level["cells"]).sum()
    assert measured.groupby("cell")["slot"].nunique().to_dict() == cells
    for _session, turns in measured.groupby(["cell", "slot", "conversation", "copy"]):  # none lost, in order
        assert sorted(turns["turn"]) == list(range(len(turns)))
    # each level its own texts: the first turn of a conversation finds nothing of an earlier level's in the cache
    firsts = measured.sort_values("sent_at").groupby(["cell", "conversation"]).head(1)
    assert len(firsts) > len(levels) and (firsts["ideal_cached_tokens"] == 0).all()
    assert (firsts["cached_tokens"] < 64).all()
    by_cell = {row["cell"]: row for row in report["sessions"]}
    assert set(by_cell) == set(cells) and all(by_cell[cell]["lanes_offered"] == n for cell, n in cells.items())
    table = {row["value"]: row for row in report["tables"]["search"]}
    line = next(line for line in result.stdout.splitlines() if line.startswith("Capacity search"))
    assert line.startswith("Capacity search over agent sessions: holds at 2 sessions, "
                           f"{table[2]['delivered_rps']:.2f} req/s delivered (SLO met in ")
    assert f"breaks at 3 sessions, {table[3]['delivered_rps']:.2f} req/s delivered" in line


@pytest.mark.parametrize("more, needle", [
    ('[[targets]]\nlabel = "A"\n[[targets]]\nlabel = "B"\n', "a search over sessions measures one server"),
    ("", "load.warmup_s: not for variable = \"sessions\""),
], ids=["a/b", "warm-up"])
def test_a_sessions_search_it_cannot_play_is_one_line(tmp_path, more, needle):
    write_jsonl(generate(1), tmp_path / "t.jsonl")
    warmup = "warmup_s = 1\n" if not more else ""
    (tmp_path / "p.toml").write_text(f'[load]\nmode = "search"\nvariable = "sessions"\nduration_s = 2\n{warmup}'
                                     '[scenarios.a]\nkind = "agent-trace"\npath = "t.jsonl"\n[slo]\nttft_s = 1\n'
                                     f'ttft_p = 90\n{more}', encoding="utf-8")
    with pytest.raises(ProfileError) as error:
        load_profile(tmp_path / "p.toml")
    assert needle in str(error.value) and "\n" not in str(error.value)
