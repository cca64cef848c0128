"""GPU energy per cell, read back from the GPU meter's scrapes in `metrics.jsonl` (source `gpu`,
taken with the server's at every cell's start and end and every --metrics-interval: see
`loadlib.truth.gpu_power`).

A cell's joules are an energy counter's change between the cell's start and end scrapes, as the
server's own figures are counters' changes (`loadlib.truth.server_figures`); where a page has no
energy counter, the power samples of the cell's scrapes integrated over time. Its peak is the
highest power seen during the cell: NVML's sampler's highest since the previous scrape (it samples
every few tenths of a second), a DCGM exporter's power gauge at each scrape.

Both pages label each GPU as dcgm-exporter does: `gpu` (its index) and `modelName`. The names a
DCGM exporter uses are those of its default counters (NVIDIA/dcgm-exporter, etc/default-counters.csv):
    DCGM_FI_DEV_POWER_USAGE,              gauge, Power draw (in W).
    DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
NVML's are the page `gpu_power.NvmlMeter` writes from nvidia-ml-py's counters (mJ and mW, as
NVML gives them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from loadlib.truth.server_figures import CellSpan

GPU_SOURCE = "gpu"  # the scrapes' `source`
ALL = "all"  # the row of every GPU read, summed
COUNTER, SAMPLES = "counter", "power samples"  # how a cell's joules were had


@dataclass(frozen=True)
class Meter:
    """What one kind of GPU meter's page says, and in which units; None where it says nothing."""

    kind: str
    energy: str | None  # a counter of energy since boot, per GPU
    joules_per_unit: float
    power: str  # a gauge: the power drawn now, per GPU
    watts_per_unit: float
    peak: str | None = None  # the highest power since the previous scrape, per GPU
    total_peak: str | None = None  # the highest power of every GPU together since the previous scrape
    samples: str | None = None  # a counter of power samples taken (behind `peak`)
    power_limit: str | None = None  # per GPU

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.energy, self.power, self.peak, self.total_peak, self.samples,
                                 self.power_limit) if n)


DCGM = Meter("dcgm", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e-3, "DCGM_FI_DEV_POWER_USAGE", 1.0)
NVML = Meter("nvml", "nvml_energy_millijoules_total", 1e-3, "nvml_power_milliwatts", 1e-3,
             peak="nvml_power_peak_milliwatts", total_peak="nvml_total_power_peak_milliwatts",
             samples="nvml_power_samples_total", power_limit="nvml_power_limit_milliwatts")
METERS = (NVML, DCGM)

# the only samples the figures need; a counter declared by `# TYPE` is parsed with `_total` added
NAMES_READ = frozenset(n for m in METERS for name in m.names for n in (name, name.removesuffix("_total") + "_total"))


@dataclass(frozen=True)
class GpuCell:
    """One GPU's (or every GPU's, `gpu` = ALL) energy over one cell; None where it cannot be had."""

    span: CellSpan
    meter: str  # `Meter.kind`
    gpu: str  # its index, or ALL
    joules: float | None
    energy_via: str | None  # COUNTER or SAMPLES
    seconds: float  # from the start scrape to the end scrape (each at the middle of its asking and answer, `_moment`)
    peak_watts: float | None
    samples: int  # power samples behind the peak


def meter_of(entries: Iterable[dict[str, Any]]) -> Meter | None:
    """The meter whose names a page uses, or None (a page of neither)."""
    for entry in entries:
        names = {sample[0] for sample in entry.get("samples") or ()}
        for meter in METERS:
            if any(_named(name, own) for name in names for own in (meter.energy, meter.power)):
                return meter
    return None


def gpus_on_page(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPUs a parsed page names, for the manifest: index, model name, and the power limit
    where the page gives it (NVML's enforced limit)."""
    meter = meter_of([entry])
    if meter is None:
        return []
    limits = _per_gpu(entry, meter.power_limit)
    names = {s[1]["gpu"]: s[1].get("modelName") for s in entry["samples"]
             if "gpu" in s[1] and (_named(s[0], meter.power) or _named(s[0], meter.energy))}
    return [{"index": int(gpu) if gpu.isdigit() else gpu, "name": names[gpu],
             "power_limit_w": limits[gpu] * meter.watts_per_unit if gpu in limits else None}
            for gpu in sorted(names, key=_order)]


def gpu_cells(entries: Iterable[dict[str, Any]]) -> list[GpuCell]:
    """Per cell, each GPU's energy and every GPU's together (`ALL`), from the GPU meter's parsed
    scrapes (other sources' are passed over); none for a cell without a start and an end scrape."""
    meter, cells = _cells(entries)
    return [c for span, points in cells for c in _cell(meter, span, points)] if meter is not None else []


def energy_steps(entries: Iterable[dict[str, Any]]) -> dict[CellSpan, list[tuple[float, float, float]]]:
    """Per cell, its span cut at the GPU meter's scrapes: (from, to, joules of every GPU read) for
    each stretch between two scrapes whose joules are known, a stretch over which a counter did
    not move joined to the next (an exporter that had not collected since); for a resampled
    figure (`loadlib.figures.verdicts.energy_samples`). Empty for a run without a GPU meter."""
    meter, cells = _cells(entries)
    found: dict[CellSpan, list[tuple[float, float, float]]] = {}
    if meter is None:
        return found
    for span, points in cells:
        gpus = _gpus(meter, points[-1])
        steps, since = [], points[0]
        for point in points[1:]:
            joules = [_joules(meter, [since, point], gpu)[0] for gpu in gpus]
            if gpus and all(j is not None for j in joules):
                steps.append((_moment(since), _moment(point), float(sum(joules))))
                since = point
        found[span] = steps
    return found


# --- internals -----------------------------------------------------------------------------

def _cells(entries: Iterable[dict[str, Any]]) -> tuple[Meter | None, list[tuple[CellSpan, list[dict[str, Any]]]]]:
    """The GPU meter and, per cell that has a start and an end scrape, its span and the scrapes
    read over it in order: the start scrape, those taken during the cell, the end scrape. No
    cells without a GPU meter."""
    by_cell: dict[int, list[dict[str, Any]]] = {}
    for entry in entries:
        if entry.get("source") == GPU_SOURCE and entry.get("cell_index") is not None:
            by_cell.setdefault(entry["cell_index"], []).append(entry)
    meter = meter_of(e for cell in by_cell.values() for e in cell)
    if meter is None:
        return None, []
    cells = []
    for cell in by_cell.values():
        ok = [e for e in cell if not e.get("error") and "samples" in e]
        start = next((e for e in ok if e["phase"] == "start"), None)
        end = next((e for e in ok if e["phase"] == "end"), None)
        if start is not None and end is not None:
            span = CellSpan(start["cell_index"], start["cell"], start.get("case"), start["t"], end["t"],
                            start.get("t_asked"), end.get("t_asked"))
            cells.append((span, [start, *(e for e in ok if e["phase"] == "interval"
                                          and start["t"] <= e["t"] <= end["t"]), end]))
    return meter, cells


def _gpus(meter: Meter, entry: dict[str, Any]) -> list[str]:
    return sorted(_per_gpu(entry, meter.power) | _per_gpu(entry, meter.energy), key=_order)


def _cell(meter: Meter, span: CellSpan, points: list[dict[str, Any]]) -> list[GpuCell]:
    start, after = points[0], points[1:]  # what was read during the cell: after its start, up to and with its end
    seconds = _moment(after[-1]) - _moment(start)
    cells = []
    for gpu in _gpus(meter, after[-1]):
        joules, via = _joules(meter, points, gpu)
        peaks = [p[gpu] for p in (_per_gpu(e, meter.peak or meter.power) for e in after) if gpu in p]
        cells.append(GpuCell(span, meter.kind, gpu, joules, via, seconds,
                             max(peaks) * meter.watts_per_unit if peaks else None, _samples(meter, start, after)))
    if len(cells) > 1:
        cells.append(_all(meter, span, cells, after))
    return cells


def _all(meter: Meter, span: CellSpan, cells: list[GpuCell], after: list[dict[str, Any]]) -> GpuCell:
    """Every GPU together: the joules summed, the peak of the summed power (not the sum of each
    GPU's peak: they need not peak at once)."""
    joules = None if any(c.joules is None for c in cells) else sum(c.joules for c in cells)
    vias = {c.energy_via for c in cells}
    if meter.total_peak:
        peaks = [v for v in (_sum(e, meter.total_peak) for e in after) if v is not None]
    else:
        peaks = [sum(p.values()) for p in (_per_gpu(e, meter.power) for e in after) if p]
    return GpuCell(span, meter.kind, ALL, joules, vias.pop() if len(vias) == 1 else None, cells[0].seconds,
                   max(peaks) * meter.watts_per_unit if peaks else None, cells[0].samples)


def _joules(meter: Meter, entries: list[dict[str, Any]], gpu: str) -> tuple[float | None, str | None]:
    """The counter's change from the first entry (the start scrape) to the last (the end scrape);
    without a counter on the page, the power of every entry integrated (trapezoids). A counter
    that did not move (an exporter that had not collected since: dcgm-exporter's -c, 30 s by
    default) or went back (a reset) gives no figure: no GPU draws nothing."""
    first, last = entries[0], entries[-1]
    if meter.energy and gpu in _per_gpu(last, meter.energy):
        before, after = _per_gpu(first, meter.energy).get(gpu), _per_gpu(last, meter.energy)[gpu]
        if before is None or after <= before:
            return None, None
        return (after - before) * meter.joules_per_unit, COUNTER
    points = [(_moment(e), p[gpu]) for e in entries if gpu in (p := _per_gpu(e, meter.power))]
    if len(points) < 2 or points[0][0] != _moment(first) or points[-1][0] != _moment(last):
        return None, None
    joules = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:]))
    return joules * meter.watts_per_unit, SAMPLES


def _samples(meter: Meter, start: dict[str, Any], after: list[dict[str, Any]]) -> int:
    """Power samples behind the peak: the meter's own count of them where it keeps one, else the
    scrapes that read the power."""
    if meter.samples:
        before, now = _sum(start, meter.samples), _sum(after[-1], meter.samples)
        if before is not None and now is not None and now >= before:
            return int(now - before)
    return sum(1 for e in after if _per_gpu(e, meter.power))


def _moment(entry: dict[str, Any]) -> float:
    """When a scrape read its values: between its asking and its page's answer (the middle; `t`,
    when every source's page had come, where the meter kept no time of its own)."""
    answered = entry.get("t_read", entry["t"])
    asked = entry.get("t_asked")
    return (asked + answered) / 2 if asked is not None else answered


def _named(sample_name: str, name: str | None) -> bool:
    """Whether a parsed sample is `name`'s: the parser adds `_total` to a counter declared by `# TYPE`."""
    return name is not None and sample_name in (name, name.removesuffix("_total") + "_total")


def _per_gpu(entry: dict[str, Any], name: str | None) -> dict[str, float]:
    """A metric's value per GPU (label `gpu`). A GPU split into MIG instances repeats its
    device-wide values on each instance's series: the first is kept."""
    values: dict[str, float] = {}
    for sample_name, labels, value in entry.get("samples") or ():
        if _named(sample_name, name) and "gpu" in labels:
            values.setdefault(labels["gpu"], float(value))
    return values


def _sum(entry: dict[str, Any], name: str) -> float | None:
    values = [float(v) for n, _labels, v in entry.get("samples") or () if _named(n, name)]
    return sum(values) if values else None


def _order(gpu: str) -> tuple[int, str]:
    """GPUs by index: "2" before "10"."""
    return (int(gpu), "") if gpu.isdigit() else (-1, gpu)
