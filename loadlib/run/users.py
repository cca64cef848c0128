"""Locust users that send streaming chat completions: `LLMUser` for your own locustfiles, the
shipped scenarios as user classes, and the shells in which the load modes' users run.

`LLMUser.chat()` is to a streaming chat completion what `FastHttpUser.client.post()` is to a POST:
one call, one request, one Locust request event (response time = the whole request, end to end;
response length = completion tokens), and it returns the request's `RequestRecord` (TTFT, decode,
tokens, chunks, error, and the answer's `text`). With `catch_response=True` it returns a context
manager in which the task judges the answer (`failure(why)` or `success()`), as Locust's own
clients do. The record also goes to the run's journal, so the run directory, the end-of-run
summary and `python -m analysis report` work for any locustfile with no other code.

    from locust import task, between
    from loadlib import LLMUser

    class Chat(LLMUser):
        wait_time = between(1, 2)

        @task
        def ask(self):
            with self.chat([{"role": "user", "content": "Name a prime."}], name="prime",
                           max_tokens=64, catch_response=True) as answer:
                if not any(p in answer.text for p in ("2", "3", "5", "7")):
                    answer.failure("no prime in the answer")
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any, Callable, ClassVar, Hashable

from locust import User, constant, task
from locust.env import Environment
from locust.exception import LocustError

from loadlib.figures import formulas
from loadlib.modes import ModeState
from loadlib.modes.base import UserKind
from loadlib.modes.own_users import own_label
from loadlib.profiles import Profile
from loadlib.records import Exchange, RequestLabel, RequestRecord
from loadlib.run.runtime import ProcessRun, process_run
from loadlib.scenarios import (DISTINCT_ISSUES, LONG_CONTEXT, MULTI_TURN, RADIX_HIT, TOOL_CALL, VISION, Job, Mix,
                               Scenario, build_scenarios)
from loadlib.scenarios.base import stats_name
from loadlib.wire.client import ChatClient, chat_body

REQUEST_TYPE = "POST"
JUDGED_FAILED = "failed by the test: "  # the reason of a record a task judged with `failure(why)`
_local_users = itertools.count()  # users of this process, in spawn order


class LLMUser(User):
    """A Locust user with a streaming chat-completions client (see the module docstring)."""

    abstract = True
    wait_time = constant(0)

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.process_run: ProcessRun = process_run(environment)
        self.client = ChatClient(self.host or environment.host or "", self.process_run.settings)
        self.target_clients: dict[str, ChatClient] = {}  # an A/B run's servers, by URL
        self.user_number = next(_local_users)
        self.slot = self.process_run.take_slot()
        self.stream = self.process_run.stream_number(self.slot)

    @property
    def mode_state(self) -> ModeState:
        """The users' half of the current test's load mode (on this process)."""
        state = self.process_run.mode_state
        if state is None:
            raise RuntimeError("no test has started on this process")
        return state

    def on_start(self) -> None:
        self.client.connection.connect()  # set-up now, so that it never delays a first token

    def on_stop(self) -> None:
        self.process_run.release_slot(self.slot)
        self.client.close()
        for client in self.target_clients.values():
            client.close()

    def client_for(self, target: str) -> ChatClient:
        """The client of an A/B run's target (by label), connected on first use; `client` for ""."""
        config = self.process_run.config
        url = config.target_url(target) if config is not None else None
        if url is None:
            return self.client
        client = self.target_clients.get(url)
        if client is None:
            client = self.target_clients[url] = ChatClient(url, self.process_run.settings)
            client.connection.connect()
        return client

    def chat(self, messages: list[dict[str, Any]] | None = None, *, body: dict[str, Any] | None = None,
             name: str = "chat", max_tokens: int | None = None, catch_response: bool = False,
             **extra: Any) -> Any:
        """Sends one streaming chat completion: `messages` with the run's defaults (model,
        max_tokens, temperature 0, thinking switch, usage in the stream), or a whole `body`;
        `extra` are more body keys (tools, temperature, ...); `name` is the stats row.

        Returns its `RequestRecord` (never raises for a failed request: `error` says why), or with
        `catch_response=True` a `ChatResponse` to judge it in a `with` block."""
        if body is None:
            if messages is None:
                raise TypeError("chat() needs messages or body")
            body = chat_body(self.process_run.settings, messages, max_tokens, **extra)
        else:
            body = {"model": self.process_run.settings.model, "stream": True,
                    "stream_options": {"include_usage": True}, **body, **extra}
            if max_tokens is not None:
                body["max_tokens"] = max_tokens
        label = own_label(name, self.process_run.users, self.stream)
        if catch_response:
            return ChatResponse(self, self.send(body, label, name, report=False, keep_text=True), name)
        return self.send(body, label, name, keep_text=True)

    def send(self, body: dict[str, Any], label: RequestLabel, name: str | None = None, *,
             request_id: str | None = None, urgent: bool = False, report: bool = True,
             keep_text: bool = False, headers: dict[str, str] | None = None) -> RequestRecord:
        """Sends `body`, whose place in the run is `label` (made by its cell, `Cell.label`), and
        returns its record; with `report` also to Locust's stats (as `name`, by default the
        label's row, `stats_name`) and to the run's journal. `urgent` sends the record to the
        journal at once (one a round waits for); `keep_text` keeps the answer's text in the record;
        `headers` are the request's own HTTP headers (a session's sticky routing key)."""
        request_id = request_id or uuid.uuid4().hex
        watch = self.process_run.watch
        watch.in_flight += 1
        try:
            exchange = self.client_for(label.target).stream(body, request_id, keep_text, headers)
        finally:
            watch.in_flight -= 1
        return self._recorded(label, exchange, request_id, name, urgent, report)

    def refuse(self, body: dict[str, Any], label: RequestLabel, reason: str) -> RequestRecord:
        """A request the client knows the server cannot serve (a prompt beyond its context), not
        sent: its failed record with `reason`, counted and kept like any other."""
        exchange = Exchange.asking(body)
        exchange.sent_at, exchange.error = time.time(), reason
        return self._recorded(label, exchange, uuid.uuid4().hex, None, False, True)

    def _recorded(self, label: RequestLabel, exchange: Exchange, request_id: str, name: str | None, urgent: bool,
                  report: bool) -> RequestRecord:
        record = RequestRecord.of(label, exchange, request_id, self.process_run.worker_share[0], self.user_number)
        if report:
            self.report(record, name or stats_name(label.case, label.cell, label.scenario), urgent)
        return record

    def report(self, record: RequestRecord, name: str, urgent: bool = False) -> None:
        """The record's one Locust request event, and the record to the run's journal."""
        fire_request_event(self.environment, record, name)
        self.process_run.sink.add(record, urgent)

    def body_of(self, job: Job) -> dict[str, Any]:
        """A scenario job's request body, with the run's defaults."""
        return chat_body(self.process_run.settings, job.messages, **job.params)

    def prepared(self, key: Hashable, build: Callable[[], Scenario]) -> Scenario:
        """This process's instance of a scenario for the current test (`build` makes it), primed
        and calibrated once: by the first user that asks; the others wait for it."""
        return self.process_run.scenarios.get(key, build, lambda scenario: scenario.prepare(self._send_unmeasured))

    def _send_unmeasured(self, jobs: list[Job], purpose: str) -> list[dict[str, Any]]:
        """Priming and calibration requests, one at a time, left out of every figure; in an A/B
        run to every target (each primed alike), the first target's records returned."""
        config = self.process_run.config
        targets = [label for label, _url in config.targets] if config is not None and config.targets else [""]
        answers = {target: [self.send(self.body_of(job), own_label(purpose, 1, self.stream, job, target=target,
                                                                  measured=False), urgent=True).to_dict()
                            for job in jobs]
                   for target in targets}
        return answers[targets[0]]


class ChatResponse:
    """A sent request held for the task to judge, as Locust's `ResponseContextManager`: in the
    `with` block it reads as the record (`text`, `ttft_s`, `error`, ...); `failure(why)` counts it
    failed (in Locust's stats and in the record, whose figures then leave it out), `success()`
    counts it as succeeded in Locust's stats (a record with an error keeps it: its figures cannot
    be had). At the block's end it is reported once; an exception in the block is reported as
    the request's own outcome and goes on up, and the record is kept whatever happens."""

    def __init__(self, user: LLMUser, record: RequestRecord, name: str) -> None:
        self.record = record
        self._user, self._name = user, name
        self._entered = self._reported = self._success = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.record, name)

    def __enter__(self) -> "ChatResponse":
        self._entered = True
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> bool:
        self._report()
        return False

    def __del__(self) -> None:  # held but never judged in a with-block: still counted and kept
        if not self._reported:
            self._report()

    def _report(self) -> None:
        self._reported = True
        error = self.record.error
        if self._success:
            self.record.error = None  # for Locust's count only; the journal keeps what happened
        fire_request_event(self._user.environment, self.record, self._name)
        self.record.error = error
        self._user.process_run.sink.add(self.record)

    def success(self) -> None:
        self._check_entered()
        self._success = True

    def failure(self, why: Any) -> None:
        self._check_entered()
        self._success = False
        if not self.record.error:
            self.record.error = f"{JUDGED_FAILED}{why}"

    def _check_entered(self) -> None:
        if not self._entered:
            raise LocustError("judge a chat in its with-block: "
                              "`with self.chat(..., catch_response=True) as answer: answer.failure(...)`")


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


# --- the users in which a load mode's users' half runs -----------------------------------------

class StepUser(LLMUser):
    """A user whose task is its load mode's (`ModeState.step`), once its mode has readied it."""

    abstract = True

    def on_start(self) -> None:
        super().on_start()
        self.mode_state.on_start(self)

    @task
    def play(self) -> None:
        self.mode_state.step(self)


class ModeUser(StepUser):
    """One stream of a profile's load mode. A locustfile whose users are `ModeUser`s plays the
    `--profile` (or the protocol from the options), like `locustfiles/dflash.py`; the mode may
    run the profile's scenarios' users or free arrival slots instead."""

    abstract = True


class ScenarioUser(StepUser):
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

    @property
    def scenario(self) -> Scenario:
        """The class's scenario for the current test on this process, primed on first use (a
        sweep's next configuration starts afresh, primed on its own server)."""
        config = self.process_run.config
        return self.prepared(type(self), lambda: self.build_scenario(config.profile if config else None))

    def on_start(self) -> None:
        _ = self.scenario  # primed now, so that no request waits for it
        super().on_start()


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


class ArrivalUser(StepUser):
    """A free user of a mode that sends arrivals: it sends what its process's schedule makes due."""


def mode_user_classes(kind: UserKind, profile: Profile, locustfile_classes: list[type[User]]) -> list[type[User]]:
    """The user classes a load mode runs: the locustfile's own, one `ScenarioUser` per scenario
    of the profile with the scenario's weight as Locust's, or the free users of an arrival mode."""
    if kind == "locustfile":
        return locustfile_classes
    if kind == "free_slots":
        return [ArrivalUser]
    return [type(name, (ScenarioUser,), {"abstract": False, "kind": spec.kind, "scenario_name": name,
                                          "weight": spec.weight, "__module__": __name__})
            for name, spec in profile.scenarios.items()]
