"""Server-side truth: the target's self-description in the manifest, /metrics per cell, and the
server's accept length beside the client's tok/chunk.

Recorded metric texts (tests/data/metrics) are written from SGLang's, vLLM's, llama.cpp's and
sglang-router's documented metric names; the end-to-end tests run real headless Locust against
the simulator, whose /metrics uses the names of the server it plays (SGLang's by default).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pandas as pd
import pytest

from analysis.report import run_report
from loadlib.record_table import records_frame
from loadlib.report.document import rows
from loadlib.report.server_view import server_cell_table
from loadlib.run_view import read_run
from loadlib.sim.process import start_simulator
from loadlib.truth import server_figures
from loadlib.truth.probe import REDACTED, launch_flags, redact
from loadlib.truth.scrape import parsed, read_scrapes
from loadlib.truth.scraper import MetricsSource, Scraper, metrics_url
from tests.conftest import FAST_SIM, free_port, run_locust, sglang_router

DATA = Path(__file__).parent.parent / "data" / "metrics"
T0 = 1_800_000_000.0  # the recorded cell runs from T0 to T0 + 10 s


def recorded_cell(server: str, source: str = "target", names=server_figures.NAMES_READ,
                  added: dict[str, str] | None = None) -> list[dict]:
    """A cell's scrapes as the journal keeps them (start, one during the cell, end), parsed as
    the report parses them; `added` appends text to the page of a scrape ("start", "during", "end")."""
    return [parsed({"t": T0 + offset, "source": source, "url": "http://gpu-box/metrics", "phase": phase,
                    "cell_index": 0, "cell": "c4-same", "case": "same", "error": None,
                    "text": (DATA / f"{server}_{name}.prom").read_text() + (added or {}).get(name, "")}, names)
            for offset, phase, name in ((0.0, "start", "start"), (5.0, "interval", "during"), (10.0, "end", "end"))]


def llamacpp_page_now(cached: int, drafts: int, accepted: int) -> str:
    """What a current llama-server adds to the recorded (older) page: the prompt tokens it took
    from the cache, counted apart from those it computed, and its speculative drafts."""
    lines = []
    for name, value in (("prompt_tokens_cached_total", cached), ("spec_decode_num_drafts_total", drafts),
                        ("spec_decode_num_draft_tokens_total", drafts * 15),
                        ("spec_decode_num_accepted_tokens_total", accepted)):
        lines += [f"# HELP llamacpp:{name} -", f"# TYPE llamacpp:{name} counter", f"llamacpp:{name} {value}"]
    return "\n".join(lines) + "\n"


LLAMACPP_NOW = {"start": llamacpp_page_now(20_000, 500, 1_000), "during": llamacpp_page_now(24_000, 600, 1_300),
                "end": llamacpp_page_now(30_236, 752, 1_768)}


def client_records(chunks: int, n: int = 4) -> pd.DataFrame:
    """The cell's records as the client kept them: n streams of 512 tokens in `chunks` chunks."""
    return records_frame([{
        "request_id": f"r{i}", "scenario": "code", "cell": "c4-same", "concurrency": n, "case": "same",
        "round": 0, "slot": i, "worker": 0, "user": i, "sent_at": T0 + 1.0, "ttft_s": 0.2, "total_s": 3.0,
        "last_chunk_s": 3.0, "completion_tokens": 512, "prompt_tokens": 2000, "cached_tokens": 1500,
        "chunks": chunks, "finish_reason": "length", "http_status": 200, "error": None,
        "output_sha": "x", "max_tokens": 512, "thinking": False} for i in range(n)])


# --- recorded metric texts -> per-cell figures ----------------------------------------------------

@pytest.mark.parametrize("server, expected", [
    # SGLang: accept length only as a gauge: its end value, 6.0 (the scrape during the cell, 6.2,
    # the first change since the start, may hold an interval begun before the cell, and without
    # the client's records nothing tells that one surely passed); prefix hits from counters: 6000
    # cached of 8000 prompt tokens; TTFT 1.0 s / 4.
    ("sglang", dict(server="SGLang", accept_length=6.0, accept_basis="gauge", prefix_hit_rate=0.75,
                    prefix_basis="counter", running_mean=2.0, queued_mean=2.0, ttft_mean_s=0.25,
                    requests=4.0, generated_tokens=2048.0)),
    # vLLM (two engines, summed): 4096 tokens generated, 1600 of them accepted drafts, so 2496
    # forwards: 1.64 tokens per forward, though its 400 drafts accepted 1 + 1600 / 400 = 5.0 each
    # (it drafted on few steps); 2500 hits of 10000 queried tokens; running 5 + 3, waiting 2 + 1;
    # TTFT 2.4 s / 8.
    ("vllm", dict(server="vLLM", accept_length=4096 / 2496, accept_per_draft=5.0, accept_basis="counter",
                  prefix_hit_rate=0.25,
                  prefix_basis="counter", running_mean=8.0, queued_mean=3.0, ttft_mean_s=0.3,
                  requests=8.0, generated_tokens=4096.0)),
    # an older llama-server: no speculative, prefix-cache or TTFT metrics; processing and deferred
    # requests.
    ("llamacpp", dict(server="llama.cpp", accept_length=None, accept_basis=None, prefix_hit_rate=None,
                      prefix_basis=None, running_mean=2.0, queued_mean=1.0, ttft_mean_s=None,
                      requests=None, generated_tokens=1024.0)),
])
def test_recorded_metric_texts_give_the_per_cell_figures(server, expected):
    [cell] = server_figures.server_cells(recorded_cell(server))
    assert cell.span == server_figures.CellSpan(0, "c4-same", "same", T0, T0 + 10.0)
    assert cell.samples == 1
    for name, value in expected.items():
        assert getattr(cell, name) == (pytest.approx(value) if isinstance(value, float) else value), name


def test_a_current_llama_server_gives_its_accept_length_and_prefix_hits_by_counters():
    # 1,024 tokens of which 768 accepted drafts: 256 forwards, 4 tokens each; its 252 drafts (every
    # step but each request's first) 1 + 768 / 252 each; 10,236 prompt tokens from the cache and
    # 10,236 - 6,824 computed
    [cell] = server_figures.server_cells(recorded_cell("llamacpp", added=LLAMACPP_NOW))
    assert (cell.accept_length, cell.accept_basis) == (4.0, "counter")
    assert cell.accept_per_draft == pytest.approx(1 + 768 / 252)
    assert cell.prefix_hit_rate == pytest.approx(10_236 / (10_236 + 3_412)) and cell.prefix_basis == "counter"
    assert cell.generated_tokens == 1024.0 and cell.requests is None and cell.ttft_mean_s is None
    row = server_cell_table([cell], client_records(chunks=128)).iloc[0]  # 512 tokens in 128 chunks
    assert row["client_tok_per_chunk"] == pytest.approx(4.0) and not row["diverges"]


def test_a_llama_server_that_drafted_on_few_steps_accepts_about_one_token_per_forward():
    """Issue 34: an n-gram drafter that drafted on 6 of ~2,000 steps, 14 tokens accepted: the
    tokens per forward are 2,048 / 2,034 = 1.01 (its own per-drafting-step figure, 1 + 14 / 6, is
    kept beside it); one token a chunk agrees with it."""
    pages = {"start": llamacpp_page_now(0, 0, 0), "during": llamacpp_page_now(0, 3, 7),
             "end": llamacpp_page_now(0, 6, 14)}
    entries = recorded_cell("llamacpp", added=pages)
    entries[2]["samples"] = [[n, labels, 3072 + 2048 if n == "llamacpp:tokens_predicted_total" else v]
                             for n, labels, v in entries[2]["samples"]]
    [cell] = server_figures.server_cells(entries)
    assert cell.accept_length == pytest.approx(2048 / 2034) and cell.accept_per_draft == pytest.approx(1 + 14 / 6)
    row = server_cell_table([cell], client_records(chunks=512)).iloc[0]  # one token a chunk
    assert row["client_tok_per_chunk"] == 1.0 and not row["diverges"] and row["divergence_cause"] is None


def test_a_server_that_drafted_nothing_makes_one_token_a_forward():
    """A plain llama-server, or an n-gram drafter that found no match in the cell, counts no draft:
    1.00 tokens per forward and no per-drafting-step figure; one token a chunk agrees with it."""
    [cell] = server_figures.server_cells(recorded_cell("llamacpp", added={
        name: llamacpp_page_now(0, 0, 0) for name in ("start", "during", "end")}))
    assert (cell.accept_length, cell.accept_basis, cell.accept_per_draft) == (1.0, "counter", None)
    assert not server_cell_table([cell], client_records(chunks=512)).iloc[0]["diverges"]


def test_one_token_a_chunk_below_the_accept_length_is_not_a_merge():
    """llama.cpp streams one token a chunk whatever it accepts a forward: tok/chunk 1.0 against 4.0
    tokens per forward is no merge; the server view says what it is."""
    [cell] = server_figures.server_cells(recorded_cell("llamacpp", added=LLAMACPP_NOW))
    row = server_cell_table([cell], client_records(chunks=512)).iloc[0]
    assert row["divergence"] == pytest.approx(-0.75) and not row["diverges"]
    assert row["divergence_cause"] == server_figures.SPLIT


def test_a_gauge_value_repeated_after_a_logging_interval_still_counts():
    """A periodic load can give two logging intervals the same accept length: a value equal to the
    cell's start value, read when a decode-log interval has surely passed (the client's chunks a
    step apart: 2.8 s / 85 gaps x 40 = 1.3 s, two of them 2.6 s), is the cell's; without the
    client's records it is left out, as a value that may be stale, and so is the end's, the first
    change since the start (its interval may have begun before the cell): no figure."""
    entries = recorded_cell("sglang")
    start_value = next(v for n, _l, v in entries[0]["samples"] if n == "sglang:spec_accept_length")
    entries[1]["samples"] = [[n, labels, start_value if n == "sglang:spec_accept_length" else v]
                             for n, labels, v in entries[1]["samples"]]
    [fresh] = server_figures.server_cells(entries, client_records(chunks=86))
    [unsure] = server_figures.server_cells(entries)
    end_value = next(v for n, _l, v in entries[2]["samples"] if n == "sglang:spec_accept_length")
    assert fresh.accept_length == pytest.approx((start_value + end_value) / 2)
    assert unsure.accept_length is None and unsure.accept_basis is None


def test_a_gauge_interval_begun_before_the_cell_is_left_out():
    """SGLang sets its accept-length gauge every 40 decode batches, idle time not counted: the
    interval that ends first in a cell began in the cell before (here 1.5 tokens a forward, then
    6.2 and 6.0 in this one), so its value (4.0, half of each) read 0.5 s into the cell is not the
    cell's; from two intervals after the start (2.6 s, the client's chunks tell) a value is."""
    entries = recorded_cell("sglang")
    straddling = {**entries[1], "t": T0 + 0.5, "samples": with_gauge(entries[1], "sglang:spec_accept_length", 4.0)}
    entries[0]["samples"] = with_gauge(entries[0], "sglang:spec_accept_length", 1.5)
    [cell] = server_figures.server_cells([entries[0], straddling, *entries[1:]], client_records(chunks=86))
    assert cell.accept_length == pytest.approx((6.2 + 6.0) / 2) and cell.accept_basis == "gauge"


def with_gauge(entry: dict, name: str, value: float) -> list:
    """The entry's samples with the gauge `name` set to `value`."""
    return [[n, labels, value if n == name else v] for n, labels, v in entry["samples"]]


@pytest.mark.parametrize("server", ["sglang", "vllm", "llamacpp"])
def test_parsing_only_the_metrics_read_gives_the_same_figures(server):
    assert server_figures.server_cells(recorded_cell(server)) == server_figures.server_cells(recorded_cell(server, names=None))
    assert len(recorded_cell(server)[0]["samples"]) < len(recorded_cell(server, names=None)[0]["samples"])


def test_a_counter_declared_without_samples_counts_from_zero():
    # SGLang declares cached_tokens_total but writes no sample before the first cache hit.
    start = recorded_cell("sglang")[0]
    assert "sglang:cached_tokens" in start["families"]
    assert not [s for s in start["samples"] if s[0] == "sglang:cached_tokens_total"]
    [cell] = server_figures.server_cells(recorded_cell("sglang"))
    assert cell.prefix_hit_rate == pytest.approx(6000 / 8000)


def test_a_counter_that_went_back_gives_no_figure():
    entries = recorded_cell("vllm")
    entries[0], entries[2] = {**entries[2], "phase": "start", "t": T0}, {**entries[0], "phase": "end", "t": T0 + 10}
    [cell] = server_figures.server_cells(entries)
    assert cell.accept_length is None and cell.prefix_hit_rate is None and cell.requests is None


def test_a_gauge_not_updated_during_the_cell_gives_no_figure():
    # SGLang sets spec_accept_length once per decode-log interval: a value unchanged since the
    # cell's start belongs to the work before it.
    entries = recorded_cell("sglang")
    for entry in entries[1:]:
        entry["samples"] = [[n, labels, 1.84 if n == "sglang:spec_accept_length" else v]
                            for n, labels, v in entry["samples"]]
    [cell] = server_figures.server_cells(entries)
    assert cell.accept_length is None and cell.accept_basis is None
    assert cell.prefix_hit_rate == pytest.approx(0.75)  # the counters still count


def test_router_split_counts_requests_per_worker():
    [split] = server_figures.router_split(recorded_cell("sgl_router", source="router"))
    assert split.source == "router"
    assert split.requests == {"http://127.0.0.1:30001": 4.0, "http://127.0.0.1:30002": 4.0}


@pytest.mark.parametrize("chunks, flagged", [(86, False), (22, True)])
def test_client_tok_per_chunk_beside_the_servers_accept_length(chunks, flagged):
    table = server_cell_table(server_figures.server_cells(recorded_cell("sglang")), client_records(chunks))
    row = table.iloc[0]
    assert row["client_tok_per_chunk"] == pytest.approx(512 / chunks)
    assert row["divergence"] == pytest.approx(512 / chunks / 6.0 - 1)
    assert bool(row["diverges"]) is flagged


def test_records_outside_the_cells_scrapes_are_not_its_records():
    late = client_records(22).assign(sent_at=T0 + 11.0)
    table = server_cell_table(server_figures.server_cells(recorded_cell("sglang")), late)
    assert table.iloc[0]["client_tok_per_chunk"] is None and not table.iloc[0]["diverges"]


# --- server info and scraping never raise ------------------------------------------------------

def test_launch_flags_keep_how_often_sglang_sets_its_gauges_and_its_derived_running_limit():
    info = {"tp_size": 2, "max_running_requests": None, "decode_log_interval": 40,
            "internal_states": [{"effective_max_running_requests_per_dp": 48, "last_gen_throughput": 1.0}]}
    flags = launch_flags({"/get_server_info": info})
    assert flags["decode_log_interval"] == 40 and flags["effective_max_running_requests_per_dp"] == 48


def test_secrets_in_server_answers_are_redacted():
    key = "sk-live-0123456789"
    args = {"api_key": key, "admin_api_key": "adm", "hf_token": "hf_x", "tp_size": 2, "max_prefill_tokens": 8192,
            "tokenizer_path": "/m", "served_model_name": "m", "api_key_unset": None,
            "nested": [{"url": f"http://h/?key={key}"}]}
    clean = redact(args, key)
    assert clean["api_key"] == clean["admin_api_key"] == clean["hf_token"] == REDACTED
    assert clean["tp_size"] == 2 and clean["max_prefill_tokens"] == 8192 and clean["tokenizer_path"] == "/m"
    assert clean["api_key_unset"] is None  # no value, nothing to hide
    assert key not in orjson.dumps(clean).decode()


def test_metrics_urls_default_to_the_metrics_page():
    assert metrics_url("http://gpu-box:30000") == "http://gpu-box:30000/metrics"
    assert metrics_url("http://gpu-box:30000/v1") == "http://gpu-box:30000/metrics"
    assert metrics_url("http://gpu-box:29000/custom/metrics") == "http://gpu-box:29000/custom/metrics"


@pytest.mark.processes
def test_a_page_that_is_not_there_is_recorded_missing_not_raised(tmp_path, simulator):
    sim, _trace = simulator
    dead_port = free_port()
    scraper = Scraper(tmp_path, [MetricsSource("target", metrics_url(sim.url)),
                                 MetricsSource("worker 1", f"{sim.url}/no-metrics-here"),
                                 MetricsSource("worker 2", f"http://127.0.0.1:{dead_port}/metrics")])
    first = scraper.scrape("run-start")
    second = scraper.scrape("start", {"cell_index": 0, "cell": "single", "case": "single"})
    scraper.close()
    assert [e["error"] for e in first] == [None, "HTTP 404", f"connect to 127.0.0.1:{dead_port}: connection refused"]
    assert [e["source"] for e in second] == ["target"]  # missing pages are not asked again
    assert set(scraper.missing) == {"worker 1", "worker 2"}
    assert [e["phase"] for e in read_scrapes(tmp_path)] == ["run-start"] * 3 + ["start"]


# --- end to end: real headless Locust against the simulator --------------------------------------

BASE = ["--headless", "--rounds", "2", "--scenarios", "code", "--concurrency", "2", "-u", "2",
        "--metrics-interval", "0.05", "--loglevel", "WARNING"]


def report(run_dir: Path) -> str:
    """What `python -m analysis report RUN_DIR` prints."""
    return subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir)],
                          capture_output=True, text=True, check=True).stdout


def report_tables(run_dir: Path) -> dict[str, list[dict]]:
    """The same report's tables as rows (what `--json` prints under "tables")."""
    return {section.key: rows(section.data) for section in run_report([read_run(run_dir)]).sections}


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    """One run against the built-in simulator, with an API key and a worker page that is down."""
    work = tmp_path_factory.mktemp("server-truth")
    secret = "sk-server-truth-never-written"
    result = run_locust([*BASE, "--run-dir", str(work / "r"), "--sim-args", FAST_SIM, "--api-key", secret,
                         "--worker-metrics", "http://127.0.0.1:9"], cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, work / "r", secret


@pytest.mark.processes
def test_manifest_holds_the_servers_self_description_and_the_client_host(sim_run):
    _result, run_dir, _secret = sim_run
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    server = manifest["server"]
    assert server["kind"] == "sglang" and server["version"].endswith("-sim")
    launch = server["launch"]
    assert launch["tp_size"] == 2 and launch["speculative_algorithm"] == "DFLASH"
    assert launch["speculative_num_draft_tokens"] == 8 and launch["max_running_requests"] == 2
    assert launch["chunked_prefill_size"] == 2048 and launch["kv_cache_dtype"] == "fp8_e5m2"
    endpoints = server["endpoints"]
    assert endpoints["/get_server_info"] == endpoints["/v1/models"] == "ok"
    assert endpoints["/version"] == endpoints["/props"] == "missing (HTTP 404)"
    assert server["metrics"]["sources"]["target"].endswith("/metrics")
    assert server["metrics"]["missing"] == {"worker 1": "connect to 127.0.0.1:9: connection refused"}
    info = orjson.loads((run_dir / server["info_file"]).read_bytes())
    assert "internal_states" in info["/get_server_info"] and info["/v1/models"]["data"]
    client = manifest["client"]
    assert client["cpu_model"] and client["cores"] >= 1 and client["python"] and client["locust"]


@pytest.mark.processes
def test_api_key_reaches_no_file(sim_run):
    _result, run_dir, secret = sim_run
    for path in run_dir.iterdir():
        assert secret.encode() not in path.read_bytes(), path


@pytest.mark.processes
def test_every_cell_is_scraped_at_its_start_and_end_and_during(sim_run):
    _result, run_dir, _secret = sim_run
    entries = [e for e in read_scrapes(run_dir) if e["source"] == "target"]
    assert entries[0]["phase"] == "run-start" and entries[-1]["phase"] == "run-end"
    assert all(e["error"] is None for e in entries)
    cells = [e["cell"] for e in entries if e["phase"] == "start"]
    assert cells == [e["cell"] for e in entries if e["phase"] == "end"] == ["single", "c2-same", "c2-different"]
    assert any(e["phase"] == "interval" and e.get("cell") for e in entries)


@pytest.mark.processes
def test_report_shows_the_server_view_beside_the_client_view(sim_run):
    _result, run_dir, _secret = sim_run
    text = report(run_dir)
    assert "server.launch.speculative_algorithm: DFLASH" in text  # the manifest, shown first
    server_view = text.split("Server view per cell")[1].split("\n\n")[0]
    assert "single code" in server_view and "c2-same" in server_view and "c2-different" in server_view
    assert "DIVERGENCE" not in text
    cells = report_tables(run_dir)["server_cells"]
    for row in cells:
        # the simulator draws code's accept length around 6.4 tokens per verify step
        assert row["accept_basis"] == "gauge" and 5.5 < row["accept_length"] < 7.5
        assert abs(row["divergence"]) < server_figures.DIVERGENCE_LIMIT
        assert row["requests"] == 2 * (1 if row["cell"] == "single" else 2)
    same = next(r for r in cells if r["cell"] == "c2-same")
    assert same["prefix_hit_rate"] > 0.9 and same["running_max"] == 2


def stream_interval_supported() -> bool:
    help_text = subprocess.run([sys.executable, "-m", "loadlib.sim", "--help"], capture_output=True, text=True).stdout
    return "--stream-interval" in help_text


@pytest.mark.processes
@pytest.mark.skipif(not stream_interval_supported(), reason="the simulator has no --stream-interval yet")
def test_merged_chunks_are_flagged_as_divergence(tmp_path):
    result = run_locust([*BASE, "--run-dir", str(tmp_path / "r"), "--sim-args", f"{FAST_SIM} --stream-interval 4"],
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "chunks are merged on the way" in result.stderr  # warned live, at the end of each cell
    text = report(tmp_path / "r")
    assert "DIVERGENCE" in text and "the server reports stream_interval 4" in text
    flagged = report_tables(tmp_path / "r")["server_divergence"]
    assert {r["cell"] for r in flagged} == {"single", "c2-same", "c2-different"}
    assert all(r["divergence"] > 1.0 for r in flagged)  # about 4 verify steps' tokens per chunk


@pytest.fixture
def routed():
    """The real sglang-router (round_robin, metrics on their own port) before two simulators."""
    pytest.importorskip("sglang_router", reason="sglang-router is not installed (pip install -e '.[router]')")
    with start_simulator(["--instances", "2", "--time-scale", "0.05"]) as sim:
        metrics_port = free_port()
        with sglang_router(sim.urls, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port)) as url:
            yield url, f"http://127.0.0.1:{metrics_port}", sim.urls


@pytest.mark.processes
def test_router_and_worker_metrics_give_the_per_instance_split(tmp_path, routed):
    router, router_metrics, workers = routed
    result = run_locust([*BASE, "--host", router, "--run-dir", str(tmp_path / "r"),
                         "--router-metrics", router_metrics, "--worker-metrics", *workers], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = orjson.loads((tmp_path / "r" / "manifest.json").read_bytes())
    assert manifest["server"]["kind"] == "sglang-router"
    assert manifest["server"]["metrics"]["missing"] == {"target": "HTTP 404"}  # the router's own port has none
    tables = report_tables(tmp_path / "r")
    per_worker = {(r["source"], r["cell"]): r["requests"] for r in tables["server_cells"]}
    split = {(r["worker"], r["cell"]): r["requests"] for r in tables["router_split"]}
    for cell, total in (("single", 2), ("c2-same", 4), ("c2-different", 4)):
        # round robin: each instance serves half of every cell, and the router counted the same
        assert per_worker[("worker 1", cell)] == per_worker[("worker 2", cell)] == total / 2
        assert split[(workers[0], cell)] == split[(workers[1], cell)] == total / 2
