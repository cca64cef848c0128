"""The `dataset` scenario: the user's own prompts from OpenAI JSONL, ShareGPT JSON or plain text,
detected from the content, played in the file's order, shuffled or sampled; bad data stops the
run before it starts; the shipped example runs through headless Locust on the simulator."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import orjson
import pytest

from loadlib.profiles import ProfileError, load_profile
from loadlib.scenarios import DatasetError, load_dataset
from loadlib.scenarios.dataset import DatasetConversations, DatasetRequests, dataset_scenario, ordered
from loadlib.sim.tokenizer import encode, encode_chat
from tests.conftest import REPO, run_locust
from tests.profile_runs import run_profile

EXAMPLE = REPO / "profiles" / "dataset-example.toml"
SHAREGPT = [
    {"id": "a", "conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
                                  {"from": "gpt", "value": "Hello! How can I help?"},
                                  {"from": "human", "value": "Name a prime."}, {"from": "gpt", "value": "Seven."}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "(a greeting before any question)"},
                                  {"from": "human", "value": "Part one."}, {"from": "human", "value": "Part two."},
                                  {"from": "gpt", "value": "Both parts read."}]},
    {"id": "c", "conversations": []},
]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(*objects: object) -> str:
    return "".join(orjson.dumps(o).decode() + "\n" for o in objects)


# --- formats -----------------------------------------------------------------------------------

def test_openai_requests_keep_their_body_keys_but_not_the_runs(tmp_path):
    path = write(tmp_path, "r.jsonl", jsonl(
        {"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 20, "temperature": 0.7,
         "tools": [{"type": "function", "function": {"name": "f"}}], "model": "gpt-4o", "stream": False},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "b"}], "max_tokens": 5}) + "\n")
    dataset = load_dataset(path)
    assert dataset.format == "openai" and len(dataset.entries) == 2
    scenario = DatasetRequests(dataset)
    first, second = scenario.next(0), scenario.next(1)
    assert first.messages == [{"role": "user", "content": "a"}]
    assert first.params == {"max_tokens": 20, "temperature": 0.7,
                            "tools": [{"type": "function", "function": {"name": "f"}}]}
    assert second.params == {"max_tokens": 5} and len(second.messages) == 2 and second.turn is None


def test_the_scenarios_own_max_tokens_and_thinking_win_over_the_lines(tmp_path):
    path = write(tmp_path, "r.jsonl", jsonl({"messages": [{"role": "user", "content": "a"}], "max_tokens": 20}))
    job = DatasetRequests(load_dataset(path), params={"max_tokens": 64}).next(0)
    assert job.params == {"max_tokens": 64}


def test_sharegpt_plays_each_conversation_from_its_first_human_turn_with_the_history_resent(tmp_path):
    dataset = load_dataset(write(tmp_path, "s.json", orjson.dumps(SHAREGPT).decode()))
    assert dataset.format == "sharegpt" and len(dataset.entries) == 2  # the empty one is skipped
    scenario = dataset_scenario(dataset)
    assert isinstance(scenario, DatasetConversations)
    jobs = [scenario.next(0) for _ in range(3)]
    assert [job.turn for job in jobs] == [0, 1, 0]
    assert jobs[0].messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert jobs[1].messages[1:] == [{"role": "user", "content": "Hi"},
                                    {"role": "assistant", "content": "Hello! How can I help?"},
                                    {"role": "user", "content": "Name a prime."}]
    assert jobs[1].cache == "warm" and jobs[0].cache == "any"
    assert jobs[2].messages == [{"role": "user", "content": "Part one.\n\nPart two."}]  # one speaker's turns joined
    assert all("max_tokens" not in job.params for job in jobs)  # reply lengths only when asked


def test_sharegpt_lines_and_json_arrays_of_requests_are_read_too(tmp_path):
    lines = load_dataset(write(tmp_path, "s.jsonl", jsonl(*SHAREGPT[:2])))
    assert lines.format == "sharegpt" and [c.turns[0][0] for c in lines.entries] == ["Hi", "Part one.\n\nPart two."]
    array = load_dataset(write(tmp_path, "r.json", '[\n  {"messages": [{"role": "user", "content": "x"}]}\n]\n'))
    assert array.format == "openai"


def test_plain_text_is_one_prompt_per_line(tmp_path):
    dataset = load_dataset(write(tmp_path, "p.txt", "\ufeffWhat is a mutex?\n\n  [INST] Explain TCP.  \n{not json\n"))
    scenario = dataset_scenario(dataset)
    assert dataset.format == "text" and not dataset.has_replies
    assert [scenario.next(0).messages for _ in range(3)] == [[{"role": "user", "content": "What is a mutex?"}],
                                                             [{"role": "user", "content": "[INST] Explain TCP."}],
                                                             [{"role": "user", "content": "{not json"}]]


# --- order -------------------------------------------------------------------------------------

def test_file_order_repeats_the_file():
    assert [x for _, x in zip(range(7), ordered("abc", "file", 0))] == list("abcabca")


def test_shuffle_is_a_permutation_fixed_by_the_seed():
    first = [x for _, x in zip(range(20), ordered(range(10), "shuffle", 4))]
    assert sorted(first[:10]) == list(range(10)) and first[10:] == first[:10] and first[:10] != list(range(10))
    assert first == [x for _, x in zip(range(20), ordered(range(10), "shuffle", 4))]
    assert first != [x for _, x in zip(range(20), ordered(range(10), "shuffle", 5))]


def test_sample_draws_with_replacement():
    draws = [x for _, x in zip(range(10), ordered(range(10), "sample", 1))]
    assert len(set(draws)) < 10 and set(draws) <= set(range(10))
    assert draws == [x for _, x in zip(range(10), ordered(range(10), "sample", 1))]


# --- reply lengths -----------------------------------------------------------------------------

def test_reply_lengths_are_estimated_in_server_tokens_from_the_prompts_usage():
    """The simulator's tokenizer plays the server: after the frame probe and the first prompts'
    usage, each recorded reply's estimated length is near its true token count."""
    spec = load_profile(EXAMPLE).scenarios["conversations"]
    scenario = dataset_scenario(spec.dataset, reply_length=True)

    def send(jobs, _purpose):
        return [{"prompt_tokens": len(encode_chat(job.messages, False))} for job in jobs]

    scenario.prepare(send)
    for _ in range(20):
        job = scenario.next(0)
        scenario.observe(job, send([job], "")[0])
    errors = [scenario.turn_params(conversation, turn)["max_tokens"] / len(encode(reply)) - 1
              for conversation in spec.dataset.entries for turn, (_user, reply) in enumerate(conversation.turns)]
    assert sum(abs(e) for e in errors) / len(errors) < 0.25, errors
    assert scenario.next(0).params["ignore_eos"] is True


# --- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, text, message", [
    ("r.jsonl", '{"messages": [{"role": "user", "content": "a"}]}\n\n{"messages": [}\n', "r.jsonl line 3: not JSON"),
    ("r.jsonl", '{"messages": []}\n', "r.jsonl line 1: `messages` must be a non-empty list"),
    ("r.jsonl", '{"messages": [{"role": "user", "content": "a"}], "max_tokens": 0}\n',
     "r.jsonl line 1: max_tokens must be a positive integer, got 0"),
    ("r.jsonl", '{"prompt": "a"}\n', "r.jsonl line 1: expected an object with `messages` (OpenAI) or `conversations`"),
    ("s.json", '[{"conversations": [{"from": "human", "value": "a"}]},\n {"conversations": 3}]',
     "s.json item 2: `conversations` must be a list"),
    ("s.json", '[{"conversations": [{"from": "robot", "value": "a"}]}]',
     "s.json item 1: turn 1: unknown speaker 'robot'"),
    ("s.json", '[{"conversations": [{"from": "human"}]}]',
     "s.json item 1: turn 1 needs `from` and a `value` string"),
    ("s.json", '[{"conversations": [{"from": "human", "value": "a"}]},\n {"conversations": ]',
     "s.json line 2: not JSON"),
    ("m.jsonl",
     '{"messages": [{"role": "user", "content": "a"}]}\n{"conversations": [{"from": "human", "value": "b"}]}\n',
     "m.jsonl line 2: OpenAI requests and ShareGPT conversations mixed"),
    ("e.txt", "\n  \n", "e.txt: no prompts in it"),
])
def test_bad_data_is_one_line_naming_the_file_and_the_line(tmp_path, name, text, message):
    with pytest.raises(DatasetError) as error:
        load_dataset(write(tmp_path, name, text))
    assert str(error.value).startswith(f"{tmp_path / name}{message.removeprefix(name)}")
    assert "\n" not in str(error.value)


def test_the_path_is_relative_to_the_profile_and_reply_length_needs_replies(tmp_path):
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "p.txt", "one prompt\n")
    profile = write(tmp_path, "p.toml", '[scenarios.mine]\nkind = "dataset"\npath = "sub/p.txt"\n')
    assert load_profile(profile).scenarios["mine"].dataset.entries[0].turns == (("one prompt", ""),)
    write(tmp_path, "p.toml", '[scenarios.mine]\nkind = "dataset"\npath = "sub/p.txt"\nreply_length = true\n')
    with pytest.raises(ProfileError, match=r"p\.toml: scenarios\.mine: reply_length: .*p\.txt has no recorded replies"):
        load_profile(profile)


@pytest.mark.processes
@pytest.mark.parametrize("data, needle", [
    (None, "data.jsonl: cannot read: No such file or directory"),
    ('{"messages": [{"role": "user", "content": "a"}]}\n{"messages": [{"role": "user"\n',
     "data.jsonl line 2: not JSON"),
])
def test_a_bad_dataset_stops_the_run_with_one_line_and_exit_code_2(tmp_path, data, needle):
    if data is not None:
        write(tmp_path, "data.jsonl", data)
    profile = write(tmp_path, "p.toml", '[load]\nmode = "closed"\nduration_s = 5\n'
                                        '[scenarios.mine]\nkind = "dataset"\npath = "data.jsonl"\n')
    result = run_locust(["--headless", "-u", "1", "--profile", str(profile)], cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert str(profile) in last and "scenarios.mine" in last and needle in last, last
    assert not (tmp_path / "runs").exists()


# --- through Locust ----------------------------------------------------------------------------

@pytest.mark.processes
def test_the_example_runs_requests_and_conversations_with_their_reply_lengths(tmp_path):
    shutil.copytree(REPO / "profiles" / "data", tmp_path / "data")
    text = re.sub(r"^duration_s = .*$", "duration_s = 2", EXAMPLE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    text = re.sub(r"^warmup_s = .*$", "warmup_s = 0.3", text, flags=re.MULTILINE)
    result, df = run_profile(tmp_path, text, 4)
    assert df["error"].isna().all(), df["error"].dropna().tolist()
    run = df[df["measured"]]
    assert set(run["cell"]) == {"closed"} and set(run["scenario"]) == {"requests", "conversations"}
    requests = run[run["scenario"] == "requests"]
    in_file = {line.get("max_tokens", line.get("max_completion_tokens", 512))
               for line in map(orjson.loads, (tmp_path / "data" / "chat-requests.jsonl").read_text().splitlines())}
    assert set(requests["max_tokens"]) <= in_file and requests["max_tokens"].nunique() > 3
    conversations = run[run["scenario"] == "conversations"]
    assert (conversations["finish_reason"] == "length").all()  # ignore_eos: each reply runs to its length
    assert (conversations["completion_tokens"] == conversations["max_tokens"]).all()
    assert conversations["turn"].max() >= 1
    assert (df.loc[df["cell"] == "calibrate", "scenario"] == "calibrate").sum() == 1  # the frame probe
    assert "Multi-turn: TTFT per turn" in result.stdout and "conversations" in result.stdout
