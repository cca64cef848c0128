"""The run's session, as each of its users sees it: the load shape, the web UI's forms and pages and
the live exports each name what they read (a Protocol beside them), and a real `RunSession` has it.
A sweep is one more load mode, so the session never asks whether it plays one."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

import pytest
from locust.env import Environment

from loadlib.modes import MODES, mode_of
from loadlib.modes.base import DriverOfDrivers
from loadlib.profiles import load_profile
from loadlib.run.metrics_export import RunNow
from loadlib.run.session import RunSession
from loadlib.run.shape import ShapedRun
from loadlib.run.target import Target
from loadlib.run.webform import EditableRun
from loadlib.run.webui import LiveRun, WebRun
from loadlib.sweep.play import Sweep, SweepDriver

PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def members(protocol: type) -> set[str]:
    """What a Protocol names: its attributes and its methods and properties, its bases' included."""
    found: set[str] = set()
    for cls in protocol.__mro__:
        if cls is object or not getattr(cls, "_is_protocol", False) or cls.__module__ == "typing":
            continue
        found |= set(getattr(cls, "__annotations__", {}))
        found |= {name for name, value in vars(cls).items()
                  if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))}
    return found


@pytest.fixture
def session() -> RunSession:
    opts = argparse.Namespace(spawn_rate=None, num_users=4, sim_args="")
    environment = Environment(user_classes=[], parsed_options=opts)
    return RunSession(environment, False, None, Target(environment))


@pytest.mark.parametrize("protocol", [ShapedRun, EditableRun, LiveRun, WebRun, RunNow])
def test_the_session_has_what_each_of_its_users_reads(session, protocol):
    named = members(protocol)
    assert named, protocol
    assert [name for name in sorted(named) if not hasattr(session, name)] == []


def test_each_user_reads_a_few_names_not_the_whole_session(session):
    public = {name for name in dir(session) if not name.startswith("_")}
    read = set().union(*(members(protocol) for protocol in (ShapedRun, WebRun, RunNow)))
    assert read < public and len(read) <= 16, sorted(read)


def test_before_a_test_the_shape_wants_the_modes_first_users_and_an_edit_is_noted(session):
    assert session.users_wanted() == 4  # the locustfile's own users: -u
    session.streams.edit(2, None)
    assert session.users_wanted() == 2 and [edit["users"] for edit in session.manifest["edits"]] == [2]
    session.streams.reset()
    assert session.users_wanted() == 4


def test_a_sweep_is_the_profiles_mode_played_once_per_server():
    profile = load_profile(PROFILES / "sweep-sim.toml")
    mode = mode_of(profile)
    inner = MODES[profile.load.mode]
    assert isinstance(mode, Sweep) and mode.mode is inner and mode.name == inner.name
    assert mode.starts_servers and not inner.starts_servers
    assert mode.first_users(profile.load, 8) == 0 and mode.user_kind(profile.load) == inner.user_kind(profile.load)
    assert mode.fixed_streams == inner.fixed_streams
    assert issubclass(SweepDriver, DriverOfDrivers)
    assert mode_of(profile.model_copy(update={"server": None})) is inner
