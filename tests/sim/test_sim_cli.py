"""`python -m loadlib.sim` as a command: readiness lines, bad flags, clean signals, instances."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest
from sim_http import chat, request

from loadlib.sim.process import start_simulator


@pytest.mark.processes
@pytest.mark.parametrize("args", [["--max-running-requests", "0"], ["--preset", "nope"],
                                  ["--flavor", "tgi"], ["--time-scale", "-1"], ["--bogus"]])
def test_bad_flags_exit_2_with_one_line(args):
    proc = subprocess.run([sys.executable, "-m", "loadlib.sim", *args], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.startswith("loadlib.sim: error: ") and proc.stderr.count("\n") == 1


@pytest.mark.processes
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_it_cleanly(sig):
    sim = start_simulator(["--time-scale", "0.05"])
    sim.proc.send_signal(sig)
    assert sim.proc.wait(10) == 0
    sim._stderr.seek(0)
    assert "Traceback" not in sim._stderr.read()
    sim.stop()


def free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as t:
                t.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    pytest.skip("no two consecutive free ports")


@pytest.mark.processes
def test_instances_listen_on_consecutive_ports_with_separate_engines():
    port = free_port_pair()
    proc = subprocess.Popen([sys.executable, "-m", "loadlib.sim", "--instances", "2", "--port", str(port),
                             "--time-scale", "0.02"], stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        assert lines == [f"loadlib.sim listening on http://127.0.0.1:{port}",
                         f"loadlib.sim listening on http://127.0.0.1:{port + 1}"]
        urls = [line.rsplit(" ", 1)[1] for line in lines]
        prompt = "Describe the cache state of this particular instance."
        chat(urls[0], prompt=prompt, max_tokens=4)
        warm = chat(urls[0], prompt=prompt, max_tokens=4).usage["prompt_tokens_details"]["cached_tokens"]
        other = chat(urls[1], prompt=prompt, max_tokens=4).usage["prompt_tokens_details"]["cached_tokens"]
        assert warm > 10 and other < 10  # each instance has its own radix cache
        assert request(urls[1], "GET", "/health").status == 200
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


@pytest.mark.processes
def test_start_simulator_reports_a_failed_start():
    with pytest.raises(RuntimeError, match="unrecognized arguments"):
        start_simulator(["--no-such-flag"])


# The thread's launch line (applejuice's, without NVLink), flag for flag, as sglang.launch_server takes it.
THREAD_LAUNCH_LINE = (
    "--model-path /path/to/Qwen3.8-27B-AWQ --speculative-algorithm DFLASH "
    "--speculative-draft-model-path /path/to/Qwen3.8-27B-DFlash2 --speculative-num-draft-tokens 8 "
    "--speculative-dflash-block-size 8 --tp-size 2 --trust-remote-code --context-length 262144 "
    "--mem-fraction-static 0.93 --kv-cache-dtype fp8_e5m2 --chunked-prefill-size 2048 --max-prefill-tokens 8192 "
    "--max-running-requests 2 --max-mamba-cache-size 10 --enable-cache-report --reasoning-parser qwen3 "
    "--tool-call-parser qwen3_coder --sampling-backend pytorch --disable-custom-all-reduce "
    "--disable-prefill-cuda-graph").split()
NOT_MODELLED = ["--model-path", "--tp-size", "--kv-cache-dtype", "--speculative-draft-model-path", "--trust-remote-code",
                "--max-mamba-cache-size", "--reasoning-parser", "--tool-call-parser", "--sampling-backend",
                "--disable-custom-all-reduce", "--disable-prefill-cuda-graph"]


@pytest.mark.processes
def test_the_threads_launch_line_runs_and_what_it_does_not_model_is_listed():
    with start_simulator(["--time-scale", "0.02", *THREAD_LAUNCH_LINE, "--served-model-name", "qwen",
                          "--enable-hierarchical-cache", "--hicache-ratio", "2"]) as sim:
        info = request(sim.url, "GET", "/get_server_info").body
        assert (info["speculative_num_draft_tokens"], info["speculative_dflash_block_size"]) == (8, 8)
        assert (info["tp_size"], info["trust_remote_code"], info["max_mamba_cache_size"]) == (2, True, 10)
        assert (info["enable_hierarchical_cache"], info["hicache_ratio"]) == (True, 2.0)
        assert info["simulator"]["not_modelled"] == NOT_MODELLED  # the host tier is modelled
        assert info["simulator"]["draft_cuda_graph"] is True
        assert chat(sim.url, max_tokens=8).usage["completion_tokens"] == 8
        sim._stderr.seek(0)
        log = sim._stderr.read()
    assert "loadlib.sim: accepted but not modelled: --model-path, --tp-size," in log
    assert "draft cuda graph" not in log  # 0.93 leaves 1.17 GB of the 24 GB card: the graph fits


@pytest.mark.processes
@pytest.mark.parametrize("flags, message", [
    (["--speculative-num-draft-tokens", "4", "--speculative-dflash-block-size", "8"],
     "ValueError: Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ. "
     "For DFLASH they must match. speculative_num_draft_tokens=4, speculative_dflash_block_size=8."),
    (["--speculative-dflash-block-size", "0"],
     "ValueError: DFLASH requires --speculative-dflash-block-size to be positive, got 0."),
    (["--enable-hierarchical-cache", "--hicache-ratio", "1"],
     "AssertionError: The host memory should be larger than the device memory with the current protocol"),
])
def test_what_sglang_refuses_exits_1_with_its_message(flags, message):
    proc = subprocess.run([sys.executable, "-m", "loadlib.sim", "--port", "0", *flags], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 1 and proc.stderr == message + "\n" and proc.stdout == ""


@pytest.mark.processes
def test_one_dflash_width_sets_both_and_draft_tokens_alone_leave_the_block_unset():
    with start_simulator(["--time-scale", "0.02", "--speculative-dflash-block-size", "4"]) as sim:
        info = request(sim.url, "GET", "/get_server_info").body
        assert (info["speculative_num_draft_tokens"], info["speculative_dflash_block_size"]) == (4, 4)
    with start_simulator(["--time-scale", "0.02", "--speculative-num-draft-tokens", "16"]) as sim:
        info = request(sim.url, "GET", "/get_server_info").body
        assert (info["speculative_num_draft_tokens"], info["speculative_dflash_block_size"]) == (16, None)


@pytest.mark.processes
def test_too_high_a_mem_fraction_logs_sglangs_draft_cuda_graph_warning():
    with start_simulator(["--time-scale", "0.02", "--mem-fraction-static", "0.94"]) as sim:
        assert request(sim.url, "GET", "/get_server_info").body["simulator"]["draft_cuda_graph"] is False
        sim._stderr.seek(0)
        log = sim._stderr.read()
    # the thread's line: 24 GB x (1 - 0.94) - 0.51 GB in use outside the static pool
    assert "TP0] Disable DFLASH draft cuda graph because only 0.93 GB GPU memory is available after target " \
           "backend initialization." in log
