"""`report`: every figure of one run: the manifest, the end-of-run summary exactly as the live
run printed it, then the figures that go beyond it (`loadlib.report.contents`' report-only
entries) and Locust's own statistics."""

from __future__ import annotations

from typing import Sequence

from loadlib.report import locust_csv
from loadlib.report.contents import run_sections
from loadlib.report.document import Document
from loadlib.report.summary import summary_heading
from loadlib.run_view import RunView


def run_report(runs: Sequence[RunView]) -> Document:
    """The document of the first run; an A/B run's or a sweep's has each server's figures, then the
    verdicts of each against the first."""
    run = runs[0]
    found = {"search": run.manifest["search"]} if run.manifest.get("search") else {}  # the search's own result
    sections, more = run_sections(run, report=True)
    return Document(summary_heading(run.records, run.manifest), [*sections, *locust_csv.sections(run.locust)],
                    run.manifest, found | more)
