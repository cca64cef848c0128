"""A request's label is made by its cell and copied into its record in one place; the figures ask
the record's label fields, and the records of older runs, which lack them, read as they did."""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson
import pytest

from loadlib.figures import free_running
from loadlib.record_table import read_records_frame, records_frame
from loadlib.records import (EXCHANGE_FIELDS, JOURNAL_FIELDS, LABEL_FIELDS, Exchange, RequestLabel, RequestRecord,
                             read_records)
from loadlib.report.contents import long_context_run
from loadlib.run_view import RunView
from loadlib.scenarios import Cell, Job, Scenario
from loadlib.scenarios.base import LONG_CONTEXT_KIND, TRACE_KIND, stats_name
from tests.analysis.builders import build_record

T0 = 1_700_000_000.0


class Named(Scenario):
    kind = "radix-hit"

    def next(self, stream: int) -> Job:
        return self._job(self.name, [{"role": "user", "content": "hi"}], turn=2)


def exchange(sent_at: float = T0, **fields) -> Exchange:
    return dataclasses.replace(Exchange(max_tokens=64, thinking=None, sent_at=sent_at, ttft_s=0.1, total_s=1.0,
                                        completion_tokens=40, cached_tokens=500, chunks=10), **fields)


def test_every_label_field_is_the_records_field_of_the_same_name_and_type():
    record = {f.name: f.type for f in dataclasses.fields(RequestRecord)}
    assert all(record[f.name] == f.type for f in dataclasses.fields(RequestLabel))
    assert set(LABEL_FIELDS) | set(EXCHANGE_FIELDS) | {"request_id", "worker", "user", "queue_s",
                                                       "cache_observed"} == set(record)


def test_a_cell_labels_its_job_and_the_record_carries_the_label_and_the_exchange():
    cell = Cell("open-2rps", "open", Named(name="mine"), 4, target="B")
    label = cell.label(cell.scenario.next(3), 3, scheduled_at=T0 - 0.25)
    assert (label.scenario, label.kind, label.cell, label.case, label.concurrency, label.slot, label.target,
            label.turn) == ("mine", "radix-hit", "open-2rps", "open", 4, 3, "B", 2)
    assert cell.label(cell.scenario.next(3), 3, turn=5).turn == 5  # a mode's own count of turns
    record = RequestRecord.of(label, exchange(), "r1", worker=1, user=7)
    assert all(getattr(record, name) == getattr(label, name) for name in LABEL_FIELDS)
    assert all(getattr(record, name) == getattr(exchange(), name) for name in EXCHANGE_FIELDS)
    assert (record.request_id, record.worker, record.user) == ("r1", 1, 7)
    assert record.queue_s == pytest.approx(0.25) and record.cache_observed == "warm"
    assert stats_name(record.case, record.cell, record.scenario) == "open-2rps: mine"


def test_a_request_sent_when_its_stream_was_free_has_no_wait_and_an_unmeasured_cell_says_so():
    warmup = Cell("warmup", "closed", Named(), 2, measured=False)
    label = warmup.label(warmup.scenario.next(0), 0, closed_loop=True)
    record = RequestRecord.of(label, exchange(cached_tokens=None), "r2", worker=0, user=0)
    assert record.scheduled_at is None and record.queue_s is None and record.cache_observed is None
    assert record.closed_loop and not record.measured


def test_a_lost_workers_record_keeps_its_label_target_included_and_what_the_body_asked():
    label = Cell("c2-same", "same", Named(), 2, rounds=3, target="A").label(Job("code", []), 1, 2, scheduled_at=T0)
    body = {"max_tokens": 128, "chat_template_kwargs": {"enable_thinking": True}}
    record = RequestRecord.lost(label, body, "r3", "worker lost")
    assert (record.target, record.cell, record.round, record.slot, record.worker, record.user) == \
        ("A", "c2-same", 2, 1, -1, -1)
    assert (record.sent_at, record.error, record.max_tokens, record.thinking, record.queue_s) == \
        (T0, "worker lost", 128, True, None)


def test_the_journal_line_leads_with_the_records_identity_and_keeps_no_text():
    record = RequestRecord.of(RequestLabel("code", "single", "single"), exchange(text="the answer"), "r4", 0, 0)
    line = orjson.loads(record.to_json())
    assert list(line) == list(JOURNAL_FIELDS) and JOURNAL_FIELDS[0] == "request_id"
    assert "text" not in line and RequestRecord.from_dict(line).to_dict() == line


def test_a_locustfiles_own_request_is_its_own_row_in_locusts_stats():
    from loadlib.modes.own_users import own_label

    label = own_label("prime", 6, 2)
    assert (label.cell, label.case, label.concurrency, label.slot) == ("prime", "locust", 6, 2)
    assert stats_name(label.case, label.cell, label.scenario) == "prime"
    assert stats_name("single", "single", "code") == "code" and stats_name("same", "c4-same", "code") == "c4-same"


# --- the figures ask the label's fields ------------------------------------------------------------

def closed_loop_cells(held: bool | None) -> list[dict]:
    """Two cells of 4 streams for 10 s: one that kept 2 in flight, labelled closed-loop as `held`
    says (None: a record from before the field, of case "closed"), and an open one that did too."""
    fields = {} if held is None else {"closed_loop": held}
    closed = [build_record("closed", case="closed", concurrency=4, sent_at=T0 + i, total_s=2.0, **fields)
              for i in range(10)]
    opened = [build_record("open-1rps", case="open", concurrency=4, sent_at=T0 + 20 + i, total_s=2.0,
                           **({} if held is None else {"closed_loop": False})) for i in range(10)]
    return closed + opened


@pytest.mark.parametrize("held", [True, None], ids=["labelled", "older record"])
def test_streams_held_are_judged_in_closed_loop_cells_only(held):
    df = records_frame(closed_loop_cells(held))
    table = free_running.streams_held(free_running.steady_state_table(df), df)
    assert list(table["cell"]) == ["closed"] and table["asked"].iat[0] == 4
    assert table["held_share"].iat[0] == pytest.approx(0.5, abs=0.1)


def test_a_closed_loop_cell_of_any_case_is_judged_and_a_closed_case_not_labelled_so_is_not():
    records = [dict(r, case="search", closed_loop=True) if r["cell"] == "closed" else r
               for r in closed_loop_cells(True)]
    df = records_frame(records)
    assert list(free_running.streams_held(free_running.steady_state_table(df), df)["cell"]) == ["closed"]
    df = records_frame(closed_loop_cells(False))
    assert free_running.streams_held(free_running.steady_state_table(df), df).empty


def test_a_trace_is_told_by_its_records_kind_and_an_older_one_by_its_case():
    trace = [build_record("trace", case="trace", sent_at=T0 + i, queue_s=0.01 * i, kind=TRACE_KIND)
             for i in range(5)]
    renamed = [dict(r, cell="replay", case="replay") for r in trace]
    older = [{k: v for k, v in r.items() if k != "kind"} for r in trace]
    assert list(free_running.trace_replay(records_frame(renamed))["cell"]) == ["replay"]
    assert list(free_running.trace_replay(records_frame(older))["cell"]) == ["trace"]
    assert free_running.trace_replay(records_frame([dict(r, kind="synthetic") for r in trace])).empty


@pytest.mark.parametrize("scenario, kind, long_context", [
    ("prefill-3k", LONG_CONTEXT_KIND, True),  # a long-context table named otherwise
    ("long-context-3k", None, True),  # an older record: told by its name, as then
    ("long-context-3k", "synthetic", False),  # a name is no kind
])
def test_a_long_context_run_is_told_by_its_records_kind(scenario, kind, long_context):
    fields = {} if kind is None else {"kind": kind}
    df = records_frame([build_record(f"prefill-{i}", scenario=scenario, case="single", **fields) for i in range(2)])
    assert long_context_run(RunView(df, {})) is long_context


# --- older journals --------------------------------------------------------------------------------

def test_an_older_journal_reads_its_label_fields_from_what_its_records_said(tmp_path):
    """A record from before `kind`, `closed_loop`, `scheduled_at` and `target`: the exact reader and
    pyarrow's (and the columnar copy) give the same frame, the fields filled as they were read."""
    lines = [build_record("ladder-u2", case="ladder", concurrency=2, sent_at=T0),
             build_record("open-1rps", case="open", sent_at=T0 + 1, queue_s=0.5),
             build_record("single", scenario="long-context-14k")]
    (tmp_path / "records.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    exact = records_frame(read_records(tmp_path))
    arrow = read_records_frame(tmp_path, keep_copy=True)
    copy = read_records_frame(tmp_path)
    for frame in (exact, arrow, copy):
        assert list(frame["kind"].astype(str)) == ["", "", LONG_CONTEXT_KIND]
        assert list(frame["closed_loop"]) == [True, False, False] and frame["closed_loop"].dtype == bool
        assert frame["scheduled_at"].iat[1] == T0 + 0.5 and np.isnan(frame["scheduled_at"].iat[0])
        assert list(frame["target"]) == ["", "", ""]


def test_a_closed_loop_field_of_the_wrong_type_names_its_record():
    from loadlib.record_table import RecordError

    with pytest.raises(RecordError, match="closed_loop: expected true, false or null"):
        records_frame([build_record("closed", case="closed", closed_loop="yes")])
