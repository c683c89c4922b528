"""Offset and time indexes: Kafka's entry layout, lookup rules, trimming and read-only snapshots."""
import bisect
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlog.errors import KafkaStorageError
from streamlog.storage.offset_index import OffsetIndex
from streamlog.storage.time_index import TimeIndex


def test_offset_index_entry_layout_is_big_endian_8_bytes(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(path, 100, 8 * 10)
    idx.append(105, 4096)
    idx.close()
    with open(path, "rb") as f:
        assert f.read() == bytes.fromhex("00000005" "00001000")


def test_time_index_entry_layout_is_big_endian_12_bytes(tmp_path):
    path = str(tmp_path / "00000000000000000100.timeindex")
    idx = TimeIndex(path, 100, 12 * 10)
    idx.maybe_append(0x0102030405, 107)
    idx.close()
    with open(path, "rb") as f:
        assert f.read() == bytes.fromhex("0000000102030405" "00000007")


def test_new_index_is_preallocated_and_trimmed_on_close(tmp_path):
    path = str(tmp_path / "x.index")
    idx = OffsetIndex(path, 0, 1000)
    assert os.path.getsize(path) == 1000 // 8 * 8 and idx.max_entries == 125
    for i in range(3):
        idx.append(10 * (i + 1), 100 * (i + 1))
    idx.close()
    assert os.path.getsize(path) == 24
    reopened = OffsetIndex(path, 0, 1000)
    assert reopened.entries == 3 and reopened.lookup(25) == (20, 200)


def test_offset_lookup_returns_largest_entry_not_above_target(tmp_path):
    idx = OffsetIndex(str(tmp_path / "i"), 50, 4096)
    for off, pos in [(55, 100), (60, 200), (70, 300)]:
        idx.append(off, pos)
    assert idx.lookup(49) == (50, 0)    # below every entry: segment start
    assert idx.lookup(54) == (50, 0)
    assert idx.lookup(55) == (55, 100)
    assert idx.lookup(69) == (60, 200)  # between sparse entries
    assert idx.lookup(70) == (70, 300)
    assert idx.lookup(10**6) == (70, 300)


def test_offset_index_refuses_out_of_order_and_full(tmp_path):
    idx = OffsetIndex(str(tmp_path / "i"), 0, 16)
    idx.append(5, 10)
    with pytest.raises(KafkaStorageError):
        idx.append(5, 20)
    idx.append(6, 30)
    assert idx.is_full()
    with pytest.raises(KafkaStorageError, match="full"):
        idx.append(7, 40)


def test_time_index_appends_only_growing_timestamps_and_keeps_a_slot(tmp_path):
    idx = TimeIndex(str(tmp_path / "t"), 0, 12 * 4)
    assert idx.maybe_append(100, 1)
    assert not idx.maybe_append(100, 2)  # not strictly greater: skipped
    assert not idx.maybe_append(90, 3)
    assert idx.maybe_append(200, 4)
    assert idx.maybe_append(300, 5)
    assert idx.is_full()  # 3 of 4 used: the last slot is for the roll/close entry
    with pytest.raises(KafkaStorageError):
        idx.maybe_append(400, 6)
    assert idx.maybe_append(400, 6, skip_full_check=True)


def test_time_lookup_is_strictly_below_target(tmp_path):
    idx = TimeIndex(str(tmp_path / "t"), 10, 4096)
    idx.maybe_append(100, 12)
    idx.maybe_append(200, 15)
    assert idx.lookup(100) == (-1, 10)
    assert idx.lookup(101) == (100, 12)
    assert idx.lookup(200) == (100, 12)
    assert idx.lookup(10**9) == (200, 15)


def test_truncate_to_removes_entries_at_and_above(tmp_path):
    o = OffsetIndex(str(tmp_path / "o"), 0, 4096)
    t = TimeIndex(str(tmp_path / "t"), 0, 4096)
    for i in range(1, 6):
        o.append(i * 10, i * 100)
        t.maybe_append(i * 1000, i * 10)
    o.truncate_to(30)
    t.truncate_to(30)
    assert o.entries == 2 and o.lookup(10**6) == (20, 200)
    assert t.entries == 2 and t.last_entry() == (2000, 20)


def test_readonly_snapshot_stops_at_zero_fill_and_never_maps(tmp_path):
    path = str(tmp_path / "o")
    writer = OffsetIndex(path, 0, 4096)  # preallocated: 512 zero entries
    for i in range(1, 4):
        writer.append(i, i * 64)
    writer.flush()
    reader = OffsetIndex(path, 0, 4096, readonly=True)
    assert reader.entries == 3 and reader._mm is None
    assert reader.lookup(2) == (2, 128)
    writer.close()  # the writer trims the file under the reader: the snapshot is unaffected
    assert reader.lookup(3) == (3, 192)


def test_sanity_check_flags_bad_entries(tmp_path):
    path = str(tmp_path / "o")
    idx = OffsetIndex(path, 0, 4096)
    idx.append(5, 500)
    assert idx.sanity_problem(1000) is None
    assert "past the end" in idx.sanity_problem(400)
    idx._arr[1] = (3, 600)  # out of order behind the writer's back
    idx.entries = 2
    assert "out of order" in idx.sanity_problem(1000)


@given(st.lists(st.integers(1, 50), min_size=0, max_size=200), st.integers(0, 12000))
def test_offset_lookup_matches_bisect_model(gaps, target):
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        idx = OffsetIndex(os.path.join(d, "i"), 0, 8 * 400)
        offsets, positions = [], []
        off = pos = 0
        for g in gaps:
            off += g
            pos += g * 3
            idx.append(off, pos)
            offsets.append(off)
            positions.append(pos)
        i = bisect.bisect_right(offsets, target) - 1
        expected = (offsets[i], positions[i]) if i >= 0 else (0, 0)
        assert idx.lookup(target) == expected
        idx.close()


@given(st.lists(st.tuples(st.integers(-5, 100), st.integers(0, 3)), max_size=100),
       st.integers(-10, 3000))
def test_time_index_is_monotonic_and_lookup_matches_model(appends, target):
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        idx = TimeIndex(os.path.join(d, "t"), 0, 12 * 200)
        ts = offset = 0
        model = []
        for dts, doff in appends:
            ts += dts
            offset += doff
            if idx.maybe_append(ts, offset):
                model.append((ts, offset))
        stamps = idx._arr["timestamp"][:idx.entries].astype(np.int64)
        assert np.all(np.diff(stamps) > 0)
        below = [m for m in model if m[0] < target]
        assert idx.lookup(target) == (below[-1] if below else (-1, 0))
        idx.close()


def test_an_index_read_unmapped_answers_checks_and_its_tail_then_maps_to_append(tmp_path):
    """The open of a log after a clean stop reads its active segment's indexes instead of
    mapping them: the check and the last entry need no map, and an append maps as before."""
    path = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(path, 100, 8 * 100)
    for i in range(1, 6):
        idx.append(100 + 10 * i, 1000 * i)
    idx.close()
    again = OffsetIndex(path, 100, 8 * 100, lazy=True)
    assert again.load_unmapped() and again._mm is None
    assert again.entries == 5 and again.last_entry() == (150, 5000)
    assert again.sanity_problem(6000) is None and again._mm is None
    assert again.sanity_problem(5000) is not None            # the check reads the entries
    assert again.load_unmapped()                              # known: nothing read twice
    again.append(160, 6000)
    assert again._mm is not None and again.last_entry() == (160, 6000)
    assert again.lookup(155) == (150, 5000)
    again.close()
    assert os.path.getsize(path) == 6 * 8
    assert not OffsetIndex(str(tmp_path / "missing.index"), 0, 80, lazy=True).load_unmapped()
