"""Profile files (TOML in `profiles/`): scenario weights, request parameters, the load mode and
its parameters, warm-up, duration or rounds, and SLOs, validated on load with pydantic.

A bad profile is one `ProfileError` line naming the file, the key and what is wrong; nothing
of the run starts.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import (AfterValidator, Field, PlainSerializer, PositiveFloat, PositiveInt, ValidationError,
                      ValidationInfo, field_validator, model_validator)

from loadlib.figures.goodput import Slo
from loadlib.modes import MODES
from loadlib.modes.rounds import RoundsLoad
from loadlib.modes.search_driver import SearchLoad
from loadlib.modes.sessions import SessionsLoad
from loadlib.modes.trace import TraceLoad
from loadlib.scenarios import KINDS
from loadlib.scenarios.agent_trace import AGENT_TRACE_KIND
from loadlib.scenarios.spec import Strict, Thinking
from loadlib.sweep.spec import LABEL_PATTERN, ServerSpec
from loadlib.wire.client import DEFAULT_MAX_TOKENS, DEFAULT_THINKING
from loadlib.wire.connection import Endpoint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ProfileError(Exception):
    """A profile that cannot be used; str is one line: `FILE: KEY: what is wrong`."""


class RequestSpec(Strict):
    """Request parameters of every scenario unless it sets its own."""

    max_tokens: PositiveInt = DEFAULT_MAX_TOKENS
    thinking: Thinking = DEFAULT_THINKING


class SloTable(Strict):
    """The `[slo]` table as a profile writes it: its keys, their bounds, what needs what. The profile
    holds it as the one SLO type, `loadlib.figures.goodput.Slo` (`SloField`), which says what each
    criterion means."""

    ttft_s: PositiveFloat | None = None
    decode_tps: PositiveFloat | None = None
    ttft_p: float | None = Field(None, gt=0, lt=100)
    decode_p: float | None = Field(None, gt=0, lt=100)
    goodput: float | None = Field(None, gt=0, le=1)

    @model_validator(mode="after")
    def _targets_for_percentiles(self) -> "SloTable":
        if self.ttft_p is not None and self.ttft_s is None:
            raise ValueError("ttft_p needs ttft_s (the TTFT its percentile must stay under)")
        if self.decode_p is not None and self.decode_tps is None:
            raise ValueError("decode_p needs decode_tps (the decode rate that share of requests must reach)")
        if self.goodput is not None and self.ttft_s is None and self.decode_tps is None:
            raise ValueError("goodput needs ttft_s or decode_tps (what a request must meet)")
        return self


SloField = Annotated[SloTable, AfterValidator(lambda table: Slo(**table.model_dump())), PlainSerializer(asdict)]


ScenarioSpec = Annotated[Union[tuple(kind.schema for kind in KINDS.values())], Field(discriminator="kind")]
Load = Annotated[Union[tuple(mode.schema for mode in MODES.values())], Field(discriminator="mode")]


class TargetSpec(Strict):
    """One server of an A/B run: its `label` (the records' `target`) and its `host`, or, with no
    host, a built-in simulator of its own started with `sim_args` (a check before GPU hours)."""

    label: str = Field(min_length=1, max_length=80, pattern=LABEL_PATTERN)
    host: str = ""
    sim_args: str = ""

    @model_validator(mode="after")
    def _host_or_simulator(self) -> "TargetSpec":
        if self.host and self.sim_args:
            raise ValueError("sim_args is for a target without host (a built-in simulator of its own)")
        if self.host:
            try:
                Endpoint.parse(self.host)
            except ValueError as exc:
                raise ValueError(f"host: {exc}") from None
        return self


class Profile(Strict):
    """A whole profile. `scenarios` maps a name (the records' `scenario`) to its settings; the
    name is also the scenario's kind unless the table says `kind = ...`, so one kind can appear
    twice (e.g. multi-turn chat with thinking on and off). Rounds play them in the file's order."""

    description: str = ""
    seed: int = 0  # the mix's draws, the work items' order, Poisson arrivals
    request: RequestSpec = RequestSpec()
    load: Load = RoundsLoad()
    scenarios: dict[str, ScenarioSpec] = Field(default_factory=dict)  # none with mode = "trace"
    slo: SloField = Field({}, validate_default=True)  # validated even when absent: the search mode needs one
    targets: list[TargetSpec] = Field(default_factory=list)  # an A/B run: cells alternate between them
    server: ServerSpec | None = None  # a sweep: the server launched once per configuration

    def servers_table(self) -> str | None:
        """Where the profile names its servers (an A/B run's `[[targets]]`, a sweep's `[server]`);
        None where it names none (the run's --host, or the built-in simulator)."""
        return "[[targets]]" if self.targets else "[server]" if self.server is not None else None

    @field_validator("targets")
    @classmethod
    def _distinct_labels(cls, targets: list[TargetSpec], info: ValidationInfo) -> list[TargetSpec]:
        if len(targets) > 1 and isinstance(info.data.get("load"), SearchLoad) \
                and info.data["load"].variable == "sessions":
            raise ValueError("a search over sessions measures one server: search each target in a run of its own")
        labels = [target.label for target in targets]
        repeated = next((label for label in labels if labels.count(label) > 1), None)
        if repeated is not None:
            raise ValueError(f"label {repeated!r} names two targets")
        return targets

    @field_validator("server")
    @classmethod
    def _servers_named_once(cls, server: ServerSpec | None, info: ValidationInfo) -> ServerSpec | None:
        if server is not None and info.data.get("targets"):
            raise ValueError("a [server] sweep starts its own servers: no [[targets]] beside it")
        return server

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
        agents = [name for name, spec in scenarios.items() if spec.kind == AGENT_TRACE_KIND]
        sessions = plays_sessions(info.data.get("load"))
        if sessions and (len(agents) != 1 or len(scenarios) != 1):
            raise ValueError(f"{sessions} plays one scenario of kind {AGENT_TRACE_KIND} and no other")
        if agents and "load" in info.data and not sessions:
            raise ValueError(f"{agents[0]}: kind {AGENT_TRACE_KIND} is played by mode = \"sessions\" and a search "
                             f"with variable = \"sessions\" only")
        return scenarios

    @field_validator("scenarios", mode="before")
    @classmethod
    def _kind_from_name(cls, scenarios: Any) -> Any:
        if not isinstance(scenarios, dict):
            return scenarios
        return {name: {"kind": name, **spec} if isinstance(spec, dict) and "kind" not in spec else spec
                for name, spec in scenarios.items()}


def plays_sessions(load: Any) -> str:
    """Which load replays agent sessions, in words ("" for one that does not)."""
    if isinstance(load, SessionsLoad):
        return "the sessions mode"
    if isinstance(load, SearchLoad) and load.variable == "sessions":
        return "a search over sessions"
    return ""


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
    tag, choices = ("kind", tuple(KINDS)) if loc[:1] == ["scenarios"] else ("mode", tuple(MODES))
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
