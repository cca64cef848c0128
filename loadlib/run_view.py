"""One run, read once: what every output of a run is made from.

`read_run` reads a run directory's files once: its journal (the measured records as one frame and,
in the same pass, the unmeasured ones beside it: `loadlib.record_table.read_journal`) and its
manifest; its server's scrapes (`metrics.jsonl`, parsed once with every sample name a figure reads)
and Locust's own CSV files (`loadlib.report.locust_csv`) on first use. A `RunView` holds them
and computes what several outputs share once, on first use (the protocol's tables, the steady
state, the validity checks, each section of the contents, the verdicts): the end of a run writes
summary.txt and report.html from one view, and every command of `python -m analysis` makes its
output from views (`loadlib.outputs`).

A run of several servers (an A/B run's targets, a sweep's configurations) is split by server once
(`servers`): each server a view of its own, with its records (the journal's rows with its label),
its unmeasured ones, the manifest with its own `target` and `server` entries, and its server-side
files in `targets/<label>/`; so every figure, check and verdict of a server is the one two
separate runs would give, and the page, the summary and `report --json` cannot disagree. A sweep
pairs each configuration of its manifest with its server's view (`configs`). A `vllm bench serve`
result JSON reads as a run too (`loadlib.outputs.vllm.read_result`).

Reading is strict where the input is wrong: a missing journal, a line in it that is not a record
(not JSON, torn in the middle, without what a record measured, of the wrong types) or an
unreadable manifest raise `RunDirError` with one line naming the file (and line). A torn last line
is skipped with a warning (a killed run can leave only its last line unfinished). `lenient` reads
the journal record by record and leaves out every line that is not a record: the run's own end
does, so that one bad line costs that line, not the summary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Sequence, TypeVar

import pandas as pd

from loadlib.figures import free_running, protocol_tables
from loadlib.figures.acceptance import position_table
from loadlib.figures.energy import energy_table
from loadlib.figures.series import SERVER_NAMES
from loadlib.figures.goodput import Slo, goodput_slo
from loadlib.figures.sweep import ConfigRun, config_runs, sweep_table
from loadlib.record_table import JournalError, read_journal, split_records
from loadlib.records import MANIFEST_FILE, read_records, target_dir
from loadlib.report.locust_csv import LocustCsv, read_locust_csv
from loadlib.truth import energy, server_figures
from loadlib.truth.scrape import read_scrapes

if TYPE_CHECKING:
    from loadlib.figures.headline import PublishedFigures
    from loadlib.figures.validity import Check
    from loadlib.report.document import Section

T = TypeVar("T")

# Every sample a figure reads of the scrapes: the server view and the validity checks, the GPUs'
# energy, the charts' server timeline. Each reads its own by name from the one parse.
SCRAPE_NAMES = server_figures.NAMES_READ | energy.NAMES_READ | SERVER_NAMES


class RunDirError(Exception):
    """The input is not a readable run; the message is one line naming the input."""


@dataclass(eq=False)
class RunView:
    """One run (or one server of a run of several) read once, its figures computed on first use."""

    records: pd.DataFrame  # the measured records (`loadlib.record_table.records_frame`)
    manifest: dict[str, Any]  # {} for records without one (another tool's)
    path: Path | None = None  # where its files are (a server of several: its `targets/<label>/`); None: records alone
    label: str = ""  # its name in every output; default: its directory's
    unmeasured: pd.DataFrame | None = None  # warm-up, priming, calibration: the server counted them too
    goodput: Slo | None = None  # goodput targets asked for; None: the profile's, else the defaults
    published: PublishedFigures | None = None  # figures another tool gave without their samples
    _memo: dict[Hashable, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.label:
            self.label = self.path.resolve().name if self.path is not None else "run"

    @classmethod
    def of_records(cls, records: Iterable[dict[str, Any]], manifest: dict[str, Any] | None = None,
                   path: str | Path | None = None) -> RunView:
        """A view of record dicts (the unmeasured among them apart), with the manifest and the
        directory of its scrapes where given."""
        measured, unmeasured = split_records(records)
        return cls(measured, manifest or {}, Path(path) if path is not None else None, unmeasured=unmeasured)

    def once(self, key: Hashable, make: Callable[[], T]) -> T:
        """`make()`, computed once per view whatever the number of outputs that show it."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    # --- what it was read from ---------------------------------------------------------------------

    @cached_property
    def locust(self) -> LocustCsv:
        """Locust's own CSV files in its directory (`--csv`), read on first use; none without."""
        return read_locust_csv(self.path) if self.path is not None else LocustCsv()

    @cached_property
    def scrapes(self) -> list[dict[str, Any]]:
        """Its `metrics.jsonl` entries in order, parsed once (`SCRAPE_NAMES`); none without the file."""
        return list(read_scrapes(self.path, SCRAPE_NAMES)) if self.path is not None else []

    @cached_property
    def slo(self) -> Slo:
        """The goodput targets it is judged against (`goodput_slo`)."""
        return self.goodput or goodput_slo(self.manifest)

    @property
    def judged(self) -> bool:
        """Whether it can be judged: it has a directory and a watch of its server or its client."""
        return self.path is not None and bool({"server", "client_watch"} & set(self.manifest))

    # --- figures several outputs share -------------------------------------------------------------

    @cached_property
    def tables(self) -> protocol_tables.ProtocolTables:
        return protocol_tables.ProtocolTables.from_frame(self.records)

    @cached_property
    def steady_cells(self) -> list[free_running.SteadyCell]:
        return free_running.steady_cells(self.records)

    @cached_property
    def steady(self) -> pd.DataFrame:
        return free_running.steady_state_table(self.records, self.slo.ttft_s, self.slo.decode_tps, self.steady_cells)

    @cached_property
    def checks(self) -> list[Check]:
        """Each cell's validity checks (`loadlib.report.validity.run_checks`)."""
        from loadlib.report.validity import run_checks

        return run_checks(self.scrapes, self.records, self.manifest, self.steady_cells, self.unmeasured,
                          self.tables.concurrent, self.spec_counters)

    @cached_property
    def spec_counters(self) -> list[server_figures.SpecCounters]:
        """The server's speculative-decoding counters per cell (`server_figures.spec_counters`)."""
        return server_figures.spec_counters(self.scrapes)

    @cached_property
    def positions(self) -> pd.DataFrame:
        """Speculative acceptance by draft position per cell (`loadlib.figures.acceptance.position_table`)."""
        return position_table(self.records, self.spec_counters)

    @cached_property
    def energy(self) -> pd.DataFrame:
        """Each GPU's energy per cell (`loadlib.figures.energy.energy_table`); no rows without a GPU meter."""
        return energy_table(self.scrapes, self.records)

    # --- a run of several servers, split once ------------------------------------------------------

    @cached_property
    def servers(self) -> list[RunView]:
        """Every server the records name, in the profile's order, each a view of its own (even one
        alone: a sweep of which one configuration served); [] for a run of one server."""
        entries = {entry["label"]: entry for entry in self.manifest.get("targets") or []}
        return [self._server(label, entries.get(label, {"label": label})) for label in self._server_labels()]

    @property
    def targets(self) -> list[RunView]:
        """The servers read as runs of their own: those of a run of several; [] for one."""
        return self.servers if len(self.servers) > 1 else []

    def by_target(self, prefixed: bool = True) -> list[RunView]:
        """The run as the runs it compares: its servers, each named "run/A" (`prefixed`) or "A",
        for a run of several; itself for a run of one server."""
        if not self.targets:
            return [self]
        return [replace(target, label=f"{self.label}/{target.label}") if prefixed else target
                for target in self.targets]

    @cached_property
    def configs(self) -> list[ConfigRun]:
        """A sweep's configurations in the order run, each with its server's view; [] for a run
        that is not a sweep."""
        return config_runs({server.label: server for server in self.servers}, self.manifest.get("sweep") or [])

    @cached_property
    def sweep_table(self) -> pd.DataFrame | None:
        """A sweep's table of configurations (`loadlib.figures.sweep.sweep_table`); None for a run
        that is not a sweep."""
        return sweep_table(self.configs) if self.manifest.get("sweep") else None

    def verdicts(self, labels: Sequence[str]) -> tuple[pd.DataFrame, Section]:
        """The headline figures of the servers named and the verdicts of each against the first
        (`loadlib.report.verdicts.judge`), judged once however many outputs show them."""
        from loadlib.report.verdicts import judge

        by_label = {server.label: server for server in self.servers}
        return self.once(("verdicts", *labels), lambda: judge([by_label[label] for label in labels]))

    def _server_labels(self) -> list[str]:
        listed = [entry["label"] for entry in self.manifest.get("targets") or []]
        present = set(self.records["target"].unique()) if "target" in self.records else set()
        return [label for label in listed if label in present] + sorted(present - set(listed) - {""})

    def _server(self, label: str, entry: dict[str, Any]) -> RunView:
        """One server as a run of its own: its records, its unmeasured requests, its manifest (the
        run's, with its own entry as `target` and its own search) and its directory."""
        own = {**self.manifest, "target": {key: value for key, value in entry.items() if key != "server"}}
        for key in ("server", "targets", "search"):  # a server reads as a run of one server
            own.pop(key, None)
        own.update({key: row[key] for row in self.manifest.get("sweep") or [] if row.get("label") == label
                    for key in ("search",) if row.get(key)})  # a sweep's configuration: its own search
        if label in (self.manifest.get("search_by_target") or {}):  # an A/B run's search, this target's
            own["search"] = self.manifest["search_by_target"][label]
        if "server" in entry:
            own["server"] = entry["server"]
        records = self.records[self.records["target"] == label].reset_index(drop=True)
        unmeasured = None
        if self.unmeasured is not None:
            unmeasured = self.unmeasured[self.unmeasured["target"] == label].reset_index(drop=True)
        return RunView(records, own, target_dir(self.path, label) if self.path is not None else None, label,
                       unmeasured if unmeasured is not None and len(unmeasured) else None, goodput=self.goodput)


def read_run(run_dir: str | Path, label: str | None = None, *, slo_ttft_s: float | None = None,
             slo_decode_tps: float | None = None, lenient: bool = False, keep_copy: bool = False) -> RunView:
    """Reads a run directory (see the module's doc); the label defaults to the directory's name.
    Goodput targets not given are the run profile's, else the defaults (`goodput_slo`). `keep_copy`
    writes the journal's columnar copy where it has none (the run's end does). A file is read as a
    `vllm bench serve` result (`loadlib.outputs.vllm.read_result`)."""
    path = Path(run_dir)
    if path.is_file():
        from loadlib.outputs.vllm import read_result

        return read_result(path, label, goodput_slo({}, slo_ttft_s, slo_decode_tps))
    if lenient:
        records, unmeasured = split_records(read_records(path))
    else:
        try:
            records, unmeasured = read_journal(path, keep_copy=keep_copy)
        except JournalError as exc:
            raise RunDirError(str(exc)) from None
    manifest = read_manifest(path)
    return RunView(records, manifest, path, label or "", unmeasured, goodput_slo(manifest, slo_ttft_s, slo_decode_tps))


def read_runs(run_dirs: Sequence[str | Path], labels: Sequence[str] = (), **options: Any) -> list[RunView]:
    """Reads several run directories (`read_run`'s `options` for each), named by `labels` (default:
    their directories'); two named alike are told apart by their place ("run#1", "run#2")."""
    views = [read_run(path, label, **options) for path, label in zip(run_dirs, [*labels] or [None] * len(run_dirs))]
    names = [view.label for view in views]
    if len(set(names)) < len(names):
        views = [replace(view, label=f"{view.label}#{i + 1}") for i, view in enumerate(views)]
    return views


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """The run's manifest, or {} when the run has none (records written by other tools)."""
    path = Path(run_dir) / MANIFEST_FILE
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunDirError(f"cannot read manifest {path}: {exc}") from None
    if not isinstance(manifest, dict):
        raise RunDirError(f"cannot read manifest {path}: not a JSON object")
    return manifest
