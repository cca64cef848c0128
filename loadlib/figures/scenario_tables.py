"""Figures of what a profile's scenarios set up: the prefix-cache state each cell meant and met,
and TTFT per turn of multi-turn conversations."""

from __future__ import annotations

import pandas as pd

from loadlib.figures.protocol_tables import ttft_percentiles

TURN_COLUMNS = ["scenario", "turn", "p50", "p90", "p99", "n", "prompt_tokens", "cached_tokens"]


def cache_state_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell and intended cache state ("cold", "warm"): requests that met cold, met warm, or
    could not tell (`cache_observed`), their cached and prompt tokens, and `flag` "MISSED" where
    a cold request was served from the cache or a warm one was not."""
    meant = df.loc[df["cache_intended"].isin(["cold", "warm"]),
                   ["cell", "cache_intended", "cache_observed", "cached_tokens", "prompt_tokens"]]
    observed = meant["cache_observed"].fillna("unknown")
    table = meant.assign(met_cold=observed == "cold", met_warm=observed == "warm",
                         unknown=observed == "unknown").groupby(["cell", "cache_intended"], sort=False,
                                                                observed=True).agg(
        n=("met_cold", "size"), met_cold=("met_cold", "sum"), met_warm=("met_warm", "sum"),
        unknown=("unknown", "sum"), cached_tokens=("cached_tokens", "sum"), prompt_tokens=("prompt_tokens", "sum"),
    ).reset_index()
    missed = ((table["cache_intended"] == "cold") & (table["met_warm"] > 0)) | (
        (table["cache_intended"] == "warm") & (table["met_cold"] > 0))
    table["flag"] = missed.map({True: "MISSED", False: ""}).astype(str)
    return table


def turn_table(df: pd.DataFrame) -> pd.DataFrame:
    """Multi-turn conversations: TTFT p50/p90/p99 and n per scenario and turn, beside the mean
    prompt and cached tokens of the turn's successful requests (agent sessions have their own
    tables, `figures.sessions`)."""
    turns = df.loc[df["turn"].notna() & df["conversation"].isna(), ["scenario", "turn", "ok", "ttft_s", "ttfo_s", "prompt_tokens", "cached_tokens"]]
    turns = turns.assign(turn=turns["turn"].astype(int))
    parts = []
    for scenario, group in turns.groupby("scenario", sort=False, observed=True):
        ok = group[group["ok"]].groupby("turn", observed=True)
        parts.append(ttft_percentiles(group, by="turn").assign(
            scenario=scenario, prompt_tokens=ok["prompt_tokens"].mean(),
            cached_tokens=ok["cached_tokens"].mean()).sort_index().reset_index(names="turn"))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=TURN_COLUMNS)
