"""Wires a run into Locust: the built-in simulator, the run directory, the load mode, records
from every process, the end-of-run summary (its inputs are checked in `loadlib.run.inputs`, the
protocol's locustfile's load shape is `loadlib.run.shape`).

Locust is extended only through its events and small classes: `init_command_line_parser` adds
the options, `init` sets up each process, `test_start`/`test_stop` frame a run, custom messages
carry the run's spec once per test and the rounds' assignments (master -> workers) and batches of
records (workers -> master), `report_to_master` carries the self-watch figures, and the shape
spawns what the load mode wants (`RunSession.users_wanted`), honours `-r` and `-t`, and ends the
test when the mode is done.

Two kinds of locustfile run here. `locustfiles/dflash.py` (its users are `RoundsUser`s) plays a
load mode: the protocol's rounds from the command-line options, or a `--profile`'s mode, whose
scenarios then become the user classes. Any other locustfile runs its own `LLMUser`s as Locust
runs any users; the session only keeps the run directory, the journal and the summary.
"""

from __future__ import annotations

import logging
import shlex
import signal
import time
import weakref
from functools import partial
from pathlib import Path
from typing import Any

import gevent
import orjson
from locust import events
from locust import stats as locust_stats
from locust.env import Environment
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

from loadlib.figures import live as live_figures
from loadlib.modes import Assignment, Driver, SearchHooks, first_users, make_driver
from loadlib.modes.rounds import ROUNDS
from loadlib.modes.trace import TRACE
from loadlib.profiles import Profile, ProfileError
from loadlib.records import RequestRecord, read_records, records_frame
from loadlib.run import llmstats, options, webui
from loadlib.run.inputs import (api_key_of, check_run_dir_free, new_run_dir, refuse_load_mode_options,
                                refuse_profile_settings, request_settings, run_profile, usage_error)
from loadlib.run.intake import RecordIntake
from loadlib.run.liveseries import LiveSeries
from loadlib.run.manifest import build_manifest, write_manifest
from loadlib.run.preflight import FIRST_REQUESTS, FirstFailures, answers_plain_http, list_models
from loadlib.run.runtime import (FLUSH_S, LEVEL_MESSAGE, LIVE_S, RECORDS_MESSAGE, RUN_MESSAGE, LocalSink, ProcessRun,
                                 RunSpec, WorkerSink, attach, dispatch_order, process_run)
from loadlib.run.selfwatch import SelfWatch
from loadlib.run.users import (CUSTOM_CASE, FREE_RUNNING_MODES, RoundsUser, announce_level, begin_test,
                               fire_request_event, profile_user_classes)
from loadlib.run.workers import ASSIGN_MESSAGE, WorkerDispatch
from loadlib.scenarios import COLD, Mix, build_scenarios
from loadlib.truth.cache import flush_prefix_cache
from loadlib.truth.watch import ServerWatch
from loadlib.wire.client import chat_body
from loadlib.wire.connection import Endpoint

log = logging.getLogger("uni-bench")

SELFWATCH_KEY = "uni_selfwatch"
LIVE_WINDOW = 5000  # records kept in memory for the live figures of an open-ended run
FINAL_BATCHES_WAIT_S = 5.0  # how long the end waits for the workers' last batches of records
_installed = False


def install() -> None:
    """Registers the session's listeners on Locust's global events (once per process)."""
    global _installed
    if not _installed:
        events.init_command_line_parser.add_listener(options.add_arguments)
        events.init.add_listener(_on_init)
        _installed = True


_SESSIONS: "weakref.WeakKeyDictionary[Environment, RunSession]" = weakref.WeakKeyDictionary()


def session_of(environment: Environment) -> "RunSession | None":
    """The run's coordinating session (on the master or the local runner), if there is one."""
    return _SESSIONS.get(environment)


class OpenEnded(Driver):
    """A locustfile's own users: no plan; the test ends with `-t`, the web UI's Stop or Ctrl-C."""

    plan: list[Any] = []

    def play(self) -> None:
        self.phase = {"state": "running", "cell": CUSTOM_CASE}
        gevent.sleep(float("inf"))


class RunSession:
    """The coordinating side of a run (master or local runner): one per Locust process."""

    def __init__(self, environment: Environment, plays_load_modes: bool) -> None:
        self.environment = environment
        self.opts = environment.parsed_options
        self.plays_load_modes = plays_load_modes  # locustfiles/dflash.py, not the user's own users
        self.simulator: Any = None
        self.run_dir: Path | None = None
        self.intake: RecordIntake | None = None
        self.profile: Profile | None = None
        self.conductor: Driver | None = None  # the load mode's driver (rounds: the conductor)
        self.manifest: dict[str, Any] = {}
        self.in_flight_by_worker: dict[str, int] = {}
        self.live = LiveSeries()
        self.selfwatch_by_worker: dict[str, dict[str, Any]] = {}
        self.master_watch = SelfWatch(role="master")
        self.users_override: int | None = None  # the web UI's Edit of a closed run
        self.spawn_rate_given = False  # -r on the command line or in the form (else: all at once)
        self.cut_short: str | None = None
        self.first_failures: FirstFailures | None = None
        runner = environment.runner
        self.workers = WorkerDispatch(runner, self.on_lost) if isinstance(runner, MasterRunner) else None
        self.summarized = True
        self.summary_text = ""
        self._runs = 0
        self._profile_file = ""  # the --profile the run was checked with at start-up

    @property
    def mode(self) -> str:
        return self.profile.load.mode if self.plays_load_modes and self.profile is not None else CUSTOM_CASE

    # --- lifecycle --------------------------------------------------------------------------

    def start_target(self) -> None:
        """Checks the inputs (the profile too), then starts the built-in simulator when no --host
        was given."""
        try:
            if self.plays_load_modes:
                if self.opts.profile:
                    refuse_profile_settings(self.opts)
                self.profile = run_profile(self.opts)
            else:
                refuse_load_mode_options(self.opts)
        except ProfileError as exc:
            usage_error(str(exc))
        self._profile_file = self.opts.profile
        if self.opts.num_users is not None and self.opts.num_users < 1:
            usage_error(f"-u/--users: must be at least 1, got {self.opts.num_users}")
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
                usage_error(f"--host: {exc}")

    def stop_target(self) -> None:
        if self.simulator is not None:
            self.simulator.stop()
            self.simulator = None

    def begin(self) -> None:
        """A test starts: new run directory, manifest, the run's spec to every process, the driver."""
        opts = self.opts
        if self.plays_load_modes and (not opts.profile or opts.profile != self._profile_file):
            try:  # the web UI's form may have changed the options
                self.profile = run_profile(opts)
            except ProfileError as exc:
                log.error("error: %s", exc)
                gevent.spawn(self.environment.runner.stop)
                return
        self._runs += 1
        self.run_dir = new_run_dir(opts.run_dir, self._runs, opts.label or self._default_label())
        rounds = self.mode == ROUNDS.name  # bounded by its plan: every record stays for the live tables
        self.intake = RecordIntake(self.run_dir, None if rounds else LIVE_WINDOW, self._settle if rounds else None)
        self.in_flight_by_worker = {}
        self.live = LiveSeries()
        self.users_override = None
        self.cut_short = None
        self.summarized = False
        api_key = api_key_of(opts)
        models = list_models(self.environment.host, api_key, not opts.insecure)
        model, model_warning = models.choose(opts.model)
        if model_warning:
            log.warning("%s", model_warning)
        self.first_failures = FirstFailures() if not opts.keep_going else None
        settings = request_settings(opts, model, api_key)
        users = max(self.environment.runner.target_user_count or 0, opts.num_users or 1)
        flush = partial(flush_prefix_cache, self.environment.host, api_key, not opts.insecure)
        common = dict(build_body=lambda job: chat_body(settings, job.messages, **job.params),
                      dispatch=self._dispatch, capacity=self._capacity, flush=flush,
                      lead_time_s=0.25 if self.workers is not None else 0.05, request_timeout_s=opts.request_timeout)
        if self.mode == CUSTOM_CASE:
            self.conductor = OpenEnded(users=users, **common)
        else:
            self.conductor = make_driver(self.profile, users, started_at=time.time() + 0.5,
                                         streams_in_flight=self.streams_in_flight, search=self._search_hooks(),
                                         **common)
            if self.mode in FREE_RUNNING_MODES and Mix(build_scenarios(self.profile)).cache == COLD:
                self.conductor.flush_cache()  # before any request of the run (a search's plan is still empty)
        started_at = getattr(getattr(self.conductor, "timeline", None), "started_at", time.time())
        spec = RunSpec(self.mode, model, settings.max_tokens, settings.thinking, started_at, users,
                       self.profile.model_dump(mode="json", by_alias=True) if self.mode in FREE_RUNNING_MODES else None,
                       dispatch_order(list(self.environment.runner.clients)) if self.workers else [],
                       models.context_tokens.get(model))
        too_long = self._trace_lines_too_long(spec.context_tokens)
        if self.workers is not None:
            self.environment.runner.send_message(RUN_MESSAGE, spec.to_message())
        else:
            begin_test(process_run(self.environment), spec)
        self.manifest = build_manifest(opts, self.environment.host, model, builtin_simulator=self.simulator,
                                       plan=self.conductor.plan)
        self.manifest["protocol"]["mode"] = self.mode
        if self.mode != ROUNDS.name:
            self.manifest["protocol"]["rounds"] = None  # free-running: durations, in the profile
        if self.plays_load_modes and opts.profile:
            self.manifest["profile"] = {"file": opts.profile, **self.profile.model_dump(mode="json", by_alias=True)}
        if model_warning:
            self.manifest["model_warning"] = model_warning
        if too_long:
            self.manifest["trace_skipped"] = too_long
        self.manifest["ended_at"] = None  # the end marker, set by end(): null after a kill means cut short
        write_manifest(self.run_dir, self.manifest)
        ServerWatch(self.run_dir, opts, self.environment.host, api_key, self.note_in_manifest,
                    cell_records=lambda cell: [r for r in self.records if r["cell"] == cell],
                    cell_events=self.conductor.cell_events,
                    test_stop=self.environment.events.test_stop).start()
        self.master_watch.start()
        log.info("Run directory: %s (%s mode, %d cells, model %s)", self.run_dir, self.mode,
                 len(self.conductor.plan), model)
        gevent.spawn(self.conductor.run)

    def _trace_lines_too_long(self, context_tokens: int | None) -> str | None:
        """A trace's lines that ask for more than the model's context are skipped (every process
        leaves them out): how many, said once."""
        load = self.profile.load if self.profile is not None else None
        if self.mode != TRACE.name or context_tokens is None:
            return None
        skipped = sum(1 for r in load.requests if r.input_tokens + r.output_tokens > context_tokens)
        if not skipped:
            return None
        said = (f"{skipped} of {len(load.requests)} trace lines ask for more than the model's context "
                f"({context_tokens} tokens, from /v1/models): skipped")
        log.warning("%s", said)
        return said

    def end(self) -> None:
        """A test stops (finished, stopped or interrupted): print and save the summary once."""
        if self.summarized or self.run_dir is None:
            return
        self.summarized = True
        if self.workers is not None:
            self.workers.stop()
            self._wait_for_final_batches()
        if self.opts.csv_prefix:  # Locust rewrites its --csv files once a second, not at the end: let it
            gevent.sleep(locust_stats.CSV_STATS_INTERVAL_SEC + 0.2)  # write them once more with every request
        from loadlib.report import console
        from loadlib.report.summary import summary_document

        self.master_watch.stop()
        self.manifest["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        # a locustfile's own users have no plan to finish: Locust's -t or Stop is their end
        self.manifest["finished"] = self.mode == CUSTOM_CASE or (self.conductor is not None
                                                                 and self.conductor.finished.is_set())
        if self.cut_short:
            self.manifest["cut_short"] = self.cut_short
        self.manifest["client_watch"] = self.selfwatch_snapshots()
        if self.conductor is not None and self.conductor.flushes:
            self.manifest["cache_flushes"] = dict(self.conductor.flushes)
        write_manifest(self.run_dir, self.manifest)  # final before rendering: the report reads the same
        if self.intake is not None:
            self.intake.close()
        frame = records_frame(read_records(self.run_dir))  # the journal, not memory
        text = console.render(summary_document(frame, self.manifest, self.run_dir))
        (self.run_dir / "summary.txt").write_text(text, encoding="utf-8")
        self.summary_text = text
        if self.opts.csv_prefix:
            llmstats.write_csv(llmstats.per_name_table(frame), self.opts.csv_prefix)
        print(text, flush=True)
        print(f"Run files: {self.run_dir}  (recompute with: python -m analysis report {self.run_dir})",
              flush=True)

    def add_to_html_report(self) -> None:
        """Locust has written its `--html` report: the run's summary goes in it too."""
        if self.opts.html_file and self.summary_text and self.run_dir is not None:
            llmstats.add_to_html_report(self.opts.html_file, self.summary_text, self.run_dir)

    def _wait_for_final_batches(self) -> None:
        """Workers send their last records when they stop: wait (bounded) until every worker
        still alive has said it stopped."""
        deadline = time.time() + FINAL_BATCHES_WAIT_S
        runner = self.environment.runner
        while time.time() < deadline and any(node.state not in ("stopped", "ready", STATE_MISSING)
                                             for node in runner.clients.values()):
            gevent.sleep(0.05)

    # --- records ------------------------------------------------------------------------------

    def on_record(self, record: RequestRecord) -> None:
        """A record from this process's users: to the journal at once."""
        if self.intake is not None:
            self.intake.take_record(record)
            if self.first_failures is not None and self.first_failures.watching:
                self._check_first(record.to_dict())

    def on_record_lines(self, lines: bytes, worker_id: str, in_flight: int, live: dict[str, Any] | None) -> None:
        """A worker's batch of records (JSON lines), how many requests it has in flight, and (once
        a second) the running figures of its streams."""
        self.in_flight_by_worker[worker_id] = in_flight
        if live is not None:
            self.live.add(worker_id, live)
        if self.intake is not None:
            self.intake.take_lines(lines)
            if lines and self.first_failures is not None and self.first_failures.watching:
                for line in lines.split(b"\n")[:FIRST_REQUESTS]:
                    self._check_first(orjson.loads(line))

    def _check_first(self, record: dict[str, Any]) -> None:
        reason = self.first_failures.see(record) if self.first_failures is not None else None
        if reason is not None:
            gevent.spawn(self._stop_early, reason)

    def _stop_early(self, reason: str) -> None:
        """The run's first requests all failed alike: stop it with that reason, and a hint when
        an https:// target answers plain HTTP."""
        hint = ""
        if reason.startswith("TLS") and answers_plain_http(self.environment.host):
            hint = " (the server answered plain HTTP: use http:// in --host)"
        said = f"the first {FIRST_REQUESTS} requests all failed: {reason}{hint}"
        log.error("stopping early: %s; --keep-going runs on regardless", said)
        self.manifest["stopped_early"] = said
        if self.environment.shape_class is not None:
            self.cut_short = said  # the shape stops the test at its next tick
        else:
            runner = self.environment.runner
            gevent.spawn(runner.quit if self.opts.headless else runner.stop)

    def on_lost(self, record: RequestRecord) -> None:
        """A request whose worker died: its failed record, counted by Locust as well."""
        fire_request_event(self.environment, record, record.cell)
        self.on_record(record)

    def _settle(self, record: dict[str, Any]) -> None:
        """A rounds record: its worker no longer holds it, and the conductor may go on."""
        if self.workers is not None:
            self.workers.settle(record["request_id"])
        if self.conductor is not None:
            self.conductor.on_record(record)

    @property
    def record_count(self) -> int:
        return self.intake.count if self.intake is not None else 0

    @property
    def records(self) -> list[dict[str, Any]]:
        """The run's records so far (the last `LIVE_WINDOW` of a free-running run): the live
        figures' input. The journal on disk holds them all."""
        return self.intake.recent() if self.intake is not None else []

    def streams_in_flight(self) -> int:
        """Requests being sent right now, over every process that runs users."""
        if self.workers is None:
            return process_run(self.environment).watch.in_flight
        live = {node.id for node in self.environment.runner.clients.values() if node.state != STATE_MISSING}
        return sum(n for worker, n in self.in_flight_by_worker.items() if worker in live)

    def _capacity(self) -> int:
        return self.environment.runner.user_count

    def _dispatch(self, assignments: list[Assignment]) -> None:
        if self.workers is not None:
            self.workers.dispatch(assignments)
        else:
            run = process_run(self.environment)
            for assignment in assignments:
                run.assignments.put(assignment)

    def selfwatch_snapshots(self) -> list[dict[str, Any]]:
        snaps = list(self.selfwatch_by_worker.values())
        if self.workers is None:
            snaps.append(process_run(self.environment).watch.snapshot())
        else:
            snaps.append({**self.master_watch.snapshot(), "role": "master"})
        return snaps

    def _search_hooks(self) -> SearchHooks:
        """What the search mode's driver asks of the session: announcing a level to every process
        that runs users, the run's records (the journal), and keys of the manifest."""
        if self.workers is not None:
            def announce(span: dict[str, Any]) -> None:
                self.environment.runner.send_message(LEVEL_MESSAGE, span)
        else:
            def announce(span: dict[str, Any]) -> None:
                announce_level(process_run(self.environment), span)
        run_dir = self.run_dir
        assert run_dir is not None
        # a worker's count of requests in flight comes with its batches of records
        settle_s = FLUSH_S + 0.2 if self.workers is not None else 0.1
        return SearchHooks(announce, lambda: read_records(run_dir), self.note_in_manifest, settle_s)

    def note_in_manifest(self, key: str, value: Any) -> None:
        """A finding for the manifest (the server's self-description, a search's result), written
        at once: the session is the manifest's one writer, and a run killed later keeps it."""
        self.manifest[key] = value
        if self.run_dir is not None:
            write_manifest(self.run_dir, self.manifest)

    def edit_streams(self, users: int, spawn_rate: float | None) -> None:
        """The web UI's Edit of a closed run: the load shape spawns or stops users to `users`."""
        self.users_override = users
        if spawn_rate is not None:
            self.opts.spawn_rate = spawn_rate
            self.spawn_rate_given = True
        self.manifest.setdefault("edits", []).append({"at": time.time(), "users": users})
        log.info("Edit: the closed loop now runs %d streams", users)

    def users_wanted(self) -> int:
        """What the load mode wants spawned now; before it starts, what its first cell will want."""
        if self.users_override is not None:
            return self.users_override
        driver = self.conductor
        if driver is not None and not driver.finished.is_set():
            timeline = getattr(driver, "timeline", None)
            return timeline.users_wanted(time.time()) if timeline is not None else driver.users_wanted
        return first_users(self.profile if self.plays_load_modes else None, self.opts.num_users or 1)

    def _default_label(self) -> str:
        if self.simulator is not None:
            return "sim"
        return Endpoint.parse(self.environment.host).host.replace(".", "-")


# --- event listeners ----------------------------------------------------------------------------

def _on_init(environment: Environment, **_kwargs: Any) -> None:
    opts = environment.parsed_options
    runner = environment.runner
    if opts is None or runner is None:
        return
    plays_load_modes = any(issubclass(cls, RoundsUser) for cls in environment.user_classes)
    watch = SelfWatch()
    settings = request_settings(opts, "", api_key_of(opts))
    if isinstance(runner, WorkerRunner):
        _init_worker(environment, runner, ProcessRun(environment, settings,
                                                     WorkerSink(runner.send_message, watch), watch))
        return
    session = RunSession(environment, plays_load_modes)
    session.spawn_rate_given = opts.spawn_rate is not None  # Locust fills in 1 later
    _SESSIONS[environment] = session
    session.start_target()
    if plays_load_modes and session.mode in FREE_RUNNING_MODES:
        environment.user_classes = profile_user_classes(session.profile)
    webui.install(environment, session)
    if isinstance(runner, MasterRunner):
        runner.register_message(RECORDS_MESSAGE, lambda msg, **_: session.on_record_lines(
            msg.data["lines"], msg.node_id, msg.data["in_flight"], msg.data.get("live")))
        environment.events.worker_report.add_listener(
            lambda client_id, data: SELFWATCH_KEY in data and session.selfwatch_by_worker.__setitem__(
                client_id, data[SELFWATCH_KEY]))
    else:
        attach(environment, ProcessRun(environment, settings, LocalSink(session.on_record), watch))
        gevent.spawn(_sample_live, session)
        environment.events.test_start.add_listener(lambda **_: watch.start())
        environment.events.test_stop.add_listener(lambda **_: watch.stop())
    if opts.headless and environment.shape_class is not None:
        _sigterm_like_ctrl_c()
    environment.events.test_start.add_listener(lambda **_: session.begin())
    environment.events.test_stop.add_listener(lambda **_: session.end())
    environment.events.quitting.add_listener(lambda **_: session.stop_target())
    environment.events.quit.add_listener(lambda **_: session.add_to_html_report())


def _sample_live(session: RunSession) -> None:
    """The local runner's own running figures, once a second while streams are in flight."""
    while True:
        gevent.sleep(LIVE_S)
        if live_figures.COUNTERS.in_flight or live_figures.COUNTERS.finished:
            session.live.add("local", live_figures.COUNTERS.snapshot_and_reset())


def _sigterm_like_ctrl_c() -> None:
    """SIGTERM ends a headless shape run as Ctrl-C does (summary written, simulator stopped):
    Locust installs its own SIGTERM handler only after a headless shape test has ended."""
    main = gevent.getcurrent()
    gevent.signal_handler(signal.SIGTERM, lambda: gevent.get_hub().loop.run_callback(main.throw, KeyboardInterrupt))


def _init_worker(environment: Environment, runner: WorkerRunner, run: ProcessRun) -> None:
    """A worker: it takes the run's spec and the rounds' assignments from the master, and sends
    its records and self-watch figures back."""
    attach(environment, run)

    def on_spec(msg: Any, **_: Any) -> None:
        spec = RunSpec.from_message(msg.data)
        if spec.mode in FREE_RUNNING_MODES:  # the master's profile decides the classes it spawns
            environment.user_classes = profile_user_classes(Profile.model_validate(spec.profile))
        begin_test(run, spec)

    runner.register_message(RUN_MESSAGE, on_spec)
    runner.register_message(LEVEL_MESSAGE, lambda msg, **_: announce_level(run, msg.data))
    runner.register_message(ASSIGN_MESSAGE, lambda msg, **_: [run.assignments.put(Assignment.from_message(data))
                                                              for data in msg.data])
    environment.events.report_to_master.add_listener(
        lambda client_id, data: data.__setitem__(SELFWATCH_KEY, run.watch.snapshot()))
    environment.events.test_start.add_listener(lambda **_: run.watch.start())
    environment.events.test_stop.add_listener(lambda **_: (run.sink.flush(), run.watch.stop()))
