"""What a test leaves at its end besides the manifest: `summary.txt` (the end-of-run summary, as
printed) and, with `--csv`, the LLM figures per Locust stats row beside Locust's own CSV files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadlib.records import read_records, records_frame
from loadlib.run import llmstats

SUMMARY_FILE = "summary.txt"


def write_summary(run_dir: Path, manifest: dict[str, Any], csv_prefix: str | None) -> str:
    """Renders the summary from the journal (not memory), writes and prints it; returns its text."""
    from loadlib.report import console
    from loadlib.report.summary import summary_document

    frame = records_frame(read_records(run_dir))
    text = console.render(summary_document(frame, manifest, run_dir))
    (run_dir / SUMMARY_FILE).write_text(text, encoding="utf-8")
    if csv_prefix:
        llmstats.write_csv(llmstats.per_name_table(frame), csv_prefix)
    print(text, flush=True)
    print(f"Run files: {run_dir}  (recompute with: python -m analysis report {run_dir})", flush=True)
    return text
