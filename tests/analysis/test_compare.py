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
