"""The shipped sweep profiles launch SGLang as the seed thread does: DFLASH's draft tokens equal to
its block size in every configuration, the thread's block sizes, and the simulator's profile the
same launch line, which the simulator's own parser accepts and checks as SGLang would."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadlib.profiles import load_profile
from loadlib.sim.__main__ import build_parser, config_from_args
from loadlib.sim.server_args import check
from loadlib.sweep.grid import configurations

PROFILES = Path(__file__).resolve().parents[2] / "profiles"
RECIPE_FLAGS = ("--tp-size", "--trust-remote-code", "--context-length", "--mem-fraction-static", "--kv-cache-dtype",
                "--chunked-prefill-size", "--max-prefill-tokens", "--max-mamba-cache-size", "--enable-cache-report",
                "--reasoning-parser", "--tool-call-parser", "--speculative-draft-model-path")


def value_of(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("name", ["sweep-sglang.toml", "sweep-sim.toml"])
def test_every_configuration_passes_equal_draft_tokens_and_block_size(name):
    profile = load_profile(PROFILES / name)
    found = configurations(profile.server)
    assert profile.server.grid["draft"] == [4, 8, 16]  # the thread's block sizes
    assert len(found) == 6
    for config in found:
        argv = config.argv(30000)
        assert value_of(argv, "--speculative-algorithm") == "DFLASH"
        draft = value_of(argv, "--speculative-num-draft-tokens")
        assert draft == value_of(argv, "--speculative-dflash-block-size") == str(config.values["draft"])
        assert value_of(argv, "--max-running-requests") == str(config.values["mrr"])
        assert all(flag in argv for flag in RECIPE_FLAGS), config.label
        assert value_of(argv, "--kv-cache-dtype") == "fp8_e5m2" and value_of(argv, "--tool-call-parser") == "qwen3_coder"


def test_nccl_p2p_is_disabled_only_in_the_commented_no_nvlink_line():
    profile = load_profile(PROFILES / "sweep-sglang.toml")
    assert "NCCL_P2P_DISABLE" not in profile.server.env
    text = (PROFILES / "sweep-sglang.toml").read_text(encoding="utf-8")
    assert '# env = { CUDA_VISIBLE_DEVICES = "0,1", NCCL_P2P_DISABLE = "1"' in text


@pytest.mark.parametrize("name", ["sweep-sglang.toml", "sweep-sim.toml"])
def test_the_simulator_takes_each_configurations_sglang_flags(name):
    for config in configurations(load_profile(PROFILES / name).server):
        argv = config.argv(30000)
        flags = argv[argv.index("--host"):]  # what follows `python -m sglang.launch_server` / `loadlib.sim`
        cfg = config_from_args(build_parser().parse_args(flags))
        check(cfg)  # what SGLang would refuse raises
        assert (cfg.speculative_num_draft_tokens, cfg.speculative_dflash_block_size) == (config.values["draft"],) * 2
        assert cfg.max_running_requests == config.values["mrr"] and cfg.tp_size == 2
        assert "--trust-remote-code" in cfg.not_modelled and "--mem-fraction-static" not in cfg.not_modelled
