"""`vision`: a chat message with an image, sent as a data URL (the speculative decoder must
still work with image input)."""

from __future__ import annotations

import itertools
from typing import Any, Literal

from pydantic import Field

from loadlib.scenarios.base import Job, Scenario
from loadlib.scenarios.png import bar_chart_png, data_url
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec

QUESTIONS = (
    "Describe this chart: how many bars are there, what colour is each, and which one is tallest?",
    "Estimate the height of every bar in this chart as a share of the tallest one, as a table.",
    "What could this bar chart be showing? Suggest a title, axis labels and one conclusion.",
    "Write the matplotlib code that would draw a chart like this one.",
)


class Vision(Scenario):
    kind = "vision"

    def __init__(self, image_px: int = 64, params: dict[str, Any] | None = None,
                 cache: str | None = None, name: str | None = None) -> None:
        super().__init__(params, name)
        self.cache = cache or self.cache
        self.image_url = data_url(bar_chart_png(image_px))
        self._questions = itertools.cycle(QUESTIONS)

    def next(self, stream: int) -> Job:
        content = [{"type": "text", "text": next(self._questions)},
                   {"type": "image_url", "image_url": {"url": self.image_url}}]
        return self._job(self.name, [{"role": "user", "content": content}])


class VisionSpec(ScenarioSpec):
    kind: Literal["vision"]
    image_px: int = Field(64, ge=8, le=1024)
    cache: Literal["cold", "any"] = "any"


VISION = ScenarioKind(VisionSpec, lambda spec, name, seed, params: [
    (Vision(spec.image_px, params, spec.cache, name), spec.weight)])
