"""JSON with full precision: the summary keys (issue 8's schema for a run), the manifest, and
every table as a list of rows. Missing figures are null.
A percentile's interval and sufficiency are also keyed by percentile (`document.json_rows`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from loadlib.report.document import Document, json_rows

if TYPE_CHECKING:
    from loadlib.outputs import Reading


HELP = "JSON, full precision"  # the command line's words for it


def render(reading: Reading) -> str:
    return render_document(reading.document)


def render_document(document: Document) -> str:
    payload = {
        "heading": document.heading,
        "manifest": document.manifest,
        **document.summary,
        "tables": {section.key: json_rows(section.data) for section in document.sections},
    }
    return orjson.dumps(payload, option=orjson.OPT_INDENT_2, default=_scalar).decode()


def _scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
