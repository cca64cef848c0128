"""What every command produces and every output format renders: a titled list of tables.

Each table exists twice: `data` holds the raw figures (for JSON and CSV, full precision) and
`view` the same rows formatted for people (console and Markdown), so a new output format is one
module with one `render(document) -> str` function.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Section:
    key: str  # machine name: the JSON key and the CSV `section`
    title: str  # heading that says what the figures are and how they were computed
    data: pd.DataFrame  # raw figures, one row per table row
    view: pd.DataFrame  # the same rows as formatted strings
    keys: tuple[str, ...] = ()  # `data` columns that name a row (the CSV `row`)
    left: tuple[str, ...] = ()  # `view` columns that read left-aligned
    optional: bool = False  # left out of console and Markdown output when it has no rows


@dataclass(frozen=True)
class Document:
    heading: str
    sections: list[Section]
    manifest: dict[str, Any] = field(default_factory=dict)  # shown first, as the run recorded it
    summary: dict[str, Any] = field(default_factory=dict)  # top-level JSON keys beside the tables

    def shown(self) -> list[Section]:
        """The sections worth printing for people."""
        return [s for s in self.sections if not (s.optional and s.data.empty)]


def flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested manifest keys as dotted names with text values, e.g. {"server": {"version": 1}} ->
    {"server.version": "1"}; lists and other non-text values are written as JSON."""
    flat: dict[str, str] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return flat


def rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Table rows as plain dicts; NaN becomes None."""
    clean = frame.astype(object).where(frame.notna(), None)
    return clean.to_dict("records")


PERCENTILE_CI = re.compile(r"^(\w*p\d+(?:\.\d+)?)_ci_low$")


def with_intervals(row: dict[str, Any]) -> dict[str, Any]:
    """The row, with its percentiles' intervals and sufficiency also keyed by percentile."""
    names = [match.group(1) for match in map(PERCENTILE_CI.match, row) if match]
    if not names:
        return row
    return {**row, "ci": {name: [row[f"{name}_ci_low"], row.get(f"{name}_ci_high")] for name in names},
            "enough": {name: row.get(f"{name}_enough") for name in names}}


def json_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """`rows` as JSON gives them: a row with percentiles and their confidence intervals (`p99`,
    `p99_ci_low`, `p99_ci_high`, `p99_enough`) also holds them by percentile, `"ci": {"p99":
    [low, high]}` and `"enough": {"p99": false}` (false: a tail on too few samples, never read bare)."""
    return [with_intervals(row) for row in rows(frame)]
