"""Recorded traces, replayed at their times (load mode `trace`).

A trace is one request a line, read and checked when the profile is (a bad line stops the run
before any load, naming its line). Formats, told apart by the first line:
- mooncake JSONL: `{"timestamp": ms, "input_length": N, "output_length": N, "hash_ids": [...]}`;
  `hash_ids` name 512-token blocks, and requests that share a hash id share that block of their
  prompt, so the server's prefix cache replays as recorded;
- plain JSONL: `{"timestamp_s": s, "input_tokens": N, "output_tokens": N, "session_id": "..."}`
  (session optional), or the same columns as CSV with a header line.

Prompts are synthesised to the asked lengths in the server's tokens (calibrated from
`usage.prompt_tokens`, as the long-context scenario does): the hash blocks first (fixed text per
id, the same in every process), then a fresh nonce and filler up to the length. A session's
request resends the session's previous prompt first (its history), then new text. Output lengths
are forced with `max_tokens` and `ignore_eos`; a record whose `completion_tokens` fall short of
its `max_tokens` shows the server stopped early.
"""

from __future__ import annotations

import csv
import io
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import gevent

import orjson
from pydantic import PositiveFloat, PrivateAttr, ValidationInfo, field_validator, model_validator

from loadlib.modes.arrivals import Arrival, ArrivalSlots
from loadlib.modes.base import ModeState
from loadlib.modes.timeline import TimedMode
from loadlib.scenarios.base import ANY, WARM, Cell, Job, Scenario, Send, level_cell_name
from loadlib.scenarios.longcontext import DEFAULT_CHARS_PER_TOKEN, PROBE_TOKENS, Calibration, Filler
from loadlib.scenarios.spec import Strict, beside_the_profile

if TYPE_CHECKING:
    from loadlib.profiles import Profile
    from loadlib.run.config import RunConfig

BLOCK_TOKENS = 512  # mooncake's hash block
ASK = "\n\nSummarise the lines above."
LEARN_PROMPTS = 64
PROBE_BLOCKS = 4  # blocks in the probe that measures a block's cost


class TraceError(ValueError):
    """A trace that cannot be replayed; str is one line naming the file and line."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    at_s: float  # from the trace's first request
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    session: str | None = None


def load_trace(path: Path) -> list[TraceRequest]:
    """The trace's requests in order, times from its first; raises `TraceError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise TraceError(f"{path}: no requests")
    rows = _csv_rows(path, lines) if not lines[0][1].lstrip().startswith("{") else _json_rows(path, lines)
    requests, last, first = [], float("-inf"), None
    for number, row in rows:
        request = _request(path, number, row)
        if request.at_s < last:
            raise TraceError(f"{path}: line {number}: timestamp goes backwards ({request.at_s:g} s after {last:g} s)")
        last = request.at_s
        first = request.at_s if first is None else first
        requests.append(request)
    return [TraceRequest(r.at_s - first, r.input_tokens, r.output_tokens, r.hash_ids, r.session) for r in requests]


def _json_rows(path: Path, lines: list[tuple[int, str]]) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in lines:
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TraceError(f"{path}: line {number}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise TraceError(f"{path}: line {number}: expected an object")
        rows.append((number, row))
    return rows


def _csv_rows(path: Path, lines: list[tuple[int, str]]) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO("\n".join(line for _n, line in lines)))
    return [(number, row) for (number, _line), row in zip(lines[1:], reader)]


def _request(path: Path, number: int, row: dict[str, Any]) -> TraceRequest:
    """One row of either format as a request (mooncake's milliseconds made seconds)."""
    mooncake = "input_length" in row
    keys = ("timestamp", "input_length", "output_length") if mooncake else ("timestamp_s", "input_tokens",
                                                                              "output_tokens")
    missing = [key for key in keys if row.get(key) in (None, "")]
    if missing:
        raise TraceError(f"{path}: line {number}: missing {missing[0]}")
    try:
        at = float(row[keys[0]]) / (1000.0 if mooncake else 1.0)
        tokens = int(row[keys[1]]), int(row[keys[2]])
        hash_ids = tuple(int(h) for h in row.get("hash_ids") or ())
    except (TypeError, ValueError):
        raise TraceError(f"{path}: line {number}: {', '.join(keys)} must be numbers"
                         + (", hash_ids a list of integers" if mooncake else "")) from None
    if at < 0 or tokens[0] < 1 or tokens[1] < 1:
        raise TraceError(f"{path}: line {number}: times must be >= 0 and lengths >= 1")
    session = row.get("session_id")
    return TraceRequest(at, tokens[0], tokens[1], hash_ids, str(session) if session not in (None, "") else None)


class TracePrompts(Scenario):
    """Prompts for trace requests: hash blocks, a session's history, then unique filler."""

    kind = "trace"

    def __init__(self, salt: str, params: dict[str, Any] | None = None) -> None:
        super().__init__(params, self.kind)
        self.salt = salt  # the same on every process of a run, new for every run
        self.calibration, self.filler = Calibration(), Filler()
        self._block_chars = round(BLOCK_TOKENS * DEFAULT_CHARS_PER_TOKEN)  # until `prepare` measures it
        self._sessions: dict[str, str] = {}  # session -> its last prompt (the history the next resends)
        self._seen: set[int] = set()  # hash blocks sent already: a later request meets them warm
        self._block_tokens = float(BLOCK_TOKENS)  # what a block's fixed text costs, learnt from answers
        self._aimed: dict[str, tuple[float, int]] = {}  # nonce -> (tokens aimed at beyond blocks, blocks)
        self._learnt = 0

    def job_for(self, request: TraceRequest) -> Job:
        history = self._sessions.get(request.session or "", "")
        cache = WARM if history or self._seen.intersection(request.hash_ids) else ANY
        self._seen.update(request.hash_ids)
        shared = "".join(self._block(h) for h in request.hash_ids) + history
        blocks = len(request.hash_ids)
        rest = max(request.input_tokens - blocks * self._block_tokens, 1.0)  # the frame, history and filler
        unique_chars = max(0, self.calibration.chars_for(round(rest)) - len(history))
        nonce = uuid.uuid4().hex
        if blocks and len(self._aimed) < LEARN_PROMPTS and self._learnt < LEARN_PROMPTS:
            self._aimed[nonce] = (rest, blocks)
        content = f"{shared}\n[{nonce}]\n{self.filler.take(unique_chars)}{ASK}"
        if request.session is not None:
            self._sessions[request.session] = content
        return self._job(self.name, [{"role": "user", "content": content}], cache=cache,
                         max_tokens=request.output_tokens, ignore_eos=True)

    def next(self, stream: int) -> Job:
        raise TypeError("trace prompts come from the trace's requests (job_for)")

    def prepare(self, send: Send) -> None:
        """Two probes, as long-context's: the frame alone, and a block's worth of filler; then one
        with four hash blocks of the probe's own (never a trace's), for what a block's text costs."""
        if self.calibration.frame_tokens is not None:
            return
        probes = [Job("calibrate", self._unique(chars), {**self.params, "max_tokens": PROBE_TOKENS})
                  for chars in (0, self._block_chars)]
        for job, record in zip(probes, send(probes, "calibrate")):
            self.calibration.learn(self.calibration.frame_tokens, self._chars(job), record.get("prompt_tokens"))
        # a block's size from these two probes alone: the same on every process (the server's
        # tokenizer answers them alike), before any answer refines the rest
        self._block_chars = self.calibration.chars_for((self.calibration.frame_tokens or 0) + BLOCK_TOKENS)
        blocks = "".join(self._block(-n) for n in range(1, PROBE_BLOCKS + 1))
        probe = Job("calibrate", [{"role": "user", "content": blocks + self._unique(0)[0]["content"]}],
                    {**self.params, "max_tokens": PROBE_TOKENS})
        tokens = send([probe], "calibrate")[0].get("prompt_tokens")
        if tokens and self.calibration.frame_tokens is not None:
            self._block_tokens = (tokens - self.calibration.frame_tokens) / PROBE_BLOCKS

    def observe(self, job: Job, record: dict[str, Any]) -> None:
        """The first answers refine the sizing: a prompt of filler alone the calibration, one with
        hash blocks what a block's fixed text costs (its tokens beyond what the rest was aimed at)."""
        content, tokens = job.messages[0]["content"], record.get("prompt_tokens")
        start = content.find("\n[")
        aimed = self._aimed.pop(content[start + 2:start + 34], None)
        if not tokens or self._learnt >= LEARN_PROMPTS:
            return
        if start == 0:
            self.calibration.learn(self.calibration.frame_tokens, self._chars(job), tokens)
        elif aimed is not None:
            rest, blocks = aimed
            sample = (tokens - rest) / blocks
            self._block_tokens += (sample - self._block_tokens) / (self._learnt + 2)  # a running mean
        self._learnt += 1

    def _block(self, hash_id: int) -> str:
        """A hash block's text: the filler from an offset fixed by the id and the run's salt."""
        offset = (int(uuid.uuid5(uuid.NAMESPACE_OID, f"{self.salt}:{hash_id}")) % 997) * 101
        return self.filler.take(offset + self._block_chars)[offset:]

    def _unique(self, chars: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"\n[{uuid.uuid4().hex}]\n{self.filler.take(chars)}{ASK}"}]

    def _chars(self, job: Job) -> int:
        return len(job.messages[0]["content"]) - len(self._unique(0)[0]["content"])


class TraceLoad(Strict):
    """A recorded trace replayed at its times (`loadlib.modes.trace`); `trace` is relative to the profile
    file, read and checked when the profile is."""

    mode: Literal["trace"]
    trace: str
    speedup: PositiveFloat = 1.0  # 2: twice as fast as recorded
    _requests: list[TraceRequest] = PrivateAttr()

    @field_validator("trace")
    @classmethod
    def _beside_the_profile(cls, path: str, info: ValidationInfo) -> str:
        return beside_the_profile(path, info)

    @model_validator(mode="after")
    def _load(self) -> "TraceLoad":
        try:
            self._requests = load_trace(Path(self.trace))
        except TraceError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def requests(self) -> list[TraceRequest]:
        return self._requests

    @property
    def duration_s(self) -> float:
        """From the first request to the last, at `speedup`."""
        return self._requests[-1].at_s / self.speedup


class Trace(TimedMode):
    schema = TraceLoad
    fixed_streams = "the trace's timestamps send its requests, not a number of streams"

    def user_kind(self, load: Any) -> str:
        return "free_slots"

    def cells(self, load: TraceLoad, users: int, mix: Scenario) -> list[Cell]:
        """One cell; its last request is sent at the end of the cell's time, so one more second."""
        return [Cell(level_cell_name(load.mode), load.mode, mix, users, duration_s=load.duration_s + 1.0)]

    def mix(self, profile: "Profile", config: "RunConfig | None" = None) -> Scenario:
        """The trace's prompts, salted alike on every process of a run and anew for every run."""
        return TracePrompts(salt=f"{config.started_at:.6f}" if config is not None else "")

    def begin(self, config: "RunConfig", share: tuple[int, int]) -> ModeState:
        """Free users, and one greenlet sending this process's share of the trace's lines (i =
        its index mod processes) at their times, but the lines longer than the model's context."""
        load: TraceLoad = config.profile.load
        prompts = self.mix(config.profile, config)
        timeline = self.timeline(config.profile, config.users, config.started_at, prompts)
        slots = ArrivalSlots(prompts, config.users, share)
        context = config.context_tokens

        def due() -> Any:
            for number, request in enumerate(load.requests):
                if slots.mine(number) and (context is None or request.input_tokens + request.output_tokens <= context):
                    yield Arrival(timeline.started_at + request.at_s / load.speedup, timeline.cells[-1], prompts,
                                  number % config.users, request)

        def feed() -> None:
            slots.put_when_due(due())
            slots.close()
        gevent.spawn(feed)
        return slots

    def notes(self, profile: "Profile", context_tokens: int | None) -> dict[str, Any]:
        """The lines that ask for more than the model's context, which every process leaves out."""
        load = profile.load
        if context_tokens is None:
            return {}
        skipped = sum(1 for r in load.requests if r.input_tokens + r.output_tokens > context_tokens)
        if not skipped:
            return {}
        return {"trace_skipped": f"{skipped} of {len(load.requests)} trace lines ask for more than the model's "
                                 f"context ({context_tokens} tokens, from /v1/models): skipped"}


TRACE = Trace()
