"""The `--trace FILE` journal: one JSON line per finished request, written when it ends.

`received_at` is the kernel's receive time of the request's first byte (see
`httpio.RequestReader`); the others are `time.time()` right after the socket write returned. So
a client can compare its own TTFT and decode figures with what the server actually received and
sent, without the simulator's own parsing delays in between.
"""

from __future__ import annotations

import os

import orjson


class TraceWriter:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file = open(path, "ab", buffering=0)

    def write(self, record: dict) -> None:
        self._file.write(orjson.dumps(record) + b"\n")

    def close(self) -> None:
        self._file.close()
