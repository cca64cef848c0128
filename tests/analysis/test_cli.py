"""`python -m analysis`: the same figures from a run directory, and one-line errors on bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from analysis import render_protocol_summary
from analysis.__main__ import main


def test_report_prints_the_live_summary_of_the_run(write_run, protocol_records, capsys):
    manifest = {"model": "qwen", "target": "http://127.0.0.1:30000"}
    run_dir = write_run(protocol_records, manifest)
    assert main(["report", str(run_dir)]) == 0
    assert capsys.readouterr().out == render_protocol_summary(protocol_records, manifest) + "\n"


def test_report_json_follows_the_issue_8_schema(write_run, protocol_records, capsys):
    assert main(["report", str(write_run(protocol_records)), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["single"]["code"]["n"] == 3
    assert summary["concurrent"][0]["aggregate_tps"] == 300.0


def test_a_torn_last_line_is_skipped_with_a_warning(write_run, protocol_records, capsys):
    run_dir = write_run(protocol_records, tail=b'{"request_id": "cut sh')
    with pytest.warns(UserWarning, match="torn last line"):
        assert main(["report", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["single"]["code"]["n"] == 3


def test_a_missing_run_directory_is_one_line_naming_it_with_exit_code_2(tmp_path):
    missing = tmp_path / "no-such-run"
    done = subprocess.run([sys.executable, "-m", "analysis", "report", str(missing)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"python -m analysis report: no such run directory: {missing}"]


def test_an_unreadable_manifest_is_named(write_run, protocol_records, capsys):
    run_dir = write_run(protocol_records)
    (run_dir / "manifest.json").write_text("{not json")
    assert main(["report", str(run_dir)]) == 2
    assert str(run_dir / "manifest.json") in capsys.readouterr().err
