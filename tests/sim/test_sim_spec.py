"""The simulator's account of each request's speculative decoding, in each flavour's shape, adds up
to what its /metrics counts: verify steps, accepted drafts and accepted drafts per draft position."""

from __future__ import annotations

import pytest
from sim_http import chat, chat_payload, request

from loadlib.scenarios.thread import PROTOCOL_PROMPTS
from loadlib.sim.process import start_simulator
from loadlib.truth.scrape import parse_metrics
from loadlib.wire.flavours import FLAVOURS
from loadlib.wire.sse import parse_stream

DRAFT_TOKENS = 8  # the preset's block: 7 drafts a verify step


@pytest.fixture(scope="module", params=sorted(FLAVOURS))
def flavoured(request):
    with start_simulator(["--time-scale", "0.02", "--flavor", request.param]) as proc:
        yield request.param, proc


def counters(url: str, flavour: str) -> dict[str, float]:
    """The flavour's speculative-decoding counters, summed over their series, by what they count."""
    names = FLAVOURS[flavour].metrics
    _families, samples = parse_metrics(request(url, "GET", "/metrics").body.decode())
    found = {"verify_steps": sum(v for n, _l, v in samples if n == names.verify_steps)}
    if names.accept_counters:
        found["accepted"] = sum(v for n, _l, v in samples if n == names.accept_counters[0])
    for name, labels, value in samples:
        if name == names.accepted_per_position:
            found[f"position {labels['position']}"] = value
    return found


@pytest.mark.processes
def test_each_requests_account_adds_up_to_the_counters(flavoured):
    flavour, sim = flavoured
    before = counters(sim.url, flavour)
    accounts = []
    for scenario, max_tokens in (("code", 300), ("cn_essay", 120), ("en_tech", 57)):
        reply = chat(sim.url, chat_payload(PROTOCOL_PROMPTS[scenario], max_tokens=max_tokens,
                                           return_spec_tokens_details=True))
        stream = parse_stream([reply.body_bytes], [1.0])
        account = stream.spec
        assert account is not None and stream.error is None, flavour
        # honest counts: every token after the first is an accepted draft or a verify step's own
        assert 1 + account.verify_steps + account.accepted_tokens == stream.completion_tokens == max_tokens
        assert account.draft_tokens == account.verify_steps * (DRAFT_TOKENS - 1)
        accounts.append(account)
    after = counters(sim.url, flavour)
    assert after["verify_steps"] - before["verify_steps"] == sum(a.verify_steps for a in accounts)
    if "accepted" in after:
        assert after["accepted"] - before["accepted"] == sum(a.accepted_tokens for a in accounts)
    positions = {k: after[k] - before.get(k, 0.0) for k in after if k.startswith("position")}
    if flavour == "sglang":
        assert not positions  # SGLang counts no positions: its per-request histogram does
    else:
        assert sum(positions.values()) == after["accepted"] - before["accepted"]
    histograms = [list(map(int, a.histogram.split(","))) for a in accounts if a.histogram]
    if flavour == "llamacpp":
        assert not histograms  # llama-server sends none per request
    else:  # a step that accepted j drafts counts once at each of the positions 0..j-1
        assert sum(sum(h) for h in histograms) == sum(a.verify_steps for a in accounts)
        assert sum(j * n for h in histograms for j, n in enumerate(h)) == sum(a.accepted_tokens for a in accounts)
        if positions:
            per_position = [sum(n for h in histograms for j, n in enumerate(h) if j > k) for k in range(DRAFT_TOKENS - 1)]
            assert [positions[f"position {k}"] for k in range(DRAFT_TOKENS - 1)] == per_position


@pytest.mark.processes
def test_sglang_sends_its_account_only_when_asked(sim):
    reply = chat(sim.url, chat_payload(max_tokens=40))
    assert not any("sglext" in e for e in reply.events if isinstance(e, dict))
    assert parse_stream([reply.body_bytes], [1.0]).spec is None
    asked = chat(sim.url, chat_payload(max_tokens=40, return_spec_tokens_details=True))
    sglext, usage, done = asked.events[-3:]  # after the finish chunk, before the usage chunk
    assert sglext["choices"] == [] and sglext["usage"] is None and usage["usage"] and done == "[DONE]"
    details = sglext["sglext"]["spec_tokens_details"]
    assert details["spec_accept_length"] == pytest.approx(40 / details["spec_verify_ct"])  # completion / verify_ct
