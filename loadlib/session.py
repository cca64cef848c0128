"""Wires a run into Locust: options and profile, the built-in simulator, the run directory, the
load mode's driver, records from every process, the end-of-run summary, and the shape that
spawns the users and stops the test.

Locust is extended only through its events and small classes: `init_command_line_parser` adds
the options, `init` sets up each process, `test_start`/`test_stop` frame a run, custom messages
carry assignments (master -> workers) and records (workers -> master), `report_to_master`
carries the self-watch figures, and `ProtocolShape` spawns what the driver wants and ends the
test when it is done. Without `--profile` the run is the protocol, from the command-line options.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner
from locust.shape import LoadTestShape

from loadlib import options, servertruth, webui
from loadlib.cache import flush_prefix_cache
from loadlib.client import ChatSettings, chat_body, discover_model
from loadlib.http1 import Endpoint
from loadlib.manifest import build_manifest, write_manifest
from loadlib.modes import ladder_levels
from loadlib.plan import make_driver
from loadlib.profiles import Profile, ProfileError, load_profile
from loadlib.prompts import PROTOCOL_PROMPTS
from loadlib.protocol import Assignment, Driver
from loadlib.records import RecordJournal, RequestRecord
from loadlib.selfwatch import SelfWatch
from loadlib.users import Mailbox
from loadlib.workers import ASSIGN_MESSAGE, WorkerDispatch

log = logging.getLogger("uni-bench")

RECORD_MESSAGE = "uni:record"
SELFWATCH_KEY = "uni_selfwatch"


def install() -> None:
    """Registers the session's listeners on Locust's global events (call once per locustfile)."""
    events.init_command_line_parser.add_listener(options.add_arguments)
    events.init.add_listener(_on_init)


class RunSession:
    """The coordinating side of a run (master or local runner): one per Locust process."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.opts = environment.parsed_options
        self.simulator: Any = None
        self.run_dir: Path | None = None
        self.journal: RecordJournal | None = None
        self.profile: Profile | None = None
        self.conductor: Driver | None = None  # the load mode's driver (rounds: the conductor)
        self.manifest: dict[str, Any] = {}
        self.records: list[dict[str, Any]] = []
        self.selfwatch_by_worker: dict[str, dict[str, Any]] = {}
        runner = environment.runner
        self.workers = WorkerDispatch(runner, self.on_record) if isinstance(runner, MasterRunner) else None
        self.summarized = True
        self._runs = 0
        self._profile_file = ""  # the --profile the run was checked with at start-up

    # --- lifecycle --------------------------------------------------------------------------

    def start_target(self) -> None:
        """Checks the inputs (the profile too), then starts the built-in simulator when no --host
        was given."""
        try:
            if self.opts.profile:
                refuse_profile_settings(self.opts)
            self.profile = run_profile(self.opts)
        except ProfileError as exc:
            _usage_error(str(exc))
        self._profile_file = self.opts.profile
        if self.opts.num_users is not None and self.opts.num_users < 1:
            _usage_error(f"-u/--users: must be at least 1, got {self.opts.num_users}")
        check_run_dir_free(self.opts.run_dir)
        if not self.environment.host:
            from loadlib.sim.process import start_simulator

            self.simulator = start_simulator(shlex.split(self.opts.sim_args))
            self.environment.host = self.simulator.url
            log.info("No --host given: started the built-in simulator at %s", self.simulator.url)
        else:
            try:
                Endpoint.parse(self.environment.host)
            except ValueError as exc:
                _usage_error(f"--host: {exc}")

    def stop_target(self) -> None:
        if self.simulator is not None:
            self.simulator.stop()
            self.simulator = None

    def begin(self) -> None:
        """A test starts: new run directory, manifest, conductor."""
        opts = self.opts
        if not opts.profile or opts.profile != self._profile_file:  # the web UI's form may change them
            try:
                self.profile = run_profile(opts)
            except ProfileError as exc:
                log.error("error: %s", exc)
                gevent.spawn(self.environment.runner.stop)
                return
        self._runs += 1
        self.run_dir = _new_run_dir(opts.run_dir, self._runs, opts.label or self._default_label())
        self.journal = RecordJournal(self.run_dir)
        self.records = []
        self.summarized = False
        api_key = _api_key(opts)
        model = opts.model or discover_model(self.environment.host, api_key, not opts.insecure) or "default"
        settings = _settings(opts, model, api_key)
        users = max(self.environment.runner.target_user_count or 0, opts.num_users or 1)
        self.conductor = make_driver(
            self.profile, users, build_body=lambda job: chat_body(settings, job.messages, **job.params),
            dispatch=self._dispatch, capacity=self._capacity,
            flush=partial(flush_prefix_cache, self.environment.host, api_key, not opts.insecure),
            lead_time_s=0.25 if self.workers is not None else 0.05, request_timeout_s=opts.request_timeout)
        plan = self.conductor.plan
        self.manifest = build_manifest(opts, self.environment.host, model, builtin_simulator=self.simulator,
                                       plan=plan)
        self.manifest["protocol"]["mode"] = self.profile.load.mode
        if self.profile.load.mode != "rounds":
            self.manifest["protocol"]["rounds"] = None  # free-running: durations, in the profile
        if opts.profile:
            self.manifest["profile"] = {"file": opts.profile, **self.profile.model_dump(mode="json", by_alias=True)}
        self.manifest["ended_at"] = None  # the end marker, set by end(): null after a kill means cut short
        write_manifest(self.run_dir, self.manifest)
        servertruth.attach(self, api_key)
        log.info("Run directory: %s (%s mode, %d cells, model %s)", self.run_dir, self.profile.load.mode,
                 len(plan), model)
        gevent.spawn(self.conductor.run)

    def end(self) -> None:
        """A test stops (finished, stopped or interrupted): print and save the summary once."""
        if self.summarized or self.run_dir is None:
            return
        self.summarized = True
        if self.workers is not None:
            self.workers.stop()
        from analysis import render_summary

        self.manifest["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.manifest["finished"] = self.conductor is not None and self.conductor.finished.is_set()
        self.manifest["client_watch"] = self.selfwatch_snapshots()
        if self.conductor is not None and self.conductor.flushes:
            self.manifest["cache_flushes"] = dict(self.conductor.flushes)
        write_manifest(self.run_dir, self.manifest)  # final before rendering: the report reads the same
        text = render_summary(self.records, self.manifest, self.run_dir)
        (self.run_dir / "summary.txt").write_text(text, encoding="utf-8")
        if self.journal is not None:
            self.journal.close()
        print(text, flush=True)
        print(f"Run files: {self.run_dir}  (recompute with: python -m analysis report {self.run_dir})",
              flush=True)

    # --- records and assignments --------------------------------------------------------------

    def on_record(self, record: dict[str, Any]) -> None:
        if self.journal is None or self.conductor is None:
            return
        if self.workers is not None:
            self.workers.settle(record["request_id"])
        self.journal.append(RequestRecord.from_dict(record))
        self.records.append(record)
        self.conductor.on_record(record)

    def _capacity(self) -> int:
        return self.environment.runner.user_count

    def _dispatch(self, assignments: list[Assignment]) -> None:
        if self.workers is not None:
            self.workers.dispatch(assignments)
        else:
            self.environment.uni_mailbox.post(assignments)

    def selfwatch_snapshots(self) -> list[dict[str, Any]]:
        snaps = list(self.selfwatch_by_worker.values())
        watch = getattr(self.environment, "uni_selfwatch", None)
        if watch is not None and self.workers is None:  # a master's own loop times nothing
            snaps.append(watch.snapshot())
        return snaps

    def users_wanted(self) -> int:
        """What the driver wants spawned; before it exists, what its first cell will want."""
        if self.conductor is not None:
            return self.conductor.users_wanted
        users = self.opts.num_users or 1
        load = self.profile.load if self.profile else None
        return ladder_levels(users, load.levels)[0] if load is not None and load.mode == "ladder" else users

    def _default_label(self) -> str:
        if self.simulator is not None:
            return "sim"
        return Endpoint.parse(self.environment.host).host.replace(".", "-")


class ProtocolShape(LoadTestShape):
    """Spawns the users the driver wants at once (all `-u`; the ladder's current level) and stops
    the test when the driver is done."""

    use_common_options = True

    def tick(self) -> tuple[int, float] | None:
        environment = self.runner.environment
        session: RunSession | None = getattr(environment, "uni_session", None)
        if session is None:
            users = environment.parsed_options.num_users or 1
            return users, float(users)
        driver = session.conductor
        # A driver from an earlier test (the web UI starts again) is finished and summarized.
        if driver is not None and driver.finished.is_set() and not session.summarized:
            return None
        users = session.users_wanted()
        return users, float(users)


# --- event listeners ----------------------------------------------------------------------------

def _on_init(environment: Environment, **_kwargs: Any) -> None:
    opts = environment.parsed_options
    runner = environment.runner
    if opts is None or runner is None:
        return
    watch = SelfWatch()
    environment.uni_selfwatch = watch
    if isinstance(runner, WorkerRunner):
        environment.uni_mailbox = Mailbox(lambda record: runner.send_message(RECORD_MESSAGE, record.to_dict()),
                                          _settings(opts, "", _api_key(opts)))
        runner.register_message(ASSIGN_MESSAGE, lambda msg, **_: environment.uni_mailbox.post(
            [Assignment.from_message(data) for data in msg.data]))
        environment.events.report_to_master.add_listener(
            lambda client_id, data: data.__setitem__(SELFWATCH_KEY, watch.snapshot()))
        environment.events.test_start.add_listener(lambda **_: watch.start())
        environment.events.test_stop.add_listener(lambda **_: watch.stop())
        return
    session = RunSession(environment)
    environment.uni_session = session
    session.start_target()
    webui.install(environment)
    environment.uni_mailbox = Mailbox(lambda record: session.on_record(record.to_dict()),
                                      _settings(opts, "", _api_key(opts)))
    if isinstance(runner, MasterRunner):
        runner.register_message(RECORD_MESSAGE, lambda msg, **_: session.on_record(msg.data))
        environment.events.worker_report.add_listener(
            lambda client_id, data: SELFWATCH_KEY in data and session.selfwatch_by_worker.__setitem__(
                client_id, data[SELFWATCH_KEY]))
    else:
        environment.events.test_start.add_listener(lambda **_: watch.start())
        environment.events.test_stop.add_listener(lambda **_: watch.stop())
    environment.events.test_start.add_listener(lambda **_: session.begin())
    environment.events.test_stop.add_listener(lambda **_: session.end())
    environment.events.quitting.add_listener(lambda **_: session.stop_target())


def run_profile(opts: Any) -> Profile:
    """The run's profile: the `--profile` file, or the protocol from the command-line options.

    A profile's settings then stand in the options (the manifest and the request defaults read
    them there). Raises `ProfileError` (one line) when it cannot be used.
    """
    if not opts.profile:
        unknown = [name for name in opts.scenarios if name not in PROTOCOL_PROMPTS]
        if unknown:
            raise ProfileError(f"--scenarios: unknown scenario {unknown[0]!r} (known: {', '.join(PROTOCOL_PROMPTS)})")
        return Profile.model_validate({
            "request": {"max_tokens": opts.max_tokens, "thinking": opts.thinking},
            "load": {"mode": "rounds", "rounds": opts.rounds, "concurrency": opts.concurrency},
            "scenarios": {"protocol": {"single": opts.scenarios}}})
    profile = load_profile(opts.profile)
    opts.max_tokens, opts.thinking = profile.request.max_tokens, profile.request.thinking
    if profile.load.mode == "rounds":
        opts.rounds, opts.concurrency = profile.load.rounds, profile.load.concurrency
    opts.scenarios = [name for spec in profile.scenarios.values() if spec.kind == "protocol" for name in spec.single]
    return profile


def refuse_profile_settings(opts: Any) -> None:
    """A profile sets the request and protocol settings itself: those options beside it are
    refused rather than silently ignored."""
    for name, default in options.PROFILE_SETTINGS.items():
        if getattr(opts, name) != default:
            raise ProfileError(f"--{name.replace('_', '-')}: set it in the profile {opts.profile}, not beside --profile")


def _settings(opts: Any, model: str, api_key: str | None) -> ChatSettings:
    return ChatSettings(model=model, max_tokens=opts.max_tokens, thinking=opts.thinking,
                        api_key=api_key, timeout_s=opts.request_timeout, verify_tls=not opts.insecure)


def _api_key(opts: Any) -> str | None:
    return opts.api_key or os.environ.get("OPENAI_API_KEY") or None


def _new_run_dir(requested: str, run_number: int, label: str) -> Path:
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


def _usage_error(message: str) -> None:
    sys.stderr.write(f"error: {message}\n")
    sys.exit(2)


def check_run_dir_free(requested: str) -> None:
    """An explicit --run-dir must be a directory this process can create or use, holding no run;
    anything else is refused before anything starts."""
    if not requested:
        return
    path = Path(requested)
    if (path / "records.jsonl").exists() or (path / "manifest.json").exists():
        _usage_error(f"--run-dir {requested}: already holds a run; choose another directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _usage_error(f"--run-dir {requested}: cannot create it: {exc.strerror or exc}")
    if not os.access(path, os.W_OK):
        _usage_error(f"--run-dir {requested}: not writable")
