"""Locust's own `--csv PREFIX` files, read when the run directory holds them, shown beside the
figures from raw records and never mixed into them (Locust's response times are ms and its
percentiles come from rounded buckets)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from loadlib.report import text
from loadlib.report.document import Section

if TYPE_CHECKING:
    from loadlib.run_view import RunView

STATS_COLUMNS = {"Type": "type", "Name": "name", "Request Count": "requests", "Failure Count": "failures",
                 "Median Response Time": "median", "Average Response Time": "average", "99%": "p99",
                 "Requests/s": "per s"}
NAME_COLUMNS = ("Type", "Name")
TOTALS = {"Request Count": "events", "Failure Count": "failures", "Requests/s": "events/s",
          "Median Response Time": "median", "99%": "p99"}


@dataclass(frozen=True)
class LocustCsv:
    """Each table is None when the run has no such file."""

    stats: pd.DataFrame | None = None  # PREFIX_stats.csv: one row per request name, plus Aggregated
    history: pd.DataFrame | None = None  # PREFIX_stats_history.csv: a row every few seconds
    failures: pd.DataFrame | None = None  # PREFIX_failures.csv


def read_locust_csv(run_dir: Path) -> LocustCsv:
    """Finds `*_stats.csv` in the run directory and reads it with its siblings of the same prefix."""
    stats_files = sorted(run_dir.glob("*_stats.csv")) if run_dir.is_dir() else []
    if not stats_files:
        return LocustCsv()
    prefix = str(stats_files[0])[: -len("_stats.csv")]
    return LocustCsv(*(_read(Path(prefix + suffix)) for suffix in ("_stats.csv", "_stats_history.csv",
                                                                   "_failures.csv")))


def _read(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        return pd.read_csv(path, na_values=["N/A"])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        warnings.warn(f"{path}: left out, not a readable CSV ({exc})", stacklevel=2)
        return None


def sections(locust: LocustCsv) -> list[Section]:
    """Locust's statistics and failures of one run, as Locust wrote them."""
    found = []
    if locust.stats is not None:
        stats = locust.stats[[c for c in STATS_COLUMNS if c in locust.stats.columns]]
        found.append(Section(
            "locust_stats", "Locust's own statistics (its --csv, as Locust recorded them: "
            "its units, percentiles from rounded buckets)",
            stats, stats.rename(columns=STATS_COLUMNS).map(_cell), keys=_names(stats),
            left=("type", "name"), optional=True))
    if locust.failures is not None:
        failures = locust.failures
        found.append(Section(
            "locust_failures", "Locust's own failures (its --csv)", failures, failures.map(_cell),
            keys=_names(failures) + (("Error",) if "Error" in failures.columns else ()),
            left=tuple(failures.columns), optional=True))
    return found


def side_by_side(runs: list["RunView"]) -> Section:
    """Locust's totals (its Aggregated row), one column a run."""
    parts = []
    for run in runs:
        stats = run.locust.stats
        if stats is not None and "Name" in stats.columns:
            total = stats.loc[stats["Name"] == "Aggregated", [c for c in TOTALS if c in stats.columns]].head(1)
            parts += [{"run": run.label, "figure": TOTALS[c], "value": total[c].iat[0]} for c in total.columns]
    data = pd.DataFrame(parts, columns=["run", "figure", "value"])
    view = text.grid(data.assign(cell=data["value"].map(_cell)), "figure", "run",
                     [f for f in TOTALS.values() if f in set(data["figure"])], [run.label for run in runs])
    return Section("locust_totals", "Locust's own totals (its --csv Aggregated row, as Locust recorded them)",
                   data, view, keys=("run", "figure"), left=("figure",), optional=True)


def _names(frame: pd.DataFrame) -> tuple[str, ...]:
    return tuple(c for c in NAME_COLUMNS if c in frame.columns)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return text.num(value, 0 if value.is_integer() else 2) if value == value else ""
    return f"{value:,}" if isinstance(value, int) else str(value)
