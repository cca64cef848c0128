"""The layout's promises that imports can check: the simulator stands alone, and the server
flavours are one registry that the tool's readers and the simulator share."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadlib.sim.wire import SHAPES
from loadlib.wire import flavours

# What the simulator may load of the tool: its own package, the pure-data flavours, and the
# package inits on the way to them.
SIM_MAY_LOAD = ("loadlib", "loadlib.wire", "loadlib.wire.flavours")
HEAVY = ("pandas", "prometheus_client", "psutil", "locust")


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
