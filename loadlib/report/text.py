"""Number formatting and plain-text table layout for the views people read."""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import pandas as pd

MISSING = "-"


def num(value: Any, digits: int = 1) -> str:
    """A number with fixed decimals and thousands separated, or "-" when missing."""
    if value is None or pd.isna(value):
        return MISSING
    return f"{value:,.{digits}f}"


def column(values: Iterable[Any], digits: int = 1) -> list[str]:
    return [num(v, digits) for v in values]


def spans(lows: Iterable[Any], highs: Iterable[Any], digits: int = 1) -> list[str]:
    """Min-max ranges the way the thread writes them: "256.2–256.3"."""
    return [MISSING if num(lo) == MISSING else f"{num(lo, digits)}–{num(hi, digits)}"
            for lo, hi in zip(lows, highs)]


def ratio(value: Any) -> str:
    """A speed-up factor: "1.89x"."""
    return MISSING if num(value) == MISSING else f"{value:.2f}x"


def percent(value: Any, digits: int = 0) -> str:
    """A share as a percentage: 0.5 -> "50%"."""
    return MISSING if num(value) == MISSING else f"{value * 100:.{digits}f}%"


def signed_percent(value: Any) -> str:
    """A difference in percent with its sign: "+4.6%"."""
    if num(value) == MISSING or math.isinf(value):
        return MISSING
    return f"{value:+.1f}%".replace("-0.0%", "+0.0%")


def cell_labels(cells: Iterable[Any], scenarios: Iterable[Any]) -> list[str]:
    """Each cell with its scenario ("single code"); a cell named after its scenario (a locustfile's
    own task: cell and scenario both "short") or without one, alone."""
    return [str(cell) if not scenario or scenario == cell else f"{cell} {scenario}"
            for cell, scenario in zip(cells, scenarios)]


def grid(cells: pd.DataFrame, index: str, columns: str, rows_order: Sequence[Any],
         columns_order: Sequence[Any]) -> pd.DataFrame:
    """Formatted cells (a long table with a `cell` column) spread into rows x columns, "-" where
    a row has no cell in a column, with the row names as the first column."""
    wide = cells.pivot(index=index, columns=columns, values="cell").reindex(index=rows_order, columns=columns_order)
    return wide.astype(object).fillna(MISSING).rename_axis(columns=None).reset_index()


def table(frame: pd.DataFrame, left: Sequence[str] = ()) -> str:
    """Already-formatted string columns laid out by pandas, two spaces apart and indented.

    Numbers are right-aligned under right-aligned headers; `left` columns (names) read left.
    """
    if frame.empty:
        return "  (none)"
    widths = {col: max(len(str(col)), int(frame[col].str.len().max())) for col in frame.columns}
    out = frame.copy()
    for col in left:
        out[col] = out[col].str.ljust(widths[col])
    out.columns = [str(col).ljust(widths[col]) if col in left else str(col) for col in frame.columns]
    laid_out = out.to_string(index=False, col_space=[widths[col] + 2 for col in frame.columns])
    return "\n".join(line.rstrip() for line in laid_out.splitlines())
