"""The server's account of each request's speculative decoding, as each server sends it at the end of
its stream, read into the record's `spec_*` fields; and the request field that asks SGLang for it."""

from __future__ import annotations

import argparse

import pytest

from loadlib.run.config import request_settings
from loadlib.wire.client import SPEC_DETAILS_FIELD, ChatSettings, chat_body
from loadlib.wire.sse import SpecAccount, parse_stream, spec_account
from tests.wire.test_sse import sse

TOKEN = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "ab"}}]}
FINISH = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
USAGE = {"prompt_tokens": 13, "completion_tokens": 64, "total_tokens": 77}

# A real llama-server's last chunk (llama.cpp b1-0c1e570, a q8_0 draft, --spec-draft-n-max 8
# --spec-synth-len 4.0), whose /metrics then counted 15 drafts (verify steps), 48 accepted: 64 tokens
# are the prompt pass's one, 15 of the target's own and 48 accepted drafts
LLAMACPP_LAST = {
    "choices": [], "created": 1796626878, "id": "chatcmpl-4Ju1AjyWY7LOYfrHn0RL9fToiCd6tFl8", "model": "tiny-llama",
    "system_fingerprint": "b1-0c1e570", "object": "chat.completion.chunk",
    "usage": {**USAGE, "prompt_tokens_details": {"cached_tokens": 0}},
    "timings": {"cache_n": 0, "prompt_n": 13, "prompt_ms": 53.099, "prompt_per_token_ms": 4.084538461538461,
                "prompt_per_second": 244.8257029322586, "predicted_n": 64, "predicted_ms": 1386.597,
                "predicted_per_token_ms": 22.00947619047619, "predicted_per_second": 45.43497497831021,
                "draft_n": 119, "draft_n_accepted": 48}}
# SGLang 0.5.23 (ChatCompletionStreamResponse.model_dump_json of its sglext chunk, before the usage chunk)
SGLANG_SGLEXT = {
    "id": "5d56", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": None,
    "sglext": {"spec_tokens_details": {
        "spec_accept_rate": 0.357, "spec_accept_length": 3.56, "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": 45, "spec_num_proposed_drafts": 126, "spec_verify_ct": 18,
        "spec_correct_drafts_histogram": [2, 5, 4, 2, 2, 1, 1, 1], "spec_cap_lens_histogram": []}}}
# vLLM with --per-request-spec-decode-metrics summary: its usage chunk (the example of vLLM's PR #48915)
VLLM_USAGE = {
    "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": USAGE,
    "metrics": {"speculative_decoding": {
        "mean_acceptance_length": 1.2325581395348837, "draft_acceptance_rate": 0.07751937984496124,
        "acceptance_histogram": [39, 1, 0, 3], "num_spec_steps": 43, "num_accepted_draft_tokens": 10,
        "num_draft_tokens": 129, "num_spec_tokens": 3}}}


@pytest.mark.parametrize("ending, account", [
    ([FINISH, LLAMACPP_LAST], SpecAccount(15, 119, 48, None)),
    ([FINISH, SGLANG_SGLEXT, {**VLLM_USAGE, "metrics": None}], SpecAccount(18, 126, 45, "2,5,4,2,2,1,1,1")),
    ([FINISH, VLLM_USAGE], SpecAccount(43, 129, 10, "39,1,0,3")),
], ids=["llama.cpp", "sglang", "vllm"])
def test_each_servers_last_chunks_give_its_account(ending, account):
    stream = parse_stream(sse(TOKEN, TOKEN, *ending, "[DONE]"), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert stream.spec == account and stream.error is None and stream.completion_tokens == 64


def test_a_stream_without_an_account_has_none():
    plain_llamacpp = {**LLAMACPP_LAST, "timings": {"predicted_n": 64, "predicted_ms": 1386.6}}  # no drafting
    for ending in ([FINISH, {**VLLM_USAGE, "metrics": None}], [FINISH, plain_llamacpp]):
        stream = parse_stream(sse(TOKEN, *ending, "[DONE]"), [1.0, 2.0, 3.0, 4.0])
        assert stream.spec is None and stream.error is None


@pytest.mark.parametrize("event", [
    {**LLAMACPP_LAST, "timings": {"predicted_n": 64, "draft_n": "119", "draft_n_accepted": 48}},
    {**LLAMACPP_LAST, "timings": {"predicted_n": 10, "draft_n": 119, "draft_n_accepted": 48}},  # more than it made
    {"choices": [], "sglext": {"spec_tokens_details": {"spec_verify_ct": -1, "spec_num_proposed_drafts": 0,
                                                       "spec_num_correct_drafts": 0}}},
    {"choices": [], "sglext": "spec"}, {"choices": [], "metrics": {"speculative_decoding": [1, 2]}},
])
def test_a_malformed_account_is_left_out_and_the_request_stands(event):
    assert spec_account(event) is None
    stream = parse_stream(sse(TOKEN, FINISH, event, {**VLLM_USAGE, "metrics": None}, "[DONE]"), [1.0, 2.0, 3.0, 4.0, 5.0])
    assert stream.spec is None and stream.error is None


def test_a_malformed_histogram_keeps_the_counts():
    event = {"choices": [], "metrics": {"speculative_decoding": {**VLLM_USAGE["metrics"]["speculative_decoding"],
                                                                 "acceptance_histogram": [39, "1"]}}}
    assert spec_account(event) == SpecAccount(43, 129, 10, None)


def test_only_chunks_without_choices_are_read():
    """Token chunks pay nothing: llama-server's `timings_per_token` puts timings in every chunk, and
    only the last one's (no choices) is the request's account."""
    per_token = {**TOKEN, "timings": {**LLAMACPP_LAST["timings"], "draft_n": 8, "draft_n_accepted": 3}}
    stream = parse_stream(sse(per_token, per_token, LLAMACPP_LAST, "[DONE]"), [1.0, 2.0, 3.0, 4.0])
    assert stream.spec == SpecAccount(15, 119, 48, None)


def test_the_request_asks_for_the_account_only_with_the_setting():
    messages = [{"role": "user", "content": "hi"}]
    assert SPEC_DETAILS_FIELD not in chat_body(ChatSettings(model="m"), messages)
    assert chat_body(ChatSettings(model="m", spec_details=True), messages)[SPEC_DETAILS_FIELD] is True


@pytest.mark.parametrize("option, owned_by, asks", [
    ("auto", "sglang", True), ("auto", "vllm", False), ("auto", "llamacpp", False), ("auto", None, False),
    ("on", "vllm", True), ("off", "sglang", False),
])
def test_spec_details_auto_asks_sglang_alone(option, owned_by, asks):
    opts = argparse.Namespace(max_tokens=512, thinking="off", request_timeout=900.0, insecure=False,
                              spec_details=option)
    assert request_settings(None, opts, "m", None, owned_by).spec_details is asks
