"""NVML on a real GPU, read as `--gpu-power nvml` reads it: for a few seconds, each GPU's joules,
mean and peak watts, through the run's own reader (`loadlib.truth.gpu_power.NvmlMeter`, two scrapes
framing one span read back by `loadlib.truth.energy`, as a cell's are). Beside them, the mean of
the power samples taken meanwhile, which the energy counter's mean must match on a steady load
(within a few %: NVML's power reading is a mean over 1 s on Ampere and later GPUs but the A100),
and what each NVML call costs the event loop.

    pip install -e '.[gpu]'
    python benchmarks/energy_check.py [--seconds 10] [--gpus 0,1]

Run it idle, then while a server is under load (a uni-locust run on the same box) to see the draw move.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gevent  # noqa: E402

from loadlib.truth import energy  # noqa: E402
from loadlib.truth.gpu_power import GpuPowerError, NvmlMeter  # noqa: E402
from loadlib.truth.scrape import parsed  # noqa: E402

SAMPLE_S = 0.1


def scrape(meter: NvmlMeter, phase: str, asked: float) -> dict:
    """One page framed as the run's scraper frames a cell's edge."""
    entry = {"t_asked": asked, **meter.read(), "t": time.time(), "source": energy.GPU_SOURCE, "url": "nvml",
             "phase": phase, "cell_index": 0, "cell": "check", "case": "check"}
    if entry["error"]:
        sys.exit(f"NVML: {entry['error']}")
    return parsed(entry, energy.NAMES_READ)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--gpus", default="", help="GPU indices, e.g. 0,1 (default: every GPU)")
    args = parser.parse_args()
    try:
        meter = NvmlMeter(tuple(int(i) for i in args.gpus.split(",") if i.strip()))
    except GpuPowerError as exc:
        sys.exit(f"--gpu-power nvml: {exc}")
    samples: dict[int, list[float]] = {i: [] for i in meter.gpus}
    call_ms: list[float] = []
    try:
        start = scrape(meter, "start", time.time())
        ends = time.monotonic() + args.seconds
        while time.monotonic() < ends:
            began = time.perf_counter()
            power = meter.sample()
            call_ms.append((time.perf_counter() - began) * 1000 / len(power))
            for index, mw in power.items():
                samples[index].append(mw / 1000)
            gevent.sleep(SAMPLE_S)  # the meter's own sampler runs too, as in a run
        asked = time.time()
        began = time.perf_counter()
        end = scrape(meter, "end", asked)
        page_ms = (time.perf_counter() - began) * 1000
    finally:
        meter.close()
    gpus = {str(g["index"]): g for g in energy.gpus_on_page(start)}
    cells = energy.gpu_cells([start, end])
    print(f"NVML: {len(gpus)} GPU(s) read for {cells[0].seconds:.2f} s; the meter's peak from {cells[0].samples} "
          f"samples, the mean of samples from {len(call_ms)} taken every {SAMPLE_S:g} s")
    print(f"  {'GPU':<5}{'name':<28}{'limit W':>9}{'joules':>11}{'mean W':>9}{'samples mean W':>16}"
          f"{'diff':>8}{'peak W':>9}")
    for cell in cells:
        gpu = gpus.get(cell.gpu, {})
        mean_w = cell.joules / cell.seconds if cell.joules is not None else None
        sampled = (statistics.fmean(samples[int(cell.gpu)]) if cell.gpu != energy.ALL
                   else sum(statistics.fmean(s) for s in samples.values()))
        diff = f"{(mean_w / sampled - 1) * 100:+.1f}%" if mean_w is not None and sampled else "-"
        limit = gpu.get("power_limit_w")
        print(f"  {cell.gpu:<5}{str(gpu.get('name', '')):<28}{limit if limit is not None else '-':>9}"
              f"{_num(cell.joules):>11}{_num(mean_w):>9}{_num(sampled):>16}{diff:>8}{_num(cell.peak_watts):>9}")
    print(f"cost on the event loop: nvmlDeviceGetPowerUsage {statistics.median(call_ms):.3f} ms per GPU (median), "
          f"a whole page (every GPU's counters) {page_ms:.2f} ms")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


if __name__ == "__main__":
    main()
