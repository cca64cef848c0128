"""Speculative decoding as the server accounts for each request: the accept length per scenario
and per cell, decode split into verify steps per second and tokens per step, and acceptance by
draft position.

Each verify step of the target checks a draft, keeps the drafts it accepts and adds one token of
its own, so over a scenario's or a cell's requests

    accept length = (Σ accepted drafts + Σ verify steps) / Σ verify steps

in tokens per verify step (each step weighs once), from the record fields `spec_accepted_tokens`
and `spec_verify_steps`, which the server sent (`loadlib.wire.sse.spec_account`). That is the
server's figure; the client's tok/chunk (Σcomp / Σchunks of the same requests, the stream-chunk
basis) stands beside it and is never merged with it.

The thread's decomposition of decode speed, from the server's counts over the client's clock:

    decode = verify steps/s x accept length

with verify steps/s = Σ verify steps / Σ decode seconds (each request's time from its first token
to the end of its stream, the denominator of `formulas.decode_tps`), so that the product is
(Σ accepted + Σ verify steps) / Σ decode seconds; the client's own (Σcomp - 1 per request) over the
same seconds is beside it, and the two agree when the server's account covers every token after
the first.

By draft position: p_k is the share of verify steps that accepted at least k drafts (k = 1..N),
from the server's counters per position (accepted at position k - 1 over verify steps: llama.cpp,
vLLM) or from the requests' histograms of steps by drafts accepted (SGLang, vLLM). A step whose
draft were cut to n tokens would keep min(accepted, n) of them, so

    E[tokens per verify step | draft length n] = 1 + Σ_{k <= n} p_k

as long as the first n drafted tokens are the same whatever the draft's length (a chain drafter:
a draft model, EAGLE; a block drafter such as DFLASH drafts otherwise at another block size). It
estimates acceptance, not speed: a shorter draft also costs less to make and to verify. At the
draft length the server ran (n = N) it is the accept length measured.

A run whose server sent no account (and no per-position counter) gives empty tables. Whether the
requests' account adds up to the server's counters over each cell is a validity check
(`loadlib.figures.validity.spec_account_agrees`).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from loadlib.figures import formulas
from loadlib.figures.formulas import accept_length
from loadlib.figures.columns import distinct
from loadlib.truth.server_figures import SpecCounters, cell_records, cell_scenario

ACCEPT_COLUMNS = ["requests", "verify_steps", "accepted_tokens", "draft_tokens", "accept_length",
                  "draft_acceptance", "client_tok_per_chunk", "verify_steps_per_s", "decode_tps",
                  "client_decode_tps"]
POSITION_COLUMNS = ["cell", "scenario", "basis", "source", "verify_steps", "position", "accepted_share",
                    "expected_tokens"]
CURVE_COLUMNS = ["cell", "scenario", "basis", "source", "verify_steps", "accepted_share", "expected_tokens"]
COUNTERS, HISTOGRAMS = "counters", "per-request histograms"


def accounted(records: pd.DataFrame) -> pd.DataFrame:
    """The successful requests the server gave an account of (verify steps and accepted drafts)."""
    return records[records["ok"].astype(bool) & records["spec_verify_steps"].notna()
                   & records["spec_accepted_tokens"].notna()]


def acceptance_table(records: pd.DataFrame, by: Sequence[str] = ("scenario",)) -> pd.DataFrame:
    """One row per group of `by` (first seen first) whose requests carry the server's account:
    `requests` (those that do), the summed verify steps, accepted and draft tokens, the
    `accept_length`, `draft_acceptance` (accepted / draft tokens), the client's tok/chunk of the
    same requests, and the decomposition (`verify_steps_per_s`, `decode_tps` = their product,
    `client_decode_tps`) over those with a decode time. Empty when none carries an account."""
    own = accounted(records)
    rows = []
    for keys, group in own.groupby(list(by), sort=False, observed=True):
        keys = keys if isinstance(keys, tuple) else (keys,)
        rows.append({**dict(zip(by, keys)), **_account_row(group)})
    return pd.DataFrame(rows, columns=[*by, *ACCEPT_COLUMNS])


def _account_row(group: pd.DataFrame) -> dict[str, Any]:
    steps, accepted = group["spec_verify_steps"].sum(), group["spec_accepted_tokens"].sum()
    drafts = group["spec_draft_tokens"].sum(min_count=len(group))
    timed = group[group["decode_tps"].notna()]
    decode_s = float((timed["total_s"] - timed["ttft_s"]).sum())
    timed_steps = float(timed["spec_verify_steps"].sum())
    length = float(accept_length(steps, accepted))
    steps_per_s = timed_steps / decode_s if decode_s > 0 else np.nan
    return {
        "requests": len(group), "verify_steps": float(steps), "accepted_tokens": float(accepted),
        "draft_tokens": float(drafts), "accept_length": length,
        "draft_acceptance": accepted / drafts if drafts > 0 else np.nan,
        "client_tok_per_chunk": float(formulas.tok_per_chunk(group["completion_tokens"].sum(), group["chunks"].sum()))
        if group["chunks"].sum() > 0 else np.nan,
        "verify_steps_per_s": steps_per_s,
        "decode_tps": steps_per_s * float(accept_length(timed_steps, timed["spec_accepted_tokens"].sum())),
        "client_decode_tps": float((timed["completion_tokens"] - 1).sum()) / decode_s if decode_s > 0 else np.nan,
    }


# --- by draft position ------------------------------------------------------------------------

def shares_from_counters(per_position: Sequence[float], verify_steps: float | None) -> list[float]:
    """p_1..p_N from the counters' changes: accepted at position k - 1 over verify steps."""
    if not verify_steps or not per_position:
        return []
    return [accepted / verify_steps for accepted in per_position]


def shares_from_histograms(histograms: Iterable[str]) -> tuple[list[float], int]:
    """p_1..p_N and the verify steps they rest on, from histograms of steps by drafts accepted
    ("12,3,0,5": 12 steps accepted none, 3 one, ...), summed over the requests."""
    total: list[int] = []
    for text in histograms:
        counts = [int(n) for n in text.split(",")]
        total += [0] * (len(counts) - len(total))
        for accepted, steps in enumerate(counts):
            total[accepted] += steps
    steps = sum(total)
    if not steps:
        return [], 0
    at_least = np.cumsum(total[::-1])[::-1]  # steps that accepted k drafts or more, k = 0..N
    return [float(n) / steps for n in at_least[1:]], steps


def expected_tokens(shares: Sequence[float]) -> list[float]:
    """E[tokens per verify step] at draft lengths 1..N: 1 + Σ_{k<=n} p_k (an estimate of
    acceptance, not of speed: see the module's docstring)."""
    return [1.0 + float(total) for total in np.cumsum(shares)]


def position_table(records: pd.DataFrame, counters: Iterable[SpecCounters] = ()) -> pd.DataFrame:
    """Acceptance by draft position per measured cell: one row per position k (from 1) with p_k
    (`accepted_share`) and the expected tokens per verify step had the draft been k long. From
    the server's counters per position where the cell has them (`basis` "counters", one curve per
    source and cell), else from the requests' histograms (one curve per cell and scenario, so a
    mixed cell is split by content). Empty without either."""
    measured = set(distinct(records["cell"]))
    rows: list[dict[str, Any]] = []
    counted: set[str] = set()
    for c in counters:
        shares = shares_from_counters(c.accepted_per_position, c.verify_steps)
        if c.span.cell not in measured or not shares:
            continue
        counted.add(c.span.cell)
        rows += _curve(c.span.cell, cell_scenario(c.span, cell_records(records, c.span)), COUNTERS, c.source,
                       c.verify_steps or 0.0, shares)
    own = accounted(records)
    own = own[own["spec_accept_histogram"].notna() & ~own["cell"].isin(counted)]
    for (cell, scenario), group in own.groupby(["cell", "scenario"], sort=False, observed=True):
        shares, steps = shares_from_histograms(group["spec_accept_histogram"])
        rows += _curve(str(cell), str(scenario), HISTOGRAMS, "", steps, shares)
    return pd.DataFrame(rows, columns=POSITION_COLUMNS)


def curves(positions: pd.DataFrame) -> pd.DataFrame:
    """`position_table` with one row per curve (cell, scenario, basis, source), its p_k and its
    expected tokens per verify step as lists in position order (k = 1..N)."""
    keys = ["cell", "scenario", "basis", "source"]
    rows = [{**dict(zip(keys, key)), "verify_steps": float(group["verify_steps"].iat[0]),
             "accepted_share": group["accepted_share"].tolist(), "expected_tokens": group["expected_tokens"].tolist()}
            for key, group in positions.groupby(keys, sort=False)]
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def pooled_expected_tokens(positions: pd.DataFrame) -> list[float]:
    """The expected tokens per verify step at draft lengths 1..N over every curve of a run (a
    sweep's configuration): each p_k the curves' weighted by their verify steps, a curve without
    position k counting 0 there (its draft was shorter)."""
    if positions.empty:
        return []
    steps = positions.drop_duplicates(["cell", "scenario", "basis", "source"])["verify_steps"].sum()
    if not steps:
        return []
    weighted = (positions["accepted_share"] * positions["verify_steps"]).groupby(positions["position"]).sum()
    return expected_tokens((weighted.sort_index() / steps).tolist())


def _curve(cell: str, scenario: str, basis: str, source: str, steps: float, shares: list[float]) -> list[dict]:
    return [{"cell": cell, "scenario": scenario, "basis": basis, "source": source, "verify_steps": float(steps),
             "position": k, "accepted_share": share, "expected_tokens": expected}
            for k, (share, expected) in enumerate(zip(shares, expected_tokens(shares)), start=1)]
