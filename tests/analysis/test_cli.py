"""`python -m analysis`: every command from run directories, and one-line errors on bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import orjson
import pytest

from analysis.__main__ import main
from loadlib.report.summary import render_summary
from tests.analysis.builders import extended_run, sglang_scrapes


def test_report_prints_the_manifest_then_the_live_summary_to_the_character(write_run, protocol_records, capsys):
    """The live summary of a run with the server's scrapes and a busy client, as the session
    renders it from its records and final manifest, is the report's text after the manifest."""
    manifest = {"model": "qwen", "client_watch": [{"cpu_share_max": 0.97, "loop_lag_p99_s": 0.001}]}
    run_dir = write_run(protocol_records, manifest)
    (run_dir / "metrics.jsonl").write_bytes(b"".join(orjson.dumps(entry) + b"\n" for entry in sglang_scrapes(
        "single", "single", 1_699_999_999.0, 1_700_000_010.0, accept_length=3.5)))
    live = render_summary(protocol_records, manifest, run_dir)
    assert "CLIENT MAY HAVE LIMITED THESE FIGURES: client short of CPU: a client process used 97% of a core" in live
    server_view = live.split("Server view per cell")[1]  # Σcomp/Σchunks = 1405/400 = 3.51 against 3.50
    assert "  target   single         3.50        gauge               3.51   +0.4%" in server_view
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Manifest\n  model: qwen\n  client_watch: [{\"cpu_share_max\": 0.97, "
                          "\"loop_lag_p99_s\": 0.001}]\n\n" + live + "\n\nSingle stream, more figures")


def test_report_json_follows_the_issue_8_schema(write_run, protocol_records, capsys):
    assert main(["report", str(write_run(protocol_records)), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["single"]["code"]["n"] == 3
    assert summary["concurrent"][0]["aggregate_tps"] == 300.0


@pytest.mark.parametrize("flag, start", [("--csv", "section,row,column,value\n"), ("--md", "## uni-bench summary")])
def test_report_writes_csv_and_markdown(write_run, protocol_records, capsys, flag, start):
    assert main(["report", str(write_run(protocol_records)), flag]) == 0
    assert capsys.readouterr().out.startswith(start)


def test_a_torn_last_line_is_skipped_with_a_warning(write_run, protocol_records, capsys):
    run_dir = write_run(protocol_records, tail=b'{"request_id": "cut sh')
    with pytest.warns(UserWarning, match="torn last line"):
        assert main(["report", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["single"]["code"]["n"] == 3


def test_compare_labels_one_column_per_run(write_run, protocol_records, capsys):
    first, second = write_run(protocol_records, name="a"), write_run(extended_run(), name="b")
    assert main(["compare", str(first), str(second), "--labels", "box1,box2"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("figure"))
    assert header.split() == ["figure", "box1", "box2"]


def test_panorama_and_plot_take_several_runs(write_run, protocol_records, tmp_path, capsys):
    first, second = write_run(protocol_records, name="a"), write_run(extended_run(), name="b")
    assert main(["panorama", str(first), str(second)]) == 0
    assert "2 × same prompt (radix hit)" in capsys.readouterr().out
    assert main(["plot", str(first), str(second), "--out", str(tmp_path / "png")]) == 0
    assert (tmp_path / "png" / "decode_per_scenario.png").exists()


def test_two_runs_with_the_same_directory_name_get_distinct_columns(tmp_path, protocol_records, capsys):
    dirs = [tmp_path / box / "run" for box in ("box1", "box2")]
    for run_dir in dirs:
        run_dir.mkdir(parents=True)
        (run_dir / "records.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in protocol_records))
    assert main(["compare", *map(str, dirs), "--json"]) == 0
    runs = {row["run"] for row in json.loads(capsys.readouterr().out)["tables"]["comparison"]}
    assert runs == {"run#1", "run#2"}


def test_labels_must_match_the_runs(write_run, protocol_records, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(write_run(protocol_records)), "--labels", "a,b"])
    assert exit_info.value.code == 2
    assert "--labels names 2 runs but 1 were given" in capsys.readouterr().err


@pytest.mark.processes
def test_a_missing_run_directory_is_one_line_naming_it_with_exit_code_2(tmp_path):
    missing = tmp_path / "no-such-run"
    done = subprocess.run([sys.executable, "-m", "analysis", "report", str(missing)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"python -m analysis report: no such run directory: {missing}"]


def test_a_directory_without_records_is_named(tmp_path, capsys):
    assert main(["compare", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"python -m analysis compare: cannot read records {tmp_path / 'records.jsonl'}: No such file or directory"


def test_an_unreadable_manifest_is_named(write_run, protocol_records, capsys):
    run_dir = write_run(protocol_records)
    (run_dir / "manifest.json").write_text("{not json")
    assert main(["report", str(run_dir)]) == 2
    assert str(run_dir / "manifest.json") in capsys.readouterr().err


@pytest.mark.processes
@pytest.mark.parametrize("bad_line, problem", [
    (b'{"request_id": 5, "ttft_s": "x"}', "request_id: expected text, got 5"),
    (b'{"request_id": "r", "ttft_s": "x"}', "ttft_s: expected a number, got 'x'"),
    (b"5", "not a JSON object: 5"),
    (b"[1, 2]", "not a JSON object: [1, 2]"),
    (b'{"request_id": "r", "cell": ["c2-same"]}', "cell: expected text, got ['c2-same']"),
    (b'{"request_id": "r", "round": [0]}', "round: expected a number, got [0]"),
    (b'{"request_id": "r1", "scenario": "co', "not valid JSON (a torn or garbled line): '{\"request_id\": \"r1\", "
                                              "\"scenario\": \"co'"),
    (b'{"hello": 1}', "not a request record: no request_id"),
    (b'{"request_id": "r", "scenario": "code", "cell": "single", "concurrency": 1, "round": 0, "slot": 0, '
     b'"worker": 0, "user": 0, "sent_at": 1.0}', "not a request record: no case"),
])
def test_a_record_of_the_wrong_shape_or_types_is_one_line_naming_file_and_line_with_exit_code_2(
        write_run, protocol_records, bad_line, problem):
    run_dir = write_run(protocol_records)
    journal = run_dir / "records.jsonl"
    lines = journal.read_bytes().splitlines()
    journal.write_bytes(b"\n".join([*lines[:5], bad_line, *lines[5:]]) + b"\n")
    done = subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"python -m analysis report: {journal}: line 6: {problem}\n"


@pytest.mark.parametrize("first_two, problem", [
    ((b'{"ttft_s": {}}', b"not json"), r"ttft_s: expected a number, got \{\}"),
    ((b"not json", b'{"ttft_s": {}}'), r"not valid JSON \(a torn or garbled line\): 'not json'"),
])
def test_the_first_bad_line_in_the_second_half_of_a_large_journal_is_named(write_run, protocol_records,
                                                                           monkeypatch, first_two, problem):
    """Large journals are read in two halves at once (a forked process reads the second)."""
    from loadlib import record_table

    run_dir = write_run(protocol_records * 20)
    journal = run_dir / "records.jsonl"
    lines = journal.read_bytes().splitlines()
    journal.write_bytes(b"\n".join([*lines[:250], b"", *first_two, *lines[250:]]) + b"\n")
    monkeypatch.setattr(record_table, "PARALLEL_BYTES", 1000)
    with pytest.raises(record_table.JournalError, match=rf"records.jsonl: line 252: {problem}$"):
        record_table.read_records_frame(run_dir)


def test_a_torn_last_line_of_a_large_journal_is_named_by_its_line(write_run, protocol_records, monkeypatch):
    from loadlib import record_table

    run_dir = write_run(protocol_records * 20, tail=b'{"request_id": "x", "scen')
    monkeypatch.setattr(record_table, "PARALLEL_BYTES", 1000)
    with pytest.warns(record_table.SkippedLinesWarning, match=r"skipped a torn last line \(line 281\)"):
        assert len(record_table.exact_frame(run_dir / "records.jsonl")) == 280


def test_runs_killed_before_their_first_record_compare_without_a_traceback(write_run, capsys):
    empty, torn = write_run([], name="empty"), write_run([], name="torn", tail=b'{"request_id": "x", "sc')
    with pytest.warns(UserWarning, match=r"torn last line \(line 1\)"):
        assert main(["compare", str(empty), str(torn)]) == 0
    assert "  requests     0       0\n" in capsys.readouterr().out


@pytest.mark.processes
@pytest.mark.parametrize("command", ["report", "compare"])
def test_text_output_loads_no_plotting_library(write_run, protocol_records, command):
    """matplotlib alone took half a second to import: only the plot command may load it."""
    run_dir = write_run(protocol_records)
    code = (f"import sys; from analysis.__main__ import main; main([{command!r}, {str(run_dir)!r}]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'PIL')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
