"""Plain-text table formatting shared by the console outputs (pandas does the layout)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

MISSING = "-"


def num(value: Any, digits: int = 1) -> str:
    """A number with fixed decimals, or "-" when it is missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return f"{value:,.{digits}f}" if abs(value) >= 10_000 else f"{value:.{digits}f}"


def span(low: Any, high: Any, digits: int = 1) -> str:
    """A min-max range the way the thread writes it: "256.2–256.3"."""
    if num(low) == MISSING:
        return MISSING
    return f"{num(low, digits)}–{num(high, digits)}"


def ratio(value: Any) -> str:
    """A speed-up factor: "1.89x"."""
    return MISSING if num(value) == MISSING else f"{value:.2f}x"


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
    text = out.to_string(index=False, col_space=[widths[col] + 2 for col in frame.columns])
    return "\n".join(line.rstrip() for line in text.splitlines())
