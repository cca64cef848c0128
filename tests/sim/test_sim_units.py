"""The engine's building blocks on their own: acceptance law, radix cache, tokenizer, content."""

from __future__ import annotations

import pytest

from loadlib.scenarios.thread import PROTOCOL_PROMPTS
from loadlib.sim import content, tokenizer
from loadlib.sim.engine import Engine, accept_cdf
from loadlib.sim.presets import PRESETS
from loadlib.sim.radix import RadixCache


@pytest.mark.parametrize("mean", [1.0, 1.6, 2.56, 3.63, 6.32, 8.0])
def test_accept_law_has_the_requested_mean_within_the_block(mean):
    cdf = accept_cdf(mean, 8)
    probs = [cdf[0]] + [b - a for a, b in zip(cdf, cdf[1:])] + [1 - cdf[-1]]
    assert len(probs) == 8 and all(p >= -1e-12 for p in probs)
    assert sum(g * p for g, p in zip(range(1, 9), probs)) == pytest.approx(mean, abs=1e-6)


def test_radix_matches_prefixes_and_splits_edges():
    cache = RadixCache(100)
    cache.insert([1, 2, 3, 4, 5])
    cache.insert([1, 2, 7])
    assert cache.match([1, 2, 3, 9]) == (3, 0)
    assert cache.match([1, 2, 7, 8]) == (3, 0)
    assert cache.match([9]) == (0, 0)
    assert cache.size_tokens == 6


def test_radix_evicts_least_recently_used_leaves_to_capacity():
    cache = RadixCache(8)
    cache.insert([1, 2, 3, 4])
    cache.insert([5, 6, 7, 8])
    cache.match([1, 2, 3, 4])  # touch the first
    cache.insert([9, 10, 11])
    assert cache.size_tokens <= 8
    assert cache.match([1, 2, 3, 4]).tokens == 4 and cache.match([5, 6, 7, 8]).tokens == 0


def test_radix_page_size_rounds_down_to_whole_pages():
    cache = RadixCache(100, page_size=4)
    cache.insert(list(range(10)))
    assert cache.match(list(range(10))).tokens == 8


def test_the_host_tier_keeps_what_the_device_evicts_and_loads_it_back():
    cache = RadixCache(8, host_capacity_tokens=16)
    cache.insert([1, 2, 3, 4])
    cache.insert([5, 6, 7, 8])
    cache.insert([9, 10, 11, 12])  # the device holds 8: the oldest, [1..4], is on the host alone
    assert (cache.size_tokens, cache.host_size_tokens) == (8, 12)
    assert cache.match([1, 2, 3, 4, 99]) == (0, 4)  # found on the host, loaded back...
    assert cache.match([1, 2, 3, 4, 99]) == (4, 0)  # ...so the device has it now
    assert cache.match([5, 6, 7, 8]) == (0, 4)  # which evicted the least recently used, [5..8]
    assert cache.size_tokens <= 8 and cache.host_size_tokens <= 16


def test_the_host_tier_loads_back_only_the_part_that_matched():
    cache = RadixCache(8, host_capacity_tokens=32)
    cache.insert([1, 2, 3, 4, 5, 6])
    cache.insert([7, 8, 9, 10, 11, 12])  # [1..6] goes to the host
    assert cache.match([1, 2, 3, 7]) == (0, 3)
    assert cache.match([1, 2, 3, 4, 5, 6]) == (3, 3)


def test_the_host_tier_evicts_its_own_least_recently_used_down_to_its_capacity():
    cache = RadixCache(4, host_capacity_tokens=8)
    for start in (0, 10, 20, 30):
        cache.insert([start + i for i in range(4)])
    assert cache.host_size_tokens <= 8  # the device's copy [30..33] and the newest evicted [20..23]
    assert cache.match([20, 21, 22, 23]) == (0, 4)
    assert cache.match([0, 1, 2, 3]).tokens == 0 and cache.match([10, 11, 12, 13]).tokens == 0


def test_without_a_host_tier_an_evicted_prefix_is_gone():
    cache = RadixCache(8)
    for start in (0, 10, 20):
        cache.insert([start + i for i in range(4)])
    assert cache.host_size_tokens == 0 and cache.match([0, 1, 2, 3]) == (0, 0)


def test_tokenizer_counts_cjk_per_two_characters_and_words_per_word():
    assert len(tokenizer.encode("秋天的北平")) == 3
    assert len(tokenizer.encode("the draft model verifies")) == 4
    assert tokenizer.encode("same text") == tokenizer.encode("same text")
    assert "".join(tokenizer.pieces("def f(x):\n    return x")) == "def f(x):\n    return x"


def test_protocol_prompts_are_classified_by_domain():
    assert {n: content.classify(PROTOCOL_PROMPTS[n]) for n in ("code", "code_b", "en_tech", "cn_chat", "cn_essay")} == {
        "code": "code", "code_b": "code", "en_tech": "en_tech", "cn_chat": "cn_chat", "cn_essay": "cn_essay"}


@pytest.mark.parametrize("name", sorted(PROTOCOL_PROMPTS))
def test_protocol_prompts_naturally_run_past_1024_tokens(name):
    engine = Engine(PRESETS["3090x2-tp2-dflash"])
    req = engine.make_request("r", [{"role": "user", "content": PROTOCOL_PROMPTS[name]}], None, 0.0, False)
    assert req.limit >= 1024 and req.finish_reason == "stop"
    capped = engine.make_request("r", [{"role": "user", "content": PROTOCOL_PROMPTS[name]}], 1024, 0.0, False)
    assert capped.limit == 1024 and capped.finish_reason == "length"


def test_a_verify_step_yields_between_one_token_and_the_draft_block():
    engine = Engine(PRESETS["3090x2-tp2-dflash"])
    req = engine.make_request("r", [{"role": "user", "content": PROTOCOL_PROMPTS["code"]}], None, 0.0, False)
    draws = [req.draw_step() for _ in range(2000)]
    assert min(draws) == 1 and max(draws) == 8
    assert sum(draws) / len(draws) == pytest.approx(6.474, rel=0.05)
