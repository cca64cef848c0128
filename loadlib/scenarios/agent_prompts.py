"""Prompts with a cc-trace's cache structure: `in` server tokens, one fixed text per hash id.

A request's prompt is one user message: a fixed lead, then one text per hash id in order, then
an unhashed tail up to `in` tokens; the answer is forced to `out` tokens (`max_tokens` and
`ignore_eos`, as the trace mode forces them). A block shared in the trace is shared on the wire:
the same id gives the same text, and since ids are chained it comes at the same place, so a
server's prefix cache can hit exactly what the trace says it may.

One user message rather than a chat of system, user, assistant and tool turns: a chat template
renders turns differently depending on where they stand (Qwen3's drops an assistant turn's
reasoning once a later user turn follows; templates wrap tool results in their own markup), so
a block inside a resent turn would not always be the same tokens, and each turn would add
framing tokens in the middle of blocks. In one message the template adds a fixed header before
the text and a fixed trailer after it, both measured, and a prefix of the text is a prefix of
the tokens. The trace's `input_types` and `output_types` stay labels.

Text is words: a block is `block_size` words drawn, by a hash of the run's salt, the id's
namespace (the conversation for `local` ids, the whole trace for `global` ones, and the copy
when `bust_cache`) and the id, from `BLOCK_WORDS`, 128 common four-letter English words that
are each one token in the tokenizers the tool meets (GPT-style BPEs, SentencePiece, the
simulator's); the tail draws from `TAIL_WORDS` (32 others), seeded by the request and its
copy, so it never continues a block. The client has no tokenizer, so sizes are measured as the
long-context and trace modes measure them (`Calibration`, from `usage.prompt_tokens`): three
probes give the frame (template, lead) and the words' tokens. Where every word is one token
(`exact`), a prompt is exactly `in` tokens (or the frame alone, for an `in` below it); where
the probes find otherwise, word counts come from the calibration's rate and sizes are close,
not exact.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from loadlib.scenarios.base import Job, Send
from loadlib.scenarios.cc_traces import Conversation, Turn
from loadlib.scenarios.longcontext import Calibration

LEAD = "Context:"  # every prompt's text starts with it, so no template can trim the first word's space
BLOCK_WORDS = tuple("""
time year work back good long hand part case week fact home side head line name book word team area body idea
view form plan list test file code data node page user task step rule unit type tool path port host load call read
edit sort find send keep push move open loop copy hash lock mask mode note pick pool rank ring root seed size span
tail tree wait fast slow safe real true zero half full next last left main free item more when then from with this
that what have were been they some into only over also just like make take come know such each most much many must
need same show than them well even here both does done very used text""".split())
TAIL_WORDS = tuple("""
away down upon once less made seen give goes tell ones hold gets sets adds stop runs sent ends join term wrap able
ever sure kind warn info skip pass fail exit""".split())
WORD_CHARS = 5  # a space and four letters
PROBE_WORDS = {"block": 512, "tail": 128}  # the words each probe sends after the lead
PROBE_ANSWER_TOKENS = 2  # a probe is sent for its usage.prompt_tokens


@dataclass(frozen=True, slots=True)
class AgentPrompt:
    messages: list[dict[str, Any]]
    params: dict[str, Any]  # the request's extra fields: the answer forced to `out` tokens
    expected_tokens: int  # the prompt in server tokens, by the probes (the request's `in` where it can be)


class AgentPrompts:
    """Builds each trace request's prompt; `prepare` (or `learn`) measures the server first.

    `salt` is the run's (the same on every process of a run, new for every run: a server's cache
    outlives a run); `bust_cache` gives every copy of a conversation its own texts, so replaying
    one trace in several lanes does not share their caches; `params` are the scenario's request
    settings (thinking, ...), which the probes use too (they change the template's frame).
    """

    def __init__(self, salt: str, bust_cache: bool = False, params: dict[str, Any] | None = None) -> None:
        self.salt = salt
        self.bust_cache = bust_cache
        self.params = dict(params or {})
        self.calibration = Calibration()
        self.exact = False  # the probes found one server token a word
        self.probe_tokens: list[int | None] = []  # what the probes answered (`learn`)

    @property
    def frame_tokens(self) -> int:
        """The template's framing and the lead, in server tokens (0 until measured)."""
        return self.calibration.frame_tokens or 0

    def probes(self) -> list[Job]:
        """The lead alone, then the lead and `PROBE_WORDS` of each vocabulary."""
        params = {**self.params, "max_tokens": PROBE_ANSWER_TOKENS}
        contents = [LEAD, *(LEAD + _join(words, range(n)) for words, n in
                            ((BLOCK_WORDS, PROBE_WORDS["block"]), (TAIL_WORDS, PROBE_WORDS["tail"])))]
        return [Job("calibrate", [{"role": "user", "content": content}], params) for content in contents]

    def learn(self, prompt_tokens: Sequence[int | None]) -> None:
        """The probes' `usage.prompt_tokens`, in `probes()`'s order (another process's, as
        `probe_tokens` kept them, make this one measure alike)."""
        self.probe_tokens = list(prompt_tokens)
        frame, *words = [*prompt_tokens, None, None, None][:3]
        calibration = self.calibration
        calibration.learn(None, 0, frame)
        for n, tokens in zip(PROBE_WORDS.values(), words):
            calibration.learn(calibration.frame_tokens, n * WORD_CHARS, tokens)
        self.exact = frame is not None and all(
            tokens is not None and tokens - frame == n for n, tokens in zip(PROBE_WORDS.values(), words))

    def prepare(self, send: Send) -> None:
        """Sends the probes (labelled calibration, unmeasured) and learns from their answers."""
        if self.calibration.frame_tokens is None:
            self.learn([record.get("prompt_tokens") for record in send(self.probes(), "calibrate")])

    def prompt(self, conversation: Conversation, turn: Turn, copy: int = 0) -> AgentPrompt:
        """The prompt of one request of `conversation`, in its `copy` (0 for the first replay)."""
        request = turn.request
        total = self._words(request.in_tokens)
        per_block = self._words(self.frame_tokens + conversation.block_size)
        namespace = self.namespace(conversation, copy)
        parts, words = [LEAD], 0
        for hash_id in request.hash_ids:
            if words >= total:
                break
            take = min(per_block, total - words)
            parts.append(_block_text(f"{self.salt}|{namespace}|{hash_id}", per_block)[:take * WORD_CHARS])
            words += take
        if words < total:
            key = f"{self.salt}|copy{copy}|{conversation.id}|{turn.agent}|{turn.index}"
            parts.append(_join(TAIL_WORDS, _draws(key, total - words, len(TAIL_WORDS))))
        expected = self.frame_tokens + total if self.exact else max(request.in_tokens, self.frame_tokens)
        return AgentPrompt([{"role": "user", "content": "".join(parts)}],
                           {**self.params, "max_tokens": max(1, request.out_tokens), "ignore_eos": True}, expected)

    def namespace(self, conversation: Conversation, copy: int = 0) -> str:
        """Where a hash id of `conversation`'s `copy` names one text: its conversation (`local`
        ids) or the whole trace (`global`), and its copy when `bust_cache`."""
        namespace = conversation.id if conversation.scope == "local" else "global"
        return f"{namespace}|copy{copy}" if self.bust_cache else namespace

    def _words(self, tokens: int) -> int:
        """Words after the lead that make a prompt of `tokens` server tokens."""
        if self.exact or self.calibration.frame_tokens is None:
            return max(0, tokens - self.frame_tokens)
        return self.calibration.chars_for(tokens) // WORD_CHARS


def _draws(key: str, n: int, choices: int) -> list[int]:
    """`n` indices below `choices` (a power of two up to 256), fixed by `key`."""
    out: list[int] = []
    chunk = 0
    while len(out) < n:
        digest = hashlib.blake2b(f"{key}|{chunk}".encode(), digest_size=64).digest()
        out.extend(byte % choices for byte in digest)
        chunk += 1
    return out[:n]


def _join(vocabulary: Sequence[str], indices: Sequence[int]) -> str:
    return "".join(" " + vocabulary[i % len(vocabulary)] for i in indices)


@lru_cache(maxsize=1 << 16)
def _block_text(key: str, words: int) -> str:
    """One hash block's text (cached: a conversation resends its blocks every turn)."""
    return _join(BLOCK_WORDS, _draws(key, words, len(BLOCK_WORDS)))
