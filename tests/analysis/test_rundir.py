"""Reading run directories: journals cut short, manifests, Locust's CSV files."""

from __future__ import annotations

import shutil
import tracemalloc
import warnings

import orjson
import pandas as pd
import pytest

import loadlib.record_table
from loadlib.record_table import JournalError, SkippedLinesWarning, read_journal, read_records_frame, split_records
from loadlib.records import RequestRecord
from loadlib.run_view import RunDirError, read_run
from tests.analysis.builders import build_record


def test_a_torn_last_line_is_skipped_with_a_warning_naming_it(write_run, protocol_records):
    run_dir = write_run(protocol_records, tail=b'{"request_id": "x", "scen')
    with pytest.warns(SkippedLinesWarning, match=r"records.jsonl: skipped a torn last line \(line 15\)"):
        assert len(read_records_frame(run_dir)) == 14


def test_a_torn_last_line_followed_by_blank_lines_is_still_the_last_line(write_run, protocol_records):
    run_dir = write_run(protocol_records, tail=b'{"request_id": "x", "scen\n\n')
    with pytest.warns(SkippedLinesWarning, match=r"skipped a torn last line \(line 15\)"):
        assert len(read_records_frame(run_dir)) == 14


def test_a_whole_last_record_without_its_newline_is_kept(write_run, protocol_records):
    run_dir = write_run(protocol_records[:-1], tail=orjson.dumps(protocol_records[-1]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = read_records_frame(run_dir)
    assert len(frame) == 14 and frame["request_id"].iloc[-1] == protocol_records[-1]["request_id"]


@pytest.mark.parametrize("bad_line, problem", [
    (b'{"request_id": "x", "scen', "not valid JSON (a torn or garbled line): '{\"request_id\": \"x\", \"scen'"),
    (b"garbage", "not valid JSON (a torn or garbled line): 'garbage'"),
    (b'{"hello": 1}', "not a request record: no request_id"),
    (b"{}", "not a request record: no request_id"),
])
def test_a_line_in_the_middle_that_is_not_a_record_is_an_error_naming_file_and_line(write_run, protocol_records,
                                                                                  bad_line, problem):
    run_dir = write_run(protocol_records)
    lines = (run_dir / "records.jsonl").read_bytes().splitlines()
    (run_dir / "records.jsonl").write_bytes(b"\n".join(lines[:3] + [bad_line] + lines[3:]) + b"\n")
    with pytest.raises(JournalError) as error:
        read_records_frame(run_dir)
    assert str(error.value) == f"{run_dir / 'records.jsonl'}: line 4: {problem}"


@pytest.mark.parametrize("field", ["request_id", "scenario", "cell", "concurrency", "case", "round", "sent_at"])
@pytest.mark.parametrize("absent", ["left out", "null"])
def test_a_record_without_one_of_its_identity_fields_is_an_error(write_run, protocol_records, field, absent):
    """What a record measured and when; without them a run's header read "nan run". (Which stream
    sent it, `slot`, `worker`, `user`, may be missing in another tool's records.)"""
    bad = dict(protocol_records[5])
    if absent == "null":
        bad[field] = None
    else:
        del bad[field]
    run_dir = write_run([*protocol_records[:5], bad, *protocol_records[6:]])
    with pytest.raises(JournalError, match=rf"records.jsonl: line 6: not a request record: no {field}$"):
        read_records_frame(run_dir)


def test_a_journal_of_one_torn_line_has_no_records(write_run):
    run_dir = write_run([], tail=b'{"request_id": "x", "scen')
    with pytest.warns(SkippedLinesWarning, match=r"skipped a torn last line \(line 1\)"):
        assert len(read_records_frame(run_dir)) == 0


@pytest.mark.parametrize("reader", ["read_records_frame", "exact_frame"])  # pyarrow's, record by record
def test_both_readers_keep_a_torn_last_line_apart_from_an_error(write_run, protocol_records, reader):
    run_dir = write_run(protocol_records, tail=b'{"request_id": "x", "scen')
    with pytest.warns(SkippedLinesWarning, match=r"torn last line \(line 15\)"):
        assert len(getattr(loadlib.record_table, reader)(run_dir / "records.jsonl")) == 14


def test_lines_split_across_read_blocks_are_joined(write_run, protocol_records, monkeypatch):
    run_dir = write_run(protocol_records)
    whole = read_records_frame(run_dir)
    monkeypatch.setattr(loadlib.record_table, "BLOCK_BYTES", 100)  # every record spans several blocks
    assert read_records_frame(run_dir).equals(whole)


def test_blank_lines_are_not_records(write_run, protocol_records):
    run_dir = write_run(protocol_records, tail=b"\n\n")
    assert len(read_records_frame(run_dir)) == 14


def test_a_records_file_can_be_given_directly(write_run, protocol_records):
    assert len(read_records_frame(write_run(protocol_records) / "records.jsonl")) == 14


def test_a_run_without_a_manifest_has_an_empty_one_and_is_labelled_by_its_directory(write_run, protocol_records):
    run = read_run(write_run(protocol_records, name="box-a"))
    assert run.manifest == {} and run.label == "box-a" and len(run.records) == 14


def test_a_manifest_that_is_not_an_object_is_rejected(write_run, protocol_records):
    run_dir = write_run(protocol_records)
    (run_dir / "manifest.json").write_text("[1, 2]")
    with pytest.raises(RunDirError, match="manifest.json: not a JSON object"):
        read_run(run_dir)


LOCUST_STATS = """\
Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,Min Response Time,Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%
CHAT,single,12,1,130,127.1,120.9,132.5,512.0,0.6,0.0,130,130,130,130,130,130,130,130,130,130,130
,Aggregated,12,1,130,127.1,120.9,132.5,512.0,0.6,0.0,130,130,130,130,130,130,130,130,130,130,130
"""
LOCUST_HISTORY = """\
Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%,Total Request Count,Total Failure Count,Total Median Response Time,Total Average Response Time,Total Min Response Time,Total Max Response Time,Total Average Content Size
1700000000,0,,Aggregated,0.000000,0.000000,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,0,0,0,0.0,0,0,0
1700000001,8,,Aggregated,1.0,0.0,110,180,2900,2900,4900,4900,4900,4900,4900,4900,4900,20,0,110,1059.9,3.7,4901.2,128.0
"""


def test_locusts_own_csv_files_are_read_beside_the_records(write_run, protocol_records):
    run_dir = write_run(protocol_records)
    (run_dir / "locust_stats.csv").write_text(LOCUST_STATS)
    (run_dir / "locust_stats_history.csv").write_text(LOCUST_HISTORY)
    run = read_run(run_dir)
    assert run.locust.stats["Request Count"].tolist() == [12, 12]
    assert run.locust.history["User Count"].tolist() == [0, 8]
    assert run.locust.history["50%"].isna().tolist() == [True, False]
    assert run.locust.failures is None


def test_locust_stats_appear_in_the_report(write_run, protocol_records):
    from analysis.report import run_report
    from loadlib.outputs.text import render_document

    run_dir = write_run(protocol_records)
    (run_dir / "locust_stats.csv").write_text(LOCUST_STATS)
    text = render_document(run_report([read_run(run_dir)]))
    assert "Locust's own statistics" in text
    assert ("  type   name         requests   failures   median   average   p99   per s\n"
            "  CHAT   single             12          1      130    127.10   130    0.60\n"
            "         Aggregated         12          1      130    127.10   130    0.60") in text


def test_locust_stats_reach_the_csv_their_aggregated_row_without_a_type(write_run, protocol_records):
    """Locust's Aggregated row has no Type: its CSV row is "/Aggregated" (the report's CSV was a traceback)."""
    import csv
    import io

    from analysis.report import run_report
    from loadlib.outputs import csv as csv_format

    run_dir = write_run(protocol_records)
    (run_dir / "locust_stats.csv").write_text(LOCUST_STATS)
    rows = list(csv.DictReader(io.StringIO(csv_format.render_document(run_report([read_run(run_dir)])))))
    assert {"section": "locust_stats", "row": "/Aggregated", "column": "Request Count", "value": "12"} in rows
    assert {"section": "locust_stats", "row": "CHAT/single", "column": "Request Count", "value": "12"} in rows


def test_compare_puts_locusts_totals_beside_each_run(write_run, protocol_records):
    from analysis.compare import compare

    run_dirs = [write_run(protocol_records, name=name) for name in ("a", "b")]
    (run_dirs[0] / "locust_stats.csv").write_text(LOCUST_STATS)
    totals = next(s for s in compare([read_run(d) for d in run_dirs]).sections if s.key == "locust_totals")
    assert totals.view.values.tolist() == [["events", "12", "-"], ["failures", "1", "-"], ["events/s", "0.60", "-"],
                                           ["median", "130", "-"], ["p99", "130", "-"]]


def test_the_fast_reader_and_the_exact_reader_give_the_same_frame(tmp_path):
    """pyarrow's reader and the record-by-record one agree on every column, nulls, thinking words
    (true, false, null), a missing `measured`, extra fields and a torn last line included."""
    records = [build_record("single", "code", sent_at=1.0 + i, thinking=[True, False, None][i % 3],
                            error=None if i % 4 else "http 500", ttft_s=None if i % 4 == 0 else 0.1,
                            first_read_events=1, queue_s=None if i % 2 else 0.01,
                            chunk_gaps_ms=[None, "", "1.5,0,20"][i % 3]) for i in range(40)]
    records[5].pop("measured", None)
    records[6]["measured"] = False
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + b'{"request_id": "torn", "sce')
    with pytest.warns(SkippedLinesWarning, match="torn last line"):
        fast = read_records_frame(path, keep_copy=True)
    with pytest.warns(SkippedLinesWarning, match="torn last line"):
        exact = loadlib.record_table.exact_frame(path)
    assert len(fast) == 39
    assert fast["chunk_gaps_ms"].fillna("null").tolist()[:4] == ["null", "", "1.5,0,20", "null"]
    pd.testing.assert_frame_equal(fast, exact, check_categorical=False)
    with pytest.warns(SkippedLinesWarning, match="torn last line"):  # the copy stands for the journal whole
        pd.testing.assert_frame_equal(_read_from_copy(path), exact, check_categorical=False)


def _read_from_copy(path, **options):
    """`read_records_frame`, failing if it reads the journal's lines instead of its copy."""
    def no_journal(*args):
        raise AssertionError("read the journal, not its copy")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loadlib.record_table, "_arrow_table", no_journal)
        patch.setattr(loadlib.record_table, "_exact_frames", no_journal)
        return read_records_frame(path, **options)


def test_the_columnar_copy_is_read_while_it_matches_its_journal(write_run, protocol_records, tmp_path):
    run_dir = write_run(protocol_records)
    journal_frame = read_records_frame(run_dir, keep_copy=True)
    assert (run_dir / "records.parquet").is_file() and not list(run_dir.glob(".*partial"))
    pd.testing.assert_frame_equal(_read_from_copy(run_dir), journal_frame)
    moved = tmp_path / "elsewhere"  # a run directory copied to another machine: new times, same bytes
    shutil.copytree(run_dir, moved, copy_function=shutil.copy)
    pd.testing.assert_frame_equal(_read_from_copy(moved), journal_frame)


@pytest.mark.parametrize("change", ["appended", "cut", "rewritten", "copy damaged"])
def test_a_copy_that_no_longer_matches_its_journal_is_not_read(write_run, protocol_records, change):
    run_dir = write_run(protocol_records)
    read_records_frame(run_dir, keep_copy=True)
    journal, copy = run_dir / "records.jsonl", run_dir / "records.parquet"
    lines = journal.read_bytes().splitlines(keepends=True)
    if change == "appended":
        journal.write_bytes(b"".join(lines) + orjson.dumps({**protocol_records[0], "request_id": "late"}) + b"\n")
    elif change == "cut":
        journal.write_bytes(b"".join(lines[:-1]))
    elif change == "rewritten":  # same size, one figure changed
        rewritten = b"".join(lines).replace(b'"ttft_s":0.1,', b'"ttft_s":0.9,', 1)
        assert rewritten != b"".join(lines) and len(rewritten) == journal.stat().st_size
        journal.write_bytes(rewritten)
    else:
        copy.write_bytes(copy.read_bytes()[:100])
    expected = loadlib.record_table.exact_frame(journal)
    assert len(expected) == {"appended": 15, "cut": 13}.get(change, 14)
    assert change != "rewritten" or expected["ttft_s"].max() == 0.9
    pd.testing.assert_frame_equal(read_records_frame(run_dir), expected, check_categorical=False)


def test_a_copy_that_cannot_be_written_costs_only_a_warning(write_run, protocol_records):
    run_dir = write_run(protocol_records)
    (run_dir / "records.parquet").mkdir()  # in the way of the copy
    with pytest.warns(UserWarning, match=r"records.parquet: not written \(.*\); reports read records.jsonl instead"):
        assert len(read_records_frame(run_dir, keep_copy=True)) == 14
    assert not list(run_dir.glob(".*partial"))


def test_unmeasured_requests_are_read_in_the_same_pass_alike_from_the_copy_the_journal_and_record_by_record(
        write_run, protocol_records):
    records = [{**r, "measured": i not in (2, 9)} for i, r in enumerate(protocol_records)]
    run_dir = write_run(records)
    measured, from_journal = read_journal(run_dir, keep_copy=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loadlib.record_table, "_arrow_table", lambda *a: pytest.fail("read the copy, not the journal"))
        from_copy = read_journal(run_dir)[1]
    exact_measured, exact = loadlib.record_table._exact_frames(run_dir / "records.jsonl")
    assert from_journal["request_id"].tolist() == [records[2]["request_id"], records[9]["request_id"]]
    assert from_journal["measured"].all() and len(measured) == 12
    for other in (from_copy, exact):
        pd.testing.assert_frame_equal(other, from_journal, check_dtype=False, check_categorical=False)
    pd.testing.assert_frame_equal(exact_measured, measured, check_dtype=False, check_categorical=False)
    assert read_journal(write_run(protocol_records, name="all-measured"))[1] is None
    assert split_records(records)[1]["request_id"].tolist() == from_journal["request_id"].tolist()


def test_a_records_json_line_holds_about_its_own_length_in_memory():
    """A run keeps every record's line until its end: 1,000 lines must cost about their length,
    not the ~16 KB buffer each orjson 3.12+ result keeps behind it."""
    records = [RequestRecord.from_dict(build_record(round=i)) for i in range(1000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        lines = [record.to_json() for record in records]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert orjson.loads(lines[0])["request_id"] == records[0].request_id
    assert held < 2 * sum(len(line) for line in lines)


def test_a_run_shared_as_its_columnar_copy_alone_is_read_from_it(write_run, protocol_records, tmp_path):
    """A million records are ~40 MB of copy against ~600 MB of journal: a run may travel without
    its journal, and every command reads it as before."""
    records = [{**r, "measured": i != 3} for i, r in enumerate(protocol_records)]
    run_dir = write_run(records, manifest={"tool": {"name": "uni-locust"}})
    journal_frame, unmeasured = read_journal(run_dir, keep_copy=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    for name in ("records.parquet", "manifest.json"):
        shutil.copy(run_dir / name, shared / name)
    pd.testing.assert_frame_equal(read_records_frame(shared), journal_frame)
    pd.testing.assert_frame_equal(read_records_frame(shared / "records.parquet"), journal_frame)
    pd.testing.assert_frame_equal(read_journal(shared)[1], unmeasured, check_dtype=False, check_categorical=False)
    assert len(read_run(shared).records) == 13
    pd.testing.assert_frame_equal(read_records_frame(run_dir / "records.parquet"), journal_frame)  # its journal's


def test_a_copy_alone_from_before_a_field_reads_it_as_missing(write_run, protocol_records, tmp_path):
    """A copy written before `chunk_gaps_ms` existed (its table without the column) reads as the
    journal's older lines do: the field null."""
    import pyarrow.parquet as pa_parquet

    run_dir = write_run(protocol_records)
    journal_frame = read_journal(run_dir, keep_copy=True)[0]
    shared = tmp_path / "shared"
    shared.mkdir()
    older = pa_parquet.read_table(run_dir / "records.parquet")
    pa_parquet.write_table(older.drop_columns(["chunk_gaps_ms"]), shared / "records.parquet")
    frame = read_records_frame(shared)
    assert frame["chunk_gaps_ms"].isna().all()
    pd.testing.assert_frame_equal(frame, journal_frame)


@pytest.mark.parametrize("copy, problem", [
    (b"PAR1 not parquet", r"cannot read records .*records.parquet: "),
    ("other columns", r"records.parquet: not a records copy this version reads \(its columns differ\)"),
])
def test_a_copy_alone_that_is_not_one_is_one_line_naming_it(tmp_path, copy, problem):
    run_dir = tmp_path / "shared"
    run_dir.mkdir()
    if isinstance(copy, bytes):
        (run_dir / "records.parquet").write_bytes(copy)
    else:
        pd.DataFrame({"request_id": ["a"], "ttft": [0.1]}).to_parquet(run_dir / "records.parquet")
    with pytest.raises(RunDirError, match=problem):
        read_run(run_dir)
