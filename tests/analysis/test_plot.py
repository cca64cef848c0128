"""`plot`: one PNG per declared figure that the runs have data for."""

from __future__ import annotations

from loadlib.outputs.png import plot
from tests.analysis.builders import build_run, extended_run, free_running_records, protocol_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_every_chart_is_written_for_protocol_runs(tmp_path):
    written = plot([build_run(protocol_run(), "a"), build_run(extended_run(), "b")], tmp_path)
    assert sorted(p.name for p in written) == [
        "aggregate_vs_concurrency.png", "decode_distribution.png", "decode_per_scenario.png",
        "prefill_vs_prompt_size.png", "timeline_a.png", "timeline_b.png", "ttft_distribution.png"]
    assert all(p.read_bytes().startswith(PNG_SIGNATURE) for p in written)


def test_charts_without_data_are_left_out(tmp_path):
    written = plot([build_run(free_running_records(), "steady run")], tmp_path)
    assert sorted(p.name for p in written) == [
        "aggregate_vs_concurrency.png", "by_length_steady_run.png", "decode_distribution.png",
        "prefill_vs_prompt_size.png", "timeline_steady_run.png", "ttft_distribution.png"]  # no protocol cell
