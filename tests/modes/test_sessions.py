"""The sessions mode: coding-agent sessions replayed by real headless Locust against the
simulator, on one process and two; what its records carry, its timing, and how close the cache
came to the ideal (its known answers: an unbounded cache gives the ideal within a block per turn, a
small one less, its host tier more than without, sub-agents of one spawn overlap, and
think_time_scale plays a 10-minute session in seconds). The plan, the lane width, the headers and
the figures on records made by hand are the fast half."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadlib.figures import sessions as figures
from loadlib.figures.goodput import Slo
from loadlib.modes.sessions import SessionPlan, recorded_span
from loadlib.profiles import ProfileError, load_profile
from loadlib.record_table import records_frame
from loadlib.scenarios.agent_trace import SESSION_HEADERS, lane_width, session_headers
from loadlib.scenarios.cc_traces import read_traces, write_jsonl
from loadlib.scenarios.cc_traces_gen import SessionShape, generate
from tests.profile_runs import run_profiles_together

SHAPE = SessionShape(turns=(5, 8), tool_call_out=(8, 24), answer_out=(16, 48), subagent_share=0.3,
                     sub_turns=(2, 3), tool_result_tokens=(100, 1500))
SHORT = SessionShape(turns=(2, 3), tool_call_out=(8, 16), answer_out=(8, 16), subagent_share=0.0,
                     tool_result_tokens=(100, 500), tool_tokens=(1000, 2000), system_tokens=(500, 1000))
UNBOUNDED = "--time-scale 0.02 --radix-cache-tokens 100000000"
SMALL = "--time-scale 0.02 --radix-cache-tokens 12000"
PROFILE = """
[load]
mode = "sessions"
sessions = {sessions}
{more}
[scenarios.agent]
kind = "agent-trace"
path = "{path}"
think_time_scale = {scale}
idle_cap_s = {cap}
"""
AB = f"""
[[targets]]
label = "A"
sim_args = "{UNBOUNDED}"
[[targets]]
label = "B"
sim_args = "{SMALL}"
"""


def profile(path: str, sessions: int = 3, scale: float = 0.0, cap: float = 60.0, more: str = "") -> str:
    return PROFILE.format(path=path, sessions=sessions, scale=scale, cap=cap, more=more)


def ten_minutes(tmp_path) -> str:
    """One conversation of 10 minutes: a turn 120 s (its think_time) after the last one ended, two
    sub-agents spawned together after the second, two requests each, 1 s apart."""
    def request(t: float, ids: list[int], think: float | None = None) -> dict:
        return {"t": t, "type": "s", "in": 64 * len(ids) + 20, "out": 8, "hash_ids": ids, "api_time": 1.0,
                **({"think_time": think} if think is not None else {})}
    sub = [request(0.0, [100, 101]), request(2.0, [100, 101, 102])]
    main = [request(0.0, [1, 2]), request(121.0, [1, 2, 3], 120.0),
            {"t": 122.0, "type": "subagent", "agent_id": "a", "requests": sub},
            {"t": 122.0, "type": "subagent", "agent_id": "b", "requests": [dict(r) for r in sub]}]
    main += [request(245.0 + 121.0 * i, [1, 2, 3, 4 + i], 120.0) for i in range(4)]
    (tmp_path / "ten.jsonl").write_text(
        '{"id": "ten", "block_size": 64, "hash_id_scope": "local", "requests": ' +
        __import__("json").dumps(main) + "}\n", encoding="utf-8")
    return str(tmp_path / "ten.jsonl")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of the module, together: a local-scope trace on an unbounded cache (one process
    and two), on a small one with and without its host tier, both in one A/B run, and the 10-minute
    session."""
    work = tmp_path_factory.mktemp("sessions")
    write_jsonl(generate(3, seed=5, scope="local", shape=SHAPE), work / "local.jsonl")
    trace = str(work / "local.jsonl")
    ten = ten_minutes(work)
    write_jsonl(generate(2, seed=3, scope="local", shape=SHORT), work / "short.jsonl")
    short = str(work / "short.jsonl")
    hicache = f"{SMALL} --enable-hierarchical-cache --hicache-ratio 4"
    return run_profiles_together({
        "one process": (work / "one", profile(trace), 1, "--sim-args", UNBOUNDED),
        "two processes": (work / "two", profile(trace), 1, "--sim-args", UNBOUNDED, "--processes", "2"),
        "small": (work / "small", profile(trace), 1, "--sim-args", SMALL),
        "hicache": (work / "hicache", profile(trace), 1, "--sim-args", hicache),
        "ten minutes": (work / "ten", profile(ten, sessions=1, scale=0.005, cap=600.0), 1, "--sim-args", UNBOUNDED),
        "a/b": (work / "ab", profile(trace) + AB, 1),
        "timed": (work / "timed", profile(short, sessions=2, more="duration_s = 3.0"), 1, "--sim-args", UNBOUNDED),
        "timed, cache busted": (work / "busted", profile(short, sessions=2, more="duration_s = 3.0")
                                + "bust_cache = true\n", 1, "--sim-args", UNBOUNDED),
    }, timeout=180)


def measured(records: pd.DataFrame) -> pd.DataFrame:
    return records[records["measured"]]


def frame(records: pd.DataFrame) -> pd.DataFrame:
    """The run's records as the report reads them."""
    return records_frame(records.astype(object).where(records.notna(), None).to_dict("records"))


@pytest.mark.processes
@pytest.mark.parametrize("name", ["one process", "two processes"])
def test_every_turn_is_sent_once_labelled_and_hits_the_ideal_within_a_block(runs, name):
    result, records = runs[name]
    turns = measured(records)
    expected = sum(len(c.turns()) for c in generate(3, seed=5, scope="local", shape=SHAPE))
    assert len(turns) == expected and turns["error"].isna().all()
    assert set(turns["cell"]) == {"sessions-u3"} and set(turns["copy"]) == {0}
    assert turns.groupby(["conversation", "agent", "turn"]).size().max() == 1
    assert "main" in set(turns["agent"]) and len(set(turns["agent"])) > 1  # sub-agents too
    off = turns[abs(turns["ideal_cached_tokens"] - turns["cached_tokens"]) > 64]
    for _i, miss in off.iterrows():  # only a race: a sibling with the same blocks in its prefill at the same time
        same = turns[(turns["conversation"] == miss["conversation"]) & (turns["request_id"] != miss["request_id"])]
        assert ((same["sent_at"] < miss["sent_at"] + miss["ttft_s"])
                & (miss["sent_at"] < same["sent_at"] + same["ttft_s"])).any()
    # the races cost little: token-weighted, the achieved hit is the ideal's within 2 points
    ideal, achieved = (turns[column].sum() / turns["prompt_tokens"].sum() for column in ("ideal_cached_tokens", "cached_tokens"))
    assert achieved == pytest.approx(ideal, abs=0.02)
    assert turns["ideal_cached_tokens"].sum() > 0.5 * turns["prompt_tokens"].sum()
    if name == "two processes":
        assert set(turns["worker"]) == {0, 1}
    assert "Agent sessions per cell" in result.stdout and "sessions-u3" in result.stdout


@pytest.mark.processes
def test_a_small_cache_hits_less_than_the_ideal_and_its_host_tier_more_than_without(runs):
    table = {name: figures.cell_table(frame(runs[name][1])).iloc[0]
             for name in ("one process", "small", "hicache")}
    ideal = table["one process"]["ideal_prefix_hit"]
    assert table["one process"]["achieved_prefix_hit"] == pytest.approx(ideal, abs=0.01)
    assert table["small"]["achieved_prefix_hit"] < ideal - 0.1
    assert table["small"]["achieved_prefix_hit"] + 0.05 < table["hicache"]["achieved_prefix_hit"] <= ideal + 0.01
    assert table["small"]["turns_missing_ideal"] > table["one process"]["turns_missing_ideal"]


@pytest.mark.processes
def test_think_time_scale_plays_a_ten_minute_session_in_seconds_its_sub_agents_together(runs):
    _result, records = runs["ten minutes"]
    turns = measured(records).sort_values("sent_at")
    assert len(turns) == 10 and turns["error"].isna().all()
    span = (turns["sent_at"] + turns["total_s"]).max() - turns["sent_at"].min()
    assert 600 * 0.005 <= span < 10.0  # the recorded gaps (5 x 120 s), scaled, and the requests themselves
    main = turns[turns["agent"] == "main"]
    gaps = main["sent_at"].to_numpy()[1:] - (main["sent_at"] + main["total_s"]).to_numpy()[:-1]
    assert (gaps >= 120 * 0.005 - 0.01).sum() == 5  # end to start, each 120 s think as 0.6 s
    first = {agent: group.iloc[0] for agent, group in turns.groupby("agent")}
    a, b = first["a"], first["b"]
    assert a["sent_at"] < b["sent_at"] + b["total_s"] and b["sent_at"] < a["sent_at"] + a["total_s"]  # overlap
    after = main[main["sent_at"] > a["sent_at"]].iloc[0]  # the parent waits for its sub-agents
    assert after["sent_at"] >= turns.loc[turns["agent"].isin(["a", "b"]), "sent_at"].max()


@pytest.mark.processes
def test_an_ab_run_plays_the_sessions_against_each_server_with_its_own_ideal(runs):
    result, records = runs["a/b"]
    table = figures.cell_table(frame(records)).set_index("target")
    assert list(table.index) == ["A", "B"] and (table["turns"] == len(measured(records)) / 2).all()
    assert table.loc["A", "ideal_prefix_hit"] == pytest.approx(table.loc["B", "ideal_prefix_hit"])
    assert table.loc["B", "achieved_prefix_hit"] < table.loc["A", "achieved_prefix_hit"] - 0.1
    assert "Verdicts against A" in result.stdout


@pytest.mark.processes
def test_with_a_duration_lanes_replay_copies_until_the_time_is_up_sharing_a_cache_unless_busted(runs):
    share = {}
    for name in ("timed", "timed, cache busted"):
        turns = measured(runs[name][1])
        assert turns["error"].isna().all() and turns["copy"].max() >= 1
        assert turns["sent_at"].max() - turns["sent_at"].min() < 3.0 + 0.2  # none starts after the time is up
        again = turns[turns["copy"] >= 1]
        share[name] = again["ideal_cached_tokens"].sum() / again["prompt_tokens"].sum()
        assert again["cached_tokens"].sum() / again["prompt_tokens"].sum() == pytest.approx(share[name], abs=0.02)
    assert share["timed"] > 0.97  # a copy resends what its first replay sent: all of it cached
    assert share["timed, cache busted"] < 0.9  # its own texts: only what it resends itself


# --- the fast half -------------------------------------------------------------------------------


def test_lanes_play_every_conversation_once_or_copies_until_the_time_is_up():
    conversations = generate(3, seed=1)
    once = SessionPlan(conversations, 2, None)
    assert [(c.id, copy) for lane in (0, 1) for c, copy in once.of_lane(lane)] == [
        ("gen1-000", 0), ("gen1-002", 0), ("gen1-001", 0)]
    more_lanes = SessionPlan(conversations, 5, None)  # every lane plays one: copies of the first two
    assert [next(more_lanes.of_lane(lane))[1] for lane in range(5)] == [0, 0, 0, 1, 1]
    timed = SessionPlan(conversations, 2, 30.0).of_lane(1)
    assert [(c.id, copy) for c, copy in (next(timed) for _ in range(3))] == [
        ("gen1-001", 0), ("gen1-000", 1), ("gen1-002", 1)]
    assert once.turns() == sum(len(c.turns()) for c in conversations)


def test_a_lanes_width_is_its_most_requests_in_flight(tmp_path):
    ten = read_traces(ten_minutes(tmp_path))[0]
    assert lane_width(ten.requests) == 2  # two sibling sub-agents of one request each at a time
    assert recorded_span(ten.requests) == pytest.approx(608.0 + 1.0)
    assert lane_width(ten.requests[:2]) == 1


def test_every_request_carries_one_sticky_key_in_each_header():
    assert session_headers(SESSION_HEADERS, "8712b46f/04e", 2) == {"X-SMG-Routing-Key": "8712b46f-04e.2",
                                                                  "X-Session-Id": "8712b46f-04e.2"}


@pytest.mark.parametrize("text, needle", [
    ('[load]\nmode = "sessions"\nsessions = 2\n[scenarios.chat]\nkind = "multi-turn"\n',
     "the sessions mode plays one scenario of kind agent-trace"),
    ('[load]\nmode = "closed"\nduration_s = 5\n[scenarios.a]\nkind = "agent-trace"\npath = "t.jsonl"\n',
     "a: kind agent-trace is played by mode = \"sessions\" and a search"),
    ('[load]\nmode = "sessions"\nsessions = 2\n[scenarios.a]\nkind = "agent-trace"\npath = "bad.jsonl"\n',
     "bad.jsonl line 1: conversation x: requests[0]: 2 hash blocks of 64 tokens are more than its in"),
], ids=["no agent trace", "agent trace in another mode", "bad trace"])
def test_a_profile_that_cannot_play_sessions_is_one_line(tmp_path, text, needle):
    write_jsonl(generate(1), tmp_path / "t.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"id": "x", "block_size": 64, "requests": [{"t": 0, "type": "s", '
                                        '"in": 100, "out": 1, "hash_ids": [1, 2]}]}\n', encoding="utf-8")
    (tmp_path / "p.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ProfileError) as error:
        load_profile(tmp_path / "p.toml")
    assert needle in str(error.value) and "\n" not in str(error.value)


def turn(conversation: str, copy: int, sent: float, total: float, prompt: int, cached: int | None, ideal: int,
         error: str | None = None) -> dict:
    return {"request_id": f"{conversation}{copy}{sent}", "scenario": "agent", "cell": "sessions-u2",
            "case": "sessions", "kind": "agent-trace", "concurrency": 2, "round": 0, "slot": copy, "target": "",
            "conversation": conversation, "copy": copy, "agent": "main", "turn": 0, "ideal_cached_tokens": ideal,
            "sent_at": sent, "ttft_s": None if error else 0.1, "total_s": None if error else total,
            "completion_tokens": None if error else 10, "prompt_tokens": None if error else prompt,
            "cached_tokens": None if error else cached, "error": error, "worker": 0, "user": 0}


def test_the_cell_figures_worked_out_by_hand():
    """Two sessions: a (1000 prompt tokens, 900 cached of an ideal 960) and b (2000, 1000 of 1920,
    one turn 900 below its ideal), and one turn of b beyond the context: ideal 2880/3000 = 96 %,
    achieved 1900/3000; the interval resamples the two sessions' sums."""
    records = [turn("a", 0, 0.0, 1.0, 1000, 900, 960), turn("b", 1, 0.5, 2.0, 1000, 900, 960),
               turn("b", 1, 3.0, 1.0, 1000, 100, 960), turn("b", 1, 4.5, 0.0, 0, None, 960,
                                                               "context overflow: 9000 + 10 > 8192")]
    row = figures.cell_table(records_frame(records), slo=Slo(ttft_s=0.5, decode_tps=5.0)).iloc[0]
    assert (row["sessions"], row["turns"], row["turns_failed"]) == (2, 4, 1)
    assert row["ideal_prefix_hit"] == pytest.approx(2880 / 3000)
    assert row["achieved_prefix_hit"] == pytest.approx(1900 / 3000)
    # resamples of two sessions: {a, a} 0.9, {b, b} 0.5, {a, b} 0.633: the interval spans them
    assert row["achieved_prefix_hit_ci_low"] == pytest.approx(0.5)
    assert row["achieved_prefix_hit_ci_high"] == pytest.approx(0.9)
    assert row["turns_missing_ideal"] == pytest.approx(1 / 3)  # 860 below; 60 below is within a block
    assert row["context_overflow_rate"] == pytest.approx(0.25) and row["overflow_flag"]
    assert row["lanes_offered"] == 2
    assert row["lanes_live"] == pytest.approx((1.0 + 4.0) / 4.5)  # a 0-1 s, b 0.5-4.5 s over 0-4.5 s
    assert row["turns_within_slo"] == pytest.approx(2 / 4)  # b's first decodes 9 tokens in 1.9 s; the refused one


def test_a_healthy_cell_is_not_flagged_and_one_session_has_no_interval():
    row = figures.cell_table(records_frame([turn("a", 0, 0.0, 1.0, 1000, 950, 960)])).iloc[0]
    assert not row["overflow_flag"] and row["context_overflow_rate"] == 0
    assert np.isnan(row["achieved_prefix_hit_ci_low"]) and row["turns_missing_ideal"] == 0


def test_swim_lanes_put_each_turn_on_its_lane_and_sub_agents_just_above():
    """Lane 0: one turn; lane 1: a main agent's turn, two sub-agents together, its next turn."""
    records = [turn("a", 0, 10.0, 1.0, 1000, 900, 960), turn("b", 1, 10.5, 2.0, 1000, 900, 960)]
    records += [dict(turn("b", 1, 12.6 + i / 10, 0.5, 1000, 900, 960), agent=agent, request_id=agent)
                for i, agent in enumerate(("s1", "s2"))]
    records += [turn("b", 1, 14.0, 1.0, 1000, 900, 960)]
    spans = figures.lane_spans(records_frame(records), origin=10.0)
    assert spans["x"].tolist() == pytest.approx([0, 0.5, 2.6, 2.7, 4])
    assert spans["end"].tolist() == pytest.approx([1, 2.5, 3.1, 3.2, 5])
    assert spans["y"].tolist() == [0.0, 3.0, 4.0, 5.0, 3.0]  # three rows a lane: lane 1's main agent, two sub-agents
    assert spans["name"].tolist() == ["main agent", "main agent", "sub-agent", "sub-agent", "main agent"]
