"""`compare`: runs side by side, % against the first, noise markers, and the determinism check."""

from __future__ import annotations

import pytest

from analysis.compare import compare
from tests.analysis.builders import build_record, build_run


def single_run(label, decode_times, sha="abc", comp=201, max_tokens=512):
    """Single-stream code rounds: 200 decode tokens in each of `decode_times` seconds."""
    return build_run([build_record(round=i, ttft_s=0.1, total_s=0.1 + t, comp=comp, output_sha=sha,
                                   max_tokens=max_tokens) for i, t in enumerate(decode_times)], label)


def section(document, key):
    return next(s for s in document.sections if s.key == key)


def test_differences_are_percent_of_the_first_run():
    document = compare([single_run("a", [2.0, 2.0]), single_run("b", [1.6, 1.6])])
    rows = section(document, "comparison").data.set_index(["figure", "run"])
    assert rows.loc[("code decode t/s", "b"), "value"] == pytest.approx(125.0)
    assert rows.loc[("code decode t/s", "b"), "diff_pct"] == pytest.approx(25.0)


def test_a_star_marks_ranges_that_do_not_overlap():
    apart = compare([single_run("a", [2.0, 1.9]), single_run("b", [1.6, 1.5])])  # 100-105 vs 125-133
    overlapping = compare([single_run("a", [2.0, 1.6]), single_run("b", [1.8, 1.5])])  # 100-125 vs 111-133
    assert _decode_cell(apart, "b") == "129.2 (125.0–133.3) +25.9%*"
    assert _decode_cell(overlapping, "b") == "122.2 (111.1–133.3) +8.6%"


def test_one_round_is_no_evidence_of_noise():
    document = compare([single_run("a", [2.0]), single_run("b", [1.0])])
    assert _decode_cell(document, "b") == "200.0 +100.0%"


def _decode_cell(document, label):
    view = section(document, "comparison").view.set_index("figure")
    return view.loc["code decode t/s", label]


def test_same_outputs_are_identical_and_other_outputs_are_flagged():
    document = compare([single_run("a", [2.0]), single_run("b", [2.0]), single_run("c", [2.0], sha="xyz", comp=180)])
    view = section(document, "determinism").view.set_index("scenario")
    assert view.loc["code"].tolist() == ["abc 201 tok", "same", "xyz 180 tok", "DIFFERS"]


def test_outputs_that_vary_inside_one_run_are_flagged():
    varying = build_run([build_record(round=0, output_sha="abc"), build_record(round=1, output_sha="abd")], "v")
    document = compare([single_run("a", [2.0]), varying])
    assert section(document, "determinism").view.set_index("scenario").loc["code", "verdict"] == "VARIES within a run"


def test_settings_show_what_each_run_measured():
    a = single_run("a", [2.0])
    b = single_run("b", [2.0], max_tokens=1024)
    a.manifest.update(model="qwen", target={"url": "http://x:1"}, client={"host": "vm"})
    settings = section(compare([a, b]), "settings").view.set_index("setting")
    assert settings.loc["max_tokens"].tolist() == ["512", "1024"]
    assert settings.loc["target.url"].tolist() == ["http://x:1", "-"]
    assert "client.host" not in settings.index


def trace_run(label, thinking):
    """A trace replay: one free-running cell, a max_tokens drawn per request (71 distinct values)."""
    lengths = [16 + 29 * i for i in range(70)] + [2048]
    records = [build_record("trace", sent_at=1_700_000_000.0 + i, ttft_s=0.1, total_s=0.1 + n / 100, comp=n,
                            max_tokens=n, thinking=thinking, concurrency=8, case="trace",
                            output_sha=f"sha-{i}") for i, n in enumerate(lengths * 2)]
    manifest = {"model": "/models/huggingface/hub/models--Qwen--Qwen3-32B-FP8/snapshots/" + "0123456789abcdef" * 3,
                "target": {"url": f"http://{label}.inference.internal.example.com:30000/v1"},
                "server": {"server_args": {"cuda_graph_bs": list(range(1, 257, 4)),
                                           "speculative_algorithm": "EAGLE3"}},
                "protocol": {"rounds": None, "concurrency": list(range(2, 130, 2)), "temperature": 0.0}}
    return build_run(records, label, manifest)


def test_settings_show_each_runs_own_thinking_and_many_max_tokens_as_a_range():
    runs = [trace_run("trace-box-a-2024-05-01", False), trace_run("trace-box-b-2024-05-01", None),
            trace_run("trace-box-c-2024-05-01", True)]
    settings = section(compare(runs), "settings").view.set_index("setting")
    assert settings.loc["thinking"].tolist() == ["off", "server default (not sent)", "ON"]
    assert settings.loc["max_tokens"].tolist() == ["16–2048 (71 values)"] * 3


def test_a_run_that_mixed_thinking_says_so():
    mixed = build_run([build_record(round=0, thinking=True), build_record(round=1, thinking=False)], "mixed")
    settings = section(compare([single_run("a", [2.0]), mixed]), "settings").view.set_index("setting")
    assert settings.loc["thinking"].tolist() == ["off", "on and off"]


def test_no_line_of_the_text_comparison_is_wider_than_160_characters():
    from loadlib.report import console

    runs = [trace_run("trace-box-a-2024-05-01", False), trace_run("trace-box-b-2024-05-01", None),
            trace_run("trace-box-c-2024-05-01", True)]
    document = compare(runs)
    widths = sorted((len(line), line) for line in console.render(document).splitlines())
    assert widths[-1][0] <= 160, widths[-1][1]
    values = section(document, "settings").data.set_index("setting")  # JSON and CSV keep the whole values
    assert values.loc["server.server_args.cuda_graph_bs", "trace-box-a-2024-05-01"].endswith(", 253]")
