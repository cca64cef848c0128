"""The LLM figures per Locust stats row: what Locust's own table cannot hold (TTFT, decode t/s,
tok/chunk, tokens), written as `PREFIX_llm.csv` beside Locust's `--csv` files and added to its
`--html` report.

Rows carry Locust's row names (`Type`, `Name`), so the two CSVs join on them; every figure is
computed from the raw records (percentiles too, never from Locust's rounded buckets).
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from loadlib.run.users import REQUEST_TYPE, stats_name

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
    """Appends the run's summary (the tool's own report) to Locust's `--html` report, with where
    the run's files are."""
    path = Path(html_file)
    if not path.exists():
        return
    page = path.read_text(encoding="utf-8")
    block = (f'<section id="uni-bench" style="font-family:monospace;margin:1em">'
             f"<h2>LLM figures (uni-bench)</h2><p>Run files: {html.escape(str(run_dir))} "
             f"(python -m analysis report {html.escape(str(run_dir))})</p>"
             f"<pre>{html.escape(summary)}</pre></section>")
    page = page.replace("</body>", block + "</body>", 1) if "</body>" in page else page + block
    path.write_text(page, encoding="utf-8")
