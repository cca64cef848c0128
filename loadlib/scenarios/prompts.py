"""`protocol`: the thread's fixed prompts, verbatim, in the protocol's cells.

The rounds mode gives the thread's plan (single stream per scenario, then per N the "same
prompt" and "different prompts" cells); a free-running mode cycles through the prompts.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

from pydantic import Field, field_validator

from loadlib.scenarios.base import SINGLE, Cell, Job, Scenario, round_cell_name
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec
from loadlib.scenarios.thread import PROTOCOL_PROMPTS, SAME_PROMPT, SINGLE_STREAM_SCENARIOS, different_prompts


class PromptSet(Scenario):
    """Named protocol prompts, one per stream of a round."""

    kind = "protocol"

    def __init__(self, names: tuple[str, ...], params: dict[str, Any] | None = None,
                 cache: str | None = None) -> None:
        super().__init__(params)
        self.names = names
        self.same_prompt = len(set(names)) == 1
        self.cache = cache or self.cache

    def label(self, stream: int) -> str:
        return self.names[stream % len(self.names)]

    def next(self, stream: int) -> Job:
        name = self.label(stream)
        return self._job(name, [{"role": "user", "content": PROTOCOL_PROMPTS[name]}])


class ProtocolScenario(Scenario):
    """The protocol's prompt set: `single` are the single-stream scenarios."""

    kind = "protocol"

    def __init__(self, single: list[str] | tuple[str, ...] = SINGLE_STREAM_SCENARIOS,
                 params: dict[str, Any] | None = None, cache: str | None = None) -> None:
        super().__init__(params)
        self.single = tuple(single)
        self.cache = cache or self.cache
        self._cycle = itertools.cycle(self.single)

    def next(self, stream: int) -> Job:
        return self._prompts((next(self._cycle),)).next(0)

    def round_cells(self, concurrency: list[int], rounds: int) -> list[Cell]:
        """The thread's order: single stream per scenario, then per N the same and different
        cells (N = 1 in `concurrency` is covered by the single-stream cells)."""
        cells = [Cell(SINGLE, SINGLE, self._prompts((name,)), 1, rounds) for name in self.single]
        for n in concurrency:
            if n > 1:
                cells.append(Cell(round_cell_name(n, "same"), "same", self._prompts((SAME_PROMPT,) * n), n, rounds))
                cells.append(Cell(round_cell_name(n, "different"), "different",
                                  self._prompts(tuple(different_prompts(n))), n, rounds))
        return cells

    def _prompts(self, names: tuple[str, ...]) -> PromptSet:
        return PromptSet(names, self.params, self.cache)


class ProtocolSpec(ScenarioSpec):
    kind: Literal["protocol"]
    single: list[str] = Field(default_factory=lambda: list(SINGLE_STREAM_SCENARIOS))
    cache: Literal["cold", "any"] = "any"

    @field_validator("single")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        unknown = [name for name in names if name not in PROTOCOL_PROMPTS]
        if unknown:
            raise ValueError(f"unknown prompt {unknown[0]!r} (known: {', '.join(PROTOCOL_PROMPTS)})")
        return names


PROTOCOL = ScenarioKind(ProtocolSpec, lambda spec, name, seed, params: [
    (ProtocolScenario(spec.single, params, spec.cache), spec.weight)])
