"""report.html: one self-contained page (scripts, styles and data inline, no network) for one run
or several side by side. `write_page` is what the run's end and `python -m analysis html` call.

The charting library is uPlot (MIT, about 50 KB, canvas, fast with 100,000 points), vendored in
`assets/` with its licence; the page's own script (`assets/report.js`) only draws the data that
`html_data.page_data` took from the runs' views."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import orjson

from loadlib.report.html_data import page_data

if TYPE_CHECKING:
    from loadlib.run_view import RunView

REPORT_FILE = "report.html"
SLOT = re.compile(r"\{\{(\w+)\}\}")


def write_page(views: Sequence[RunView], out: str | Path) -> Path:
    """Writes the page of the runs' views to `out`; returns its path."""
    path = Path(out)
    path.write_text(render_page(page_data(views)), encoding="utf-8")
    return path


def render_page(data: dict[str, Any]) -> str:
    """The page's HTML around `data` (`page_data`'s), with uPlot and the page's script inlined."""
    labels = data["labels"]
    slots = {
        "title": _escape(f"uni-bench {'comparison' if len(labels) > 1 else 'report'}: {', '.join(labels)}"),
        "uplot_css": _asset("uPlot.min.css"), "report_css": _asset("report.css"),
        "uplot_js": _asset("uPlot.iife.min.js"), "report_js": _asset("report.js"),
        # "<" escaped inside JSON strings, so no value can end the script element
        "data": orjson.dumps(data, default=_scalar, option=orjson.OPT_SERIALIZE_NUMPY).decode().replace("<", "\\u003c"),
    }
    return SLOT.sub(lambda match: slots[match.group(1)], _asset("report.html"))


def _asset(name: str) -> str:
    return resources.files("loadlib.report").joinpath("assets", name).read_text(encoding="utf-8")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and value != value:
        return None
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
