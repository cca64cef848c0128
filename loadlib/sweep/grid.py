"""The configurations a `[server]` table sweeps, in the order they run.

`[server.grid]` runs the product of its lists: its keys in the file's order, the last key varying
fastest (`draft = [4, 8]`, `mrr = [2, 4]` runs draft=4,mrr=2; draft=4,mrr=4; draft=8,mrr=2;
draft=8,mrr=4). `[[server.configs]]` runs its entries in the file's order. Neither: one
configuration, the command as written, labelled `server`.
"""

from __future__ import annotations

import itertools
import re
import shlex
import string
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from loadlib.sweep.spec import PORT, PYTHON, Scalar, ServerSpec, as_text

PLAIN = re.compile(r"[\w@%+=:,./{}-]+")  # an argument shlex reads back as written, `{port}` included
SINGLE_LABEL = "server"  # the one configuration of a [server] without grid or configs


@dataclass(frozen=True)
class ServerConfig:
    """One configuration: its `label` (the records' `target`), the `values` of its placeholders,
    and its `command` with them filled and `{port}` kept (`argv(port)` fills it)."""

    label: str
    values: Mapping[str, Scalar] = field(hash=False)
    command: str

    def argv(self, port: int) -> list[str]:
        """The command's arguments with `{port}` filled: split like a shell, run without one."""
        return [arg.replace("{" + PORT + "}", str(port)) for arg in shlex.split(self.command)]


def configurations(spec: ServerSpec) -> list[ServerConfig]:
    """The spec's configurations in the order they run (see the module's doc)."""
    if spec.configs is not None:
        return [_config(spec.command, entry.label, dict(entry.values)) for entry in spec.configs]
    if not spec.grid:
        return [_config(spec.command, SINGLE_LABEL, {})]
    keys = list(spec.grid)
    return [_config(spec.command, label_of(dict(zip(keys, combo))), dict(zip(keys, combo)))
            for combo in itertools.product(*spec.grid.values())]


def label_of(values: Mapping[str, Scalar]) -> str:
    """A grid configuration's label: `draft=4,mrr=2`, its keys in the grid's order."""
    return ",".join(f"{key}={as_text(value)}" for key, value in values.items())


def _config(command: str, label: str, values: dict[str, Any]) -> ServerConfig:
    """The configuration, its command split into arguments first so a value with spaces stays one."""
    args = [_fill(arg, values) for arg in shlex.split(command)]
    return ServerConfig(label, values, " ".join(arg if PLAIN.fullmatch(arg) else shlex.quote(arg) for arg in args))


def _fill(arg: str, values: Mapping[str, Scalar]) -> str:
    """One argument with its placeholders filled but `{port}` (literal braces left single);
    `{python}` is this interpreter."""
    out = []
    for literal, name, _spec, _conversion in string.Formatter().parse(arg):
        out.append(literal)
        if name is not None:
            out.append("{" + PORT + "}" if name == PORT else sys.executable if name == PYTHON else as_text(values[name]))
    return "".join(out)
