"""Each ended cell's records, read back once (loadlib.run.cell_readings): what the progress line,
the server watch and a capacity search's judgement share, on a real journal fed as a busy master
is fed (a request of a level journaled before the master's clock reached the level's start)."""

from __future__ import annotations

import orjson

from loadlib.record_table import records_frame
from loadlib.records import RecordJournal
from loadlib.run.cell_readings import CellReadings
from loadlib.scenarios import Cell
from loadlib.scenarios.prompts import ProtocolScenario
from tests.analysis.builders import build_record

SCENARIO = ProtocolScenario(["code"], {}, "any").round_cells([2], 1)[0].scenario


def cell(name: str, target: str = "") -> Cell:
    return Cell(name, "search", SCENARIO, 1, duration_s=1.0, target=target)


def requests(name: str, count: int, target: str = "") -> list[dict]:
    return [build_record(name, concurrency=1, case="search", target=target) for _ in range(count)]


def journal_in(tmp_path) -> tuple[RecordJournal, CellReadings]:
    journal = RecordJournal(tmp_path)
    return journal, CellReadings(lambda: journal.path)


def write(journal: RecordJournal, records: list[dict]) -> None:
    journal.append_lines(b"".join(orjson.dumps(record) + b"\n" for record in records))


def ids(records: list[dict]) -> list[str]:
    return [record["request_id"] for record in records]


def test_a_levels_reading_holds_its_requests_journaled_before_its_start_and_none_of_the_level_before(tmp_path):
    journal, readings = journal_in(tmp_path)
    first, second = cell("search-u1"), cell("search-u2")
    readings.on_cell(first, "start")
    early, late = requests("search-u1", 3), requests("search-u2", 2)
    write(journal, early)
    readings.on_cell(first, "end")
    write(journal, late[:1])  # the next level's first request, before the master's clock reached its start
    readings.on_cell(second, "start")
    write(journal, late[1:])
    readings.on_cell(second, "end")
    assert ids(readings.of(second).records()) == ids(late)
    assert ids(readings.cells(["search-u1"], "").records()) == ids(early)


def test_a_reading_is_what_the_journal_held_at_the_cells_end_however_late_it_is_made(tmp_path):
    journal, readings = journal_in(tmp_path)
    ended = cell("ladder-u1")
    readings.on_cell(ended, "start")
    done = requests("ladder-u1", 2)
    write(journal, done)
    readings.on_cell(ended, "end")
    reading = readings.of(ended)
    write(journal, requests("ladder-u1", 1))  # still in flight at the end: the summary's, not the line's
    assert ids(reading.records()) == ids(done)
    assert reading.frame() is reading.frame() and len(reading.frame()) == 2


def test_cells_of_one_name_played_one_after_another_each_read_their_own(tmp_path):
    journal, readings = journal_in(tmp_path)
    code, chat = Cell("single", "single", SCENARIO, 1, 2), Cell("single", "single", SCENARIO, 1, 2)
    for each, count in ((code, 2), (chat, 3)):
        readings.on_cell(each, "start")
        write(journal, requests("single", count))
        readings.on_cell(each, "end")
        assert len(readings.of(each).records()) == count


def test_a_level_run_again_is_judged_on_both_runs_in_journal_order_and_the_last_cells_table_is_shared(tmp_path):
    journal, readings = journal_in(tmp_path)
    runs = [cell("search-u4"), cell("search-u4-r2")]
    written = []
    for each in runs:
        readings.on_cell(each, "start")
        written += requests(each.name, 2) + requests(each.name, 1, target="B")  # another server's, left out
        write(journal, written[-3:])
        readings.on_cell(each, "end")
    both = readings.cells([each.name for each in runs], "")
    assert ids(both.records()) == ids([record for record in written if record["target"] == ""])
    assert both.frame()["request_id"].tolist() == records_frame(both.records())["request_id"].tolist()
    assert readings.cells(["search-u4-r2"], "") is readings.of(runs[1])


def test_a_new_run_reads_its_own_journal_from_its_start(tmp_path):
    runs = [RecordJournal(tmp_path / "first"), RecordJournal(tmp_path / "second")]
    playing = [runs[0]]
    readings = CellReadings(lambda: playing[0].path)
    for journal, count in zip(runs, (5, 2)):
        playing[0] = journal
        level = cell("search-u1")
        readings.on_cell(level, "start")
        write(journal, requests("search-u1", count))
        readings.on_cell(level, "end")
        assert len(readings.of(level).records()) == len(readings.cells(["search-u1"], "").records()) == count
