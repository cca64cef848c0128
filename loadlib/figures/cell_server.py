"""One cell's server side as other tools count it, for the exports (`loadlib.outputs.llmd`'s
observability): what each scraped source's `/metrics` said during the cell, and the GPUs' power.

- Gauges: the requests running and queued and the KV-cache use (a share, 0-1) at each scrape taken
  during the cell (its interval scrapes, between its start and end scrapes: `series.server_timeline`
  reads them), as a distribution (`cell_requests.distribution`). A cell played once per scenario
  (the protocol's single-stream cell) pools the scrapes of its spans.
- Prefix hit rate: the server view's (`server_figures.server_cells`: hit over queried tokens from
  counters, else the server's gauge), one per span of the cell.
- Power: the GPUs together (the energy table's row of every GPU where several were read, else its
  one GPU): the cell's mean watts are its joules over its seconds, summed over its spans
  (`energy.mean_watts`), its peak the highest of theirs.

Cells no scrape framed (a locustfile's own users, read as one `WHOLE_RUN` span) have none of these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from loadlib.figures.cell_requests import distribution
from loadlib.figures.energy import mean_watts
from loadlib.figures.series import server_timeline
from loadlib.truth import energy
from loadlib.truth.server_figures import ServerCell

GAUGES = ("running", "queued", "kv_use")  # `series.SERVER_SERIES` read as distributions here


@dataclass(frozen=True)
class SourceFigures:
    """One scraped source's figures over one cell: each of `GAUGES` as a distribution over the
    scrapes taken during it (None where the server has no such gauge or no scrape came), and its
    prefix hit rate in each span of the cell that has one."""

    source: str
    gauges: dict[str, dict[str, float] | None]
    prefix_hit_rates: tuple[float, ...]


@dataclass(frozen=True)
class CellPower:
    """The GPUs' power over one cell; None where it cannot be had (an energy counter that did not move)."""

    mean_watts: float | None
    peak_watts: float | None


def source_figures(cell: str, scrapes: Iterable[dict[str, Any]], servers: Sequence[ServerCell]) -> list[SourceFigures]:
    """Per scraped source of a known flavour, in the order first scraped, its figures over the
    cell named `cell`, from the run's parsed scrapes and its server view's cells; sources with none
    are left out."""
    during = [entry for entry in scrapes if entry.get("cell") == cell and entry.get("phase") == "interval"
              and not entry.get("error")]
    timeline = server_timeline(during, 0.0)
    rates: dict[str, list[float]] = {}
    for server in servers:
        if server.span.cell == cell and server.prefix_hit_rate is not None:
            rates.setdefault(server.source, []).append(server.prefix_hit_rate)
    found = []
    for source in dict.fromkeys([*timeline["source"], *rates]):
        own = timeline[timeline["source"] == source]
        gauges = {name: distribution(own[name].to_numpy(dtype="float64")) for name in GAUGES}
        if any(gauges.values()) or source in rates:
            found.append(SourceFigures(str(source), gauges, tuple(rates.get(source, ()))))
    return found


def cell_power(cell: str, table: pd.DataFrame) -> CellPower | None:
    """The GPUs' power over the cell named `cell` from the run's energy table
    (`loadlib.figures.energy.energy_table`); None where no GPU was read during it."""
    rows = table[table["cell"] == cell]
    if (rows["gpu"] == energy.ALL).any():
        rows = rows[rows["gpu"] == energy.ALL]
    if rows.empty:
        return None
    known = rows[rows["joules"].notna()]
    peaks = rows["peak_watts"].to_numpy(dtype="float64")
    return CellPower(mean_watts(float(known["joules"].sum()), float(known["seconds"].sum())) if len(known) else None,
                     float(np.nanmax(peaks)) if np.isfinite(peaks).any() else None)
