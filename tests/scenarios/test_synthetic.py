"""The `synthetic` scenario: input and output lengths from distributions, inputs sized in the
server's tokens, outputs forced with `ignore_eos` (which the simulator honours), an optional shared
prefix; a bad distribution stops the run before it starts."""

from __future__ import annotations

import random
import statistics

import pytest

from loadlib.profiles import ProfileError, load_profile
from loadlib.scenarios import Lengths
from loadlib.sim.engine import Engine
from loadlib.sim.presets import PRESETS
from tests.conftest import run_locust
from tests.profile_runs import run_profile


def draws(n: int = 20000, seed: int = 1, **spec: object) -> list[int]:
    lengths, rng = Lengths(**spec), random.Random(seed)
    return [lengths.draw(rng) for _ in range(n)]


# --- distributions -----------------------------------------------------------------------------

def test_fixed_is_always_its_value():
    assert set(draws(100, dist="fixed", value=128)) == {128}


def test_uniform_covers_its_bounds_inclusive():
    values = draws(dist="uniform", min=100, max=110)
    assert set(values) == set(range(100, 111))


@pytest.mark.parametrize("dist", ["normal", "lognormal"])
def test_normal_and_lognormal_have_the_asked_mean_and_std(dist):
    values = draws(dist=dist, mean=1000, std=300)
    assert statistics.fmean(values) == pytest.approx(1000, rel=0.02)
    assert statistics.stdev(values) == pytest.approx(300, rel=0.05)


def test_lognormal_is_skewed_and_never_below_one():
    values = draws(dist="lognormal", mean=200, std=200)
    assert statistics.median(values) < 180 and min(values) >= 1


def test_draws_are_clamped_to_min_and_max_and_reproducible():
    values = draws(dist="normal", mean=100, std=100, min=50, max=150)
    assert min(values) == 50 and max(values) == 150
    assert values == draws(dist="normal", mean=100, std=100, min=50, max=150)
    assert min(draws(dist="normal", mean=10, std=50)) == 1  # never a zero or negative length


@pytest.mark.parametrize("table, message", [
    ('{ dist = "normal", mean = 500 }', "input_tokens: normal needs mean and std"),
    ('{ dist = "uniform", min = 10 }', "input_tokens: uniform needs min and max"),
    ('{ dist = "uniform", min = 90, max = 10 }', "input_tokens: min (90) is above max (10)"),
    ('{ dist = "fixed", value = 5, std = 1 }', "input_tokens: fixed does not take std"),
    ('{ dist = "gamma", mean = 5 }', "input_tokens.dist: Input should be 'fixed', 'uniform', 'normal' or 'lognormal'"),
    ('{ dist = "fixed", value = 0 }', "input_tokens.value: Input should be greater than 0"),
    ('{ dist = "fixed", value = "5" }', "input_tokens.value: Input should be a valid integer"),
    ('{ dist = "fixed", value = 5, mode = 3 }', "input_tokens.mode: unknown key"),
    ('{ dist = "fixed", value = 5 }\nmax_tokens = 9', "max_tokens: the output length is output_tokens here"),
    ('{ dist = "fixed", value = 5 }\nprefix_groups = 4', "prefix_groups: groups of what? set prefix_tokens too"),
])
def test_a_bad_distribution_names_the_key(tmp_path, table, message):
    path = tmp_path / "p.toml"
    path.write_text(f'[scenarios.syn]\nkind = "synthetic"\noutput_tokens = {{ dist = "fixed", value = 8 }}\n'
                    f'input_tokens = {table}\n', encoding="utf-8")
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    assert str(error.value).startswith(f"{path}: scenarios.syn.{message}"), str(error.value)


@pytest.mark.processes
def test_a_bad_distribution_stops_the_run_with_one_line_and_exit_code_2(tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text('[load]\nmode = "closed"\nduration_s = 5\n[scenarios.synthetic]\n'
                       'input_tokens = { dist = "normal", mean = 500 }\n'
                       'output_tokens = { dist = "fixed", value = 8 }\n',
                       encoding="utf-8")
    result = run_locust(["--headless", "-u", "1", "--profile", str(profile)], cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"{profile}: scenarios.synthetic.input_tokens: normal needs mean and std" in last, last
    assert not (tmp_path / "runs").exists()


# --- the simulator honours ignore_eos ----------------------------------------------------------

def test_with_ignore_eos_the_simulator_answers_exactly_max_tokens():
    engine = Engine(PRESETS["3090x2-tp2-dflash"])
    messages = [{"role": "user", "content": "Say hi."}]
    natural = engine.make_request("r", messages, 4000, 0.0, False, natural_tokens=30)
    assert (natural.limit, natural.finish_reason) == (30, "stop")
    forced = engine.make_request("r", messages, 4000, 0.0, False, natural_tokens=30, ignore_eos=True)
    assert (forced.limit, forced.finish_reason) == (4000, "length")
    thinking = engine.make_request("r", messages, 300, 0.0, True, ignore_eos=True)
    assert (thinking.limit, thinking.finish_reason) == (300, "length")


# --- through Locust ----------------------------------------------------------------------------

@pytest.mark.processes
def test_prompts_are_sized_in_server_tokens_behind_shared_prefixes_and_answers_run_to_their_draw(tmp_path):
    profile = """
seed = 2
[load]
mode = "closed"
duration_s = 2
jitter_s = 0.1
[scenarios.synthetic]
input_tokens = { dist = "fixed", value = 800 }
output_tokens = { dist = "uniform", min = 20, max = 60 }
prefix_tokens = 300
prefix_groups = 2
"""
    result, df = run_profile(tmp_path, profile, 4)
    assert df["error"].isna().all(), df["error"].dropna().tolist()
    assert len(df[df["cell"] == "calibrate"]) == 2
    run = df[df["measured"]]
    assert len(run) > 20 and set(run["scenario"]) == {"synthetic"}
    error = (run.sort_values("sent_at")["prompt_tokens"] / 1100 - 1).abs()  # the first answers teach the rest
    assert (error < 0.05).all() and (error.iloc[10:] < 0.015).all(), run["prompt_tokens"].tolist()
    assert run["max_tokens"].between(20, 60).all() and run["max_tokens"].nunique() > 10
    assert (run["completion_tokens"] == run["max_tokens"]).all() and (run["finish_reason"] == "length").all()
    warm = run[run["cache_intended"] == "warm"]
    assert len(warm) >= 0.8 * len(run) and (warm["cache_observed"] == "warm").all()  # once a group was served
    assert ((warm["cached_tokens"] / 300 - 1).abs() < 0.1).all(), warm["cached_tokens"].tolist()  # the prefix, no more
    assert not any(line.rstrip().endswith("MISSED") for line in result.stdout.splitlines())
