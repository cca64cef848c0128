"""`report`: every figure of one run: the manifest, the end-of-run summary exactly as the live
run printed it, then the figures that go beyond it (`loadlib.report.contents`' report-only
entries) and Locust's own statistics."""

from __future__ import annotations

from analysis import locust_csv
from analysis.rundir import Run
from loadlib.figures.goodput import goodput_slo
from loadlib.figures.validity import validity_summary
from loadlib.report.contents import RunData, build_sections
from loadlib.report.document import Document
from loadlib.report.protocol import summary_dict
from loadlib.report.run_figures import RunFigures
from loadlib.report.summary import summary_heading
from loadlib.report.validity import judged


def run_report(run: Run, slo_ttft_s: float | None = None, slo_decode_tps: float | None = None) -> Document:
    """The run's document. Goodput targets not given come from the run's profile (see `goodput_slo`);
    an A/B run's or a sweep's has each server's figures, then the verdicts of each against the first."""
    data = RunData(run.records, run.manifest, run.path, goodput_slo(run.manifest, slo_ttft_s, slo_decode_tps))
    found = {"search": run.manifest["search"]} if run.manifest.get("search") else {}  # the search's own result
    split = RunFigures(data).split_sections(report=True)
    if split is not None:  # an A/B run or a sweep: each server's figures, then the verdicts
        sections, more = split
        found |= more
    else:
        sections = build_sections(data, report=True)
        found |= summary_dict(data.tables)
        if judged(run.path, run.manifest):
            found["validity"] = validity_summary(data.checks)
    if run.locust is not None:
        sections += locust_csv.sections(run.locust)
    return Document(summary_heading(run.records, run.manifest), sections, run.manifest, found)
