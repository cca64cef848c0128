"""Prefix-cache control: empty the server's radix cache before cold cells (the state each
request met is its record's `cache_observed`, `loadlib.records.observed_state`).

SGLang offers `POST /flush_cache` (refused with 400 while requests are running, so it is
retried briefly); vLLM and llama.cpp answer 404, and then cold cells rely on unique prompts
alone. Whatever happens, the records' `cached_tokens` show the cache state actually met.
"""

from __future__ import annotations

import gevent

from loadlib.wire.connection import Connection, Endpoint, TransportError

FLUSHED, NOT_OFFERED, REFUSED = "flushed", "not offered", "refused"


def flush_prefix_cache(base_url: str, api_key: str | None = None, verify_tls: bool = True,
                       attempts: int = 5, retry_after_s: float = 0.2) -> str:
    """`flushed`, `not offered` (no such endpoint), `refused` (busy every time) or a transport
    failure reason."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    connection = Connection(Endpoint.parse(base_url), timeout=30.0, verify_tls=verify_tls)
    try:
        for attempt in range(attempts):
            response = connection.request("POST", "/flush_cache", b"", headers)
            if response.status == 200:
                return FLUSHED
            if response.status in (404, 405):
                return NOT_OFFERED
            if attempt + 1 < attempts:
                gevent.sleep(retry_after_s)
        return REFUSED
    except TransportError as exc:
        return str(exc)
    finally:
        connection.close()
