"""A profile's `[server]` table: how to launch the server a sweep measures, and its configurations.

`command` is one launch command, split like a shell would (`shlex`) but run without one; its
`{placeholders}` are `{port}` (a free port the tool picks), `{python}` (the Python running the tool:
the built-in simulator's `{python} -m loadlib.sim` runs the installed one whether or not its venv is
on the PATH) and the keys of `[server.grid]` or of
each `[[server.configs]]`'s `values`. `{{` and `}}` are literal braces. A placeholder that is
neither, a grid key the command does not use, or a named configuration that leaves a placeholder
unfilled is refused when the profile is read, in one line that names it; so is a grid value
its label (`draft=4,mrr=2`, the records' `target`) could not hold, such as a path: configurations
with such values are named in `[[server.configs]]`.
"""

from __future__ import annotations

import re
import shlex
import string
from typing import Annotated, Any, Union

from pydantic import AfterValidator, Field, PositiveFloat, field_validator, model_validator

from loadlib.scenarios.spec import Strict

PORT = "port"
PYTHON = "python"
DEFAULT_HEALTH = "/health"
DEFAULT_READY_TIMEOUT_S = 600.0  # a large model's weights load for minutes before /health answers
DEFAULT_STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL after this
KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"  # a placeholder's name: a Python identifier
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.=,-]*$"  # a configuration's label (the records' `target`)
LABEL_MAX = 80
GRID_VALUE = re.compile(r"[A-Za-z0-9_.-]+")  # a grid value as its label writes it (`draft=4,mrr=2`)

Scalar = Union[bool, int, float, str]  # a value TOML gives that a command line can hold


def _scalar(value: Any) -> Scalar:
    if not isinstance(value, (bool, int, float, str)):
        raise ValueError(f"expected a number, string or boolean, got {type(value).__name__}")
    return value


Value = Annotated[Any, AfterValidator(_scalar)]  # a `Scalar`, refused in one error (not one per type)


class NamedConfig(Strict):
    """One `[[server.configs]]` entry: its label and the value of each placeholder but `{port}`."""

    label: str = Field(min_length=1, max_length=LABEL_MAX, pattern=LABEL_PATTERN)
    values: dict[Annotated[str, Field(pattern=KEY_PATTERN)], Value] = Field(default_factory=dict)


class ServerSpec(Strict):
    """How to start, check and stop the server of each configuration (see the module's doc).
    With neither `grid` nor `configs` the sweep is one configuration: the command as written."""

    command: str = Field(min_length=1)
    health: str = DEFAULT_HEALTH
    ready_timeout_s: PositiveFloat = DEFAULT_READY_TIMEOUT_S
    stop_grace_s: PositiveFloat = DEFAULT_STOP_GRACE_S
    env: dict[str, str] = Field(default_factory=dict)
    grid: dict[Annotated[str, Field(pattern=KEY_PATTERN)], Annotated[list[Value], Field(min_length=1)]] | None = None
    configs: Annotated[list[NamedConfig], Field(min_length=1)] | None = None

    @field_validator("command")
    @classmethod
    def _plain_placeholders(cls, command: str) -> str:
        try:
            shlex.split(command)
        except ValueError as exc:
            raise ValueError(f"{exc} (the command is split as a shell would, and run without one)") from None
        if PORT not in placeholders(command):  # raises on a malformed one
            raise ValueError("no {port}: the server must listen on the port the tool picks")
        return command

    @field_validator("health")
    @classmethod
    def _a_path(cls, health: str) -> str:
        if not health.startswith("/"):
            raise ValueError(f"a path on the server, starting with /, got {health!r}")
        return health

    @field_validator("grid")
    @classmethod
    def _distinct_values(cls, grid: dict[str, list[Scalar]] | None) -> dict[str, list[Scalar]] | None:
        for key, values in (grid or {}).items():
            if key in (PORT, PYTHON):
                raise ValueError(f"{key} is the tool's: it fills {{{key}}}")
            typed = [(type(value), value) for value in values]  # 1 and true are two values
            repeated = next((v for i, v in enumerate(values) if typed[i] in typed[:i]), None)
            if repeated is not None:
                raise ValueError(f"{key}: {repeated!r} is listed twice")
            unlabelled = next((value for value in values if not GRID_VALUE.fullmatch(as_text(value))), None)
            if unlabelled is not None:
                raise ValueError(f"{key}: {unlabelled!r} cannot be part of a label (letters, digits, _ . -); "
                                 "name such configurations in [[server.configs]]")
        longest = sum(len(key) + 2 + max(len(as_text(value)) for value in values) for key, values in (grid or {}).items())
        if longest - 1 > LABEL_MAX:
            raise ValueError(f"its labels (key=value,...) would be longer than {LABEL_MAX} characters: "
                             "shorter keys, or [[server.configs]]")
        return grid

    @field_validator("configs")
    @classmethod
    def _distinct_labels(cls, configs: list[NamedConfig] | None) -> list[NamedConfig] | None:
        labels = [config.label for config in configs or []]
        repeated = next((label for label in labels if labels.count(label) > 1), None)
        if repeated is not None:
            raise ValueError(f"label {repeated!r} names two configurations")
        return configs

    @model_validator(mode="after")
    def _placeholders_filled(self) -> "ServerSpec":
        wanted = placeholders(self.command) - {PORT, PYTHON}
        if self.grid is not None and self.configs is not None:
            raise ValueError("grid or configs, not both")
        if self.configs is not None:
            for i, config in enumerate(self.configs):
                _same_keys(wanted, set(config.values), f"configs.{i}.values")
        else:
            _same_keys(wanted, set(self.grid or {}), "grid")  # no grid: a command with {port} only
        return self


def as_text(value: Scalar) -> str:
    """A value as the command line and the label write it: TOML's booleans as `true`/`false`,
    numbers as Python prints them."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def placeholders(command: str) -> set[str]:
    """The names of the command's `{placeholders}`; ValueError for braces that are not one."""
    literal = "(write {{ and }} for literal braces)"
    try:
        parsed = list(string.Formatter().parse(command))
    except ValueError as exc:
        raise ValueError(f"{exc} {literal}") from None
    names = set()
    for _text, field, spec, conversion in parsed:
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            shown = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"placeholder {shown}: only {{name}} is filled {literal}")
        names.add(field)
    return names


def _same_keys(wanted: set[str], given: set[str], where: str) -> None:
    """The command's placeholders against the keys that fill them, the first mismatch in words."""
    for name in sorted(wanted - given):
        keys = f"a key of {where} ({', '.join(sorted(given))})" if given else "filled by a grid or configs"
        raise ValueError(f"command: placeholder {{{name}}} is neither {{port}}, {{python}} nor {keys}")
    for name in sorted(given - wanted):
        raise ValueError(f"{where}.{name}: not a placeholder of the command")
