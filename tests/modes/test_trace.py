"""Trace replay (load mode `trace`) through real headless Locust against the time-scaled
simulator: every request at its time, lengths as asked, shared hash blocks met in the prefix
cache, the work split over worker processes, and bad traces stopped before any load."""

from __future__ import annotations

import sys

import orjson
import pytest

from loadlib.modes.trace import TracePrompts, TraceRequest
from loadlib.scenarios.base import ANY, WARM
from tests.conftest import LOCUSTFILE, free_port, run_together
from tests.profile_runs import run_profile

PROFILE = """
[request]
max_tokens = 64
[load]
mode = "trace"
trace = "{trace}"
speedup = {speedup}
"""


def mooncake(tmp_path, n: int = 40, gap_ms: int = 50) -> str:
    lines = [orjson.dumps({"timestamp": 1000 + i * gap_ms, "input_length": 1600 + 10 * (i % 7),
                           "output_length": 20 + i % 9, "hash_ids": [1, 2] if i % 2 else [1, 2, 3]})
             for i in range(n)]
    (tmp_path / "mooncake.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return "mooncake.jsonl"


@pytest.mark.processes
def test_a_mooncake_trace_replays_at_its_times_with_its_lengths_and_shared_blocks(tmp_path):
    trace = mooncake(tmp_path)
    result, df = run_profile(tmp_path, PROFILE.format(trace=trace, speedup=2.0), 8)
    run = df[df["measured"]].sort_values("sent_at")
    assert len(run) == 40 and run["error"].isna().all() and set(run["cell"]) == {"trace"}
    sent = run["sent_at"].to_numpy()
    assert (len(sent) - 1) / (sent[-1] - sent[0]) == pytest.approx(40.0, rel=0.05)  # 50 ms gaps at speedup 2
    assert run["queue_s"].max() < 0.05
    assert (run["completion_tokens"] == run["max_tokens"]).all()  # ignore_eos: the asked output lengths
    assert run["prompt_tokens"].median() == pytest.approx(1630, rel=0.1)
    assert (run["cached_tokens"].iloc[5:] >= 1000).all()  # the shared hash blocks hit the prefix cache
    assert "Trace replay" in result.stdout and "trace   40" in result.stdout


def test_a_block_is_meant_warm_once_a_request_carrying_it_was_answered():
    """A request whose blocks were only sent (their first request may still be in its prefill or
    queued) is not meant to meet them warm; once one was answered, they are in the prefix cache."""
    prompts = TracePrompts("salt")
    first, alongside = (prompts.job_for(TraceRequest(0.0, 1600, 16, (1, 2))) for _ in range(2))
    assert (first.cache, alongside.cache) == (ANY, ANY)
    prompts.observe(alongside, {"ttft_s": None, "error": "http_500"})  # no answer: nothing cached
    assert prompts.job_for(TraceRequest(0.1, 1600, 16, (2, 9))).cache == ANY
    prompts.observe(first, {"ttft_s": 0.3})
    assert prompts.job_for(TraceRequest(0.2, 1600, 16, (1, 3))).cache == WARM


# (input_length, hash_ids) at 150 ms gaps: mooncake's blocks of 512 tokens cover the prompt in
# order, the last one partial. Lines shorter than one block; more ids than the length reaches;
# fewer; none; shared first blocks met from a shorter line and from a longer one.
BLOCK = 512
BLOCK_LINES = [(300, [1]), (700, [2, 3]), (1500, [4, 5, 6]), (300, [1]), (700, [2, 3]), (1000, [4, 5]),
               (2000, [4, 5, 6, 7]), (120, [8]), (80, [8]), (512, [9]), (1024, [9, 10]), (3000, [11]),
               (800, []), (90, []), (5000, list(range(12, 22))), (200, [1, 22]), (1537, [4, 5, 6, 23]),
               (600, [30, 31, 32, 33, 34]), (2600, [30, 31, 32, 33, 34]), (650, [1, 35])]


@pytest.mark.processes
def test_each_prompt_is_its_lines_length_with_its_shared_blocks_in_the_cache(tmp_path):
    lines = [orjson.dumps({"timestamp": i * 150, "input_length": n, "output_length": 8 + i, "hash_ids": ids})
             for i, (n, ids) in enumerate(BLOCK_LINES)]
    (tmp_path / "blocks.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    _result, df = run_profile(tmp_path, PROFILE.format(trace="blocks.jsonl", speedup=1.0), 4)
    run = df[df["measured"]].sort_values("sent_at")
    assert len(run) == len(BLOCK_LINES) and run["error"].isna().all()
    for _index, record in run.iterrows():
        line = int(record["max_tokens"]) - 8
        asked, ids = BLOCK_LINES[line]
        assert record["prompt_tokens"] == pytest.approx(asked, rel=0.05), (line, asked, record["prompt_tokens"])
        # what the earlier lines' prompts share with this one: their first blocks in common, as far
        # as both prompts reach (less the shorter one's own end: nonce and ask)
        shared = max([min(BLOCK * _common(ids, other), asked, length) for length, other in BLOCK_LINES[:line]],
                     default=0)
        assert shared - 40 <= record["cached_tokens"] <= shared + 10, (line, shared, record["cached_tokens"])


def _common(ids: list[int], other: list[int]) -> int:
    """How many first hash ids two lines share."""
    return next((i for i, (a, b) in enumerate(zip(ids, other)) if a != b), min(len(ids), len(other)))


@pytest.mark.processes
def test_a_plain_csv_trace_is_split_over_two_processes_each_request_once(tmp_path):
    rows = ["timestamp_s,input_tokens,output_tokens,session_id"] + [
        f"{i * 0.05:.2f},{300 + i},{16},s{i % 4}" for i in range(30)]
    (tmp_path / "trace.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    port = str(free_port())
    _result, df = run_profile(tmp_path, PROFILE.format(trace="trace.csv", speedup=1.0), 4, "--processes", "2",
                              "--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--master-port", port)
    run = df[df["measured"]]
    assert len(run) == 30 and run["error"].isna().all() and set(run["worker"]) == {0, 1}
    later_turns = run.sort_values("sent_at").groupby("slot").nth(slice(1, None))
    assert (later_turns["cache_intended"] == "warm").all()  # a session resends its history


@pytest.mark.processes
def test_lines_longer_than_the_models_context_are_skipped_with_a_count(tmp_path):
    lines = [orjson.dumps({"timestamp": i * 50, "input_length": 300_000 if i == 3 else 400, "output_length": 16})
             for i in range(8)]
    (tmp_path / "long.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    result, df = run_profile(tmp_path, PROFILE.format(trace="long.jsonl", speedup=1.0), 4)
    assert len(df[df["measured"]]) == 7
    said = "1 of 8 trace lines ask for more than the model's context (262144 tokens, from /v1/models): skipped"
    assert said in result.stderr and said in result.stdout


BAD_TRACES = [  # a trace file, what the one error line must say
    ('{"timestamp": 10, "input_length": 5, "output_length": 5}\n{"timestamp": 5, "input_length": 5, '
     '"output_length": 5}\n', "line 2: timestamp goes backwards"),
    ('{"timestamp": 10, "input_length": 5, "output_length": 5}\n{"timestamp": 20, "input_length": 5\n',
     "line 2: not JSON"),
    ('{"timestamp": 10, "input_length": 5}\n', "line 1: missing output_length"),
    ("timestamp_s,input_tokens,output_tokens\n0,ten,5\n", "line 2: timestamp_s, input_tokens, output_tokens must be numbers"),
]
REFUSED_PROFILES = {  # what the profile does wrong -> what stderr must say
    "a missing trace": "nope.jsonl: cannot read",
    "scenarios beside a trace": "a trace brings its own prompts",
}


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """Each bad trace and each refused profile, started together; by its needle."""
    work = tmp_path_factory.mktemp("refused")
    profiles = {needle: (trace, PROFILE.format(trace="t.jsonl", speedup=1.0)) for trace, needle in BAD_TRACES}
    profiles[REFUSED_PROFILES["a missing trace"]] = (None, PROFILE.format(trace="nope.jsonl", speedup=1.0))
    profiles[REFUSED_PROFILES["scenarios beside a trace"]] = (
        None, PROFILE.format(trace="mooncake.jsonl", speedup=1.0) + "[scenarios.vision]\n")
    commands = {}
    for needle, (trace, profile) in profiles.items():
        cwd = work / f"case{len(commands)}"
        cwd.mkdir()
        if trace is not None:
            (cwd / "t.jsonl").write_text(trace, encoding="utf-8")
        elif "mooncake" in profile:
            mooncake(cwd)
        (cwd / "p.toml").write_text(profile, encoding="utf-8")
        commands[needle] = ([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "1",
                             "--profile", "p.toml"], cwd)
    return run_together(commands, timeout=60)


@pytest.mark.processes
@pytest.mark.parametrize("needle", [needle for _trace, needle in BAD_TRACES])
def test_a_bad_trace_stops_before_any_load_with_one_line(refused, needle):
    result = refused[needle]
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0]


@pytest.mark.processes
@pytest.mark.parametrize("needle", list(REFUSED_PROFILES.values()), ids=list(REFUSED_PROFILES))
def test_a_missing_trace_or_scenarios_beside_it_are_refused(refused, needle):
    result = refused[needle]
    assert result.returncode == 2 and needle in result.stderr and "Traceback" not in result.stderr


def test_plain_jsonl_traces_read_like_csv_ones(tmp_path):
    from loadlib.modes.trace import load_trace

    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"timestamp_s": 2.5, "input_tokens": 100, "output_tokens": 8, "session_id": "a"}\n'
                     b'{"timestamp_s": 3.0, "input_tokens": 120, "output_tokens": 9}\n')
    first, second = load_trace(path)
    assert (first.at_s, first.input_tokens, first.output_tokens, first.session) == (0.0, 100, 8, "a")
    assert (second.at_s, second.session, second.hash_ids) == (0.5, None, ())
