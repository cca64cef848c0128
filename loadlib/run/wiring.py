"""How a run is wired into Locust, only through its events and small classes.

`init_command_line_parser` adds the tool's options; `init` sets up each process: the
coordinating one (the local runner, or the master) gets a `RunSession` whose users run here
(`LocalUsers`) or on Locust's workers (`WorkerUsers`), and logs each cell's start and end
(`CellProgress`, on the tool's `cell` hook); a worker gets its `ProcessRun`, takes each
test's configuration, the load mode's announcements and the rounds' assignments from the master
(custom messages), and sends its records back in batches and its self-watch with its reports.
`test_start`/`test_stop` frame a test; the load shape (`loadlib.run.shape`) spawns what the mode
wants, honours `-r` and `-t`, and ends the test when the mode is done.

Two kinds of locustfile run here. One whose users are `ModeUser`s (`locustfiles/dflash.py`)
plays a load mode: the protocol's rounds from the command-line options, or a `--profile`'s mode,
which may run the profile's scenarios' users instead. Any other locustfile runs its own
`LLMUser`s as Locust runs any users; the session keeps the run directory, the journal and the summary.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import weakref
from typing import TYPE_CHECKING, Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from loadlib.hooks import events as llm_events
from loadlib.modes import Assignment
from loadlib.profiles import ProfileError
from loadlib.run import metrics_export, options, otel_export
from loadlib.run.clock_sync import WorkerClock
from loadlib.run.config import RunConfig, request_settings
from loadlib.run.inputs import (api_key_of, check_gpu_power, check_run_dir_free, refuse_load_mode_options,
                                refuse_profile_settings, run_profile, usage_error)
from loadlib.run.processes import LocalUsers
from loadlib.run.runtime import (ASSIGN_MESSAGE, CONFIG_MESSAGE, DRAIN_MESSAGE, DRAINED_MESSAGE, MODE_MESSAGE,
                                 PID_MESSAGE, LocalSink, ProcessRun, WorkerSink, attach)
from loadlib.run.selfwatch import SelfWatch
from loadlib.run.shared_resampling import serve_resampling
from loadlib.run.target import Target
from loadlib.run.users import ModeUser, mode_user_classes
from loadlib.run.workers import FINAL_BATCHES_WAIT_S, SELFWATCH_KEY, WorkerUsers

if TYPE_CHECKING:
    from loadlib.run.session import RunSession

log = logging.getLogger("uni-bench")
_installed = False
_SESSIONS: "weakref.WeakKeyDictionary[Environment, RunSession]" = weakref.WeakKeyDictionary()


def install() -> None:
    """Registers the run's listeners on Locust's global events (once per process)."""
    global _installed
    if not _installed:
        events.init_command_line_parser.add_listener(options.add_arguments)
        events.init.add_listener(_on_init)
        _installed = True


def session_of(environment: Environment) -> RunSession | None:
    """The run's coordinating session (on the master or the local runner), if there is one."""
    return _SESSIONS.get(environment)


def _on_init(environment: Environment, **_kwargs: Any) -> None:
    opts = environment.parsed_options
    runner = environment.runner
    if opts is None or runner is None:
        return
    watch = SelfWatch()
    settings = request_settings(None, opts, "", api_key_of(opts))
    if isinstance(runner, WorkerRunner):
        _init_worker(environment, runner, ProcessRun(environment, settings, WorkerSink(runner.send_message, watch),
                                                     watch))
        return
    from loadlib.run.progress import CellProgress  # the coordinator's half: its tables need pandas, a worker not
    from loadlib.run.session import RunSession

    locustfile_classes = list(environment.user_classes)
    plays_load_modes = any(issubclass(cls, ModeUser) for cls in locustfile_classes)
    profile = _checked_inputs(opts, plays_load_modes)
    metrics_export.install(environment, lambda: _SESSIONS.get(environment))
    otel_export.install(environment, lambda: _SESSIONS.get(environment))
    target = Target(environment)
    target.start(profile)
    session = RunSession(environment, plays_load_modes, profile, target)
    _SESSIONS[environment] = session
    llm_events.cell.add_listener(session.cell_readings.on_cell)  # first: the listeners below read its readings
    progress = CellProgress(session.cell_readings, lambda: session.users.streams_in_flight())
    llm_events.cell.add_listener(progress.on_cell)
    if isinstance(runner, MasterRunner):
        session.users = WorkerUsers(environment, session.take_lines, session.take_record, session.live_add,
                                    session.stop, respawn_lost_users=plays_load_modes)
    else:
        run = ProcessRun(environment, settings, LocalSink(session.take_record), watch)
        attach(environment, run)
        session.users = LocalUsers(environment, run, session.live_add)
    if environment.web_ui is not None:
        from loadlib.run import webui  # its page renders tables and the report (pandas): a headless run never loads it

        webui.install(environment, session)
    if opts.headless and environment.shape_class is not None:
        _sigterm_like_ctrl_c()
    environment.events.test_start.add_listener(lambda **_: session.begin())
    environment.events.test_stop.add_listener(progress.flush)
    environment.events.test_stop.add_listener(lambda **_: session.end())
    environment.events.quitting.add_listener(lambda **_: target.stop())
    environment.events.quit.add_listener(lambda **_: _summary_into_html_report(opts.html_file, session))


def _summary_into_html_report(html_file: str | None, session: RunSession) -> None:
    """Locust has written its `--html` report: the last test's summary goes in it too."""
    if html_file and session.summary_text and session.run_dir is not None:
        from loadlib.run import llmstats

        llmstats.add_to_html_report(html_file, session.summary_text, session.run_dir)


def _checked_inputs(opts: Any, plays_load_modes: bool) -> Any:
    """The run's profile (None for a locustfile's own users), after checking every input: a bad
    one is one line and exit code 2 before anything starts."""
    try:
        if plays_load_modes:
            if opts.profile:
                refuse_profile_settings(opts)
            profile = run_profile(opts)
        else:
            refuse_load_mode_options(opts)
            profile = None
    except ProfileError as exc:
        usage_error(str(exc))
    if opts.num_users is not None and opts.num_users < 1:
        usage_error(f"-u/--users: must be at least 1, got {opts.num_users}")
    check_run_dir_free(opts.run_dir)
    check_gpu_power(opts)
    return profile


def _sigterm_like_ctrl_c() -> None:
    """SIGTERM ends a headless shape run as Ctrl-C does (summary written, simulator stopped):
    Locust installs its own SIGTERM handler only after a headless shape test has ended. A SIGTERM
    that comes while the first one's end is under way (`timeout` and a supervisor may both send
    one) lets that end finish instead of interrupting it with a traceback and no summary."""
    main = gevent.getcurrent()
    ending = False

    def on_sigterm() -> None:
        nonlocal ending
        if ending:
            log.info("SIGTERM again: the run is already ending (writing its summary)")
            return
        ending = True
        gevent.get_hub().loop.run_callback(main.throw, KeyboardInterrupt)

    gevent.signal_handler(signal.SIGTERM, on_sigterm)


def _init_worker(environment: Environment, runner: WorkerRunner, run: ProcessRun) -> None:
    """A worker: each test's configuration, the mode's announcements and the rounds' assignments
    come from the master; its records and self-watch figures (with its pid) go back. Its clock's
    offset to the master's is measured from its start, again at each test's start and end, and
    every 30 s (`loadlib.run.clock_sync`)."""
    attach(environment, run)
    worker_clock = WorkerClock(runner)
    worker_clock.start()
    api_key = api_key_of(environment.parsed_options)
    locustfile_classes = list(environment.user_classes)

    def on_config(msg: Any, **_: Any) -> None:
        config = RunConfig.from_message(msg.data, api_key)
        if config.profile is not None:  # the master's profile decides the classes it spawns
            environment.user_classes = mode_user_classes(config.load_mode.user_kind(config.profile.load),
                                                         config.profile, locustfile_classes)
        run.start(config)
        gevent.spawn(worker_clock.measure)  # the pongs come on this very greenlet: measured beside it

    def drain() -> None:
        """The test ended: once this process's requests in flight have ended (bounded), its clock's
        last offset and its last records go to the master, then word that they went."""
        deadline = time.monotonic() + FINAL_BATCHES_WAIT_S
        while run.watch.in_flight and time.monotonic() < deadline:
            gevent.sleep(0.02)
        worker_clock.measure()
        run.sink.flush()
        runner.send_message(DRAINED_MESSAGE, None)

    runner.register_message(CONFIG_MESSAGE, on_config)
    serve_resampling(runner)
    runner.register_message(DRAIN_MESSAGE, lambda msg, **_: gevent.spawn(drain))
    runner.register_message(MODE_MESSAGE, lambda msg, **_: run.mode_state.on_message(msg.data))
    runner.register_message(ASSIGN_MESSAGE, lambda msg, **_: [run.mode_state.take(Assignment.from_message(data))
                                                              for data in msg.data])
    environment.events.report_to_master.add_listener(
        lambda client_id, data: data.__setitem__(SELFWATCH_KEY, {**run.watch.snapshot(), "pid": os.getpid()}))
    environment.events.test_start.add_listener(
        lambda **_: (run.watch.start(), runner.send_message(PID_MESSAGE, os.getpid())))
    environment.events.test_stop.add_listener(lambda **_: (run.sink.flush(), run.watch.stop()))
