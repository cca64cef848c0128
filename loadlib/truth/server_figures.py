"""The server's own figures per cell, from the scrapes in `metrics.jsonl`, and how they compare
with the client's.

Each server names its metrics differently (its flavour's `MetricNames`, in
`loadlib/wire/flavours.py`), and offers some figures only as gauges. A counter gives an exact figure for a cell: its change from the cell's start scrape to
its end scrape. A gauge gives the server's own recent average at the moment of a scrape: the
cell's figure is the mean of the scrapes taken during the cell, and is labelled "gauge".

A prefix hit rate is hit tokens over queried tokens, from counters (llama.cpp counts the hit and
the computed prompt tokens apart: queried is their sum) or the server's gauge.

The server's accept length is tokens per target forward pass (the thread's "tokens accepted per
forward"): from counters, generated / (generated - accepted draft tokens), since every token is
either accepted from a draft or sampled by one forward of the target (vLLM, llama.cpp); from
SGLang's gauge, its own tokens per forward over its last logging interval. A server's own
per-drafting-step figure, 1 + accepted / drafts, counts only the steps that had a draft (an n-gram
drafter drafts on few of them), and is kept beside it as `accept_per_draft`, named as such.

A gauge holds its value until the server sets it again: SGLang sets its running, queued and
accept-length gauges at batch logs (`MetricNames.held_refresh`), so a scrape may read a value of
some time before. `refresh_s` says how long, from the client's records of the cell: the server's
decode steps are about as far apart as a stream's chunks.

The server's accept length and the client's tok/chunk (stream-chunk basis) are different
figures: they are put side by side, never merged. A tok/chunk above the accept length by more
than the server's figure can tell from noise (`accept_tolerance`: 10 % for a counter, 50 % for a
gauge sampled over a few intervals) means chunks are merged on the way (SGLang's
`--stream-interval` above 1, or a proxy that re-chunks the stream); one well below it means the
server streams fewer tokens per chunk than it accepts per forward (llama.cpp sends one token a
chunk), so that tok/chunk cannot estimate the accept length (`divergence_cause`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, TypeVar

import numpy as np
import pandas as pd

from loadlib.figures import formulas
from loadlib.scenarios.base import SINGLE
from loadlib.wire.flavours import FLAVOURS, Flavour, MetricNames

DIVERGENCE_LIMIT = 0.10  # what an exact (counter) accept length is held to
# A gauge is a sample: each value is the mean of one logging interval (SGLang: 40 decode batches)
# that a scrape happened to catch; 40 verify steps of prose spread about 10 % around the cell's
# mean, and the few intervals a cell's scrapes see are not independent (answers at temperature 0
# repeat round after round, scrapes are periodic). So a gauge is held to GAUGE_LIMIT: merging whole
# steps at least doubles tok/chunk (stream interval 2: about +100 %), so a real merge is flagged.
GAUGE_LIMIT = 0.5
COUNTER, GAUGE = "counter", "gauge"
# The one span of a run whose cells no scrape framed (a locustfile's own users, whose stats names
# run side by side): its first and last scrapes, and every request sent between them
WHOLE_RUN = "whole run"
DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default: decode batches between its gauge updates
# Why the client's tok/chunk differs from the server's accept length (`divergence_cause`)
MERGED = ("chunks are merged on the way (SGLang's --stream-interval above 1, or a proxy that re-chunks "
          "the stream)")
SPLIT = ("the server streams fewer tokens per chunk than it accepts per forward (llama.cpp sends one "
         "token a chunk), so tok/chunk cannot estimate its accept length: not a fault")


TARGET_SOURCE = "target"  # the scrapes' source of the host the run sent to (`loadlib.truth.watch.metrics_sources`)


# Requests a router sent to each worker (label `worker`), under each flavour's router's names.
ROUTER_SPLIT = tuple(name for f in FLAVOURS.values() for name in f.metrics.router_requests)


def _names_read() -> frozenset[str]:
    names = set(ROUTER_SPLIT)
    for m in (f.metrics for f in FLAVOURS.values()):
        names.update(n for n in (m.accept_gauge, m.cache_gauge, m.running, m.queued, m.requests, m.generated) if n)
        names.update(m.accept_counters or ())
        names.update(n for pair in m.cache_counters for n in pair)
        names.update(m.cache_parts or ())
        names.update(n for n in (m.verify_steps, m.accepted_per_position) if n)
        if m.ttft:
            names.update((f"{m.ttft}_sum", f"{m.ttft}_count"))
    return frozenset(names)


NAMES_READ = _names_read()  # the only samples the figures need: parse just these


@dataclass(frozen=True)
class CellSpan:
    """One cell as one source's scrapes frame it: the driver's order, name and case, and the
    wall clock of its start and end scrapes (the cell's requests were sent between them): when
    each page had come, and when it was asked for (None in runs from before that was kept)."""

    index: int
    cell: str
    case: str | None
    started_at: float
    ended_at: float
    start_asked_at: float | None = None
    end_asked_at: float | None = None


@dataclass(frozen=True)
class ServerCell:
    """One source's figures over one cell; None where the server does not offer the figure."""

    source: str
    server: str  # the flavour's title
    flavour: str  # its name (`FLAVOURS`)
    span: CellSpan
    accept_length: float | None  # tokens per target forward pass
    accept_basis: str | None  # COUNTER or GAUGE
    accept_tolerance: float  # how far the client's tok/chunk may be from it (`accept_tolerance`)
    accept_per_draft: float | None  # the server's own 1 + accepted / drafts: per step that had a draft
    prefix_hit_rate: float | None  # hit tokens / queried tokens
    prefix_basis: str | None
    running_mean: float | None  # requests, from the scrapes taken during the cell
    running_max: float | None
    queued_mean: float | None
    queued_max: float | None
    ttft_mean_s: float | None
    requests: float | None
    generated_tokens: float | None
    samples: int  # scrapes taken during the cell (between its start and end scrapes)
    # (asked at, came at, running + queued requests) of each of those scrapes: what the server's
    # gauges said then (of a moment before, for a server that sets them at batch logs)
    held: tuple[tuple[float, float, float], ...] = ()
    ttft_count: float | None = None  # first tokens the TTFT histogram counted over the cell


@dataclass(frozen=True)
class RouterSplit:
    """Requests a router sent to each of its workers during one cell."""

    source: str
    span: CellSpan
    requests: dict[str, float]  # worker URL -> requests


def server_cells(entries: Iterable[dict[str, Any]], records: pd.DataFrame | None = None,
                 launch: Mapping[str, Any] | None = None) -> list[ServerCell]:
    """Per source and cell, the server's figures; sources of no known flavour are left out.

    With the client's `records` (a records frame) and the server's `launch` flags, a gauge set at
    batch logs counts from the first scrape that surely read a value set within the cell
    (`refresh_s`); without them, from the second change of its value since the cell's start.
    """
    out = []
    for source, flavour, cell_entries in _flavoured_cells(entries):
        figures = cell_figures(source, flavour, cell_entries, records, launch)
        if figures is not None:
            out.append(figures)
    return out


def _flavoured_cells(entries: Iterable[dict[str, Any]]) -> Iterator[tuple[str, Flavour, list[dict[str, Any]]]]:
    """Each source of a known flavour with each cell's scrapes of it (`_by_source_and_cell`)."""
    for source, by_cell in _by_source_and_cell(entries).items():
        flavour = flavour_of([e for cell in by_cell.values() for e in cell])
        if flavour is not None:
            for cell_entries in by_cell.values():
                yield source, flavour, cell_entries


SourceFigures = TypeVar("SourceFigures", "ServerCell", "PrefixCounters")


def cell_sources(cell: str, figures: Iterable[SourceFigures]) -> list[list[SourceFigures]]:
    """The cell's spans (one per time it ran), each with the sources that speak for the server:
    the target's figures, else the workers' (behind a router whose page has none), to be summed."""
    by_span: dict[int, list[SourceFigures]] = {}
    for figure in figures:
        if figure.span.cell == cell:
            by_span.setdefault(figure.span.index, []).append(figure)
    return [[s for s in sources if s.source == TARGET_SOURCE] or sources for sources in by_span.values()]


def router_split(entries: Iterable[dict[str, Any]]) -> list[RouterSplit]:
    """Per router source and cell: requests the router sent to each worker during the cell."""
    out = []
    for source, by_cell in _by_source_and_cell(entries).items():
        for cell_entries in by_cell.values():
            start, end = _ends(cell_entries)
            if start is None or end is None:
                continue
            for name in ROUTER_SPLIT:
                workers = sorted({s[1]["worker"] for s in end["samples"] if s[0] == name and "worker" in s[1]})
                if workers:
                    split = {w: _delta(start, end, name, {"worker": w}) or 0.0 for w in workers}
                    out.append(RouterSplit(source, _span(start, end), split))
                    break
    return out


@dataclass(frozen=True)
class SpecCounters:
    """One source's speculative-decoding counters over one cell: their changes from the cell's
    start scrape to its end scrape (`MetricNames.verify_steps`, the accepted drafts of
    `accept_counters` and `accepted_per_position`); None, or () per position, where the server
    has no such counter."""

    source: str
    flavour: str
    span: CellSpan
    verify_steps: float | None
    accepted_tokens: float | None
    accepted_per_position: tuple[float, ...]  # draft position 0, 1, ...


def spec_counters(entries: Iterable[dict[str, Any]]) -> list[SpecCounters]:
    """Per source and cell, the speculative-decoding counters' changes; sources of no known
    flavour, and cells without a start and an end scrape, are left out."""
    out = []
    for source, flavour, cell_entries in _flavoured_cells(entries):
        names = flavour.metrics
        start, end = _ends(cell_entries)
        if start is None or end is None:
            continue
        positions = {int(s[1]["position"]) for s in end["samples"]
                     if s[0] == names.accepted_per_position and str(s[1].get("position", "")).isdigit()}
        per_position = tuple(_delta(start, end, names.accepted_per_position, {"position": str(p)}) or 0.0
                             for p in range(max(positions) + 1)) if positions else ()
        accepted = _delta(start, end, names.accept_counters[0]) if names.accept_counters else None
        out.append(SpecCounters(source, flavour.name, _span(start, end), _delta(start, end, names.verify_steps),
                                accepted, per_position))
    return out


@dataclass(frozen=True)
class PrefixCounters:
    """One source's prefix-cache counters over one cell: the tokens it found cached and the prompt
    tokens it looked up (`MetricNames.cache_counters`, or `cache_parts` added up), their changes
    from the cell's start scrape to its end scrape."""

    source: str
    span: CellSpan
    hit_tokens: float
    queried_tokens: float


def prefix_counters(entries: Iterable[dict[str, Any]]) -> list[PrefixCounters]:
    """Per source and cell, the prefix-cache counters' changes; sources of no known flavour or
    without such counters (a router's page), and cells without a start and an end scrape or
    without a prompt token looked up, are left out."""
    out = []
    for source, flavour, cell_entries in _flavoured_cells(entries):
        start, end = _ends(cell_entries)
        counts = None if start is None or end is None else _prefix_counts(flavour.metrics, start, end)
        if counts is not None:
            out.append(PrefixCounters(source, _span(start, end), *counts))
    return out


def flavour_of(entries: Iterable[dict[str, Any]]) -> Flavour | None:
    """The flavour whose metric prefix the samples use, or None."""
    for entry in entries:
        names = {sample[0] for sample in entry.get("samples") or ()}
        for flavour in FLAVOURS.values():
            if any(name.startswith(flavour.metrics.prefix) for name in names):
                return flavour
    return None


def cell_figures(source: str, flavour: Flavour, entries: list[dict[str, Any]],
                 records: pd.DataFrame | None = None, launch: Mapping[str, Any] | None = None) -> ServerCell | None:
    """One source's figures over one cell, from the cell's scrapes; None without both a start
    and an end scrape. `records` and `launch`: see `server_cells`."""
    names = flavour.metrics
    start, end = _ends(entries)
    if start is None or end is None:
        return None
    span = _span(start, end)
    during = [e for e in entries if e["phase"] == "interval" and not e.get("error")
              and start["t"] <= e["t"] <= end["t"]]
    refresh = None if records is None else refresh_s(flavour, cell_records(records, span), launch)
    accept, accept_basis, tolerance = _accept_length(names, start, end, during, refresh)
    hit, hit_basis = _prefix_hit_rate(names, start, end, during)
    running = [v for v in (_value(e, names.running) for e in during) if v is not None]
    queued = [v for v in (_value(e, names.queued) for e in during) if v is not None]
    held = tuple((e.get("t_asked", e["t"]), e["t"], r + (_value(e, names.queued) or 0.0)) for e in during
                 if (r := _value(e, names.running)) is not None)
    return ServerCell(
        source, flavour.title, flavour.name, span, accept, accept_basis, tolerance,
        _per_draft(names, start, end), hit, hit_basis,
        _mean(running), max(running, default=None), _mean(queued), max(queued, default=None),
        _histogram_mean(names.ttft, start, end), _delta(start, end, names.requests),
        _delta(start, end, names.generated), len(during), held,
        _delta(start, end, f"{names.ttft}_count") if names.ttft else None)


def step_s(records: pd.DataFrame) -> float | None:
    """The server's time per decode step as the client saw it: the median gap between a stream's
    chunks (each verify step streams one chunk to every running request, so a stream's chunks are
    about a step apart, more where prefills came between); None without a stream of 3 chunks."""
    ok = records[records["ok"] & (records["chunks"] >= 3)]
    if ok.empty:
        return None
    gaps = (ok["end_at"] - ok["first_token_at"]) / (ok["chunks"] - 1)
    return float(np.median(gaps.to_numpy(dtype=float)))


def refresh_s(flavour: Flavour, records: pd.DataFrame, launch: Mapping[str, Any] | None = None) -> float | None:
    """The longest a scraped running/queued (or accept-length) gauge of this server may have held
    its value while it was busy: 0 for one counted at the scrape, a decode step for one set at
    every step, `decode_log_interval` steps for SGLang's; None when the cell's records cannot tell
    a step's length."""
    refresh = flavour.metrics.held_refresh
    if refresh == "scrape":
        return 0.0
    step = step_s(records)
    if step is None:
        return None
    return step * (1 if refresh == "step" else int((launch or {}).get("decode_log_interval") or DECODE_LOG_INTERVAL))


def cell_records(records: pd.DataFrame, span: CellSpan) -> pd.DataFrame:
    """The client's records of a cell: its name (any, for the `WHOLE_RUN`), sent between its
    start and end scrapes."""
    sent = records["sent_at"]
    within = (sent >= span.started_at) & (sent <= span.ended_at)
    return records[within if span.cell == WHOLE_RUN else within & (records["cell"] == span.cell)]


def client_tok_per_chunk(records: pd.DataFrame) -> float | None:
    """Σcomp / Σchunks over the successful requests given (one cell's).

    Summed rather than averaged per request, to weigh every chunk once, as the server's accept
    length weighs every verify step once.
    """
    ok = records[records["ok"] & (records["chunks"] > 0)]
    if ok.empty:
        return None
    return float(formulas.tok_per_chunk(ok["completion_tokens"].sum(), ok["chunks"].sum()))


def cell_scenario(span: CellSpan, records: pd.DataFrame) -> str:
    """The scenario of a single-stream cell, from its records ("code"); "" for other cells."""
    scenarios = records["scenario"].dropna().unique()
    return str(scenarios[0]) if span.case == SINGLE and len(scenarios) == 1 else ""


def divergence(server_accept_length: float | None, client_tok_per_chunk: float | None) -> float | None:
    """client / server - 1: how far the client's tok/chunk is from the server's accept length."""
    if not server_accept_length or client_tok_per_chunk is None:
        return None
    return client_tok_per_chunk / server_accept_length - 1


def diverges(relative: float | None, tolerance: float = DIVERGENCE_LIMIT) -> bool:
    """Whether chunks are merged on the way: the client's tok/chunk above the server's accept
    length by more than the server's figure allows (`ServerCell.accept_tolerance`). A tok/chunk
    below it is not a merge (`divergence_cause`)."""
    return relative is not None and relative > tolerance


def divergence_cause(relative: float | None, tolerance: float = DIVERGENCE_LIMIT) -> str | None:
    """Why tok/chunk and the accept length differ beyond `tolerance`, in words (`MERGED` when
    tok/chunk is above, `SPLIT` below); None when they agree."""
    if relative is None or abs(relative) <= tolerance:
        return None
    return MERGED if relative > 0 else SPLIT


def accept_tolerance(basis: str | None) -> float:
    """The relative difference that a server accept length of this basis can tell from noise:
    `DIVERGENCE_LIMIT` for an exact counter delta, `GAUGE_LIMIT` for a sampled gauge."""
    return GAUGE_LIMIT if basis == GAUGE else DIVERGENCE_LIMIT


# --- internals -----------------------------------------------------------------------------

def _by_source_and_cell(entries: Iterable[dict[str, Any]]) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """Each source's scrapes by the cell they framed. A source whose scrapes framed no cell (a
    locustfile's own users start none) has one span, the `WHOLE_RUN`, from its run-start scrape to
    its last interval scrape: its run-end scrape comes after the users were stopped, when a
    request cut short leaves no record, though the server may have counted it."""
    grouped: dict[str, dict[int, list[dict[str, Any]]]] = {}
    loose: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        if entry.get("cell_index") is not None:
            grouped.setdefault(entry["source"], {}).setdefault(entry["cell_index"], []).append(entry)
        elif entry.get("phase") in ("run-start", "interval") and not entry.get("error"):
            loose.setdefault(entry["source"], []).append(entry)
    for source, run in loose.items():
        if source not in grouped and run[0]["phase"] == "run-start" and len(run) > 1:
            phases = ["start", *["interval"] * (len(run) - 2), "end"]
            grouped[source] = {0: [{**entry, "phase": phase, "cell_index": 0, "cell": WHOLE_RUN, "case": None}
                                   for entry, phase in zip(run, phases)]}
    return grouped


def _span(start: dict[str, Any], end: dict[str, Any]) -> CellSpan:
    return CellSpan(start["cell_index"], start["cell"], start.get("case"), start["t"], end["t"],
                    start.get("t_asked"), end.get("t_asked"))


def _ends(entries: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    start = next((e for e in entries if e["phase"] == "start" and not e.get("error")), None)
    end = next((e for e in entries if e["phase"] == "end" and not e.get("error")), None)
    return start, end


def _accept_length(names: MetricNames, start: dict, end: dict, during: list[dict],
                   refresh: float | None) -> tuple[float | None, str | None, float]:
    """The cell's accept length (tokens per target forward), its basis and its tolerance
    (`accept_tolerance`). A server that counts drafts and drafted nothing in the cell (no draft
    model, or an n-gram drafter that found no match) made one token a forward: 1.0."""
    if names.accept_counters and names.generated:
        accepted = _delta(start, end, names.accept_counters[0])
        generated = _delta(start, end, names.generated)
        if accepted is not None and generated and generated > accepted:
            return generated / (generated - accepted), COUNTER, DIVERGENCE_LIMIT
    if names.accept_gauge:
        # Below 1: no speculative step since the server started; no data, not a figure.
        values = _intervals(_fresh_gauge(names.accept_gauge, start, [*during, end], refresh, floor=1.0))
        if values:
            return _mean(values), GAUGE, accept_tolerance(GAUGE)
    return None, None, DIVERGENCE_LIMIT


def _per_draft(names: MetricNames, start: dict, end: dict) -> float | None:
    """The server's own accept length of the steps that had a draft: 1 + accepted / drafts."""
    if not names.accept_counters:
        return None
    accepted, drafts = (_delta(start, end, name) for name in names.accept_counters)
    return 1 + accepted / drafts if accepted is not None and drafts else None


def _intervals(values: list[float]) -> list[float]:
    """A gauge's scraped values with each logging interval once: two scrapes that see the same
    value saw the same interval (the gauge holds until the next one completes)."""
    return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


def _prefix_counts(names: MetricNames, start: dict, end: dict) -> tuple[float, float] | None:
    """The cell's prefix-cache hit and queried tokens by the server's counters; None where it
    counts none, or queried none."""
    for hits_name, queries_name in names.cache_counters:
        hits, queries = _delta(start, end, hits_name), _delta(start, end, queries_name)
        if hits is not None and queries:
            return hits, queries
    if names.cache_parts:
        hits, computed = (_delta(start, end, name) for name in names.cache_parts)
        if hits is not None and computed is not None and hits + computed:
            return hits, hits + computed
    return None


def _prefix_hit_rate(names: MetricNames, start: dict, end: dict, during: list[dict]) -> tuple[float | None, str | None]:
    counts = _prefix_counts(names, start, end)
    if counts is not None:
        return counts[0] / counts[1], COUNTER
    if names.cache_gauge:
        values = _fresh_gauge(names.cache_gauge, start, [*during, end])
        if values:
            return _mean(values), GAUGE
    return None, None


def _fresh_gauge(name: str, start: dict, entries: list[dict], refresh: float | None = None,
                 floor: float = 0.0) -> list[float]:
    """A gauge's values in `entries` that were set within the cell. The server sets such a gauge
    at the end of each logging interval, and the interval that ends first in the cell may have
    begun before it (SGLang counts decode batches, not seconds: the cell before's last batches
    and this cell's first share one interval). So a value is surely the cell's from the second
    change since the start scrape, or when asked two logging intervals (`refresh`, `refresh_s`)
    or more after it; the values before are left out (a value may repeat: a periodic load gives
    identical intervals). A gauge counted at the scrape (`refresh` 0) is the cell's at once."""
    before = _gauge_mean(start, name, floor)
    sure_from = math.inf if refresh is None else start["t"] + 2 * refresh
    values, changes, last = [], 0, before
    for entry in entries:
        value = _gauge_mean(entry, name, floor)
        if value is None:
            continue
        changes, last = changes + (value != last), value
        if changes >= 2 or entry.get("t_asked", entry["t"]) >= sure_from:
            values.append(value)
    return values


def _value(entry: dict[str, Any], name: str | None, labels: dict[str, str] | None = None) -> float | None:
    """Sum of a sample over its series (engines, ranks); 0 for a declared family without
    samples yet; None when the server does not have the metric."""
    if name is None:
        return None
    values = [s[2] for s in entry.get("samples") or () if s[0] == name
              and (labels is None or all(s[1].get(k) == v for k, v in labels.items()))]
    if values:
        return float(sum(values))
    family = name.removesuffix("_total").removesuffix("_sum").removesuffix("_count")
    return 0.0 if family in (entry.get("families") or {}) else None


def _gauge_mean(entry: dict[str, Any], name: str, floor: float = 0.0) -> float | None:
    values = [s[2] for s in entry.get("samples") or () if s[0] == name and s[2] >= floor]
    return sum(values) / len(values) if values else None


def _delta(start: dict, end: dict, name: str | None, labels: dict[str, str] | None = None) -> float | None:
    """A counter's change over the cell; None if missing or reset (the server restarted).

    A series that appears during the cell counted from zero (Prometheus counters do).
    """
    before, after = _value(start, name, labels), _value(end, name, labels)
    if after is None:
        return None
    before = before or 0.0
    return after - before if after >= before else None


def _histogram_mean(name: str | None, start: dict, end: dict) -> float | None:
    if name is None:
        return None
    total, count = _delta(start, end, f"{name}_sum"), _delta(start, end, f"{name}_count")
    return total / count if total is not None and count else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
