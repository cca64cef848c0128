"""SGLang's launch flags as the simulator takes them, so that a recipe's command line runs unchanged.

`python -m loadlib.sim` accepts the flags of `sglang.launch_server` that the seed thread's launch
lines use (and a few more that recipes pass), under SGLang's names. Three kinds:

- **modelled** (`add_modelled`): they change what the simulator does (the batch bound, prefill
  chunks, draft tokens, the radix cache and its host tier, ...; `--mem-fraction-static` through
  the memory model below);
- **reported** (`REPORTED`): accepted, shown in `/get_server_info` as SGLang shows them, and listed
  as not modelled there (`simulator.not_modelled`) and in one line on stderr at start-up;
- anything else is refused, as SGLang refuses an unknown flag (exit 2).

`check` refuses what SGLang's own start-up checks refuse, with SGLang's message (its
`python/sglang/srt/arg_groups/speculative_hook.py`, `_handle_dflash`, and the host KV pool's
assertion that it is larger than the device's), for `__main__` to exit 1 as `launch_server` does.

The memory model (`draft_graph_free_gib`) decides whether SGLang would capture the DFLASH draft's
CUDA graph: after the target is initialised a GPU has `gpu_memory_gib * (1 - mem_fraction_static)
- non_static_memory_gib` free, and SGLang's DFLASH worker disables the draft graph below 1 GB
(`python/sglang/srt/speculative/dflash_worker.py`, `init_cuda_graphs`), logging the line
`startup_warnings` prints. The preset's `non_static_memory_gib` is the thread's own figure: at
`--mem-fraction-static 0.94` a 24 GB RTX 3090 had 0.93 GB left. The simulator prints the line; it
does not slow its decode for it (nothing in the thread isolates that cost).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable

from loadlib.sim.presets import SimConfig

DFLASH = "DFLASH"
DRAFT_GRAPH_MIN_GIB = 1.0  # SGLang's DFLASH worker: `if available_mem < 1.0` the draft graph is off

# (flags, type): accepted and reported under SGLang's name (the first flag's), not modelled.
# `bool` is a switch (`store_true`), as in SGLang.
REPORTED: tuple[tuple[tuple[str, ...], type], ...] = (
    (("--model-path", "--model"), str),
    (("--tp-size", "--tp"), int),
    (("--kv-cache-dtype",), str),
    (("--speculative-draft-model-path",), str),
    (("--trust-remote-code",), bool),
    (("--hicache-size",), int),
    (("--max-mamba-cache-size",), int),
    (("--reasoning-parser",), str),
    (("--tool-call-parser",), str),
    (("--sampling-backend",), str),
    (("--attention-backend",), str),
    (("--disable-custom-all-reduce",), bool),
    (("--disable-prefill-cuda-graph",), bool),
    (("--tokenizer-worker-num",), int),
    (("--enable-metrics",), bool),
    (("--dtype",), str),
    (("--quantization",), str),
)
REPORTED_AS_FIELDS = ("model_path", "tp_size", "kv_cache_dtype")  # SimConfig fields; the rest: server_args


def _dest(flags: tuple[str, ...]) -> str:
    return flags[0].lstrip("-").replace("-", "_")


def add_modelled(group: argparse._ArgumentGroup, positive_int: Callable[[str], float],
                 fraction: Callable[[str], float]) -> None:
    """The SGLang flags the engine models (they override the preset one by one)."""
    group.add_argument("--max-running-requests", type=positive_int)
    group.add_argument("--chunked-prefill-size", type=int)
    group.add_argument("--max-prefill-tokens", type=positive_int)
    group.add_argument("--context-length", type=positive_int)
    group.add_argument("--speculative-algorithm", type=str.upper,
                       help="DFLASH (the preset's) is checked as SGLang checks it; others are reported only")
    group.add_argument("--speculative-num-draft-tokens", type=positive_int,
                       help="draft block size: a verify step yields 1..N tokens")
    group.add_argument("--speculative-dflash-block-size", type=int,
                       help="DFLASH: must equal --speculative-num-draft-tokens when both are given")
    group.add_argument("--mem-fraction-static", type=fraction,
                       help="GPU memory for weights and KV cache; too high leaves too little for the "
                            "DFLASH draft's CUDA graph (the start-up warning SGLang logs)")
    group.add_argument("--page-size", type=positive_int)
    group.add_argument("--stream-interval", type=positive_int,
                       help="stream output every N decode steps (merges steps into one chunk)")
    group.add_argument("--decode-log-interval", type=positive_int,
                       help="decode batches between decode logs, which set the spec_accept_length gauge")
    group.add_argument("--radix-cache-tokens", type=positive_int, help="radix cache capacity (tokens)")
    group.add_argument("--disable-radix-cache", action=argparse.BooleanOptionalAction, default=None)
    group.add_argument("--enable-cache-report", action=argparse.BooleanOptionalAction, default=None,
                       help="report usage.prompt_tokens_details.cached_tokens (the preset turns it on)")
    group.add_argument("--enable-hierarchical-cache", action="store_true", default=None,
                       help="a host tier under the radix cache: evicted blocks stay in host memory and "
                            "are loaded back when a prompt needs them (docs/simulator.md)")
    group.add_argument("--hicache-ratio", type=float,
                       help="the host tier's size, in times the radix cache's (default 2, SGLang's)")


def add_reported(group: argparse._ArgumentGroup) -> None:
    """The SGLang flags that are accepted and reported but not modelled (`REPORTED`)."""
    for flags, kind in REPORTED:
        if kind is bool:
            group.add_argument(*flags, dest=_dest(flags), action="store_true", default=None)
        else:
            group.add_argument(*flags, dest=_dest(flags), type=kind)


def apply(cfg: SimConfig, args: argparse.Namespace) -> SimConfig:
    """The preset with the command line's flags: modelled ones override its fields, reported ones
    join its server args, and both DFLASH widths follow SGLang's rule (`check` first)."""
    given = vars(args)
    reported = {_dest(flags): given[_dest(flags)] for flags, _kind in REPORTED if given.get(_dest(flags)) is not None}
    draft, block = given.get("speculative_num_draft_tokens"), given.get("speculative_dflash_block_size")
    widths: dict[str, Any] = {}
    if draft is not None or block is not None:  # the command line's pair replaces the preset's
        widths = {"speculative_num_draft_tokens": block if draft is None else draft,
                  "speculative_dflash_block_size": block}
    cfg = cfg.with_overrides(**{k: v for k, v in given.items() if k not in reported and k not in widths})
    fields = {k: v for k, v in reported.items() if k in REPORTED_AS_FIELDS}
    extra = {k: v for k, v in reported.items() if k not in REPORTED_AS_FIELDS}
    not_modelled = tuple(flags[0] for flags, _kind in REPORTED if _dest(flags) in reported)
    if cfg.speculative_algorithm != DFLASH:
        not_modelled += ("--speculative-algorithm",)  # its acceptance law is DFLASH's whatever the name
    return replace(cfg, **fields, **widths, server_args={**cfg.server_args, **extra}, not_modelled=not_modelled)


def check(cfg: SimConfig) -> None:
    """Refuses what SGLang would not start, with SGLang's message: a DFLASH configuration its
    `_handle_dflash` refuses (ValueError), and a host tier no larger than the device's cache (the
    AssertionError of its host KV pool, `memory_pool_host.py`)."""
    if cfg.enable_hierarchical_cache and round(cfg.radix_cache_tokens * cfg.hicache_ratio) <= cfg.radix_cache_tokens:
        raise AssertionError("The host memory should be larger than the device memory with the current protocol")
    if cfg.speculative_algorithm != DFLASH or cfg.speculative_dflash_block_size is None:
        return
    block, draft = cfg.speculative_dflash_block_size, cfg.speculative_num_draft_tokens
    if block <= 0:
        raise ValueError(f"DFLASH requires --speculative-dflash-block-size to be positive, got {block}.")
    if draft != block:
        raise ValueError("Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set "
                         "but they differ. For DFLASH they must match. "
                         f"speculative_num_draft_tokens={draft}, speculative_dflash_block_size={block}.")


def draft_graph_free_gib(cfg: SimConfig) -> float:
    """GPU memory left for the DFLASH draft's CUDA graph after the target is initialised (the
    module's memory model)."""
    return cfg.gpu_memory_gib * (1 - cfg.mem_fraction_static) - cfg.non_static_memory_gib


def draft_graph_captured(cfg: SimConfig) -> bool:
    return cfg.speculative_algorithm != DFLASH or draft_graph_free_gib(cfg) >= DRAFT_GRAPH_MIN_GIB


def startup_warnings(cfg: SimConfig) -> list[str]:
    """The log lines SGLang would write at start-up for this configuration, in its log format:
    the DFLASH draft CUDA graph disabled for lack of memory (`draft_graph_captured`)."""
    if cfg.flavor != "sglang" or draft_graph_captured(cfg):
        return []
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return [f"[{stamp} TP0] Disable DFLASH draft cuda graph because only {draft_graph_free_gib(cfg):.2f} GB GPU "
            "memory is available after target backend initialization."]
