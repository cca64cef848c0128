"""The records frame's columns asked which rows hold some values and which values they hold: a
categorical column (a journal read back) answers as pandas would, missing values and categories no
row holds any more (rows left out) included."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadlib.figures.columns import distinct, isin

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


def test_an_empty_column_holds_nothing():
    empty = pd.Series([], dtype="category")
    assert distinct(empty) == [] and isin(empty, ["x"]).dtype == np.bool_
