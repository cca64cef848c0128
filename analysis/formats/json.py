"""JSON with full precision: the summary keys (issue 8's schema for a run), the manifest, and
every table as a list of rows. Missing figures are null.

A row with percentiles and their confidence intervals (`p99`, `p99_ci_low`, `p99_ci_high`,
`p99_enough`) also holds them by percentile: `"ci": {"p99": [low, high]}` and
`"enough": {"p99": false}` (false: a tail resting on too few samples, never to be read bare)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import orjson

from loadlib.report.document import Document, rows


def render(document: Document) -> str:
    payload = {
        "heading": document.heading,
        "manifest": document.manifest,
        **document.summary,
        "tables": {section.key: [with_intervals(row) for row in rows(section.data)] for section in document.sections},
    }
    return orjson.dumps(payload, option=orjson.OPT_INDENT_2, default=_scalar).decode()


PERCENTILE_CI = re.compile(r"^(\w*p\d+(?:\.\d+)?)_ci_low$")


def with_intervals(row: dict[str, Any]) -> dict[str, Any]:
    """The row, with its percentiles' intervals and sufficiency also keyed by percentile."""
    names = [match.group(1) for match in map(PERCENTILE_CI.match, row) if match]
    if not names:
        return row
    return {**row, "ci": {name: [row[f"{name}_ci_low"], row.get(f"{name}_ci_high")] for name in names},
            "enough": {name: row.get(f"{name}_enough") for name in names}}


def _scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
