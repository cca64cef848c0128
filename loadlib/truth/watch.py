"""Server-side truth during a run: what the target says it is, and its metrics around every cell.

`ServerWatch(...).start()` is called once per run by the session (after the driver exists,
before it starts).
It hands the target's self-description to the session for the manifest (the session is the
manifest's one writer), writes the full answers into `server_info.json`, scrapes /metrics and any
`--router-metrics` / `--worker-metrics` pages (and the GPUs' power with `--gpu-power`,
`loadlib.truth.gpu_power`) at the start and end of every cell and every `--metrics-interval`
seconds into `metrics.jsonl`, warns as soon as a cell's server accept length and client
tok/chunk disagree, and hands each cell's GPU energy (`loadlib.figures.energy.energy_table` of the
cell's scrapes) to the live metrics as the cell ends. Nothing here may stop a run: a failure is recorded or logged, and the run goes on.
"""

from __future__ import annotations

import argparse
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import gevent
import orjson
from locust.event import EventHook

from loadlib.truth.gpu_power import GpuMeter, meter_description, open_meter
from loadlib.truth.probe import SERVER_INFO_FILE, probe_server
from loadlib.truth.scrape import METRICS_FILE, parsed
from loadlib.truth.scraper import MetricsSource, Scraper, metrics_url

if TYPE_CHECKING:
    import pandas as pd

    from loadlib.scenarios import Cell

log = logging.getLogger("uni-bench")

DEFAULT_INTERVAL_S = 5.0


def add_arguments(parser: Any) -> None:
    """Adds the server-metrics options to their group of Locust's parser (called from
    `options.add_arguments`)."""
    parser.add_argument("--router-metrics", type=page_url, default=None, metavar="URL",
                        help="The router's metrics page (e.g. sglang-router's --prometheus-port), "
                             "scraped beside the target's (default: none)")
    parser.add_argument("--worker-metrics", type=page_url, nargs="+", default=[], metavar="URL",
                        include_in_web_ui=False,
                        help="Each instance's metrics page behind a router: the per-instance split (default: none)")
    parser.add_argument("--metrics-interval", type=non_negative_float, default=DEFAULT_INTERVAL_S,
                        metavar="S", help="Seconds between /metrics scrapes during the run, beside the "
                                          f"ones at every cell's start and end (default {DEFAULT_INTERVAL_S:g}; "
                                          "0: only those)")


def page_url(text: str) -> str:
    """argparse type: a metrics page URL (a bare `http://host:port` means its /metrics)."""
    try:
        return metrics_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def non_negative_float(text: str) -> float:
    """argparse type: a number of seconds, 0 allowed."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value:g}")
    return value


def metrics_sources(target: str, router: str | None = None, workers: list[str] | tuple[str, ...] = ()) -> list[MetricsSource]:
    """The pages to scrape: the target's own, the router's, then each worker's ("worker 1", ...)."""
    sources = [MetricsSource("target", metrics_url(target))]
    if router:
        sources.append(MetricsSource("router", metrics_url(router)))
    sources += [MetricsSource(f"worker {i}", metrics_url(url)) for i, url in enumerate(workers, start=1)]
    return sources


def _never_raises(method: Callable[..., None]) -> Callable[..., None]:
    """Hook boundary: a bug here is logged with its traceback, and the run goes on."""
    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> None:
        try:
            method(*args, **kwargs)
        except Exception:  # noqa: BLE001 - the run must not stop for its side view
            log.exception("server-side metrics: %s failed; the run goes on", method.__name__)
    return guarded


class ServerWatch:
    """The server's side of one run (on Locust's master or the local runner).

    It is given what it needs of the run and nothing more: the run directory, Locust's options
    (its own `--metrics-*` ones and `--insecure`), the target, a way to note its findings in the
    manifest, an ended cell's records (a records frame, shared: read, not changed), and the hooks
    of cells and of the test's stop.
    """

    def __init__(self, run_dir: Path, opts: argparse.Namespace, host: str, api_key: str | None,
                 note_in_manifest: Callable[[str, Any], None],
                 cell_frame: Callable[[Cell], pd.DataFrame],
                 cell_events: EventHook, test_stop: EventHook, target: str = "",
                 on_energy: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        self.run_dir = run_dir
        self.target = target  # an A/B run's label: this watch follows that server's cells only
        self.host = host
        self.api_key = api_key
        self.verify_tls = not opts.insecure
        self.interval_s = getattr(opts, "metrics_interval", DEFAULT_INTERVAL_S)
        self.sources = metrics_sources(host, getattr(opts, "router_metrics", None),
                                       getattr(opts, "worker_metrics", []))
        self.gpu_power = getattr(opts, "gpu_power", None)  # checked before the run (`inputs.check_gpu_power`)
        self.meter: GpuMeter | None = None
        self.note_in_manifest = note_in_manifest
        self.cell_frame = cell_frame
        self.on_energy = on_energy  # given each cell's energy rows as it ends (the live metrics)
        self.launch: dict[str, Any] = {}  # the server's launch flags, as the probe read them
        self.cell: dict[str, Any] | None = None  # tag of the cell in progress
        self._cell_entries: list[dict[str, Any]] = []
        self._cells_started = 0
        self._ticker: gevent.Greenlet | None = None
        self._hooks = ((cell_events, self.on_cell), (test_stop, self.finish))

    def start(self) -> bool:
        """Probes the target, takes the first scrape and hooks onto the run; False (logged) if it
        could not: a run without the server's view is still a run."""
        try:
            summary, bodies = probe_server(self.host, self.api_key, self.verify_tls)
            self.launch = summary.get("launch") or {}
            (self.run_dir / SERVER_INFO_FILE).write_bytes(orjson.dumps(bodies, option=orjson.OPT_INDENT_2))
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            if self.gpu_power is not None:
                self.meter = open_meter(self.gpu_power)
                self.sources.append(self.meter.source)
            self.scraper = Scraper(self.run_dir, self.sources, headers, self.verify_tls)
            first = self.scraper.scrape("run-start")
        except Exception:  # noqa: BLE001 - see the docstring
            log.exception("server-side metrics: could not start; the run goes on without them")
            if self.meter is not None:
                self.meter.close()
            return False
        self.note_in_manifest("server", {**summary, "info_file": SERVER_INFO_FILE, "metrics": {
            "file": METRICS_FILE, "interval_s": self.interval_s,
            "sources": {s.name: s.url for s in self.sources}, "missing": dict(self.scraper.missing)}})
        if self.meter is not None:
            page = next(e for e in first if e["source"] == self.meter.source.name)
            self.note_in_manifest("gpu_power", meter_description(self.gpu_power, page))
        if self.interval_s > 0 and self.scraper.active:
            self._ticker = gevent.spawn(self._tick)
        for hook, listener in self._hooks:
            hook.add_listener(listener)
        return True

    @_never_raises
    def on_cell(self, cell: Any, phase: str, **_kwargs: Any) -> None:
        """Cell hook: scrape when a cell starts and ends; warn on divergence at its end."""
        if getattr(cell, "target", "") != self.target:
            return
        if phase == "start":
            self.cell = {"cell_index": self._cells_started, "cell": cell.name, "case": cell.case}
            self._cells_started += 1
            self._cell_entries = []
        tag = self.cell
        self._cell_entries += self.scraper.scrape(phase, tag)
        if phase == "end":
            self.cell = None
            self._cell_ended(tag, cell)

    def _tick(self) -> None:
        while True:
            gevent.sleep(self.interval_s)
            self._scrape_interval()

    @_never_raises
    def _scrape_interval(self) -> None:
        entries = self.scraper.scrape("interval", self.cell)
        if self.cell is not None:
            self._cell_entries += entries

    @_never_raises
    def finish(self, **_kwargs: Any) -> None:
        """The test stopped: a last scrape, then this run's hooks are released."""
        for hook, listener in self._hooks:
            hook.remove_listener(listener)
        if self._ticker is not None:
            self._ticker.kill(block=False)
        self.scraper.scrape("run-end")
        self.scraper.close()
        if self.meter is not None:
            self.meter.close()

    def _cell_ended(self, tag: dict[str, Any] | None, cell: Cell) -> None:
        """A cell's scrapes, parsed once: a warning where its accept length and tok/chunk
        disagree, and its GPUs' energy handed on."""
        if tag is None:
            return
        from loadlib.truth import energy, server_figures  # tables (pandas): workers import this module for its options

        records = self.cell_frame(cell)
        entries = [parsed(e, server_figures.NAMES_READ | energy.NAMES_READ) for e in self._cell_entries]
        self._warn_on_divergence(tag, records, entries)
        if self.meter is not None and self.on_energy is not None:
            from loadlib.figures.energy import energy_table, json_rows

            self.on_energy(json_rows(energy_table(entries, records)))

    def _warn_on_divergence(self, tag: dict[str, Any], records: Any, entries: list[dict[str, Any]]) -> None:
        from loadlib.truth import server_figures

        for server in server_figures.server_cells(entries, records, self.launch):
            own = server_figures.cell_records(records, server.span)
            client = server_figures.client_tok_per_chunk(own)
            relative = server_figures.divergence(server.accept_length, client)
            if server_figures.diverges(relative, server.accept_tolerance):
                label = f"{tag['cell']} {server_figures.cell_scenario(server.span, own)}".strip()
                log.warning("%s: %s accept length %.2f (%s) but client tok/chunk %.2f (%+.0f%%): "
                            "chunks are merged on the way (--stream-interval above 1, or a proxy)",
                            label, server.source, server.accept_length, server.accept_basis,
                            client, relative * 100)
