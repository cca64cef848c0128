"""Chunk shapes on the wire, one class per server flavour.

A shape object is built once per request with every constant part of its chunks pre-serialized,
so a step's chunk is a join of a prefix, the (already JSON-escaped) token text and a suffix.
Each method returns complete HTTP chunked-encoding frames.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from loadlib.sim.httpio import END_CHUNKS, frame


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


class SglangShape:
    """SGLang's `serving_chat.py` stream: role chunk with the first token, one chunk per step
    (pydantic dumps, so absent fields are explicit nulls), a finish chunk with an empty delta,
    the usage chunk with empty choices, then `[DONE]`."""

    done_after_error = True

    def __init__(self, rid: str, model: str, created: int) -> None:
        self.rid, self.model, self.created = rid, model, created
        head = b'data: {"id":%b,"object":"chat.completion.chunk","created":%d,"model":%b,"choices":[{"index":0,"delta":' % (
            _dumps(rid), created, _dumps(model))
        tail = b',"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
        self._pre_content = head + b'{"role":null,"content":"'
        self._post_content = b'","reasoning_content":null,"tool_calls":null}' + tail
        self._pre_reasoning = head + b'{"role":null,"content":null,"reasoning_content":"'
        self._post_reasoning = b'","tool_calls":null}' + tail
        self._head = head

    def role(self) -> bytes:
        return frame(self._head + b'{"role":"assistant","content":"","reasoning_content":null,'
                     b'"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n')

    def content(self, text: bytes, last: bool = False, finish: str | None = None) -> bytes:
        payload = self._pre_content + text + self._post_content
        return b"%x\r\n%b\r\n" % (len(payload), payload)

    def reasoning(self, text: bytes, last: bool = False, finish: str | None = None) -> bytes:
        payload = self._pre_reasoning + text + self._post_reasoning
        return b"%x\r\n%b\r\n" % (len(payload), payload)

    def finish(self, reason: str, matched_stop: int | None) -> bytes:
        return frame(self._head + b'{"role":null,"content":null,"reasoning_content":null,"tool_calls":null},'
                     b'"logprobs":null,"finish_reason":%b,"matched_stop":%b}],"usage":null}\n\n' % (
                         _dumps(reason), _dumps(matched_stop)))

    def usage(self, prompt: int, completion: int, cached: int | None, reasoning: int) -> bytes:
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                 "completion_tokens": completion,
                 "prompt_tokens_details": None if cached is None else {"cached_tokens": cached},
                 "reasoning_tokens": reasoning}
        return frame(b"data: " + _dumps({"id": self.rid, "object": "chat.completion.chunk",
                                         "created": self.created, "model": self.model,
                                         "choices": [], "usage": usage}) + b"\n\n")

    def done(self) -> bytes:
        return frame(b"data: [DONE]\n\n") + END_CHUNKS

    def error_event(self, message: str, err_type: str, code: int) -> bytes:
        """SGLang's mid-stream error (`create_streaming_error_response`, json.dumps spacing)."""
        return frame(b"data: " + json.dumps({"error": {
            "object": "error", "message": message, "type": err_type, "param": None,
            "code": code}}).encode() + b"\n\n")

    def response(self, text: str, reasoning: str | None, reason: str, matched_stop: int | None,
                 usage: dict[str, Any]) -> dict[str, Any]:
        """The non-streaming body."""
        return {"id": self.rid, "object": "chat.completion", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0,
                             "message": {"role": "assistant", "content": text,
                                         "reasoning_content": reasoning, "tool_calls": None},
                             "logprobs": None, "finish_reason": reason,
                             "matched_stop": matched_stop}],
                "usage": usage, "metadata": {"weight_version": "default"}}


def sglang_error(message: str, err_type: str = "BadRequestError", code: int = 400) -> dict[str, Any]:
    """SGLang's flat error body (`create_error_response`), e.g. for a prompt that is too long."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


SHAPES = {"sglang": SglangShape}
