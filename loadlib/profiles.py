"""Profile files (TOML in `profiles/`): scenario weights, request parameters, the load mode and
its parameters, warm-up, duration or rounds, and SLOs, validated on load with pydantic.

A bad profile is one `ProfileError` line naming the file, the key and what is wrong; nothing
of the run starts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveFloat,
                      PositiveInt, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator)

from loadlib.modes.trace import TraceError, TraceRequest, load_trace
from loadlib.scenarios.thread import PROTOCOL_PROMPTS, SINGLE_STREAM_SCENARIOS
from loadlib.scenarios.dataset import Dataset, load_dataset
from loadlib.scenarios.radix import DEFAULT_PROMPT, prompt_text
from loadlib.scenarios.synthetic import Lengths

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MODES = ("rounds", "closed", "open", "ladder", "search", "trace")
# "on"/"off" send chat_template_kwargs.enable_thinking, "server" sends none (the template decides);
# TOML's true/false mean on/off
Thinking = Annotated[Literal["server", "on", "off"],
                     BeforeValidator(lambda value: {True: "on", False: "off"}.get(value, value)
                                     if isinstance(value, bool) else value)]
DEFAULT_SIZES = [3000, 14000, 57000, 116000, 234000]


def beside_the_profile(path: str, info: ValidationInfo) -> str:
    """A file named in a profile, relative to the profile file: made absolute on first load, so
    the profile sent to workers finds the same file."""
    profile_dir = (info.context or {}).get("profile_dir")
    return str(Path(profile_dir, path).absolute()) if profile_dir is not None else path


class ProfileError(Exception):
    """A profile that cannot be used; str is one line: `FILE: KEY: what is wrong`."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class RequestSpec(_Strict):
    """Request parameters of every scenario unless it sets its own."""

    max_tokens: PositiveInt = 512
    thinking: Thinking = "off"


class Slo(_Strict):
    """Targets for goodput: a request meets the SLO when both figures are met. The search mode
    judges a level by those of its criteria that are set: this percentile of TTFT at most
    `ttft_s`; `decode_p` % of requests decoding at least `decode_tps` (the slow tail, so its
    (100 - decode_p)th percentile); `goodput`: this share of requests meeting both."""

    ttft_s: PositiveFloat | None = None
    decode_tps: PositiveFloat | None = None
    ttft_p: float | None = Field(None, gt=0, lt=100)
    decode_p: float | None = Field(None, gt=0, lt=100)
    goodput: float | None = Field(None, gt=0, le=1)

    @model_validator(mode="after")
    def _targets_for_percentiles(self) -> "Slo":
        if self.ttft_p is not None and self.ttft_s is None:
            raise ValueError("ttft_p needs ttft_s (the TTFT its percentile must stay under)")
        if self.decode_p is not None and self.decode_tps is None:
            raise ValueError("decode_p needs decode_tps (the decode rate that share of requests must reach)")
        if self.goodput is not None and self.ttft_s is None and self.decode_tps is None:
            raise ValueError("goodput needs ttft_s or decode_tps (what a request must meet)")
        return self

    @property
    def judges(self) -> bool:
        """Whether it sets a criterion a level can be judged by (the search mode needs one)."""
        return self.ttft_p is not None or self.decode_p is not None or self.goodput is not None


class _ScenarioSpec(_Strict):
    weight: PositiveFloat = 1.0  # share of requests in the free-running modes
    max_tokens: PositiveInt | None = None
    thinking: Thinking | None = None  # None: the profile's [request] thinking


class ProtocolSpec(_ScenarioSpec):
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


class RadixHitSpec(_ScenarioSpec):
    kind: Literal["radix-hit"]
    prompt: str = DEFAULT_PROMPT  # a protocol prompt name or a shipped work item id
    prime: bool = True

    @field_validator("prompt")
    @classmethod
    def _exists(cls, name: str) -> str:
        if prompt_text(name) is None:
            raise ValueError(f"unknown prompt {name!r} (a protocol prompt name or a work item id)")
        return name


class DistinctIssuesSpec(_ScenarioSpec):
    kind: Literal["distinct-issues"]
    cache: Literal["cold", "any"] = "any"


class LongContextSpec(_ScenarioSpec):
    kind: Literal["long-context"]
    sizes: list[PositiveInt] = Field(default_factory=lambda: list(DEFAULT_SIZES), min_length=1)

    @field_validator("sizes")
    @classmethod
    def _distinct(cls, sizes: list[int]) -> list[int]:
        if len(set(sizes)) != len(sizes):
            raise ValueError("sizes must be distinct")
        return sizes


class MultiTurnSpec(_ScenarioSpec):
    kind: Literal["multi-turn"]
    turns: PositiveInt = 4


class ToolCallSpec(_ScenarioSpec):
    kind: Literal["tool-call"]
    tool_choice: Literal["auto", "required"] = "auto"
    cache: Literal["cold", "any"] = "any"


class VisionSpec(_ScenarioSpec):
    kind: Literal["vision"]
    image_px: int = Field(64, ge=8, le=1024)
    cache: Literal["cold", "any"] = "any"


class DatasetSpec(_ScenarioSpec):
    """The user's prompts from a file; `path` is relative to the profile file. The file is read
    and checked when the profile is, so bad data stops the run before it starts."""

    kind: Literal["dataset"]
    path: str
    order: Literal["file", "shuffle", "sample"] = "file"  # shuffle: with the profile's seed; sample: with replacement
    reply_length: bool = False  # ShareGPT: a recorded reply's length (in server tokens) is the output length
    _dataset: Dataset = PrivateAttr()

    @field_validator("path")
    @classmethod
    def _beside_the_profile(cls, path: str, info: ValidationInfo) -> str:
        return beside_the_profile(path, info)

    @model_validator(mode="after")
    def _load(self) -> "DatasetSpec":
        self._dataset = load_dataset(Path(self.path))
        if self.reply_length and not self._dataset.has_replies:
            raise ValueError(f"reply_length: {self.path} has no recorded replies ({self._dataset.format})")
        return self

    @property
    def dataset(self) -> Dataset:
        return self._dataset


class SyntheticSpec(_ScenarioSpec):
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


ScenarioSpec = Annotated[Union[ProtocolSpec, RadixHitSpec, DistinctIssuesSpec, LongContextSpec, MultiTurnSpec,
                               ToolCallSpec, VisionSpec, DatasetSpec, SyntheticSpec], Field(discriminator="kind")]
KINDS = ("protocol", "radix-hit", "distinct-issues", "long-context", "multi-turn", "tool-call", "vision", "dataset",
         "synthetic")


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


class SearchLoad(_Strict):
    """Capacity search: levels of `variable` (closed-loop users, or an open-loop rate) judged
    against the profile's [slo]; see `loadlib.modes.search`."""

    mode: Literal["search"]
    variable: Literal["users", "rate"]
    duration_s: PositiveFloat  # measured, per level
    warmup_s: NonNegativeFloat = 0.0  # per level, before its measured part
    start: PositiveFloat = 1.0  # the first level (users, or requests/s)
    step: float = Field(2.0, gt=1)  # the climb multiplies the level by this until the SLO breaks
    max_rate: PositiveFloat | None = None  # rate: the highest rate tried (users: -u)
    precision: float = Field(0.1, ge=0.01, lt=1)  # rate: bisection ends when the bracket is this share of it
    arrival: Literal["constant", "poisson"] = "constant"  # rate
    jitter_s: NonNegativeFloat = 1.0  # users: first requests start spread over this many seconds
    repeats: NonNegativeInt = 1  # a level too close to call runs again this many times

    @field_validator("max_rate", "precision", "arrival")
    @classmethod
    def _rate_only(cls, value: Any, info: ValidationInfo) -> Any:
        """Set for a users search, it would be ignored: refused (its default passes, as a dumped
        profile sent to the workers has every key)."""
        if info.data.get("variable") == "users" and value != cls.model_fields[info.field_name].default:
            raise ValueError('only for variable = "rate" (a users search stops at -u)')
        return value

    @field_validator("jitter_s")
    @classmethod
    def _users_only(cls, value: float, info: ValidationInfo) -> float:
        if info.data.get("variable") == "rate" and value != cls.model_fields[info.field_name].default:
            raise ValueError('only for variable = "users"')
        return value

    @field_validator("start")
    @classmethod
    def _whole_users(cls, start: float, info: ValidationInfo) -> float:
        if info.data.get("variable") == "users" and start != int(start):
            raise ValueError(f"a number of users, got {start:g}")
        return start

    @model_validator(mode="after")
    def _rate_has_a_ceiling(self) -> "SearchLoad":
        if self.variable == "rate" and self.max_rate is None:
            raise ValueError('variable = "rate" needs max_rate (the highest rate tried)')
        return self


class TraceLoad(_Strict):
    """A recorded trace replayed at its times (`loadlib.modes.trace`); `trace` is relative to the profile
    file, read and checked when the profile is."""

    mode: Literal["trace"]
    trace: str
    speedup: PositiveFloat = 1.0  # 2: twice as fast as recorded
    _requests: list[TraceRequest] = PrivateAttr()

    @field_validator("trace")
    @classmethod
    def _beside_the_profile(cls, path: str, info: ValidationInfo) -> str:
        return beside_the_profile(path, info)

    @model_validator(mode="after")
    def _load(self) -> "TraceLoad":
        try:
            self._requests = load_trace(Path(self.trace))
        except TraceError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def requests(self) -> list[TraceRequest]:
        return self._requests

    @property
    def duration_s(self) -> float:
        """From the first request to the last, at `speedup`."""
        return self._requests[-1].at_s / self.speedup


Load = Annotated[Union[RoundsLoad, ClosedLoad, OpenLoad, LadderLoad, SearchLoad, TraceLoad],
                 Field(discriminator="mode")]


class Profile(_Strict):
    """A whole profile. `scenarios` maps a name (the records' `scenario`) to its settings; the
    name is also the scenario's kind unless the table says `kind = ...`, so one kind can appear
    twice (e.g. multi-turn chat with thinking on and off). Rounds play them in the file's order."""

    description: str = ""
    seed: int = 0  # the mix's draws, the work items' order, Poisson arrivals
    request: RequestSpec = RequestSpec()
    load: Load = RoundsLoad()
    scenarios: dict[str, ScenarioSpec] = Field(default_factory=dict)  # none with mode = "trace"
    slo: Slo = Field(Slo(), validate_default=True)  # validated even when absent: the search mode needs one

    @field_validator("slo")
    @classmethod
    def _search_needs_a_target(cls, slo: Slo, info: ValidationInfo) -> Slo:
        load = info.data.get("load")
        if isinstance(load, SearchLoad) and not slo.judges:
            raise ValueError("the search mode judges levels by ttft_p (with ttft_s), decode_p (with decode_tps) "
                             "or goodput: set at least one")
        return slo

    @field_validator("scenarios")
    @classmethod
    def _as_many_as_the_mode_takes(cls, scenarios: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        trace = isinstance(info.data.get("load"), TraceLoad)
        if trace and scenarios:
            raise ValueError("a trace brings its own prompts: no [scenarios] with mode = \"trace\"")
        if not trace and not scenarios and "load" in info.data:
            raise ValueError("name at least one scenario")
        return scenarios

    @field_validator("scenarios", mode="before")
    @classmethod
    def _kind_from_name(cls, scenarios: Any) -> Any:
        if not isinstance(scenarios, dict):
            return scenarios
        return {name: {"kind": name, **spec} if isinstance(spec, dict) and "kind" not in spec else spec
                for name, spec in scenarios.items()}


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
        return Profile.model_validate(data, context={"profile_dir": path.parent})
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")  # a typo first
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ProfileError(f"{path}: {describe(errors[0])}{more}") from None


def describe(error: Any) -> str:
    """`KEY: what is wrong` from one pydantic error, with TOML's dotted key names."""
    loc = [str(part) for part in error["loc"]]
    tag, choices = ("kind", KINDS) if loc[:1] == ["scenarios"] else ("mode", MODES)
    depth = 2 if tag == "kind" else 1  # the union member pydantic tried comes after this, not a key
    if len(loc) > depth and loc[depth] in choices:
        del loc[depth]
    kind = error["type"]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        loc.append(tag)
        message = (f"expected one of {', '.join(choices)}, got {error['input'].get(tag)!r}"
                   if kind == "union_tag_invalid" else f"missing (one of {', '.join(choices)})")
    elif kind == "extra_forbidden":
        message = "unknown key"
    elif kind == "missing":
        message = "missing (required)"
    elif kind == "too_short" and loc == ["scenarios"]:
        message = "name at least one scenario"
    else:
        message = error["msg"].removeprefix("Value error, ")
    return f"{'.'.join(loc) or 'profile'}: {message}"
