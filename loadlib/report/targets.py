"""An A/B run's or a sweep's report: each target's (configuration's) sections as a run of its own
would have them, then the verdicts of every target against the first (the profile's order); a
sweep adds its table of configurations (`loadlib.report.sweep`) before the verdicts.

A target is read like a run: its records (the journal's rows with its label), the manifest with
its own `target` and `server` entries, and its server-side files in `targets/<label>/`. So every
figure, check and verdict of a target is the one `python -m analysis compare` would give for two
separate runs, and the page, the summary and `report --json` cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from loadlib.figures.goodput import GoodputSlo
from loadlib.figures.headline import headline_figures
from loadlib.figures.validity import validity_summary
from loadlib.records import target_dir
from loadlib.report.contents import RunData, build_sections
from loadlib.report.document import Section, rows
from loadlib.report.protocol import summary_dict
from loadlib.report.sweep import sweep_sections
from loadlib.report.validity import judged
from loadlib.report.verdicts import verdicts_section


@dataclass(frozen=True)
class TargetRun:
    """One target of an A/B run, shaped like a run (`label`, `records`, `manifest`, `path`)."""

    label: str
    records: pd.DataFrame
    manifest: Mapping[str, Any]
    path: Path | None


def target_labels(df: pd.DataFrame, manifest: Mapping[str, Any]) -> list[str]:
    """The run's target labels in the profile's order (those with records); [] for a run of one server."""
    listed = [entry["label"] for entry in manifest.get("targets") or []]
    present = set(df["target"].unique()) if "target" in df else set()
    labels = [label for label in listed if label in present] + sorted(present - set(listed) - {""})
    return labels if len(labels) > 1 else []


def split_targets(df: pd.DataFrame, manifest: Mapping[str, Any], run_dir: Path | None) -> list[TargetRun]:
    """The run's targets as runs of their own; [] for a run of one server."""
    entries = {entry["label"]: entry for entry in manifest.get("targets") or []}
    split = []
    for label in target_labels(df, manifest):
        entry = entries.get(label, {"label": label})
        own = {**manifest, "target": {key: value for key, value in entry.items() if key != "server"}}
        own.pop("server", None)
        own.pop("targets", None)  # a target reads as a run of one server: its own entry is `target`
        own.pop("search", None)
        own.update({key: row[key] for row in manifest.get("sweep") or [] if row.get("label") == label
                    for key in ("search",) if row.get(key)})  # a sweep's configuration: its own search
        if label in (manifest.get("search_by_target") or {}):  # an A/B run's search, this target's
            own["search"] = manifest["search_by_target"][label]
        if "server" in entry:
            own["server"] = entry["server"]
        split.append(TargetRun(label, df[df["target"] == label].reset_index(drop=True), own,
                               target_dir(run_dir, label) if run_dir is not None else None))
    return split


def target_data(target: TargetRun, slo: GoodputSlo | None = None) -> RunData:
    return RunData(target.records, target.manifest, target.path, slo)


def ab_sections(targets: list[TargetRun], data: list[RunData] | None = None, report: bool = False,
                verdicts: bool = True) -> tuple[list[Section], dict[str, Any]]:
    """Each target's sections (titles and keys prefixed with its label) from its `data` (default
    `target_data`), then with `verdicts` those of each target against the first; and the JSON's
    `verdicts`."""
    data = data or [target_data(target) for target in targets]
    found: list[Section] = []
    for target, run in zip(targets, data):
        url = target.manifest.get("target", {}).get("url")
        found += [replace(section, key=f"{target.label}.{section.key}",
                          title=f"[{target.label}{f' {url}' if url else ''}] {section.title}")
                  for section in build_sections(run, report)]
    if not verdicts:
        return found, {}
    slos = [run.slo for run in data]
    figures = pd.concat([headline_figures(target.records, slo).assign(run=target.label)
                         for target, slo in zip(targets, slos)], ignore_index=True)
    judged = verdicts_section(targets, slos, figures)
    return [*found, judged], {"verdicts": rows(judged.data)}


def split_sections(df: pd.DataFrame, manifest: Mapping[str, Any], run_dir: Path | None, report: bool = False,
                   slo: GoodputSlo | None = None) -> tuple[list[Section], dict[str, Any]] | None:
    """The sections and JSON keys of a run with several servers (an A/B run, a sweep): each
    target's sections, a sweep's table, the verdicts; with `report` also each target's tables and
    validity (`"targets"`, `"validity"`). None for a run of one server."""
    targets = split_targets(df, manifest, run_dir)
    sweep = bool(manifest.get("sweep"))
    if not targets and not sweep:
        return None
    data = [target_data(target, slo) for target in targets]
    sections, found = ab_sections(targets, data, report, verdicts=not sweep) if targets else ([], {})
    if sweep:
        more, found = sweep_sections(df, manifest, run_dir, slo)
        sections += more
    if report and targets:
        found["targets"] = {target.label: summary_dict(run.tables) for target, run in zip(targets, data)}
        found["validity"] = {target.label: validity_summary(run.checks) for target, run in zip(targets, data)
                             if judged(run.run_dir, run.manifest)}
    return sections, found
