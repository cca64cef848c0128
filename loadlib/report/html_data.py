"""Everything report.html shows, as one JSON-ready dict: per run what was run, the summary's and
report's sections (each table's formatted rows as the summary prints them and its raw figures as
`report --json` gives them), its requests; every declared chart over the runs; for several runs
(or targets) the figures side by side and each run's verdicts against the first, from
`loadlib.figures.verdicts` as `compare` computes them; for a server sweep its table of
configurations and the logs of those that did not serve (`loadlib.report.sweep`). Nothing here
computes a figure of its own: the views do."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Sequence

from loadlib.figures import across_runs, verdicts
from loadlib.figures.validity import validity_summary
from loadlib.report.contents import build_sections, sweep_of
from loadlib.report.document import Section, flatten, json_rows, rows
from loadlib.report.charts import PALETTE
from loadlib.report.html_charts import page_charts, requests
from loadlib.report.protocol import summary_dict
from loadlib.report.summary import summary_heading
from loadlib.report.verdicts import judge

if TYPE_CHECKING:
    from loadlib.run_view import RunView

SECRET = re.compile(r"api[_-]?key|authori[sz]ation|secret|password|bearer|cookie", re.IGNORECASE)
# what was run, in this order (manifest keys and their sub-keys); the rest follows
WHAT = ("target", "server.kind", "server.version", "server.launch", "model", "protocol", "profile", "client",
        "tool", "command", "started_at", "ended_at")


def page_data(runs: Sequence[RunView]) -> dict[str, Any]:
    """The page's data for one run, or several side by side (the first is the reference); a run
    with several servers shows one run per target (`RunView.by_target`, named "run/A" beside other runs)."""
    shown = [view for run in runs for view in run.by_target(prefixed=len(runs) > 1)]
    return {"labels": [view.label for view in shown], "colors": PALETTE, "runs": [run_entry(view) for view in shown],
            "charts": page_charts(shown, runs),
            "comparison": comparison(shown, runs) if len(shown) > 1 else None,
            "sweeps": [sweep_entry(run) for run in runs if run.sweep_table is not None]}


def run_entry(run: RunView) -> dict[str, Any]:
    """One run: its heading, what was run, `report --json`'s summary keys, its sections and requests."""
    summary = summary_dict(run.tables)
    if run.manifest.get("search"):
        summary["search"] = run.manifest["search"]
    if run.judged:
        summary["validity"] = validity_summary(run.checks)
    return {"label": run.label, "heading": summary_heading(run.records, run.manifest),
            "what": what_was_run(run.manifest), "summary": summary,
            "sections": [section_entry(s) for s in build_sections(run, report=True)], "requests": requests(run.records)}


def sweep_entry(run: RunView) -> dict[str, Any]:
    """A sweep's table (its data is `report --json`'s `"sweep"` rows, which the chart draws) and the
    logs of the configurations that did not serve; its verdicts are the comparison's, as each
    configuration that served is one of the page's runs."""
    sections, _json = sweep_of(run)
    return {"label": run.label, "sections": [section_entry(s) for s in sections if s.key in ("sweep", "sweep_logs")]}


def what_was_run(manifest: dict[str, Any]) -> list[list[str]]:
    """The manifest as (key, value) rows, the `WHAT` keys first; no key that may hold a secret, and
    not the profile's list of targets: each target of an A/B run has its own entry as `target`, and
    its column names no other server."""
    flat = {key: value for key, value in flatten(dict(manifest)).items()
            if not SECRET.search(key) and not key.startswith("profile.targets")}
    first = [key for prefix in WHAT for key in flat if key == prefix or key.startswith(prefix + ".")]
    return [[key, flat[key]] for key in dict.fromkeys([*first, *flat])]


def section_entry(section: Section) -> dict[str, Any]:
    """A section as the page shows it: the view's rows (text) and the data's rows (figures)."""
    return {"key": section.key, "title": section.title, "columns": [str(c) for c in section.view.columns],
            "left": list(section.left), "view": section.view.astype(str).to_numpy().tolist(),
            "data": json_rows(section.data), "shown": not (section.optional and section.data.empty)}


def comparison(shown: list[RunView], runs: Sequence[RunView]) -> dict[str, Any]:
    """The headline figures per run shown with the difference to the first (`across_runs.differences`),
    and each run against the first figure by figure, the rows of `python -m analysis compare`'s
    verdicts (`loadlib.report.verdicts`). The runs shown of one run of several servers are its
    targets, judged once for its summary too (`RunView.verdicts`)."""
    labels = [view.label for view in shown]
    figures, judged = runs[0].verdicts(labels) if len(runs) == 1 else judge(shown)
    differences = across_runs.differences(figures, labels[0])
    return {"figures": rows(differences[["figure", "run", "value", "low", "high", "n", "diff_pct", "beyond_noise",
                                         "better"]]),
            "verdicts": rows(judged.data), "equivalence_pct": verdicts.EQUIVALENCE_PCT}
