"""What the profile's tables share: the strict pydantic base, `thinking`, paths beside the
profile, a scenario table's common keys, and `ScenarioKind` (a registry entry of
`loadlib.scenarios.KINDS`: a kind's table schema and the factory that builds its scenarios)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, PositiveFloat, PositiveInt, ValidationInfo

from loadlib.scenarios.base import Scenario

# "on"/"off" send chat_template_kwargs.enable_thinking, "server" sends none (the template decides);
# TOML's true/false mean on/off
Thinking = Annotated[Literal["server", "on", "off"],
                     BeforeValidator(lambda value: {True: "on", False: "off"}.get(value, value)
                                     if isinstance(value, bool) else value)]


class Strict(BaseModel):
    """A profile table: unknown keys refused, types not coerced, frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def beside_the_profile(path: str, info: ValidationInfo) -> str:
    """A file named in a profile, relative to the profile file: made absolute on first load, so
    the profile sent to workers finds the same file."""
    profile_dir = (info.context or {}).get("profile_dir")
    return str(Path(profile_dir, path).absolute()) if profile_dir is not None else path


class ScenarioSpec(Strict):
    """The keys every `[scenarios.NAME]` table has; a kind's schema adds `kind` and its own."""

    weight: PositiveFloat = 1.0  # share of requests in the free-running modes
    max_tokens: PositiveInt | None = None
    thinking: Thinking | None = None  # None: the profile's [request] thinking


Weighted = list[tuple[Scenario, float]]  # scenarios with their share of the requests


@dataclass(frozen=True)
class ScenarioKind:
    """A scenario kind: its profile table's schema (whose `kind` literal names it) and the factory
    building its scenario(s) from a validated table: `build(spec, name, seed, params)`, `params`
    being the table's request parameters (`request_params`)."""

    schema: type[ScenarioSpec]
    build: Callable[[Any, str, int, dict[str, Any]], Weighted]

    @property
    def name(self) -> str:
        return get_args(self.schema.model_fields["kind"].annotation)[0]
