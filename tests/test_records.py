"""A record's chunk gaps (`--chunk-times`) as the journal keeps them, and read back."""

import pytest

from loadlib.records import chunk_gaps_s, chunk_gaps_text


def test_the_gaps_are_milliseconds_to_a_hundredth_whole_ones_plain_shared_stamps_zero():
    assert chunk_gaps_text([10.0, 10.0123449, 10.0123449, 10.0323449, 11.0323449]) == "12.34,0,20,1000"
    assert chunk_gaps_s("12.34,0,20,1000") == pytest.approx([0.01234, 0.0, 0.02, 1.0])


def test_fewer_than_two_chunks_have_no_gap():
    assert chunk_gaps_text([]) == chunk_gaps_text([5.0]) == ""
    assert chunk_gaps_s("") == []


def test_ten_thousand_gaps_sum_to_the_last_chunks_offset_within_a_rounding():
    """12.3456789 ms a gap, rounded gap by gap, would drift 0.0043 ms a gap (43 ms in all); the
    offsets are rounded instead, so the sum misses by at most half a hundredth of a millisecond."""
    stamps = [1_700_000_000.0 + i * 0.0123456789 for i in range(10_001)]
    gaps = chunk_gaps_s(chunk_gaps_text(stamps))
    assert len(gaps) == 10_000
    assert abs(sum(gaps) - (stamps[-1] - stamps[0])) <= 0.000005 + 1e-9
    assert set(gaps) <= {0.01234, 0.01235}
