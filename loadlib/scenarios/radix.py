"""`radix-hit`: every stream sends the identical prompt, primed first so that the prefix is in
the server's radix cache before anything is measured (the protocol's ideal upper bound)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from loadlib.scenarios.base import ANY, WARM, Job, Scenario, Send
from loadlib.scenarios.corpus import work_item
from loadlib.scenarios.issues import item_prompt
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec
from loadlib.scenarios.thread import PROTOCOL_PROMPTS

DEFAULT_PROMPT = "03-logs-kv-cache-oom-under-burst"
PRIME_TOKENS = 8


def prompt_text(name: str) -> str | None:
    """A protocol prompt or a shipped work item, by name; None if neither exists."""
    if name in PROTOCOL_PROMPTS:
        return PROTOCOL_PROMPTS[name]
    item = work_item(name)
    return item_prompt(item) if item else None


class RadixHit(Scenario):
    kind = "radix-hit"
    same_prompt = True

    def __init__(self, prompt: str = DEFAULT_PROMPT, prime: bool = True,
                 params: dict[str, Any] | None = None, name: str | None = None) -> None:
        super().__init__(params, name)
        text = prompt_text(prompt)
        if text is None:
            raise ValueError(f"unknown prompt {prompt!r}")
        self.messages = [{"role": "user", "content": text}]
        self.prime = prime
        self.cache = WARM if prime else ANY

    def next(self, stream: int) -> Job:
        return self._job(self.name, self.messages)

    def prepare(self, send: Send) -> None:
        if self.prime:  # the prompt is what gets cached, so a few output tokens are enough
            prime = Job(self.name, self.messages, {**self.params, "max_tokens": PRIME_TOKENS}, WARM, kind=self.kind)
            send([prime], "prime")


class RadixHitSpec(ScenarioSpec):
    kind: Literal["radix-hit"]
    prompt: str = DEFAULT_PROMPT  # a protocol prompt name or a shipped work item id
    prime: bool = True

    @field_validator("prompt")
    @classmethod
    def _exists(cls, name: str) -> str:
        if prompt_text(name) is None:
            raise ValueError(f"unknown prompt {name!r} (a protocol prompt name or a work item id)")
        return name


RADIX_HIT = ScenarioKind(RadixHitSpec, lambda spec, name, seed, params: [
    (RadixHit(spec.prompt, spec.prime, params, name), spec.weight)])
