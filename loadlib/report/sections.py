"""The summary's tables beyond the protocol's (the capacity search's is `loadlib.report.search`): steady state of
free-running cells, figures by length (report only), prefill, the cache state each cell meant
and met, TTFT per conversation turn, requests left out of a figure, the client's own limits, the
GPUs' energy per cell, and the server's account of speculative decoding per scenario.

Each function turns one `loadlib.figures` table (or what the manifest kept: the search's result,
the self-watch) into a section: it labels, formats and orders, it computes nothing. Which sections
the end-of-run summary and `python -m analysis report` show, and in what order, is
`loadlib.report.contents.CONTENTS`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from loadlib.figures import free_running, uncertainty
from loadlib.figures.client_limits import client_limited
from loadlib.figures.goodput import Slo
from loadlib.figures.sessions import COUNTERS
from loadlib.report import text
from loadlib.report.document import Section

ALL_STREAMS = "all-streams t/s"  # decode tokens of every stream per second; "decode t/s" is per stream
WATCH_COLUMNS = ["process", "cpu_share_mean", "cpu_share_max", "loop_lag_p50_s", "loop_lag_p99_s",
                 "loop_lag_max_s", "samples", "reasons"]


def steady_state(table: pd.DataFrame, slo: Slo) -> Section:
    """Steady state of each free-running cell; where a cell was sent on a schedule (open, trace), its
    SLO judges TTFT from the intended send time, and 'SLO met from send' shows the share judged from
    the send beside it."""
    intended = table["slo_ttft_from"] == free_running.INTENDED_SEND
    return Section(
        "steady_state", f"Steady state of free-running cells (window: in-flight requests at or above "
        f"their median; all-streams t/s = decode tokens of every stream per second of the window; "
        f"goodput = completions/s meeting TTFT <= {slo.ttft_s:g} s and decode >= "
        f"{slo.decode_tps:g} t/s" + (f"; {', '.join(table.loc[intended, 'cell'].astype(str))}: TTFT from the intended "
                                     "send time (coordinated omission corrected), 'SLO met from send' from the send"
                                     if intended.any() else "") + ")",
        table, pd.DataFrame({
            "cell": table["cell"].astype(str),
            "window s": [f"{text.num(s)}+{text.num(w)}" for s, w in zip(table["window_start_s"], table["window_s"])],
            "in flight": text.column(table["in_flight"]),
            ALL_STREAMS: text.column(table["decode_tps"]),
            "req/s": text.column(table["requests_per_s"], 2),
            "goodput req/s": text.column(table["goodput_rps"], 2),
            "SLO met": [text.percent(v) for v in table["slo_attainment"]],
            **({"SLO met from send": [text.percent(v) for v in table["slo_attainment_from_send"]]}
               if intended.any() else {}),
            "n": text.column(table["n"], 0),
            "failed": text.column(table["failed"], 0),
        }), keys=("cell",), left=("cell",), optional=True)


def streams_held(table: pd.DataFrame) -> Section:
    """Closed-loop cells whose streams in flight fell short of the streams asked for: such a run
    measured fewer streams than its name says (the client could not keep them all busy)."""
    short = table[table["held_share"] < free_running.STREAMS_HELD_SHARE]
    title = ("STREAMS BELOW ASKED: " + "; ".join(
        f"{row.cell} held {text.num(row.in_flight)} of {int(row.asked)} streams in flight"
        for row in short.itertuples()) + " (not a result at the asked concurrency; see the client self-watch)"
             if not short.empty else "")
    return Section(
        "streams_held", title, short, pd.DataFrame({
            "cell": short["cell"].astype(str), "asked": text.column(short["asked"], 0),
            "in flight": text.column(short["in_flight"]), "held": [text.percent(v) for v in short["held_share"]],
        }), keys=("cell",), left=("cell",), optional=True)


def trace_replay(table: pd.DataFrame, skipped: str | None = None) -> Section:
    return Section(
        "trace_replay", "Trace replay (scheduled vs achieved rate over first to last send; lateness = send "
        "time minus scheduled time; stopped early = answers shorter than their forced length)"
        + (f"; {skipped}" if skipped else ""),
        table, pd.DataFrame({
            "cell": table["cell"].astype(str), "n": text.column(table["n"], 0),
            "scheduled req/s": text.column(table["scheduled_rps"], 2),
            "achieved req/s": text.column(table["achieved_rps"], 2),
            **{f"late {q} s": text.column(table[f"late_{q}_s"], 3) for q in ("p50", "p90", "p99")},
            "stopped early": text.column(table["stopped_early"], 0),
        }), keys=("cell",), left=("cell",), optional=True)


def steady_percentiles(table: pd.DataFrame) -> Section:
    """Percentiles of each free-running cell's steady-window requests, each with its 95 % confidence
    interval, a tail percentile on too few samples marked (`percentile_note`); a cell sent on a
    schedule has its latencies from the intended send beside those from the send."""
    digits = {"ttft_s": 3, "intended_ttft_s": 3, "ttfo_s": 3, "total_s": 3, "intended_total_s": 3, "queue_s": 3,
              "tok_per_chunk": 2, "max_chunk_gap_s": 3, "reasoning_tokens": 0}
    places = [digits.get(f, 1) for f in table["figure"]]
    intended = table["figure"].isin(("intended_ttft_s", "intended_total_s")).any()
    gaps = (table["figure"] == "max_chunk_gap_s").any()
    return Section(
        "steady_percentiles", "Steady-state percentiles (raw records sent within the window"
        + ("; intended_ttft_s, intended_total_s = from the intended send time: + queue_s, the wait for a free user "
           "(coordinated omission corrected)" if intended else "")
        + ("; max_chunk_gap_s = each request's longest wait between two chunks (--chunk-times)" if gaps else "")
        + percentile_note(table) + ")",
        table, pd.DataFrame({
            "cell": table["cell"].astype(str), "figure": table["figure"].astype(str),
            **{col: marked(table, col, places) for col in PERCENTILE_NAMES},
            "n": text.column(table["n"], 0),
            **{f"{col} CI": interval(table, col, places) for col in PERCENTILE_NAMES},
        }), keys=("cell", "figure"), left=("cell", "figure"), optional=True)


# --- percentiles with their uncertainty (`loadlib.figures.uncertainty`) --------------------------------

PERCENTILE_NAMES = ("p50", "p90", "p99")


UNSURE = "~"  # follows a percentile that rests on too few samples to be a tail estimate


def marked(table: pd.DataFrame, column: str, digits: int | list[int]) -> list[str]:
    """A percentile column's values, each followed by `UNSURE` where its `{column}_enough` is false
    (and the others by a space, so the digits stay aligned; no mark in a column without one)."""
    places = digits if isinstance(digits, list) else [digits] * len(table)
    values = [text.num(v, d) for v, d in zip(table[column], places)]
    unsure = [not bool(enough) and value != text.MISSING for enough, value in zip(table[f"{column}_enough"], values)]
    return [value + (UNSURE if flag else " ") for value, flag in zip(values, unsure)] if any(unsure) else values


def interval(table: pd.DataFrame, column: str, digits: int | list[int]) -> list[str]:
    """A percentile's confidence interval: "0.301–0.340"; "≥ 0.301" where the samples bound it only
    from below, "≤ 0.340" only from above, "-" where they bound it on neither side (or no samples)."""
    places = digits if isinstance(digits, list) else [digits] * len(table)
    shown = []
    for low, high, d in zip(table[f"{column}_ci_low"], table[f"{column}_ci_high"], places):
        bounded_low, bounded_high = bool(np.isfinite(low)), bool(np.isfinite(high))
        shown.append(f"{text.num(low, d)}–{text.num(high, d)}" if bounded_low and bounded_high
                     else f"≥ {text.num(low, d)}" if bounded_low
                     else f"≤ {text.num(high, d)}" if bounded_high else text.MISSING)
    return shown


def percentile_note(table: pd.DataFrame, columns: Iterable[str] = PERCENTILE_NAMES) -> str:
    """What the percentile columns' additions mean, for a section's title ("; CI = ..."): the
    confidence interval, its one-sided or missing bounds where some are, and the footnote on
    `UNSURE` where a value carries it."""
    columns = [col for col in columns if f"{col}_ci_low" in table]
    lows = table[[f"{col}_ci_low" for col in columns]].to_numpy(dtype="float64")
    highs = table[[f"{col}_ci_high" for col in columns]].to_numpy(dtype="float64")
    values = table[columns].to_numpy(dtype="float64")
    note = f"; CI = {uncertainty.LEVEL:.0%} confidence interval (order statistics, distribution-free"
    if (np.isfinite(lows) & ~np.isfinite(highs)).any():
        note += ", ≥ x: no upper bound from so few samples"
    if (~np.isnan(values) & ~np.isfinite(lows) & ~np.isfinite(highs)).any():
        note += ", -: no bound"
    note += ")"
    unsure = [col for col in columns if (~table[f"{col}_enough"].astype(bool) & table[col].notna()).any()]
    if unsure:
        needed = [f"{uncertainty.samples_needed(_quantile(col))}{' samples' if i == 0 else ''} for "
                  f"{col.removeprefix('ttfo_')}" for i, col in enumerate(sorted(unsure, key=_quantile, reverse=True))]
        note += (f"; {UNSURE} : fewer than {' / '.join(needed)}, the value is the sample's maximum region, "
                 "not a tail estimate")
    return note


def _quantile(column: str) -> float:
    """The quantile a percentile column names: "p90" -> 0.9, "ttfo_p99" -> 0.99."""
    return int(column.rsplit("p", 1)[1]) / 100


def by_length(table: pd.DataFrame) -> Section:
    """TTFT by prompt length and decode by answer length per free-running cell
    (`free_running.by_length_table`). In the report only, not the end-of-run summary: it is a breakdown
    of figures the summary already gives per cell (up to 8 buckets x 2 figures x each cell, too
    long for the lines printed at the end of every run), and reading it takes the per-request
    lengths of a whole run, which the report has at hand."""
    figures = {"ttft_s": ("TTFT s", 3), "decode_tps": ("decode t/s", 1)}
    tokens = {"prompt_tokens": "prompt", "completion_tokens": "completion"}
    return Section(
        "by_length", "By length, free-running cells: TTFT by prompt tokens and decode by completion tokens "
        "(usage counts; buckets [low, high) on powers of two and their half steps, from the run's own lengths; "
        "every successful request of the cell)",
        table, pd.DataFrame({
            "cell": table["cell"].astype(str),
            "figure": [figures[f][0] for f in table["figure"]],
            "by tokens": [f"{tokens[t]} {low:,}–{high - 1:,}" for t, low, high in
                          zip(table["tokens"], table["low"], table["high"])],
            **{col: [text.num(v, figures[f][1]) for v, f in zip(table[col], table["figure"])]
               for col in ("p50", "p90", "p99")},
            "n": text.column(table["n"], 0),
        }), keys=("cell", "figure", "low"), left=("cell", "figure", "by tokens"), optional=True)


def prefill(table: pd.DataFrame) -> Section:
    return Section(
        "prefill", "Prefill (prefill = prompt/TTFT, the protocol's cold figure on cold rows; "
        "uncached = (prompt - cached)/TTFT; hit = more than the chat template's framing cached)",
        table, pd.DataFrame({
            "cell": table["cell"].astype(str), "scenario": table["scenario"].astype(str),
            "cache": table["cache"].astype(str),
            "prompt tokens": text.column(table["prompt_tokens"], 0),
            "cached tokens": text.column(table["cached_tokens"], 0),
            "TTFT s": text.column(table["ttft_s"], 3),
            "prefill t/s": text.column(table["prefill_tps"], 0),
            "uncached t/s": text.column(table["uncached_prefill_tps"], 0),
            "n": text.column(table["n"], 0),
        }), keys=("cell", "scenario", "cache"), left=("cell", "scenario", "cache"), optional=True)


def cache_section(table: pd.DataFrame) -> Section:
    """Per cell and intended state: what the requests met (`scenario_tables.cache_state_table`). A
    cold request served from the cache, or a warm one that missed, is flagged."""
    return Section(
        "cache_state", "Cache state (intended by the cell; met = from cached_tokens, warm above the "
        "template's framing; MISSED: a cold request served from cache, or a warm one that was not)",
        table, pd.DataFrame({
            "cell": table["cell"].astype(str), "intended": table["cache_intended"].astype(str),
            "met cold": text.column(table["met_cold"], 0), "met warm": text.column(table["met_warm"], 0),
            "unknown": text.column(table["unknown"], 0),
            "cached prompt": [text.percent(c / p if p else None) for c, p in zip(table["cached_tokens"],
                                                                                 table["prompt_tokens"])],
            "n": text.column(table["n"], 0), "flag": table["flag"],
        }), keys=("cell", "cache_intended"), left=("cell", "intended", "flag"), optional=True)


def turn_section(table: pd.DataFrame) -> Section:
    """Multi-turn conversations: TTFT per scenario and turn (`scenario_tables.turn_table`), beside
    the growing prompt and its cached part."""
    return Section(
        "turns", "Multi-turn: TTFT per turn (s; each turn resends the history, so later turns hit the cache)",
        table, pd.DataFrame({
            "scenario": [str(s) for s in table["scenario"]],
            "turn": [str(t) for t in table["turn"]],
            "prompt tokens": text.column(table["prompt_tokens"], 0),
            "cached tokens": text.column(table["cached_tokens"], 0),
            **{col: text.column(table[col], 3) for col in ("p50", "p90", "p99")},
            "n": text.column(table["n"], 0),
        }), keys=("scenario", "turn"), left=("scenario",), optional=True)


def exclusions_section(table: pd.DataFrame) -> Section:
    return Section(
        "exclusions", "Successful requests left out of one figure (they count in every other)",
        table, pd.DataFrame({"cell": table["cell"].astype(str), "reason": table["reason"].astype(str),
                             "count": text.column(table["count"], 0)}),
        keys=("cell", "reason"), left=("cell", "reason"), optional=True)


def client_watch_section(manifest: Mapping[str, Any]) -> Section:
    """The client processes that may have limited the figures (CPU share near a whole core, or
    event-loop lag that delays timestamps), from the self-watch the session writes into the
    manifest (`client_watch`, one snapshot per process); no rows when none did."""
    snapshots = [snap for snap in manifest.get("client_watch") or () if isinstance(snap, Mapping)]
    flagged = [{**snap, "process": number, "reasons": "; ".join(client_limited([snap]))}
               for number, snap in enumerate(snapshots, start=1) if client_limited([snap])]
    table = pd.DataFrame(flagged, columns=WATCH_COLUMNS)
    reasons = client_limited(snapshots)
    headline = ("CLIENT MAY HAVE LIMITED THESE FIGURES" if any(r.startswith("client short of CPU") for r in reasons)
                else "TIMESTAMPS MAY BE LATE")
    title = (f"{headline}: " + "; ".join(reasons) if reasons else "Client self-watch: no process near its limits")
    return Section(
        "client_watch", title, table, pd.DataFrame({
            "process": text.column(table["process"], 0),
            "CPU share mean": [text.percent(v) for v in table["cpu_share_mean"]],
            "CPU share max": [text.percent(v) for v in table["cpu_share_max"]],
            **{f"loop lag {q} ms": text.column(table[f"loop_lag_{q}_s"] * 1000, 1) for q in ("p50", "p99", "max")},
            "samples": text.column(table["samples"], 0),
        }), keys=("process",), optional=True)


def energy_section(table: pd.DataFrame) -> Section:
    """Each GPU's energy per cell and what it cost per completion token (`figures.energy.energy_table`)."""
    meters = {"nvml": "NVML", "dcgm": "a DCGM exporter"}
    read_by = " and ".join(sorted({meters.get(m, str(m)) for m in table["meter"]})) or "the GPU meter"
    samples = ("NVML's sampler" if (table["meter"] == "nvml").any() else "the scrapes")
    return Section(
        "energy", f"GPU energy per cell (from {read_by}; J = the energy counter's change between the cell's start and "
        f"end scrapes, or its power samples integrated where via says so; mean W = J / s; peak W = the highest "
        f"power sample during the cell, samples = how many ({samples}); J/token and tokens/J over the completion "
        "tokens of the cell's successful requests; all = every GPU read: J summed, the peak of their summed power)",
        table, pd.DataFrame({
            "cell": text.cell_labels(table["cell"], table["scenario"]),
            "GPU": table["gpu"].astype(str),
            "J": text.column(table["joules"], 0),
            "s": text.column(table["seconds"], 2),
            "mean W": text.column(table["mean_watts"], 1),
            "peak W": text.column(table["peak_watts"], 1),
            "J/token": text.column(table["joules_per_token"], 3),
            "tokens/J": text.column(table["tokens_per_joule"], 2),
            "via": [v if isinstance(v, str) else text.MISSING for v in table["energy_via"]],
            "samples": text.column(table["samples"], 0),
        }), keys=("cell", "scenario", "gpu"), left=("cell", "GPU", "via"), optional=True)


def acceptance_section(table: pd.DataFrame) -> Section:
    """Per scenario, the server's accept length from its per-request account beside the client's
    tok/chunk, and decode as verify steps/s x accept length (`figures.acceptance.acceptance_table`)."""
    return Section(
        "acceptance", "Speculative decoding per scenario, from the server's own account of each request (accept len = "
        "tokens per verify step = (accepted drafts + verify steps) / verify steps, summed over the requests; client "
        "tok/chunk = Σcomp/Σchunks of the same requests, the stream-chunk basis, a different figure; verify steps/s = "
        "the server's verify steps over the client's decode time, first token to end of stream; decode = verify "
        "steps/s x accept len, the server's tokens over that time, beside the client's (comp - 1) over it)",
        table, pd.DataFrame({
            "scenario": table["scenario"].astype(str),
            "requests": text.column(table["requests"], 0),
            "verify steps": text.column(table["verify_steps"], 0),
            "accept len": text.column(table["accept_length"], 2),
            "drafts accepted": [text.percent(v, 1) for v in table["draft_acceptance"]],
            "client tok/chunk": text.column(table["client_tok_per_chunk"], 2),
            "verify steps/s": text.column(table["verify_steps_per_s"], 1),
            "decode t/s": text.column(table["decode_tps"], 1),
            "client decode t/s": text.column(table["client_decode_tps"], 1),
        }), keys=("scenario",), left=("scenario",), optional=True)


def _targeted(table: pd.DataFrame) -> dict[str, list[str]]:
    """A target column where an A/B run has several."""
    return {"target": table["target"].astype(str).tolist()} if table["target"].astype(bool).any() else {}


def _left(table: pd.DataFrame, *names: str) -> tuple[str, ...]:
    return (*_targeted(table), *names)


def sessions_section(table: pd.DataFrame, slo: Slo) -> Section:
    """Agent sessions per cell: the prefix cache's ideal beside what the server achieved, with the
    interval over sessions, and the cell's validity (`figures.sessions.cell_table`)."""
    flagged = table.loc[table["overflow_flag"].astype(bool), "cell"].astype(str).tolist()
    return Section(
        "sessions", "Agent sessions per cell (prefix hit = cached / prompt tokens of the answered turns, token-weighted; "
        "ideal = the trace's hash blocks sent before in their scope, an infinite cache; achieved via usage = the "
        "turns' usage cached_tokens, 95 % CI resampling sessions; via server counters = the server's prefix-cache "
        "hit / queried tokens over the cell, where no turn came back with cached_tokens: one figure for the cell, "
        "no per-session CI, no turn's miss; missed ideal = turns cached more than a block below "
        f"it; lanes live = mean sessions in progress; in SLO = turns with TTFT from when due <= {slo.ttft_s:g} s and "
        f"decode >= {slo.decode_tps:g} t/s)"
        + (f"; FLAGGED {', '.join(flagged)}: more than 1 % of turns beyond the model's context" if flagged else ""),
        table, pd.DataFrame({
            **_targeted(table), "cell": table["cell"].astype(str),
            "sessions": text.column(table["sessions"], 0), "turns": text.column(table["turns"], 0),
            "failed": text.column(table["turns_failed"], 0),
            "ideal hit": [text.percent(v, 1) for v in table["ideal_prefix_hit"]],
            "achieved hit": [text.percent(v, 1) if via else "not reported" for v, via
                             in zip(table["achieved_prefix_hit"], table["achieved_via"])],
            "via": [via or NO_HIT_SOURCE for via in table["achieved_via"]],
            "95% CI": [_hit_interval(lo, hi, via) for lo, hi, via in zip(
                table["achieved_prefix_hit_ci_low"], table["achieved_prefix_hit_ci_high"], table["achieved_via"])],
            "missed ideal": [text.percent(v, 1) for v in table["turns_missing_ideal"]],
            "over context": [text.percent(v, 1) + (" !" if flag else "")
                             for v, flag in zip(table["context_overflow_rate"], table["overflow_flag"])],
            "lanes offered": text.column(table["lanes_offered"], 0), "lanes live": text.column(table["lanes_live"], 1),
            "TTFT p50 s": text.column(table["ttft_p50_s"], 3), "TTFT p90 s": text.column(table["ttft_p90_s"], 3),
            "decode p50 t/s": text.column(table["decode_p50_tps"], 1),
            "in SLO": [text.percent(v, 1) for v in table["turns_within_slo"]],
        }), keys=("target", "cell"), left=_left(table, "cell"), optional=True)


NO_HIT_SOURCE = "neither usage cached_tokens nor the server's prefix-cache counters"


def _hit_interval(low: float, high: float, via: str | None) -> str:
    if via == COUNTERS:
        return "none: cell-wide counters"
    return f"{text.percent(low, 1)}-{text.percent(high, 1)}" if pd.notna(low) else "-"


def session_list_section(table: pd.DataFrame) -> Section:
    """Each agent session: its lane, turns, failures, tokens, hits and span."""
    return Section(
        "session_list", "Agent sessions one by one (duration = first request sent to last answer's end; hits as in "
        "the sessions table, the achieved one by usage cached_tokens alone: the server's counters count no session)",
        table, pd.DataFrame({
            **_targeted(table), "cell": table["cell"].astype(str), "conversation": table["conversation"].astype(str),
            "copy": text.column(table["copy"], 0), "lane": text.column(table["lane"], 0),
            "turns": text.column(table["turns"], 0), "failed": text.column(table["turns_failed"], 0),
            "agents": text.column(table["agents"], 0), "prompt tokens": text.column(table["prompt_tokens"], 0),
            "completion tokens": text.column(table["completion_tokens"], 0),
            "ideal hit": [text.percent(v, 1) for v in table["ideal_prefix_hit"]],
            "achieved hit": [text.percent(v, 1) for v in table["achieved_prefix_hit"]],
            "duration s": text.column(table["duration_s"], 1),
        }), keys=("target", "cell", "conversation", "copy"), left=_left(table, "cell", "conversation"),
        optional=True)


def session_context_section(table: pd.DataFrame) -> Section:
    """The agent sessions' turns by context: TTFT and decode as the context grows."""
    return Section(
        "session_context", "Agent session turns by context (prompt tokens; answered turns; achieved hit by usage "
        "cached_tokens alone: the server's counters count no context)",
        table, pd.DataFrame({
            **_targeted(table), "cell": table["cell"].astype(str), "context": table["context"].astype(str),
            "turns": text.column(table["turns"], 0), "TTFT p50 s": text.column(table["ttft_p50_s"], 3),
            "TTFT p90 s": text.column(table["ttft_p90_s"], 3), "decode p50 t/s": text.column(table["decode_p50_tps"], 1),
            "achieved hit": [text.percent(v, 1) for v in table["achieved_prefix_hit"]],
        }), keys=("target", "cell", "context"), left=_left(table, "cell", "context"), optional=True)


def position_section(curves: pd.DataFrame) -> Section:
    """Acceptance by draft position per cell, and what it implies for shorter drafts
    (`figures.acceptance.curves` of `position_table`)."""
    return Section(
        "acceptance_by_position", "Speculative acceptance by draft position (p(k) = share of verify steps that "
        "accepted k drafts or more, from the server's counters per position or the requests' histograms of steps "
        "by drafts accepted; expected tokens/step at draft length n = 1 + p(1) + ... + p(n): an estimate of "
        "acceptance had the draft been cut to n, not of speed (a shorter draft also costs less to make and to "
        "verify; a block drafter such as DFLASH drafts otherwise at another block size); at the length run it is "
        "the accept length)",
        curves, pd.DataFrame({
            "cell": text.cell_labels(curves["cell"], curves["scenario"]),
            "from": [f"{basis} ({source})" if source else basis for basis, source in zip(curves["basis"], curves["source"])],
            "verify steps": text.column(curves["verify_steps"], 0),
            "p(k), k = 1..N": [" ".join(text.num(p, 2) for p in shares) for shares in curves["accepted_share"]],
            "expected tokens/step at draft length 1..N": [" ".join(text.num(e, 2) for e in expected)
                                                          for expected in curves["expected_tokens"]],
        }), keys=("cell", "scenario", "basis", "source"), left=("cell", "from", "p(k), k = 1..N",
                                                               "expected tokens/step at draft length 1..N"),
        optional=True)
