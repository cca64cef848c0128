"""Each scenario through real headless Locust against the time-scaled simulator, checked by the
figures and cache states its records must show."""

from __future__ import annotations

import base64
import http.server
import struct
import zlib

import orjson
import pytest

from loadlib.scenarios import ProtocolScenario
from loadlib.scenarios.corpus import conversations, work_items
from loadlib.scenarios.issues import ItemCycle, item_prompt
from loadlib.scenarios.png import bar_chart_png
from loadlib.scenarios.vision import Vision
from loadlib.sim.tokenizer import encode
from loadlib.records import FRAMING_TOKENS
from tests.conftest import served
from tests.profile_runs import run_profile

ROUNDS_PROFILE = """
[request]
max_tokens = 32

[load]
mode = "rounds"
rounds = 3
concurrency = [1, 4]

[scenarios.radix-hit]
[scenarios.distinct-issues]
[scenarios.multi-turn]
[scenarios.tool-call]
[scenarios.vision]
thinking = true
"""


@pytest.fixture(scope="module")
def rounds_run(tmp_path_factory):
    """Five scenarios, each single-stream and at 4 streams, 3 rounds, one Locust run."""
    result, df = run_profile(tmp_path_factory.mktemp("scenarios"), ROUNDS_PROFILE, 4)
    assert df["error"].isna().all(), df["error"].dropna().tolist()
    return result, df


def measured(df, scenario):
    return df[df["measured"] & (df["scenario"] == scenario)]


@pytest.mark.processes
def test_radix_hit_primes_once_then_every_stream_hits_the_whole_prompt(rounds_run):
    _result, df = rounds_run
    prime = df[df["cell"] == "prime"]
    assert len(prime) == 2 and not prime["measured"].any()  # before each of its two cells
    hits = measured(df, "radix-hit")
    assert set(hits["cell"]) == {"single", "c4-radix-hit"}
    assert set(hits.loc[hits["cell"] == "c4-radix-hit", "case"]) == {"same"}
    assert (hits["cache_intended"] == "warm").all() and (hits["cache_observed"] == "warm").all()
    assert (hits["cached_tokens"] == hits["prompt_tokens"] - 1).all()  # all but the last prompt token
    same_output = hits[hits["cell"] == "c4-radix-hit"].groupby("round")["output_sha"].nunique()
    assert (same_output == 1).all()  # identical prompt at temperature 0


@pytest.mark.processes
def test_distinct_issues_never_share_a_prefix_within_a_round(rounds_run):
    _result, df = rounds_run
    issues = measured(df, "distinct-issues")
    assert set(issues.loc[issues["cell"] == "c4-distinct-issues", "case"]) == {"different"}
    assert len(issues) == 3 + 12
    assert (issues["cached_tokens"] <= FRAMING_TOKENS).all()  # no request met another one's prefix
    assert issues["prompt_tokens"].nunique() > 10


@pytest.mark.processes
def test_multi_turn_resends_a_growing_history_that_later_turns_find_cached(rounds_run):
    _result, df = rounds_run
    chat = measured(df, "multi-turn")
    assert (chat["turn"] == chat["round"]).all()  # one turn per round, on every stream
    for _slot, conversation in chat[chat["cell"] == "c4-multi-turn"].groupby("slot"):
        assert conversation.sort_values("turn")["prompt_tokens"].is_monotonic_increasing
    later = chat[chat["turn"] > 0]
    assert (later["cache_intended"] == "warm").all() and (later["cache_observed"] == "warm").all()


@pytest.mark.processes
def test_tool_call_and_vision_requests_are_served(rounds_run):
    result, df = rounds_run
    assert len(measured(df, "tool-call")) == 15
    vision = measured(df, "vision")
    assert len(vision) == 15 and (vision["prompt_tokens"] > 256).all()  # the image counts as prompt


@pytest.mark.processes
def test_thinking_is_switched_per_scenario(rounds_run):
    _result, df = rounds_run
    thinking = df[df["measured"]].groupby("scenario")["thinking"].agg(set).to_dict()
    assert thinking.pop("vision") == {True}
    assert all(value == {False} for value in thinking.values())


@pytest.mark.processes
def test_the_summary_shows_each_scenario_and_the_turns(rounds_run):
    result, _df = rounds_run
    summary = result.stdout
    for name in ("radix-hit", "distinct-issues", "multi-turn", "tool-call", "vision"):
        assert name in summary
    assert "Multi-turn: TTFT per turn" in summary and "Cache state" in summary


@pytest.mark.processes
def test_long_context_requests_are_cold_and_sized_in_server_tokens(tmp_path):
    """Named `prefill` (not after its kind), the table's requests still carry their kind, and the
    summary still shows their prefill per size."""
    profile = """
[request]
max_tokens = 16
[load]
mode = "rounds"
rounds = 2
[scenarios.prefill]
kind = "long-context"
sizes = [2000, 8000, 30000]
"""
    result, df = run_profile(tmp_path, profile, 1, sim="--time-scale 0.01")
    calibration = df[df["cell"] == "calibrate"]
    assert len(calibration) == 2 and not calibration["measured"].any()
    sized = df[df["measured"]]
    assert df["error"].isna().all() and len(sized) == 6 and (df["kind"] == "long-context").all()
    assert (sized["cache_intended"] == "cold").all() and (sized["cache_observed"] == "cold").all()
    assert (sized["cached_tokens"] == 0).all()  # flushed before each request, and a fresh nonce first
    target = sized["scenario"].map({"prefill-2k": 2000, "prefill-8k": 8000, "prefill-30k": 30000})
    error = (sized["prompt_tokens"] / target - 1).abs()  # the first request at a size teaches the next
    assert (error[sized["round"] == 0] < 0.05).all() and (error[sized["round"] == 1] < 0.01).all(), error
    manifest = orjson.loads((tmp_path / "run" / "manifest.json").read_bytes())
    assert manifest["cache_flushes"] == {"flushed": 6}
    summary = result.stdout.split("uni-bench summary")[1]
    assert "Prefill (prefill = prompt/TTFT" in summary and "prefill-30k" in summary


@pytest.mark.processes
def test_a_cold_request_served_from_cache_is_flagged(tmp_path):
    """Protocol prompts meant cold in a closed loop: the cache is flushed once, at the start, so
    the fixed prompts soon meet their own earlier copies; distinct issues never do."""
    profile = """
[request]
max_tokens = 8
[load]
mode = "closed"
duration_s = 1.5
jitter_s = 0.1
[scenarios.protocol]
cache = "cold"
[scenarios.distinct-issues]
cache = "cold"
"""
    result, df = run_profile(tmp_path, profile, 2)
    runs = df[df["measured"]].sort_values("sent_at")
    prompts, issues = runs[runs["scenario"] != "distinct-issues"], runs[runs["scenario"] == "distinct-issues"]
    assert len(issues) > len(work_items())  # more than one cycle through the corpus
    assert (issues["cache_observed"] == "cold").all()
    assert (prompts["cache_observed"].iloc[8:] == "warm").all()
    assert (runs["cache_intended"] == "cold").all()
    closed = [line for line in result.stdout.splitlines() if line.strip().startswith("closed")]
    assert any("MISSED" in line for line in closed), result.stdout


# --- tool calls streamed as tool_calls deltas -------------------------------------------------

TOOL_CALL_PIECES = ['{"path_glob": "src/**/*.py", ', '"pattern": "def evict"}', '{"issue": "01", ',
                    '"labels": ["bug", "area:cache"]}']


class ToolCallingServer(http.server.ThreadingHTTPServer):
    """Answers every chat request with two streamed tool calls, as SGLang and vLLM send them."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ToolCallHandler)
        self.bodies: list[dict] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ToolCallHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        self.server.bodies.append(orjson.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        calls = [("call_1", "search_code", TOOL_CALL_PIECES[:2]), ("call_2", "add_labels", TOOL_CALL_PIECES[2:])]
        deltas = [{"role": "assistant", "content": None}]
        for index, (call_id, name, pieces) in enumerate(calls):
            deltas.append({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]})
            deltas += [{"tool_calls": [{"index": index, "function": {"arguments": piece}}]} for piece in pieces]
        events = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
        events.append({"choices": [], "usage": {"prompt_tokens": 900, "completion_tokens": 41, "total_tokens": 941}})
        for event in events:
            self.wfile.write(b"data: " + orjson.dumps(event) + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def tool_server():
    with served(ToolCallingServer()) as server:
        yield server


@pytest.mark.processes
def test_streamed_tool_calls_count_as_output(tmp_path, tool_server):
    profile = """
[load]
mode = "rounds"
rounds = 2
concurrency = [1, 2]
[scenarios.tool-call]
tool_choice = "required"
"""
    _result, df = run_profile(tmp_path, profile, 2, "--host", tool_server.url, "--model", "stub")
    assert len(df) == 6 and df["error"].isna().all(), df["error"].tolist()
    assert (df["chunks"] == 6).all()  # two calls: a name delta and two argument deltas each
    assert (df["finish_reason"] == "tool_calls").all() and df["ttft_s"].notna().all()
    body = tool_server.bodies[0]
    assert body["tool_choice"] == "required" and {t["function"]["name"] for t in body["tools"]} >= {
        "search_code", "read_file", "add_labels", "post_comment"}
    assert body["messages"][0]["role"] == "system" and body["messages"][1]["content"].startswith("New report")


# --- the shipped data --------------------------------------------------------------------------

def test_the_corpus_has_at_least_32_distinct_items_from_hundreds_to_thousands_of_tokens():
    items = work_items()
    assert len(items) >= 32 and len({item.text for item in items}) == len(items)
    assert {item.kind for item in items} == {"bug", "feature", "logs", "perf", "question"}
    sizes = sorted(len(encode(item_prompt(item))) for item in items)
    assert sizes[0] < 300 and sizes[len(sizes) // 2] > 300 and sizes[-1] > 3000


def test_each_item_is_used_once_per_cycle_and_every_request_has_its_own_ticket():
    cycle = ItemCycle(seed=3)
    first = [cycle.take() for _ in work_items()]
    assert len({item.id for item, _ticket in first}) == len(first)
    second = [cycle.take() for _ in work_items()]
    assert [item for item, _ in second] == [item for item, _ in first]
    assert len({ticket for _item, ticket in first + second}) == 2 * len(first)


def test_conversations_alternate_users_and_scripted_replies():
    for conversation in conversations():
        assert len(conversation.turns) >= 3
        assert all(user.strip() and reply.strip() for user, reply in conversation.turns)


def test_the_vision_image_is_a_valid_png_data_url():
    url = Vision(image_px=48).next(0).messages[0]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    png = base64.b64decode(url.split(",", 1)[1])
    assert png == bar_chart_png(48) and png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height, depth, colour = struct.unpack(">IIBB", png[16:26])
    assert (width, height, depth, colour) == (48, 48, 8, 2)
    idat = png.index(b"IDAT")
    (length,) = struct.unpack(">I", png[idat - 4:idat])
    assert len(zlib.decompress(png[idat + 4:idat + 4 + length])) == 48 * (1 + 3 * 48)


def test_protocol_cells_keep_the_threads_prompts_and_order():
    cells = ProtocolScenario(["code", "cn_essay"]).round_cells([2, 4], rounds=3)
    assert [cell.name for cell in cells] == ["single", "single", "c2-same", "c2-different", "c4-same",
                                             "c4-different"]
    assert [cell.prompts for cell in cells[:3]] == [("code",), ("cn_essay",), ("code", "code")]
    assert cells[5].prompts == ("code", "code_b", "code_c", "code_d")


def test_the_long_context_kind_is_named_as_the_report_looks_for_it():
    from loadlib.scenarios.base import LONG_CONTEXT_KIND
    from loadlib.scenarios.longcontext import LONG_CONTEXT, LongContext

    assert LONG_CONTEXT.name == LongContext.kind == LONG_CONTEXT_KIND
