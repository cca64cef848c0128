"""A new load mode is one file in `loadlib/modes/` plus one line in its registry: a copy of the
package gets a toy mode that way, and real headless Locust plays it on one and on two processes.

The toy mode ("countdown") owns both halves: its driver holds one cell until the journal has the
profile's number of requests; its users' half sends this process's share of them, one per user
turn, then idles. Nothing in `loadlib/run` is touched for it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from loadlib.records import read_records
from tests.conftest import FAST_SIM, REPO

pytestmark = pytest.mark.processes

TOY_MODE = '''
"""Load mode `countdown`: exactly `requests` requests in one cell, shared by the processes."""

from __future__ import annotations

import time
from typing import Literal

import gevent
from pydantic import PositiveInt

from loadlib.modes.base import Driver, LoadMode, ModeState
from loadlib.scenarios import Cell, Mix, build_scenarios
from loadlib.scenarios.spec import Strict


class CountdownLoad(Strict):
    mode: Literal["countdown"]
    requests: PositiveInt


class CountdownDriver(Driver):
    def __init__(self, run, users, load, mix):
        super().__init__(run, users)
        self.load, self.cell = load, Cell("countdown", "countdown", mix, users)
        self.plan = [self.cell]

    def play(self):
        self.start_cell(self.cell)
        while sum(1 for r in self.run.records() if r["cell"] == "countdown") < self.load.requests:
            gevent.sleep(0.1)
        self.end_cell(self.cell)


class CountdownUsers(ModeState):
    def __init__(self, left, mix, cell):
        self.left, self.mix, self.cell = left, mix, cell

    def step(self, user):
        if self.left <= 0:
            gevent.sleep(0.1)
            return
        self.left -= 1
        job = self.mix.next(user.stream)
        user.send(user.body_of(job), self.cell.label(job, user.stream))


class Countdown(LoadMode):
    schema = CountdownLoad

    def user_kind(self, load):
        return "free_slots"

    def driver(self, profile, users, started_at, run):
        return CountdownDriver(run, users, profile.load, Mix(build_scenarios(profile), profile.seed))

    def begin(self, config, share):
        index, count = share
        mine = len(range(index, config.profile.load.requests, count))
        mix = Mix(build_scenarios(config.profile), config.profile.seed)
        return CountdownUsers(mine, mix, Cell("countdown", "countdown", mix, config.users))


COUNTDOWN = Countdown()
'''

PROFILE = """
[request]
max_tokens = 16
[load]
mode = "countdown"
requests = 7
[scenarios.distinct-issues]
"""


@pytest.fixture(scope="module")
def package_with_toy_mode(tmp_path_factory) -> Path:
    """A copy of the package, with the toy mode's file and its one registry line."""
    root = tmp_path_factory.mktemp("toy")
    shutil.copytree(REPO / "loadlib", root / "loadlib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "locustfiles", root / "locustfiles")
    (root / "loadlib" / "modes" / "countdown.py").write_text(TOY_MODE, encoding="utf-8")
    registry = root / "loadlib" / "modes" / "registry.py"
    text = registry.read_text(encoding="utf-8")
    line = "MODES: dict[str, LoadMode] = {mode.name: mode for mode in (ROUNDS, CLOSED, OPEN, LADDER, SEARCH, TRACE, SESSIONS)}"
    assert line in text
    registry.write_text(text.replace(line, line + "\nfrom loadlib.modes.countdown import COUNTDOWN; "
                                     "MODES[COUNTDOWN.name] = COUNTDOWN"), encoding="utf-8")
    (root / "toy.toml").write_text(PROFILE, encoding="utf-8")
    return root


@pytest.mark.parametrize("processes", [[], ["--processes", "2"]], ids=["one process", "two processes"])
def test_a_toy_mode_of_one_file_and_one_registry_line_runs(package_with_toy_mode, tmp_path, processes):
    root = package_with_toy_mode
    env = {**os.environ, "PYTHONPATH": str(root)}
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(root / "locustfiles" / "dflash.py"), "--headless", "-u", "3",
         "--profile", str(root / "toy.toml"), "--run-dir", str(run_dir), "--sim-args", FAST_SIM, *processes],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert f"{root}/loadlib" in subprocess.run([sys.executable, "-c", "import loadlib; print(loadlib.__file__)"],
                                               env=env, cwd=tmp_path, capture_output=True, text=True).stdout
    records = pd.DataFrame(list(read_records(run_dir)))
    measured = records[records["cell"] == "countdown"]
    assert len(measured) == 7 and measured["error"].isna().all()
    assert set(measured["worker"]) == ({0, 1} if processes else {0})
    assert "countdown run" in result.stdout  # the summary names the mode's cells
