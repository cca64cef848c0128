"""The layout's promises that imports and the source can check: the simulator stands alone, the
server flavours are one registry that the tool's readers and the simulator share, a load mode's
name is read in its own modules only, and a request's record is built in one place."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadlib.sim.wire import SHAPES
from loadlib.wire import flavours

# What the simulator may load of the tool: its own package, the pure-data flavours, and the
# package inits on the way to them.
SIM_MAY_LOAD = ("loadlib", "loadlib.wire", "loadlib.wire.flavours")
HEAVY = ("pandas", "prometheus_client", "psutil", "locust")
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.processes
def test_the_simulator_imports_nothing_of_the_tool_but_the_flavours():
    code = ("import json, sys; import loadlib.sim.server, loadlib.sim.__main__; "
            "print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True, timeout=60).stdout)
    tool = [m for m in loaded if (m == "loadlib" or m.startswith("loadlib."))
            and not (m == "loadlib.sim" or m.startswith("loadlib.sim.")) and m not in SIM_MAY_LOAD]
    assert tool == []
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []


def test_the_simulator_speaks_registered_flavours_only():
    assert set(SHAPES) <= set(flavours.FLAVOURS)
    assert all(shape.flavour is flavours.FLAVOURS[name] for name, shape in SHAPES.items())


def test_the_stream_reader_keys_are_every_flavours_reasoning_then_content():
    assert flavours.DELTA_TEXT_KEYS == ("reasoning_content", "reasoning", "content")


# --- load modes stay in their modules; the record is built in one place --------------------------

GUARDED = ("loadlib/figures", "loadlib/report", "loadlib/run", "analysis")  # no mode names here
# A mode's name that means something else where it is compared: (module, value) -> what it is there.
NOT_A_MODE = {("loadlib/run/locust_help.py", "locust"): "the `locust` program's name, on the command line"}
PREFIX_CALLS = ("startswith", "endswith", "removeprefix", "removesuffix")  # a name's pieces read back
MEMBERSHIP_CALLS = ("isin",)


def modules(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (REPO / folder).rglob("*.py"))


def mode_names() -> set[str]:
    from loadlib.modes import MODES, OWN_USERS

    return {*MODES, OWN_USERS.name}


def kind_names() -> set[str]:
    from loadlib.scenarios import KINDS
    from loadlib.scenarios.base import LONG_CONTEXT_KIND, TRACE_KIND

    return {*KINDS, LONG_CONTEXT_KIND, TRACE_KIND}


def mode_constants(tree: ast.Module) -> dict[str, str]:
    """The names a module imports from `loadlib.modes` that stand for a mode's name: a string
    that is one (`OWN_CASE`), or a mode itself (whose `.name` is one)."""
    from loadlib.modes.base import LoadMode

    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loadlib.modes"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if isinstance(value, str) and value in mode_names() or isinstance(value, LoadMode):
                    found[alias.asname or alias.name] = alias.name
    return found


def compared(tree: ast.Module) -> list[tuple[int, ast.expr]]:
    """Every value that a module compares with (`==`, `in`, ...), or gives to `isin` or to a
    prefix test, with its line: tuples, lists and sets opened up."""
    found = []

    def values(node: ast.expr) -> list[ast.expr]:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [value for element in node.elts for value in values(element)]
        if isinstance(node, ast.Starred):
            return values(node.value)
        return [node]

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found += [(node.lineno, value) for side in (node.left, *node.comparators) for value in values(side)]
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in (*MEMBERSHIP_CALLS, *PREFIX_CALLS):
                found += [(node.lineno, value) for arg in node.args for value in values(arg)]
    return found


def test_no_module_outside_the_modes_tells_a_cell_by_its_modes_name():
    """Figures, reports, the run layer and the post-processor ask a record's label fields (`kind`,
    `closed_loop`, `scheduled_at`, ...) and a mode's own answers, never a mode's name; the names
    of older records are read back in `loadlib/modes/older_records.py` alone."""
    names = mode_names()
    found = []
    for path in modules(*GUARDED):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = mode_constants(tree)
        for line, value in compared(tree):
            if isinstance(value, ast.Constant) and value.value in names and \
                    (str(path.relative_to(REPO)), value.value) not in NOT_A_MODE:
                found.append(f"{path.relative_to(REPO)}:{line}: {value.value!r}")
            elif isinstance(value, ast.Name) and value.id in constants:
                found.append(f"{path.relative_to(REPO)}:{line}: {value.id}")
            elif isinstance(value, ast.Attribute) and value.attr == "name" and \
                    isinstance(value.value, ast.Name) and value.value.id in constants:
                found.append(f"{path.relative_to(REPO)}:{line}: {value.value.id}.name")
    assert found == []


def test_no_module_reads_a_kind_back_from_a_names_prefix():
    """A scenario's kind is its records' `kind`: nothing outside the scenarios and the modes tests
    a name for a kind's or a mode's name at its start or end ("long-context-14k")."""
    names = mode_names() | kind_names()
    constants = {"LONG_CONTEXT_KIND", "TRACE_KIND", "OWN_CASE", "WARMUP"}
    found = []
    for path in modules("loadlib", "analysis"):
        if path.is_relative_to(REPO / "loadlib/scenarios") or path.is_relative_to(REPO / "loadlib/modes"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PREFIX_CALLS:
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and arg.value in names or \
                            isinstance(arg, ast.Name) and arg.id in constants:
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


def test_a_record_is_built_in_one_place_and_the_wire_knows_no_label():
    """`RequestRecord.of` (and `.lost`, for a lost worker's request) in `loadlib/records.py` make
    every record: no other module calls the class or sets a label field on a record; the wire
    returns an `Exchange` and imports nothing of the run's labels, cells or modes."""
    from loadlib.records import LABEL_FIELDS

    built, relabelled, wire = [], [], []
    for path in modules("loadlib", "analysis", "benchmarks"):
        if path == REPO / "loadlib/records.py":
            continue
        where = path.relative_to(REPO)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "RequestRecord"
                                               or getattr(node.func, "attr", None) == "RequestRecord"):
                built.append(f"{where}:{node.lineno}")
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for each in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(each, ast.Attribute) and each.attr in LABEL_FIELDS and \
                            "record" in ast.unparse(each.value):
                        relabelled.append(f"{where}:{node.lineno}: {ast.unparse(each)}")
            if path.is_relative_to(REPO / "loadlib/wire") and isinstance(node, ast.ImportFrom):
                named = {alias.name for alias in node.names}
                if (node.module or "").startswith(("loadlib.scenarios", "loadlib.modes", "loadlib.run")) or \
                        named & {"RequestLabel", "RequestRecord"}:
                    wire.append(f"{where}:{node.lineno}: {node.module}")
    assert (built, relabelled, wire) == ([], [], [])
