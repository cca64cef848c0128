"""Energy per cell (`--gpu-power`): the GPU meter's scrapes -> each GPU's joules, mean and peak
watts per cell, and J/token.

Known answers three ways: synthetic scrapes of a DCGM exporter's page (names and units from
dcgm-exporter's default counters) and of the page made from NVML; NVML's reader driven by a test
double of nvidia-ml-py's C library (`FakeNvmlLibrary`, injected as the `pynvml` module); and a real
HTTP exporter this test serves on 127.0.0.1 whose energy counters grow at 300 W and 100 W, read by
the scraper and by a headless run against the simulator. The error paths are real: an exporter
that is not there, a page without the metrics, and NVML on this machine, which has no GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pandas as pd
import pytest
from locust.argument_parser import get_parser
from locust.rpc.protocol import Message

from analysis.report import run_report
from loadlib.figures import verdicts
from loadlib.figures.energy import energy_table
from loadlib.report.document import rows
from loadlib.run import options
from loadlib.run_view import read_run
from loadlib.truth import energy, gpu_power
from loadlib.truth.gpu_power import GpuPower, NvmlMeter, gpu_power_option, gpu_power_problem, parse_gpu_power
from loadlib.truth.scrape import parsed, read_scrapes
from loadlib.truth.scraper import Scraper
from tests.conftest import FAST_SIM, free_port, run_locust, run_locust_together, served
from tests.truth.test_server_truth import client_records

T0 = 1_800_000_000.0  # client_records' cell ("c4-same", 4 x 512 tokens) is sent at T0 + 1


def scrape(offset: float, phase: str, text: str) -> dict:
    """A GPU meter's scrape of the cell as the journal keeps it, parsed as the report parses it."""
    return parsed({"t": T0 + offset, "source": "gpu", "url": "http://gpu-box:9400/metrics", "phase": phase,
                   "cell_index": 0, "cell": "c4-same", "case": "same", "error": None, "text": text},
                  energy.NAMES_READ)


def dcgm_page(energy_mj: dict[int, float] | None, power_w: dict[int, float]) -> str:
    """A DCGM exporter's page as dcgm-exporter renders it: each family's HELP and TYPE, then its
    samples, labelled gpu, UUID, pci_bus_id, device, modelName, Hostname."""
    def labels(gpu: int) -> str:
        return (f'gpu="{gpu}",UUID="GPU-{gpu:04d}",pci_bus_id="00000000:0{gpu}:00.0",device="nvidia{gpu}",'
                f'modelName="NVIDIA GeForce RTX 3090",Hostname="gpu-box"')
    lines = ["# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).", "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
             *(f"DCGM_FI_DEV_GPU_TEMP{{{labels(g)}}} 61" for g in power_w),
             "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).", "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
             *(f"DCGM_FI_DEV_POWER_USAGE{{{labels(g)}}} {w}" for g, w in power_w.items())]
    if energy_mj is not None:
        lines += ["# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).",
                  "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
                  *(f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels(g)}}} {mj:.0f}" for g, mj in energy_mj.items())]
    return "\n".join(lines) + "\n"


def table(entries: list[dict]) -> list[dict]:
    return rows(energy_table(entries, client_records(chunks=128)))


def by_gpu(found: list[dict]) -> dict[str, dict]:
    return {row["gpu"]: row for row in found}


# --- synthetic scrapes -> the table --------------------------------------------------------------

def test_a_dcgm_page_gives_each_gpus_joules_mean_and_peak_watts_and_their_sum():
    # 10 s: GPU 0 counts 3,000 J (300 W), GPU 1 1,500 J (150 W); power 320/140 W mid-cell, 290/160 W at its end
    base = {0: 9_000_000_000, 1: 4_000_000_000}
    found = by_gpu(table([
        scrape(0.0, "start", dcgm_page(base, {0: 250, 1: 120})),
        scrape(5.0, "interval", dcgm_page({0: base[0] + 1_500_000, 1: base[1] + 750_000}, {0: 320, 1: 140})),
        scrape(10.0, "end", dcgm_page({0: base[0] + 3_000_000, 1: base[1] + 1_500_000}, {0: 290, 1: 160}))]))
    assert list(found) == ["0", "1", "all"]
    tokens = 4 * 512
    for gpu, joules, peak in (("0", 3000.0, 320.0), ("1", 1500.0, 160.0), ("all", 4500.0, 460.0)):
        row = found[gpu]
        assert row["joules"] == pytest.approx(joules) and row["seconds"] == pytest.approx(10.0)
        assert row["mean_watts"] == pytest.approx(joules / 10) and row["peak_watts"] == pytest.approx(peak)
        assert row["completion_tokens"] == tokens
        assert row["joules_per_token"] == pytest.approx(joules / tokens)
        assert row["tokens_per_joule"] == pytest.approx(tokens / joules)
        assert (row["energy_via"], row["samples"], row["meter"]) == ("counter", 2, "dcgm")
    # all: the peak of the summed power (460 W mid-cell), not the sum of each GPU's peak (480 W)
    assert found["all"]["peak_watts"] < found["0"]["peak_watts"] + found["1"]["peak_watts"]


def test_without_an_energy_counter_the_power_samples_are_integrated():
    # 200 W, 400 W, 200 W at 0, 5 and 10 s: trapezoids of 5 s x 300 W each
    found = by_gpu(table([scrape(0.0, "start", dcgm_page(None, {0: 200})),
                          scrape(5.0, "interval", dcgm_page(None, {0: 400})),
                          scrape(10.0, "end", dcgm_page(None, {0: 200}))]))
    assert list(found) == ["0"]  # one GPU: no "all" row
    assert found["0"]["joules"] == pytest.approx(3000.0) and found["0"]["energy_via"] == "power samples"
    assert found["0"]["mean_watts"] == pytest.approx(300.0) and found["0"]["peak_watts"] == 400.0


def test_power_sampled_below_the_cells_mean_is_no_peak():
    # 10 s of 400 W by the counter, the power gauge read once at 300 W: the spikes were missed
    found = by_gpu(table([scrape(0.0, "start", dcgm_page({0: 9_000_000_000}, {0: 300})),
                          scrape(10.0, "end", dcgm_page({0: 9_004_000_000}, {0: 300}))]))
    assert found["0"]["mean_watts"] == pytest.approx(400.0) and found["0"]["peak_watts"] is None


def test_a_counter_that_did_not_move_gives_no_figure():
    # dcgm-exporter collects every 30 s by default: a shorter cell may see the same counter twice
    page = dcgm_page({0: 9_000_000_000}, {0: 300})
    [row] = table([scrape(0.0, "start", page), scrape(10.0, "end", page)])
    assert row["joules"] is None and row["mean_watts"] is None and row["tokens_per_joule"] is None
    assert row["peak_watts"] == 300.0  # the power sample is still a sample


def test_edges_are_timed_between_asking_and_answer_and_other_sources_are_passed_over():
    entries = [scrape(0.0, "start", dcgm_page({0: 0}, {0: 300})), scrape(10.0, "end", dcgm_page({0: 3_000_000}, {0: 300}))]
    entries[0]["t_asked"], entries[1]["t_asked"] = T0 - 0.2, T0 + 9.8  # each page took 0.2 s to come
    target = {**entries[0], "source": "target"}
    [row] = table([target, *entries])
    assert row["seconds"] == pytest.approx(10.0) and row["mean_watts"] == pytest.approx(300.0)


def test_a_run_without_a_gpu_meter_has_no_rows():
    assert table([]) == []
    assert energy.gpu_cells([scrape(0.0, "start", "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n"),
                             scrape(1.0, "end", "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n")]) == []


# --- NVML, through a test double of nvidia-ml-py's C library -------------------------------------

class FakeNvmlLibrary(types.ModuleType):
    """TEST DOUBLE of `pynvml` (nvidia-ml-py), standing in for the NVIDIA driver's C library,
    which this machine does not have: GPUs with an energy counter (mJ), a power reading (mW) the
    test sets, a name and a power limit; the calls the tool makes, with NVML's error class."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: int = 2, energy_counter: bool = True, starts: bool = True) -> None:
        super().__init__("pynvml")
        self.energy_mj = [1_000_000 * (i + 1) for i in range(gpus)]
        self.power_mw = [100_000.0] * gpus
        self.energy_counter, self.starts, self.started = energy_counter, starts, 0

    def nvmlInit(self) -> None:  # noqa: N802 (NVML's names)
        if not self.starts:
            raise self.NVMLError("Driver Not Loaded")
        self.started += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.started -= 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.power_mw)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:  # noqa: N802
        return "NVIDIA GeForce RTX 3090"

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:  # noqa: N802
        return 260_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:  # noqa: N802
        if not self.energy_counter:
            raise self.NVMLError("Not Supported")
        return self.energy_mj[handle]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> float:  # noqa: N802
        return self.power_mw[handle]


@pytest.fixture
def fake_nvml(monkeypatch):
    library = FakeNvmlLibrary()
    monkeypatch.setitem(sys.modules, "pynvml", library)
    return library


def nvml_scrape(meter: NvmlMeter, offset: float, phase: str) -> dict:
    entry = meter.read()
    assert entry["error"] is None
    return scrape(offset, phase, entry["text"])


def test_nvml_gives_each_gpus_energy_and_the_peak_its_sampler_saw(fake_nvml):
    meter = NvmlMeter()
    try:
        start = nvml_scrape(meter, 0.0, "start")
        for watts in (250, 310, 180):  # the sampler's readings during the cell: GPU 0 peaks at 310 W
            fake_nvml.power_mw = [watts * 1000.0, 90_000.0]
            meter.sample()
        fake_nvml.power_mw = [200_000.0, 95_000.0]
        fake_nvml.energy_mj = [fake_nvml.energy_mj[0] + 2_000_000, fake_nvml.energy_mj[1] + 900_000]  # 2,000 J, 900 J
        end = nvml_scrape(meter, 10.0, "end")
    finally:
        meter.close()
    assert fake_nvml.started == 0  # NVML shut down
    found = by_gpu(table([start, end]))
    assert found["0"]["joules"] == pytest.approx(2000.0) and found["0"]["mean_watts"] == pytest.approx(200.0)
    assert found["0"]["peak_watts"] == pytest.approx(310.0) and found["1"]["peak_watts"] == pytest.approx(95.0)
    assert found["1"]["mean_watts"] == pytest.approx(90.0) and found["all"]["joules"] == pytest.approx(2900.0)
    assert found["all"]["peak_watts"] == pytest.approx(400.0)  # 310 + 90, sampled together
    assert found["0"]["samples"] == 4 and found["0"]["meter"] == "nvml"  # three in the cell and the end's own
    assert energy.gpus_on_page(start) == [{"index": i, "name": "NVIDIA GeForce RTX 3090", "power_limit_w": 260.0}
                                          for i in (0, 1)]


def test_nvml_reads_only_the_gpus_named(fake_nvml):
    meter = NvmlMeter((1,))
    try:
        page = nvml_scrape(meter, 0.0, "start")
    finally:
        meter.close()
    assert [gpu["index"] for gpu in energy.gpus_on_page(page)] == [1]


@pytest.mark.parametrize("library, asked, problem", [
    (FakeNvmlLibrary(starts=False), "nvml", "NVML did not start (Driver Not Loaded): is the NVIDIA driver installed?"),
    (FakeNvmlLibrary(gpus=0), "nvml", "NVML finds no GPU"),
    (FakeNvmlLibrary(gpus=2), "nvml:0,2", "no GPU 2: NVML finds 2 (GPU 0 to 1)"),
    (FakeNvmlLibrary(energy_counter=False), "nvml:1",
     "GPU 1 (NVIDIA GeForce RTX 3090) has no total-energy counter (NVML: Not Supported; Volta and later GPUs have one)"),
])
def test_nvml_that_cannot_be_read_is_one_line(monkeypatch, library, asked, problem):
    monkeypatch.setitem(sys.modules, "pynvml", library)
    assert gpu_power_problem(asked) == problem
    assert library.started == 0


def test_nvml_without_nvidia_ml_py_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what `import pynvml` meets where it is not installed
    assert gpu_power_problem("nvml") == "nvidia-ml-py is not installed (pip install -e '.[gpu]')"


def nvml_starts_here() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - not installed, or no driver
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(nvml_starts_here(), reason="this machine has an NVIDIA driver: benchmarks/energy_check.py reads it")
def test_nvml_on_this_machine_without_a_gpu_is_one_line():
    """The real library (installed with the test extra) on a machine with no NVIDIA driver."""
    problem = gpu_power_problem("nvml")
    assert problem is not None
    assert problem.startswith("NVML did not start (") or problem.startswith("nvidia-ml-py is not installed")


@pytest.mark.parametrize("text, expected", [
    ("nvml", GpuPower("nvml")), ("nvml:0,1", GpuPower("nvml", (0, 1))),
    ("dcgm=http://gpu-box:9400", GpuPower("dcgm", url="http://gpu-box:9400/metrics")),
    ("dcgm=http://gpu-box:9400/metrics", GpuPower("dcgm", url="http://gpu-box:9400/metrics")),
])
def test_the_option_names_a_meter(text, expected):
    assert parse_gpu_power(text) == expected
    assert gpu_power_option(text) == str(expected) and parse_gpu_power(str(expected)) == expected


@pytest.mark.parametrize("text", ["nvidia", "nvml:", "nvml:a", "nvml:0,0", "nvml:-1", "dcgm", "dcgm=", "dcgm=gpu-box"])
def test_a_misspelt_meter_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        gpu_power_option(text)


def test_the_option_reaches_workers_as_plain_text():
    """Locust sends its parsed options to every worker with msgpack, which takes plain values only."""
    parser = get_parser()
    options.add_arguments(parser)
    parsed_options = parser.parse_args(["-f", "locustfile.py", "--gpu-power", "nvml:0,1"])
    assert parsed_options.gpu_power == "nvml:0,1"
    Message("spawn", {"parsed_options": vars(parsed_options)}, "master").serialize()


# --- a real DCGM-shaped exporter on 127.0.0.1 ----------------------------------------------------

WATTS = {0: 300.0, 1: 100.0}  # what the exporter's GPUs draw, constantly
WATTS_TOLERANCE = 0.03  # mean W against the exporter's own wattage: its counter is read a few ms from each edge's middle


class DcgmExporter(ThreadingHTTPServer):
    """A DCGM exporter's /metrics on loopback, its energy counters growing at `WATTS` from the
    moment it starts; `/no-energy` serves the power gauges alone, `/no-gpu` a page of neither.
    Keeps the headers of every request, to show which were sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Exporter)
        self.started = time.time()
        self.headers_seen: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        exporter: DcgmExporter = self.server  # type: ignore[assignment]
        exporter.headers_seen.append(dict(self.headers))
        elapsed = time.time() - exporter.started
        pages = {"/metrics": dcgm_page({g: 5e9 + w * elapsed * 1000 for g, w in WATTS.items()}, WATTS),
                 "/no-energy": dcgm_page(None, WATTS),
                 "/no-gpu": "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 61\n"}
        body = pages.get(self.path)
        self.send_response(200 if body else 404)
        data = (body or "").encode()
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def exporter():
    with served(DcgmExporter()) as server:
        yield server


def test_the_scraper_reads_the_exporter_without_the_targets_api_key(tmp_path, exporter):
    meter = gpu_power.open_meter(f"dcgm={exporter.url}/metrics")
    scraper = Scraper(tmp_path, [meter.source], {"Authorization": "Bearer sk-not-for-the-exporter"})
    seen = len(exporter.headers_seen)
    scraper.scrape("start", {"cell_index": 0, "cell": "c4-same", "case": "same"})
    time.sleep(0.5)
    scraper.scrape("end", {"cell_index": 0, "cell": "c4-same", "case": "same"})
    scraper.close()
    assert all("Authorization" not in headers for headers in exporter.headers_seen[seen:])
    [gpu0, _gpu1, every] = energy.gpu_cells(list(read_scrapes(tmp_path, energy.NAMES_READ)))
    assert gpu0.joules / gpu0.seconds == pytest.approx(300.0, rel=WATTS_TOLERANCE)
    assert every.joules / every.seconds == pytest.approx(400.0, rel=WATTS_TOLERANCE)


@pytest.mark.parametrize("path, problem", [
    ("/no-gpu", "the page has neither DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION nor DCGM_FI_DEV_POWER_USAGE "
                "(dcgm-exporter's default counters have both)"),
    ("/nothing-here", "HTTP 404"),
])
def test_an_exporter_page_without_the_metrics_is_one_line(exporter, path, problem):
    assert gpu_power_problem(f"dcgm={exporter.url}{path}") == problem
    assert gpu_power_problem(f"dcgm={exporter.url}/no-energy") is None  # power alone will do


# --- end to end: a headless run against the simulator, the GPUs read from the exporter -------------

BASE = ["--headless", "--rounds", "2", "--scenarios", "code", "--concurrency", "2", "-u", "2",
        "--metrics-interval", "0.1", "--loglevel", "WARNING"]


@pytest.mark.processes
def test_a_run_reads_each_cells_energy_from_a_dcgm_exporter(tmp_path, exporter):
    run_dir = tmp_path / "r"
    result = run_locust([*BASE, "--run-dir", str(run_dir), "--sim-args", FAST_SIM,
                         "--gpu-power", f"dcgm={exporter.url}/metrics"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["gpu_power"]["meter"] == f"dcgm={exporter.url}/metrics"
    assert manifest["gpu_power"]["gpus"] == [{"index": i, "name": "NVIDIA GeForce RTX 3090", "power_limit_w": None}
                                             for i in (0, 1)]
    summary = (run_dir / "summary.txt").read_text()
    assert "GPU energy per cell (from a DCGM exporter" in summary
    found = rows(next(s for s in run_report([read_run(run_dir)]).sections if s.key == "energy").data)
    assert {(r["cell"], r["gpu"]) for r in found} == {(c, g) for c in ("single", "c2-same", "c2-different")
                                                     for g in ("0", "1", "all")}
    records = [orjson.loads(line) for line in (run_dir / "records.jsonl").read_bytes().splitlines()]
    for row in found:
        watts = WATTS.get(int(row["gpu"])) if row["gpu"] != "all" else sum(WATTS.values())
        assert row["mean_watts"] == pytest.approx(watts, rel=WATTS_TOLERANCE), row
        assert row["joules"] == pytest.approx(watts * row["seconds"], rel=WATTS_TOLERANCE)
        assert row["peak_watts"] == watts and row["energy_via"] == "counter" and row["samples"] >= 1
        own = [r for r in records if r["cell"] == row["cell"] and r["measured"] and r["error"] is None]
        assert row["completion_tokens"] == sum(r["completion_tokens"] for r in own) > 0
        assert row["tokens_per_joule"] == pytest.approx(row["completion_tokens"] / row["joules"])
        # the cell's span holds its requests, from the first sent to the last answered
        assert row["seconds"] >= max(r["sent_at"] + r["total_s"] for r in own) - min(r["sent_at"] for r in own)


@pytest.mark.processes
def test_a_meter_that_cannot_be_read_stops_the_run_before_it_starts(tmp_path, exporter):
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    asked = {"down": f"dcgm={dead}", "no metric": f"dcgm={exporter.url}/no-gpu",
             **({} if nvml_starts_here() else {"nvml": "nvml"})}  # this machine has no GPU: the real library says so
    results = run_locust_together({name: ([*BASE, "--run-dir", str(tmp_path / name.replace(" ", "-")),
                                           "--sim-args", FAST_SIM, "--gpu-power", value], tmp_path)
                                   for name, value in asked.items()}, timeout=120)
    for name, result in results.items():
        assert result.returncode == 2, (name, result.stderr[-2000:])
        assert not (tmp_path / name.replace(" ", "-") / "records.jsonl").exists()  # nothing was sent
    assert results["down"].stderr.strip().splitlines()[-1] == (
        f"error: --gpu-power dcgm={dead}: connect to 127.0.0.1:{dead.split(':')[2].split('/')[0]}: connection refused")
    assert results["no metric"].stderr.strip().splitlines()[-1] == (
        f"error: --gpu-power dcgm={exporter.url}/no-gpu: the page has neither DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION "
        "nor DCGM_FI_DEV_POWER_USAGE (dcgm-exporter's default counters have both)")
    if "nvml" in results:
        nvml = results["nvml"].stderr.strip().splitlines()[-1]
        assert nvml in ("error: --gpu-power nvml: nvidia-ml-py is not installed (pip install -e '.[gpu]')",
                        "error: --gpu-power nvml: NVML did not start (NVML Shared Library Not Found): "
                        "is the NVIDIA driver installed?")


def test_a_cells_energy_is_cut_at_its_scrapes_for_the_verdicts():
    # the cell's 4 requests (512 tokens each) stream from T0 + 1.2 to T0 + 4; every GPU draws 400 W in
    # all; the counter has not moved at 2 s (the exporter had not collected): that stretch joins the next
    base = {0: 9_000_000_000, 1: 4_000_000_000}
    at = lambda s: dcgm_page({0: base[0] + 300_000 * s, 1: base[1] + 100_000 * s}, {0: 300, 1: 100})  # noqa: E731
    entries = [scrape(0.0, "start", at(0)), scrape(1.0, "interval", at(1)), scrape(2.0, "interval", at(1)),
               scrape(3.0, "interval", at(3)), scrape(5.0, "end", at(5))]
    [(span, steps)] = energy.energy_steps(entries).items()
    assert span.cell == "c4-same"
    assert steps == [(T0, T0 + 1.0, pytest.approx(400.0)), (T0 + 1.0, T0 + 3.0, pytest.approx(800.0)),
                     (T0 + 3.0, T0 + 5.0, pytest.approx(800.0))]
    [found] = verdicts.energy_samples(entries, client_records(chunks=128))
    assert found.figure == "c4-same tokens/J" and found.sample.n == 3
    # tokens spread over 1.2 .. 4 s: none in the first second, 1.8 / 2.8 of them in the next stretch
    assert found.sample.groups[0][:, 0] == pytest.approx([0.0, 2048 * 1.8 / 2.8, 2048 * 1.0 / 2.8])
    assert found.sample.value == pytest.approx(2048 / 2000)  # the table's tokens per joule
    assert verdicts.energy_samples([], client_records(chunks=128)) == []


def test_in_rounds_each_round_is_a_unit_of_its_tokens_and_the_joules_to_the_next_rounds_start():
    records = client_records(chunks=128)  # round 0: 4 x 512 tokens, sent at T0 + 1, 3 s each
    later = records.assign(round=1, sent_at=T0 + 4.5, first_token_at=T0 + 4.7, end_at=T0 + 7.5,
                           last_token_at=T0 + 7.5)
    at = lambda s: dcgm_page({0: 9_000_000_000 + 400_000 * s}, {0: 400})  # noqa: E731 (400 W from T0)
    entries = [scrape(0.0, "start", at(0)), scrape(3.0, "interval", at(3)), scrape(6.0, "interval", at(6)),
               scrape(8.0, "end", at(8))]
    [found] = verdicts.energy_samples(entries, pd.concat([records, later], ignore_index=True))
    # round 0 from the start scrape to round 1's send (4.5 s, 1,800 J); round 1 to the end scrape (3.5 s, 1,400 J)
    assert found.sample.blocks == (1,)
    assert found.sample.groups[0].tolist() == [[2048.0, pytest.approx(1800.0)], [2048.0, pytest.approx(1400.0)]]
    assert found.sample.value == pytest.approx(4096 / 3200)  # the table's figure: every token over the cell's joules
