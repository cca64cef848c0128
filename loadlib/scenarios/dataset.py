"""`dataset`: the user's own prompts from a file, in the formats people already have.

The format is read from the content, entry by entry:

- an object with `messages` is an OpenAI chat request: sent as it is, its other body keys
  (`max_tokens` or `max_completion_tokens`, `tools`, `temperature`, ...) passed through, except
  `model`, `stream` and `stream_options`, which are the run's;
- an object with `conversations` is a ShareGPT conversation: played turn by turn from its first
  human turn, the history (with the recorded replies) resent each turn, as `multi-turn` does;
- anything else is plain text, one prompt per line.

Objects come one per line (JSONL) or in one JSON array (a file starting `[{`). Bad data stops the
run before it starts with a `DatasetError` naming the line (or the array item).

A ShareGPT reply's length can become the turn's output length (`max_tokens` plus `ignore_eos`).
The client has no tokenizer, so a reply of N characters is taken as N / (characters per server
token) tokens, that rate learnt from `usage.prompt_tokens` of the first prompts as long-context
learns its filler's (`Calibration`): an estimate that assumes replies tokenize like prompts.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import orjson
from pydantic import PrivateAttr, ValidationInfo, field_validator, model_validator

from loadlib.scenarios.base import ANY, Job, Scenario, Send
from loadlib.scenarios.corpus import Conversation
from loadlib.scenarios.longcontext import PROBE_TOKENS, Calibration
from loadlib.scenarios.multiturn import MultiTurn
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec, beside_the_profile

log = logging.getLogger(__name__)

ORDERS = ("file", "shuffle", "sample")
RUN_KEYS = ("model", "stream", "stream_options")  # the run decides these, not the dataset
SPEAKERS = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
            "bard": "assistant", "bing": "assistant", "system": "system"}
LEARN_PROMPTS = 64  # the first prompts that teach the characters-per-token rate
T = TypeVar("T")


class DatasetError(ValueError):
    """A dataset that cannot be used; str is one line naming the file and the line."""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One OpenAI chat request of a dataset: its messages and the other body keys."""

    messages: list[dict[str, Any]]
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Dataset:
    path: Path
    format: str  # "openai", "sharegpt" or "text"
    entries: tuple[ChatRequest, ...] | tuple[Conversation, ...]

    @property
    def has_replies(self) -> bool:
        return any(reply for entry in self.entries if isinstance(entry, Conversation) for _user, reply in entry.turns)


def load_dataset(path: Path) -> Dataset:
    """Reads and checks a dataset file; raises `DatasetError` (one line) when it cannot be used."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    head = text.lstrip()
    if re.match(r"\[\s*[{\]]", head):
        try:
            items = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(f"{path} line {exc.lineno}: not JSON ({exc.msg})") from None
        located = ((f"item {n}", item) for n, item in enumerate(items, 1))
    elif head.startswith("{"):
        located = ((f"line {n}", _json_line(path, n, line)) for n, line in enumerate(text.splitlines(), 1)
                   if line.strip())
    else:
        lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        return _checked(path, "text", [Conversation(f"line {n}", None, ((line, ""),)) for n, line in lines])
    entries, skipped = [], 0
    for where, item in located:
        entry = _entry(path, where, item)
        if entry is None:
            skipped += 1
        elif entries and type(entry) is not type(entries[0]):
            raise DatasetError(f"{path} {where}: OpenAI requests and ShareGPT conversations mixed in one file")
        else:
            entries.append(entry)
    if skipped:
        log.warning("%s: skipped %d conversations without a human turn", path, skipped)
    return _checked(path, "openai" if entries and isinstance(entries[0], ChatRequest) else "sharegpt", entries)


def _checked(path: Path, format: str, entries: list[Any]) -> Dataset:
    if not entries:
        raise DatasetError(f"{path}: no prompts in it")
    return Dataset(path, format, tuple(entries))


def _json_line(path: Path, number: int, line: str) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise DatasetError(f"{path} line {number}: not JSON ({exc.msg})") from None


def _entry(path: Path, where: str, item: Any) -> ChatRequest | Conversation | None:
    if isinstance(item, dict) and "messages" in item:
        return _chat_request(path, where, item)
    if isinstance(item, dict) and "conversations" in item:
        return _conversation(path, where, item["conversations"])
    raise DatasetError(f"{path} {where}: expected an object with `messages` (OpenAI) or `conversations` (ShareGPT)")


def _chat_request(path: Path, where: str, item: dict[str, Any]) -> ChatRequest:
    messages = item["messages"]
    if not (isinstance(messages, list) and messages
            and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)):
        raise DatasetError(f"{path} {where}: `messages` must be a non-empty list of objects with a role")
    params = {key: value for key, value in item.items() if key not in ("messages", *RUN_KEYS)}
    limit = params.pop("max_completion_tokens", None)  # the run always sends max_tokens: one key, not two
    params.setdefault("max_tokens", limit)
    if params["max_tokens"] is None:
        del params["max_tokens"]
    elif type(params["max_tokens"]) is not int or params["max_tokens"] < 1:
        raise DatasetError(f"{path} {where}: max_tokens must be a positive integer, got {params['max_tokens']!r}")
    return ChatRequest(messages, params)


def _conversation(path: Path, where: str, turns: Any) -> Conversation | None:
    """A ShareGPT conversation as (user, reply) pairs from its first human turn; consecutive
    turns of one speaker are joined. None when it has no human turn."""
    if not isinstance(turns, list):
        raise DatasetError(f"{path} {where}: `conversations` must be a list")
    system, pairs = None, []
    for number, turn in enumerate(turns, 1):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise DatasetError(f"{path} {where}: turn {number} needs `from` and a `value` string")
        role = SPEAKERS.get(turn.get("from"))
        if role is None:
            raise DatasetError(f"{path} {where}: turn {number}: unknown speaker {turn.get('from')!r} "
                               f"(known: {', '.join(SPEAKERS)})")
        value = turn["value"]
        if role == "system" and not pairs:
            system = value
        elif role == "user" and (not pairs or pairs[-1][1]):
            pairs.append([value, ""])
        elif pairs:  # a reply, or a second user or system message before the reply: joined
            index = 1 if role == "assistant" else 0
            pairs[-1][index] = f"{pairs[-1][index]}\n\n{value}" if pairs[-1][index] else value
    return Conversation(where, system, tuple((user, reply) for user, reply in pairs)) if pairs else None


def ordered(entries: Sequence[T], order: str, seed: int) -> Iterator[T]:
    """The entries forever: as in the file, shuffled once with `seed` (then repeated), or drawn
    with replacement."""
    rng = random.Random(seed)
    if order == "sample":
        return (rng.choice(entries) for _ in itertools.count())
    return itertools.cycle(rng.sample(entries, len(entries)) if order == "shuffle" else entries)


class DatasetRequests(Scenario):
    """OpenAI chat requests, one request each."""

    kind = "dataset"

    def __init__(self, dataset: Dataset, order: str = "file", seed: int = 0, params: dict[str, Any] | None = None,
                 name: str | None = None) -> None:
        super().__init__(params, name)
        self._requests = ordered(dataset.entries, order, seed)

    def next(self, stream: int) -> Job:
        request = next(self._requests)
        return Job(self.name, request.messages, {**request.params, **self.params}, ANY, kind=self.kind)


class DatasetConversations(MultiTurn):
    """ShareGPT conversations (every turn, history resent) or plain-text prompts (one turn each);
    with `reply_length`, a recorded reply's length in server tokens is its turn's output length."""

    kind = "dataset"

    def __init__(self, dataset: Dataset, order: str = "file", seed: int = 0, reply_length: bool = False,
                 params: dict[str, Any] | None = None, name: str | None = None) -> None:
        super().__init__(None, params, name, ordered(dataset.entries, order, seed))
        self.calibration = Calibration() if reply_length else None
        self._learnt = 0

    def turn_params(self, conversation: Conversation, turn: int) -> dict[str, Any]:
        reply = conversation.turns[turn][1]
        if self.calibration is None or not reply:
            return {}
        return {"max_tokens": max(1, self.calibration.tokens_for(len(reply))), "ignore_eos": True}

    def prepare(self, send: Send) -> None:
        """Every cell starts new conversations; the first also measures the chat template's
        framing (an empty prompt) for the reply lengths."""
        super().prepare(send)
        calibration = self.calibration
        if calibration is not None and calibration.frame_tokens is None:
            probe = Job("calibrate", [{"role": "user", "content": ""}], {**self.params, "max_tokens": PROBE_TOKENS},
                        kind=self.kind)
            calibration.learn(None, 0, send([probe], "calibrate")[0].get("prompt_tokens"))

    def observe(self, job: Job, record: dict[str, Any]) -> None:
        """The first single-message prompts teach the characters-per-token rate."""
        calibration = self.calibration
        if (calibration is None or job.scenario != self.name or self._learnt >= LEARN_PROMPTS
                or len(job.messages) != 1 or not record.get("prompt_tokens")):
            return
        calibration.learn(calibration.frame_tokens, len(job.messages[0]["content"]), record["prompt_tokens"])
        self._learnt += 1


def dataset_scenario(dataset: Dataset, order: str = "file", seed: int = 0, reply_length: bool = False,
                     params: dict[str, Any] | None = None, name: str | None = None) -> Scenario:
    """The scenario that plays `dataset`: requests as they are, or conversations turn by turn."""
    if dataset.format == "openai":
        return DatasetRequests(dataset, order, seed, params, name)
    return DatasetConversations(dataset, order, seed, reply_length, params, name)


class DatasetSpec(ScenarioSpec):
    """The user's prompts from a file; `path` is relative to the profile file. The file is read
    and checked when the profile is, so bad data stops the run before it starts."""

    kind: Literal["dataset"]
    path: str
    order: Literal["file", "shuffle", "sample"] = "file"  # shuffle: with the profile's seed; sample: with replacement
    reply_length: bool = False  # ShareGPT: a recorded reply's length (in server tokens) is the output length
    _dataset: Dataset = PrivateAttr()

    @field_validator("path")
    @classmethod
    def _beside_the_profile(cls, path: str, info: ValidationInfo) -> str:
        return beside_the_profile(path, info)

    @model_validator(mode="after")
    def _load(self) -> "DatasetSpec":
        self._dataset = load_dataset(Path(self.path))
        if self.reply_length and not self._dataset.has_replies:
            raise ValueError(f"reply_length: {self.path} has no recorded replies ({self._dataset.format})")
        return self

    @property
    def dataset(self) -> Dataset:
        return self._dataset


DATASET = ScenarioKind(DatasetSpec, lambda spec, name, seed, params: [
    (dataset_scenario(spec.dataset, spec.order, seed, spec.reply_length, params, name), spec.weight)])
