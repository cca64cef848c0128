"""Where the energy and the server's acceptance are read: `report --json`'s `"energy"`, report.html,
the live metrics while the run lasts, and compare's verdicts (accept length, tokens per joule).

Real parts: headless runs against the simulator (SGLang's shape, which sends its account of each
request), their GPUs read from the DCGM-shaped exporter `test_energy` serves on 127.0.0.1 (two
GPUs drawing 300 W and 100 W, as `test_energy` checks), the live page read over HTTP during the run, and the commands of
`python -m analysis`. Known answers: the exporter's watts, the simulator's accept length by draft
length (a shorter draft accepts fewer tokens a step), identical runs of a deterministic simulator.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from loadlib.figures import verdicts
from tests.conftest import FAST_SIM, LOCUSTFILE, free_port
from tests.truth.test_energy import exporter  # noqa: F401 (the exporter fixture)

BASE = ["--headless", "--rounds", "3", "--scenarios", "code", "--concurrency", "2", "-u", "2",
        "--metrics-interval", "0.05", "--loglevel", "WARNING"]
ENERGY_KEYS = ["cell", "gpu", "joules", "mean_watts", "peak_watts", "joules_per_token", "tokens_per_joule"]


def live_samples(page: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """A Prometheus page's samples by name: (labels, value)."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in page.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name, rest = line.split("{", 1)
        labels_text, value = rest.rsplit("} ", 1)
        labels = dict(part.split("=", 1) for part in labels_text.split('",') if part)
        found.setdefault(name, []).append(({k: v.strip('"') for k, v in labels.items()}, float(value)))
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory, exporter):  # noqa: F811 (the fixture imported above)
    """Three runs at once: `a` (the preset) and `same` (the same again), and `short` (drafts of 2
    tokens), every GPU read from the exporter; `a`'s live page read until its last energy came."""
    work = tmp_path_factory.mktemp("energy-outputs")
    port = free_port()
    meter = ["--gpu-power", f"dcgm={exporter.url}/metrics"]
    asked = {"a": [*meter, "--metrics-port", str(port), "--sim-args", FAST_SIM],
             "same": [*meter, "--sim-args", FAST_SIM],
             "short": [*meter, "--sim-args", f"{FAST_SIM} --speculative-num-draft-tokens 3"]}
    procs = {name: subprocess.Popen([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *BASE, *args,
                                     "--run-dir", str(work / name)], cwd=work, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for name, args in asked.items()}
    pages = []
    while procs["a"].poll() is None:
        try:
            pages.append(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode())
        except OSError:
            pass
        time.sleep(0.25)  # the exporter answers on this process's thread: leave it the time
    ended = {name: (proc.wait(120), *proc.communicate()) for name, proc in procs.items()}
    for name, (code, _out, err) in ended.items():
        assert code == 0, (name, err[-3000:])
    return work, [page for page in pages if "uni_locust_gpu_energy_joules{" in page]


def report(run_dir) -> dict:
    done = subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.processes
def test_report_json_has_each_cells_energy_per_gpu_and_summed(runs):
    work, _pages = runs
    reported = report(work / "a")
    found = reported["energy"]
    assert found and all(list(row) == ENERGY_KEYS for row in found)
    # the energy section's own figures (whose watts test_energy holds against the exporter's)
    assert found == [{key: row[key] for key in ENERGY_KEYS} for row in reported["tables"]["energy"]]
    by_cell = {}
    for row in found:
        by_cell.setdefault(row["cell"], {})[row["gpu"]] = row
    assert set(by_cell) == {"single", "c2-same", "c2-different"}
    for gpus in by_cell.values():
        assert set(gpus) == {"0", "1", "all"}
        every = gpus["all"]
        assert every["joules"] == pytest.approx(gpus["0"]["joules"] + gpus["1"]["joules"])
        assert every["mean_watts"] == pytest.approx(gpus["0"]["mean_watts"] + gpus["1"]["mean_watts"])
        assert every["tokens_per_joule"] * every["joules_per_token"] == pytest.approx(1.0)


@pytest.mark.processes
def test_report_html_has_the_energy_and_acceptance_sections(runs):
    work, _pages = runs
    page = (work / "a" / "report.html").read_text()
    for title in ("GPU energy per cell", "Speculative decoding per scenario", "Speculative acceptance by draft position"):
        assert title in page, title


@pytest.mark.processes
def test_the_live_metrics_give_each_ended_cells_energy_and_the_accept_length(runs):
    work, pages = runs
    assert pages, "no live page with a cell's energy during the run"
    live = live_samples(pages[-1])
    reported = {(row["cell"], row["gpu"]): row for row in report(work / "a")["energy"]}
    for name, key in (("uni_locust_gpu_energy_joules", "joules"), ("uni_locust_gpu_mean_watts", "mean_watts"),
                      ("uni_locust_gpu_tokens_per_joule", "tokens_per_joule")):
        assert live[name], name
        for labels, value in live[name]:  # the summary's own figure of the same cell, computed as it ended
            assert value == pytest.approx(reported[(labels["cell"], labels["gpu"])][key], rel=1e-9), (name, labels)
    acceptance = {row["scenario"]: row for row in report(work / "a")["tables"]["acceptance"]}
    lengths = {labels["name"]: value for labels, value in live_samples(pages[-1])["uni_locust_spec_accept_length"]}
    assert lengths["code"] == pytest.approx(acceptance["code"]["accept_length"], rel=0.1)  # the single cell's so far


@pytest.mark.processes
def test_compare_judges_the_accept_length_and_tokens_per_joule(runs):
    work, _pages = runs
    judged = {}
    for other in ("same", "short"):
        done = subprocess.run([sys.executable, "-m", "analysis", "compare", str(work / "a"), str(work / other),
                               "--json"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        judged[other] = {row["figure"]: row for row in json.loads(done.stdout)["verdicts"]}
    # the simulator answers a prompt alike every time: the same accept length, not distinguishable
    assert judged["same"]["code accept length (server)"]["verdict"] == verdicts.SAME
    short = judged["short"]["code accept length (server)"]
    assert short["verdict"] == verdicts.LOWER and short["b"] < short["a"]
    assert short["b"] <= 3.0  # at most 2 drafts and the target's own token a step
    for other, row in ((other, judged[other][f"{cell} tokens/J"]) for other in judged
                       for cell in ("c2-same", "c2-different")):
        assert row["n_a"] >= 2 and row["verdict"] in (verdicts.HIGHER, verdicts.LOWER, verdicts.SAME,
                                                       verdicts.TOO_FEW), (other, row)
        assert row["ci_low_pct"] <= row["diff_pct"] <= row["ci_high_pct"] or row["verdict"] == verdicts.TOO_FEW
    # the same draw on fewer tokens a step: fewer tokens per joule
    assert judged["short"]["c2-same tokens/J"]["diff_pct"] < 0
