"""The shipped profiles run end to end (time-scaled and shortened); a broken profile stops the run
before it starts with one line naming the file and the key, and exit code 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loadlib.profiles import ProfileError, load_profile
from tests.conftest import REPO, run_locust
from tests.profile_runs import run_profiles_together

PROFILES = REPO / "profiles"
SHORTER = {"rounds": "1", "duration_s": "1.5", "warmup_s": "0.3", "rate_rps": "8"}


def shortened(name: str) -> str:
    """A shipped profile with one round, 1.5 s per level and 0.3 s of warm-up, else unchanged."""
    text = (PROFILES / name).read_text(encoding="utf-8")
    return re.sub(rf"^({'|'.join(SHORTER)}) = .*$", lambda m: f"{m.group(1)} = {SHORTER[m.group(1)]}", text,
                  flags=re.MULTILINE)


def test_the_five_profiles_are_shipped_and_valid():
    names = {path.name for path in PROFILES.glob("*.toml")}
    assert {"uni-bench.toml", "uni-bench-x2.toml", "prefill-sweep.toml", "issue-bot.toml", "chat-mix.toml"} <= names
    for name in names:
        load_profile(PROFILES / name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The five shipped profiles, shortened, started together: name -> (result, every record)."""
    work = tmp_path_factory.mktemp("profiles")
    return run_profiles_together({
        "uni-bench": (work / "uni-bench", shortened("uni-bench.toml"), 8),
        "uni-bench-x2": (work / "uni-bench-x2", shortened("uni-bench-x2.toml"), 8),
        "prefill-sweep": (work / "prefill-sweep", shortened("prefill-sweep.toml"), 1,
                          "--sim-args", "--time-scale 0.001"),
        "issue-bot": (work / "issue-bot", shortened("issue-bot.toml"), 8, "--sim-args", "--time-scale 0.01"),
        "chat-mix": (work / "chat-mix", shortened("chat-mix.toml"), 4),
    })


@pytest.mark.processes
def test_uni_bench_runs_the_protocol(runs):
    result, df = runs["uni-bench"]
    assert df["error"].isna().all() and (df["max_tokens"] == 512).all()
    assert set(df["cell"]) == {"single", "c2-same", "c2-different", "c4-same", "c4-different", "c8-same",
                               "c8-different"}
    assert set(df.loc[df["cell"] == "single", "scenario"]) == {"code", "en_tech", "cn_chat", "cn_essay"}
    assert "Single stream" in result.stdout and "Concurrency" in result.stdout


@pytest.mark.processes
def test_uni_bench_x2_runs_4_and_8_streams_at_1024_tokens(runs):
    _result, df = runs["uni-bench-x2"]
    assert df["error"].isna().all() and (df["max_tokens"] == 1024).all()
    assert set(df.loc[df["concurrency"] > 1, "cell"]) == {"c4-same", "c4-different", "c8-same", "c8-different"}


@pytest.mark.processes
def test_prefill_sweep_is_cold_at_every_size(runs):
    result, df = runs["prefill-sweep"]
    sweep = df[df["measured"]]
    assert sweep["error"].isna().all()
    assert list(sweep["cell"]) == ["prefill-3k", "prefill-14k", "prefill-57k", "prefill-116k", "prefill-234k"]
    assert (sweep["cache_observed"] == "cold").all() and (sweep["cached_tokens"] == 0).all()
    target = sweep["cell"].str.removeprefix("prefill-").str.removesuffix("k").astype(float) * 1000
    assert ((sweep["prompt_tokens"] / target - 1).abs() < 0.03).all()
    assert "prefill-234k" in result.stdout


@pytest.mark.processes
def test_issue_bot_mixes_issues_tool_calls_and_long_context_in_open_loop(runs):
    result, df = runs["issue-bot"]
    run = df[df["measured"]]
    assert run["error"].isna().all() and set(run["cell"]) == {"open-8rps"}
    assert set(run["scenario"]) <= {"distinct-issues", "tool-call", "long-context-14k", "long-context-57k"}
    assert {"distinct-issues", "tool-call"} <= set(run["scenario"])
    assert set(df.loc[~df["measured"], "cell"]) == {"warmup", "calibrate"}
    assert "goodput = completions/s meeting TTFT <= 3 s and decode >= 20 t/s" in result.stdout


@pytest.mark.processes
def test_chat_mix_runs_conversations_with_thinking_on_and_off(runs):
    result, df = runs["chat-mix"]
    run = df[df["measured"]]
    assert run["error"].isna().all() and set(run["cell"]) == {"closed"}
    assert run.groupby("scenario")["thinking"].agg(set).to_dict() == {"chat": {False}, "chat-thinking": {True}}
    assert run["turn"].max() >= 1
    assert "Multi-turn: TTFT per turn" in result.stdout


# --- broken profiles ---------------------------------------------------------------------------

@pytest.mark.processes
@pytest.mark.parametrize("text, args, needle", [
    ('[load]\nmode = "open"\nrate = 3\nduration_s = 5\n[scenarios.vision]\n', [], "load.rate: unknown key"),
    ('[load\nmode = "open"\n', [], "invalid TOML"),
    ('[scenarios.protocol]\n', ["--rounds", "2"], "--rounds"),
])
def test_a_broken_profile_stops_the_run_with_one_line_and_exit_code_2(tmp_path, text, args, needle):
    profile = tmp_path / "broken.toml"
    profile.write_text(text, encoding="utf-8")
    result = run_locust(["--headless", "-u", "1", "--profile", str(profile), *args], cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert needle in last and str(profile) in last
    assert not (tmp_path / "runs").exists()  # nothing of the run started


@pytest.mark.parametrize("text, message", [
    ('[load]\nmode = "burst"\n[scenarios.vision]\n', "load.mode: expected one of rounds, closed, open, ladder, search, trace, sessions, got 'burst'"),
    ('[load]\nrounds = 2\n[scenarios.vision]\n', "load.mode: missing (one of rounds, closed, open, ladder, search, trace, sessions)"),
    ('[load]\nmode = "open"\nrate_rps = -1\nduration_s = 5\n[scenarios.vision]\n', "load.rate_rps: Input should be greater than 0"),
    ('[load]\nmode = "closed"\n[scenarios.vision]\n', "load.duration_s: missing (required)"),
    ('[load]\nmode = "ladder"\nduration_s = 5\nlevels = [4, 2]\n[scenarios.vision]\n', "load.levels: levels must be a non-empty rising list"),
    ('[scenarios]\n', "scenarios: name at least one scenario"),
    ('[scenarios.chat]\nturns = 3\n', "scenarios.chat.kind: expected one of protocol, radix-hit"),
    ('[scenarios.chat]\nkind = "multi-turn"\nturns = 0\n', "scenarios.chat.turns: Input should be greater than 0"),
    ('[scenarios.chat]\nkind = "multi-turn"\nthinking = "yes"\n', "scenarios.chat.thinking: Input should be 'server', 'on' or 'off'"),
    ('[scenarios.radix-hit]\nprompt = "nope"\n', "scenarios.radix-hit.prompt: unknown prompt 'nope'"),
    ('[scenarios.protocol]\nsingle = ["code", "poetry"]\n', "scenarios.protocol.single: unknown prompt 'poetry'"),
    ('[scenarios.long-context]\nsizes = [3000, 3000]\n', "scenarios.long-context.sizes: sizes must be distinct"),
    ('[scenarios.vision]\n[slo]\nttft = 2\n', "slo.ttft: unknown key"),
    ('[scenarios.vision]\n[[targets]]\nlabel = "A"\n[[targets]]\nlabel = "A"\n', "targets: label 'A' names two targets"),
    ('[scenarios.vision]\n[[targets]]\nlabel = "A B"\n', "targets.0.label: String should match pattern"),
    ('[scenarios.vision]\n[[targets]]\nhost = "http://a:1"\n', "targets.0.label: missing (required)"),
    ('[scenarios.vision]\n[[targets]]\nlabel = "A"\nhost = "ftp://a"\n', "targets.0: host: "),
    ('[scenarios.vision]\n[[targets]]\nlabel = "A"\nhost = "http://a:1"\nsim_args = "--time-scale 0.1"\n',
     "targets.0: sim_args is for a target without host"),
    ('[scenarios.vision]\n[[targets]]\nlabel = "A"\n[server]\ncommand = "srv --port {port}"\n',
     "server: a [server] sweep starts its own servers: no [[targets]] beside it"),
])
def test_profile_errors_name_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    assert str(error.value).startswith(f"{path}: {message}")
    assert "\n" not in str(error.value)


def test_a_missing_profile_file_is_named(tmp_path):
    with pytest.raises(ProfileError, match=r"nope\.toml: cannot read: No such file"):
        load_profile(Path(tmp_path / "nope.toml"))
