"""Running a profile through real headless Locust against the time-scaled simulator (or any
host), for the scenario, mode and profile tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd

from loadlib.records import read_records
from tests.conftest import FAST_SIM, run_locust, run_locust_together


def run_profile(tmp_path: Path, profile_text: str, users: int, *args: str, sim: str = FAST_SIM,
                timeout: float = 120.0) -> tuple[subprocess.CompletedProcess[str], pd.DataFrame]:
    """Writes `profile_text` to a file, runs it with `-u users`, returns the result and every
    record (measured or not); the run must succeed."""
    profile = tmp_path / "profile.toml"
    profile.write_text(profile_text, encoding="utf-8")
    run_dir = tmp_path / "run"
    extra = ["--sim-args", sim] if "--host" not in args else []
    result = run_locust(["--headless", "-u", str(users), "--profile", str(profile), "--run-dir", str(run_dir),
                         "--loglevel", "WARNING", *extra, *args], cwd=tmp_path, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result, pd.DataFrame(list(read_records(run_dir)))


def run_profiles_together(runs: dict, sim: str = FAST_SIM, timeout: float = 120.0) -> dict:
    """Runs several profiles at once, each as `run_profile` does: name -> (directory, profile text,
    users, *args) in (args with their own --sim-args run on that simulator instead of `sim`),
    name -> (result, every record) out; every run must succeed."""
    commands = {}
    for name, (work, profile_text, users, *args) in runs.items():
        work.mkdir(parents=True, exist_ok=True)
        profile = work / "profile.toml"
        profile.write_text(profile_text, encoding="utf-8")
        extra = ["--sim-args", sim] if "--host" not in args and "--sim-args" not in args else []
        commands[name] = (["--headless", "-u", str(users), "--profile", str(profile), "--run-dir", str(work / "run"),
                           "--loglevel", "WARNING", *extra, *args], work)
    out = {}
    for name, result in run_locust_together(commands, timeout=timeout).items():
        assert result.returncode == 0, (name, result.stderr[-3000:])
        assert "Traceback" not in result.stderr, (name, result.stderr[-3000:])
        out[name] = (result, pd.DataFrame(list(read_records(runs[name][0] / "run"))))
    return out


def max_in_flight(frame: pd.DataFrame) -> int:
    """The most requests of `frame` that were in flight at one moment (from send to end)."""
    events = sorted([(t, 1) for t in frame["sent_at"]] +
                    [(t, -1) for t in frame["sent_at"] + frame["total_s"].fillna(0)], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _t, step in events:
        level += step
        peak = max(peak, level)
    return peak
