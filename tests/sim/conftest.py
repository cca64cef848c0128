"""Fixtures that start real simulator processes on loopback (and always stop them)."""

from __future__ import annotations

import pytest

from loadlib.sim.process import start_simulator

FAST = ["--time-scale", "0.02"]


@pytest.fixture(scope="module")
def sim():
    with start_simulator(FAST) as proc:
        yield proc
