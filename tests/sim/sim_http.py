"""A tiny stdlib HTTP client for the simulator tests: requests, SSE parsing, trace and metric
look-ups (a plainly named module, so test files import it unambiguously)."""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from loadlib.scenarios.thread import PROTOCOL_PROMPTS


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    events: list = field(default_factory=list)  # parsed JSON events, "[DONE]" kept as a string
    lines: list[str] = field(default_factory=list)  # every non-empty body line as sent
    bad_lines: list[str] = field(default_factory=list)  # data lines that are not JSON
    body: object = None

    @property
    def deltas(self) -> list[dict]:
        return [e["choices"][0]["delta"] for e in self.events
                if isinstance(e, dict) and e.get("choices")]

    @property
    def text(self) -> str:
        return "".join(d.get("content") or "" for d in self.deltas)

    @property
    def reasoning(self) -> str:
        return "".join(d.get("reasoning_content") or "" for d in self.deltas)

    @property
    def usage(self) -> dict | None:
        return next((e["usage"] for e in self.events if isinstance(e, dict) and e.get("usage")), None)

    @property
    def token_chunks(self) -> list[dict]:
        return [d for d in self.deltas if d.get("content") or d.get("reasoning_content")]

    @property
    def tool_deltas(self) -> list[dict]:
        return [call for d in self.deltas for call in d.get("tool_calls") or ()]

    @property
    def tool_calls(self) -> list[dict]:
        """Streamed calls in index order: the first delta's id and name, the arguments joined."""
        calls: dict[int, dict] = {}
        for delta in self.tool_deltas:
            function = delta["function"]
            call = calls.setdefault(delta["index"], {"id": delta.get("id"), "name": function.get("name"),
                                                     "arguments": ""})
            call["arguments"] += function.get("arguments") or ""
        return [calls[i] for i in sorted(calls)]

    @property
    def body_bytes(self) -> bytes:
        """The SSE body as sent (blank lines restored), for the client's own parser."""
        return b"".join(line.encode() + b"\n\n" for line in self.lines)


def chat_payload(prompt: str = PROTOCOL_PROMPTS["code"], max_tokens: int = 64, stream: bool = True,
                 thinking: bool = False, **extra) -> dict:
    payload = {"model": "sim", "messages": [{"role": "user", "content": prompt}],
               "max_tokens": max_tokens, "temperature": 0, "stream": stream,
               "stream_options": {"include_usage": True},
               "chat_template_kwargs": {"enable_thinking": thinking}}
    payload.update(extra)
    return payload


def request(url: str, method: str, path: str, payload: object = None,
            headers: dict | None = None, conn: http.client.HTTPConnection | None = None) -> Reply:
    """One request; an SSE body is read line by line to its end."""
    parts = urlsplit(url)
    own = conn is None
    conn = conn or http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    body = json.dumps(payload).encode() if payload is not None else None
    conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    reply = Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()})
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        for raw in resp:
            line = raw.decode().rstrip("\n")
            if not line:
                continue
            reply.lines.append(line)
            if line.startswith("data: "):
                data = line[6:]
                try:
                    reply.events.append(data if data == "[DONE]" else json.loads(data))
                except ValueError:
                    reply.bad_lines.append(line)
    else:
        raw = resp.read()
        reply.body = json.loads(raw) if raw and "json" in reply.headers.get("content-type", "") else raw
    if own:
        conn.close()
    return reply


def chat(url: str, payload: dict | None = None, headers: dict | None = None, **kw) -> Reply:
    return request(url, "POST", "/v1/chat/completions", payload or chat_payload(**kw), headers)


def read_trace(path, *ids: str) -> dict[str, dict]:
    """The trace by request id, once it holds `ids` (its line lands just after the last byte)."""
    for _ in range(100):
        trace = {r["request_id"]: r for r in map(json.loads, path.read_text().splitlines())}
        if all(i in trace for i in ids):
            return trace
        time.sleep(0.01)
    raise AssertionError(f"trace lacks {ids}")


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in /metrics")
