"""report.html: one self-contained page (scripts, styles and data inline, no network) for one run
or several side by side. `write_page` is what the run's end and `python -m analysis html` call.

The charting library is uPlot (MIT, about 50 KB, canvas, fast with 100,000 points), vendored in
`assets/` with its licence; the page's own scripts only draw the data that `html_data.page_data`
took from the runs' views: `assets/charts.js` every declared chart (`loadlib.report.charts`),
`assets/report.js` the rest."""

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
ASSETS = {"uplot_css": "uPlot.min.css", "report_css": "report.css", "uplot_js": "uPlot.iife.min.js",
          "charts_js": "charts.js", "report_js": "report.js"}


def write_page(views: Sequence[RunView], out: str | Path) -> Path:
    """Writes the page of the runs' views to `out`; returns its path."""
    path = Path(out)
    path.write_text(render_page(page_data(views)), encoding="utf-8")
    return path


def render_page(data: dict[str, Any]) -> str:
    """The page's HTML around `data` (`page_data`'s), with uPlot and the page's scripts inlined."""
    labels = data["labels"]
    return inline_assets(
        _asset("report.html"),
        title=_escape(f"uni-bench {'comparison' if len(labels) > 1 else 'report'}: {', '.join(labels)}"),
        # "<" escaped inside JSON strings, so no value can end the script element
        data=orjson.dumps(data, default=_scalar, option=orjson.OPT_SERIALIZE_NUMPY).decode().replace("<", "\\u003c"))


def inline_assets(html: str, **slots: str) -> str:
    """`html` with each `{{slot}}` filled: by the value given, else by the asset `ASSETS` names
    (the live page inlines uPlot and the charts' script this way too)."""
    return SLOT.sub(lambda match: slots[match.group(1)] if match.group(1) in slots else _asset(ASSETS[match.group(1)]),
                    html)


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
