"""Chunk shapes on the wire, one class per server flavour (SGLang, vLLM, llama.cpp).

A shape object is built once per request with every constant part of its chunks pre-serialized,
so a step's chunk is a join of a prefix, the (already JSON-escaped) token text and a suffix.
Methods return complete HTTP chunked-encoding frames. The differences that matter to a client:
- SGLang: explicit nulls everywhere, `reasoning_content`, a separate finish chunk with an empty
  delta, usage chunk with `choices: []`, `[DONE]` (also after a mid-stream error).
- vLLM: unset fields omitted, `delta.reasoning`, `finish_reason` on the last token chunk.
- llama.cpp: role chunk with `content: null`, `:` comment lines, `timings` in the final chunks,
  and no `[DONE]` after a mid-stream error.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from loadlib.sim.httpio import frame

_dumps = orjson.dumps


def _framed(payload: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(payload), payload)


class SglangShape:
    """SGLang's `serving_chat.py` stream (pydantic dumps, so unset fields are explicit nulls)."""

    done_after_error = True
    server_header = b"uvicorn"

    def __init__(self, rid: str, model: str, created: int) -> None:
        self.rid, self.model, self.created = rid, model, created
        head = b'data: {"id":%b,"object":"chat.completion.chunk","created":%d,"model":%b,"choices":[{"index":0,"delta":' % (
            _dumps(rid), created, _dumps(model))
        tail = b',"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
        self._head = head
        self._pre_content = head + b'{"role":null,"content":"'
        self._post_content = b'","reasoning_content":null,"tool_calls":null}' + tail
        self._pre_reasoning = head + b'{"role":null,"content":null,"reasoning_content":"'
        self._post_reasoning = b'","tool_calls":null}' + tail
        self._pre_tool = head + b'{"role":null,"content":null,"reasoning_content":null,"tool_calls":['
        self._post_tool = b']}' + tail

    def role(self) -> bytes:
        return frame(self._head + b'{"role":"assistant","content":"","reasoning_content":null,'
                     b'"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n')

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
        return frame(self._head + b'{"role":null,"content":null,"reasoning_content":null,"tool_calls":null},'
                     b'"logprobs":null,"finish_reason":%b,"matched_stop":%b}],"usage":null}\n\n' % (
                         _dumps(reason), _dumps(matched_stop)))

    def usage(self, prompt: int, completion: int, cached: int | None, reasoning: int,
              timings: dict | None = None) -> bytes:
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                 "completion_tokens": completion,
                 "prompt_tokens_details": None if cached is None else {"cached_tokens": cached},
                 "reasoning_tokens": reasoning}
        return frame(b"data: " + _dumps({"id": self.rid, "object": "chat.completion.chunk",
                                         "created": self.created, "model": self.model,
                                         "choices": [], "usage": usage}) + b"\n\n")

    def done(self) -> bytes:
        return frame(b"data: [DONE]\n\n")

    def error_event(self, message: str, err_type: str, code: int) -> bytes:
        """`create_streaming_error_response`: json.dumps (with its spacing) of a nested error."""
        return frame(b"data: " + json.dumps({"error": {
            "object": "error", "message": message, "type": err_type, "param": None,
            "code": code}}).encode() + b"\n\n")

    @staticmethod
    def error_body(message: str, err_type: str, code: int) -> dict[str, Any]:
        """The flat error body of `create_error_response` (e.g. a prompt that is too long)."""
        return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}

    def response(self, text: str | None, reasoning: str | None, reason: str, matched_stop: int | None,
                 usage: dict[str, Any], timings: dict | None = None,
                 tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        calls = [{"id": c["id"], "index": i, "type": "function", "function": c["function"]}
                 for i, c in enumerate(tool_calls)] if tool_calls else None
        return {"id": self.rid, "object": "chat.completion", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0,
                             "message": {"role": "assistant", "content": text,
                                         "reasoning_content": reasoning, "tool_calls": calls},
                             "logprobs": None, "finish_reason": reason,
                             "matched_stop": matched_stop}],
                "usage": usage, "metadata": {"weight_version": "default"}}


class VllmShape(SglangShape):
    """vLLM's OpenAI server (`exclude_unset` dumps): `delta.reasoning`, finish on the last token
    chunk (with `stop_reason`), no separate finish chunk, and (vLLM with a reasoning parser, since
    it reports them) `usage.completion_tokens_details.reasoning_tokens`, where SGLang puts its
    count at `usage.reasoning_tokens`."""

    def __init__(self, rid: str, model: str, created: int) -> None:
        rid = rid if rid.startswith("chatcmpl-") else f"chatcmpl-{rid}"
        self.rid, self.model, self.created = rid, model, created
        self._head = b'data: {"id":%b,"object":"chat.completion.chunk","created":%d,"model":%b,"choices":[{"index":0,"delta":' % (
            _dumps(rid), created, _dumps(model))

    def role(self) -> bytes:
        return frame(self._head + b'{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n')

    def _delta(self, key: bytes, text: bytes, finish: str | None) -> bytes:
        end = (b'"finish_reason":%b,"stop_reason":null' % _dumps(finish)) if finish else b'"finish_reason":null'
        return _framed(self._head + b'{"%b":"%b"},"logprobs":null,%b}]}\n\n' % (key, text, end))

    def content(self, text: bytes, finish: str | None = None) -> bytes:
        return self._delta(b"content", text, finish)

    def reasoning(self, text: bytes, finish: str | None = None) -> bytes:
        return self._delta(b"reasoning", text, finish)

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
              timings: dict | None = None) -> bytes:
        usage: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                                 "completion_tokens": completion}
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}  # with a reasoning parser
        return frame(b"data: " + _dumps({"id": self.rid, "object": "chat.completion.chunk",
                                         "created": self.created, "model": self.model,
                                         "choices": [], "usage": usage}) + b"\n\n")

    def error_event(self, message: str, err_type: str, code: int) -> bytes:
        return frame(b"data: " + _dumps({"error": {"message": message, "type": err_type,
                                                   "param": None, "code": code}}) + b"\n\n")

    @staticmethod
    def error_body(message: str, err_type: str, code: int) -> dict[str, Any]:
        return {"error": {"message": message, "type": err_type, "param": None, "code": code}}

    def response(self, text: str | None, reasoning: str | None, reason: str, matched_stop: int | None,
                 usage: dict[str, Any], timings: dict | None = None,
                 tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        calls = [{"id": c["id"], "type": "function", "function": c["function"]} for c in tool_calls or ()]
        return {"id": self.rid, "object": "chat.completion", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0,
                             "message": {"role": "assistant", "content": text,
                                         "reasoning": reasoning, "tool_calls": calls},
                             "logprobs": None, "finish_reason": reason, "stop_reason": None}],
                "usage": {**{k: v for k, v in usage.items() if v is not None and k != "reasoning_tokens"},
                          "completion_tokens_details": {"reasoning_tokens": usage.get("reasoning_tokens") or 0}}}


class LlamacppShape(SglangShape):
    """llama.cpp's llama-server: keys in its own order, `content: null` in the role chunk,
    `:` comment lines, `timings` with the finish and usage chunks, no `[DONE]` after an error."""

    done_after_error = False
    server_header = b"llama.cpp"
    FINGERPRINT = "b6000-sim"

    def __init__(self, rid: str, model: str, created: int) -> None:
        rid = rid if rid.startswith("chatcmpl-") else f"chatcmpl-{rid}"
        self.rid, self.model, self.created = rid, model, created
        self._tail = b'"created":%d,"id":%b,"model":%b,"system_fingerprint":%b,"object":"chat.completion.chunk"' % (
            created, _dumps(rid), _dumps(model), _dumps(self.FINGERPRINT))

    def role(self) -> bytes:
        return frame(b": llama-server stream\n\n" + b'data: {"choices":[{"finish_reason":null,"index":0,'
                     b'"delta":{"role":"assistant","content":null}}],%b}\n\n' % self._tail)

    def _delta(self, key: bytes, text: bytes) -> bytes:
        return _framed(b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"%b":"%b"}}],%b}\n\n' % (
            key, text, self._tail))

    def content(self, text: bytes, finish: str | None = None) -> bytes:
        return self._delta(b"content", text)

    def reasoning(self, text: bytes, finish: str | None = None) -> bytes:
        return self._delta(b"reasoning_content", text)

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
              timings: dict | None = None) -> bytes:
        usage = {"completion_tokens": completion, "prompt_tokens": prompt,
                 "total_tokens": prompt + completion}
        return frame(b'data: {"choices":[],%b,"usage":%b,"timings":%b}\n\n' % (
            self._tail, _dumps(usage), _dumps(timings or {})))

    def error_event(self, message: str, err_type: str, code: int) -> bytes:
        return frame(b"data: " + _dumps({"error": {"code": code, "message": message,
                                                   "type": "server_error"}}) + b"\n\n")

    @staticmethod
    def error_body(message: str, err_type: str, code: int) -> dict[str, Any]:
        kind = "exceed_context_size_error" if "context" in message else (
            "invalid_request_error" if code == 400 else "server_error")
        return {"error": {"code": code, "message": message, "type": kind}}

    def response(self, text: str | None, reasoning: str | None, reason: str, matched_stop: int | None,
                 usage: dict[str, Any], timings: dict | None = None,
                 tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning:
            message["reasoning_content"] = reasoning
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
                     predicted_s: float) -> dict[str, float]:
    """llama-server's `timings` object."""
    prompt_ms, predicted_ms = prompt_s * 1e3, predicted_s * 1e3
    return {"cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
            "prompt_per_second": prompt_n / prompt_s if prompt_s > 0 else 0.0,
            "predicted_n": predicted_n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
            "predicted_per_second": predicted_n / predicted_s if predicted_s > 0 else 0.0}


SHAPES = {"sglang": SglangShape, "vllm": VllmShape, "llamacpp": LlamacppShape}
