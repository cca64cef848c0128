"""Whether a measured cell's figures can be trusted: a list of checks per cell, each passed,
failed, or not made (and then why not).

- `clocks` (runs with workers): each worker's clock offset to the master's (`clock_offsets` in the
  manifest, `loadlib.run.clock_sync`), which its records' times are corrected by, known to within
  `CLOCK_LIMIT_S` and moving by no more than that between two measurements.
- `client_headroom`: the client's self-watch (`client_watch` in the manifest, one snapshot per
  process over the whole run) judged by `loadlib.figures.client_limits`: no process short of CPU,
  no event-loop lag that delays timestamps.
- `tokens`: the completion tokens the client counted (`usage.completion_tokens`) against the
  change of the server's generated-token counter over the cell, within `TOKEN_LIMIT`.
- `requests`: the requests the client sent against the change of the server's request counter.
- `in_flight`: at each scrape taken during the cell, the requests the client had in flight against
  those the server held (running + queued); their means within `IN_FLIGHT_LIMIT`.
- `ttft`: the client's mean TTFT against the server's own TTFT histogram over the cell (a server
  counts from when it received the request): a client that waited longer had its requests queued
  before the server, which the server's gauges cannot show.
- `littles_law` (free-running cells): over the steady window, the mean requests in flight against
  arrival rate x mean latency of the window's requests (Little's law, L = λW), within
  `LITTLE_TOLERANCE` (the capacity search's): a cell whose queue grew or drained was not steady.
- `cache_state` (cells that meant a cache state): the state each request met (`cache_observed`)
  against the state the cell meant (`cache_intended`).
- `accept_length`: the client's tok/chunk against the server's accept length, as the server view
  compares them (`loadlib.truth.server_figures.diverges`).
- `spec_account`: the verify steps and accepted drafts the requests' own account of speculative
  decoding reports (`spec_verify_steps`, `spec_accepted_tokens`), summed over the cell's span,
  against the change of the server's counters of them (`server_figures.SpecCounters`), within
  `TOKEN_LIMIT`: the per-request figures (accept length by scenario, by draft position) rest on it.

The server's counters count whatever ended (or, for a server that counts tokens as they are made,
whatever was generated) between the cell's start and end scrapes, so the client's side is taken
over the same span from every request, whichever cell sent it. A request that was
running at one of the cell's scrapes may count on either side of it, and a failed one may or may
not have been counted: such requests widen the client's count into a range (`_sides`), and the
server's figure passes when it falls within the range, give or take the tolerance. A rounds cell
has none: its requests run between its scrapes. The run's unmeasured requests (a warm-up cell's
last ones, priming, calibration) count too: the server counted them as well.

Pure functions over the records frame, the manifest and the server's per-cell figures
(`loadlib.truth.server_figures.ServerCell`); `loadlib/report/validity.py` presents them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from loadlib.figures.capacity import LITTLE_TOLERANCE, delivery, flow
from loadlib.figures.client_limits import LAG_LIMIT_S, client_limited
from loadlib.figures.free_running import SteadyCell, steady_requests
from loadlib.figures.protocol_tables import MISLEAD_LIMIT, concurrency_table
from loadlib.figures.scenario_tables import cache_state_table
from loadlib.truth import server_figures
from loadlib.truth.server_figures import ServerCell, SpecCounters
from loadlib.wire.flavours import EFFECTIVE_MAX_RUNNING, FLAVOURS, LLAMACPP

TOKEN_LIMIT = 0.02  # client and server counts of tokens and requests may differ by this share
LITTLE_MIN_REQUESTS = 20  # fewer requests in the steady window: its edges weigh too much to judge
# Requests in flight: each scrape of the server's running/queued is held against the range the
# client's side may take over the moments it may describe (`in_flight_agrees`), edges and the
# gauge's age included; the means over the scrapes may still leave that range by this share, and
# by IN_FLIGHT_SLACK requests whatever the load (a scrape in six off by one request).
IN_FLIGHT_LIMIT = 0.2
IN_FLIGHT_SLACK = 0.25
# A pass must mean something: where the client surely had fewer than this share of what it may have
# had in flight at the moments the gauges describe, a queue elsewhere would read as agreement too.
IN_FLIGHT_RESOLUTION = 0.5
# TTFT: the client's mean may exceed the server's own (it counts from when it received the request)
# by the way there and back and the front end: this share of the server's mean, and this much.
TTFT_LIMIT = 0.1
TTFT_SLACK_S = 0.05
# What the client's side of the counts needs of every request sent (`tokens_agree`, ...)
SENT_COLUMNS = ["cell", "sent_at", "first_token_at", "last_token_at", "end_at", "ok", "completion_tokens",
                "max_tokens", "spec_verify_steps", "spec_accepted_tokens"]
EDGE_S = 0.25  # the most a request's end (as the client reads it) may trail its end on the server
# A worker's clock, corrected to the master's, may be off by this much: it moves a round's wall-clock
# window (streams on several workers) by 1 % of a 1-second round, a tenth of the MISLEAD_LIMIT the
# overlap check allows, and a request's place against the server's scrapes by 4 % of EDGE_S.
CLOCK_LIMIT_S = 0.01

CHECKS = {  # name (the JSON's) -> what it compares, in words
    "client_headroom": "client headroom",
    "clocks": "workers' clocks (against the master's)",
    "tokens": "completion tokens (client against server)",
    "requests": "requests (client against server)",
    "in_flight": "requests in flight (client against server)",
    "ttft": "TTFT (client against the server's own)",
    "littles_law": "Little's law",
    "cache_state": "cache state (intended against met)",
    "accept_length": "accept length (against tok/chunk)",
    "spec_account": "speculative decoding, the requests' account against the server's counters",
    "overlap": "the protocol's aggregate (streams decoding together)",
    "failed_requests": "failed requests",
}
# Checks whose failure marks a figure that misleads, not a fault of the server or the client
CAVEATS = frozenset({"overlap"})


@dataclass(frozen=True)
class Check:
    """One check of one cell: `ok` True (passed), False (failed) or None (could not be made);
    `detail` says what was compared, or why it could not be."""

    cell: str
    name: str  # a key of CHECKS
    ok: bool | None
    detail: str


def validity_checks(df: pd.DataFrame, manifest: Mapping[str, Any], servers: Sequence[ServerCell],
                    server_absent: str | None, steady_cells: Iterable[SteadyCell] = (),
                    unmeasured: pd.DataFrame | None = None, concurrent: pd.DataFrame | None = None,
                    spec: Sequence[SpecCounters] = ()) -> list[Check]:
    """Every check of every measured cell (the records frame `df`), cells in the records' order.

    `servers` are the server's per-cell figures (`server_figures.server_cells`), `server_absent`
    why there are none at all (`server_absence`), `steady_cells` the free-running cells
    (`free_running.steady_cells`) for Little's law, `unmeasured` the run's unmeasured requests as
    a records frame (`records_frame` of them, marked measured), which the server counted too,
    `concurrent` the run's `concurrency_table` (made from `df` when not given) for `overlap`,
    `spec` the server's speculative-decoding counters per cell (`server_figures.spec_counters`).
    """
    sent = df if unmeasured is None or unmeasured.empty else pd.concat(
        [df[SENT_COLUMNS], unmeasured[SENT_COLUMNS]], ignore_index=True)
    flight = Flight(sent)
    steady = {cell[0]: cell for cell in steady_cells}
    cache = cache_state_table(df)
    headroom = client_headroom(manifest)
    clocks = clocks_agree(manifest)
    watched = manifest.get("server") or {}
    interval_s = (watched.get("metrics") or {}).get("interval_s")
    launch = watched.get("launch") or {}
    rounds = (concurrency_table(df) if concurrent is None else concurrent).set_index("cell")
    failed = _failed_by_cell(df)
    whole_run = server_figures.cell_sources(server_figures.WHOLE_RUN, servers)  # a run whose cells no scrape framed
    counted = {(c.source, c.span.index): c for c in spec}

    def server_checks(cell: str, spans: list[list[ServerCell]]) -> list[Check]:
        found = []
        for sources in spans:
            refresh = server_figures.refresh_s(FLAVOURS[sources[0].flavour],
                                               server_figures.cell_records(df, sources[0].span), launch)
            found += [Check(cell, "tokens", *tokens_agree(sent, sources)),
                      Check(cell, "requests", *requests_agree(sent, sources)),
                      Check(cell, "in_flight", *in_flight_agrees(sent, sources, interval_s, flight, refresh, launch)),
                      Check(cell, "ttft", *ttft_agrees(sent, sources)),
                      Check(cell, "accept_length", *accept_length_agrees(df, sources))]
            account = [counted[key] for key in ((s.source, s.span.index) for s in sources) if key in counted]
            if account:
                found.append(Check(cell, "spec_account", *spec_account_agrees(sent, account)))
        return found

    checks = []
    for cell in pd.unique(df["cell"]):
        cell = str(cell)
        checks.append(Check(cell, "client_headroom", *headroom))
        if clocks is not None:
            checks.append(Check(cell, "clocks", *clocks))
        checks.append(Check(cell, "failed_requests", *failed[cell]))
        spans = server_figures.cell_sources(cell, servers)
        if not spans and not whole_run:
            why = server_absent or ("no scrape of the server at both the cell's start and its end (the cell is "
                                    "still running, or a scrape failed)")
            checks += [Check(cell, name, None, why) for name in ("tokens", "requests", "in_flight", "ttft", "accept_length")]
        checks += server_checks(cell, spans)
        if cell in rounds.index:
            checks.append(Check(cell, "overlap", *overlap(rounds.loc[cell])))
        if cell in steady:
            checks.append(Check(cell, "littles_law", *littles_law(steady[cell])))
        rows = cache[cache["cell"] == cell]
        if not rows.empty:
            checks.append(Check(cell, "cache_state", *cache_state(rows)))
    return checks + server_checks(server_figures.WHOLE_RUN, whole_run)


def validity_summary(checks: Sequence[Check]) -> dict[str, Any]:
    """`{"ok": no check failed, "faults": checks failed that are not `CAVEATS`, "caveats": those
    that are (a figure that misleads), "checks": [{"cell", "name", "ok", "detail"}, ...]}`; a
    check that could not be made (`ok` None) does not fail the run."""
    failed = [c for c in checks if c.ok is False]
    return {"ok": not failed, "faults": sum(c.name not in CAVEATS for c in failed),
            "caveats": sum(c.name in CAVEATS for c in failed), "checks": [asdict(c) for c in checks]}


def server_absence(manifest: Mapping[str, Any], scrapes: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the run has no server figures at all, from the manifest's `server` and the scrapes
    (`metrics.jsonl`'s entries); None when it may have some."""
    server = manifest.get("server")
    if not server:
        return "no /metrics: the server was not watched (no `server` in the manifest)"
    missing = (server.get("metrics") or {}).get("missing") or {}
    asked = (server.get("metrics") or {}).get("sources") or {}
    if asked and set(asked) <= set(missing) | {"router"}:
        return "no /metrics (" + "; ".join(f"{name}: {why}" for name, why in missing.items()) + ")"
    if not any(entry.get("cell") for entry in scrapes) and not any(
            entry.get("phase") == "interval" and not entry.get("error") for entry in scrapes):
        return ("no scrape of its /metrics during the cells, nor during the run (a locustfile's own users are "
                "judged from the run's start to its last scrape before the stop: the run was shorter than "
                "--metrics-interval)")
    if server_figures.flavour_of(scrapes) is None:
        return "its /metrics has no metric of a known server (" + ", ".join(
            f.metrics.prefix for f in FLAVOURS.values()) + ")"
    return None


# --- the checks, each (ok, detail) --------------------------------------------------------------

Verdict = tuple[bool | None, str]


def client_headroom(manifest: Mapping[str, Any]) -> Verdict:
    snapshots = [s for s in manifest.get("client_watch") or () if isinstance(s, Mapping)]
    if not snapshots:
        return None, "no self-watch in the manifest (client_watch)"
    reasons = client_limited(snapshots)
    if reasons:
        return False, "the client may have limited the figures (over the whole run): " + "; ".join(reasons)
    return True, (f"{len(snapshots)} client process(es) with CPU to spare and event-loop lag p99 under "
                  f"{LAG_LIMIT_S * 1000:.0f} ms (over the whole run)")


def clocks_agree(manifest: Mapping[str, Any]) -> Verdict | None:
    """Whether every worker's clock was known to the master's within `CLOCK_LIMIT_S`: measured,
    to within that (half the shortest round trip of a burst), and never moving by more than that
    between two measurements (its records between them carry the older offset). None for a run
    without workers: one process, one clock."""
    workers = manifest.get("clock_offsets")
    if workers is None:
        return None
    limit_ms = CLOCK_LIMIT_S * 1000
    faults, offsets = [], []
    for worker in workers:
        name = f"worker {worker.get('index')} ({worker.get('worker')})"
        if not worker.get("measurements"):
            faults.append(f"{name}: its clock was never measured (its records' times are its own clock's)")
            continue
        offsets.append(f"{worker['offset_s'] * 1000:+.1f}")
        if worker["uncertainty_s"] > CLOCK_LIMIT_S:
            faults.append(f"{name}: offset {worker['offset_s'] * 1000:+.1f} ms known only to "
                          f"±{worker['uncertainty_s'] * 1000:.1f} ms (half the shortest round trip to the master)")
        if worker["largest_step_s"] > CLOCK_LIMIT_S:
            faults.append(f"{name}: its clock drifted {worker['largest_step_s'] * 1000:.1f} ms between two "
                          f"measurements ({worker['drift_s'] * 1000:+.1f} ms over the test)")
    if faults:
        return False, f"clock off the master's by more than {limit_ms:.0f} ms: " + "; ".join(faults)
    if not workers:
        return None, "no worker's clock in the manifest (clock_offsets is empty)"
    worst = max(max(w["uncertainty_s"], w["largest_step_s"]) for w in workers) * 1000
    return True, (f"{len(workers)} worker clock(s) corrected to the master's (offsets {', '.join(offsets)} ms), "
                  f"each within ±{worst:.1f} ms (limit {limit_ms:.0f} ms)")


def tokens_agree(df: pd.DataFrame, sources: Sequence[ServerCell]) -> Verdict:
    """The completion tokens the client counted over the cell's span against the server's
    generated-token counter, within `TOKEN_LIMIT`."""
    first = sources[0]
    names = FLAVOURS[first.flavour].metrics
    if names.generated is None:
        return None, f"{first.server} exposes no generated-token counter"
    server = _total(c.generated_tokens for c in sources)
    if server is None:
        return None, (f"the server's generated-token counter ({names.generated}) was missing, or went back "
                      "during the cell (a restart?)")
    low, high, estimate, unsure = _client_tokens(df, first.span, names.generated_each_step)
    return _agree(server, low, high, estimate, unsure, "completion tokens")


def requests_agree(df: pd.DataFrame, sources: Sequence[ServerCell]) -> Verdict:
    """The requests that ended within the cell's span, counted by the client and by the
    server's request counter, within `TOKEN_LIMIT`."""
    first = sources[0]
    names = FLAVOURS[first.flavour].metrics
    if names.requests is None:
        return None, f"{first.server} exposes no request counter"
    server = _total(c.requests for c in sources)
    if server is None:
        return None, f"the server's request counter ({names.requests}) was missing, or went back during the cell"
    sure, either, ended = _sides(df, first.span, each_step=False)  # requests count when they finish
    low, unsure = int(sure.sum()), int(either.sum())
    return _agree(server, low, low + unsure, int(ended.sum()), unsure, "requests")


def in_flight_agrees(df: pd.DataFrame, sources: Sequence[ServerCell], interval_s: float | None = None,
                     flight: Flight | None = None, refresh: float | None = None,
                     launch: Mapping[str, Any] | None = None) -> Verdict:
    """The server's running + queued at the scrapes taken during the cell, against what the client
    had in flight (any cell's requests, `flight`, made once for every cell by `Flight(df)`) at the
    moments each value may describe: from `refresh` seconds before the scrape was asked for (how
    long the server may hold its gauges, `server_figures.refresh_s`; None: since the cell began;
    over an idle stretch, back to the last request before it) to when the page came.

    Over those moments the client's side is a range: at most the requests it had in flight; at
    least those the server surely held (sent an edge before, and not within an edge of their last
    token: `Flight`), of which a server that sets its gauges at a prefill batch leaves out the ones the batch
    admits (at most its free slots: `max_running_requests` less those decoding; all that wait for
    a first token when the limit is unknown). The means over the scrapes are compared, each side
    within `IN_FLIGHT_LIMIT` or `IN_FLIGHT_SLACK`. When the low end leaves nothing to compare (the
    moments include a round's gap, a prefill batch of every request), whether requests wait
    elsewhere cannot be judged."""
    first = sources[0]
    names = FLAVOURS[first.flavour].metrics
    if names.running is None:
        return None, f"{first.server} exposes no running-requests gauge"
    if not all(c.held for c in sources):
        every = "" if interval_s is None else (
            " (--metrics-interval 0 scrapes only at the cells' edges)" if not interval_s
            else f" (it was shorter than --metrics-interval {interval_s:g} s)")
        return None, "no scrape during the cell" + every
    flight = flight or Flight(df)
    admits = names.held_refresh == "decode_log"
    cap = _running_limit(launch or {}) if admits else None
    lows, highs = [], []
    for source in sources:
        for asked, came, _value in source.held:
            low, high = flight.bounds(flight.described_from(asked, refresh, source.span.started_at), came, admits, cap)
            lows.append(low)
            highs.append(high)
    low, high = float(np.mean(lows)), float(np.mean(highs))
    server = sum(float(np.mean([held for _, _, held in c.held])) for c in sources)
    what = "running + queued" if names.queued else "running"
    scrapes = len(lows) if len(sources) == 1 else f"{len(lows)} across {len(sources)} workers"
    client = f"client {high:.1f}" if high - low < 0.05 else f"client {low:.1f} to {high:.1f}"
    shown = f"{client}, server {server:.1f} {what} (means over {scrapes} scrapes during the cell)"
    if server > high + max(IN_FLIGHT_SLACK, IN_FLIGHT_LIMIT * high):
        return False, (f"client and server disagree on requests in flight: {shown}: the server also serves "
                       "other clients")
    floor = low - max(IN_FLIGHT_SLACK, IN_FLIGHT_LIMIT * low)
    if server < floor:
        return False, (f"client and server disagree on requests in flight: {shown}: requests wait somewhere "
                       "else (a proxy, a router, the client's connections)")
    if floor <= 0:
        return None, (f"cannot judge whether requests wait elsewhere: {shown}; at the moments the server's "
                      f"gauges may describe, it surely held none of the client's requests ({_gauge_reading(names.held_refresh, refresh)})")
    if low < IN_FLIGHT_RESOLUTION * high:
        return None, (f"cannot judge whether requests wait elsewhere: {shown}; the client's range is too wide for "
                      f"the server's figure to tell a queue elsewhere from its own reading "
                      f"({_gauge_reading(names.held_refresh, refresh)}; requests longer than that narrow it)")
    return True, f"requests in flight: {shown}"


def ttft_agrees(df: pd.DataFrame, sources: Sequence[ServerCell]) -> Verdict:
    """The client's mean TTFT over the requests whose first token came within the cell's span (any
    cell's: the server counted them all) against the server's own TTFT histogram over the span
    (the change of its _sum over the change of its _count). A server measures TTFT from when it
    received the request, so a client that waited longer, beyond `TTFT_LIMIT` of the server's mean
    and `TTFT_SLACK_S`, had its requests wait before the server: a router, a proxy, the client's
    connections. Judged only where both sides counted about the same first tokens."""
    first = sources[0]
    names = FLAVOURS[first.flavour].metrics
    if names.ttft is None:
        return None, f"{first.server} exposes no TTFT histogram"
    counts = [c.ttft_count for c in sources]
    if any(c.ttft_mean_s is None or not count for c, count in zip(sources, counts)):
        return None, "the server's TTFT histogram counted no first token during the cell"
    server_count = float(sum(counts))
    server = sum(c.ttft_mean_s * count for c, count in zip(sources, counts)) / server_count
    first_at = df["first_token_at"].to_numpy(dtype=float)
    within = (first_at >= first.span.started_at) & (first_at <= first.span.ended_at)
    client_count = int(within.sum())
    counted = f"{client_count} first tokens by the client, {server_count:,.0f} by the server"
    if abs(client_count - server_count) > max(2.0, TOKEN_LIMIT * 10 * server_count):
        return None, f"cannot judge: the two sides counted different first tokens during the cell ({counted})"
    client = float(np.mean(first_at[within] - df["sent_at"].to_numpy(dtype=float)[within]))
    shown = f"client TTFT mean {client:.3f} s, server {server:.3f} s ({counted})"
    if client > server * (1 + TTFT_LIMIT) + TTFT_SLACK_S:
        return False, (f"client and server disagree on TTFT: {shown}: the client waited "
                       f"{client - server:.3f} s more a request before the server saw it: requests wait "
                       "somewhere else (a proxy, a router, the client's connections)")
    return True, f"TTFT: {shown}"


def accept_length_agrees(df: pd.DataFrame, sources: Sequence[ServerCell]) -> Verdict:
    """The client's tok/chunk against each source's accept length (tokens per target forward), as
    the server view compares them: a tok/chunk above it beyond the tolerance fails (chunks merged
    on the way); one well below it cannot be judged (the server streams fewer tokens a chunk than
    it accepts a forward, so tok/chunk does not estimate the accept length)."""
    verdicts = []
    for source in sources:
        client = server_figures.client_tok_per_chunk(server_figures.cell_records(df, source.span))
        who = "" if len(sources) == 1 else f"{source.source}: "
        if source.accept_length is None:
            verdicts.append((None, who + _no_accept_length(source)))
        elif client is None:
            verdicts.append((None, who + "no successful stream with chunks in the cell"))
        else:
            relative = server_figures.divergence(source.accept_length, client)
            per_draft = ("" if source.accept_per_draft is None else
                         f"; {source.accept_per_draft:.2f} per drafting step, the server's own figure")
            shown = (f"client tok/chunk {client:.2f}, server accept length {source.accept_length:.2f} tokens per "
                     f"forward by its {source.accept_basis}{per_draft} ({relative * 100:+.1f}%)")
            cause = server_figures.divergence_cause(relative, source.accept_tolerance)
            if cause == server_figures.MERGED:
                verdicts.append((False, f"{who}the client's tok/chunk is above the server's accept length: {shown}, "
                                        f"beyond {source.accept_tolerance:.0%}: {cause}"))
            elif cause is not None:  # the same words in every such cell: one line for them all (the server view has the figures)
                verdicts.append((None, f"{who}client tok/chunk {client:.2f}, below the server's accept length beyond "
                                       f"{source.accept_tolerance:.0%} (the server view has both): {cause}"))
            else:
                verdicts.append((True, who + shown))
    failed = [v for v in verdicts if v[0] is False]
    unmade = [v for v in verdicts if v[0] is None]
    ok = False if failed else None if unmade else True
    return ok, "; ".join(detail for _, detail in failed or unmade or verdicts)


def spec_account_agrees(df: pd.DataFrame, sources: Sequence[SpecCounters]) -> Verdict:
    """The verify steps and accepted drafts of the requests' own account, summed over the span of
    each source's counters, against the counters' change over it, within `TOKEN_LIMIT`. Over the
    span the requests' side is a range (`_sides`, as for a server that counts as it goes): those
    sent after the start scrape and ended before the end scrape count whole; one at an edge, or a
    request without an account (a failed one, one that drafted nothing), from none of its steps to
    all of them (a step makes a token at least: its completion tokens, else its `max_tokens`).
    llama-server sends no verify steps: the reader counts its target passes
    (`loadlib.wire.sse.spec_account`), each of them, while its counter counts the passes that
    verified a draft (with n-gram drafting a few in a thousand; a draft model's last pass has none
    when a single token is left): the counter is at most the requests' passes. Not made where no
    request of the span carries an account, or the server keeps neither counter."""
    verdicts = []
    for source in sources:
        who = "" if len(sources) == 1 else f"{source.source}: "
        sure, either, ended = _sides(df, source.span, each_step=True)
        accounted = df["spec_verify_steps"].notna().to_numpy() & df["spec_accepted_tokens"].notna().to_numpy()
        pairs = [(what, column, count) for what, column, count in (
            ("verify steps", "spec_verify_steps", source.verify_steps),
            ("accepted drafts", "spec_accepted_tokens", source.accepted_tokens)) if count is not None]
        if not (accounted & (sure | either)).any():
            verdicts.append((None, who + "no request of the cell carries the server's account of speculative decoding"))
        elif not pairs:
            verdicts.append((None, f"{who}the server ({source.flavour}) counts neither verify steps nor accepted drafts"))
        else:
            comp = df["completion_tokens"].to_numpy(dtype=float)
            most = np.where(np.isnan(comp), df["max_tokens"].to_numpy(dtype=float), comp)
            unknown = (sure | either) & ~accounted
            found = []
            for what, column, count in pairs:
                own = np.nan_to_num(df[column].to_numpy(dtype=float))
                low = float(own[sure & accounted].sum())
                high = low + float(own[either & accounted].sum()) + float(np.nan_to_num(most[unknown], nan=np.inf).sum())
                estimate = float(own[(sure | (either & ended)) & accounted].sum())
                label = f"{what} by the requests' account"
                if what == "verify steps" and source.flavour == LLAMACPP.name:
                    low, label = 0.0, "target passes by the requests' account (the server counts those with a draft)"
                found.append(_agree(count, low, high, estimate, int((either | unknown).sum()), label))
            ok = False if any(v[0] is False for v in found) else True
            verdicts.append((ok, who + "; ".join(detail for v_ok, detail in found if v_ok is ok)))
    failed = [v for v in verdicts if v[0] is False]
    unmade = [v for v in verdicts if v[0] is None]
    return (False if failed else None if unmade else True), "; ".join(d for _, d in failed or unmade or verdicts)


def overlap(row: Any) -> Verdict:
    """A concurrency cell (a row of `concurrency_table`): whether its protocol aggregate says what
    the server delivered. It does not where the streams did not all decode at once in some round,
    or where it is more than `MISLEAD_LIMIT` from the wall-clock aggregate: that is a caveat of the
    figure (the thread's formula, kept as it is), not a fault of the server or the client."""
    if not row["n"]:
        return None, "no round in which all its streams succeeded"
    if row["misleads"]:
        return False, (f"the protocol's aggregate misleads: {aggregate_misleading(row)}: read the wall-clock "
                       "aggregate (a caveat of the figure, not a fault of the server or the client)")
    return True, (f"all {row['concurrency']:.0f} streams decoded at once in every round; the protocol's aggregate "
                  f"{row['aggregate_tps']:,.1f} t/s is within {MISLEAD_LIMIT:.0%} of the wall-clock "
                  f"{row['window_tps']:,.1f} t/s")


def aggregate_misleading(row: Any) -> str:
    """Why a cell's protocol aggregate misleads (`concurrency_table`'s `misleads`), in words: its
    streams did not all decode at once (the server queued some), or began their decode apart."""
    apart = f"{row['aggregate_tps']:,.1f} t/s against {row['window_tps']:,.1f} t/s wall-clock"
    if row["together"] < row["concurrency"]:
        return (f"at most {row['together']:.0f} of its {row['concurrency']:.0f} streams decoded at once (the server "
                f"ran fewer at a time and queued the rest), and sum(comp-1)/max(total-ttft) leaves the wait out: {apart}")
    return f"its streams began decoding at different moments, which max(total-ttft) ignores: {apart}"


def failed_requests(cell: pd.DataFrame) -> Verdict:
    """A cell's measured requests that failed (each is left out of every figure, and counted)."""
    failed = cell.loc[~cell["ok"], "error"].astype(str)
    if failed.empty:
        return True, f"none of its {len(cell)} requests failed"
    reasons = ", ".join(f"{reason} {count}" for reason, count in failed.value_counts().items())
    return False, f"{len(failed)} of its {len(cell)} requests failed ({reasons}); the figures leave them out"


def littles_law(cell: SteadyCell) -> Verdict:
    """Over the steady window: mean in flight (L) against arrival rate x mean latency (λW) of the
    requests sent within it (`steady_requests`, failed ones too), within `LITTLE_TOLERANCE`. A queue
    that grows through a cell sent on a schedule keeps L = λW over a window of it (the rate its
    requests end is the rate the server serves), so there the cell is also not steady when its last
    third of requests waited longer from their intended send than its middle third, beyond both
    medians' intervals (`capacity.delivery`, as the capacity search judges a level)."""
    _name, group, _origin, sent, end, start, stop = cell
    window = flow(sent, end, group["ok"].to_numpy(dtype=bool), start, stop)
    n = int(steady_requests(sent, start, stop).sum())
    if n < LITTLE_MIN_REQUESTS or window.window_s <= 0:
        return None, f"too few requests in the steady window ({n}; {LITTLE_MIN_REQUESTS} at least)"
    rate, latency = n / window.window_s, window.latency_s
    expected = rate * latency
    relative = window.in_flight / expected - 1 if expected else math.inf
    shown = (f"{window.in_flight:.1f} requests in flight, throughput {rate:.2f} req/s x mean latency {latency:.2f} s "
             f"= {expected:.1f} ({relative * 100:+.1f}%)")
    if abs(relative) > LITTLE_TOLERANCE:
        return False, (f"Little's law does not hold over the steady window: {shown}: the cell was not steady "
                       "(a queue grew or drained during it)")
    growth = delivery(group, rate) if group["queue_s"].notna().any() else None
    if growth is not None and growth.short:
        return False, (f"the queue grew through the cell: its last third of requests waited {growth.last.value:.2f} s "
                       f"from their intended send, its middle third {growth.middle.value:.2f} s (beyond both medians' "
                       f"intervals); {shown}, as it does over a window of a growing queue: the cell was not steady")
    return True, shown


def cache_state(rows: pd.DataFrame) -> Verdict:
    """The cell's requests that meant a cache state (`cache_state_table`'s rows of one cell)."""
    told = rows[rows["n"] > rows["unknown"]]
    if told.empty:
        return None, ("the server reported no cached_tokens, so the cache state met is unknown "
                      "(SGLang: --enable-cache-report)")
    missed, met = [], []
    for row in told.itertuples():
        wrong = row.met_warm if row.cache_intended == "cold" else row.met_cold
        known = row.n - row.unknown
        other = "warm" if row.cache_intended == "cold" else "cold"
        (missed if wrong else met).append(
            f"{wrong} of {known} {row.cache_intended} requests met a {other} cache" if wrong
            else f"{known} {row.cache_intended} requests met a {row.cache_intended} cache")
    if missed:
        return False, "the cache state was not as intended: " + "; ".join(missed)
    return True, "; ".join(met)


# --- internals -------------------------------------------------------------------------------

def _failed_by_cell(df: pd.DataFrame) -> dict[str, Verdict]:
    return {str(cell): failed_requests(group) for cell, group in df[["cell", "ok", "error"]].groupby(
        "cell", sort=False, observed=True)}


def _total(values: Iterable[float | None]) -> float | None:
    values = list(values)
    return None if any(v is None for v in values) else float(sum(values))


class _Intervals:
    """How many of some intervals [start, end) hold each instant, by binary search."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        kept = start < end
        self.starts = np.sort(start[kept], kind="stable")  # timsort: a journal is nearly in order
        self.ends = np.sort(end[kept], kind="stable")

    def count(self, at: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, at, "right") - np.searchsorted(self.ends, at, "right")

    def changes(self, a: float, b: float) -> np.ndarray:
        """The instants in (a, b] at which the count changes."""
        return np.concatenate([edges[np.searchsorted(edges, a, "right"):np.searchsorted(edges, b, "right")]
                               for edges in (self.starts, self.ends)])


class Flight:
    """The client's requests in flight over time (every request sent, any cell's): all of them,
    those a server surely holds, and of those the ones decoding (their first token came) and the
    ones waiting for it.

    A server holds a request from a moment after it was sent (its front end: HTTP, template,
    tokenizer) until its last token, which reached the client a moment later. Neither moment is
    longer than the fastest answer of the request's cell (its TTFT holds a front end and a first
    chunk's way back), nor than `EDGE_S`: that is the request's edge, so that a server quicker
    than the edge is still judged."""

    def __init__(self, df: pd.DataFrame) -> None:
        sent, end = _times(df)
        first = df["first_token_at"].to_numpy(dtype=float)
        first = np.where(np.isnan(first), np.inf, first)  # no first token: it waited to the end
        last = df["last_token_at"].to_numpy(dtype=float)
        last = np.where(np.isnan(last), end, np.minimum(last, end))
        fastest = (df["first_token_at"] - df["sent_at"]).where(df["ok"]).groupby(
            df["cell"], observed=True).transform("min")
        edge = np.fmin(fastest.to_numpy(dtype=float), EDGE_S)  # NaN (no answer in its cell): EDGE_S
        arrived, done = sent + edge, last - edge
        self.all = _Intervals(sent, end)
        self.held = _Intervals(arrived, done)
        self.decoding = _Intervals(first, done)
        self.waiting = _Intervals(arrived, np.minimum(first, done))
        self._ends = np.sort(end, kind="stable")

    def described_from(self, asked: float, refresh: float | None, cell_start: float) -> float:
        """The earliest moment a gauge scraped at `asked` may describe, for a server that holds it
        up to `refresh` seconds while busy (None: unknown, since the cell began): a server that
        went idle holds it from its last batch, up to `refresh` before its last request ended."""
        if refresh == 0:
            return asked
        at = cell_start if refresh is None else asked - refresh
        if self.all.count(np.array([at]))[0] == 0:
            before = self._ends[:np.searchsorted(self._ends, at, "right")]
            at = float(before[-1]) - (refresh or 0.0) if len(before) else at
        return at

    def bounds(self, a: float, b: float, admits: bool, cap: float | None) -> tuple[float, float]:
        """(fewest the server surely held, most the client had) at any instant of [a, b]; with
        `admits`, the server leaves out the requests its prefill batch admits (at most `cap` less
        those decoding; without `cap`, any waiting)."""
        at = np.concatenate([[a], *(i.changes(a, b) for i in (self.all, self.held, self.decoding, self.waiting))])
        most = float(self.all.count(at).max())
        if not admits:
            return float(self.held.count(at).min()), most
        decoding, waiting = self.decoding.count(at), self.waiting.count(at)
        admitted = waiting if cap is None else np.clip(cap - decoding, 0, waiting)
        return float((decoding + waiting - admitted).min()), most


def _running_limit(launch: Mapping[str, Any]) -> float | None:
    """The server's running-request limit from its launch flags (SGLang's own or derived one,
    per data-parallel rank), None when it does not say."""
    limit = launch.get("max_running_requests") or launch.get(EFFECTIVE_MAX_RUNNING)
    return float(limit) * int(launch.get("dp_size") or 1) if limit else None


def _gauge_reading(refresh: str, seconds: float | None) -> str:
    """How the server keeps its running/queued gauges, in words, for a check that cannot judge."""
    if refresh == "decode_log":
        every = f", about {seconds:.2f} s here" if seconds else ""
        return ("SGLang sets them at each prefill batch, leaving out the requests it admits, and once every "
                f"decode-log interval{every}")
    return "the scrapes fell between requests"


def _times(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Send and end times of every record; a request that never ended held nothing (end = sent)."""
    sent = df["sent_at"].to_numpy(dtype=float)
    end = df["end_at"].to_numpy(dtype=float)
    return sent, np.where(np.isnan(end), sent, end)


def _sides(df: pd.DataFrame, span: server_figures.CellSpan,
           each_step: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per record: whether the server surely counted it within the span, whether it may have,
    and whether it ended within the span (as the client saw it).

    A scrape's values are of a moment between when it was asked for and when its page came. A
    request ended (for the server) a little before the client read its end: by `EDGE_S` at most.
    So a server that counts a request when it finishes surely counted one that succeeded within
    the span if it ended before the end scrape was asked for, and was sent after the start scrape
    came or ended more than `EDGE_S` after it; surely not one that ended before the start scrape
    was asked for, or more than `EDGE_S` after the end scrape came, or was sent after it. A server
    that counts tokens as they are made counted all of a request that was sent after the start
    scrape came and ended before the end scrape was asked for. A failed request may or may not
    have been counted.
    """
    sent, end = _times(df)
    ok = df["ok"].to_numpy(dtype=bool)
    a, b = span.started_at, span.ended_at
    a_asked = span.start_asked_at if span.start_asked_at is not None else a - EDGE_S
    b_asked = span.end_asked_at if span.end_asked_at is not None else b - EDGE_S
    sent_after_start = sent >= a
    out = (end <= a_asked) | (sent >= b)
    if each_step:
        sure = ok & sent_after_start & (end <= b_asked)
    else:
        sure = ok & (end <= b_asked) & (sent_after_start | (end - EDGE_S > a))
        out |= end - EDGE_S > b
    return sure, ~sure & ~out, (end > a) & (end <= b)


def _client_tokens(df: pd.DataFrame, span: server_figures.CellSpan,
                   each_step: bool) -> tuple[float, float, float, int]:
    """(lowest, highest, best estimate) of the completion tokens the server counted over the
    span by the client's records (`_sides`), and how many requests could count either way: one
    of those adds from none to all of its tokens (up to its `max_tokens` if it failed without a
    count). The estimate counts what ended within the span, or for a server that counts tokens
    as they are made, the tokens made within it, spread evenly from each request's first token
    to its end."""
    sure, either, ended = _sides(df, span, each_step)
    ok = df["ok"].to_numpy(dtype=bool)
    comp = df["completion_tokens"].to_numpy(dtype=float)
    most = np.where(np.isnan(comp), df["max_tokens"].to_numpy(dtype=float), comp)
    most = np.where(np.isnan(most), np.inf, most)  # a failed request of unknown length: unbounded
    low = float(np.nansum(comp[sure]))
    if each_step:
        sent, end = _times(df)
        first = df["first_token_at"].to_numpy(dtype=float)
        first = np.where(np.isnan(first), sent, first)
        made = np.clip((np.minimum(end, span.ended_at) - np.maximum(first, span.started_at))
                       / np.maximum(end - first, 1e-9), 0.0, 1.0)
        estimate = low + float(np.nansum((comp * made)[ok & either]))
    else:
        estimate = float(np.nansum(comp[ok & ended]))
    return low, low + float(most[either].sum()), estimate, int(either.sum())


def _agree(server: float, low: float, high: float, estimate: float, unsure: int, what: str) -> Verdict:
    """Whether the server's count falls within the client's range, `TOKEN_LIMIT` either side."""
    counted = (f"client counted {estimate:,.0f} {what}" if unsure == 0 or high == low else
               f"client counted {estimate:,.0f} {what} ({low:,.0f} to {_count(high)}: {unsure} request(s) at the "
               "cell's edges or failed could count either way)")
    if low * (1 - TOKEN_LIMIT) <= server <= high * (1 + TOKEN_LIMIT):
        return True, f"{counted}, server {server:,.0f}"
    nearest = low if server < low else high
    off = f"{(server / nearest - 1) * 100:+.1f}%" if nearest else "none counted by the client"
    more = "" if server < low else ": the server counted more (other clients)"
    return False, f"client and server disagree: {counted}, server {server:,.0f} ({off}){more}"


def _count(value: float) -> str:
    return "unbounded" if math.isinf(value) else f"{value:,.0f}"


def _no_accept_length(source: ServerCell) -> str:
    names = FLAVOURS[source.flavour].metrics
    if not names.accept_counters and not names.accept_gauge:
        return f"{source.server} exposes no accept length"
    if names.accept_counters and not names.accept_gauge:
        return ("the server's generated-token or accepted-draft counter was missing, or went back during the cell "
                "(a restart?)")
    return ("no value of the server's accept-length gauge was surely the cell's (it is set once per logging "
            "interval of decode batches, and the first interval to end in a cell began before it: a value counts "
            "from its second change, or two intervals into the cell)")

