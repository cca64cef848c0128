"""The master's intake of workers' batches: every record in the journal in the order it came, counted,
the live window the last records whatever the batches' sizes, and the early stop shown every failed
record of a batch while it skips batches that hold none."""

from __future__ import annotations

import orjson

from loadlib.records import read_records
from loadlib.run.early_stop import EarlyStop
from loadlib.run.intake import RecordIntake


def batch(first: int, n: int, failed: frozenset[int] = frozenset()) -> bytes:
    return b"\n".join(orjson.dumps({"request_id": str(i), "target": "", "sent_at": 1.0, "total_s": 0.1,
                                    "http_status": None if i in failed else 200,
                                    "error": "connection refused" if i in failed else None})
                      for i in range(first, first + n))


def test_batches_reach_the_journal_whole_and_the_window_holds_the_last_records(tmp_path):
    intake = RecordIntake(tmp_path, window=7)
    for first, n in ((0, 5), (5, 1), (6, 9), (15, 2)):
        intake.take_lines(batch(first, n))
    assert intake.count == 17
    assert [r["request_id"] for r in intake.recent()] == [str(i) for i in range(10, 17)]
    intake.take_lines(batch(17, 1))
    assert [r["request_id"] for r in intake.recent()] == [str(i) for i in range(11, 18)]
    assert intake._kept < 7 + 9  # batches wholly before the window are let go
    intake.close()
    assert [r["request_id"] for r in read_records(tmp_path)] == [str(i) for i in range(18)]


def test_a_run_that_keeps_every_record_has_them_all_in_its_window(tmp_path):
    intake = RecordIntake(tmp_path, window=None)
    intake.take_lines(batch(0, 3))
    intake.take_lines(batch(3, 4))
    assert [r["request_id"] for r in intake.recent()] == [str(i) for i in range(7)]
    intake.close()


class Seen(EarlyStop):
    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9", lambda reason: None)
        self.seen: list[str] = []

    def see(self, records):
        self.seen += [r["request_id"] for r in records]
        super().see(records)


def test_the_early_stop_sees_each_failed_record_and_skips_batches_without_one():
    stop = Seen()
    stop.see_lines(batch(0, 50))  # the first records, and the server's first answer: each one seen
    assert len(stop.seen) == 50 and not stop.first.watching
    stop.seen = []
    stop.see_lines(batch(0, 50))
    assert stop.seen == []
    stop.see_lines(batch(50, 50, failed=frozenset({61, 97})))
    assert stop.seen == ["61", "97"]
