"""Known performance warnings in a server's log: each server's own line is flagged once, with what it
means; a healthy start-up log (the same lines when nothing is wrong) flags nothing."""

from __future__ import annotations

from loadlib.sweep.known_warnings import scan, scan_log

SGLANG = [  # the thread's line (SGLang dev507) and today's wording, as SGLang's logger writes them
    "[2025-09-04 10:00:01 TP0] Disable DFLASH draft cuda graph because only 0.93 GB GPU memory is available",
    "[2025-09-04 10:00:01 TP1] Disable DFLASH draft cuda graph because only 0.93 GB GPU memory is available "
    "after target backend initialization.",
]
BROKEN = {
    "SGLang: DFLASH draft CUDA graph off: only 0.93 GB free (lower --mem-fraction-static) (2 times)": SGLANG,
    "SGLang: decode ran without CUDA graph (5 steps in a row: batch above the captured sizes?)": [
        "[2025-09-04 10:03:00 TP0] CUDA graph disabled for 5 consecutive decode steps. This may cause significant "
        "throughput degradation. Check if batch size is within CUDA graph capture range."],
    "vLLM: CUDA graphs off (capture skipped)": [
        "(EngineCore_DP0 pid=91) WARNING 09-04 10:00:05 [gpu_model_runner.py:3380] Skipping CUDA graph capture. "
        "To turn on CUDA graph capture, ensure `cudagraph_mode` was not manually set to `NONE`"],
    "vLLM: context cut from 262144 to 94400 tokens to fit the KV cache": [
        "INFO 09-04 10:00:04 [kv_cache_utils.py:1021] Auto-fit max_model_len: reduced from 262144 to 94400 to fit "
        "in available GPU memory (1.94 GiB available for KV cache)"],
    "vLLM: FP8 weights on the Marlin weight-only kernel (slower for compute-heavy loads)": [
        "WARNING 06-19 05:51:34 [marlin_utils_fp8.py:103] Your GPU does not have native support for FP8 computation "
        "but FP8 quantization is being used. Weight-only FP8 compression will be used leveraging the Marlin kernel."],
    "llama.cpp: only 20 of 33 layers on the GPU": ["load_tensors: offloaded 20/33 layers to GPU"],
    "llama.cpp: Flash Attention off (not supported on this device)": [
        "llama_context: Flash Attention not supported, set to disabled"],
}
HEALTHY = [
    "[2025-09-04 10:00:01 TP0] Capture draft cuda graph end. Time elapsed: 3.12 s. mem usage=0.41 GB.",
    "[2025-09-04 10:00:02 TP0] Decode batch. #running-req: 2, #token: 1402, cuda graph: True, gen throughput (token/s): 430.1",
    "INFO 09-04 10:00:04 [kv_cache_utils.py:1010] Auto-fit max_model_len: full model context length 262144 fits in "
    "available GPU memory",
    "INFO 09-04 10:00:05 [gpu_model_runner.py:3500] Graph capturing finished in 12 secs, took 0.55 GiB",
    "load_tensors: offloaded 33/33 layers to GPU",
    "llama_context: Flash Attention enabled",
    "loadlib.sim listening on http://127.0.0.1:30000",
]


def test_each_servers_warning_is_flagged_with_what_it_means():
    for says, lines in BROKEN.items():
        assert scan(HEALTHY + lines) == [says], says


def test_a_healthy_log_flags_nothing():
    assert scan(HEALTHY) == []


def test_a_log_with_several_warnings_lists_them_in_the_order_seen(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes("\n".join(BROKEN["llama.cpp: only 20 of 33 layers on the GPU"] + HEALTHY + SGLANG[:1]).encode()
                    + b"\n\xff\xfe not utf-8\n")
    assert scan_log(log) == ["llama.cpp: only 20 of 33 layers on the GPU",
                             "SGLang: DFLASH draft CUDA graph off: only 0.93 GB free (lower --mem-fraction-static)"]
    assert scan_log(tmp_path / "missing.log") == []
