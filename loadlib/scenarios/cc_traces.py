"""cc-traces: coding-agent conversations as the Weka/SemiAnalysis traces record them.

One JSON object per conversation (a file, a folder of files, or JSONL with one conversation a
line), as the TRACE_FORMAT document of the agentic-coding-analysis project specifies it:
`id`, `block_size`, `hash_id_scope` (`local` or `global`; absent means global), `tool_tokens`,
`system_tokens` and `requests[]`, each with `t` (seconds from the conversation's start), `type`
(`s` streaming, `n` non-streaming), `in` and `out` (tokens), `hash_ids` (the prompt's FULL
blocks of `block_size` tokens, in order, chained: an id fixes its whole prefix, so it also says
its position), `input_types`, `output_types`, `stop` and optional `api_time`, `ttft` and
`think_time`. A `type: "subagent"` entry is a sub-agent spawned at its `t`, with an `agent_id`
and its own `requests[]` (sub-agents may nest), whose `t` count from its spawn. Other keys
(`models`, `_analysis`, `totals`, a sub-agent's `duration_ms`, ...) are read past.

Reading checks what a replay relies on and stops at the first problem with one line naming the
file, the conversation and the request (`TraceFormatError`): the types and ranges, times that go
backwards, more hash blocks than `in` tokens hold, and chains that contradict themselves (one id
after two different ids). `ideal_prefix_hits` is the cache hit an infinite prefix cache would
give, from the hash ids alone. `python -m loadlib.scenarios.cc_traces PATH` prints a trace's
shape and ideal hit, or the line and exit status 2.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import orjson

MAIN_AGENT = "main"  # a conversation's own agent, beside its sub-agents' agent_ids
SCOPES = ("local", "global")
REQUEST_TYPES = ("s", "n")
SUBAGENT = "subagent"
SUFFIXES = (".json", ".jsonl")  # the files a folder of traces is read from


class TraceFormatError(ValueError):
    """A trace that cannot be replayed; str is one line naming the file, conversation and request."""


@dataclass(frozen=True, slots=True)
class AgentRequest:
    """One request of an agent, as recorded."""

    t: float  # seconds from its agent's start (a sub-agent's from its spawn)
    type: str  # "s" streaming, "n" non-streaming
    in_tokens: int  # the whole prompt
    out_tokens: int
    hash_ids: tuple[int, ...]  # the prompt's full blocks, in order
    input_types: tuple[str, ...] = ()  # what the client added this turn ("text", "tool_result")
    output_types: tuple[str, ...] = ()  # what the answer held ("thinking", "text", "tool_use")
    stop: str = ""  # "", "tool_use", "end_turn"
    api_time: float | None = None  # s, the recorded response time
    ttft: float | None = None  # s, the recorded time to first token
    think_time: float | None = None  # s, the client's gap since the previous response ended


@dataclass(frozen=True, slots=True)
class SubAgent:
    """A sub-agent: spawned at `t` of its parent, with a fresh context and requests of its own."""

    t: float  # spawn, seconds from its parent's start
    agent_id: str
    requests: tuple["AgentRequest | SubAgent", ...]  # their `t` from the spawn
    subagent_type: str = ""  # "Explore", "general-purpose", "Plan", ...
    tool_tokens: int = 0
    system_tokens: int = 0


Entry = AgentRequest | SubAgent


@dataclass(frozen=True, slots=True)
class Turn:
    """A request placed in its conversation: which agent sent it, its place, its start."""

    agent: str  # MAIN_AGENT or the sub-agent's agent_id
    index: int  # among its agent's own requests, from 0
    at_s: float  # from the conversation's start (sub-agent offsets added to their spawns)
    request: AgentRequest
    path: str  # where it is in the file: "requests[5].requests[2]"


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    block_size: int  # tokens per hash block (64 in every public trace)
    scope: str  # "local": ids are this conversation's own; "global": shared by every conversation
    requests: tuple[Entry, ...]
    tool_tokens: int = 0
    system_tokens: int = 0
    source: str = field(default="", compare=False)  # the file (and line) it was read from

    def turns(self) -> list[Turn]:
        """Every request, sub-agents' included, in the order they start (the file's order on ties)."""
        found: list[Turn] = []

        def walk(entries: Sequence[Entry], agent: str, start_s: float, prefix: str) -> None:
            index = 0
            for position, entry in enumerate(entries):
                path = f"{prefix}requests[{position}]"
                if isinstance(entry, SubAgent):
                    walk(entry.requests, entry.agent_id, start_s + entry.t, path + ".")
                else:
                    found.append(Turn(agent, index, start_s + entry.t, entry, path))
                    index += 1
        walk(self.requests, MAIN_AGENT, 0.0, "")
        return sorted(found, key=lambda turn: turn.at_s)

    @property
    def subagents(self) -> list[SubAgent]:
        """Every sub-agent, nested ones too, in the file's order."""
        found: list[SubAgent] = []

        def walk(entries: Sequence[Entry]) -> None:
            for entry in entries:
                if isinstance(entry, SubAgent):
                    found.append(entry)
                    walk(entry.requests)
        walk(self.requests)
        return found


# --- reading ---------------------------------------------------------------------------------------


def read_traces(path: str | Path) -> list[Conversation]:
    """The conversations of a file (one JSON object, or JSONL with one a line) or of a folder of
    such files (`.json`, `.jsonl`, by name), checked; raises `TraceFormatError`."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
        if not files:
            raise TraceFormatError(f"{path}: no {' or '.join(SUFFIXES)} files")
    else:
        files = [path]
    conversations = [conversation for file in files for conversation in _read_file(file)]
    _check_across(conversations)
    return conversations


def _read_file(path: Path) -> Iterator[Conversation]:
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise TraceFormatError(f"{path}: no conversations")
    by_line = len(lines) > 1 or path.suffix == ".jsonl"  # a .json file of one line is named, not numbered
    try:  # a first line that is JSON on its own: one conversation a line
        objects = [(f"{path} line {lines[0][0]}" if by_line else str(path), orjson.loads(lines[0][1]))]
    except orjson.JSONDecodeError:  # else one document, pretty-printed
        try:
            objects = [(str(path), orjson.loads(text))]
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(f"{path}: not JSON ({exc})") from None
        lines = []
    for number, line in lines[1:]:
        where = f"{path} line {number}"
        try:
            objects.append((where, orjson.loads(line)))
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(f"{where}: not JSON ({exc})") from None
    for where, value in objects:
        yield _conversation(where, value)


def _conversation(where: str, value: Any) -> Conversation:
    if not isinstance(value, dict):
        raise TraceFormatError(f"{where}: expected one JSON object per conversation, got {_kind(value)}")
    raw_id = value.get("id")
    if not isinstance(raw_id, (str, int)) or isinstance(raw_id, bool) or raw_id == "":
        raise TraceFormatError(f"{where}: a conversation needs an id (a string)")
    at = f"{where}: conversation {raw_id}"
    block_size = _count(value, "block_size", at, minimum=1)
    scope = value.get("hash_id_scope", "global")
    if scope not in SCOPES:
        raise TraceFormatError(f"{at}: hash_id_scope must be local or global, got {scope!r}")
    requests = _entries(value, at, "", block_size)
    if not requests:
        raise TraceFormatError(f"{at}: no requests")
    return Conversation(str(raw_id), block_size, scope, requests, _count(value, "tool_tokens", at, default=0),
                        _count(value, "system_tokens", at, default=0), where)


def _entries(parent: dict[str, Any], at: str, prefix: str, block_size: int) -> tuple[Entry, ...]:
    raw = parent.get("requests")
    if not isinstance(raw, list):
        raise TraceFormatError(f"{at}: {prefix}requests must be a list")
    entries: list[Entry] = []
    last_t = 0.0
    for position, item in enumerate(raw):
        here = f"{at}: {prefix}requests[{position}]"
        if not isinstance(item, dict):
            raise TraceFormatError(f"{here}: expected an object, got {_kind(item)}")
        t = _seconds(item, "t", here, required=True)
        if t < last_t:
            raise TraceFormatError(f"{here}: t goes backwards ({t:g} s after {last_t:g} s)")
        last_t = t
        kind = item.get("type")
        if kind == SUBAGENT:
            entries.append(_subagent(item, here, f"{prefix}requests[{position}].", t, at, block_size))
        elif kind in REQUEST_TYPES:
            entries.append(_request(item, here, t, block_size))
        else:
            raise TraceFormatError(f"{here}: type must be s, n or subagent, got {kind!r}")
    return tuple(entries)


def _subagent(item: dict[str, Any], here: str, prefix: str, t: float, at: str, block_size: int) -> SubAgent:
    agent_id = item.get("agent_id")
    if not isinstance(agent_id, str) or not agent_id:
        raise TraceFormatError(f"{here}: a subagent needs an agent_id (a string)")
    if agent_id == MAIN_AGENT:
        raise TraceFormatError(f"{here}: agent_id {MAIN_AGENT!r} is the conversation's own agent")
    return SubAgent(t, agent_id, _entries(item, at, prefix, block_size), _text(item, "subagent_type", here),
                    _count(item, "tool_tokens", here, default=0), _count(item, "system_tokens", here, default=0))


def _request(item: dict[str, Any], here: str, t: float, block_size: int) -> AgentRequest:
    in_tokens = _count(item, "in", here, minimum=1)
    out_tokens = _count(item, "out", here)
    raw_ids = item.get("hash_ids")
    if not isinstance(raw_ids, list) or not all(_whole(h) and h >= 0 for h in raw_ids):
        raise TraceFormatError(f"{here}: hash_ids must be a list of whole numbers >= 0")
    if len(raw_ids) * block_size > in_tokens:
        raise TraceFormatError(f"{here}: {len(raw_ids)} hash blocks of {block_size} tokens are more than its "
                               f"in ({in_tokens} tokens)")
    return AgentRequest(t, item["type"], in_tokens, out_tokens, tuple(raw_ids),
                        _texts(item, "input_types", here), _texts(item, "output_types", here),
                        _text(item, "stop", here), _seconds(item, "api_time", here),
                        _seconds(item, "ttft", here), _seconds(item, "think_time", here))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


def _count(item: dict[str, Any], key: str, here: str, minimum: int = 0, default: int | None = None) -> int:
    value = item.get(key, default)
    if value is None and default is not None:
        return default
    if not _whole(value) or value < minimum:
        raise TraceFormatError(f"{here}: {key} must be a whole number >= {minimum}, got "
                               f"{'nothing' if value is None else repr(value)}")
    return value


def _seconds(item: dict[str, Any], key: str, here: str, required: bool = False) -> float | None:
    value = item.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise TraceFormatError(f"{here}: {key} must be a number of seconds >= 0, got "
                               f"{'nothing' if value is None else repr(value)}")
    return float(value)


def _text(item: dict[str, Any], key: str, here: str) -> str:
    value = item.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TraceFormatError(f"{here}: {key} must be a string, got {value!r}")
    return value


def _texts(item: dict[str, Any], key: str, here: str) -> tuple[str, ...]:
    value = item.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TraceFormatError(f"{here}: {key} must be a list of strings")
    return tuple(value)


def _check_across(conversations: list[Conversation]) -> None:
    """What only the whole set can tell: one id per conversation, one agent_id per agent, and
    global hash ids that agree across conversations (one block size, one chain)."""
    seen: dict[str, str] = {}
    for conversation in conversations:
        where = f"{conversation.source}: conversation {conversation.id}"
        if conversation.id in seen:
            raise TraceFormatError(f"{where}: the id is used twice (also in {seen[conversation.id]})")
        seen[conversation.id] = conversation.source
        agents = [sub.agent_id for sub in conversation.subagents]
        twice = next((agent for agent in agents if agents.count(agent) > 1), None)
        if twice is not None:
            raise TraceFormatError(f"{where}: agent_id {twice} is used by two sub-agents")
    global_ones = [c for c in conversations if c.scope == "global"]
    sizes = {c.block_size for c in global_ones}
    if len(sizes) > 1:
        first = global_ones[0]
        other = next(c for c in global_ones if c.block_size != first.block_size)
        raise TraceFormatError(f"{other.source}: conversation {other.id}: global hash ids need one block_size: "
                               f"{other.block_size} here, {first.block_size} in conversation {first.id}")
    _check_chains(conversations, {})


def _check_chains(conversations: Iterable[Conversation], parents: dict[int, int | None]) -> None:
    """Hash ids are chained: an id comes after one and the same id wherever it appears (None at
    the start), within one conversation (`local`) or across all (`global`, one `parents` map)."""
    for conversation in conversations:
        seen = parents if conversation.scope == "global" else {}
        for turn in conversation.turns():
            previous: int | None = None
            for position, hash_id in enumerate(turn.request.hash_ids):
                known = seen.setdefault(hash_id, previous)
                if known != previous:
                    here = "starts the prompt" if previous is None else f"follows {previous}"
                    before = "started it" if known is None else f"followed {known}"
                    raise TraceFormatError(
                        f"{conversation.source}: conversation {conversation.id}: {turn.path}: hash id {hash_id} "
                        f"(block {position}) {here} here but {before} before (ids are chained: one id, one prefix)")
                previous = hash_id


# --- the ideal ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IdealHit:
    turn: Turn
    hit_tokens: int  # block_size x the leading hash ids seen before in the scope

    @property
    def prompt_tokens(self) -> int:
        return self.turn.request.in_tokens


@dataclass(frozen=True, slots=True)
class ConversationIdeal:
    conversation: str
    hits: tuple[IdealHit, ...]  # its turns in start order

    @property
    def hit_tokens(self) -> int:
        return sum(hit.hit_tokens for hit in self.hits)

    @property
    def prompt_tokens(self) -> int:
        return sum(hit.prompt_tokens for hit in self.hits)

    @property
    def ratio(self) -> float:
        return self.hit_tokens / self.prompt_tokens


def ideal_prefix_hits(conversations: Sequence[Conversation]) -> list[ConversationIdeal]:
    """The prefix hit an infinite cache gives each request and each conversation.

    Requests are taken in start order within a conversation (sub-agents' at their spawn plus
    their offsets) and conversations in the order given. A request r hits its longest run of
    leading hash ids already sent in its scope:

        k_r = max { k : hash_ids_r[0..k) all sent before r in the scope },   hit_r = block_size * k_r

    The scope is the conversation with its sub-agents (`local`: ids are its own) or every
    conversation before it too (`global`). Token-weighted, a conversation's ideal is
    sum(hit_r) / sum(in_r) over its requests, sub-agents' included (the same sums give a set's).
    A sub-agent shares its conversation's scope: an id it has in common with its parent is the
    same text, which a server's prefix cache would hit (the format's own note that sub-agents
    start with a fresh context is about their ids, which are mostly new).
    """
    shared: set[int] = set()
    ideals = []
    for conversation in conversations:
        seen = shared if conversation.scope == "global" else set()
        hits = []
        for turn in conversation.turns():
            ids = turn.request.hash_ids
            k = 0
            while k < len(ids) and ids[k] in seen:
                k += 1
            seen.update(ids)
            hits.append(IdealHit(turn, k * conversation.block_size))
        ideals.append(ConversationIdeal(conversation.id, tuple(hits)))
    return ideals


# --- writing (the generator's output) ------------------------------------------------------------


def conversation_json(conversation: Conversation) -> dict[str, Any]:
    """The conversation as the format writes it (keys of optional fields left out when unset)."""
    def request(entry: Entry) -> dict[str, Any]:
        if isinstance(entry, SubAgent):
            return {"t": entry.t, "type": SUBAGENT, "agent_id": entry.agent_id, "subagent_type": entry.subagent_type,
                    "tool_tokens": entry.tool_tokens, "system_tokens": entry.system_tokens,
                    "requests": [request(e) for e in entry.requests]}
        out: dict[str, Any] = {"t": entry.t, "type": entry.type, "in": entry.in_tokens, "out": entry.out_tokens,
                               "hash_ids": list(entry.hash_ids), "input_types": list(entry.input_types),
                               "output_types": list(entry.output_types), "stop": entry.stop}
        for key in ("api_time", "ttft", "think_time"):
            if getattr(entry, key) is not None:
                out[key] = getattr(entry, key)
        return out
    return {"id": conversation.id, "block_size": conversation.block_size, "hash_id_scope": conversation.scope,
            "tool_tokens": conversation.tool_tokens, "system_tokens": conversation.system_tokens,
            "requests": [request(e) for e in conversation.requests]}


def write_jsonl(conversations: Iterable[Conversation], path: str | Path) -> None:
    Path(path).write_bytes(b"".join(orjson.dumps(conversation_json(c)) + b"\n" for c in conversations))


# --- what `python -m loadlib.scenarios.cc_traces` prints -------------------------------------------


def describe(conversations: Sequence[Conversation], source: str) -> str:
    """A trace's shape and ideal prefix hit, a line per conversation."""
    ideals = ideal_prefix_hits(conversations)
    turns = [c.turns() for c in conversations]
    sub_requests = sum(1 for ts in turns for t in ts if t.agent != MAIN_AGENT)
    scopes = " and ".join(sorted({c.scope for c in conversations}))
    sizes = "/".join(str(s) for s in sorted({c.block_size for c in conversations}))
    lines = [f"{source}: {len(conversations)} conversations ({scopes} hash ids, {sizes}-token blocks), "
             f"{sum(map(len, turns))} requests ({sub_requests} by "
             f"{sum(len(c.subagents) for c in conversations)} sub-agents)"]
    width = max([12, *(len(c.id) for c in conversations)])
    lines.append(f"  {'conversation':<{width}}    requests   sub-agents   prompt tokens   largest prompt   span s   "
                 "ideal prefix hit")
    for conversation, ideal, ts in zip(conversations, ideals, turns):
        span = max(t.at_s for t in ts)
        lines.append(f"  {conversation.id:<{width}}  {len(ts):>10}   {len(conversation.subagents):>10}   "
                     f"{ideal.prompt_tokens:>13,}   {max(t.request.in_tokens for t in ts):>14,}   {span:>6.0f}   "
                     f"{ideal.ratio:>15.1%}")
    hit, prompt = sum(i.hit_tokens for i in ideals), sum(i.prompt_tokens for i in ideals)
    lines.append(f"  {'all':<{width}}  {sum(map(len, turns)):>10}   "
                 f"{sum(len(c.subagents) for c in conversations):>10}   {prompt:>13,}   {'':>14}   {'':>6}   "
                 f"{hit / prompt:>15.1%}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m loadlib.scenarios.cc_traces PATH  (a cc-traces file or folder)", file=sys.stderr)
        return 2
    try:
        conversations = read_traces(args[0])
    except TraceFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe(conversations, args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
