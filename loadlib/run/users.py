"""Locust users that send streaming chat completions: `LLMUser` for your own locustfiles, the
shipped scenarios as user classes, and the users the load modes run.

`LLMUser.chat()` is to a streaming chat completion what `FastHttpUser.client.post()` is to a POST:
one call, one request, one Locust request event (response time = the whole request, end to end;
response length = completion tokens), and it returns the request's `RequestRecord` (TTFT, decode,
tokens, chunks, error). The record also goes to the run's journal, so the run directory, the
end-of-run summary and `python -m analysis report` work for any locustfile with no other code.

    from locust import task, between
    from loadlib import LLMUser

    class Chat(LLMUser):
        wait_time = between(1, 2)

        @task
        def ask(self):
            self.chat([{"role": "user", "content": "Hello"}], name="hello", max_tokens=64)
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from typing import Any, Callable, ClassVar

import gevent
from gevent.event import Event
from gevent.queue import Queue
from locust import User, constant, task
from locust.env import Environment

from loadlib.figures import formulas, protocol_tables
from loadlib.modes import MODES, Assignment, first_users
from loadlib.modes.open_loop import arrival_offsets
from loadlib.modes.search_driver import SEARCH, LevelSchedule, Span
from loadlib.modes.timeline import ERROR_PAUSE_S, CellSource, Timeline, free_running_cells
from loadlib.modes.trace import TRACE, TracePrompts, TraceRequest
from loadlib.profiles import Profile
from loadlib.records import RequestRecord
from loadlib.run.runtime import ProcessRun, RunSpec, process_run
from loadlib.scenarios import (DISTINCT_ISSUES, LONG_CONTEXT, MULTI_TURN, RADIX_HIT, TOOL_CALL, VISION, Cell, Job, Mix,
                               Scenario, build_scenarios)
from loadlib.scenarios.base import SINGLE, WARMUP
from loadlib.truth.cache import observed_state
from loadlib.wire.client import ChatClient, RequestTag, chat_body

FREE_RUNNING_MODES = tuple(name for name, mode in MODES.items() if mode.free_running)
CUSTOM_CASE = "locust"  # the case of records sent by a locustfile's own users
REQUEST_TYPE = "POST"
_local_users = itertools.count()  # users of this process, in spawn order


class LLMUser(User):
    """A Locust user with a streaming chat-completions client (see the module docstring)."""

    abstract = True
    wait_time = constant(0)

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.process_run: ProcessRun = process_run(environment)
        self.client = ChatClient(self.host or environment.host or "", self.process_run.settings)
        self.user_number = next(_local_users)
        self.slot = self.process_run.take_slot()
        self.stream = self.process_run.stream_number(self.slot)

    def on_start(self) -> None:
        self.client.connection.connect()  # set-up now, so that it never delays a first token

    def on_stop(self) -> None:
        self.process_run.release_slot(self.slot)
        self.client.close()

    def chat(self, messages: list[dict[str, Any]] | None = None, *, body: dict[str, Any] | None = None,
             name: str = "chat", max_tokens: int | None = None, **extra: Any) -> RequestRecord:
        """Sends one streaming chat completion and returns its record (never raises for a failed
        request: the record's `error` says why). `messages` with the run's defaults (model,
        max_tokens, temperature 0, thinking switch, usage in the stream), or a whole `body`;
        `extra` are more body keys (tools, temperature, ...); `name` is the stats row."""
        if body is None:
            if messages is None:
                raise TypeError("chat() needs messages or body")
            body = chat_body(self.process_run.settings, messages, max_tokens, **extra)
        else:
            body = {"model": self.process_run.settings.model, "stream": True,
                    "stream_options": {"include_usage": True}, **body, **extra}
            if max_tokens is not None:
                body["max_tokens"] = max_tokens
        spec = self.process_run.spec
        tag = RequestTag(scenario=name, cell=name, concurrency=spec.users if spec else 1, case=CUSTOM_CASE,
                         slot=self.stream)
        return self.send(body, tag, name)

    def send(self, body: dict[str, Any], tag: RequestTag, name: str, *, request_id: str | None = None,
             scheduled_at: float | None = None, job: Job | None = None, measured: bool = True,
             urgent: bool = False) -> RequestRecord:
        """Sends `body` labelled `tag`, reports it to Locust's stats as `name` and to the run's
        journal, and returns the record. `scheduled_at` is when it was meant to start (its
        `queue_s` is the wait for a free user); `job` carries the scenario's labels."""
        tag = RequestTag(tag.scenario, tag.cell, tag.concurrency, tag.case, tag.round, tag.slot,
                         self.process_run.worker_share[0], self.user_number)
        watch = self.process_run.watch
        watch.in_flight += 1
        try:
            record = self.client.chat(body, tag, request_id or uuid.uuid4().hex)
        finally:
            watch.in_flight -= 1
        if scheduled_at is not None and record.sent_at:
            record.queue_s = max(record.sent_at - scheduled_at, 0.0)
        if job is not None:
            record.cache_intended, record.turn = job.cache, job.turn
        record.measured = measured
        record.cache_observed = observed_state(record.cached_tokens)
        fire_request_event(self.environment, record, name)
        self.process_run.sink.add(record, urgent)
        return record


    def body_of(self, job: Job) -> dict[str, Any]:
        """A scenario job's request body, with the run's defaults."""
        return chat_body(self.process_run.settings, job.messages, **job.params)

    def prepared(self, key: Any, build: Callable[[], Scenario]) -> Scenario:
        """This process's instance of a scenario for the current test (`build` makes it), primed
        and calibrated once: by the first user that asks; the others wait for it."""
        state = self.process_run.state
        if key not in state:
            ready = Event()
            scenario = build()
            state[key] = (scenario, ready)
            try:
                scenario.prepare(self._send_unmeasured)
            finally:
                ready.set()
        scenario, ready = state[key]
        ready.wait()
        return scenario

    def _send_unmeasured(self, jobs: list[Job], purpose: str) -> list[dict[str, Any]]:
        """Priming and calibration requests, one at a time, left out of every figure."""
        tag = RequestTag(purpose, purpose, 1, CUSTOM_CASE, slot=self.stream)
        return [self.send(self.body_of(job), tag, purpose, job=job, measured=False, urgent=True).to_dict()
                for job in jobs]


def fire_request_event(environment: Environment, record: RequestRecord, name: str) -> None:
    """The request's one Locust event: response time end to end in ms, length in completion
    tokens; TTFT, decode and tok/chunk ride in `context` for listeners that want them."""
    context = {"ttft_ms": record.ttft_s * 1000.0 if record.ttft_s is not None else None,
               "decode_tps": None, "tok_per_chunk": None, "record": record}
    if not record.error and record.total_s and record.ttft_s is not None and record.total_s > record.ttft_s:
        context["decode_tps"] = formulas.decode_tps(record.completion_tokens, record.ttft_s, record.total_s)
    if not record.error and record.chunks:
        context["tok_per_chunk"] = formulas.tok_per_chunk(record.completion_tokens, record.chunks)
    environment.events.request.fire(
        request_type=REQUEST_TYPE, name=name, response_time=(record.total_s or 0.0) * 1000.0,
        response_length=record.completion_tokens or 0,
        exception=RuntimeError(record.error) if record.error else None,
        context=context, url=None, response=None, start_time=record.sent_at)


def stats_name(case: str, cell: str, scenario: str) -> str:
    """A request's row in Locust's stats: the scenario for single-stream cells and a locustfile's
    own requests, the cell for concurrency cells, "cell: scenario" for a free-running mix."""
    if case in protocol_tables.CONCURRENT_CASES:
        return cell
    if case in (SINGLE, CUSTOM_CASE):
        return scenario
    return f"{cell}: {scenario}"


def _row_name(tag: RequestTag) -> str:
    return stats_name(tag.case, tag.cell, tag.scenario)


# --- the rounds protocol -----------------------------------------------------------------------

class RoundsUser(LLMUser):
    """One stream slot of the rounds protocol: sends what the conductor assigns, at its start time
    (an assignment taken after its start time waited for a free user: `queue_s`)."""

    abstract = True

    @task
    def run_assignment(self) -> None:
        assignment: Assignment = self.process_run.assignments.get()
        delay = assignment.start_at - time.time()
        if delay > 0:
            gevent.sleep(delay)
        job = Job(assignment.tag.scenario, [], cache=assignment.cache_intended, turn=assignment.turn)
        self.send(assignment.body, assignment.tag, _row_name(assignment.tag), request_id=assignment.request_id,
                  scheduled_at=assignment.start_at, job=job, measured=assignment.measured, urgent=True)


# --- scenarios as user classes ---------------------------------------------------------------

class ScenarioUser(LLMUser):
    """Sends its scenario's requests one after another (a closed-loop stream), with Locust's
    `wait_time` between them. Subclasses name a scenario `kind` and its profile `options`
    (the keys of a `[scenarios.NAME]` table); mix them with Locust's `weight` / `fixed_count`.

    Under a free-running profile (locustfiles/dflash.py) each request is labelled with the
    cell running at send time; a ladder or search level's extra streams wait for their level.
    """

    abstract = True
    kind: ClassVar[str] = "protocol"
    options: ClassVar[dict[str, Any]] = {}
    scenario_name: ClassVar[str | None] = None  # the records' scenario name (default: the kind)

    @classmethod
    def build_scenario(cls, profile: Profile | None) -> Scenario:
        """The class's scenario, from the run's profile when it has this class's table, else from
        the class's own options (validated as a profile table would be)."""
        name = cls.scenario_name or cls.kind
        if profile is None or name not in profile.scenarios:
            profile = Profile.model_validate({"scenarios": {name: {"kind": cls.kind, **cls.options}}})
        weighted = build_scenarios(profile, only=name)
        return weighted[0][0] if len(weighted) == 1 else Mix(weighted, profile.seed)

    def on_start(self) -> None:
        super().on_start()
        self.scenario = self._prepared_scenario()
        profile: Profile | None = self.process_run.state.get("profile")
        jitter_s = getattr(profile.load, "jitter_s", 0.0) if profile is not None else 0.0
        gevent.sleep(random.uniform(0.0, jitter_s))  # first requests spread, not one burst

    @task
    def send_next(self) -> None:
        timeline: CellSource | None = self.process_run.state.get("timeline")
        cell = timeline.cell_at(time.time()) if timeline is not None else None
        if timeline is not None and (cell is None or self.stream >= _streams_of(cell)):
            gevent.sleep(max(min(timeline.next_change(time.time()) - time.time(), 0.5), 0.01))
            return  # the run is over, or this stream's level has not begun
        job = self.scenario.next(self.stream)
        if cell is None:
            tag = RequestTag(job.scenario, job.scenario, self.process_run.spec.users if self.process_run.spec else 1, CUSTOM_CASE,
                             slot=self.stream)
            record = self.send(self.body_of(job), tag, job.scenario, job=job)
        else:
            tag = RequestTag(job.scenario, cell.name, cell.concurrency, cell.case, slot=self.stream)
            record = self.send(self.body_of(job), tag, _row_name(tag), job=job, measured=cell.name != WARMUP)
        self.scenario.observe(job, record.to_dict())
        if record.error and cell is not None:
            gevent.sleep(ERROR_PAUSE_S)  # a failing server is not hammered in a tight loop

    def _prepared_scenario(self) -> Scenario:
        return self.prepared(type(self), lambda: self.build_scenario(self.process_run.state.get("profile")))


def _streams_of(cell: Cell) -> int:
    """How many streams a cell runs: a ladder or search level (its warm-up too) its own; closed
    cells as many as are spawned (the web UI's Edit may change that)."""
    mode = MODES.get(cell.case)
    return cell.concurrency if mode is not None and mode.levelled else 1 << 30


class RadixHitUser(ScenarioUser):
    """The same long prompt every time: prefix-cache hits after the first."""

    abstract = True
    kind = RADIX_HIT.name


class DistinctIssuesUser(ScenarioUser):
    """A different real work item (an issue to triage) every request: no shared prefix."""

    abstract = True
    kind = DISTINCT_ISSUES.name


class LongContextUser(ScenarioUser):
    """Cold prefill of a long, never-seen prompt (size in the server's tokens: `options`)."""

    abstract = True
    kind = LONG_CONTEXT.name
    options = {"sizes": [14000]}


class MultiTurnUser(ScenarioUser):
    """Conversations that grow turn by turn, the history resent each turn."""

    abstract = True
    kind = MULTI_TURN.name


class ToolCallUser(ScenarioUser):
    """Requests with tools that the model should call (JSON arguments streamed back)."""

    abstract = True
    kind = TOOL_CALL.name


class VisionUser(ScenarioUser):
    """A generated image and a question about it."""

    abstract = True
    kind = VISION.name


# --- the free-running modes -------------------------------------------------------------------

def profile_user_classes(profile: Profile) -> list[type[User]]:
    """The user classes a profile runs: one `ScenarioUser` per scenario with the scenario's weight
    (closed, ladder, users search), or the arrival slots of the open mode and the rate search."""
    if MODES[profile.load.mode].sends_arrivals(profile.load):
        return [ArrivalUser]
    return [type(name, (ScenarioUser,), {"abstract": False, "kind": spec.kind, "scenario_name": name,
                                          "weight": spec.weight, "__module__": __name__})
            for name, spec in profile.scenarios.items()]


def begin_test(run: ProcessRun, spec: RunSpec) -> None:
    """A test starts on this process: the spec, and for a free-running mode its profile, its
    scenarios' mix and its cells on the wall clock (the same on every process: a fixed timeline,
    or the search's schedule that `announce_level` fills)."""
    run.start(spec)
    if spec.profile is not None and spec.mode in FREE_RUNNING_MODES:
        profile = Profile.model_validate(spec.profile)
        mix = TracePrompts(salt=f"{spec.started_at:.6f}") if spec.mode == TRACE.name else Mix(build_scenarios(profile),
                                                                                                profile.seed)
        run.state["profile"] = profile
        run.state["mix"] = mix
        if spec.mode == SEARCH.name:
            run.state["timeline"] = LevelSchedule(spec.started_at, first_users(profile, spec.users))
            run.state["arrivals"] = Queue()  # fed level by level
        else:
            cells = free_running_cells(MODES[spec.mode], profile.load, spec.users, mix)
            run.state["timeline"] = Timeline(tuple(cells), spec.started_at)


def announce_level(run: ProcessRun, message: dict[str, Any]) -> None:
    """A search span (a level or its warm-up) announced by the coordinator: the users label their
    requests with it while it runs; with a rate, this process feeds its share of its arrivals."""
    span = Span.from_message(message, run.state["mix"])
    run.state["timeline"].add(span)
    if span.rate_rps is not None:
        seed = run.state["profile"].seed
        gevent.spawn(_feed, run, run.state["arrivals"], span.start, span.end, span.rate_rps,
                     random.Random(f"{seed}/{span.number}"), random.Random(f"{seed}/{span.number}/picks"),
                     lambda _at: span.cell)


class ArrivalUser(LLMUser):
    """A free user of the open mode or the rate search: sends arrivals of this process's share of
    the schedule."""

    def on_start(self) -> None:
        super().on_start()
        self.prepared(ArrivalUser, lambda: self.process_run.state["mix"])  # the schedule's scenarios, primed once

    @task
    def send_arrival(self) -> None:
        arrival: _Arrival | None = _arrivals(self.process_run).get()
        if arrival is None:  # the schedule is over
            gevent.sleep(1.0)
            return
        job = arrival.scenario.next(arrival.stream) if arrival.request is None else \
            arrival.scenario.job_for(arrival.request)
        tag = RequestTag(job.scenario, arrival.cell.name, arrival.cell.concurrency, arrival.cell.case,
                         slot=arrival.stream)
        record = self.send(self.body_of(job), tag, _row_name(tag),
                           scheduled_at=arrival.at, job=job, measured=arrival.cell.name != WARMUP)
        arrival.scenario.observe(job, record.to_dict())


class _Arrival:
    __slots__ = ("at", "cell", "scenario", "stream", "request")

    def __init__(self, at: float, cell: Cell, scenario: Any, stream: int, request: TraceRequest | None = None) -> None:
        self.at, self.cell, self.scenario, self.stream, self.request = at, cell, scenario, stream, request


def _arrivals(run: ProcessRun) -> Queue:
    """This process's arrival queue, fed on schedule by one greenlet per test: every process
    draws the whole seeded schedule (times and scenarios) and keeps arrivals i = its index mod
    processes, so together they send exactly the profile's schedule."""
    queue = run.state.get("arrivals")
    if queue is None:
        queue = run.state["arrivals"] = Queue()
        run.state["arrival_feed"] = gevent.spawn(_feed_arrivals, run, queue)
    return queue


def _feed_arrivals(run: ProcessRun, queue: Queue) -> None:
    """The open mode's one schedule over its whole timeline (or the trace's requests), then the end."""
    profile: Profile = run.state["profile"]
    timeline: Timeline = run.state["timeline"]
    load = profile.load
    if load.mode == TRACE.name:
        _feed_trace(run, queue, timeline.started_at, load.requests, load.speedup, timeline.cells[-1])
    else:
        _feed(run, queue, timeline.started_at, timeline.ends_at, load.rate_rps, random.Random(profile.seed),
              random.Random(profile.seed + 1), lambda at: timeline.cell_at(at) or timeline.cells[-1])
    for _ in range(max(run.spec.users if run.spec else 1, 1)):
        queue.put(None)


def _feed_trace(run: ProcessRun, queue: Queue, start: float, requests: list[TraceRequest], speedup: float,
                cell: Cell) -> None:
    """This process's share of a trace's requests (i = its index mod processes), at their times."""
    users = run.spec.users if run.spec else 1
    index, count = run.worker_share
    prompts = run.state["mix"]
    context = run.spec.context_tokens if run.spec else None
    for number in range(index, len(requests), count):
        request = requests[number]
        if context is not None and request.input_tokens + request.output_tokens > context:
            continue  # the coordinator counted it and said so
        at = start + request.at_s / speedup
        gevent.sleep(max(at - time.time(), 0.0))
        queue.put(_Arrival(at, cell, prompts, number % users, request))


def _feed(run: ProcessRun, queue: Queue, start: float, end: float, rate_rps: float, times: random.Random,
          picks: random.Random, cell_at: Callable[[float], Cell]) -> None:
    """Puts this process's share of the arrivals from `start` to `end` (wall clock) in `queue` on
    schedule: every process draws the same times and scenarios and keeps arrivals i = its index
    mod processes."""
    members: Mix = run.state["mix"]
    arrival = getattr(run.state["profile"].load, "arrival", "constant")
    users = run.spec.users if run.spec else 1
    index, count = run.worker_share
    for number, offset in enumerate(arrival_offsets(rate_rps, arrival, end - start, times)):
        scenario = picks.choices(members.members, members.weights)[0]
        if number % count != index:
            continue
        at = start + offset
        gevent.sleep(max(at - time.time(), 0.0))
        queue.put(_Arrival(at, cell_at(at), scenario, number % users))
