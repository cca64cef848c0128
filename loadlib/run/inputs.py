"""A run's inputs, checked before anything starts: the profile (or the protocol from the
command-line options), options that a profile or a locustfile's own users make meaningless, and
the run directory. A bad one is one line on stderr and exit code 2."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from loadlib.modes.rounds import ROUNDS
from loadlib.profiles import Profile, ProfileError, load_profile
from loadlib.records import MANIFEST_FILE, RECORDS_FILE
from loadlib.run import options
from loadlib.scenarios.thread import PROTOCOL_PROMPTS
from loadlib.truth.gpu_power import gpu_power_problem


def run_profile(opts: Any) -> Profile:
    """The run's profile: the `--profile` file, or the protocol from the command-line options.
    Raises `ProfileError` (one line) when it cannot be used. The options are left as they are."""
    if not opts.profile:
        unknown = [name for name in opts.scenarios if name not in PROTOCOL_PROMPTS]
        if unknown:
            raise ProfileError(f"--scenarios: unknown scenario {unknown[0]!r} (known: {', '.join(PROTOCOL_PROMPTS)})")
        return Profile.model_validate({
            "request": {"max_tokens": opts.max_tokens, "thinking": opts.thinking},
            "load": {"mode": ROUNDS.name, "rounds": opts.rounds, "concurrency": opts.concurrency},
            "scenarios": {"protocol": {"single": opts.scenarios}}})
    return load_profile(opts.profile)


# One user is one stream: a cell of N streams needs N users. A concurrency typed beside -u that -u
# cannot run is refused; a profile's cells (a file run with several -u, as uni-bench-x2.toml is)
# and the default concurrency's are left out above -u, and the run says which.
STREAM_COUNTS = ("concurrency", "levels")  # the [load] keys that ask for cells of N streams (rounds, ladder)


def refuse_streams_beyond_users(opts: Any, users: int, users_name: str = "-u") -> None:
    """A `--concurrency` given that needs more users than the run has (`users_name`: where they
    were set, -u or the web UI's form): `ProfileError`, one line."""
    if opts.profile or opts.concurrency == options.PROFILE_SETTINGS["concurrency"]:
        return
    beyond = max((n for n in opts.concurrency if n > users), default=None)
    if beyond is not None:
        fix = f"give -u {beyond} or more" if users_name == "-u" else f"make it {beyond} or more"
        raise ProfileError(f"--concurrency {beyond} needs {beyond} users, {users_name} is {users}: {fix}")


def cells_not_run(profile: Profile, opts: Any, users: int) -> str | None:
    """The cells of the profile (or of the default concurrency) that need more users than the run
    has, and so do not run, named for the log, the manifest and the summary; None when all run."""
    for key in STREAM_COUNTS:
        beyond = [n for n in getattr(profile.load, key, None) or () if n > users]
        if beyond:
            where = f"{opts.profile}'s load.{key}" if opts.profile else \
                f"the default concurrency {','.join(map(str, profile.load.concurrency))}"
            return (f"the {'- and '.join(map(str, beyond))}-stream cells of {where} (-u is {users}: "
                    f"give -u {max(beyond)} to run them)")
    return None


def profile_settings(profile: Profile) -> dict[str, Any]:
    """The values of the options a profile sets itself (`options.PROFILE_SETTINGS`), as the
    profile has them: a rounds profile's rounds and concurrency, its protocol scenarios, its
    request defaults; None where its mode has no such setting."""
    load = profile.load
    return {"rounds": getattr(load, "rounds", None), "concurrency": getattr(load, "concurrency", None),
            "max_tokens": profile.request.max_tokens, "thinking": profile.request.thinking,
            "scenarios": [name for spec in profile.scenarios.values() if spec.kind == "protocol"
                          for name in spec.single] or None}


def refuse_profile_settings(opts: Any) -> None:
    """A profile sets the request and protocol settings itself: those options beside it are
    refused rather than silently ignored."""
    for name, default in options.PROFILE_SETTINGS.items():
        if getattr(opts, name) != default:
            raise ProfileError(f"--{name.replace('_', '-')}: set it in the profile {opts.profile}, not beside --profile")


def refuse_load_mode_options(opts: Any) -> None:
    """A locustfile with its own users has no rounds or protocol scenarios: those options are
    refused rather than silently ignored (Locust's own --profile keeps its meaning, a run name)."""
    for name in options.LOAD_MODE_OPTIONS:
        if getattr(opts, name) != options.PROFILE_SETTINGS[name]:
            raise ProfileError(f"--{name.replace('_', '-')}: only for locustfiles/dflash.py's load modes; "
                               "this locustfile runs its own users")
    if str(opts.profile or "").endswith(".toml"):
        raise ProfileError(f"--profile {opts.profile}: profiles run with locustfiles/dflash.py; "
                           "this locustfile runs its own users")


def api_key_of(opts: Any) -> str | None:
    return opts.api_key or os.environ.get("OPENAI_API_KEY") or None


def new_run_dir(requested: str, run_number: int, label: str) -> Path:
    if requested:
        path = Path(requested if run_number == 1 else f"{requested}-{run_number}")
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path("runs") / f"{stamp}-{label}"
        suffix = 2
        while path.exists():
            path = Path("runs") / f"{stamp}-{label}-{suffix}"
            suffix += 1
    path.mkdir(parents=True, exist_ok=True)
    return path


def usage_error(message: str) -> None:
    """A bad input: one line, exit code 2, and the workers `--processes` forked before the inputs
    were read go too (else they wait on for a master that is gone)."""
    sys.stderr.write(f"error: {message}\n")
    _stop_forked_workers()
    sys.exit(2)


def _stop_forked_workers() -> None:
    """Kills this process's forked copies (Locust's `--processes` workers share its command line);
    nothing has started in them yet, so there is nothing to end gracefully."""
    me = psutil.Process()
    for child in me.children():
        try:
            if child.cmdline() == me.cmdline():
                os.kill(child.pid, signal.SIGKILL)
        except (psutil.Error, ProcessLookupError):
            pass  # gone already


def check_run_dir_free(requested: str) -> None:
    """An explicit --run-dir must be a directory this process can create or use, holding no run;
    anything else is refused before anything starts."""
    if not requested:
        return
    path = Path(requested)
    if (path / RECORDS_FILE).exists() or (path / MANIFEST_FILE).exists():
        usage_error(f"--run-dir {requested}: already holds a run; choose another directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        usage_error(f"--run-dir {requested}: cannot create it: {exc.strerror or exc}")
    if not os.access(path, os.W_OK):
        usage_error(f"--run-dir {requested}: not writable")


def check_gpu_power(opts: Any) -> None:
    """`--gpu-power`'s meter must be readable now (NVML and the GPUs named, or the exporter and its
    metrics): else the run would measure without the figures it was asked for."""
    power = getattr(opts, "gpu_power", None)
    problem = gpu_power_problem(power) if power is not None else None
    if problem:
        usage_error(f"--gpu-power {power}: {problem}")
