"""The end-of-run summary: what the session prints and saves as `summary.txt`, and what
`python -m analysis report` prints right after the manifest.

Its text depends only on the records, the run's final manifest and the server's scrapes in the
run directory, so the live summary and the report of the same run directory agree to the
character. Its heading is the settings line (with CUT SHORT and why, when the run was), a model
the server did not confirm, and cells left out for want of users. Its sections are the entries of `loadlib.report.contents.CONTENTS` that are not the
report's own: a capacity search's result first; the protocol's tables when the protocol's cells
ran, the steady state when free-running cells did; what a profile's scenarios add (prefill per
size, cache state, turns), the client's own limits and the server's view when the run has them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from loadlib.outputs.text import render_document
from loadlib.report.contents import run_sections
from loadlib.report.document import Document
from loadlib.report.protocol import settings_line
from loadlib.run_view import RunView


def render_summary(records: Iterable[dict[str, Any]], manifest: Mapping[str, Any] | None = None,
                   run_dir: str | Path | None = None) -> str:
    """The summary's text from the records (dicts) and the final manifest; with `run_dir`, also
    the server's view from its `metrics.jsonl`."""
    return render_document(summary_document(RunView.of_records(records, dict(manifest or {}), run_dir)))


def summary_document(run: RunView) -> Document:
    """The summary as a document (no manifest block): the settings line, then its sections (for an
    A/B run or a sweep each server's, then the verdicts), from figures other outputs of the view
    share (the run's end writes report.html from the same view)."""
    return Document(summary_heading(run.records, run.manifest), run_sections(run)[0])


def summary_heading(df: pd.DataFrame, manifest: Mapping[str, Any]) -> str:
    """The settings line, then what the run was warned of at its start: a model the server does
    not list (or a models list it could not have, and why), cells that did not run for want of users."""
    lines = [settings_line(df, manifest)]
    if manifest.get("model_warning"):
        lines.append(f"MODEL NOT CONFIRMED BY THE SERVER: {manifest['model_warning']}")
    if manifest.get("not_run"):
        lines.append(f"NOT RUN: {manifest['not_run']}")
    return "\n".join(lines)
