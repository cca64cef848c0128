"""Recorded traces, replayed at their times (load mode `trace`).

A trace is one request a line, read and checked when the profile is (a bad line stops the run
before any load, naming its line). Formats, told apart by the first line:
- mooncake JSONL: `{"timestamp": ms, "input_length": N, "output_length": N, "hash_ids": [...]}`;
  `hash_ids` name the prompt's 512-token blocks in order (`input_length` is the whole prompt, so
  the last block is partial), and requests that share their first hash ids share those blocks'
  text, so the server's prefix cache replays as recorded;
- plain JSONL: `{"timestamp_s": s, "input_tokens": N, "output_tokens": N, "session_id": "..."}`
  (session optional), or the same columns as CSV with a header line.

Prompts are synthesised to the asked lengths in the server's tokens (measured from
`usage.prompt_tokens` by probes before the first request, see `TracePrompts`): the hash blocks
first (fixed text per id, the same in every process; a block the length cuts short is a prefix of
its whole text), then a fresh nonce and filler up to the length. A session's request resends the
session's previous prompt first (its history), then new text. Output lengths are forced with
`max_tokens` and `ignore_eos`; a record whose `completion_tokens` fall short of its `max_tokens`
shows the server stopped early.
"""

from __future__ import annotations

import csv
import io
import math
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
from loadlib.scenarios.base import ANY, TRACE_KIND, WARM, Cell, Job, Scenario, Send, level_cell_name
from loadlib.scenarios.longcontext import DEFAULT_CHARS_PER_TOKEN, Calibration, Filler
from loadlib.scenarios.spec import Strict, beside_the_profile

if TYPE_CHECKING:
    from loadlib.profiles import Profile
    from loadlib.run.config import RunConfig

BLOCK_TOKENS = 512  # mooncake's hash block
ASK = "\n\nSummarise the lines above."
# the filler's first characters the probes measure, in tokens at the default rate: dense where
# prompts are short, as a short stretch's tokens per character stray further from the mean
PROBE_STRETCH_TOKENS = (32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 4096)
TAG_PROBE_TOKENS, TAG_PROBE_BLOCKS = 512, 4  # the stretch the tag probe cuts into blocks
PROBE_ANSWER_TOKENS = 2  # the fewest a valid record has: a probe is sent for its usage.prompt_tokens


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
    """Prompts of the asked lengths in server tokens that share text where the trace's hash ids do.

    A prompt is one stretch of the filler from its start, cut into the request's hash blocks (each
    led by a tag of digits from its id and the run's salt), then a session's history, a line with a
    fresh nonce, the stretch's rest and the ask:

        [tag] filler[0:e0] [tag] filler[e0:e1] ... history [nonce] filler[ek:x] ask

    Block i holds the prompt's tokens 512 i to 512 (i + 1), as mooncake's do: blocks past the length
    are not sent, and the last one sent is cut short, a prefix of its whole text. The ends `e` are
    fixed for the run by the probes (each the same text on every process, so the same answers), so
    requests that share their first hash ids share that text as far as both reach, and the server's
    prefix cache meets it. The client has no tokenizer: the probes measure the server's tokens of
    the filler's first characters at many lengths (the stretch every prompt is made of; its tokens
    per character drift, the more the shorter the stretch), of the frame (template, nonce line and
    ask) and of a tag. A line shorter than the frame is sent as the frame alone.
    """

    kind = TRACE_KIND

    def __init__(self, salt: str, params: dict[str, Any] | None = None) -> None:
        super().__init__(params, self.kind)
        self.salt = salt  # the same on every process of a run, new for every run
        self.calibration, self.filler = Calibration(), Filler()  # learns from the probes alone
        self._template_tokens = 0  # the chat template's own framing (an empty message)
        self._tag_tokens = len(self._tag(0)) / DEFAULT_CHARS_PER_TOKEN  # until `prepare` measures it
        # session -> its last prompt (the history its next request resends), and that text's tokens
        self._sessions: dict[str, tuple[str, int]] = {}
        # hash blocks of requests answered already: in the server's prefix cache, so a later request
        # meets them warm (a block only sent may still be in its first request's prefill, or queued)
        self._served: set[int] = set()
        self._blocks: dict[str, list[int]] = {}  # the prompt of each request in flight -> its blocks

    def job_for(self, request: TraceRequest) -> Job:
        history, history_tokens = self._sessions.get(request.session or "", ("", 0))
        frame = self.calibration.frame_tokens or 0
        budget = request.input_tokens - frame - history_tokens  # the blocks' and the stretch's tokens
        hash_ids = request.hash_ids[:max(0, math.ceil(budget / BLOCK_TOKENS))]  # the blocks the length reaches
        tags = round(len(hash_ids) * self._tag_tokens)
        stretch = max(0, budget - tags)
        text = self.filler.take(self.calibration.chars_for(frame + stretch))
        blocks, start = [], 0
        for index, hash_id in enumerate(hash_ids):
            end = self._block_end(index)
            blocks.append(self._tag(hash_id) + text[start:end])  # past the stretch: cut short
            start = end
        content = _prompt("".join(blocks) + history, text[start:], f"{uuid.uuid4().int % 10 ** 16:016d}")
        cache = WARM if history or self._served.intersection(hash_ids) else ANY
        self._blocks[content] = hash_ids
        if request.session is not None:
            self._sessions[request.session] = (content, frame + history_tokens + tags + stretch
                                               - self._template_tokens)
        return self._job(self.name, [{"role": "user", "content": content}], cache=cache,
                         max_tokens=request.output_tokens, ignore_eos=True)

    def next(self, stream: int) -> Job:
        raise TypeError("trace prompts come from the trace's requests (job_for)")

    def observe(self, job: Job, record: dict[str, Any]) -> None:
        """An answered request's blocks are in the server's prefix cache from now on."""
        blocks = self._blocks.pop(job.messages[0]["content"], ())
        if record.get("ttft_s") is not None:
            self._served.update(blocks)

    def prepare(self, send: Send) -> None:
        """The probes, before any trace request: an empty message (the template's framing), the
        frame alone, the filler's first characters at `PROBE_STRETCH_TOKENS`, and one of those
        stretches cut into tagged blocks (a tag's cost, the cut included). Their nonce is the run's,
        so each is the same text on every process, and so are the answers and the block ends."""
        if self.calibration.frame_tokens is not None:
            return
        nonce = f"{self._digits('probe') % 10 ** 16:016d}"
        stretches = [round(tokens * DEFAULT_CHARS_PER_TOKEN) for tokens in PROBE_STRETCH_TOKENS]
        text = self.filler.take(max(stretches))
        tagged = stretches[PROBE_STRETCH_TOKENS.index(TAG_PROBE_TOKENS)]
        quarter = tagged // TAG_PROBE_BLOCKS
        # blocks of the probe's own ids (mooncake's are >= 0)
        blocks = "".join(self._tag(-1 - i) + text[i * quarter:(i + 1) * quarter] for i in range(TAG_PROBE_BLOCKS))
        contents = ["", _prompt("", "", nonce), *(_prompt("", text[:chars], nonce) for chars in stretches),
                    _prompt(blocks, text[TAG_PROBE_BLOCKS * quarter:tagged], nonce)]
        params = {**self.params, "max_tokens": PROBE_ANSWER_TOKENS}
        jobs = [Job("calibrate", [{"role": "user", "content": content}], params, kind=self.kind)
                for content in contents]
        template, frame, *measured, tagged_tokens = [record.get("prompt_tokens") for record in send(jobs, "calibrate")]
        calibration = self.calibration
        self._template_tokens = template or 0
        calibration.learn(None, 0, frame)
        for chars, tokens in zip(stretches, measured):
            calibration.learn(calibration.frame_tokens, chars, tokens)
        plain = measured[PROBE_STRETCH_TOKENS.index(TAG_PROBE_TOKENS)]
        if tagged_tokens and plain:
            self._tag_tokens = (tagged_tokens - plain) / TAG_PROBE_BLOCKS

    def _block_end(self, index: int) -> int:
        """Where block `index` ends in the stretch, in characters: (index + 1) blocks of 512 tokens
        but their tags. From the probes alone, so the same in every process and all the run."""
        return self.calibration.chars_for((self.calibration.frame_tokens or 0)
                                          + round((index + 1) * (BLOCK_TOKENS - self._tag_tokens)))

    def _tag(self, hash_id: int) -> str:
        """What starts a hash block: digits fixed by the id and the run's salt (one width for all)."""
        return f"[{self._digits(hash_id) % 10 ** 8:08d}]\n"

    def _digits(self, key: object) -> int:
        return int(uuid.uuid5(uuid.NAMESPACE_OID, f"{self.salt}:{key}"))


def _prompt(blocks: str, own: str, nonce: str) -> str:
    """A trace prompt's text: the shared part, the request's nonce, its own filler, the ask."""
    return f"{blocks}\n[{nonce}]\n{own}{ASK}"


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
        its index mod processes) at their times, but the lines longer than the model's context;
        in an A/B run the trace plays once per target, one after the other."""
        load: TraceLoad = config.profile.load
        prompts = self.mix(config.profile, config)
        timeline = self.timeline(config.profile, config.users, config.started_at, prompts)
        slots = ArrivalSlots(prompts, config.users, share)
        context = config.context_tokens

        def due() -> Any:
            for cell, start, _end in timeline.bounds():  # the whole trace once per target (A/B runs)
                for number, request in enumerate(load.requests):
                    if slots.mine(number) and (context is None or request.input_tokens + request.output_tokens <= context):
                        yield Arrival(start + request.at_s / load.speedup, cell, prompts, number % config.users, request)

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
