"""A run of several servers (an A/B run's targets, a sweep's configurations) split by server, each
read as a run of its own: its records (the journal's rows with its label), the manifest with its
own `target` and `server` entries, and its server-side files in `targets/<label>/`. So every
figure, check and verdict of a target is the one `python -m analysis compare` would give for two
separate runs, and the page, the summary and `report --json` cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from loadlib.figures.goodput import GoodputSlo
from loadlib.records import target_dir
from loadlib.report.contents import RunData, build_sections
from loadlib.report.document import Section


@dataclass(frozen=True)
class TargetRun:
    """One server of a run, shaped like a run (`label`, `records`, `manifest`, `path`), with its
    figures computed once on first use (`data`)."""

    label: str
    data: RunData

    @property
    def records(self) -> pd.DataFrame:
        return self.data.df

    @property
    def manifest(self) -> Mapping[str, Any]:
        return self.data.manifest

    @property
    def path(self) -> Path | None:
        return self.data.run_dir


def target_labels(df: pd.DataFrame, manifest: Mapping[str, Any]) -> list[str]:
    """The labels the records name, in the profile's order; [] for a run of one server."""
    listed = [entry["label"] for entry in manifest.get("targets") or []]
    present = set(df["target"].unique()) if "target" in df else set()
    return [label for label in listed if label in present] + sorted(present - set(listed) - {""})


def target_runs(df: pd.DataFrame, manifest: Mapping[str, Any], run_dir: Path | None,
                slo: GoodputSlo | None = None) -> list[TargetRun]:
    """Each server the records name as a run of its own (goodput against `slo`, default its
    profile's), even one alone (a sweep of which one configuration served); [] for a run of one
    server."""
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
        records = df[df["target"] == label].reset_index(drop=True)
        split.append(TargetRun(label, RunData(records, own, target_dir(run_dir, label) if run_dir is not None else None,
                                              slo, label=label, journal_dir=run_dir)))
    return split


def several(servers: list[TargetRun]) -> list[TargetRun]:
    """The servers a report reads as runs of their own: those of a run of several; [] for one."""
    return servers if len(servers) > 1 else []


def split_targets(df: pd.DataFrame, manifest: Mapping[str, Any], run_dir: Path | None) -> list[TargetRun]:
    """The run's targets as runs of their own; [] for a run of one server."""
    return several(target_runs(df, manifest, run_dir))


def target_sections(targets: list[TargetRun], report: bool = False) -> list[Section]:
    """Each target's sections as a run of its own has them (`build_sections`), titles and keys
    prefixed with its label (and URL)."""
    found: list[Section] = []
    for target in targets:
        url = target.manifest.get("target", {}).get("url")
        found += [replace(section, key=f"{target.label}.{section.key}",
                          title=f"[{target.label}{f' {url}' if url else ''}] {section.title}")
                  for section in build_sections(target.data, report)]
    return found
