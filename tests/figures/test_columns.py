"""The records frame's columns asked which rows hold some values and which values they hold: a
categorical column (a journal read back) answers as pandas would, missing values and categories no
row holds any more (rows left out) included."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadlib.figures.columns import coded, distinct, first_seen, isin

VALUES = ["single", "same", None, "closed", "same", "open"]


@pytest.mark.parametrize("column", [
    pd.Series(VALUES, dtype="category"),
    pd.Series(pd.Categorical(VALUES, categories=["different", "open", "same", "closed", "single"])),
    pd.Series(VALUES, dtype="str"),
], ids=["categorical", "unused-categories", "text"])
def test_a_column_answers_as_pandas_does(column):
    for values in (("same", "different"), ("open", "trace"), (), ("closed", None)):
        assert isin(column, values).tolist() == column.isin(values).tolist()
    assert sorted(distinct(column)) == ["closed", "open", "same", "single"]
    assert sorted(distinct(column[column != "open"])) == ["closed", "same", "single"]


@pytest.mark.parametrize("dtype", ["category", "str"])
def test_codes_come_in_the_order_their_values_first_appear(dtype):
    column = pd.Series(["c8", "c8", "single", None, "c8", "c2", "c2", "single"], dtype=dtype)
    found, values = coded(column)
    assert [values[code] for code in found if code >= 0] == column.dropna().tolist()
    assert first_seen(found).tolist() == [0, 2, 5]


def test_an_empty_column_holds_nothing():
    empty = pd.Series([], dtype="category")
    assert distinct(empty) == [] and isin(empty, ["x"]).dtype == np.bool_
    assert len(first_seen(coded(empty)[0])) == 0
