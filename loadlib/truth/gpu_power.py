"""The GPUs' power during a run (`--gpu-power`): one more metrics source, scraped with the server's
at every cell's start and end and every --metrics-interval into `metrics.jsonl` (source `gpu`),
so that each cell's joules are a counter's change between its edge scrapes, as the server's own
figures are (read back by `loadlib.truth.energy`).

- `nvml` or `nvml:0,1`: NVML on this machine (the package nvidia-ml-py, the extra `gpu`), every
  GPU or those named. Each scrape is a page made here (`NvmlMeter.read`) from the GPUs' total
  energy counters, their power now, and the highest power a greenlet sampled since the previous
  scrape, every `SAMPLE_INTERVAL_S`. NVML's power reading (`nvmlDeviceGetPowerUsage`) is a mean
  over 1 s on Ampere and later GPUs but the A100, as NVML documents it, so sampling faster finds
  no higher peak there; on an A100 or older it is instantaneous, and a shorter spike can be missed.
- `dcgm=URL`: a DCGM exporter's page (dcgm-exporter, port 9400 by default), fetched as the
  server's is, without the target's API key.

`gpu_power_problem` opens the meter once before the run, so that a missing NVML, a GPU that is
not there or an exporter without the metrics is one line and exit code 2, not a run without its
figures. The page names are `loadlib.truth.energy`'s, imported where used: workers import this
module for the option, and that module reads with pandas.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import gevent

from loadlib.truth.scrape import parsed
from loadlib.truth.scraper import MetricsSource, fetch_metrics, metrics_url

SAMPLE_INTERVAL_S = 0.25
GPU_SOURCE = "gpu"  # `energy.GPU_SOURCE`, the scrapes' source name
NVML, DCGM = "nvml", "dcgm"
INSTALL_HINT = "pip install -e '.[gpu]'"


class GpuPowerError(Exception):
    """Why the GPU meter cannot be read, in one line."""


@dataclass(frozen=True)
class GpuPower:
    """The `--gpu-power` asked for: NVML (every GPU, or those `gpus`) or a DCGM exporter's `url`."""

    meter: str  # NVML or DCGM
    gpus: tuple[int, ...] = ()  # NVML: the GPUs named; () every GPU
    url: str = ""  # DCGM: the exporter's metrics page

    def __str__(self) -> str:
        if self.meter == DCGM:
            return f"{DCGM}={self.url}"
        return NVML + (":" + ",".join(map(str, self.gpus)) if self.gpus else "")


def parse_gpu_power(text: str) -> GpuPower:
    """`nvml`, `nvml:0,1` or `dcgm=URL` (a bare `http://host:port` means its /metrics); raises
    ValueError (one line) for anything else."""
    kind, sep, rest = text.strip().partition("=" if text.strip().startswith(DCGM) else ":")
    if kind == NVML and not sep:
        return GpuPower(NVML)
    if kind == NVML and rest:
        try:
            gpus = tuple(int(part) for part in rest.split(","))
        except ValueError:
            raise ValueError(f"nvml:GPUS takes GPU indices like nvml:0,1, got {text!r}") from None
        if min(gpus) < 0 or len(set(gpus)) != len(gpus):
            raise ValueError(f"nvml:GPUS takes distinct GPU indices from 0, got {text!r}")
        return GpuPower(NVML, gpus)
    if kind == DCGM and rest:
        try:
            return GpuPower(DCGM, url=metrics_url(rest))
        except ValueError as exc:
            raise ValueError(f"dcgm=URL: {exc}") from None
    raise ValueError(f"expected nvml, nvml:0,1 or dcgm=URL, got {text!r}")


def gpu_power_option(text: str) -> str:
    """argparse type: the meter as `parse_gpu_power` reads it, kept as text (Locust sends the
    options to its workers as plain values)."""
    try:
        return str(parse_gpu_power(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gpu_power_problem(power: str) -> str | None:
    """Why the meter `--gpu-power` names cannot be read now, in one line; None when it can
    (checked before the run)."""
    try:
        meter = open_meter(power)
    except GpuPowerError as exc:
        return str(exc)
    try:
        problem = _page_problem(meter.read())
    finally:
        meter.close()
    return problem


def _page_problem(entry: dict[str, Any]) -> str | None:
    """What is wrong with a GPU meter's scrape: its error, or a page without the metrics read."""
    from loadlib.truth import energy

    page = parsed(entry, energy.NAMES_READ)
    if page.get("error"):
        return page["error"]
    if energy.meter_of([page]) is None:
        return (f"the page has neither {energy.DCGM.energy} nor {energy.DCGM.power} (dcgm-exporter's "
                "default counters have both)")
    return None


def meter_description(power: str, page: dict[str, Any]) -> dict[str, Any]:
    """What the manifest keeps of the meter: what was asked, and the GPUs its first scrape named
    (index, name, power limit where the page gives it: NVML's enforced limit)."""
    from loadlib.truth import energy

    return {"meter": power, "gpus": energy.gpus_on_page(parsed(page, energy.NAMES_READ)),
            "sample_interval_s": SAMPLE_INTERVAL_S if parse_gpu_power(power).meter == NVML else None}


class GpuMeter:
    """A GPU meter as the scraper reads it: `source`, `read()` one scrape, `close()`. A scrape
    keeps when its own page came (`t_read`): the scrape's `t` waits for the slowest page of all."""

    source: MetricsSource

    def read(self) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class DcgmMeter(GpuMeter):
    """A DCGM exporter's metrics page (asked without the target's API key, which is not its own)."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.source = MetricsSource(GPU_SOURCE, url, read=self.read)
        self.timeout_s = timeout_s

    def read(self) -> dict[str, Any]:
        return {**fetch_metrics(self.source.url, {}, timeout_s=self.timeout_s), "t_read": time.time()}


class NvmlMeter(GpuMeter):
    """NVML's counters of this machine's GPUs (every one, or those `indices`), as one Prometheus
    page per scrape; a greenlet samples the power between scrapes for the peak."""

    def __init__(self, indices: tuple[int, ...] = ()) -> None:
        from loadlib.truth import energy

        self.names = energy.NVML
        self.nvml = _pynvml()
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise GpuPowerError(f"NVML did not start ({exc}): is the NVIDIA driver installed?") from None
        try:
            self.gpus = self._open(indices)
            self.source = MetricsSource(GPU_SOURCE, str(GpuPower(NVML, indices)), read=self.read)
            self._peaks: dict[int, float] = {}
            self._total_peak = 0.0
            self._samples = 0
            self.sample()
        except (GpuPowerError, self.nvml.NVMLError) as exc:
            self.nvml.nvmlShutdown()
            raise GpuPowerError(str(exc)) from None
        self._sampler = gevent.spawn(self._sample_every, SAMPLE_INTERVAL_S)

    def _open(self, indices: tuple[int, ...]) -> dict[int, tuple[Any, str, float | None]]:
        """GPU index -> (its handle, its name, its power limit in mW); checks each has an energy counter."""
        nvml = self.nvml
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise GpuPowerError("NVML finds no GPU")
        absent = [i for i in indices if i >= count]
        if absent:
            raise GpuPowerError(f"no GPU {absent[0]}: NVML finds {count} (GPU 0 to {count - 1})")
        gpus = {}
        for index in indices or range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except nvml.NVMLError as exc:
                raise GpuPowerError(f"GPU {index} ({name}) has no total-energy counter (NVML: {exc}; "
                                    "Volta and later GPUs have one)") from None
            try:
                limit = float(nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
            except nvml.NVMLError:
                limit = None
            gpus[index] = (handle, name, limit)
        return gpus

    def sample(self) -> dict[int, float]:
        """Each GPU's power now (mW), kept for the peak until the next page."""
        power = {i: float(self.nvml.nvmlDeviceGetPowerUsage(handle)) for i, (handle, _, _) in self.gpus.items()}
        for index, value in power.items():
            self._peaks[index] = max(self._peaks.get(index, 0.0), value)
        self._total_peak = max(self._total_peak, sum(power.values()))
        self._samples += 1
        return power

    def _sample_every(self, interval_s: float) -> None:
        while True:
            gevent.sleep(interval_s)
            try:
                self.sample()
            except self.nvml.NVMLError:  # a GPU lost mid-run: the scrape says so (`read`)
                pass

    def read(self) -> dict[str, Any]:
        """One scrape: each GPU's energy counter (mJ), its power now and its highest power since the
        previous scrape (mW), its power limit, and the samples taken; an `error` if NVML fails."""
        names, nvml = self.names, self.nvml
        try:
            power = self.sample()
            energy = {i: nvml.nvmlDeviceGetTotalEnergyConsumption(handle) for i, (handle, _, _) in self.gpus.items()}
        except nvml.NVMLError as exc:
            return {"error": f"NVML: {exc}"}
        labels = {i: f'gpu="{i}",modelName="{_escaped(name)}"' for i, (_, name, _) in self.gpus.items()}
        lines = [f"# TYPE {names.energy.removesuffix('_total')} counter",
                 *(f"{names.energy}{{{labels[i]}}} {value}" for i, value in energy.items()),
                 f"# TYPE {names.power} gauge", *(f"{names.power}{{{labels[i]}}} {value:g}" for i, value in power.items()),
                 f"# TYPE {names.peak} gauge", *(f"{names.peak}{{{labels[i]}}} {self._peaks[i]:g}" for i in power),
                 f"# TYPE {names.total_peak} gauge", f"{names.total_peak} {self._total_peak:g}",
                 f"# TYPE {names.samples.removesuffix('_total')} counter", f"{names.samples} {self._samples}",
                 f"# TYPE {names.power_limit} gauge",
                 *(f"{names.power_limit}{{{labels[i]}}} {limit:g}" for i, (_, _, limit) in self.gpus.items()
                   if limit is not None)]
        self._peaks, self._total_peak = {}, 0.0  # the next page's peak is of the samples after this one
        return {"error": None, "text": "\n".join(lines) + "\n", "t_read": time.time()}

    def close(self) -> None:
        self._sampler.kill(block=False)
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def open_meter(power: str) -> GpuMeter:
    """The meter `--gpu-power` names, ready to read; raises `GpuPowerError` (one line)."""
    asked = parse_gpu_power(power)
    return NvmlMeter(asked.gpus) if asked.meter == NVML else DcgmMeter(asked.url)


def _pynvml() -> Any:
    """nvidia-ml-py's module, imported only when NVML is asked for."""
    try:
        import pynvml
    except ImportError:
        raise GpuPowerError(f"nvidia-ml-py is not installed ({INSTALL_HINT})") from None
    return pynvml


def _escaped(value: str) -> str:
    """A Prometheus label value as the text format writes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
