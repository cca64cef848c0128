"""The LLM figures per Locust stats row: what Locust's own table cannot hold (TTFT, decode t/s,
tok/chunk, tokens), written as `PREFIX_llm.csv` beside Locust's `--csv` files and added to its
`--html` report.

Rows carry Locust's row names (`Type`, `Name`), so the two CSVs join on them; every figure is
computed from the raw records (percentiles too, never from Locust's rounded buckets).
"""

from __future__ import annotations

import html
import os
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd

from loadlib.run.users import REQUEST_TYPE
from loadlib.scenarios.base import stats_name

CSV_SUFFIX = "_llm.csv"


def per_name_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per Locust stats name, from a `records_frame`."""
    if df.empty:
        return pd.DataFrame(columns=["Type", "Name", "Requests", "Failures"])
    names = [stats_name(case, cell, scenario) for case, cell, scenario
             in zip(df["case"].astype(str), df["cell"].astype(str), df["scenario"].astype(str))]
    frame = df.assign(name=names, ttft_ms=df["ttft_s"] * 1000.0)
    ok = frame[frame["ok"]]
    groups = ok.groupby("name", sort=True)
    table = pd.DataFrame({
        "Requests": frame.groupby("name", sort=True).size(),
        "Failures": frame[~frame["ok"]].groupby("name").size(),
        "TTFT p50 ms": groups["ttft_ms"].quantile(0.5),
        "TTFT p90 ms": groups["ttft_ms"].quantile(0.9),
        "TTFT p99 ms": groups["ttft_ms"].quantile(0.99),
        "Decode t/s p50": groups["decode_tps"].quantile(0.5),
        "Decode t/s mean": groups["decode_tps"].mean(),
        "Tok/chunk mean": groups["tok_per_chunk"].mean(),
        "Completion tokens": groups["completion_tokens"].sum().astype("int64"),
        "Prompt tokens": groups["prompt_tokens"].sum().astype("int64"),
    })
    table["Failures"] = table["Failures"].fillna(0).astype("int64")
    table.insert(0, "Name", table.index)
    table.insert(0, "Type", REQUEST_TYPE)
    return table.reset_index(drop=True).replace({np.nan: None})


def write_csv(table: pd.DataFrame, csv_prefix: str) -> Path:
    path = Path(f"{csv_prefix}{CSV_SUFFIX}")
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False, float_format="%.2f")
    return path


def add_to_html_report(html_file: str, summary: str, run_dir: Path) -> None:
    """Adds the run's summary (the tool's own report) at the end of the body of Locust's `--html`
    report, with where the run's files are; every text is escaped, so no summary can break the
    page."""
    path = Path(html_file)
    if not path.exists():
        return
    block = (f'<section id="uni-bench" style="font-family:monospace;margin:1em">'
             f"<h2>LLM figures (uni-bench)</h2><p>Run files: {html.escape(str(run_dir))} "
             f"(python -m analysis report {html.escape(str(run_dir))})</p>{_page_link(path, run_dir)}"
             f'<pre style="overflow-x:auto">{html.escape(summary)}</pre></section>\n')
    page = path.read_text(encoding="utf-8")
    end = body_end(page)
    path.write_text(page + block if end is None else page[:end] + block + page[end:], encoding="utf-8")


def _page_link(html_file: Path, run_dir: Path) -> str:
    """A link to the run's report.html, relative to Locust's report so that the two can move together."""
    page = run_dir / "report.html"
    if not page.exists():
        return ""
    href = Path(os.path.relpath(page.resolve(), html_file.resolve().parent)).as_posix()
    return f'<p><a id="uni-bench-report" href="{html.escape(href)}">The run\'s report.html: tables, charts, requests</a></p>'


def body_end(page: str) -> int | None:
    """The offset of the `</body>` tag that ends `page`'s body, or None if it has none.

    Tags are read as a browser reads them, so a `</body>` in a script or a style (Locust 2.47's
    report inlines a script whose strings hold one) is text, not the body's end."""
    parser = _BodyEnd()
    parser.feed(page)
    parser.close()
    if parser.end is None:
        return None
    line, column = parser.end
    return sum(len(text) + 1 for text in page.split("\n", line - 1)[:line - 1]) + column


class _BodyEnd(HTMLParser):
    """Keeps the position (line, column) of the last `</body>` end tag outside raw text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.end: tuple[int, int] | None = None

    def handle_endtag(self, tag: str) -> None:
        if tag == "body":
            self.end = self.getpos()
