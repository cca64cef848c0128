"""Known performance warnings in a server's log: what a sweep flags in each configuration's row.

The seed thread's biggest gain came from one start-up line of SGLang's log ("Disable DFLASH draft
cuda graph because only 0.93 GB GPU memory is available", fixed by lowering
`--mem-fraction-static`). A sweep owns each configuration's log (`launch`), so it reads it for a
short list of lines that mean the server runs slower than it could: CUDA graphs off, a KV cache or
context smaller than asked, a fallback to slower kernels. Each pattern matches the wording of the
server's current source, cited beside it; one that a version rewords is simply not flagged.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable

MAX_LOG_BYTES = 64 * 1024 * 1024  # a longer log is read only this far from its start


@dataclass(frozen=True)
class KnownWarning:
    """One warning: the server that logs it, the line it matches, and what the row says of it
    (`says`, filled with the match's groups)."""

    server: str
    pattern: re.Pattern[str]
    says: str
    applies: Callable[[re.Match[str]], bool] = lambda match: True


KNOWN: tuple[KnownWarning, ...] = (
    # SGLang python/sglang/srt/speculative/dflash_worker.py, DFlashWorker.init_cuda_graphs (and the
    # same line of the EAGLE and DSpark workers): "Disable %s draft cuda graph because only %.2f GB GPU
    # memory is available after target backend initialization." (below 1 GB)
    KnownWarning("SGLang", re.compile(r"Disable (\w+) draft cuda graph because only ([\d.]+) GB GPU memory"),
                 "{0} draft CUDA graph off: only {1} GB free (lower --mem-fraction-static)"),
    # SGLang NoCudaGraphWarner.on_step: "CUDA graph disabled for %d consecutive decode steps. This may
    # cause significant throughput degradation. Check if batch size is within CUDA graph capture range."
    KnownWarning("SGLang", re.compile(r"CUDA graph disabled for (\d+) consecutive decode steps"),
                 "decode ran without CUDA graph ({0} steps in a row: batch above the captured sizes?)"),
    # vLLM vllm/v1/worker/gpu_model_runner.py, GPUModelRunner.capture_model: "Skipping CUDA graph
    # capture. To turn on CUDA graph capture, ensure `cudagraph_mode` was not manually set to `NONE`"
    KnownWarning("vLLM", re.compile(r"Skipping CUDA graph capture"), "CUDA graphs off (capture skipped)"),
    # vLLM vllm/v1/core/kv_cache_utils.py, _auto_fit_max_model_len: "Auto-fit max_model_len: reduced
    # from %d to %d to fit in available GPU memory (%s GiB available for KV cache)"
    KnownWarning("vLLM", re.compile(r"Auto-fit max_model_len: reduced from (\d+) to (\d+)"),
                 "context cut from {0} to {1} tokens to fit the KV cache"),
    # vLLM vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py,
    # prepare_fp8_layer_for_marlin: "Your GPU does not have native support for FP8 computation but FP8
    # quantization is being used. Weight-only FP8 compression will be used leveraging the Marlin kernel."
    KnownWarning("vLLM", re.compile(r"does not have native support for FP8 computation"),
                 "FP8 weights on the Marlin weight-only kernel (slower for compute-heavy loads)"),
    # llama.cpp src/llama-model.cpp, load_tensors: "%s: offloaded %d/%d layers to GPU" (fewer than all:
    # the rest run on the CPU)
    KnownWarning("llama.cpp", re.compile(r"offloaded (\d+)/(\d+) layers to GPU"),
                 "only {0} of {1} layers on the GPU", lambda m: int(m[1]) < int(m[2])),
    # llama.cpp src/llama-context.cpp, the fused-op probes: "%s: %s not supported, set to disabled"
    # ("Flash Attention", after a layer's FA tensor landed on another device)
    KnownWarning("llama.cpp", re.compile(r"(Flash Attention) not supported, set to disabled"),
                 "{0} off (not supported on this device)"),
)


def scan(lines: Iterable[str]) -> list[str]:
    """The known warnings among `lines`, each once (with how often it appeared), in the order first
    seen: `SERVER: what it means`, e.g. `SGLang: DFLASH draft CUDA graph off: only 0.93 GB free
    (lower --mem-fraction-static)`."""
    said: dict[int, str] = {}  # KNOWN index -> what its first match says, in the order seen
    times: Counter[int] = Counter()
    for line in lines:
        for index, known in enumerate(KNOWN):
            match = known.pattern.search(line)
            if match and known.applies(match):
                said.setdefault(index, f"{known.server}: " + known.says.format(*match.groups()))
                times[index] += 1
    return [text if times[index] == 1 else f"{text} ({times[index]} times)" for index, text in said.items()]


def scan_log(path: str | os.PathLike[str]) -> list[str]:
    """`scan` over a log file (none when it is missing), undecodable bytes replaced."""
    try:
        with open(path, "rb") as log:
            data = log.read(MAX_LOG_BYTES)
    except OSError:
        return []
    return scan(data.decode("utf-8", "replace").splitlines())
