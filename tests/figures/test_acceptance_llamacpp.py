"""A real llama-server whose acceptance is known (a draft model and llama.cpp's synthetic acceptance,
`--spec-synth-len 4.0`): the requests' own account equals its counters. Recorded from one (its
/metrics at a cell's start and end, and the cell's records), and live where one is built
(`REALSRV_DIR`, default /tmp/realsrv, as ../shared/tools/realsrv/setup.sh builds it)."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from loadlib.figures import acceptance
from loadlib.figures.validity import spec_account_agrees
from loadlib.record_table import read_records_frame, records_frame
from loadlib.truth import server_figures
from loadlib.truth.scrape import parsed, read_scrapes
from tests.analysis.builders import build_record
from tests.conftest import free_port, run_locust

DATA = Path(__file__).parent.parent / "data" / "metrics"
REALSRV = Path(os.environ.get("REALSRV_DIR", "/tmp/realsrv"))
SERVER = REALSRV / "build" / "bin" / "llama-server"
SYNTH_ARGS = ["-md", str(REALSRV / "draft.gguf"), "--spec-type", "draft-simple", "--spec-draft-n-max", "8",
              "--spec-synth-len", "4.0"]


def recorded_cell() -> list[dict]:
    """The c2-same cell of a protocol run on llama-server (b1-0c1e570, -np 2): its start and end scrapes."""
    return [parsed({"t": t, "source": "target", "url": "http://127.0.0.1:18140/metrics", "phase": phase,
                    "cell_index": 4, "cell": "c2-same", "case": "same", "error": None,
                    "text": (DATA / f"llamacpp_spec_{phase}.prom").read_text()}, server_figures.NAMES_READ)
            for t, phase in ((1796627287.56, "start"), (1796627310.09, "end"))]


def test_a_real_llama_servers_requests_add_up_to_its_counters():
    records = records_frame([  # the cell's two requests as the client recorded them
        build_record("c2-same", sent_at=1796627287.61, ttft_s=0.314, total_s=21.53, comp=256, chunks=256,
                     spec_verify_steps=58, spec_draft_tokens=463, spec_accepted_tokens=197),
        build_record("c2-same", slot=1, sent_at=1796627287.62, ttft_s=0.311, total_s=22.47, comp=256, chunks=256,
                     spec_verify_steps=65, spec_draft_tokens=511, spec_accepted_tokens=190)])
    [counted] = server_figures.spec_counters(recorded_cell())
    assert (counted.verify_steps, counted.accepted_tokens) == (123.0, 387.0)
    assert counted.accepted_per_position == (97.0, 74.0, 63.0, 51.0, 39.0, 29.0, 20.0, 14.0)  # Σ 387
    ok, detail = spec_account_agrees(records, [counted])
    assert ok is True, detail
    [row] = acceptance.acceptance_table(records).to_dict("records")
    assert row["accept_length"] == pytest.approx(acceptance.accept_length(123, 387))  # 4.15 tokens per verify step
    assert row["client_tok_per_chunk"] == 1.0  # llama-server streams a token a chunk: no estimate of it
    curve = acceptance.position_table(records, [counted])
    assert list(curve["position"]) == list(range(1, 9)) and set(curve["basis"]) == {acceptance.COUNTERS}
    assert curve["expected_tokens"].iloc[-1] == pytest.approx(row["accept_length"])  # at the length it ran


@pytest.fixture(scope="module")
def llama_server():
    if not SERVER.exists():
        pytest.skip(f"no llama-server built at {REALSRV} (../shared/tools/realsrv/setup.sh builds one)")
    port = free_port()
    command = [str(SERVER), "-m", str(REALSRV / "model.gguf"), "--alias", "tiny-llama", "--host", "127.0.0.1",
               "--port", str(port), "-np", "2", "-c", "8192", "-t", "1", "-tb", "1", "--metrics", "--jinja",
               "--no-webui", *SYNTH_ARGS]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=1).status == 200:
                    break
            except OSError:
                assert proc.poll() is None, "llama-server exited while starting"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.processes
def test_a_live_llama_server_reads_the_accept_length_of_its_counters_within_2_percent(llama_server, tmp_path):
    run_dir = tmp_path / "run"
    result = run_locust(["--headless", "-u", "2", "--host", llama_server, "--scenarios", "code", "--concurrency", "2",
                         "--rounds", "1", "--max-tokens", "128", "--run-dir", str(run_dir), "--loglevel", "WARNING"],
                        tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_records_frame(run_dir)
    assert records["spec_verify_steps"].notna().all() and records["spec_accept_histogram"].isna().all()
    steps = accepted = counted_steps = counted_accepted = 0.0
    for counted in server_figures.spec_counters(read_scrapes(run_dir, server_figures.NAMES_READ)):
        own = server_figures.cell_records(records, counted.span)
        ok, detail = spec_account_agrees(records, [counted])
        assert ok is True, detail
        steps += own["spec_verify_steps"].sum()
        accepted += own["spec_accepted_tokens"].sum()
        counted_steps += counted.verify_steps
        counted_accepted += counted.accepted_tokens
    per_request = acceptance.accept_length(steps, accepted)
    counters = acceptance.accept_length(counted_steps, counted_accepted)
    print(f"llama-server --spec-synth-len 4.0: per request {per_request:.3f} tokens per verify step "
          f"({steps:.0f} steps), counters {counters:.3f} ({counted_steps:.0f} steps)")
    assert per_request == pytest.approx(counters, rel=0.02) and 3.0 < counters < 5.0
