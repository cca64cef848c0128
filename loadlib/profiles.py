"""Profile files (TOML in `profiles/`): scenario weights, request parameters, the load mode and
its parameters, warm-up, duration or rounds, and SLOs, validated on load with pydantic.

A bad profile is one `ProfileError` line naming the file, the key and what is wrong; nothing
of the run starts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt,
                      ValidationError, field_validator, model_validator)

from loadlib.prompts import PROTOCOL_PROMPTS, SINGLE_STREAM_SCENARIOS
from loadlib.scenarios.radix import DEFAULT_PROMPT, prompt_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MODES = ("rounds", "closed", "open", "ladder")
DEFAULT_SIZES = [3000, 14000, 57000, 116000, 234000]


class ProfileError(Exception):
    """A profile that cannot be used; str is one line: `FILE: KEY: what is wrong`."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RequestSpec(_Strict):
    """Request parameters of every scenario unless it sets its own."""

    max_tokens: PositiveInt = 512
    thinking: bool = False


class Slo(_Strict):
    """Targets for goodput: a request meets the SLO when both figures are met."""

    ttft_s: PositiveFloat | None = None
    decode_tps: PositiveFloat | None = None


class _ScenarioSpec(_Strict):
    weight: PositiveFloat = 1.0  # share of requests in the free-running modes
    max_tokens: PositiveInt | None = None
    thinking: bool | None = None


class ProtocolSpec(_ScenarioSpec):
    single: list[str] = Field(default_factory=lambda: list(SINGLE_STREAM_SCENARIOS))
    cache: Literal["cold", "any"] = "any"

    @field_validator("single")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        unknown = [name for name in names if name not in PROTOCOL_PROMPTS]
        if unknown:
            raise ValueError(f"unknown prompt {unknown[0]!r} (known: {', '.join(PROTOCOL_PROMPTS)})")
        return names


class RadixHitSpec(_ScenarioSpec):
    prompt: str = DEFAULT_PROMPT  # a protocol prompt name or a shipped work item id
    prime: bool = True

    @field_validator("prompt")
    @classmethod
    def _exists(cls, name: str) -> str:
        if prompt_text(name) is None:
            raise ValueError(f"unknown prompt {name!r} (a protocol prompt name or a work item id)")
        return name


class DistinctIssuesSpec(_ScenarioSpec):
    cache: Literal["cold", "any"] = "any"


class LongContextSpec(_ScenarioSpec):
    sizes: list[PositiveInt] = Field(default_factory=lambda: list(DEFAULT_SIZES), min_length=1)

    @field_validator("sizes")
    @classmethod
    def _distinct(cls, sizes: list[int]) -> list[int]:
        if len(set(sizes)) != len(sizes):
            raise ValueError("sizes must be distinct")
        return sizes


class MultiTurnSpec(_ScenarioSpec):
    turns: PositiveInt = 4


class ToolCallSpec(_ScenarioSpec):
    tool_choice: Literal["auto", "required"] = "auto"
    cache: Literal["cold", "any"] = "any"


class VisionSpec(_ScenarioSpec):
    image_px: int = Field(64, ge=8, le=1024)
    cache: Literal["cold", "any"] = "any"


class ScenariosSpec(_Strict):
    """Which scenarios, keyed by their names; `in_order()` keeps the file's order."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    protocol: ProtocolSpec | None = None
    radix_hit: RadixHitSpec | None = Field(None, alias="radix-hit")
    distinct_issues: DistinctIssuesSpec | None = Field(None, alias="distinct-issues")
    long_context: LongContextSpec | None = Field(None, alias="long-context")
    multi_turn: MultiTurnSpec | None = Field(None, alias="multi-turn")
    tool_call: ToolCallSpec | None = Field(None, alias="tool-call")
    vision: VisionSpec | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: Any) -> "ScenariosSpec":
        spec = handler(data)
        if isinstance(data, dict):
            if not data:
                raise ValueError("name at least one scenario")
            object.__setattr__(spec, "_order", tuple(data))
        return spec

    def in_order(self) -> Iterator[tuple[str, _ScenarioSpec]]:
        by_alias = {field.alias or name: name for name, field in type(self).model_fields.items()}
        for key in getattr(self, "_order", ()):
            yield key, getattr(self, by_alias[key])


class RoundsLoad(_Strict):
    mode: Literal["rounds"] = "rounds"
    rounds: PositiveInt = 3
    concurrency: list[PositiveInt] = Field(default_factory=lambda: [2, 4, 8])


class ClosedLoad(_Strict):
    mode: Literal["closed"]
    duration_s: PositiveFloat
    warmup_s: NonNegativeFloat = 0.0
    jitter_s: NonNegativeFloat = 1.0  # first requests start spread over this many seconds


class LadderLoad(_Strict):
    mode: Literal["ladder"]
    duration_s: PositiveFloat  # per level
    levels: list[PositiveInt] | None = None  # default 1, 2, 4, ... up to -u
    warmup_s: NonNegativeFloat = 0.0
    jitter_s: NonNegativeFloat = 1.0

    @field_validator("levels")
    @classmethod
    def _rising(cls, levels: list[int] | None) -> list[int] | None:
        if levels is not None and (not levels or any(b <= a for a, b in zip(levels, levels[1:]))):
            raise ValueError("levels must be a non-empty rising list")
        return levels


class OpenLoad(_Strict):
    mode: Literal["open"]
    rate_rps: PositiveFloat
    arrival: Literal["constant", "poisson"] = "constant"
    duration_s: PositiveFloat
    warmup_s: NonNegativeFloat = 0.0


Load = Annotated[Union[RoundsLoad, ClosedLoad, OpenLoad, LadderLoad], Field(discriminator="mode")]


class Profile(_Strict):
    description: str = ""
    seed: int = 0  # the mix's draws, the work items' order, Poisson arrivals
    request: RequestSpec = RequestSpec()
    load: Load = RoundsLoad()
    scenarios: ScenariosSpec
    slo: Slo = Slo()


def load_profile(path: str | Path) -> Profile:
    """Reads and validates a profile; raises `ProfileError` (one line) when it cannot be used."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: invalid TOML: {exc}") from None
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ProfileError(f"{path}: {describe(errors[0])}{more}") from None


def describe(error: Any) -> str:
    """`KEY: what is wrong` from one pydantic error, with TOML's dotted key names."""
    loc = [str(part) for part in error["loc"]]
    if loc[:1] == ["load"] and len(loc) > 1 and loc[1] in MODES:
        del loc[1]  # the union member pydantic tried, not a key of the file
    kind = error["type"]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        loc.append("mode")
        message = (f"expected one of {', '.join(MODES)}, got {error['input'].get('mode')!r}"
                   if kind == "union_tag_invalid" else f"missing (one of {', '.join(MODES)})")
    elif kind == "extra_forbidden":
        message = "unknown key"
    elif kind == "missing":
        message = "missing (required)"
    else:
        message = error["msg"].removeprefix("Value error, ")
    return f"{'.'.join(loc) or 'profile'}: {message}"
