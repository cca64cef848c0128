"""Prometheus `/metrics` scrapes: what `metrics.jsonl` keeps, read back and parsed.

The server's own figures (accept length, prefix-cache hits, queue) are recomputed after the run
from `metrics.jsonl`, the way the client's figures are recomputed from `records.jsonl`. The
scrapes are fetched during the run by `loadlib.truth.scraper` (gevent), which the post-processor
never imports.

During the run a scrape is kept as the text the server sent: parsing a large /metrics page
takes milliseconds of the event loop that times the streams. It is parsed when read, and only
the lines of the metrics asked for, which makes that cheap too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Collection, Iterator

import orjson
from prometheus_client.parser import text_string_to_metric_families

METRICS_FILE = "metrics.jsonl"


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


def read_scrapes(run_dir: str | os.PathLike[str], names: Collection[str] | None = None,
                 sources: Collection[str] | None = None) -> Iterator[dict[str, Any]]:
    """The journal's entries in order, parsed (only the samples of `names`, if given; only the
    entries of `sources`, if given, the others not parsed at all); none when the run has no
    `metrics.jsonl`. A torn last line (the process was killed mid-write) is skipped.
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
            if sources is None or entry.get("source") in sources:
                yield parsed(entry, names)
