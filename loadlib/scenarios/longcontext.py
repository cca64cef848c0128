"""`long-context`: cold prefill at target prompt sizes in the server's own tokens.

The client has no tokenizer, so sizes are calibrated from `usage.prompt_tokens`: two probes (the
prompt's frame alone, and the frame with about as much filler as the first size needs) give the
frame's tokens and a first sample, and every answer adds another (see `Calibration`). Every prompt
starts with a fresh nonce, so no prefix (radix) cache can hit beyond the chat template's own
framing, and its cells flush the cache first where the server offers it.
"""

from __future__ import annotations

import random
import uuid
from typing import Any, Literal

from pydantic import Field, PositiveInt, field_validator

from loadlib.scenarios.base import COLD, LONG_CONTEXT_KIND, SINGLE, Cell, Job, Scenario, Send
from loadlib.scenarios.corpus import work_items
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec

HEADER = "Below are lines sampled from our issue tracker, logs and code reviews, in no particular order.\n\n"
QUESTION = ("\n\n---\nWhich components and failure modes come up most often in these lines? "
            "Answer in at most five sentences.")
PROBE_TOKENS = 8  # output tokens of a calibration probe: its prompt is what counts
DEFAULT_CHARS_PER_TOKEN = 3.5


def size_label(tokens: int) -> str:
    """3000 -> "3k", 14000 -> "14k", 1500 -> "1.5k", 800 -> "800"."""
    return f"{tokens / 1000:g}k" if tokens >= 1000 else str(tokens)


class Filler:
    """The text that pads prompts: the lines of the shipped work items in a fixed shuffled order,
    repeated as long as needed. Whole documents would put dense stretches (logs, code) next to
    sparse ones (prose), so a prefix's tokens per character would depend on its length; shuffled
    lines keep every prefix near the average, which makes a size's first request come out right."""

    def __init__(self) -> None:
        lines = [line for item in work_items() for line in item.text.splitlines() if line.strip()]
        random.Random(0).shuffle(lines)
        self._period = "\n".join(lines)
        self._text = self._period

    def take(self, chars: int) -> str:
        while len(self._text) < chars:
            self._text += "\n\n" + self._period
        return self._text[:chars]


class Calibration:
    """How many filler characters make a prompt of N server tokens, learnt from answers.

    The frame (nonce, header, question, chat template) costs a fixed number of tokens; the
    filler's tokens per character drift along the text (logs and code tokenize denser than
    prose). So every answer adds a sample (filler characters, filler tokens), and a size is
    interpolated between the samples around it, or, beyond the largest, extrapolated at the
    largest sample's average rate, which is the best estimate for text further on.
    """

    def __init__(self) -> None:
        self.frame_tokens: int | None = None
        self.samples: list[tuple[int, int]] = [(0, 0)]  # (filler chars, filler tokens)

    def chars_for(self, tokens: int) -> int:
        need = tokens - (self.frame_tokens or 0)
        points = sorted(self.samples)
        for (c0, t0), (c1, t1) in zip(points, points[1:]):
            if t0 <= need <= t1 and t1 > t0:
                return max(0, round(c0 + (need - t0) * (c1 - c0) / (t1 - t0)))
        chars, filler_tokens = points[-1]
        ratio = chars / filler_tokens if filler_tokens > 0 else DEFAULT_CHARS_PER_TOKEN
        return max(0, round(need * ratio))

    def tokens_for(self, chars: int) -> int:
        """The other way round, for text like the samples': the server tokens of `chars`
        characters at the samples' overall rate (an estimate; exact only for the filler itself)."""
        chars_seen, tokens_seen = map(sum, zip(*self.samples))
        ratio = chars_seen / tokens_seen if tokens_seen > 0 else DEFAULT_CHARS_PER_TOKEN
        return round(chars / ratio)

    def learn(self, frame_tokens: int | None, chars: int, prompt_tokens: int | None) -> None:
        """Adds what one prompt with `chars` filler characters cost (a frame-only probe sets the frame)."""
        if not prompt_tokens:
            return
        if chars == 0:
            self.frame_tokens = frame_tokens = prompt_tokens
        if frame_tokens is not None and chars and prompt_tokens > frame_tokens:
            self.samples.append((chars, prompt_tokens - frame_tokens))


class LongContext(Scenario):
    """One target size; the sizes of a run share one filler and one calibration."""

    kind = LONG_CONTEXT_KIND
    cache = COLD

    def __init__(self, target_tokens: int, calibration: Calibration, filler: Filler,
                 params: dict[str, Any] | None = None, name: str | None = None) -> None:
        super().__init__(params, name)
        self.target_tokens = target_tokens
        self.calibration = calibration
        self.filler = filler
        self.label = size_label(target_tokens)

    @property
    def name(self) -> str:
        return f"{self.base_name}-{self.label}"

    def next(self, stream: int) -> Job:
        return self._job(self.name, self._messages(self.calibration.chars_for(self.target_tokens)))

    def round_cells(self, concurrency: list[int], rounds: int) -> list[Cell]:
        """One single-stream cell per size: concurrent streams would wait for each other's prefill."""
        return [Cell(f"prefill-{self.label}", SINGLE, self, 1, rounds)]

    def prepare(self, send: Send) -> None:
        calibration = self.calibration
        if calibration.frame_tokens is not None:
            return
        probe_chars = round(self.target_tokens * DEFAULT_CHARS_PER_TOKEN)  # the first size's neighbourhood
        probes = [Job("calibrate", self._messages(chars), {**self.params, "max_tokens": PROBE_TOKENS}, COLD,
                      kind=self.kind)
                  for chars in (0, probe_chars)]
        for job, record in zip(probes, send(probes, "calibrate")):
            calibration.learn(calibration.frame_tokens, self._filler_chars(job), record.get("prompt_tokens"))

    def observe(self, job: Job, record: dict[str, Any]) -> None:
        if job.scenario == self.name:
            self.calibration.learn(self.calibration.frame_tokens, self._filler_chars(job), record.get("prompt_tokens"))

    def _filler_chars(self, job: Job) -> int:
        return len(job.messages[0]["content"]) - len(self._messages(0)[0]["content"])

    def _messages(self, chars: int) -> list[dict[str, Any]]:
        nonce = f"[{uuid.uuid4().hex}]\n"
        return [{"role": "user", "content": nonce + HEADER + self.filler.take(chars) + QUESTION}]


DEFAULT_SIZES = [3000, 14000, 57000, 116000, 234000]


class LongContextSpec(ScenarioSpec):
    kind: Literal["long-context"]
    sizes: list[PositiveInt] = Field(default_factory=lambda: list(DEFAULT_SIZES), min_length=1)

    @field_validator("sizes")
    @classmethod
    def _distinct(cls, sizes: list[int]) -> list[int]:
        if len(set(sizes)) != len(sizes):
            raise ValueError("sizes must be distinct")
        return sizes


def long_context_scenarios(spec: LongContextSpec, name: str, seed: int, params: dict[str, Any]) -> list[
        tuple[Scenario, float]]:
    """One scenario per size, sharing the table's weight and one calibration."""
    calibration, filler = Calibration(), Filler()
    return [(LongContext(size, calibration, filler, params, name), spec.weight / len(spec.sizes))
            for size in spec.sizes]


LONG_CONTEXT = ScenarioKind(LongContextSpec, long_context_scenarios)
