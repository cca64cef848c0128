"""Engine settings, and named presets that set all of them at once.

A preset describes one real deployment (GPUs, tp size, model, speculative settings) as the
numbers the engine needs: the launch flags it mirrors (max running requests, chunked prefill
size, draft block size, context length, ...) and a timing model calibrated against published
measurements (see CALIBRATION.md and benchmarks/calibrate.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any


@dataclass(frozen=True)
class SimConfig:
    """Everything one simulated instance needs; CLI flags override a preset's values.

    Timing model (seconds, before `time_scale`):
    - a request reaches the scheduler's queue `frontend_s` after it arrived: SGLang's HTTP
      server, chat template, TokenizerManager and the IPC hops around the scheduler (input and
      output side, folded into one) cost every request that much without blocking the GPU;
    - an idle scheduler starts its first step `admission_delay_s` after a request reaches it, so
      requests sent together are batched together;
    - a prefill step over chunks of n new tokens each after c tokens of context costs
      `max(prefill_step_s, sum(n * prefill_token_s + ((c + n)**2 - c**2) * prefill_quad_s))`:
      it blocks every running decode, and even a few tokens cost one forward pass;
    - with the host tier (`enable_hierarchical_cache`, `hicache_ratio` times the device cache on the
      host), the prefix a request finds only on the host is loaded back before its prefill at
      `hicache_load_tokens_per_s`, added to the prefill step that holds its first chunk (SGLang
      overlaps the load with the forward layer by layer; not overlapping it is the cautious bound);
    - a verify (decode) step with B running requests and C context tokens in total costs
      `verify_step_s + (B - 1) * verify_extra_req_s + C * verify_ctx_token_s`;
    - a verify step gives each request 1..`speculative_num_draft_tokens` tokens, drawn from a
      truncated geometric law whose mean is `accept[domain]` (`reasoning_accept[domain]` while it
      is thinking); the draws are seeded by the prompt, so prompts of one domain still differ.
    """

    # server
    served_model_name: str = "default"
    version: str = "0.5.9-sim"
    flavor: str = "sglang"
    enable_cache_report: bool = False
    # scheduler and memory
    max_running_requests: int = 2
    chunked_prefill_size: int = 2048
    max_prefill_tokens: int = 8192
    context_length: int = 262144
    radix_cache_tokens: int = 600_000
    disable_radix_cache: bool = False
    enable_hierarchical_cache: bool = False
    hicache_ratio: float = 2.0  # SGLang's default: the host pool is this many times the device's
    # host-to-device copy of KV cache, in tokens/s: PCIe 4.0 x16 (~25 GB/s a GPU) over the KV of a
    # 64-layer model with 8 KV heads of 128 dims in fp8 (128 KiB a token), split over tp=2 (64 KiB
    # a GPU): ~380k tokens/s. An estimate, not fitted: the thread has no hierarchical-cache figure
    hicache_load_tokens_per_s: float = 380_000.0
    page_size: int = 1
    stream_interval: int = 1
    decode_log_interval: int = 40  # decode batches between SGLang's decode logs (and gauges)
    # speculative decoding
    speculative_algorithm: str = "DFLASH"
    speculative_num_draft_tokens: int = 8
    speculative_dflash_block_size: int | None = None  # DFLASH: equal to the draft tokens (server_args.check)
    accept: dict[str, float] = field(default_factory=lambda: {
        "code": 6.0, "en_tech": 3.5, "cn_chat": 2.5, "cn_essay": 1.8})
    reasoning_accept: dict[str, float] = field(default_factory=lambda: {
        "code": 3.5, "en_tech": 2.8, "cn_chat": 2.0, "cn_essay": 1.8})
    # a code prompt's accept means times these, by the language it asks for (content.language)
    accept_by_language: dict[str, float] = field(default_factory=dict)
    reasoning_accept_by_language: dict[str, float] = field(default_factory=dict)
    # timing model
    time_scale: float = 1.0
    frontend_s: float = 0.1
    admission_delay_s: float = 0.005
    prefill_step_s: float = 0.03
    prefill_token_s: float = 5e-4
    prefill_quad_s: float = 2.5e-9
    verify_step_s: float = 0.025
    verify_extra_req_s: float = 0.004
    verify_ctx_token_s: float = 2e-8
    # output length when max_tokens does not decide: natural_base + (prompt hash % natural_span)
    natural_base: int = 1088
    natural_span: int = 1024
    thinking_base: int = 640
    thinking_span: int = 640
    # what the chat template does when a request sends no enable_thinking (Qwen3's thinks)
    thinking_default: bool = True
    # memory (server_args.py's model): whether the DFLASH draft's CUDA graph fits
    mem_fraction_static: float = 0.9
    gpu_memory_gib: float = 80.0
    non_static_memory_gib: float = 0.5  # in use outside the static pool before the draft graph
    # launch flags reported by /get_server_info, not modelled
    tp_size: int = 1
    model_path: str = "default"
    kv_cache_dtype: str = "auto"
    server_args: dict[str, Any] = field(default_factory=dict)
    not_modelled: tuple[str, ...] = ()  # the command line's flags that change nothing simulated

    def with_overrides(self, **overrides: Any) -> "SimConfig":
        known = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in overrides.items() if k in known and v is not None})


PRESETS: dict[str, SimConfig] = {
    # applejuice's box in the seed thread: 2x RTX 3090, no NVLink (NCCL P2P disabled), tp=2,
    # Qwen3.8-27B AWQ + DFlash2 draft (block 8), fp8_e5m2 KV, max running requests 2.
    "3090x2-tp2-dflash": SimConfig(
        served_model_name="Qwen3.8-27B-AWQ",
        model_path="/path/to/Qwen3.8-27B-AWQ",
        version="0.5.19.dev990-sim",
        tp_size=2,
        kv_cache_dtype="fp8_e5m2",
        speculative_dflash_block_size=8,
        mem_fraction_static=0.93,
        # a 24 GB card; 0.51 GB in use outside the static pool is the thread's own figure: at
        # --mem-fraction-static 0.94 only 0.93 GB were left for the DFLASH draft's CUDA graph
        gpu_memory_gib=24.0,
        non_static_memory_gib=0.51,
        enable_cache_report=True,
        # fitted by benchmarks/calibrate.py's method: accept means so that the protocol prompts'
        # tok/chunk match (thinking off and on), prefill terms by least squares over the cold
        # prefill table and the single-stream TTFTs (with a prefill forward of at least one decode
        # forward), verify step from decode / steps.
        accept={"code": 6.474, "en_tech": 3.596, "cn_chat": 2.729, "cn_essay": 1.640},
        reasoning_accept={"code": 3.702, "en_tech": 2.829, "cn_chat": 1.922, "cn_essay": 1.695},
        # the draft accepts the thread's C++17 ring buffer (code_b) less than its Python LRU cache
        # (code): fitted to the 2-stream different-prompt aggregates (thinking off, and on)
        accept_by_language={"c++": 0.87},
        reasoning_accept_by_language={"c++": 0.97},
        frontend_s=0.1,
        admission_delay_s=0.005,
        prefill_step_s=0.03,
        prefill_token_s=5.78e-4,
        prefill_quad_s=2.49e-9,
        verify_step_s=0.0259,
        verify_extra_req_s=0.0038,
        verify_ctx_token_s=2e-8,
        server_args={  # the rest of the thread's launch line, reported only
            "speculative_draft_model_path": "/path/to/Qwen3.8-27B-DFlash2",
            "trust_remote_code": True,
            "max_mamba_cache_size": 10,
            "reasoning_parser": "qwen3",
            "tool_call_parser": "qwen3_coder",
            "sampling_backend": "pytorch",
            "disable_custom_all_reduce": True,
            "disable_prefill_cuda_graph": True,
        },
    ),
}
DEFAULT_PRESET = "3090x2-tp2-dflash"
