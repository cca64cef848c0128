"""The simulator serves coding-agent sessions as a real server would: the prompt builder's prompts,
sent over HTTP in order, come out at exactly their `in` tokens; with an unbounded cache the
cached tokens are the trace's ideal within a block per request, a small cache gives less, its
host tier (`--enable-hierarchical-cache`) gives back part of it at a load cost, and two instances
without sticky routing lose hits. `/metrics` counts what the answers said."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from sim_http import chat, chat_payload, metric, request

from loadlib.scenarios.agent_prompts import AgentPrompts
from loadlib.scenarios.base import Job
from loadlib.scenarios.cc_traces import Conversation, IdealHit, ideal_prefix_hits
from loadlib.scenarios.cc_traces_gen import SessionShape, generate
from loadlib.sim.engine import Engine
from loadlib.sim.presets import PRESETS
from loadlib.sim.process import start_simulator

FAST = ["--time-scale", "0.01"]
# short answers, so the prompts' prefill (and the cache) is what the time goes to
SHAPE = SessionShape(turns=(5, 8), tool_call_out=(8, 24), answer_out=(16, 48), subagent_share=0.3,
                     sub_turns=(2, 3), tool_result_tokens=(100, 1500))


@dataclass(frozen=True)
class Served:
    hit: IdealHit
    prompt_tokens: int
    cached_tokens: int


def send_to(url: str):
    """A scenario's `Send` against one server: each job's usage as its record."""
    def send(jobs: list[Job], purpose: str) -> list[dict]:
        return [{"prompt_tokens": post(url, job.messages, job.params)["prompt_tokens"]} for job in jobs]
    return send


def post(url: str, messages: list[dict], params: dict) -> dict:
    payload = chat_payload(**{"max_tokens": params["max_tokens"]})
    payload.update(params, messages=messages)
    reply = chat(url, payload)
    assert reply.status == 200
    return {"prompt_tokens": reply.usage["prompt_tokens"],
            "cached_tokens": reply.usage["prompt_tokens_details"]["cached_tokens"]}


def measured(url: str) -> AgentPrompts:
    """A prompt builder that has measured the server with its probes."""
    builder = AgentPrompts("test-run")
    builder.prepare(send_to(url))
    assert builder.exact
    return builder


def replay(urls: list[str], conversations: list[Conversation], interleave: bool = False,
           sticky: bool = True, builder: AgentPrompts | None = None) -> list[Served]:
    """Every request of the trace, one at a time: a conversation after another, or their turns
    taken in turn (as concurrent sessions would meet the cache); a conversation's requests go to one
    instance (`sticky`) or each to the next (round robin, no stickiness)."""
    builder = builder or measured(urls[0])
    ideals = ideal_prefix_hits(conversations)
    queues = [[(c, hit) for hit in ideal.hits] for c, ideal in zip(conversations, ideals)]
    order = ([item for turn in itertools.zip_longest(*queues) for item in turn if item is not None] if interleave
             else [item for queue in queues for item in queue])
    rotation = itertools.cycle(urls)
    served = []
    for conversation, hit in order:
        prompt = builder.prompt(conversation, hit.turn)
        url = urls[conversations.index(conversation) % len(urls)] if sticky else next(rotation)
        usage = post(url, prompt.messages, prompt.params)
        served.append(Served(hit, usage["prompt_tokens"], usage["cached_tokens"]))
    return served


def ratio(served: list[Served]) -> tuple[float, float]:
    """(ideal, achieved) prefix hits, token-weighted over the requests."""
    prompts = sum(s.prompt_tokens for s in served)
    return sum(s.hit.hit_tokens for s in served) / prompts, sum(s.cached_tokens for s in served) / prompts


@pytest.mark.processes
def test_an_unbounded_cache_serves_the_ideal_within_a_block_per_request_and_metrics_agree():
    conversations = generate(3, seed=11, shape=SHAPE)  # global ids: later conversations find the shared prefix
    with start_simulator([*FAST, "--radix-cache-tokens", "100000000"]) as sim:
        builder = measured(sim.url)
        before = request(sim.url, "GET", "/metrics").body.decode()
        served = replay([sim.url], conversations, builder=builder)
        after = request(sim.url, "GET", "/metrics").body.decode()
    for s in served:
        assert s.prompt_tokens == s.hit.prompt_tokens  # exactly `in` tokens of the server's tokenizer
        assert abs(s.cached_tokens - s.hit.hit_tokens) <= conversations[0].block_size
    ideal, achieved = ratio(served)
    assert achieved == pytest.approx(ideal, abs=0.01)
    counted = metric(after, "sglang:cached_tokens_total") - metric(before, "sglang:cached_tokens_total")
    assert counted == sum(s.cached_tokens for s in served)


@pytest.mark.processes
def test_a_small_cache_hits_less_than_the_ideal_and_its_host_tier_gives_part_of_it_back():
    conversations = generate(3, seed=12, scope="local", shape=SHAPE)
    small = ["--radix-cache-tokens", "12000"]
    achieved = {}
    for name, flags in (("small", small), ("hicache", [*small, "--enable-hierarchical-cache", "--hicache-ratio", "2"])):
        with start_simulator([*FAST, *flags]) as sim:
            builder = measured(sim.url)
            before = request(sim.url, "GET", "/metrics").body.decode()
            served = replay([sim.url], conversations, interleave=True, builder=builder)
            after = request(sim.url, "GET", "/metrics").body.decode()
        ideal, achieved[name] = ratio(served)
        counted = metric(after, "sglang:cached_tokens_total") - metric(before, "sglang:cached_tokens_total")
        assert counted == sum(s.cached_tokens for s in served)  # the host tier's hits counted as cached too
        assert all(s.cached_tokens <= s.hit.hit_tokens + conversations[0].block_size for s in served)
    assert achieved["small"] < ideal - 0.2
    assert achieved["small"] + 0.1 < achieved["hicache"] <= ideal + 0.01


@pytest.mark.processes
def test_two_instances_without_sticky_routing_lose_hits():
    conversations = generate(2, seed=13, scope="local", shape=SHAPE)
    with start_simulator([*FAST, "--instances", "2", "--radix-cache-tokens", "100000000"]) as sim:
        sticky = ratio(replay(sim.urls, conversations))
        request(sim.urls[0], "POST", "/flush_cache")
        request(sim.urls[1], "POST", "/flush_cache")
        spread = ratio(replay(sim.urls, conversations, sticky=False))
    assert sticky[1] == pytest.approx(sticky[0], abs=0.01)
    assert spread[1] < sticky[1] - 0.1  # a turn on the other instance misses what the last one cached


def test_loading_from_the_host_tier_costs_its_tokens_at_the_load_rate():
    cfg = PRESETS["3090x2-tp2-dflash"].with_overrides(enable_hierarchical_cache=True)
    engine = Engine(cfg)
    req = engine.make_request("r", [{"role": "user", "content": "word " * 20000}], 8, 0.0, False)
    n = 100
    req.prefilled = req.cached_tokens = req.prompt_tokens - n
    device_only = engine._prefill_duration([(req, n)])
    req.loaded_tokens = 19000
    assert engine._prefill_duration([(req, n)]) == pytest.approx(device_only + 19000 / cfg.hicache_load_tokens_per_s)
    req.prefilled += 1  # a later chunk of the same request: loaded once, before the first
    assert engine._prefill_duration([(req, n - 1)]) < device_only
