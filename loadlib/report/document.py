"""What every command produces and every output format renders: a titled list of tables.

Each table exists twice: `data` holds the raw figures (for JSON and CSV, full precision) and
`view` the same rows formatted for people (console and Markdown), so a new output format is one
module with one `render(document) -> str` function.
"""

from __future__ import annotations

import json
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
