"""Questions every table asks of a records column, answered in a pass or two over a million rows:
which rows hold one of some values (`isin`), which values it holds (`distinct`), and which, as
small integer codes (`coded`), where each first appears (`first_seen`).

The columns that tables group and select by (cell, case, scenario) are categorical in a journal
read back (`loadlib.record_table.read_records_frame`); pandas' own `isin`, `unique` and `factorize`
hash all their rows every time (`unique` with a hash table as long as the column), where a
categorical's small integer codes answer the question directly.
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
        found = column.cat.codes.to_numpy()  # a pass per category: nothing as long as the column is made
        return [value for code, value in enumerate(column.cat.categories) if (found == code).any()]
    return list(column.dropna().unique())


def coded(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """The column's values as small integer codes (-1: missing) and the values they stand for: a
    categorical's own codes, not a copy; any other column factorised."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), column.cat.categories
    found, values = pd.factorize(column)
    return found, pd.Index(values)


def first_seen(found: np.ndarray) -> np.ndarray:
    """Where each code (`coded`, missing left out) first appears, in that order, read off where
    each run of equal codes starts: a journal keeps a cell's records together, so there are few
    runs to look at."""
    if not len(found):
        return np.array([], dtype=np.intp)
    starts = np.append(0, np.flatnonzero(found[1:] != found[:-1]) + 1)
    _, first_run = np.unique(found[starts], return_index=True)
    firsts = starts[np.sort(first_run)]
    return firsts[found[firsts] >= 0]
