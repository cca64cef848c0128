"""What a test leaves at its end besides the manifest: `summary.txt` (the end-of-run summary, as
printed), `report.html` (the same figures and charts in one file to share), `records.parquet` (the
journal's columnar copy, which later reports read in a fraction of the time) and, with `--csv`, the
LLM figures per Locust stats row beside Locust's own CSV files. The summary and the page are
rendered from one `RunFigures`: each figure is computed once for both."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadlib.record_table import JournalError, read_records_frame, records_frame
from loadlib.records import read_records
from loadlib.run import llmstats

if TYPE_CHECKING:
    from loadlib.report.run_figures import RunFigures

SUMMARY_FILE = "summary.txt"


def write_summary(run_dir: Path, manifest: dict[str, Any], csv_prefix: str | None) -> str:
    """Renders the summary from the journal (not memory), writes and prints it; returns its text.
    Reading the journal also writes its columnar copy."""
    from loadlib.report import console
    from loadlib.report.contents import RunData
    from loadlib.report.run_figures import RunFigures
    from loadlib.report.summary import run_summary

    try:
        frame = read_records_frame(run_dir, keep_copy=True)
    except JournalError as exc:  # a line this run did not write whole: the summary is made of the others
        print(f"warning: {exc}; the summary leaves out every line that is not a record", flush=True)
        frame = records_frame(read_records(run_dir))
    figures = RunFigures(RunData(frame, manifest, run_dir))
    text = console.render(run_summary(figures))
    (run_dir / SUMMARY_FILE).write_text(text, encoding="utf-8")
    if csv_prefix:
        llmstats.write_csv(llmstats.per_name_table(frame), csv_prefix)
    print(text, flush=True)
    print(f"Run files: {run_dir}  (recompute with: python -m analysis report {run_dir})", flush=True)
    if not frame.empty:
        write_report_page(run_dir, figures)
    return text


def write_report_page(run_dir: Path, figures: RunFigures) -> Path | None:
    """Writes `report.html`; a failure costs the page only, never the summary already saved."""
    from loadlib.report.html_page import REPORT_FILE, write_page

    try:
        path = write_page([(run_dir.name, figures)], run_dir / REPORT_FILE)
    except Exception as exc:  # the run's figures are in summary.txt and the journal whatever happens here
        print(f"warning: report.html not written: {exc!r} (python -m analysis html {run_dir} --out FILE retries)",
              flush=True)
        return None
    print(f"Report to open or share: {path}", flush=True)
    return path
