"""`multi-turn`: conversations that grow turn by turn, each turn resending the whole history.

Later turns find the history in the prefix cache, so their TTFT should stay flat while the
prompt grows; records carry `turn` for per-turn figures. The assistant turns in the history are
the script's, not the server's own replies (so that every run sends the same prompts), so a later turn
hits the cache up to the end of the previous prompt, as with a server whose reply differs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import PositiveInt

from loadlib.scenarios.base import ANY, WARM, Job, Scenario, Send
from loadlib.scenarios.corpus import Conversation, conversations
from loadlib.scenarios.spec import ScenarioKind, ScenarioSpec


@dataclass
class _Progress:
    conversation: Conversation
    turn: int = 0


class MultiTurn(Scenario):
    """Plays conversations from `scripts` (the shipped ones, in turn, by default), at most
    `turns` turns of each (None: all of them)."""

    kind = "multi-turn"

    def __init__(self, turns: int | None = 4, params: dict[str, Any] | None = None, name: str | None = None,
                 scripts: Iterator[Conversation] | None = None) -> None:
        super().__init__(params, name)
        self.turns = turns
        self._scripts = scripts if scripts is not None else itertools.cycle(conversations())
        self._streams: dict[int, _Progress] = {}

    def next(self, stream: int) -> Job:
        progress = self._streams.get(stream)
        if progress is None or progress.turn >= len(progress.conversation.turns[:self.turns]):
            progress = self._streams[stream] = _Progress(next(self._scripts))
        conversation, turn = progress.conversation, progress.turn
        progress.turn += 1
        messages = [{"role": "system", "content": conversation.system}] if conversation.system else []
        for user, assistant in conversation.turns[:turn]:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        messages.append({"role": "user", "content": conversation.turns[turn][0]})
        return self._job(self.name, messages, cache=WARM if turn else ANY, turn=turn,
                         **self.turn_params(conversation, turn))

    def turn_params(self, conversation: Conversation, turn: int) -> dict[str, Any]:
        """Body fields of one turn (a dataset's recorded reply length); none by default."""
        return {}

    def prepare(self, send: Send) -> None:
        """Every cell starts new conversations on its streams."""
        self._streams.clear()


class MultiTurnSpec(ScenarioSpec):
    kind: Literal["multi-turn"]
    turns: PositiveInt = 4


MULTI_TURN = ScenarioKind(MultiTurnSpec, lambda spec, name, seed, params: [
    (MultiTurn(spec.turns, params, name), spec.weight)])
