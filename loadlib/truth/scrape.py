"""Prometheus `/metrics` scrapes: fetch, keep every sample in the run directory, parse.

The server's own figures (accept length, prefix-cache hits, queue) are recomputed after the run
from `metrics.jsonl`, the way the client's figures are recomputed from `records.jsonl`. A scrape
that fails is a line with an `error`, never an exception: the run goes on without it.

During the run a scrape is kept as the text the server sent: parsing a large /metrics page
takes milliseconds of the event loop that times the streams. It is parsed when read, and only
the lines of the metrics asked for, which makes that cheap too.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Iterator
from urllib.parse import urlsplit

import gevent
import orjson
from prometheus_client.parser import text_string_to_metric_families

from loadlib.wire.connection import Connection, Endpoint, TransportError

METRICS_FILE = "metrics.jsonl"


@dataclass(frozen=True, slots=True)
class MetricsSource:
    """One metrics page: the target itself, the router in front of it, or one worker behind it."""

    name: str  # "target", "router", "worker 1", ...
    url: str  # the page's full URL


def metrics_url(base_url: str) -> str:
    """`http://host:port` (or a base URL ending in `/v1`) -> its `/metrics` page; a URL with a
    path of its own is taken as the page itself."""
    endpoint = Endpoint.parse(base_url)
    path = urlsplit(base_url).path.rstrip("/")
    if path and not path.endswith("/v1"):
        return f"{endpoint.scheme}://{endpoint.authority}{path}"
    return f"{endpoint.scheme}://{endpoint.authority}{endpoint.prefix}/metrics"


def parse_metrics(text: str, names: Collection[str] | None = None) -> tuple[dict[str, str], list[list[Any]]]:
    """Prometheus text -> (family name -> type, [[sample name, labels, value], ...]).

    With `names`, only samples of those names are parsed (every family's type still is).
    Families are kept even without samples: a labelled counter that has not counted yet is
    declared but empty, which means zero, not "this server has no such metric".
    Raises ValueError for text that is not Prometheus exposition format.
    """
    if names is not None:
        text = _only(text, frozenset(names))
    families: dict[str, str] = {}
    samples: list[list[Any]] = []
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        samples += [[s.name, s.labels, s.value] for s in family.samples]
    return families, samples


def _only(text: str, names: frozenset[str]) -> str:
    """The TYPE lines and the sample lines of `names`; one cheap pass over the text."""
    kept = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            kept.append(line)
        elif line and not line.startswith("#"):
            end = line.find("{")
            if line[:end if end >= 0 else line.find(" ")] in names:
                kept.append(line)
    return "\n".join(kept) + "\n"


def parsed(entry: dict[str, Any], names: Collection[str] | None = None) -> dict[str, Any]:
    """A journal entry with its text parsed into `families` and `samples` (none after an error,
    or when the text does not parse: then `error` says so)."""
    out = {k: v for k, v in entry.items() if k != "text"}
    if entry.get("error") or "text" not in entry:
        return out
    try:
        out["families"], out["samples"] = parse_metrics(entry["text"], names)
    except ValueError as exc:
        out["error"] = f"not Prometheus text: {exc}"
    return out


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
        jobs = [gevent.spawn(fetch_metrics, s.url, self._headers, self._verify_tls, self._timeout_s)
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


def read_scrapes(run_dir: str | os.PathLike[str], names: Collection[str] | None = None) -> Iterator[dict[str, Any]]:
    """The journal's entries in order, parsed (only the samples of `names`, if given); none when
    the run has no `metrics.jsonl`. A torn last line (the process was killed mid-write) is skipped.
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return
    with open(path, "rb") as fh:
        for line in fh:
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            yield parsed(entry, names)
