"""`synthetic`: prompts and answers of lengths drawn from distributions (the ISL/OSL knob).

Input lengths are in the server's tokens, sized with long-context's `Calibration` (two probes,
then every answer's `usage.prompt_tokens`) over the same shuffled filler. Output lengths are
forced: `max_tokens` set to the draw, plus `ignore_eos` so that the answer runs to it (SGLang
and vLLM honour it; a server that does not may stop earlier, which `completion_tokens` shows).

A shared prefix (`prefix_tokens`, spread over `prefix_groups`) models a common system prompt or
document: each request starts with its group's prefix, which the prefix cache can hold, then a
fresh nonce, so nothing after the prefix is shared. A request's prompt is its group's prefix
plus the input draw, which includes the fixed part (the nonce line, a short ask and the chat
template: 44 tokens on the simulator; shorter draws come out at that size).
"""

from __future__ import annotations

import math
import random
import uuid
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt,
                      ValidationInfo, field_validator, model_validator)

from loadlib.scenarios.base import ANY, WARM, Job, Scenario, Send
from loadlib.scenarios.longcontext import DEFAULT_CHARS_PER_TOKEN, PROBE_TOKENS, Calibration, Filler
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec

ASK = "\n\nSummarise the lines above."
LEARN_PROMPTS = 64  # answers that refine the calibration (its samples are sorted per request)
NEEDS = {"fixed": ("value",), "uniform": ("min", "max"), "normal": ("mean", "std"), "lognormal": ("mean", "std")}
BOUNDS = ("min", "max")  # optional on normal and lognormal


class Lengths(BaseModel):
    """A length distribution in tokens: `{dist = "fixed", value = N}`, `{dist = "uniform", min,
    max}`, `{dist = "normal", mean, std}` or `{dist = "lognormal", mean, std}` (the mean and
    standard deviation of the lengths themselves). Draws are rounded and clamped to `min` (default
    1) and `max` (default none)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    dist: Literal["fixed", "uniform", "normal", "lognormal"]
    value: PositiveInt | None = None
    min: PositiveInt | None = None
    max: PositiveInt | None = None
    mean: PositiveFloat | None = None
    std: NonNegativeFloat | None = None

    @model_validator(mode="after")
    def _keys_of_its_dist(self) -> "Lengths":
        given = {key for key in ("value", *BOUNDS, "mean", "std") if getattr(self, key) is not None}
        needs = NEEDS[self.dist]
        if not set(needs) <= given:
            raise ValueError(f"{self.dist} needs {' and '.join(needs)}")
        extra = sorted(given - set(needs) - (set(BOUNDS) if self.dist in ("normal", "lognormal") else set()))
        if extra:
            raise ValueError(f"{self.dist} does not take {extra[0]}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self

    def draw(self, rng: random.Random) -> int:
        if self.dist == "fixed":
            return self.value
        if self.dist == "uniform":
            return rng.randint(self.min, self.max)
        if self.dist == "normal":
            x = rng.gauss(self.mean, self.std)
        else:
            sigma = math.sqrt(math.log1p((self.std / self.mean) ** 2))
            x = rng.lognormvariate(math.log(self.mean) - sigma * sigma / 2, sigma)
        return self._clamped(round(x))

    @property
    def typical(self) -> int:
        """A representative length (the value, the middle, the mean), to size the probe."""
        if self.dist == "fixed":
            return self.value
        if self.dist == "uniform":
            return (self.min + self.max) // 2
        return self._clamped(round(self.mean))

    def _clamped(self, n: int) -> int:
        n = max(n, self.min or 1)
        return n if self.max is None else min(n, self.max)


class Synthetic(Scenario):
    kind = "synthetic"

    def __init__(self, input_tokens: Lengths, output_tokens: Lengths, prefix_tokens: int = 0, prefix_groups: int = 1,
                 seed: int = 0, params: dict[str, Any] | None = None, name: str | None = None) -> None:
        super().__init__(params, name)
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        self.prefix_tokens, self.prefix_groups = prefix_tokens, prefix_groups
        self.calibration, self.filler = Calibration(), Filler()
        self._rng = random.Random(seed)
        self._run = uuid.uuid4().hex[:8]  # a server's prefix cache outlives a run
        self._prefix_chars: int | None = None  # fixed at the first request, so a group's prefix never changes
        self._served_heads: set[str] = set()  # groups whose prefix a finished request has brought to the cache
        self._learnt = 0

    def next(self, stream: int) -> Job:
        rng, calibration = self._rng, self.calibration
        target = self.prefix_tokens + self.input_tokens.draw(rng)
        max_tokens = self.output_tokens.draw(rng)
        group = rng.randrange(self.prefix_groups)
        if self._prefix_chars is None:
            frame = calibration.frame_tokens or 0
            self._prefix_chars = calibration.chars_for(frame + self.prefix_tokens) if self.prefix_tokens else 0
        cache = WARM if self._head(group) in self._served_heads else ANY
        unique_chars = max(0, calibration.chars_for(target) - self._prefix_chars)
        return self._job(self.name, self._messages(group, self._prefix_chars, unique_chars), cache=cache,
                         max_tokens=max_tokens, ignore_eos=True)

    def prepare(self, send: Send) -> None:
        """Two probes, as long-context's: the frame alone, and about a typical prompt's filler."""
        calibration = self.calibration
        if calibration.frame_tokens is not None:
            return
        chars = round((self.prefix_tokens + self.input_tokens.typical) * DEFAULT_CHARS_PER_TOKEN)
        probes = [Job("calibrate", self._messages(0, 0, n), {**self.params, "max_tokens": PROBE_TOKENS},
                      kind=self.kind) for n in (0, chars)]
        for job, record in zip(probes, send(probes, "calibrate")):
            calibration.learn(calibration.frame_tokens, self._filler_chars(job), record.get("prompt_tokens"))

    def observe(self, job: Job, record: dict[str, Any]) -> None:
        """A served request's group is warm from now on; the first answers refine the sizing."""
        if job.scenario != self.name or not record.get("prompt_tokens"):
            return
        if self.prefix_tokens:
            self._served_heads.add(job.messages[0]["content"][:len(self._head(0))])
        if self._learnt < LEARN_PROMPTS:
            self.calibration.learn(self.calibration.frame_tokens, self._filler_chars(job), record["prompt_tokens"])
            self._learnt += 1

    def _filler_chars(self, job: Job) -> int:
        return len(job.messages[0]["content"]) - len(self._messages(0, 0, 0)[0]["content"])

    def _messages(self, group: int, prefix_chars: int, unique_chars: int) -> list[dict[str, Any]]:
        """[the group's head and prefix] then a fresh nonce, filler and the ask. The prefix and the
        rest are one stretch of filler cut by the nonce, so their tokens are the calibrated
        stretch's; every part but the filler has a fixed length, so the filler's length is known
        from the content's."""
        filler = self.filler.take(prefix_chars + unique_chars)
        head = f"{self._head(group)}{filler[:prefix_chars]}" if self.prefix_tokens else ""
        content = f"{head}\n[{uuid.uuid4().hex}]\n{filler[prefix_chars:]}{ASK}"
        return [{"role": "user", "content": content}]

    def _head(self, group: int) -> str:
        """What starts a group's prefix (one width for every group)."""
        return f"Context {self._run}-{group:03d}\n"


class SyntheticSpec(ScenarioSpec):
    kind: Literal["synthetic"]
    input_tokens: Lengths  # the prompt beyond the shared prefix, in server tokens
    output_tokens: Lengths  # forced with max_tokens and ignore_eos
    prefix_tokens: NonNegativeInt = 0
    prefix_groups: int = Field(1, ge=1, le=1000)

    @field_validator("max_tokens")
    @classmethod
    def _not_here(cls, max_tokens: int | None) -> int | None:
        if max_tokens is not None:
            raise ValueError("the output length is output_tokens here")
        return max_tokens

    @field_validator("prefix_groups")
    @classmethod
    def _groups_need_a_prefix(cls, groups: int, info: ValidationInfo) -> int:
        if groups > 1 and not info.data.get("prefix_tokens"):
            raise ValueError("groups of what? set prefix_tokens too")
        return groups


SYNTHETIC = ScenarioKind(SyntheticSpec, lambda spec, name, seed, params: [
    (Synthetic(spec.input_tokens, spec.output_tokens, spec.prefix_tokens, spec.prefix_groups, seed, params, name),
     spec.weight)])
