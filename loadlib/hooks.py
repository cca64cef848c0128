"""The tool's own events, beside Locust's (`locust.event.Events`), for code that wants every
finished request's record or the cells of a load mode as they start and end.

    from loadlib import events

    @events.record.add_listener
    def on_record(record, **kwargs):
        if record["error"]:
            print("failed:", record["request_id"], record["error"])

Each hook is a Locust `EventHook`: `add_listener` (usable as a decorator), `remove_listener`,
and `fire(**kwargs)`. Listeners should take `**kwargs`, so that arguments added later do not
break them. Importing this module imports Locust.
"""

from __future__ import annotations

from locust.event import EventHook


class LLMEvents:
    record: EventHook
    """Fired once for every request record of the run (measured or not, failed or not), on the
    process that keeps the run's journal: the local runner, or the master when there are workers
    (their records reach it in batches within half a second). The record is on disk when it fires.

    :param record: the record as a dict: `loadlib.records.RequestRecord`'s fields (`ttft_s`,
        `total_s`, `completion_tokens`, `error`, `cell`, `scenario`, ...)
    """

    cell: EventHook
    """Fired on the coordinating process (local runner or master) when a load mode's cell starts
    and when it ends (its last request done).

    :param cell: the `loadlib.scenarios.Cell` (`name`, `case`, `concurrency`, ...)
    :param phase: "start" or "end"
    """

    def __init__(self) -> None:
        for name in self.__annotations__:
            setattr(self, name, EventHook())


events = LLMEvents()
