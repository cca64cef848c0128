"""Prometheus `/metrics` scrapes during a run: fetch every source at once and append one line per
page to `metrics.jsonl` (read back by `loadlib.truth.scrape`). A scrape that fails is a line with
an `error`, never an exception: the run goes on without it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import gevent
import orjson

from loadlib.truth.scrape import METRICS_FILE, parsed
from loadlib.wire.connection import Connection, Endpoint, TransportError


@dataclass(frozen=True, slots=True)
class MetricsSource:
    """One metrics page: the target itself, the router in front of it, or one worker behind it."""

    name: str  # "target", "router", "worker 1", "gpu", ...
    url: str  # the page's full URL, or what names a page made in this process (NVML's)
    # a page the source reads itself, answered as `fetch_metrics` answers: a GPU meter's (NVML's,
    # made here; an exporter's, asked without the target's API key)
    read: Callable[[], dict[str, Any]] | None = None


def metrics_url(base_url: str) -> str:
    """`http://host:port` (or a base URL ending in `/v1`) -> its `/metrics` page; a URL with a
    path of its own is taken as the page itself."""
    endpoint = Endpoint.parse(base_url)
    path = urlsplit(base_url).path.rstrip("/")
    if path and not path.endswith("/v1"):
        return f"{endpoint.scheme}://{endpoint.authority}{path}"
    return f"{endpoint.scheme}://{endpoint.authority}{endpoint.prefix}/metrics"


def fetch_metrics(url: str, headers: dict[str, str], verify_tls: bool = True,
                  timeout_s: float = 5.0) -> dict[str, Any]:
    """One scrape as a journal entry: the page's `text`, or an `error` saying why not."""
    parts = urlsplit(url)
    connection = Connection(Endpoint.parse(f"{parts.scheme}://{parts.netloc}"), timeout=timeout_s,
                            verify_tls=verify_tls, connect_timeout=min(timeout_s, 3.0))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        response = connection.request("GET", path, headers=headers)
    except TransportError as exc:
        return {"error": str(exc)}
    finally:
        connection.close()
    if response.status != 200:
        return {"error": f"HTTP {response.status}"}
    if response.error:
        return {"error": response.error}
    return {"error": None, "text": response.body.decode("utf-8", "replace")}


class Scraper:
    """Scrapes its sources together and appends one line per scrape to `metrics.jsonl`.

    A source whose first scrape fails (or is not Prometheus text) is recorded in `missing` and
    not asked again; a later failure is kept as a line with its error.
    """

    def __init__(self, run_dir: str | os.PathLike[str], sources: list[MetricsSource],
                 headers: dict[str, str] | None = None, verify_tls: bool = True,
                 timeout_s: float = 5.0) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.sources = list(sources)
        self.missing: dict[str, str] = {}  # source name -> why it gave no metrics
        self._headers = headers or {}
        self._verify_tls = verify_tls
        self._timeout_s = timeout_s
        self._asked: set[str] = set()
        self._file = open(self.path, "ab", buffering=0)

    @property
    def active(self) -> list[MetricsSource]:
        return [s for s in self.sources if s.name not in self.missing]

    def scrape(self, phase: str, cell: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Scrapes every active source at once; returns and journals one entry per source."""
        sources = self.active
        asked = time.time()
        jobs = [gevent.spawn(s.read) if s.read else
                gevent.spawn(fetch_metrics, s.url, self._headers, self._verify_tls, self._timeout_s)
                for s in sources]
        gevent.joinall(jobs)
        entries = []
        for source, job in zip(sources, jobs):
            result = job.value if job.successful() else {"error": f"scrape failed: {job.exception!r}"}
            # `t`: when every page had come (or failed), `t_asked`: when they were asked for; the
            # server's values are of a moment in between
            entry = {"t": time.time(), "t_asked": asked, "source": source.name, "url": source.url, "phase": phase,
                     **(cell or {}), **result}
            if source.name not in self._asked:
                self._asked.add(source.name)
                error = entry["error"] or parsed(entry).get("error")  # the first page is checked in full
                if error:
                    self.missing[source.name] = error
            self._file.write(orjson.dumps(entry) + b"\n")
            entries.append(entry)
        return entries

    def close(self) -> None:
        self._file.close()
