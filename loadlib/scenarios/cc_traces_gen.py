"""Coding-agent sessions in the cc-traces format, made up by a seeded generator (no recorded data).

A conversation is an agent working on one task: a prompt behind a fixed prefix (tool
definitions and a system prompt), then turns that each resend the whole context so far, grown by
the last answer and what came back (a tool's result, or the user's next message). The shape
(`SessionShape`) draws, per conversation:

- the prefix (`tool_tokens` + `system_tokens`): with `global` hash ids one prefix for every
  conversation (the same tools and system prompt, so the same leading blocks); with `local` ids
  each conversation its own;
- turns: most end in a tool call (`stop` "tool_use", a short answer, the tool's result of 100 to
  3,000 tokens next, `think_time` the tool's run of 0.3 to 6 s); some answer the user ("end_turn",
  a longer answer, the user's message next after 8 to 60 s); the last always does;
- sub-agents: a tool call may spawn 1 to 3 siblings at once, each with a fresh context (the
  sub-agents' own prefix, shared by all of them, and its task), a few turns of its own, its last
  answer returned to the parent as the tool's result; the parent's next turn comes after the
  last of them ended;
- compaction: a context past `compact_at_tokens` is cut back to the prefix and a summary, as
  coding agents do, so its later turns share only the prefix with the earlier ones.

Hash ids are minted as the format's builder numbers them: sequential from 1, per conversation
(`local`) or across all (`global`); a turn keeps every full block of the context it extends and
mints new ids from the first block it changes. Recorded times follow a crude server of its own
(`ttft` 0.25 s + 25 us a prompt token, 60 tokens/s after it), only so that `t`, `api_time` and
`think_time` agree; a replay sends by `think_time`, not by these.

    python -m loadlib.scenarios.cc_traces_gen --out my-sessions.jsonl --conversations 8 --seed 3
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass, field
from typing import Sequence

from loadlib.scenarios.cc_traces import AgentRequest, Conversation, Entry, SubAgent, describe, write_jsonl

Range = tuple[float, float]


@dataclass(frozen=True)
class SessionShape:
    """What the generator draws from: (low, high) ranges, drawn uniformly (`*_tokens` and the gaps
    log-uniformly: many small, a few large), and shares between 0 and 1."""

    turns: Range = (6, 16)  # requests of the main agent
    tool_tokens: Range = (3000, 6000)
    system_tokens: Range = (1000, 2500)
    first_prompt_tokens: Range = (150, 1200)
    tool_result_tokens: Range = (100, 3000)
    user_message_tokens: Range = (30, 400)
    tool_call_out: Range = (40, 400)
    answer_out: Range = (200, 1200)
    end_turn_share: float = 0.15  # of the main agent's turns before its last, those that answer the user
    tool_gap_s: Range = (0.3, 6.0)
    user_gap_s: Range = (8.0, 60.0)
    subagent_share: float = 0.1  # of the tool calls, those that spawn sub-agents
    siblings: Range = (1, 3)
    sub_turns: Range = (2, 6)
    sub_tool_tokens: Range = (1500, 3000)
    sub_system_tokens: Range = (400, 800)
    task_tokens: Range = (100, 800)
    spawn_spread_s: float = 0.5  # siblings start within this much of each other
    compact_at_tokens: int = 40_000
    summary_tokens: Range = (1500, 3000)
    block_size: int = 64


@dataclass
class _Ids:
    """Sequential hash ids from 1, in one namespace."""

    last: int = 0

    def mint(self) -> int:
        self.last += 1
        return self.last


@dataclass
class _Prefix:
    tool_tokens: int
    system_tokens: int
    blocks: list[int]  # ids of its full blocks

    @property
    def tokens(self) -> int:
        return self.tool_tokens + self.system_tokens


@dataclass
class _Context:
    """An agent's context: its tokens and the ids of its full blocks."""

    prefix: _Prefix
    ids: _Ids
    block_size: int
    tokens: int = 0
    blocks: list[int] = field(default_factory=list)

    def restart(self, tokens_after_prefix: int) -> None:
        """The prefix, then new text: the prefix's blocks kept, the rest new."""
        self.tokens, self.blocks = self.prefix.tokens, list(self.prefix.blocks)
        self.grow(tokens_after_prefix)

    def grow(self, tokens: int) -> None:
        """Text appended: the full blocks stay, new ids from the first block it changes."""
        self.tokens += tokens
        while len(self.blocks) < self.tokens // self.block_size:
            self.blocks.append(self.ids.mint())


def generate(conversations: int, seed: int = 0, scope: str = "global",
             shape: SessionShape = SessionShape()) -> list[Conversation]:
    """`conversations` seeded conversations (each from its own draws, so a longer set begins
    with the same ones)."""
    shared = random.Random(f"{seed}:shared")
    ids = _Ids()
    main_prefix = _prefix(shared, shape.tool_tokens, shape.system_tokens, shape.block_size, ids)
    sub_prefix = _prefix(shared, shape.sub_tool_tokens, shape.sub_system_tokens, shape.block_size, ids)
    made = []
    for index in range(conversations):
        rng = random.Random(f"{seed}:{index}")
        if scope == "local":  # its own namespace and its own prefixes
            ids = _Ids()
            main_prefix = _prefix(rng, shape.tool_tokens, shape.system_tokens, shape.block_size, ids)
            sub_prefix = _prefix(rng, shape.sub_tool_tokens, shape.sub_system_tokens, shape.block_size, ids)
        made.append(_conversation(f"gen{seed}-{index:03d}", scope, rng, shape, ids, main_prefix, sub_prefix))
    return made


def _draw(rng: random.Random, bounds: Range, log: bool = False) -> float:
    low, high = bounds
    if low == high:
        return low
    return math.exp(rng.uniform(math.log(low), math.log(high))) if log else rng.uniform(low, high)


def _tokens(rng: random.Random, bounds: Range) -> int:
    return round(_draw(rng, bounds, log=True))


def _prefix(rng: random.Random, tool: Range, system: Range, block_size: int, ids: _Ids) -> _Prefix:
    tool_tokens, system_tokens = _tokens(rng, tool), _tokens(rng, system)
    return _Prefix(tool_tokens, system_tokens,
                   [ids.mint() for _ in range((tool_tokens + system_tokens) // block_size)])


def _timing(in_tokens: int, out_tokens: int) -> tuple[float, float]:
    """The crude server the recorded times follow: (ttft, api_time) in seconds."""
    ttft = 0.25 + in_tokens * 25e-6
    return round(ttft, 3), round(ttft + out_tokens / 60.0, 3)


def _conversation(name: str, scope: str, rng: random.Random, shape: SessionShape, ids: _Ids,
                  main_prefix: _Prefix, sub_prefix: _Prefix) -> Conversation:
    context = _Context(main_prefix, ids, shape.block_size)
    context.restart(_tokens(rng, shape.first_prompt_tokens))
    turns = round(_draw(rng, shape.turns))
    entries: list[Entry] = []
    t, think, added_types = 0.0, None, ("text",)
    for k in range(turns):
        last = k == turns - 1
        answers = last or rng.random() < shape.end_turn_share
        out = _tokens(rng, shape.answer_out if answers else shape.tool_call_out)
        ttft, api_time = _timing(context.tokens, out)
        entries.append(AgentRequest(round(t, 3), "s", context.tokens, out, tuple(context.blocks), added_types,
                                    ("text",) if answers else ("text", "tool_use"),
                                    "end_turn" if answers else "tool_use", api_time, ttft, think))
        end = t + api_time
        if last:
            break
        if not answers and rng.random() < shape.subagent_share:
            siblings = [_subagent(rng, shape, ids, sub_prefix, end + rng.uniform(0, shape.spawn_spread_s))
                        for _ in range(round(_draw(rng, shape.siblings)))]
            siblings.sort(key=lambda made: made[0].t)
            entries.extend(sub for sub, _ended, _result in siblings)
            returned = sum(result for _sub, _ended, result in siblings)
            start = max(ended for _sub, ended, _result in siblings) + _draw(rng, shape.tool_gap_s, log=True) / 4
            added_types = ("tool_result",)
        elif answers:
            returned = _tokens(rng, shape.user_message_tokens)
            start = end + _draw(rng, shape.user_gap_s, log=True)
            added_types = ("text",)
        else:
            returned = _tokens(rng, shape.tool_result_tokens)
            start = end + _draw(rng, shape.tool_gap_s, log=True)
            added_types = ("tool_result",)
        context.grow(out + returned)
        if context.tokens > shape.compact_at_tokens:
            context.restart(_tokens(rng, shape.summary_tokens) + returned)
            added_types = ("text", "tool_result") if added_types == ("tool_result",) else ("text",)
        think, t = round(start - end, 3), start
    return Conversation(name, shape.block_size, scope, tuple(entries), main_prefix.tool_tokens,
                        main_prefix.system_tokens)


def _subagent(rng: random.Random, shape: SessionShape, ids: _Ids, prefix: _Prefix,
              spawn: float) -> tuple[SubAgent, float, int]:
    """A sub-agent spawned at `spawn`, when it ends (from the parent's start) and the tokens of
    its last answer (what the parent gets back)."""
    context = _Context(prefix, ids, shape.block_size)
    context.restart(_tokens(rng, shape.task_tokens))
    turns = round(_draw(rng, shape.sub_turns))
    requests: list[Entry] = []
    t, think, added_types, out = 0.0, None, ("text",), 0
    for k in range(turns):
        last = k == turns - 1
        out = _tokens(rng, shape.answer_out if last else shape.tool_call_out)
        ttft, api_time = _timing(context.tokens, out)
        requests.append(AgentRequest(round(t, 3), "s", context.tokens, out, tuple(context.blocks), added_types,
                                     ("text",) if last else ("text", "tool_use"), "end_turn" if last else "tool_use",
                                     api_time, ttft, think))
        if last:
            sub = SubAgent(round(spawn, 3), f"{rng.getrandbits(32):08x}", tuple(requests), "Explore",
                           prefix.tool_tokens, prefix.system_tokens)
            return sub, spawn + t + api_time, out
        think = round(_draw(rng, shape.tool_gap_s, log=True), 3)
        context.grow(out + _tokens(rng, shape.tool_result_tokens))
        t, added_types = t + api_time + think, ("tool_result",)
    raise ValueError("a sub-agent needs at least one turn")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadlib.scenarios.cc_traces_gen",
                                     description="Write seeded coding-agent sessions in the cc-traces format (JSONL).")
    parser.add_argument("--out", required=True, help="the JSONL file to write")
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scope", choices=("global", "local"), default="global",
                        help="global: one prefix and one namespace of hash ids for all conversations")
    args = parser.parse_args(argv)
    if args.conversations < 1:
        parser.error("--conversations must be at least 1")
    conversations = generate(args.conversations, args.seed, args.scope)
    write_jsonl(conversations, args.out)
    print(describe(conversations, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
