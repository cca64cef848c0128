"""What a scenario is: a source of jobs (requests to send), and the cells it is measured in.

A scenario knows what to ask and what cache state its requests should meet; it does not know
when they are sent or by whom (that is the load mode's job). `next(stream)` is called once per
request; `stream` names a sequence of related requests (a round's slot, a closed-loop user), so
that conversations can continue on the same stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from loadlib.records import RequestLabel

COLD, WARM, ANY = "cold", "warm", "any"  # intended cache states
# Kinds the report reads in the records' `kind` (their cells get tables of their own), named here
# so that it loads neither the kinds' profile schemas nor their modules.
LONG_CONTEXT_KIND = "long-context"  # its prefill per size
TRACE_KIND = "trace"  # a recorded trace's requests (`loadlib.modes.trace`): its replay table
# Kinds whose scenario name is one prompt, whose outputs at temperature 0 should be one: the
# protocol's prompts, and "" (a locustfile's own task, or a record from before kinds were kept)
ONE_PROMPT_KINDS = ("protocol", "")
CONTEXT_OVERFLOW = "context overflow"  # the reason of an agent session's turn not sent for the model's context


@dataclass(frozen=True, slots=True)
class Job:
    """One request a scenario wants sent, and the labels its record will carry."""

    scenario: str  # the record's `scenario` (a prompt or workload name)
    messages: list[dict[str, Any]]
    params: dict[str, Any] = field(default_factory=dict)  # extra body fields: tools, max_tokens, ...
    cache: str = ANY  # the cache state this request is meant to meet
    turn: int | None = None
    kind: str = ""  # the kind of the scenario that made it

    def label(self, **where: Any) -> RequestLabel:
        """Its label, sent `where` (cell, case, stream, ...; `Cell.label` says where in a plan)."""
        return RequestLabel(**{"scenario": self.scenario, "kind": self.kind, "cache_intended": self.cache,
                               "turn": self.turn, **where})


# Sends auxiliary jobs (priming, calibration) labelled `purpose`, waits, returns their records.
Send = Callable[[list[Job], str], list[dict[str, Any]]]


class Scenario:
    """A workload. Subclasses set `kind` and implement `next`."""

    kind: ClassVar[str]
    cache: str = ANY  # what the cells of this scenario set up: COLD flushes before each round
    same_prompt: bool = False  # every stream sends the identical prompt (the "same" case)

    def __init__(self, params: dict[str, Any] | None = None, name: str | None = None) -> None:
        self.params = dict(params or {})  # per-scenario request overrides (max_tokens, thinking)
        self.base_name = name or self.kind  # a profile's name for it (one kind may appear twice)

    @property
    def name(self) -> str:
        return self.base_name

    def label(self, stream: int) -> str:
        """The `scenario` its records on `stream` carry (protocol cells: a prompt per stream)."""
        return self.name

    def next(self, stream: int) -> Job:
        raise NotImplementedError

    def prepare(self, send: Send) -> None:
        """Runs before each of its cells (and once before a free-running run): priming,
        calibration. Most scenarios need nothing."""

    def observe(self, job: Job, record: dict[str, Any]) -> None:
        """Sees the record of each of its measured jobs (long-context corrects its sizing)."""

    def round_cells(self, concurrency: list[int], rounds: int) -> list["Cell"]:
        """Its cells in the rounds mode: N = 1 is a single-stream cell, larger N start N streams
        together (case "same" when they all send one prompt, else "different")."""
        case = "same" if self.same_prompt else "different"
        return [Cell(SINGLE, SINGLE, self, 1, rounds) if n == 1 else
                Cell(round_cell_name(n, self.name), case, self, n, rounds) for n in concurrency]

    def _job(self, scenario: str, messages: list[dict[str, Any]], cache: str | None = None,
             turn: int | None = None, **params: Any) -> Job:
        return Job(scenario, messages, {**params, **self.params}, cache or self.cache, turn, self.kind)


def request_params(max_tokens: int | None = None, thinking: str | None = None) -> dict[str, Any]:
    """`chat_body` arguments that override the run's defaults for one scenario (`thinking`:
    "on", "off" or "server", see `loadlib.wire.client.chat_body`)."""
    params: dict[str, Any] = {}
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    if thinking is not None:
        params["thinking"] = thinking
    return params


@dataclass(frozen=True, eq=False)
class Cell:
    """One measurement cell: a scenario measured at one concurrency, in rounds or for a time.

    Rounds cells (`rounds` > 0) start `concurrency` streams together per round; free-running
    cells (`rounds` == 0) keep them busy for `duration_s` or feed them arrivals.
    """

    name: str  # "single", "c4-same", "c8-distinct-issues", "prefill-14k", "closed", "ladder-u4", ...
    case: str  # "single" | "same" | "different" | a free-running mode's name
    scenario: Scenario
    concurrency: int
    rounds: int = 0
    duration_s: float | None = None
    target: str = ""  # an A/B run's server (its label); "": the run's one server
    measured: bool = True  # False: a warm-up, priming or calibration (left out of every figure)

    @property
    def prompts(self) -> tuple[str, ...]:
        """The scenario label of each stream (for the protocol's cells, its prompt names)."""
        return tuple(self.scenario.label(stream) for stream in range(self.concurrency))

    def label(self, job: Job, slot: int, round: int = 0, scheduled_at: float | None = None,
              closed_loop: bool = False, **more: Any) -> RequestLabel:
        """The label of `job` sent in this cell by stream `slot` (in round `round`), at the time
        `scheduled_at` if it was meant to go at one, by a closed-loop stream if `closed_loop`;
        `more` are the sending mode's own fields (`RequestLabel`'s, such as a turn it counts)."""
        return job.label(cell=self.name, case=self.case, concurrency=self.concurrency, round=round, slot=slot,
                         target=self.target, closed_loop=closed_loop, scheduled_at=scheduled_at,
                         measured=self.measured, **more)


SINGLE = "single"  # the protocol's single-stream cell (and its case)
CONCURRENT_CASES = ("same", "different")  # the protocol's cells of N streams: one prompt, or different ones
WARMUP = "warmup"  # a free-running mode's unmeasured cell before the measured ones


def stats_name(case: str, cell: str, scenario: str) -> str:
    """A request's row in Locust's stats (from its label's fields): the cell for the protocol's
    concurrency cells, the scenario for single-stream cells and requests that are their own cell
    (a locustfile's own), "cell: scenario" for a free-running mix."""
    if case in CONCURRENT_CASES:
        return cell
    if case == SINGLE or cell == scenario:
        return scenario
    return f"{cell}: {scenario}"


def round_cell_name(concurrency: int, what: str) -> str:
    """A rounds cell of `concurrency` streams together: "c4-same", "c8-distinct-issues"."""
    return f"c{concurrency}-{what}"


def level_cell_name(mode: str, users: int | None = None, rate_rps: float | None = None, run: int = 1) -> str:
    """A free-running cell: the mode alone ("closed", "trace"), at a number of users ("ladder-u4",
    "search-u4") or at a rate ("open-2rps", "search-12rps"); a level run again adds "-r2", "-r3"."""
    name = mode if users is None else f"{mode}-u{users}"
    name = name if rate_rps is None else f"{name}-{rate_rps:g}rps"
    return name if run == 1 else f"{name}-r{run}"
