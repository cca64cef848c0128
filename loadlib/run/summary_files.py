"""What a test leaves at its end besides the manifest: `summary.txt` (the end-of-run summary, as
printed), `report.html` (the same figures and charts in one file to share), `records.parquet` (the
journal's columnar copy, which later reports read in a fraction of the time) and, with `--csv`, the
LLM figures per Locust stats row beside Locust's own CSV files. The run directory is read once
(`loadlib.run_view.read_run`), and the summary and the page are rendered from that one view: each
figure is computed once for both."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from loadlib.run import llmstats

if TYPE_CHECKING:
    from loadlib.run_view import RunView

SUMMARY_FILE = "summary.txt"


def write_summary(run_dir: Path, csv_prefix: str | None) -> str:
    """Renders the summary from the run directory (the journal and the final manifest, not memory),
    writes and prints it; returns its text. Reading the journal also writes its columnar copy."""
    from loadlib.outputs import Reading, text
    from loadlib.report.summary import summary_document
    from loadlib.run_view import RunDirError, read_run

    try:
        view = read_run(run_dir, run_dir.name, keep_copy=True)
    except RunDirError as exc:  # a line this run did not write whole: the summary is made of the others
        print(f"warning: {exc}; the summary leaves out every line that is not a record", flush=True)
        view = read_run(run_dir, run_dir.name, lenient=True)
    summary = text.render(Reading([view], lambda: summary_document(view)))
    (run_dir / SUMMARY_FILE).write_text(summary, encoding="utf-8")
    if csv_prefix:
        llmstats.write_csv(llmstats.per_name_table(view.records), csv_prefix)
    print(summary, flush=True)
    print(f"Run files: {run_dir}  (recompute with: python -m analysis report {run_dir})", flush=True)
    if not view.records.empty:
        write_report_page(run_dir, view)
    return summary


def write_report_page(run_dir: Path, view: RunView) -> Path | None:
    """Writes `report.html`; a failure costs the page only, never the summary already saved."""
    from loadlib.report.html_page import REPORT_FILE, write_page

    try:
        path = write_page([view], run_dir / REPORT_FILE)
    except Exception as exc:  # the run's figures are in summary.txt and the journal whatever happens here
        print(f"warning: report.html not written: {exc!r} (python -m analysis html {run_dir} --out FILE retries)",
              flush=True)
        return None
    print(f"Report to open or share: {path}", flush=True)
    return path
