"""The end-of-run summary: the protocol's tables for a rounds run, the steady-state figures for a
free-running one, and beside them what a profile's scenarios add (prefill per target size, the
cache state each cell meant and met, TTFT per conversation turn).

Only measured requests count (warm-up, priming and calibration are left out). Every figure comes
from `loadlib.metrics`; the tables are laid out with the `analysis` package's sections, so the
live summary and `python -m analysis report` show the same numbers where both show a table.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd

from analysis import text
from analysis.document import Document, Section
from analysis.formats import console
from analysis.report import prefill, steady_percentiles, steady_state
from analysis.summary import cut_short, render_protocol_summary
from loadlib import metrics
from loadlib.profiles import Profile

DEFAULT_SLO_TTFT_S = 2.0  # as `python -m analysis report` assumes without --slo-ttft
DEFAULT_SLO_DECODE_TPS = 20.0


def render_run_summary(records: Iterable[dict[str, Any]], manifest: Mapping[str, Any], profile: Profile) -> str:
    """The text printed and saved as summary.txt at the end of a run of `profile`."""
    records = list(records)
    df = metrics.records_frame(records)  # measured requests only
    extra = [prefill(metrics.prefill_table(df[df["scenario"].str.startswith("long-context")])),
             cache_section(df), turn_section(df)]
    if profile.load.mode == "rounds":
        shown = [section for section in extra if not section.data.empty]
        tail = console.render(Document("", shown)).lstrip("\n") if shown else ""
        return render_protocol_summary(records, manifest) + ("\n\n" + tail if tail else "")
    ttft = profile.slo.ttft_s or DEFAULT_SLO_TTFT_S
    decode = profile.slo.decode_tps or DEFAULT_SLO_DECODE_TPS
    sections = [steady_state(metrics.steady_state_table(df, ttft, decode), ttft, decode),
                steady_percentiles(metrics.steady_percentiles(df)), *extra, failures_section(df)]
    return console.render(Document(heading(df, manifest, profile), sections))


def heading(df: pd.DataFrame, manifest: Mapping[str, Any], profile: Profile) -> str:
    target = manifest.get("target") or {}
    parts = [f"{profile.load.mode} run", f"model {manifest.get('model')}", f"target {target.get('url')}"]
    max_tokens = sorted(df["max_tokens"].dropna().astype(int).unique())
    if max_tokens:
        parts.append("max_tokens " + "/".join(map(str, max_tokens)))
    thinking = set(df["thinking"].astype(bool))
    parts.append("thinking " + ("on and off" if len(thinking) > 1 else "ON" if True in thinking else "off"))
    parts.append(f"{len(df)} measured requests, {int((~df['ok']).sum())} failed")
    cut = cut_short(manifest)
    if cut:
        parts.append(f"CUT SHORT ({cut}): the figures cover only the requests that finished")
    return "uni-bench summary: " + ", ".join(parts)


def cache_section(df: pd.DataFrame) -> Section:
    """Per cell and intended state: what the requests met. A cold request served from the cache,
    or a warm one that missed, is flagged."""
    meant = df[df["cache_intended"].isin(["cold", "warm"])]
    observed = meant["cache_observed"].fillna("unknown")
    table = meant.assign(met_cold=observed == "cold", met_warm=observed == "warm",
                         unknown=observed == "unknown").groupby(["cell", "cache_intended"], sort=False).agg(
        n=("request_id", "size"), met_cold=("met_cold", "sum"), met_warm=("met_warm", "sum"),
        unknown=("unknown", "sum"), cached_tokens=("cached_tokens", "sum"), prompt_tokens=("prompt_tokens", "sum"),
    ).reset_index()
    missed = ((table["cache_intended"] == "cold") & (table["met_warm"] > 0)) | (
        (table["cache_intended"] == "warm") & (table["met_cold"] > 0))
    table["flag"] = missed.map({True: "MISSED", False: ""})
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


def turn_section(df: pd.DataFrame) -> Section:
    """Multi-turn conversations: TTFT per scenario and turn, beside the growing prompt and its
    cached part."""
    turns = df[df["turn"].notna()].assign(turn=lambda d: d["turn"].astype(int))
    parts = []
    for scenario, group in turns.groupby("scenario", sort=False):
        ok = group[group["ok"]].groupby("turn")
        parts.append(metrics.ttft_percentiles(group, by="turn").assign(
            scenario=scenario, prompt_tokens=ok["prompt_tokens"].mean(),
            cached_tokens=ok["cached_tokens"].mean()).sort_index().reset_index(names="turn"))
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["scenario", "turn", "p50", "p90", "p99", "n", "prompt_tokens", "cached_tokens"])
    return Section(
        "turns", "Multi-turn: TTFT per turn (s; each turn resends the history, so later turns hit the cache)",
        table, pd.DataFrame({
            "scenario": [str(s) for s in table["scenario"]],
            "turn": [str(t) for t in table["turn"]],
            "prompt tokens": text.column(table.get("prompt_tokens", []), 0),
            "cached tokens": text.column(table.get("cached_tokens", []), 0),
            **{col: text.column(table.get(col, []), 3) for col in ("p50", "p90", "p99")},
            "n": text.column(table.get("n", []), 0),
        }), keys=("scenario", "turn"), left=("scenario",), optional=True)


def failures_section(df: pd.DataFrame) -> Section:
    failures = metrics.failures_table(df)
    return Section("failures", "Failures by reason (excluded from every figure above)", failures,
                   failures.astype(str), keys=("cell", "error"), left=("cell", "error"))
