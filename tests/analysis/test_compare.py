"""`compare`: runs side by side, % against the first, noise markers, and the determinism check."""

from __future__ import annotations

import json

import pytest

from analysis.compare import compare
from loadlib.run_view import read_run
from tests.analysis.builders import build_record, build_run
from tests.conftest import RUN_TO_RUN_PCT, SLOWER_BY_1_08_PCT


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


def test_a_scenario_of_many_prompts_is_not_judged_by_its_outputs():
    """A pool of issues sends a different prompt a request: its outputs differ by design."""
    issues = [build_record(scenario="distinct-issues", kind="distinct-issues", round=r, output_sha=f"o{r}") for r in range(3)]
    document = compare([build_run(issues, "a"), build_run(issues, "b")])
    row = section(document, "determinism").view.set_index("scenario").loc["distinct-issues"]
    assert row.tolist() == ["3 outputs, many prompts", "3 outputs, many prompts", "not judged: many prompts"]


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
    from loadlib.outputs.text import render_document

    runs = [trace_run("trace-box-a-2024-05-01", False), trace_run("trace-box-b-2024-05-01", None),
            trace_run("trace-box-c-2024-05-01", True)]
    document = compare(runs)
    widths = sorted((len(line), line) for line in render_document(document).splitlines())
    assert widths[-1][0] <= 160, widths[-1][1]
    values = section(document, "settings").data.set_index("setting")  # JSON and CSV keep the whole values
    assert values.loc["server.server_args.cuda_graph_bs", "trace-box-a-2024-05-01"].endswith(", 253]")


# --- verdicts: each run against the first, in words, with an interval from the runs' own samples --------

def test_verdicts_say_in_words_whether_a_run_is_higher_lower_or_not_distinguishable():
    slower = compare([single_run("a", [2.0, 2.02, 1.98]), single_run("b", [2.16, 2.18, 2.14])])  # 1/1.08
    same = compare([single_run("a", [2.0, 2.02, 1.98]), single_run("b", [2.01, 1.99, 2.0])])
    lower = section(slower, "verdicts").data.set_index("figure").loc["code decode t/s"]
    assert (lower["verdict"], lower["n_a"], lower["n_b"]) == ("lower", 3, 3)
    assert lower["diff_pct"] == pytest.approx(-7.4, abs=0.05)
    assert lower["ci_low_pct"] <= lower["diff_pct"] <= lower["ci_high_pct"] < 0
    assert _verdict_line(slower, "code decode t/s").startswith("code decode t/s: b is 7.4 % lower than a (95 % CI -")
    assert _verdict_line(slower, "code decode t/s").endswith(" %, n 3/3, few samples)")
    assert _verdict_line(same, "code decode t/s").startswith("code decode t/s: b is not distinguishable from a (+0.0 %")
    assert "few samples: fewer than 5 independent samples" in section(same, "verdicts").view["verdicts"].iat[-1]


def _verdict_line(document, figure):
    return next(line for line in section(document, "verdicts").view["verdicts"] if line.startswith(figure + ":"))


def test_one_round_is_too_few_samples_for_a_verdict():
    document = compare([single_run("a", [2.0]), single_run("b", [1.0])])
    assert _verdict_line(document, "code decode t/s") == \
        "code decode t/s: too few samples to tell b from a (+100.0 %, n 1/1: fewer than 2 samples)"


def test_the_json_verdicts_carry_both_figures_the_difference_its_interval_and_the_counts(write_run, capsys):
    from analysis.__main__ import main

    dirs = [write_run([build_record(round=i, ttft_s=0.1, total_s=0.1 + t, comp=201) for i, t in enumerate(times)],
                      name=name) for name, times in (("a", [2.0, 2.02, 1.98]), ("b", [2.16, 2.18, 2.14]))]
    assert main(["compare", *map(str, dirs), "--json"]) == 0
    output = json.loads(capsys.readouterr().out)
    decode = next(row for row in output["verdicts"] if row["figure"] == "code decode t/s")
    assert set(decode) == {"figure", "cell", "run_a", "run_b", "a", "b", "diff_pct", "ci_low_pct", "ci_high_pct",
                           "verdict", "n_a", "n_b", "few_samples", "reason"}
    assert (decode["cell"], decode["run_a"], decode["run_b"], decode["verdict"]) == ("single", "a", "b", "lower")
    assert decode["a"] == pytest.approx(100.0, rel=1e-3) and decode["b"] == pytest.approx(92.6, rel=1e-3)
    figures = {(row["figure"], row["run"]): row["value"] for row in output["tables"]["comparison"]}
    assert (decode["a"], decode["b"]) == (figures[("code decode t/s", "a")], figures[("code decode t/s", "b")])
    assert output["conditions"] == [] and output["tables"]["verdicts"] == output["verdicts"]


def test_an_ab_run_is_compared_as_its_targets(write_run, capsys):
    from analysis.__main__ import main

    records = [build_record(round=i, ttft_s=0.1, total_s=0.1 + t, comp=201, target=label)
               for label, times in (("A", [2.0, 2.02, 1.98]), ("B", [2.16, 2.18, 2.14])) for i, t in enumerate(times)]
    manifest = {"model": "m", "targets": [{"label": label, "url": f"http://127.0.0.1:{port}"}
                                          for label, port in (("A", 1), ("B", 2))]}
    run_dir = write_run(records, manifest, name="ab")
    assert main(["compare", str(run_dir), "--json"]) == 0
    decode = next(row for row in json.loads(capsys.readouterr().out)["verdicts"] if row["figure"] == "code decode t/s")
    assert (decode["run_a"], decode["run_b"], decode["verdict"]) == ("ab/A", "ab/B", "lower")
    assert decode["diff_pct"] == pytest.approx(-7.4, abs=0.05)


def test_the_conditions_line_names_each_way_the_runs_were_taken_differently():
    a, b, c = single_run("a", [2.0, 2.0]), single_run("b", [2.0, 2.0], max_tokens=1024), single_run("c", [2.0, 2.0])
    a.manifest.update(started_at="2026-12-04T09:00:00+0000", tool={"version": "0.1.0"}, client={"host": "box1"},
                      server={"version": "0.5.9", "launch": {"tp_size": 2, "max_running_requests": 2}})
    b.manifest.update(started_at="2026-12-04T18:30:00+0000", tool={"version": "0.1.0"}, client={"host": "box2"},
                      server={"version": "0.5.10", "launch": {"tp_size": 2, "max_running_requests": 4}})
    c.manifest.update(started_at="2026-12-04T11:00:00+0000", **{k: a.manifest[k] for k in ("tool", "client", "server")})
    document = compare([a, b, c])
    assert section(document, "conditions").view["conditions"].tolist() == [
        "b against a: client host: client.host box1 → box2",
        "b against a: server version: server.version 0.5.9 → 0.5.10",
        "b against a: launch flags: server.launch.max_running_requests 2 → 4",
        "b against a: max_tokens: 512 → 1024",
        "b against a: time of day: started 9.5 h apart: 2026-12-04T09:00:00+0000 → 2026-12-04T18:30:00+0000",
        ("c against a: same client host, tool and server versions, launch flags, model, workload, max_tokens and "
         "thinking; started within 6 h"),
    ]
    assert section(document, "conditions").data[["run_b", "key", "a", "b"]].values.tolist()[2] == \
        ["b", "server.launch.max_running_requests", "2", "4"]


def test_the_verdicts_follow_the_figures_and_come_before_the_determinism_check():
    keys = [s.key for s in compare([single_run("a", [2.0, 2.0]), single_run("b", [2.0, 2.0])]).sections]
    assert keys == ["settings", "comparison", "conditions", "verdicts", "determinism", "locust_totals"]


# --- known answers from the simulator: decode 1.08 times slower, and one configuration against itself ------

SIM_RUN = ["--headless", "-u", "2", "--rounds", "3", "--scenarios", "code", "--concurrency", "2",
           "--loglevel", "WARNING"]
DECODE_FIGURES = ("code decode t/s", "c2-same per-stream decode t/s", "c2-different per-stream decode t/s")
THROUGHPUT_FIGURES = ("c2-same aggregate t/s (protocol)", "c2-different aggregate t/s (protocol)")


@pytest.fixture(scope="module")
def simulator_runs(tmp_path_factory):
    """Three small protocol runs on the built-in simulator (about 6 s each): at --time-scale 0.1, at
    0.108, and at 0.1 again; each simulator writes its own trace of what it sent."""
    from tests.conftest import run_locust

    work = tmp_path_factory.mktemp("verdicts")
    runs = {}
    for name, scale in (("fast", 0.1), ("slow", 0.108), ("again", 0.1)):
        (work / name).mkdir()  # each run in its own directory, so that the trace's path reads alike in all
        result = run_locust([*SIM_RUN, "--run-dir", "run", "--sim-args", f"--time-scale {scale} --trace trace.jsonl"],
                            cwd=work / name)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[name] = read_run(work / name / "run", name)
    return work, runs


def _server_decode(work, run):
    """The single-stream code decode the simulator itself sent: (comp - 1) / (last - first token
    written), from its trace, mean over the run's rounds."""
    trace = {row["request_id"]: row for row in map(json.loads, (work / run.label / "trace.jsonl").open())}
    single = run.records[(run.records["cell"] == "single") & run.records["ok"]]
    sent = [trace[request_id] for request_id in single["request_id"]]
    decode = [(row["completion_tokens"] - 1) / (row["last_token_at"] - row["first_token_at"]) for row in sent]
    return sum(decode) / len(decode)


CLIENT_TOLERANCE_PCT = 0.3


@pytest.mark.processes
def test_a_simulator_1_08_times_slower_reads_lower_by_7_4_percent(simulator_runs):
    """The interval holds what the simulator itself did (its trace), and -7.4 % within the ±1 %
    by which two runs of one configuration differ (the simulator's own timing varies a few tenths
    of a percent from run to run: -7.7 % and -7.8 % were seen for single-stream decode)."""
    work, runs = simulator_runs
    verdicts = section(compare([runs["fast"], runs["slow"]]), "verdicts").data.set_index("figure")
    truth = (_server_decode(work, runs["slow"]) / _server_decode(work, runs["fast"]) - 1) * 100
    assert abs(truth - SLOWER_BY_1_08_PCT) < RUN_TO_RUN_PCT
    decode = verdicts.loc["code decode t/s"]
    # the interval is of the client's figures; the truth is the server's own timing, which the client's decode
    # matches within 0.3 % (benchmarks/client_capacity.py), and 3 rounds make a tight interval: once it missed by 0.02
    assert decode["ci_low_pct"] - CLIENT_TOLERANCE_PCT <= truth <= decode["ci_high_pct"] + CLIENT_TOLERANCE_PCT
    for figure in (*DECODE_FIGURES, *THROUGHPUT_FIGURES):
        row = verdicts.loc[figure]
        assert row["verdict"] == "lower" and row["n_a"] == row["n_b"] == 3, (figure, row.to_dict())
        assert row["ci_low_pct"] - RUN_TO_RUN_PCT <= SLOWER_BY_1_08_PCT <= row["ci_high_pct"] + RUN_TO_RUN_PCT, (figure, row.to_dict())


@pytest.mark.processes
def test_one_configuration_against_itself_reads_not_distinguishable(simulator_runs):
    _, runs = simulator_runs
    document = compare([runs["fast"], runs["again"]])
    verdicts = section(document, "verdicts").data.set_index("figure")
    for figure in (*DECODE_FIGURES, *THROUGHPUT_FIGURES):
        assert verdicts.loc[figure, "verdict"] == "not distinguishable", (figure, verdicts.loc[figure].to_dict())
    assert section(document, "conditions").view["conditions"].iat[0].startswith("again against fast: same client host")


# --- a protocol aggregate that misleads: the figure that did not lead -------------------------------------

def four_streams(label, together):
    """Three rounds of four streams of 512 tokens: all at once (2.8 s of decode each), or two at a
    time (the other two wait 3 s): the protocol's aggregate is 730 t/s either way, the wall-clock
    one 730 or 352 t/s."""
    return build_run([build_record("c4-same", round=r, slot=s, sent_at=1_700_000_000.0 + 10 * r,
                                   ttft_s=0.2 + (0 if together else 3 * (s // 2)),
                                   total_s=3.0 + (0 if together else 3 * (s // 2)) + 0.01 * r, comp=512, chunks=100)
                      for r in range(3) for s in range(4)], label)


def test_compare_leads_with_the_aggregate_that_did_not_mislead_and_says_so():
    document = compare([four_streams("queued", together=False), four_streams("together", together=True)])
    figures = list(dict.fromkeys(section(document, "comparison").data["figure"]))
    assert figures.index("c4-same aggregate t/s (window)") < figures.index("c4-same aggregate t/s (protocol)")
    lines = section(document, "verdicts").view["verdicts"].tolist()
    window = next(line for line in lines if line.startswith("c4-same aggregate t/s (window)"))
    protocol = next(line for line in lines if line.startswith("c4-same aggregate t/s (protocol)"))
    assert lines.index(window) < lines.index(protocol)
    assert window.startswith("c4-same aggregate t/s (window): together is 106.8 % higher")
    assert window.endswith("; read this one: the protocol's misleads on queued")
    assert protocol.endswith("; MISLEADS on queued: streams not run together")
    cell = section(document, "comparison").view.set_index("figure").loc["c4-same aggregate t/s (protocol)", "queued"]
    assert cell.endswith(" !")
