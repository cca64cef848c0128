"""Two questions every table asks of a records column, answered in one pass over a million rows:
which rows hold one of some values (`isin`), and which values the column holds (`distinct`).

The columns that tables group and select by (cell, case, scenario) are categorical in a journal
read back (`loadlib.records.read_records_frame`); pandas' own `isin` and `unique` hash all their
rows every time, where a categorical's small integer codes answer the question directly.
"""

from __future__ import annotations

from typing import Any, Collection

import numpy as np
import pandas as pd


def isin(column: pd.Series, values: Collection[Any]) -> np.ndarray:
    """`column.isin(values)` as a boolean array."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        missing = any(pd.isna(value) for value in values)
        wanted = np.append(column.cat.categories.isin(list(values)), missing)  # code -1: missing
        return wanted[column.cat.codes.to_numpy()]
    return column.isin(values).to_numpy(dtype=bool)


def distinct(column: pd.Series) -> list[Any]:
    """The values the column holds, each once, missing ones left out (in no promised order)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        held = np.bincount(codes[codes >= 0], minlength=len(column.cat.categories)) > 0
        return list(column.cat.categories[held])
    return list(column.dropna().unique())
