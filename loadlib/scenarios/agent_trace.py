"""Scenario kind `agent-trace`: coding-agent sessions from a cc-traces file, which the `sessions`
load mode replays (`loadlib.modes.sessions`).

The table names the trace (`path`, beside the profile, read and checked with the profile: a bad
trace stops the run before any load with `cc_traces`' one line), how its gaps are played
(`think_time_scale`, `idle_cap_s`), whether each copy of a conversation gets its own texts
(`bust_cache`) and the sticky session headers every request carries (`session_headers`: by
default SGLang's model gateway's routing key, which its `manual` and `consistent_hashing` policies
read, and `X-Session-Id`, which NVIDIA Dynamo's frontend and most generic routers read). The
scenario builds each request's prompt (`AgentPrompts`) and counts, as it sends them, the prompt
tokens an infinite prefix cache would hold for it: its leading hash ids already sent in their
namespace (`ideal_prefix_hits`' rule, in the order the requests go out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import Field, NonNegativeFloat, PositiveFloat, PrivateAttr, ValidationInfo, field_validator, model_validator

from loadlib.scenarios.agent_prompts import AgentPrompts
from loadlib.scenarios.base import ANY, Job, Scenario, Send
from loadlib.scenarios.cc_traces import Conversation, Entry, SubAgent, TraceFormatError, Turn, read_traces
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec, beside_the_profile

AGENT_TRACE_KIND = "agent-trace"
# SGLang's model gateway (sglang-router, SMG): its manual and consistent_hashing policies; NVIDIA
# Dynamo's frontend and generic routers (a header-hash rule): X-Session-Id
SESSION_HEADERS = ("X-SMG-Routing-Key", "X-Session-Id")
_NOT_IN_A_KEY = re.compile(r"[^A-Za-z0-9._-]")  # Dynamo accepts ^[a-zA-Z0-9._-]+$, at most 256


class AgentTraceSpec(ScenarioSpec):
    """Coding-agent sessions from a cc-traces file or folder (`path`, relative to the profile)."""

    kind: Literal["agent-trace"]
    path: str
    think_time_scale: NonNegativeFloat = 1.0  # 0.01: a 10-minute session's gaps in 6 s
    idle_cap_s: PositiveFloat = 60.0  # a recorded gap longer than this is played as this (before the scale)
    bust_cache: bool = False  # each copy of a conversation its own texts: lanes replaying one trace share no cache
    session_headers: list[str] = Field(default_factory=lambda: list(SESSION_HEADERS))
    _conversations: list[Conversation] = PrivateAttr()

    @field_validator("path")
    @classmethod
    def _beside_the_profile(cls, path: str, info: ValidationInfo) -> str:
        return beside_the_profile(path, info)

    @model_validator(mode="after")
    def _load(self) -> "AgentTraceSpec":
        try:
            self._conversations = read_traces(Path(self.path))
        except TraceFormatError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def conversations(self) -> list[Conversation]:
        return self._conversations


@dataclass(frozen=True, slots=True)
class AgentTurn:
    """One request of a conversation's copy, as sent: its job, its headers, its ideal hit."""

    job: Job
    headers: dict[str, str]
    ideal_cached_tokens: int
    in_tokens: int
    out_tokens: int


class AgentTrace(Scenario):
    """A trace's conversations and their prompts on one process (salted by the run)."""

    kind = AGENT_TRACE_KIND

    def __init__(self, spec: AgentTraceSpec, name: str, params: dict[str, Any] | None = None,
                 salt: str = "") -> None:
        super().__init__(params, name)
        self.spec = spec
        self.conversations = spec.conversations
        self.prompts = AgentPrompts(salt, spec.bust_cache, self.params)
        self._sent: dict[tuple[str, str], set[int]] = {}  # (target, namespace) -> hash ids sent so far

    def next(self, stream: int) -> Job:
        raise TypeError("agent sessions are played by the sessions mode (turn)")

    def prepare(self, send: Send) -> None:
        """The prompt builder's probes (unmeasured), before any session."""
        self.prompts.prepare(send)

    def turn(self, conversation: Conversation, turn: Turn, copy: int, target: str = "") -> AgentTurn:
        """The request of `turn` in `copy` of `conversation`, and its ideal hit: the hash ids
        sent before it in its namespace to the same server (`target`, an A/B run's label) are
        counted now, so call it when the request goes out."""
        prompt = self.prompts.prompt(conversation, turn, copy)
        ids = turn.request.hash_ids
        sent = self._sent.setdefault((target, self.prompts.namespace(conversation, copy)), set())
        k = 0
        while k < len(ids) and ids[k] in sent:
            k += 1
        sent.update(ids)
        job = Job(self.name, prompt.messages, prompt.params, ANY, turn.index, self.kind)
        return AgentTurn(job, session_headers(self.spec.session_headers, conversation.id, copy),
                         k * conversation.block_size, turn.request.in_tokens, turn.request.out_tokens)


def session_headers(names: Sequence[str], conversation: str, copy: int) -> dict[str, str]:
    """The sticky routing headers of a conversation's copy: one key, the same in every header."""
    key = _NOT_IN_A_KEY.sub("-", f"{conversation}.{copy}")[-256:]
    return {name: key for name in names}


def lane_width(entries: Sequence[Entry]) -> int:
    """The most requests of these entries in flight at once when played as agents do: an agent
    waits for each request, and for the sub-agents it spawned before its next request; sibling
    sub-agents (spawned one after another) run together."""
    widest, siblings = 1, 0
    for entry in entries:
        if isinstance(entry, SubAgent):
            siblings += lane_width(entry.requests)
        else:
            widest, siblings = max(widest, siblings), 0
    return max(widest, siblings)


AGENT_TRACE = ScenarioKind(AgentTraceSpec, lambda spec, name, seed, params: [
    (AgentTrace(spec, name, params), spec.weight)])
