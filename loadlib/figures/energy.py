"""Energy per cell: each GPU's joules, mean and peak watts over a cell (`loadlib.truth.energy`
reads them from the GPU meter's scrapes), and what they cost per completion token.

The tokens are those of the cell's successful requests (the records of the cell sent between its
start and end scrapes, as the server view takes them): what the energy delivered. The watts are
of the whole GPU, whatever else ran on it, as the server's counters count whoever asked.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import pandas as pd

from loadlib.figures.columns import distinct
from loadlib.truth import energy
from loadlib.truth.server_figures import cell_records, cell_scenario

COLUMNS = ["cell", "scenario", "gpu", "joules", "seconds", "mean_watts", "peak_watts", "completion_tokens",
           "joules_per_token", "tokens_per_joule", "energy_via", "samples", "meter"]
# How far a steady draw's power samples and the energy counter's mean may differ: within 1 % on an
# H100 (docs/server-truth.md), and a short cell's edges add a few tenths
FLAT_DRAW = 0.03
RECORD_COLUMNS = ["cell", "sent_at", "scenario", "ok", "completion_tokens"]  # what the table reads of the records


def energy_table(entries: Iterable[dict[str, Any]], records: pd.DataFrame) -> pd.DataFrame:
    """One row per cell and GPU, and one of every GPU together (`gpu` "all") where several were
    read, from the run's parsed scrapes (`read_scrapes(run_dir, energy.NAMES_READ)`; the GPU
    meter's alone will do) and its measured records; a cell with no measured records (warm-up,
    priming) is left out. No rows for a run without a GPU meter."""
    records = records[RECORD_COLUMNS]
    measured = set(distinct(records["cell"]))
    rows = []
    for cell in energy.gpu_cells(entries):
        if cell.span.cell not in measured:
            continue
        own = cell_records(records, cell.span)
        tokens = float(own.loc[own["ok"].astype(bool), "completion_tokens"].sum())
        mean = mean_watts(cell.joules, cell.seconds)
        rows.append({
            "cell": cell.span.cell, "scenario": cell_scenario(cell.span, own), "gpu": cell.gpu,
            "joules": cell.joules, "seconds": cell.seconds, "mean_watts": mean,
            "peak_watts": peak_watts(cell.peak_watts, mean), "completion_tokens": tokens,
            "joules_per_token": joules_per_token(cell.joules, tokens),
            "tokens_per_joule": tokens_per_joule(tokens, cell.joules),
            "energy_via": cell.energy_via, "samples": cell.samples, "meter": cell.meter,
        })
    return pd.DataFrame(rows, columns=COLUMNS)


def mean_watts(joules: float | None, seconds: float) -> float | None:
    return joules / seconds if joules is not None and seconds > 0 else None


def peak_watts(sampled_peak: float | None, mean: float | None) -> float | None:
    """The highest power sampled during the cell, where it is one: a highest sample clearly below
    the cell's mean power (from the energy counter) missed the peaks (one scrape of a power gauge,
    a sampler that ran once), so it is no peak and none is given. On a steady draw the two agree
    within `FLAT_DRAW`: the counter is read a few ms off each edge of a short cell."""
    if sampled_peak is None or (mean is not None and sampled_peak < mean * (1 - FLAT_DRAW)):
        return None
    return sampled_peak


def joules_per_token(joules: float | None, completion_tokens: float) -> float | None:
    return joules / completion_tokens if joules is not None and completion_tokens > 0 else None


def tokens_per_joule(completion_tokens: float, joules: float | None) -> float | None:
    return completion_tokens / joules if joules else None


def pooled(table: pd.DataFrame) -> dict[str, float]:
    """Completion tokens per joule and joules per token over every cell of an `energy_table`, all
    GPUs together (each cell's "all" row where several GPUs were read, else its one GPU's): Σ tokens
    / Σ joules over the cells whose joules are known. NaN for both without such a cell."""
    together = table[table["gpu"] == energy.ALL] if (table["gpu"] == energy.ALL).any() else table
    known = together[together["joules"].notna()]
    joules, tokens = float(known["joules"].sum()), float(known["completion_tokens"].sum())
    if not joules or not tokens:
        return {"tokens_per_joule": math.nan, "joules_per_token": math.nan}
    return {"tokens_per_joule": tokens / joules, "joules_per_token": joules / tokens}


def json_rows(table: pd.DataFrame, **labels: str) -> list[dict[str, Any]]:
    """`report --json`'s `"energy"`: per cell and GPU (`gpu` "all" for every GPU summed) its joules,
    mean and peak watts, J/token and tokens/J, null where unknown; `labels` added to every row (an
    A/B run's `target`)."""
    found = table[["cell", "gpu", "joules", "mean_watts", "peak_watts", "joules_per_token", "tokens_per_joule"]]
    return [{**labels, **row} for row in found.astype(object).where(found.notna(), None).to_dict("records")]
