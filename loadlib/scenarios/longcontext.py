"""`long-context`: cold prefill at target prompt sizes in the server's own tokens.

The client has no tokenizer, so sizes are calibrated: two probes (the prompt's frame alone, and
the frame with a slice of filler) give the frame's tokens and the filler's characters per token
from `usage.prompt_tokens`; each answer at a size then corrects that size's ratio. Every prompt
starts with a fresh nonce, so no prefix (radix) cache can hit beyond the chat template's own
framing, and its cells flush the cache first where the server offers it.
"""

from __future__ import annotations

import uuid
from typing import Any

from loadlib.scenarios.base import COLD, Cell, Job, Scenario, Send
from loadlib.scenarios.corpus import work_items

HEADER = "Below is an archive of issue reports from our tracker.\n\n"
QUESTION = ("\n\n---\nWhich three reports in this archive describe the most severe problems, and why? "
            "Answer in at most five sentences.")
PROBE_CHARS = 16_000
PROBE_TOKENS = 8  # output tokens of a calibration probe: its prompt is what counts
DEFAULT_CHARS_PER_TOKEN = 3.5


def size_label(tokens: int) -> str:
    """3000 -> "3k", 14000 -> "14k", 1500 -> "1.5k", 800 -> "800"."""
    return f"{tokens / 1000:g}k" if tokens >= 1000 else str(tokens)


class Filler:
    """The archive text that pads prompts: the shipped work items, repeated as long as needed."""

    def __init__(self) -> None:
        self._period = "\n\n".join(f"## Report {i + 1}\n\n{item.text}" for i, item in enumerate(work_items()))
        self._text = self._period

    def take(self, chars: int) -> str:
        while len(self._text) < chars:
            self._text += "\n\n" + self._period
        return self._text[:chars]


class Calibration:
    """Tokens of the prompt frame and characters per token of the filler, per target size."""

    def __init__(self) -> None:
        self.frame_tokens: int | None = None
        self.chars_per_token = DEFAULT_CHARS_PER_TOKEN
        self.by_size: dict[int, float] = {}

    def chars_for(self, tokens: int) -> int:
        ratio = self.by_size.get(tokens, self.chars_per_token)
        return max(0, round((tokens - (self.frame_tokens or 0)) * ratio))

    def learn(self, frame_tokens: int | None, probe_tokens: int | None) -> None:
        if frame_tokens and probe_tokens and probe_tokens > frame_tokens:
            self.frame_tokens = frame_tokens
            self.chars_per_token = PROBE_CHARS / (probe_tokens - frame_tokens)

    def correct(self, target: int, chars: int, prompt_tokens: int | None) -> None:
        if self.frame_tokens is not None and prompt_tokens and prompt_tokens > self.frame_tokens and chars:
            self.by_size[target] = chars / (prompt_tokens - self.frame_tokens)


class LongContext(Scenario):
    """One target size; the sizes of a run share one filler and one calibration."""

    kind = "long-context"
    cache = COLD

    def __init__(self, target_tokens: int, calibration: Calibration, filler: Filler,
                 params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.target_tokens = target_tokens
        self.calibration = calibration
        self.filler = filler
        self.label = size_label(target_tokens)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.label}"

    def next(self, stream: int) -> Job:
        return self._job(self.name, self._messages(self.calibration.chars_for(self.target_tokens)))

    def round_cells(self, concurrency: list[int], rounds: int) -> list[Cell]:
        """One single-stream cell per size: concurrent streams would wait for each other's prefill."""
        return [Cell(f"prefill-{self.label}", "single", self, 1, rounds)]

    def prepare(self, send: Send) -> None:
        calibration = self.calibration
        if calibration.frame_tokens is not None:
            return
        probes = [Job("calibrate", self._messages(chars), {**self.params, "max_tokens": PROBE_TOKENS}, COLD)
                  for chars in (0, PROBE_CHARS)]
        frame, probe = send(probes, "calibrate")
        calibration.learn(frame.get("prompt_tokens"), probe.get("prompt_tokens"))

    def observe(self, job: Job, record: dict[str, Any]) -> None:
        if job.scenario == self.name:
            chars = len(job.messages[0]["content"]) - len(self._messages(0)[0]["content"])
            self.calibration.correct(self.target_tokens, chars, record.get("prompt_tokens"))

    def _messages(self, chars: int) -> list[dict[str, Any]]:
        nonce = f"[{uuid.uuid4().hex}]\n"
        return [{"role": "user", "content": nonce + HEADER + self.filler.take(chars) + QUESTION}]
