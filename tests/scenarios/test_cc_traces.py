"""cc-traces: reading conversations (a file, a folder, JSONL), one line for a bad trace, the ideal
prefix hit known by hand, the seeded generator, and the prompt builder measured by the simulator's
tokenizer (no process: the simulator over HTTP is tests/sim/test_sim_agent_sessions.py)."""

from __future__ import annotations

import json

import pytest

from loadlib.scenarios.agent_prompts import BLOCK_WORDS, LEAD, TAIL_WORDS, AgentPrompts
from loadlib.scenarios.cc_traces import (MAIN_AGENT, AgentRequest, SubAgent, TraceFormatError, describe,
                                         ideal_prefix_hits, main, read_traces, write_jsonl)
from loadlib.scenarios.cc_traces_gen import SessionShape, generate
from loadlib.scenarios.cc_traces_gen import main as generate_main
from loadlib.sim import tokenizer
from loadlib.sim.radix import RadixCache


def request(t, n_in, n_out, ids, **extra):
    return {"t": t, "type": "s", "in": n_in, "out": n_out, "hash_ids": ids, "input_types": ["text"],
            "output_types": ["text"], "stop": "end_turn", **extra}


# A conversation whose ideal is worked out by hand (64-token blocks, local ids):
#   r0  in 200, ids [1,2,3]            nothing sent before             hit 0
#   r1  in 300, ids [1,2,3,4]          1,2,3 sent                      hit 192
#   sub-agent a1 spawned at 7 s:
#     s0  at 7 s, in 150, ids [1,9]    1 sent (the parent's)           hit 64
#     s1  at 9 s, in 260, ids [1,9,10,11]   1,9 sent                   hit 128
#   r2  in 400, ids [1..6]             1..4 sent                       hit 256
# 640 of 1,310 prompt tokens: 48.9 %.
HAND = {"id": "hand", "block_size": 64, "hash_id_scope": "local", "tool_tokens": 100, "system_tokens": 28,
        "requests": [request(0, 200, 10, [1, 2, 3]), request(5, 300, 10, [1, 2, 3, 4], think_time=4.5),
                     {"t": 7, "type": "subagent", "agent_id": "a1", "subagent_type": "Explore",
                      "requests": [request(0, 150, 5, [1, 9]), request(2, 260, 5, [1, 9, 10, 11])]},
                     request(12, 400, 10, [1, 2, 3, 4, 5, 6], api_time=1.5, ttft=0.2)]}


def write(tmp_path, name, *conversations, jsonl=False):
    path = tmp_path / name
    if jsonl:
        path.write_text("".join(json.dumps(c) + "\n" for c in conversations))
    else:
        path.write_text(json.dumps(conversations[0], indent=2))
    return path


# --- reading ---------------------------------------------------------------------------------------

def test_a_conversation_reads_into_typed_values_with_sub_agent_offsets_kept(tmp_path):
    [conversation] = read_traces(write(tmp_path, "hand.json", HAND))
    assert (conversation.id, conversation.block_size, conversation.scope) == ("hand", 64, "local")
    assert (conversation.tool_tokens, conversation.system_tokens) == (100, 28)
    r0, r1, sub, r2 = conversation.requests
    assert r1 == AgentRequest(5.0, "s", 300, 10, (1, 2, 3, 4), ("text",), ("text",), "end_turn", think_time=4.5)
    assert (r2.api_time, r2.ttft, r0.think_time) == (1.5, 0.2, None)
    assert isinstance(sub, SubAgent) and (sub.t, sub.agent_id, sub.subagent_type) == (7.0, "a1", "Explore")
    assert [r.t for r in sub.requests] == [0.0, 2.0]  # from the spawn, as recorded
    turns = conversation.turns()
    assert [(t.agent, t.index, t.at_s, t.path) for t in turns] == [
        (MAIN_AGENT, 0, 0.0, "requests[0]"), (MAIN_AGENT, 1, 5.0, "requests[1]"),
        ("a1", 0, 7.0, "requests[2].requests[0]"), ("a1", 1, 9.0, "requests[2].requests[1]"),
        (MAIN_AGENT, 2, 12.0, "requests[3]")]


def test_a_file_a_folder_and_jsonl_read_alike(tmp_path):
    other = {**HAND, "id": "other"}
    (tmp_path / "dir").mkdir()
    write(tmp_path / "dir", "b.json", other)
    write(tmp_path / "dir", "a.json", HAND)
    (tmp_path / "dir" / "notes.txt").write_text("not a trace")
    from_folder = read_traces(tmp_path / "dir")
    from_jsonl = read_traces(write(tmp_path, "both.jsonl", HAND, other, jsonl=True))
    assert [c.id for c in from_folder] == [c.id for c in from_jsonl] == ["hand", "other"]
    assert from_folder == from_jsonl  # the same values (where they came from aside)
    assert from_jsonl[1].source.endswith("both.jsonl line 2")


def test_an_absent_scope_is_global(tmp_path):
    conversation = {key: value for key, value in HAND.items() if key != "hash_id_scope"}
    assert read_traces(write(tmp_path, "g.json", conversation))[0].scope == "global"


BAD = [
    ({**HAND, "block_size": 0}, "t.json: conversation hand: block_size must be a whole number >= 1, got 0"),
    ({**HAND, "hash_id_scope": "team"}, "t.json: conversation hand: hash_id_scope must be local or global, got 'team'"),
    ({**HAND, "requests": []}, "t.json: conversation hand: no requests"),
    ({"block_size": 64, "requests": []}, "t.json: a conversation needs an id (a string)"),
    ({**HAND, "requests": [request(0, 200, 10, [1, 2, 3]), {**request(1, 200, 10, []), "type": "x"}]},
     "t.json: conversation hand: requests[1]: type must be s, n or subagent, got 'x'"),
    ({**HAND, "requests": [request(3, 200, 10, []), request(1, 200, 10, [])]},
     "t.json: conversation hand: requests[1]: t goes backwards (1 s after 3 s)"),
    ({**HAND, "requests": [request(-1, 200, 10, [])]},
     "t.json: conversation hand: requests[0]: t must be a number of seconds >= 0, got -1"),
    ({**HAND, "requests": [{**request(0, 200, 10, []), "in": None}]},
     "t.json: conversation hand: requests[0]: in must be a whole number >= 1, got nothing"),
    ({**HAND, "requests": [request(0, 200, 10.5, [])]},
     "t.json: conversation hand: requests[0]: out must be a whole number >= 0, got 10.5"),
    ({**HAND, "requests": [request(0, 200, 10, [1, "2"])]},
     "t.json: conversation hand: requests[0]: hash_ids must be a list of whole numbers >= 0"),
    ({**HAND, "requests": [request(0, 100, 10, [1, 2])]},
     "t.json: conversation hand: requests[0]: 2 hash blocks of 64 tokens are more than its in (100 tokens)"),
    ({**HAND, "requests": [request(0, 200, 10, [1, 2]), request(1, 200, 10, [1, 3, 2])]},
     "t.json: conversation hand: requests[1]: hash id 2 (block 2) follows 3 here but followed 1 before "
     "(ids are chained: one id, one prefix)"),
    ({**HAND, "requests": [request(0, 200, 10, [1, 2]), request(1, 200, 10, [2])]},
     "t.json: conversation hand: requests[1]: hash id 2 (block 0) starts the prompt here but followed 1 before "
     "(ids are chained: one id, one prefix)"),
    ({**HAND, "requests": [request(0, 200, 10, [1]), {"t": 1, "type": "subagent", "requests": []}]},
     "t.json: conversation hand: requests[1]: a subagent needs an agent_id (a string)"),
    ({**HAND, "requests": [{"t": 1, "type": "subagent", "agent_id": "a", "requests": [request(0, 90, 1, [], ttft=-2)]}]},
     "t.json: conversation hand: requests[0].requests[0]: ttft must be a number of seconds >= 0, got -2"),
    ({**HAND, "requests": [{"t": 0, "type": "subagent", "agent_id": "a", "requests": []}] * 2},
     "t.json: conversation hand: agent_id a is used by two sub-agents"),
    ([HAND], "t.json: expected one JSON object per conversation, got a list"),
]


@pytest.mark.parametrize("conversation, line", BAD, ids=[line.split(": ", 2)[-1][:40] for _c, line in BAD])
def test_a_bad_trace_is_one_line_naming_file_conversation_and_request(tmp_path, conversation, line):
    path = write(tmp_path, "t.json", conversation)
    with pytest.raises(TraceFormatError) as caught:
        read_traces(path)
    assert str(caught.value) == f"{tmp_path}/{line}"


def test_jsonl_and_sets_name_their_line_and_the_other_file(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(HAND) + "\n{not json\n")
    with pytest.raises(TraceFormatError, match=r"t\.jsonl line 2: not JSON \("):
        read_traces(path)
    path.write_text(json.dumps(HAND) + "\n" + json.dumps(HAND) + "\n")
    with pytest.raises(TraceFormatError, match=r"t\.jsonl line 2: conversation hand: the id is used twice "
                                               r"\(also in .*t\.jsonl line 1\)$"):
        read_traces(path)
    pretty = tmp_path / "t.json"
    pretty.write_text(json.dumps(HAND, indent=2)[:-30])
    with pytest.raises(TraceFormatError, match=r"t\.json: not JSON \("):
        read_traces(pretty)
    (tmp_path / "one.json").write_text(json.dumps({**HAND, "id": ""}))  # one conversation on one line: no line number
    with pytest.raises(TraceFormatError, match=r"one\.json: a conversation needs an id"):
        read_traces(tmp_path / "one.json")
    (tmp_path / "empty.json").write_text("\n")
    with pytest.raises(TraceFormatError, match=r"empty\.json: no conversations$"):
        read_traces(tmp_path / "empty.json")
    global_a = {**HAND, "id": "a", "hash_id_scope": "global"}
    global_b = {**global_a, "id": "b", "block_size": 32}
    path.write_text(json.dumps(global_a) + "\n" + json.dumps(global_b) + "\n")
    with pytest.raises(TraceFormatError, match="conversation b: global hash ids need one block_size: 32 here, 64 in "
                                               "conversation a$"):
        read_traces(path)


def test_the_command_prints_the_shape_or_one_line_and_exit_2(tmp_path, capsys):
    good = write(tmp_path, "hand.json", HAND)
    assert main([str(good)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{good}: 1 conversations (local hash ids, 64-token blocks), 5 requests (2 by 1 sub-agents)")
    assert "48.9%" in out
    bad = write(tmp_path, "t.json", BAD[0][0])
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path}/{BAD[0][1]}\n"


# --- the ideal -----------------------------------------------------------------------------------

def test_the_ideal_prefix_hit_is_the_one_worked_out_by_hand(tmp_path):
    [ideal] = ideal_prefix_hits(read_traces(write(tmp_path, "hand.json", HAND)))
    assert [hit.hit_tokens for hit in ideal.hits] == [0, 192, 64, 128, 256]
    assert (ideal.hit_tokens, ideal.prompt_tokens) == (640, 1310)
    assert ideal.ratio == pytest.approx(640 / 1310)


def test_global_ids_count_blocks_an_earlier_conversation_sent_and_local_ids_do_not(tmp_path):
    first = {**HAND, "id": "first", "requests": [request(0, 200, 10, [10, 11, 12])]}
    second = {**HAND, "id": "second", "requests": [request(0, 200, 10, [10, 11, 13])]}
    path = write(tmp_path, "g.jsonl", {**first, "hash_id_scope": "global"}, {**second, "hash_id_scope": "global"},
                 jsonl=True)
    assert [i.hit_tokens for i in ideal_prefix_hits(read_traces(path))] == [0, 128]
    path = write(tmp_path, "l.jsonl", first, second, jsonl=True)
    assert [i.hit_tokens for i in ideal_prefix_hits(read_traces(path))] == [0, 0]


# Every draw fixed: a 640-token prefix (10 blocks), a 100-token first prompt, 3 turns of 50-token
# answers each followed by a 200-token tool result. Prompts of 740, 990 and 1,240 tokens (11, 15
# and 19 blocks), each resending the last: hits 0, 11 x 64 and 15 x 64.
FIXED = SessionShape(turns=(3, 3), tool_tokens=(400, 400), system_tokens=(240, 240), first_prompt_tokens=(100, 100),
                     tool_result_tokens=(200, 200), tool_call_out=(50, 50), answer_out=(50, 50), end_turn_share=0.0,
                     subagent_share=0.0, tool_gap_s=(1.0, 1.0))


def test_a_generated_trace_has_the_ideal_worked_out_by_hand():
    local = generate(2, seed=5, scope="local", shape=FIXED)
    for conversation in local:
        assert [t.request.in_tokens for t in conversation.turns()] == [740, 990, 1240]
        assert [len(t.request.hash_ids) for t in conversation.turns()] == [11, 15, 19]
    assert [(i.hit_tokens, i.prompt_tokens) for i in ideal_prefix_hits(local)] == [(704 + 960, 2970)] * 2
    # global ids: the second conversation also finds the shared 640-token prefix on its first turn
    shared = generate(2, seed=5, scope="global", shape=FIXED)
    assert [(i.hit_tokens, i.prompt_tokens) for i in ideal_prefix_hits(shared)] == [(1664, 2970), (640 + 1664, 2970)]


def test_generated_sessions_grow_turn_by_turn_and_read_back_unchanged(tmp_path):
    conversations = generate(3, seed=2)
    path = tmp_path / "gen.jsonl"
    write_jsonl(conversations, path)
    assert read_traces(path) == conversations  # the format's checks pass: chained, in order
    assert generate(2, seed=2) == conversations[:2]  # seeded, and a longer set begins alike
    for conversation in conversations:
        main_turns = [t.request for t in conversation.turns() if t.agent == MAIN_AGENT]
        for before, after in zip(main_turns, main_turns[1:]):
            assert after.hash_ids[:len(before.hash_ids)] == before.hash_ids or after.input_types[0] == "text"
            assert after.think_time is not None and after.t >= before.t + before.api_time


def test_sub_agents_of_one_spawn_start_together_with_a_fresh_context():
    shape = SessionShape(turns=(4, 4), end_turn_share=0.0, subagent_share=1.0, siblings=(2, 2))
    [conversation] = generate(1, seed=7, shape=shape)
    spawns = [conversation.requests[i:i + 3] for i, e in enumerate(conversation.requests) if isinstance(e, AgentRequest)
              and i + 2 < len(conversation.requests) and isinstance(conversation.requests[i + 1], SubAgent)]
    assert spawns
    for parent, first, second in spawns:
        assert parent.t + parent.api_time <= first.t <= second.t <= parent.t + parent.api_time + shape.spawn_spread_s
        assert first.requests[0].t == second.requests[0].t == 0.0  # offsets from the spawn
        prefix_blocks = (first.tool_tokens + first.system_tokens) // 64
        assert first.requests[0].hash_ids[:prefix_blocks] == second.requests[0].hash_ids[:prefix_blocks]
        assert not set(first.requests[0].hash_ids) & set(parent.hash_ids)  # nothing of the parent's context


def test_the_generator_command_writes_a_trace_and_prints_its_shape(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    assert generate_main(["--out", str(path), "--conversations", "2", "--seed", "4", "--scope", "local"]) == 0
    assert capsys.readouterr().out == describe(read_traces(path), str(path)) + "\n"


def test_the_shipped_example_is_the_generators_and_reads():
    from tests.conftest import REPO
    path = REPO / "profiles" / "data" / "agent-sessions.jsonl"
    conversations = read_traces(path)
    assert conversations == generate(len(conversations), seed=2)
    assert 3 <= len(conversations) <= 6 and 2 <= sum(len(c.subagents) for c in conversations) <= 12


# --- the prompt builder, against the simulator's tokenizer ----------------------------------------

def sim_tokens(prompt) -> int:
    return len(tokenizer.encode_chat(prompt.messages, thinking=False))


def measured(salt="run", bust_cache=False) -> AgentPrompts:
    builder = AgentPrompts(salt, bust_cache)
    builder.learn([len(tokenizer.encode_chat(job.messages, thinking=False)) for job in builder.probes()])
    return builder


def test_the_vocabularies_are_disjoint_four_letter_words():
    assert len(BLOCK_WORDS) == 128 and len(TAIL_WORDS) == 32 and not set(BLOCK_WORDS) & set(TAIL_WORDS)
    assert all(len(word) == 4 and word.isalpha() for word in BLOCK_WORDS + TAIL_WORDS)


def test_each_prompt_is_exactly_its_in_tokens_and_its_answer_forced_to_out():
    builder = measured()
    assert builder.exact and builder.frame_tokens == 16  # the template's 14, "Context" and ":"
    conversations = generate(3, seed=3)
    for conversation in conversations:
        for turn in conversation.turns():
            prompt = builder.prompt(conversation, turn)
            assert sim_tokens(prompt) == prompt.expected_tokens == turn.request.in_tokens
            assert prompt.params == {"max_tokens": turn.request.out_tokens, "ignore_eos": True}
            assert prompt.messages[0]["content"].startswith(LEAD + " ")


def test_a_shared_block_is_the_same_text_at_the_same_place_and_copies_can_share_nothing():
    [conversation] = generate(1, seed=3, shape=FIXED)
    first, second, _third = conversation.turns()
    builder = measured()
    a, b = (builder.prompt(conversation, t).messages[0]["content"] for t in (first, second))
    shared = len(LEAD) + 5 * 64 * len(first.request.hash_ids)
    assert a[:shared] == b[:shared] and a[shared:shared + 5] != b[shared:shared + 5]
    again = builder.prompt(conversation, second, copy=1).messages[0]["content"]
    assert again[:shared] == b[:shared] and again != b  # another copy: the blocks alike, the tail its own
    busted = measured(bust_cache=True)
    copy0, copy1 = (busted.prompt(conversation, first, copy=c).messages[0]["content"] for c in (0, 1))
    assert copy0[:len(LEAD) + 5 * 8] != copy1[:len(LEAD) + 5 * 8]
    assert measured(salt="other run").prompt(conversation, first).messages[0]["content"] != a


def test_a_prompt_shorter_than_the_frame_is_the_frame_alone():
    builder = measured()
    [conversation] = generate(1, seed=3, shape=FIXED)
    short = conversation.turns()[0]
    tiny = type(short)(short.agent, short.index, short.at_s,
                       AgentRequest(0.0, "s", 5, 0, ()), short.path)
    prompt = builder.prompt(conversation, tiny)
    assert prompt.messages[0]["content"] == LEAD and sim_tokens(prompt) == prompt.expected_tokens == 16
    assert prompt.params["max_tokens"] == 1


def test_where_words_are_not_one_token_each_sizes_come_from_the_calibration():
    builder = AgentPrompts("run")
    builder.learn([20, 20 + 2 * 512, 20 + 2 * 128])  # a tokenizer that splits every word in two
    assert not builder.exact
    [conversation] = generate(1, seed=3, shape=FIXED)
    turn = conversation.turns()[1]
    words = len(builder.prompt(conversation, turn).messages[0]["content"][len(LEAD):]) // 5
    assert words == (turn.request.in_tokens - 20) // 2


def test_an_unbounded_radix_cache_hits_the_ideal_within_a_block_per_request():
    builder, cache = measured(), RadixCache(10 ** 9)
    conversations = generate(3, seed=3)
    ideals = ideal_prefix_hits(conversations)
    for conversation, ideal in zip(conversations, ideals):
        for hit in ideal.hits:
            ids = tokenizer.encode_chat(builder.prompt(conversation, hit.turn).messages, thinking=False)
            achieved = cache.match(ids[:-1]).tokens
            cache.insert(ids)
            assert abs(achieved - hit.hit_tokens) <= conversation.block_size
