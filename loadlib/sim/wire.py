"""Chunk shapes on the wire, one emitter class per server flavour (SGLang, vLLM, llama.cpp).

Each emitter is built from its flavour in `loadlib/wire/flavours.py` (its delta keys, error
shapes and `Server` header) and adds the serialisation details the client does not read.

A shape object is built once per request with every constant part of its chunks pre-serialized,
so a step's chunk is a join of a prefix, the (already JSON-escaped) token text and a suffix.
Methods return complete HTTP chunked-encoding frames. The differences that matter to a client:
- SGLang: explicit nulls everywhere, `reasoning_content`, a separate finish chunk with an empty
  delta, usage chunk with `choices: []`, `[DONE]` (also after a mid-stream error).
- vLLM: unset fields omitted, `delta.reasoning`, `finish_reason` on the last token chunk.
- llama.cpp: role chunk with `content: null`, `:` comment lines, `timings` in the final chunks,
  and no `[DONE]` after a mid-stream error.

Each also gives its account of the request's speculative decoding (`SpecCounts`) the way its
server does, read by the client's `loadlib.wire.sse.spec_account`: llama.cpp in `timings` (every
request that drafted), SGLang in an `sglext` chunk before the usage chunk (asked by the request's
`return_spec_tokens_details`), vLLM in the usage chunk's `metrics` (as a vLLM started with
`--per-request-spec-decode-metrics summary`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from loadlib.sim.httpio import frame
from loadlib.wire.flavours import ERROR_KEY, LLAMACPP, SGLANG, VLLM, Flavour

_dumps = orjson.dumps


def _framed(payload: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(payload), payload)


@dataclass(frozen=True)
class SpecCounts:
    """One request's speculative decoding as the engine counted it (`engine.SimRequest`): the
    same steps the /metrics counters add up, so the two accounts agree."""

    verify_steps: int
    drafts_per_step: int  # the draft tokens each verify step checks (draft tokens - 1)
    accepted: int
    histogram: tuple[int, ...]  # verify steps that accepted exactly 0, 1, ... drafts
    completion_tokens: int

    @property
    def draft_tokens(self) -> int:
        return self.verify_steps * self.drafts_per_step


class _Emitter:
    """What every emitter takes from its flavour, set once per class."""

    flavour: Flavour
    content_key: bytes
    reasoning_key: bytes
    done_after_error: bool
    server_header: bytes
    sends_timings = False  # llama.cpp's `timings` object in the final chunks

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.content_key = cls.flavour.delta.content.encode()
        cls.reasoning_key = cls.flavour.delta.reasoning.encode()
        cls.done_after_error = cls.flavour.errors.done_after_stream_error
        cls.server_header = cls.flavour.server_header.encode()

    @classmethod
    def error_object(cls, message: str, err_type: str, code: int) -> dict[str, Any]:
        """The flavour's error object: its fields, in its order."""
        values = {"object": "error", "message": message, "type": err_type, "param": None, "code": code}
        return {name: values[name] for name in cls.flavour.errors.fields}

    def error_event(self, message: str, err_type: str, code: int) -> bytes:
        """An error inside the stream: `data: {"error": {...}}`."""
        return frame(b"data: " + _dumps({ERROR_KEY: self.error_object(message, err_type, code)}) + b"\n\n")

    @classmethod
    def error_body(cls, message: str, err_type: str, code: int) -> dict[str, Any]:
        """The body of a non-200 answer (e.g. a prompt that is too long), flat or nested."""
        error = cls.error_object(message, err_type, code)
        return {ERROR_KEY: error} if cls.flavour.errors.nested_in_body else error


class SglangShape(_Emitter):
    """SGLang's `serving_chat.py` stream (pydantic dumps, so unset fields are explicit nulls)."""

    flavour = SGLANG

    def __init__(self, rid: str, model: str, created: int) -> None:
        self.rid, self.model, self.created = rid, model, created
        head = b'data: {"id":%b,"object":"chat.completion.chunk","created":%d,"model":%b,"choices":[{"index":0,"delta":' % (
            _dumps(rid), created, _dumps(model))
        tail = b',"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
        content, reasoning = self.content_key, self.reasoning_key
        self._head = head
        self._pre_content = head + b'{"role":null,"%b":"' % content
        self._post_content = b'","%b":null,"tool_calls":null}' % reasoning + tail
        self._pre_reasoning = head + b'{"role":null,"%b":null,"%b":"' % (content, reasoning)
        self._post_reasoning = b'","tool_calls":null}' + tail
        self._pre_tool = head + b'{"role":null,"%b":null,"%b":null,"tool_calls":[' % (content, reasoning)
        self._post_tool = b']}' + tail

    def role(self) -> bytes:
        return frame(self._head + b'{"role":"assistant","%b":"","%b":null,"tool_calls":null},"logprobs":null,'
                     b'"finish_reason":null,"matched_stop":null}],"usage":null}\n\n' % (
                         self.content_key, self.reasoning_key))

    def content(self, text: bytes, finish: str | None = None) -> bytes:
        return _framed(self._pre_content + text + self._post_content)

    def reasoning(self, text: bytes, finish: str | None = None) -> bytes:
        return _framed(self._pre_reasoning + text + self._post_reasoning)

    def tool_name(self, index: int, call_id: str, name: str) -> bytes:
        """A tool call's first delta: its id, type and name (ToolCall dumps every field)."""
        return _framed(self._pre_tool + b'{"id":%b,"index":%d,"type":"function","function":{"name":%b,'
                       b'"arguments":""}}' % (_dumps(call_id), index, _dumps(name)) + self._post_tool)

    def tool_arguments(self, index: int, text: bytes) -> bytes:
        """A fragment of a tool call's arguments JSON (`text` already escaped)."""
        return _framed(self._pre_tool + b'{"id":null,"index":%d,"type":"function","function":{"name":null,'
                       b'"arguments":"%b"}}' % (index, text) + self._post_tool)

    def tool_finish(self, reason: str, matched_stop: int | None, timings: dict | None = None) -> bytes:
        """The finish after tool-call deltas (SGLang: its usual finish chunk)."""
        return self.finish(reason, matched_stop, timings)

    def finish(self, reason: str, matched_stop: int | None, timings: dict | None = None) -> bytes:
        return frame(self._head + b'{"role":null,"%b":null,"%b":null,"tool_calls":null},'
                     b'"logprobs":null,"finish_reason":%b,"matched_stop":%b}],"usage":null}\n\n' % (
                         self.content_key, self.reasoning_key, _dumps(reason), _dumps(matched_stop)))

    def usage(self, prompt: int, completion: int, cached: int | None, reasoning: int,
              timings: dict | None = None, spec: SpecCounts | None = None) -> bytes:
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                 "completion_tokens": completion,
                 "prompt_tokens_details": None if cached is None else {"cached_tokens": cached},
                 "reasoning_tokens": reasoning}
        return frame(b"data: " + _dumps({"id": self.rid, "object": "chat.completion.chunk",
                                         "created": self.created, "model": self.model,
                                         "choices": [], "usage": usage}) + b"\n\n")

    def spec_chunk(self, spec: SpecCounts) -> bytes:
        """SGLang's `sglext` chunk (serving_chat.py: after the finish chunk, before the usage
        chunk), with `SpecTokensDetails` (protocol.py) as `spec_tokens_details_from_meta_info` and
        the tokenizer manager fill it (SGLang 0.5.23): the accept length is completion tokens per
        verify step, the histogram as long as its highest count needs."""
        histogram = list(spec.histogram)
        while histogram and not histogram[-1]:
            histogram.pop()
        details = {
            "spec_accept_rate": spec.accepted / spec.draft_tokens if spec.draft_tokens else 0.0,
            "spec_accept_length": spec.completion_tokens / spec.verify_steps if spec.verify_steps else 0.0,
            "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
            "spec_num_correct_drafts": spec.accepted, "spec_num_proposed_drafts": spec.draft_tokens,
            "spec_verify_ct": spec.verify_steps, "spec_correct_drafts_histogram": histogram,
            "spec_cap_lens_histogram": []}
        return frame(b"data: " + _dumps({"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
                                         "model": self.model, "choices": [], "usage": None,
                                         "sglext": {"spec_tokens_details": details}}) + b"\n\n")

    def done(self) -> bytes:
        return frame(b"data: [DONE]\n\n")

    def error_event(self, message: str, err_type: str, code: int) -> bytes:
        """`create_streaming_error_response`: json.dumps (with its spacing) of a nested error."""
        return frame(b"data: " + json.dumps({ERROR_KEY: self.error_object(message, err_type, code)}).encode()
                     + b"\n\n")

    def response(self, text: str | None, reasoning: str | None, reason: str, matched_stop: int | None,
                 usage: dict[str, Any], timings: dict | None = None,
                 tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        calls = [{"id": c["id"], "index": i, "type": "function", "function": c["function"]}
                 for i, c in enumerate(tool_calls)] if tool_calls else None
        return {"id": self.rid, "object": "chat.completion", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0,
                             "message": {"role": "assistant", self.flavour.delta.content: text,
                                         self.flavour.delta.reasoning: reasoning, "tool_calls": calls},
                             "logprobs": None, "finish_reason": reason,
                             "matched_stop": matched_stop}],
                "usage": usage, "metadata": {"weight_version": "default"}}


class VllmShape(SglangShape):
    """vLLM's OpenAI server (`exclude_unset` dumps): `delta.reasoning`, finish on the last token
    chunk (with `stop_reason`), no separate finish chunk, and (vLLM with a reasoning parser, since
    it reports them) `usage.completion_tokens_details.reasoning_tokens`, where SGLang puts its
    count at `usage.reasoning_tokens`."""

    flavour = VLLM

    def __init__(self, rid: str, model: str, created: int) -> None:
        rid = rid if rid.startswith("chatcmpl-") else f"chatcmpl-{rid}"
        self.rid, self.model, self.created = rid, model, created
        self._head = b'data: {"id":%b,"object":"chat.completion.chunk","created":%d,"model":%b,"choices":[{"index":0,"delta":' % (
            _dumps(rid), created, _dumps(model))

    def role(self) -> bytes:
        return frame(self._head + b'{"role":"assistant","%b":""},"logprobs":null,"finish_reason":null}]}\n\n'
                     % self.content_key)

    def _delta(self, key: bytes, text: bytes, finish: str | None) -> bytes:
        end = (b'"finish_reason":%b,"stop_reason":null' % _dumps(finish)) if finish else b'"finish_reason":null'
        return _framed(self._head + b'{"%b":"%b"},"logprobs":null,%b}]}\n\n' % (key, text, end))

    def content(self, text: bytes, finish: str | None = None) -> bytes:
        return self._delta(self.content_key, text, finish)

    def reasoning(self, text: bytes, finish: str | None = None) -> bytes:
        return self._delta(self.reasoning_key, text, finish)

    def tool_name(self, index: int, call_id: str, name: str) -> bytes:
        return _framed(self._head + b'{"tool_calls":[{"id":%b,"type":"function","index":%d,"function":'
                       b'{"name":%b}}]},"logprobs":null,"finish_reason":null}]}\n\n' % (
                           _dumps(call_id), index, _dumps(name)))

    def tool_arguments(self, index: int, text: bytes) -> bytes:
        return _framed(self._head + b'{"tool_calls":[{"index":%d,"function":{"arguments":"%b"}}]},'
                       b'"logprobs":null,"finish_reason":null}]}\n\n' % (index, text))

    def tool_finish(self, reason: str, matched_stop: int | None, timings: dict | None = None) -> bytes:
        """vLLM sends an empty delta with the finish when the tool parser had nothing left."""
        return frame(self._head + b'{},"logprobs":null,"finish_reason":%b,"stop_reason":null}]}\n\n'
                     % _dumps(reason))

    def finish(self, reason: str, matched_stop: int | None, timings: dict | None = None) -> bytes:
        return b""

    def usage(self, prompt: int, completion: int, cached: int | None, reasoning: int,
              timings: dict | None = None, spec: SpecCounts | None = None) -> bytes:
        """With `spec`, the per-request metrics a vLLM started with `--per-request-spec-decode-metrics
        summary` puts in its usage chunk (chat_completion/serving.py; `RequestSpecDecodeMetrics.to_dict`
        in v1/metrics/stats.py, vLLM 0.34)."""
        usage: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                                 "completion_tokens": completion}
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}  # with a reasoning parser
        chunk = {"id": self.rid, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                 "choices": [], "usage": usage}
        if spec is not None:
            chunk["metrics"] = {"speculative_decoding": {
                "mean_acceptance_length": 1 + spec.accepted / spec.verify_steps if spec.verify_steps else 1.0,
                "draft_acceptance_rate": spec.accepted / spec.draft_tokens if spec.draft_tokens else 0.0,
                "acceptance_histogram": list(spec.histogram), "num_spec_steps": spec.verify_steps,
                "num_accepted_draft_tokens": spec.accepted, "num_draft_tokens": spec.draft_tokens,
                "num_spec_tokens": spec.drafts_per_step}}
        return frame(b"data: " + _dumps(chunk) + b"\n\n")

    def spec_chunk(self, spec: SpecCounts) -> bytes:
        return b""  # in the usage chunk

    error_event = _Emitter.error_event  # orjson's dumps, no spacing

    def response(self, text: str | None, reasoning: str | None, reason: str, matched_stop: int | None,
                 usage: dict[str, Any], timings: dict | None = None,
                 tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        calls = [{"id": c["id"], "type": "function", "function": c["function"]} for c in tool_calls or ()]
        return {"id": self.rid, "object": "chat.completion", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0,
                             "message": {"role": "assistant", self.flavour.delta.content: text,
                                         self.flavour.delta.reasoning: reasoning, "tool_calls": calls},
                             "logprobs": None, "finish_reason": reason, "stop_reason": None}],
                "usage": {**{k: v for k, v in usage.items() if v is not None and k != "reasoning_tokens"},
                          "completion_tokens_details": {"reasoning_tokens": usage.get("reasoning_tokens") or 0}}}


class LlamacppShape(SglangShape):
    """llama.cpp's llama-server: keys in its own order, `content: null` in the role chunk,
    `:` comment lines, `timings` with the finish and usage chunks, no `[DONE]` after an error."""

    flavour = LLAMACPP
    sends_timings = True
    FINGERPRINT = "b6000-sim"

    def __init__(self, rid: str, model: str, created: int) -> None:
        rid = rid if rid.startswith("chatcmpl-") else f"chatcmpl-{rid}"
        self.rid, self.model, self.created = rid, model, created
        self._tail = b'"created":%d,"id":%b,"model":%b,"system_fingerprint":%b,"object":"chat.completion.chunk"' % (
            created, _dumps(rid), _dumps(model), _dumps(self.FINGERPRINT))

    def role(self) -> bytes:
        return frame(b": llama-server stream\n\n" + b'data: {"choices":[{"finish_reason":null,"index":0,'
                     b'"delta":{"role":"assistant","%b":null}}],%b}\n\n' % (self.content_key, self._tail))

    def _delta(self, key: bytes, text: bytes) -> bytes:
        return _framed(b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"%b":"%b"}}],%b}\n\n' % (
            key, text, self._tail))

    def content(self, text: bytes, finish: str | None = None) -> bytes:
        return self._delta(self.content_key, text)

    def reasoning(self, text: bytes, finish: str | None = None) -> bytes:
        return self._delta(self.reasoning_key, text)

    def tool_name(self, index: int, call_id: str, name: str) -> bytes:
        return _framed(b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":%d,'
                       b'"id":%b,"type":"function","function":{"name":%b,"arguments":""}}]}}],%b}\n\n' % (
                           index, _dumps(call_id), _dumps(name), self._tail))

    def tool_arguments(self, index: int, text: bytes) -> bytes:
        return _framed(b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":%d,'
                       b'"function":{"arguments":"%b"}}]}}],%b}\n\n' % (index, text, self._tail))

    def finish(self, reason: str, matched_stop: int | None, timings: dict | None = None) -> bytes:
        return frame(b'data: {"choices":[{"finish_reason":%b,"index":0,"delta":{}}],%b,"timings":%b}\n\n' % (
            _dumps(reason), self._tail, _dumps(timings or {})))

    def usage(self, prompt: int, completion: int, cached: int | None, reasoning: int,
              timings: dict | None = None, spec: SpecCounts | None = None) -> bytes:
        usage = {"completion_tokens": completion, "prompt_tokens": prompt,
                 "total_tokens": prompt + completion}
        return frame(b'data: {"choices":[],%b,"usage":%b,"timings":%b}\n\n' % (
            self._tail, _dumps(usage), _dumps(timings or {})))

    def spec_chunk(self, spec: SpecCounts) -> bytes:
        return b""  # in `timings`

    def error_event(self, message: str, err_type: str, code: int) -> bytes:
        """Every error inside a stream is a `server_error`."""
        return _Emitter.error_event(self, message, "server_error", code)

    @classmethod
    def error_body(cls, message: str, err_type: str, code: int) -> dict[str, Any]:
        """llama-server's own error types in place of the OpenAI exception names."""
        kind = "exceed_context_size_error" if "context" in message else (
            "invalid_request_error" if code == 400 else "server_error")
        return super().error_body(message, kind, code)

    def response(self, text: str | None, reasoning: str | None, reason: str, matched_stop: int | None,
                 usage: dict[str, Any], timings: dict | None = None,
                 tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", self.flavour.delta.content: text}
        if reasoning:
            message[self.flavour.delta.reasoning] = reasoning
        if tool_calls:
            message["tool_calls"] = [{"type": "function", "function": c["function"], "id": c["id"]}
                                     for c in tool_calls]
        return {"choices": [{"finish_reason": reason, "index": 0, "message": message}],
                "created": self.created, "model": self.model,
                "system_fingerprint": self.FINGERPRINT, "object": "chat.completion",
                "usage": {"completion_tokens": usage["completion_tokens"],
                          "prompt_tokens": usage["prompt_tokens"],
                          "total_tokens": usage["total_tokens"]},
                "id": self.rid, "timings": timings or {}}


def llamacpp_timings(prompt_n: int, cache_n: int, prompt_s: float, predicted_n: int,
                     predicted_s: float, spec: SpecCounts | None = None) -> dict[str, float]:
    """llama-server's `timings` object (`server_slot_stats::to_json`: the draft tokens and those
    accepted only for a request that drafted)."""
    prompt_ms, predicted_ms = prompt_s * 1e3, predicted_s * 1e3
    timings = {"cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
               "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
               "prompt_per_second": prompt_n / prompt_s if prompt_s > 0 else 0.0,
               "predicted_n": predicted_n, "predicted_ms": predicted_ms,
               "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
               "predicted_per_second": predicted_n / predicted_s if predicted_s > 0 else 0.0}
    if spec is not None and spec.draft_tokens:
        timings.update(draft_n=spec.draft_tokens, draft_n_accepted=spec.accepted)
    return timings


SHAPES: dict[str, type[SglangShape]] = {  # flavour name -> its emitter; `--flavor` offers these
    shape.flavour.name: shape for shape in (SglangShape, VllmShape, LlamacppShape)}
