"""Energy per cell: each GPU's joules, mean and peak watts over a cell (`loadlib.truth.energy`
reads them from the GPU meter's scrapes), and what they cost per completion token.

The tokens are those of the cell's successful requests (the records of the cell sent between its
start and end scrapes, as the server view takes them): what the energy delivered. The watts are
of the whole GPU, whatever else ran on it, as the server's counters count whoever asked.
"""

from __future__ import annotations

from typing import Any, Iterable

import pandas as pd

from loadlib.figures.columns import distinct
from loadlib.truth import energy
from loadlib.truth.server_figures import cell_records, cell_scenario

COLUMNS = ["cell", "scenario", "gpu", "joules", "seconds", "mean_watts", "peak_watts", "completion_tokens",
           "joules_per_token", "tokens_per_joule", "energy_via", "samples", "meter"]
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
        rows.append({
            "cell": cell.span.cell, "scenario": cell_scenario(cell.span, own), "gpu": cell.gpu,
            "joules": cell.joules, "seconds": cell.seconds, "mean_watts": mean_watts(cell.joules, cell.seconds),
            "peak_watts": cell.peak_watts, "completion_tokens": tokens,
            "joules_per_token": joules_per_token(cell.joules, tokens),
            "tokens_per_joule": tokens_per_joule(tokens, cell.joules),
            "energy_via": cell.energy_via, "samples": cell.samples, "meter": cell.meter,
        })
    return pd.DataFrame(rows, columns=COLUMNS)


def mean_watts(joules: float | None, seconds: float) -> float | None:
    return joules / seconds if joules is not None and seconds > 0 else None


def joules_per_token(joules: float | None, completion_tokens: float) -> float | None:
    return joules / completion_tokens if joules is not None and completion_tokens > 0 else None


def tokens_per_joule(completion_tokens: float, joules: float | None) -> float | None:
    return completion_tokens / joules if joules else None
