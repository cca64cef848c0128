"""Load mode `sessions`: N coding-agent sessions live at once, replayed from a cc-traces file as
the agents behaved (the profile's `agent-trace` scenario, `loadlib.scenarios.agent_trace`).

A lane plays one conversation after another: lane l plays the trace's sessions l, l + N, l + 2N,
..., session j being conversation j mod C (C conversations) in its copy j // C. Without
`duration_s` the lanes play max(C, N) sessions, every conversation once (and copies, so that every
lane plays one); with it, they play sessions until the time is up (no turn starts after it).

Within a session each agent waits for its request to end, then for the gap before its next one:
the request's `think_time` (else its `t` after the previous request's recorded end, `t` +
`api_time`), capped by `idle_cap_s` and multiplied by `think_time_scale`, end to start. A
sub-agent starts that gap after its parent's previous request ended (its first request at its own
`t` after that), siblings together, and the parent's next request waits for all of them. A turn
whose prompt and answer exceed the server's context (from /v1/models) is not sent: it is a
failed record, "context overflow".

The lanes are greenlets of the processes that run users (lane l on process l mod P); each turn is
put, when due, in its process's queue, and a free user sends it (`queue_s` is its wait). The mode
asks for N x the trace's widest session (its most requests in flight at once) free users. The
driver first measures the prompts (`AgentPrompts`' probes, sent through the users to the first
server) and announces the answers to every process; then it starts one cell per target (an A/B
run plays them one after the other) and ends it when every turn's record is in, or when
`duration_s` is up and the turns in flight have ended. Each cell is announced whole (`LanesCell`:
its name, lanes, time and salt), so another mode's driver plays cells of its own through the
same lanes: a capacity search over sessions (`loadlib.modes.search_driver`) one per level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Literal, Sequence

import gevent
from gevent.event import AsyncResult, Event
from gevent.queue import Empty, Queue
from pydantic import PositiveFloat, PositiveInt

from loadlib import clock
from loadlib.modes.base import Assignment, Coordination, Driver, LoadMode, ModeState, log, target_labels
from loadlib.scenarios.agent_trace import AGENT_TRACE_KIND, AgentTrace, AgentTraceSpec, lane_width
from loadlib.scenarios.base import CONTEXT_OVERFLOW, Cell, level_cell_name, request_params
from loadlib.scenarios.cc_traces import MAIN_AGENT, Conversation, Entry, SubAgent, Turn
from loadlib.scenarios.spec import Strict

if TYPE_CHECKING:
    from loadlib.profiles import Profile
    from loadlib.run.config import RunConfig
    from loadlib.run.users import LLMUser

IDLE_STEP_S = 0.5  # how long a free user waits for a due turn before its task step returns
DONE_WAIT_S = 60.0  # past the request timeout, how long the driver waits for a cell's last records


class SessionsLoad(Strict):
    mode: Literal["sessions"]
    sessions: PositiveInt  # lanes: sessions live at once
    duration_s: PositiveFloat | None = None  # None: every conversation once


@dataclass(frozen=True)
class SessionPlan:
    """Which session each lane plays, the same on every process."""

    conversations: Sequence[Conversation]
    lanes: int
    duration_s: float | None

    @property
    def sessions(self) -> int | None:
        """Sessions played in all (None: as many as fit in `duration_s`)."""
        return None if self.duration_s is not None else max(len(self.conversations), self.lanes)

    def of_lane(self, lane: int) -> Iterator[tuple[Conversation, int]]:
        """(conversation, copy) of each session `lane` plays, in order."""
        count = len(self.conversations)
        j = lane
        while self.sessions is None or j < self.sessions:
            yield self.conversations[j % count], j // count
            j += self.lanes

    def turns(self) -> int:
        """Every turn of the sessions played (a plan with a duration: unknown, 0)."""
        if self.sessions is None:
            return 0
        per = [len(c.turns()) for c in self.conversations]
        return sum(per[j % len(per)] for j in range(self.sessions))

    @property
    def width(self) -> int:
        """The most requests one lane has in flight at once."""
        return max(lane_width(c.requests) for c in self.conversations)


def agent_spec(profile: "Profile") -> tuple[str, AgentTraceSpec]:
    """The profile's agent-trace scenario table (the profile has exactly one), by name."""
    return next((name, spec) for name, spec in profile.scenarios.items() if spec.kind == AGENT_TRACE_KIND)


def agent_trace(profile: "Profile", salt: str = "") -> AgentTrace:
    """The profile's agent-trace scenario, salted for the run."""
    name, spec = agent_spec(profile)
    return AgentTrace(spec, name, request_params(spec.max_tokens, spec.thinking), salt)


def session_cells(profile: "Profile", scenario: AgentTrace) -> list[Cell]:
    """One cell of the N lanes per target."""
    load: SessionsLoad = profile.load
    return [Cell(level_cell_name(load.mode, users=load.sessions), load.mode, scenario, load.sessions,
                 duration_s=load.duration_s, target=label) for label in target_labels(profile)]


def plan_of(profile: "Profile") -> SessionPlan:
    load: SessionsLoad = profile.load
    return SessionPlan(agent_spec(profile)[1].conversations, load.sessions, load.duration_s)


@dataclass(frozen=True)
class LanesCell:
    """A cell of lanes as the driver announces it to every process: its lanes start at `start`
    and start no turn from `until` (None: they play their sessions to the end). `salt` gives the
    cell texts of its own (a search level: none of an earlier level's sessions is in the cache,
    and its ideal starts empty); "" keeps the run's."""

    cell: Cell
    start: float
    until: float | None
    salt: str = ""

    def to_message(self) -> dict[str, Any]:
        cell = self.cell
        return {"cell": cell.name, "case": cell.case, "lanes": cell.concurrency, "target": cell.target,
                "start": self.start, "until": self.until, "salt": self.salt}

    @classmethod
    def from_message(cls, data: dict[str, Any], scenario: AgentTrace) -> "LanesCell":
        until = data["until"]
        cell = Cell(data["cell"], data["case"], scenario, data["lanes"],
                    duration_s=None if until is None else until - data["start"], target=data["target"])
        return cls(cell, data["start"], until, data["salt"])


class SessionsDriver(Driver):
    """Starts each cell (its lanes, on every process), ends it when its turns are all recorded or
    its time is up and nothing is in flight. `measure_prompts` and `play_cell` are also how a
    search over sessions plays its levels."""

    wants_records = True

    def __init__(self, run: Coordination, users: int, profile: "Profile") -> None:
        super().__init__(run, users)
        self.session_plan = plan_of(profile)
        self.plan = session_cells(profile, agent_trace(profile))
        self.slots = profile.load.sessions * self.session_plan.width
        spec = agent_spec(profile)[1]
        # no record for this long, and nothing in flight: the lanes that owed the rest are gone
        self.quiet_limit_s = spec.idle_cap_s * spec.think_time_scale + run.request_timeout_s + DONE_WAIT_S
        self._last_record = clock.now()
        self._recorded: dict[tuple[str, str], int] = {}
        self._all_in = Event()
        self._expected = self.session_plan.turns()
        self._cell: Cell | None = None

    def users_wanted(self, now: float) -> int:
        return self.slots

    def on_record(self, record: dict[str, Any]) -> None:
        super().on_record(record)  # the probes' answers
        cell = self._cell
        if cell is None or record.get("conversation") is None or not record.get("measured", True):
            return
        key = (record["cell"], record.get("target", ""))
        self._recorded[key] = self._recorded.get(key, 0) + 1
        self._last_record = clock.now()
        if key == (cell.name, cell.target) and self._recorded[key] >= self._expected:
            self._all_in.set()

    def play(self) -> None:
        if not self.measure_prompts(self.plan[0]):
            return
        for cell in self.plan:
            self.play_cell(cell)

    def measure_prompts(self, probing: Cell) -> bool:
        """Once, before any cell's clock starts: the prompts measured on `probing`'s server and the
        answers announced to every process. False (and `stopped`) when the users never came."""
        if not self.wait_for_users(self.slots):
            self.stopped = "users were not spawned"
            return False
        self.prepare(probing.scenario, probing.target)
        self.run.announce({"probes": probing.scenario.prompts.probe_tokens})
        return True

    def play_cell(self, cell: Cell, salt: str = "") -> None:
        """Plays `cell`'s lanes (`cell.concurrency`, for its `duration_s` or every session once),
        with their users (N x the lane width, never fewer than before), until its turns have ended."""
        self.slots = max(self.slots, cell.concurrency * self.session_plan.width)
        if not self.wait_for_users(self.slots):
            self.stopped = "users were not spawned"
            return
        self._cell, self._all_in, self._last_record = cell, Event(), clock.now()
        start = clock.now() + self.run.lead_time_s
        until = start + cell.duration_s if cell.duration_s is not None else None
        self.start_cell(cell, duration_s=cell.duration_s, started_at=start)
        self.run.announce(LanesCell(cell, start, until, salt).to_message())
        if until is None:
            self._wait_for_every_turn(cell)
        else:
            gevent.sleep(max(until - clock.now(), 0.0))
            self.drain(clock.now() + self.run.request_timeout_s + DONE_WAIT_S)
        self.end_cell(cell)
        self._cell = None

    def _wait_for_every_turn(self, cell: Cell) -> None:
        """Until every turn of the cell is recorded; or, when a lost worker's lanes will never send
        theirs, until no record came for `quiet_limit_s` with nothing in flight."""
        while not self._all_in.wait(timeout=1.0):
            quiet = clock.now() - self._last_record
            if quiet > self.quiet_limit_s and self.run.streams_in_flight() == 0:
                got = self._recorded.get((cell.name, cell.target), 0)
                log.warning("%s: %d of %d turns recorded, none for %.0f s: the rest will not come (a lost "
                            "worker's lanes); going on", cell.name, got, self._expected, quiet)
                return


@dataclass(slots=True)
class DueTurn:
    """A turn due now in a lane, for a free user to send; `done` gets its end (wall clock)."""

    cell: Cell
    salt: str  # the cell's (`LanesCell.salt`)
    lane: int
    conversation: Conversation
    copy: int
    turn: Turn
    due_at: float
    done: AsyncResult


class SessionLanes(ModeState):
    """The users' half: this process's lanes (greenlets) and the free users that send their turns."""

    def __init__(self, config: "RunConfig", share: tuple[int, int]) -> None:
        profile = config.profile
        self.salt = f"{config.started_at:.6f}"
        self.profile = profile
        self.spec = agent_spec(profile)[1]
        self.scenario = agent_trace(profile)  # the cells' (each turn is built by `_scenario`'s)
        self.share = share
        self.context = config.context_tokens
        self.queue: Queue = Queue()  # due turns, and the driver's probes (assignments)
        self.probes: list[int | None] | None = None  # their answers, as the driver announces them

    def _scenario(self, user: "LLMUser", salt: str) -> AgentTrace:
        """This process's scenario for a cell's `salt`, measured by the driver's probes (announced
        before any cell)."""
        def build() -> AgentTrace:
            scenario = agent_trace(self.profile, self.salt + salt)
            scenario.prompts.learn(self.probes or [])
            return scenario
        return user.prepared((SessionLanes, salt), build)  # type: ignore[return-value]

    def take(self, assignment: Assignment) -> None:
        self.queue.put(assignment)

    def on_message(self, data: dict[str, Any]) -> None:
        if "probes" in data:
            self.probes = data["probes"]
            return
        lanes = LanesCell.from_message(data, self.scenario)
        plan = SessionPlan(self.spec.conversations, lanes.cell.concurrency, lanes.cell.duration_s)
        index, processes = self.share
        for lane in range(index, plan.lanes, processes):
            gevent.spawn(self._lane, lanes, plan, lane)

    def step(self, user: "LLMUser") -> None:
        """Sends the next probe or due turn; between them returns every `IDLE_STEP_S`, so that a
        user takes up a new test's state (a sweep's next configuration makes one)."""
        try:
            due: DueTurn | Assignment = self.queue.get(timeout=IDLE_STEP_S)
        except Empty:
            return
        if isinstance(due, Assignment):
            user.send(due.body, due.label, request_id=due.request_id, urgent=True)
            return
        try:
            due.done.set(self._send(user, due))
        finally:  # whatever went wrong, the lane goes on
            if not due.done.ready():
                due.done.set(clock.now())

    def _send(self, user: "LLMUser", due: DueTurn) -> float:
        """Sends a due turn (or refuses it for the context); returns when it ended."""
        scenario = self._scenario(user, due.salt)
        sent = scenario.turn(due.conversation, due.turn, due.copy, due.cell.target)
        label = due.cell.label(sent.job, due.lane, scheduled_at=due.due_at, conversation=due.conversation.id,
                               copy=due.copy, agent=due.turn.agent, ideal_cached_tokens=sent.ideal_cached_tokens)
        body = user.body_of(sent.job)
        if self.context is not None and sent.in_tokens + sent.out_tokens > self.context:
            record = user.refuse(body, label, f"{CONTEXT_OVERFLOW}: {sent.in_tokens} + {sent.out_tokens} tokens "
                                              f"> the model's {self.context}")
        else:
            record = user.send(body, label, headers=sent.headers)
        return record.sent_at + (record.total_s or 0.0)

    # --- a lane ----------------------------------------------------------------------------------

    def _lane(self, cell: LanesCell, plan: SessionPlan, lane: int) -> None:
        gevent.sleep(max(cell.start - clock.now(), 0.0))
        for conversation, copy in plan.of_lane(lane):
            if cell.until is not None and clock.now() >= cell.until:
                return
            self._agent(cell, lane, conversation, copy, conversation.requests, MAIN_AGENT)

    def _agent(self, cell: LanesCell, lane: int, conversation: Conversation, copy: int, entries: Sequence[Entry],
               agent: str) -> float:
        """Plays one agent's entries (its sub-agents in greenlets of their own); returns when its
        last request, or its last sub-agent's, ended (wall clock)."""
        ended_at = clock.now()  # the previous turn's end, on the wall clock
        recorded_end = 0.0  # and as the trace recorded it (the agent's own clock)
        children: list[gevent.Greenlet] = []
        children_end = 0.0  # the recorded end of the sub-agents spawned since the last request
        index = 0
        for entry in entries:
            if isinstance(entry, SubAgent):
                children.append(gevent.spawn(self._subagent, cell, lane, conversation, copy, entry,
                                             ended_at + self._gap(entry.t - recorded_end)))
                children_end = max(children_end, entry.t + recorded_span(entry.requests))
                continue
            if children:
                gevent.joinall(children)
                ended_at = max([ended_at, *(child.value or 0.0 for child in children)])
                recorded_end, children = max(recorded_end, children_end), []
            recorded_gap = entry.think_time if entry.think_time is not None and index else entry.t - recorded_end
            due_at = ended_at + self._gap(recorded_gap)
            if cell.until is not None and due_at >= cell.until:
                break
            gevent.sleep(max(due_at - clock.now(), 0.0))
            done = AsyncResult()
            self.queue.put(DueTurn(cell.cell, cell.salt, lane, conversation, copy,
                                   Turn(agent, index, entry.t, entry, ""), due_at, done))
            ended_at = done.get()
            recorded_end = entry.t + (entry.api_time or 0.0)
            index += 1
        gevent.joinall(children)
        return max([ended_at, *(child.value or 0.0 for child in children)])

    def _subagent(self, cell: LanesCell, lane: int, conversation: Conversation, copy: int, sub: SubAgent,
                  start_at: float) -> float:
        gevent.sleep(max(start_at - clock.now(), 0.0))
        return self._agent(cell, lane, conversation, copy, sub.requests, sub.agent_id)

    def _gap(self, recorded_s: float) -> float:
        """A recorded gap as played: capped by `idle_cap_s`, scaled by `think_time_scale`."""
        return max(0.0, min(recorded_s, self.spec.idle_cap_s)) * self.spec.think_time_scale


def recorded_span(entries: Sequence[Entry]) -> float:
    """When an agent's last request ended, as recorded, from its start (`t` + `api_time`)."""
    ends = [entry.t + (recorded_span(entry.requests) if isinstance(entry, SubAgent) else entry.api_time or 0.0)
            for entry in entries]
    return max(ends, default=0.0)


class Sessions(LoadMode):
    schema = SessionsLoad
    fixed_streams = "the profile's sessions are its lanes, each a session's agents as they behaved"

    def user_kind(self, load: Any) -> str:
        return "free_slots"

    def first_users(self, load: SessionsLoad, users: int) -> int:
        return load.sessions

    def driver(self, profile: "Profile", users: int, started_at: float, run: Coordination) -> Driver:
        return SessionsDriver(run, users, profile)

    def begin(self, config: "RunConfig", share: tuple[int, int]) -> ModeState:
        return SessionLanes(config, share)

    def notes(self, profile: "Profile", context_tokens: int | None) -> dict[str, Any]:
        """The trace's hash block (a turn that misses the ideal by more than one is counted), and
        the turns that ask for more than the model's context, which are not sent."""
        conversations = agent_spec(profile)[1].conversations
        found: dict[str, Any] = {"agent_trace_block_size": max(c.block_size for c in conversations)}
        turns = [t for c in conversations for t in c.turns()]
        over = sum(1 for t in turns if context_tokens is not None
                   and t.request.in_tokens + t.request.out_tokens > context_tokens)
        if over:
            found["sessions_overflow"] = (f"{over} of the trace's {len(turns)} requests ask for more than the model's "
                                          f"context ({context_tokens} tokens, from /v1/models): recorded as failed, "
                                          f"not sent")
        return found


SESSIONS = Sessions()
