"""A run's lifecycle on its coordinating process (the local runner, or Locust's master): each test
gets a run directory, a configuration sent to every process that runs users, its load mode's
driver, the journal of records from every process, and at its end the summary.

The lifecycle is the same for every load mode, a sweep included, and for local and distributed
runs: the mode is asked for its driver (`loadlib.modes`), and the users' processes are one
`UserProcesses` (`loadlib.run.processes`). How it is wired into Locust's events is
`loadlib.run.wiring`. What the load shape, the web UI and the live exports read of the session,
each names in a Protocol of its own (`ShapedRun`, `EditableRun`, `LiveRun`, `RunNow`); the rest
of the session is its own.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import gevent
from locust import stats as locust_stats
from locust.env import Environment
from locust.runners import STATE_RUNNING, STATE_SPAWNING

from loadlib import clock
from loadlib.hooks import events
from loadlib.modes import Coordination, Driver, LoadMode, mode_of
from loadlib.profiles import Profile, ProfileError
from loadlib.records import RECORDS_FILE, RequestRecord, read_records, target_dir
from loadlib.run.cell_readings import CellReadings
from loadlib.run.config import RunConfig, request_settings
from loadlib.run.early_stop import EarlyStop
from loadlib.run.inputs import (api_key_of, cells_not_run, new_run_dir, refuse_streams_beyond_users,
                                run_profile)
from loadlib.run.intake import RecordIntake
from loadlib.run.liveseries import LiveSeries
from loadlib.run.manifest import close_manifest, opening_manifest, write_manifest
from loadlib.run.preflight import PlainHttpTarget, list_models
from loadlib.run.processes import UserProcesses
from loadlib.run.shape import StreamsWanted
from loadlib.run.summary_files import write_summary
from loadlib.run.target import Target
from loadlib.run.users import mode_user_classes
from loadlib.truth.cache import flush_prefix_cache
from loadlib.truth.watch import ServerWatch
from loadlib.wire.client import chat_body

log = logging.getLogger("uni-bench")

LIVE_WINDOW = 5000  # records kept in memory for the live figures of an open-ended run


class RunSession:
    """The coordinating side of a run: one per Locust process that coordinates."""

    def __init__(self, environment: Environment, plays_load_modes: bool, profile: Profile | None,
                 target: Target) -> None:
        self._environment = environment
        self._opts = environment.parsed_options
        self.plays_load_modes = plays_load_modes  # locustfiles/dflash.py, not the user's own users
        self._locustfile_classes = list(environment.user_classes)
        self.profile: Profile | None = None  # None: the locustfile's own users
        if profile is not None:
            self.use_profile(profile)
        self._target = target
        self.users: UserProcesses | None = None  # set by the wiring, before any test
        self.run_dir: Path | None = None
        self._intake: RecordIntake | None = None
        # each ended cell's records, read once (the wiring makes it listen to the cells first)
        self.cell_readings = CellReadings(lambda: self.run_dir / RECORDS_FILE if self.run_dir is not None else None)
        self.driver: Driver | None = None
        self.config: RunConfig | None = None
        self.manifest: dict[str, Any] = {}  # written by this session alone (`note_in_manifest`)
        self.live = LiveSeries()
        self.streams = StreamsWanted(self._opts, self.note_in_manifest)
        self._watches: dict[str, ServerWatch] = {}  # the servers watched now, by target label
        self.cell_energy: list[dict[str, Any]] = []  # each ended cell's GPU energy rows, with its target (live metrics)
        self.cut_short: str | None = None
        self._player: gevent.Greenlet | None = None  # plays the test's driver
        self.summarized = True
        self.summary_text = ""
        self._runs = 0

    @property
    def mode(self) -> LoadMode:
        return mode_of(self.profile)

    def use_profile(self, profile: Profile) -> None:
        """The profile the next test plays, and the user classes its mode spawns."""
        self.profile = profile
        self._environment.user_classes = mode_user_classes(self.mode.user_kind(profile.load), profile,
                                                           self._locustfile_classes)

    def users_wanted(self) -> int:
        """How many users the load shape should have spawned now: what the web UI's Edit said, else
        what the test's driver wants, else (before it starts) what its mode's first cell will."""
        if self.streams.edited is not None:
            return self.streams.edited
        driver = self.driver
        if driver is not None and not driver.finished.is_set():
            return driver.users_wanted(clock.now())
        users = self._opts.num_users or 1
        return users if self.profile is None else self.mode.first_users(self.profile.load, users)

    # --- a test --------------------------------------------------------------------------------

    def begin(self) -> None:
        """A test starts: run directory, configuration to every process, manifest, the driver; a
        mode that starts its own servers (a sweep) hands each to the run in turn (`serve`)."""
        opts = self._opts
        users = max(self._environment.runner.target_user_count or 0, opts.num_users or 1)
        if self.plays_load_modes:
            try:  # the options as they stand: the web UI's form may have changed them, or the profile
                refuse_streams_beyond_users(opts, users)
                profile = run_profile(opts)
                if profile != self.profile:
                    self.use_profile(profile)
            except ProfileError as exc:
                return self._refuse(str(exc))
        profile, mode = self.profile, self.mode
        served = not mode.starts_servers  # else nothing to ask, configure or watch yet
        try:
            config, model_warning = self._configure(profile, users) if served else \
                (self._unserved(profile, users), None)
        except PlainHttpTarget as exc:
            return self._refuse(str(exc))
        self._runs += 1
        self.run_dir = new_run_dir(opts.run_dir, self._runs, opts.label or self._target.label())
        self.live, self.cut_short, self.summarized = LiveSeries(), None, False
        self.cell_energy = []
        self.streams.reset()
        self.driver = mode.driver(profile, users, config.started_at, self._coordination())
        self.config = config
        early_stop = None if opts.keep_going or not served else EarlyStop(
            self._target.url, self.stop, api_key=api_key_of(opts), verify_tls=not opts.insecure,
            url_of=lambda target: config.target_url(target) or self._target.url, started_at=config.started_at,
            targets=tuple(label for label, _url in config.targets) or ("",))
        self._intake = RecordIntake(self.run_dir, None if self.driver.wants_records else LIVE_WINDOW,
                                    self._settle if self.driver.wants_records else None, early_stop)
        self._write_first_manifest(config, model_warning)
        not_run = cells_not_run(profile, opts, users) if self.plays_load_modes and profile is not None else None
        if not_run:
            log.warning("not run: %s", not_run)
            self.note_in_manifest("not_run", not_run)
        if served:
            self.users.begin(config)
            self._watch_servers(config)
        log.info("Run directory: %s (%s mode, %d cells, model %s)", self.run_dir, config.mode,
                 len(self.driver.plan), config.settings.model or "(from each server)")
        self._player = gevent.spawn(self._play, self.driver)

    def _play(self, driver: Driver) -> None:
        """Plays the test's mode, then ends the test at once: the load shape would end it at its
        next tick, up to a second later (a headless run ends when Locust's main greenlet sees the
        shape's greenlet end). `stop` ends the play itself (`GreenletExit`), then the test."""
        try:
            driver.run_to_end()
        except gevent.GreenletExit:
            pass
        runner = self._environment.runner
        if driver is not self.driver or runner.shape_greenlet is None or runner.state not in (STATE_SPAWNING,
                                                                                                STATE_RUNNING):
            return  # another test, no load shape, or the test is ending already
        if self._opts.headless:
            runner.shape_greenlet.kill(block=False)
        else:
            runner.stop()

    def _refuse(self, problem: str) -> None:
        """A test that cannot start: one line, no run directory; a headless run exits 2."""
        log.error("error: %s", problem)
        if self._environment.web_ui is None:
            self._environment.process_exit_code = 2
        gevent.spawn(self._environment.runner.stop)

    def _configure(self, profile: Profile | None, users: int) -> tuple[RunConfig, str | None]:
        """The test's configuration for `profile` from now on: its targets' URLs (else the run's
        host) and the model their /v1/models offers, with a warning about that choice."""
        opts, api_key = self._opts, api_key_of(self._opts)
        targets = self._target.servers(profile.targets) if profile is not None else ()
        models = list_models(targets[0][1] if targets else self._target.url, api_key, not opts.insecure,
                             min(10.0, opts.request_timeout))
        model, model_warning = models.choose(opts.model)
        if model_warning:
            log.warning("%s", model_warning)
        return RunConfig(self.mode.name, request_settings(profile, opts, model, api_key, models.owned_by.get(model)),
                         users, clock.now() + 0.5,
                         profile, self.users.worker_ids(), models.context_tokens.get(model), targets), model_warning

    def _unserved(self, profile: Profile | None, users: int) -> RunConfig:
        """A test's configuration before it has a server: its settings, no model yet."""
        settings = request_settings(profile, self._opts, "", api_key_of(self._opts))
        return RunConfig(self.mode.name, settings, users, clock.now(), profile, self.users.worker_ids())

    def serve(self, profile: Profile) -> float:
        """A sweep's next server: `profile` (its one target) to every process from now on, its
        server watched; returns when the new configuration's clock starts."""
        self._environment.host = profile.targets[0].host  # users spawned from now on send there by default
        self.config = config = self._configure(profile, self.config.users)[0]
        self.users.begin(config)
        self.manifest["model"] = self.manifest.get("model") or config.settings.model
        self.manifest.setdefault("targets", []).extend(self._target.described(*target) for target in config.targets)
        write_manifest(self.run_dir, self.manifest)
        self._watch_servers(config)
        return config.started_at

    def retire(self, label: str) -> None:
        """A sweep's server is done with: its last scrape, its watch released."""
        watch = self._watches.pop(label, None)
        if watch is not None:
            watch.finish()

    def _write_first_manifest(self, config: RunConfig, model_warning: str | None) -> None:
        profile_file = self._opts.profile if self.plays_load_modes else None
        self.manifest = opening_manifest(config, self._opts, self._target.description(), self.driver.plan,
                                         profile_file, model_warning)
        if config.targets or self.mode.starts_servers:
            self.manifest.pop("target", None)  # an A/B run or a sweep: its servers instead of the one --host
            self.manifest["targets"] = [self._target.described(label, url) for label, url in config.targets]
        write_manifest(self.run_dir, self.manifest)

    def _watch_servers(self, config: RunConfig) -> None:
        """The server's side of the test; in an A/B run each target's, in `targets/<label>/`, its
        identity in the manifest's entry for that target."""
        for label, url in config.targets or (("", self._target.url),):
            run_dir, note = self.run_dir, self.note_in_manifest
            if label:
                run_dir = target_dir(self.run_dir, label)
                run_dir.mkdir(parents=True, exist_ok=True)
                note = partial(self.note_for_target, label)
            watch = ServerWatch(run_dir, self._opts, url, api_key_of(self._opts), note,
                                cell_frame=lambda cell: self.cell_readings.of(cell).frame(),
                                cell_events=self.driver.run.cell_events, test_stop=self._environment.events.test_stop,
                                target=label, on_energy=lambda rows, label=label: self.cell_energy.extend(
                                    {**row, "target": label} for row in rows))
            if watch.start():
                self._watches[label] = watch

    def end(self) -> None:
        """A test stops (finished, stopped or interrupted): print and save the summary once."""
        if self.summarized or self.run_dir is None:
            return
        self.summarized = True
        if self.driver is not None:
            self.driver.close()
        self.users.end()
        if self._opts.csv_prefix:  # Locust rewrites its --csv files once a second, not at the end: let it
            gevent.sleep(locust_stats.CSV_STATS_INTERVAL_SEC + 0.2)  # write them once more with every request
        driver = self.driver
        if driver is not None and driver.stopped and not self.cut_short:
            self.cut_short = driver.stopped
        close_manifest(self.manifest, driver is not None and driver.plan_done(), self.cut_short, self.users.lost,
                       self.users.selfwatch(), dict(driver.cache_flushes()) if driver is not None else {},
                       self.users.clock_offsets())
        write_manifest(self.run_dir, self.manifest)  # final before rendering: the report reads the same
        if self._intake is not None:
            self._intake.close()
        self.summary_text = write_summary(self.run_dir, self._opts.csv_prefix)

    def stop(self, reason: str) -> None:
        """Ends the test early, with `reason` in the summary and the manifest: the mode's plan
        stops at once (no more cells sent to a server that is gone), and a headless run exits 1."""
        self.manifest["stopped_early"] = reason
        if self._environment.web_ui is None:
            self._environment.process_exit_code = 1
        driver = self.driver
        if driver is not None and not driver.finished.is_set():
            driver.stopped = reason
            if self._player is not None and self._player is not gevent.getcurrent():
                self._player.kill(block=False)
        if self._environment.shape_class is not None:
            self.cut_short = reason  # the shape stops the test at its next tick
        else:
            runner = self._environment.runner
            gevent.spawn(runner.quit if self._opts.headless else runner.stop)

    # --- records ------------------------------------------------------------------------------

    def take_record(self, record: RequestRecord) -> None:
        """A record from this process's users (or one that a lost worker can no longer send)."""
        if self._intake is not None:
            self._intake.take_record(record)

    def live_add(self, source: str, snapshot: dict[str, Any]) -> None:
        """A process's running figures of its streams (once a second), for the live charts."""
        self.live.add(source, snapshot)

    def take_lines(self, lines: bytes) -> None:
        """A worker's batch of records, as JSON lines."""
        if self._intake is not None:
            self._intake.take_lines(lines)

    def _settle(self, record: dict[str, Any]) -> None:
        """A record the driver waits for: nobody holds it any more, and the driver may go on."""
        self.users.settle(record["request_id"])
        if self.driver is not None:
            self.driver.on_record(record)

    @property
    def record_count(self) -> int:
        return self._intake.count if self._intake is not None else 0

    @property
    def records(self) -> list[dict[str, Any]]:
        """The run's records so far (the last `LIVE_WINDOW` of a free-running run): the live
        figures' input. The journal on disk holds them all."""
        return self._intake.recent() if self._intake is not None else []

    def note_for_target(self, label: str, key: str, value: Any) -> None:
        """A finding about one target of an A/B run (its server's self-description), in its entry."""
        entry = next(entry for entry in self.manifest["targets"] if entry["label"] == label)
        entry[key] = value
        if self.run_dir is not None:
            write_manifest(self.run_dir, self.manifest)

    def note_in_manifest(self, key: str, value: Any) -> None:
        """A finding for the manifest (the server's self-description, a search's result), written
        at once: the session is the manifest's one writer, and a run killed later keeps it."""
        self.manifest[key] = value
        if self.run_dir is not None:
            write_manifest(self.run_dir, self.manifest)

    def _coordination(self) -> Coordination:
        """What the test's driver may ask of the session and its users' processes (the configuration
        read at each call: a sweep changes it as it goes)."""
        opts, users, run_dir = self._opts, self.users, self.run_dir

        def flush(target: str) -> str:
            return flush_prefix_cache(self.config.target_url(target) or self._target.url, api_key_of(opts),
                                      not opts.insecure)
        return Coordination(
            build_body=lambda job: chat_body(self.config.settings, job.messages, **job.params),
            dispatch=users.dispatch, announce=users.announce, capacity=users.capacity,
            streams_in_flight=users.streams_in_flight, flush=flush, records=lambda: read_records(run_dir),
            cell_frame=lambda names, target: self.cell_readings.cells(names, target).frame(),
            note=self.note_in_manifest, cell_events=events.cell, lead_time_s=users.lead_time_s,
            settle_s=users.settle_s, request_timeout_s=opts.request_timeout, serve=self.serve, retire=self.retire,
            run_dir=run_dir, resample=users.resample)
