"""Agent sessions (the records that carry a `conversation`: the sessions mode's): how close the
server's prefix cache came to the ideal, per cell and per session, and the turns' TTFT and decode
against their context.

- A session is one copy of one conversation in one cell (and target): its turns are its agents'
  requests, sub-agents' included; its span from its first request's send to its last one's end.
- The ideal prefix hit is sum(ideal_cached_tokens) / sum(prompt_tokens) over the turns that were
  answered with `usage.prompt_tokens_details.cached_tokens`, the achieved one sum(cached_tokens)
  over the same sum (token-weighted; `ideal_cached_tokens` is the hash blocks an infinite cache
  would hold, counted as the requests went out). Its 95 % interval resamples the sessions (their
  sums together, `bootstrap.resampled` with blocks of 1: the ratio of resampled sums), so a session
  that hit badly weighs as one, not as its many turns.
- A cell none of whose turns came back with cached tokens (a server that does not report them)
  takes its achieved hit from the server's prefix-cache counters over the cell instead
  (`achieved_via`: `USAGE` or `COUNTERS`, never both in one figure; `counted_hits`): hit / queried
  tokens from the cell's start scrape to its end, the ideal then over every answered turn. The
  counters give one figure for the whole cell, so it has no interval over sessions and no turn
  misses the ideal by it. A cell with neither has no achieved hit (`achieved_via` None).
- A turn misses the ideal when the server cached more than a hash block less than the ideal held.
- The context-overflow rate is the share of turns refused for the model's context (by the client,
  which knows it from /v1/models, or by the server's own error); above 1 % the cell's figures
  describe a different workload than the trace's, and the cell is flagged.
- Lanes offered are the cell's sessions at once; lanes live the mean sessions in progress over
  the cell (the sum of the sessions' spans over the cell's span): fewer means lanes idled between
  sessions, or had none left to play.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from loadlib.figures.bootstrap import resampled
from loadlib.figures.formulas import from_intended_send, meets_slo
from loadlib.figures.goodput import DEFAULT_SLO, Slo
from loadlib.figures.uncertainty import LEVEL
from loadlib.scenarios.base import CONTEXT_OVERFLOW
from loadlib.truth.server_figures import PrefixCounters, cell_sources

OVERFLOW_LIMIT = 0.01  # a cell with more of its turns beyond the context is flagged
SERVER_OVERFLOW = "context length"  # SGLang's and vLLM's refusal of a prompt beyond the context says it
DEFAULT_BLOCK_TOKENS = 64  # every public cc-trace's block_size, where the run did not note one
CONTEXT_BINS = (0, 4096, 8192, 16384, 32768, 65536, 131072, 262144, np.inf)
SEED = 0
USAGE, COUNTERS = "usage", "server counters"  # where a cell's achieved hit came from (`achieved_via`)

SESSION_KEYS = ["target", "cell", "conversation", "copy"]
CELL_COLUMNS = ["target", "cell", "sessions", "turns", "turns_failed", "ideal_prefix_hit", "achieved_prefix_hit",
                "achieved_via", "achieved_prefix_hit_ci_low", "achieved_prefix_hit_ci_high", "turns_missing_ideal",
                "context_overflow_rate", "overflow_flag", "lanes_offered", "lanes_live", "ttft_p50_s", "ttft_p90_s",
                "decode_p50_tps", "turns_within_slo"]
SESSION_COLUMNS = [*SESSION_KEYS, "lane", "turns", "turns_failed", "agents", "prompt_tokens", "completion_tokens",
                   "ideal_prefix_hit", "achieved_prefix_hit", "duration_s"]
CONTEXT_COLUMNS = ["target", "cell", "context", "turns", "ttft_p50_s", "ttft_p90_s", "decode_p50_tps",
                   "achieved_prefix_hit"]


def session_records(df: pd.DataFrame) -> pd.DataFrame:
    """The records of agent sessions, with `overflow` (refused for the context), `answered` (with
    its prompt tokens) and `hit_known` (answered, with cached tokens) per turn."""
    if "conversation" not in df.columns:
        return df.iloc[0:0]
    turns = df[df["conversation"].notna()].copy()
    error = turns["error"].fillna("").astype(str)
    turns["overflow"] = error.str.startswith(CONTEXT_OVERFLOW) | error.str.contains(SERVER_OVERFLOW, regex=False)
    turns["answered"] = turns["ok"] & turns["prompt_tokens"].notna()
    turns["hit_known"] = turns["answered"] & turns["cached_tokens"].notna()
    turns["ended_at"] = turns["sent_at"] + turns["total_s"].fillna(0.0)
    return turns


def sessions_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per session: its turns, failures, tokens, ideal and achieved hit, and span."""
    turns = session_records(df)
    if turns.empty:
        return pd.DataFrame(columns=SESSION_COLUMNS)
    rows = []
    for key, group in turns.groupby(SESSION_KEYS, sort=False, observed=True, dropna=False):
        known = group[group["hit_known"]]
        prompt = known["prompt_tokens"].sum()
        rows.append(dict(zip(SESSION_KEYS, key), lane=int(group["slot"].iloc[0]), turns=len(group),
                         turns_failed=int((~group["ok"]).sum()), agents=group["agent"].nunique(),
                         prompt_tokens=group["prompt_tokens"].sum(), completion_tokens=group["completion_tokens"].sum(),
                         ideal_prefix_hit=known["ideal_cached_tokens"].sum() / prompt if prompt else np.nan,
                         achieved_prefix_hit=known["cached_tokens"].sum() / prompt if prompt else np.nan,
                         duration_s=group["ended_at"].max() - group["sent_at"].min()))
    return pd.DataFrame(rows, columns=SESSION_COLUMNS)


def hit_interval(cached: np.ndarray, prompt: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The interval of sum(cached) / sum(prompt) over sessions (each its sums), resampling the
    sessions; NaN for fewer than two sessions."""
    if len(prompt) < 2:
        return np.nan, np.nan

    def ratio(indices: list[np.ndarray]) -> np.ndarray:
        index = indices[0]
        return cached[index].sum(axis=1) / np.maximum(prompt[index].sum(axis=1), 1)
    values = resampled(ratio, [len(prompt)], [1], np.random.default_rng(SEED))
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def counted_hits(counters: Iterable[PrefixCounters]) -> dict[str, tuple[float, float]]:
    """Per cell, the server's prefix-cache hit and queried tokens by its counters
    (`server_figures.prefix_counters` of one server's scrapes): the target's page where it counts
    them, else the sum of the pages that do (each instance behind a router, `--worker-metrics`),
    over every span of the cell."""
    counters = list(counters)
    found: dict[str, tuple[float, float]] = {}
    for cell in dict.fromkeys(c.span.cell for c in counters):
        chosen = [c for sources in cell_sources(cell, counters) for c in sources]
        found[cell] = (sum(c.hit_tokens for c in chosen), sum(c.queried_tokens for c in chosen))
    return found


def achieved_hit(known: pd.DataFrame, answered: pd.DataFrame, counted: tuple[float, float] | None,
                 block_tokens: int = DEFAULT_BLOCK_TOKENS) -> dict[str, Any]:
    """A cell's ideal and achieved prefix hit from one source: its turns' usage cached tokens where
    any turn has them (`known`, the interval resampling sessions), else the server's counters over
    the cell (`counted`: hit, queried tokens; the ideal over every `answered` turn, no interval),
    else none."""
    via = USAGE if len(known) else COUNTERS if counted else None
    turns = known if via == USAGE else answered
    per_session = turns.groupby(["conversation", "copy"], observed=True)[
        ["cached_tokens", "ideal_cached_tokens", "prompt_tokens"]].sum()
    total = per_session["prompt_tokens"].sum()
    figures = {"ideal_prefix_hit": per_session["ideal_cached_tokens"].sum() / total if total else np.nan,
               "achieved_prefix_hit": np.nan, "achieved_via": via,
               "achieved_prefix_hit_ci_low": np.nan, "achieved_prefix_hit_ci_high": np.nan,
               "turns_missing_ideal": np.nan}
    if via == COUNTERS:
        figures["achieved_prefix_hit"] = counted[0] / counted[1]
    elif via == USAGE:
        prompt = per_session["prompt_tokens"].to_numpy(float)
        low, high = hit_interval(per_session["cached_tokens"].to_numpy(float), prompt)
        figures |= {"achieved_prefix_hit": per_session["cached_tokens"].sum() / total if total else np.nan,
                    "achieved_prefix_hit_ci_low": low, "achieved_prefix_hit_ci_high": high,
                    "turns_missing_ideal": float((known["ideal_cached_tokens"] - known["cached_tokens"]
                                                  > block_tokens).mean())}
    return figures


def cell_table(df: pd.DataFrame, block_tokens: int = DEFAULT_BLOCK_TOKENS, slo: Slo = DEFAULT_SLO,
               counted: Mapping[str, tuple[float, float]] | None = None) -> pd.DataFrame:
    """One row per sessions cell (and target): the issue's keys (`report --json`'s "sessions"), and
    the share of turns within the SLO's goodput targets (TTFT from when the turn was due: a turn
    that waited for a free user waited in the agent's eyes). `counted`: one server's prefix-cache
    counters per cell (`counted_hits`), for the cells whose turns carry no cached tokens."""
    turns = session_records(df)
    if turns.empty:
        return pd.DataFrame(columns=CELL_COLUMNS)
    rows = []
    for (target, cell), group in turns.groupby(["target", "cell"], sort=False, observed=True):
        hits = achieved_hit(group[group["hit_known"]], group[group["answered"]], (counted or {}).get(cell),
                            block_tokens)
        spans = group.groupby(["conversation", "copy"], observed=True).agg(start=("sent_at", "min"),
                                                                         end=("ended_at", "max"))
        span = spans["end"].max() - spans["start"].min()
        overflow = float(group["overflow"].mean())
        ok = group[group["ok"]]
        rows.append({
            "target": target, "cell": cell, "sessions": len(spans), "turns": len(group),
            "turns_failed": int((~group["ok"]).sum()), **hits,
            "context_overflow_rate": overflow, "overflow_flag": overflow > OVERFLOW_LIMIT,
            "lanes_offered": int(group["concurrency"].iloc[0]),
            "lanes_live": float((spans["end"] - spans["start"]).sum() / span) if span > 0 else np.nan,
            "ttft_p50_s": ok["ttft_s"].quantile(0.5), "ttft_p90_s": ok["ttft_s"].quantile(0.9),
            "decode_p50_tps": ok["decode_tps"].quantile(0.5),
            "turns_within_slo": float(meets_slo(group["ok"], from_intended_send(group["ttft_s"], group["queue_s"]),
                                                group["decode_tps"], slo.ttft_s, slo.decode_tps).mean()),
        })
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


def context_table(df: pd.DataFrame) -> pd.DataFrame:
    """The answered turns' TTFT and decode by their context (the prompt's tokens), in bins that
    double: what a longer session costs each turn."""
    turns = session_records(df)
    turns = turns[turns["ok"]]
    if turns.empty:
        return pd.DataFrame(columns=CONTEXT_COLUMNS)
    bins = pd.cut(turns["prompt_tokens"], CONTEXT_BINS, right=False)
    rows = []
    for (target, cell, interval), group in turns.groupby(["target", "cell", bins], sort=False, observed=True):
        known = group[group["hit_known"]]
        prompt = known["prompt_tokens"].sum()
        rows.append({"target": target, "cell": cell, "context": _bin_name(interval), "turns": len(group),
                     "ttft_p50_s": group["ttft_s"].quantile(0.5), "ttft_p90_s": group["ttft_s"].quantile(0.9),
                     "decode_p50_tps": group["decode_tps"].quantile(0.5),
                     "achieved_prefix_hit": known["cached_tokens"].sum() / prompt if prompt else np.nan,
                     "_low": interval.left})
    table = pd.DataFrame(rows).sort_values(["target", "cell", "_low"], kind="stable")
    return table.drop(columns="_low").reset_index(drop=True)[CONTEXT_COLUMNS]


def _bin_name(interval: pd.Interval) -> str:
    low, high = interval.left, interval.right
    return f">= {low / 1024:g}k" if np.isinf(high) else f"{low / 1024:g}k-{high / 1024:g}k"


def lane_spans(df: pd.DataFrame, origin: float) -> pd.DataFrame:
    """Each agent-session turn as a span on its lane, for the swim lanes: `x` its send and `end` its
    end (seconds from `origin`), `name` "main agent" or "sub-agent", and `y` its row: each lane has
    as many rows as the most agents any lane had at work at once, an agent takes its lane's lowest
    row free from its first send to its last end (a main agent the first, its sub-agents those
    above); the gaps between spans are the agents' think time."""
    turns = session_records(df)
    if turns.empty:
        return pd.DataFrame(columns=["x", "end", "y", "name"])
    keys = ["target", "cell", "slot", "conversation", "copy", "agent"]
    agents = turns.groupby(keys, observed=True, sort=False).agg(start=("sent_at", "min"), stop=("ended_at", "max"))
    agents = agents.reset_index().sort_values("start", kind="stable")
    rows: dict[tuple, list[float]] = {}  # (target, cell, lane) -> each row's end so far
    row_of = {}
    for agent in agents.itertuples(index=False):
        ends = rows.setdefault((agent.target, agent.cell, agent.slot), [])
        row = next((i for i, end in enumerate(ends) if end <= agent.start), len(ends))
        if row < len(ends):
            ends[row] = agent.stop
        else:
            ends.append(agent.stop)
        row_of[tuple(getattr(agent, key) for key in keys)] = row
    per_lane = max(len(ends) for ends in rows.values())
    row = np.array([row_of[key] for key in zip(*(turns[key] for key in keys))], dtype=float)
    return pd.DataFrame({"x": turns["sent_at"] - origin, "end": turns["ended_at"] - origin,
                         "y": turns["slot"].to_numpy(float) * per_lane + row,
                         "name": np.where(turns["agent"] == "main", "main agent", "sub-agent")}).reset_index(drop=True)
