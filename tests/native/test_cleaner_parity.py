"""The log cleaner's native per-batch paths (native/sl_cleaner.h) and their pure-Python twins
(storage/offset_map.py, storage/log_cleaner.py, storage/batch_filter.py) agree: the same map
table, the same verdicts, the same bytes, on any batch, map state, horizon and tombstones."""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlog import native
from streamlog.storage import log_cleaner
from streamlog.storage.batch_filter import filter_batch
from streamlog.storage.log_cleaner import (CleanStats, _clean_records_native, _put_keys_py,
                                           _records_to_keep)
from streamlog.storage.offset_map import OffsetMap
from streamlog.storage.record_batch import RECORDS_OFFSET, RecordBatch, build_batch, seal
from streamlog.storage.varint import encode_varint

pytestmark = pytest.mark.skipif(not native.CLEANER_AVAILABLE and os.environ.get(
    "STREAMLOG_EXPECT_NATIVE") != "1", reason=str(native.CLEANER_UNAVAILABLE_REASON))

T0 = 1_700_000_000_000
keys = st.one_of(st.none(), st.sampled_from([b"", b"a", b"b", b"key-1", b"key-2", b"x" * 40]))
records = st.lists(st.tuples(keys, st.one_of(st.none(), st.binary(max_size=20)),
                             st.integers(-3000, 3000)), min_size=1, max_size=30)


def test_the_native_cleaner_is_in_use():
    assert native.CLEANER_AVAILABLE, native.CLEANER_UNAVAILABLE_REASON
    assert log_cleaner.USE_NATIVE


def make(rows, base_offset, horizon=None):
    data = build_batch([v for _, v, _ in rows], keys=[k for k, _, _ in rows],
                       timestamps=[T0 + t for _, _, t in rows], base_offset=base_offset)
    batch = RecordBatch(bytes(data))
    if horizon is not None:   # a batch an earlier pass gave a delete horizon
        batch = RecordBatch(filter_batch(batch, [True] * len(rows), horizon))
    return batch


@settings(max_examples=300)
@given(st.lists(records, min_size=1, max_size=5), st.integers(1, 40), st.integers(0, 20))
def test_map_puts_agree(batches, slots, start):
    py, nat = OffsetMap(24 * slots), OffsetMap(24 * slots)
    base = 0
    for rows in batches:
        batch = make(rows, base)
        buf, pos, length, _ = batch._records_section()
        got = native.map_put_section(nat, buf, pos, length, batch.records_count, base, start)
        assert got == _put_keys_py(py, batch, start)
        assert (nat.size, nat.latest_offset) == (py.size, py.latest_offset)
        assert np.array_equal(nat.table, py.table)
        if got[1]:
            break
        base = batch.next_offset + 3
    for key in (b"", b"a", b"b", b"key-1", b"key-2", b"x" * 40, b"absent"):
        assert native.map_get(nat, key) == py.get(key)


@settings(max_examples=300)
@given(records, records, st.integers(-1, 60), st.booleans(), st.booleans(),
       st.integers(-2000, 2000))
def test_kept_records_and_bytes_agree(history, rows, latest_cut, had_horizon, late, ahead):
    offset_map = OffsetMap(24 * 64)
    for i, (key, _, _) in enumerate(history):
        if key is not None:
            offset_map.put(key, i * 2)   # some keys later (or earlier) than the batch's
    offset_map.latest_offset = max(offset_map.latest_offset, latest_cut)
    now = T0 + ahead
    batch = make(rows, 10, horizon=T0 + 500 if had_horizon else None)
    rules = log_cleaner._Rules(offset_map, now + (1000 if late else 0), 86_400_000, -1, {})
    py_stats, native_stats = CleanStats(), CleanStats()
    keep = _records_to_keep(batch, rules, py_stats)
    needs_horizon = not batch.has_delete_horizon and any(
        k and n < 0 for k, n in zip(keep, batch.records().value_lens.tolist(), strict=True))
    expected = filter_batch(batch, keep, rules.now_ms + rules.delete_retention_ms
                            if needs_horizon else None)
    py_stats.records_kept = sum(keep)
    assert _clean_records_native(batch, rules, native_stats) == expected
    assert (native_stats.records_kept, native_stats.keyless_records_removed) == \
        (py_stats.records_kept, py_stats.keyless_records_removed)


def test_a_timestamp_delta_written_in_more_bytes_than_needed_is_rebased_right():
    # A zero delta as 0x80 0x00: valid to the decoder (a writer may pad), and the rebase for
    # a delete horizon must skip the bytes the record has, not the fewest it could have.
    def record(offset_delta, key, value):
        body = b"\x00" + b"\x80\x00" + encode_varint(offset_delta) + encode_varint(len(key)) + key
        body += encode_varint(-1) if value is None else encode_varint(len(value)) + value
        return encode_varint(len(body) + 1) + body + encode_varint(0)
    section = record(0, b"k", None) + record(1, b"j", b"v")
    data = bytearray(RECORDS_OFFSET) + section
    seal(data, 0, base_offset=0, attributes=0, last_offset_delta=1, base_timestamp=T0,
         max_timestamp=T0, producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=2)
    batch = RecordBatch(bytes(data))
    batch.ensure_valid()
    offset_map = OffsetMap(24 * 64)
    rules = log_cleaner._Rules(offset_map, T0 + 5, 1000, -1, {})
    keep = _records_to_keep(batch, rules, CleanStats())
    assert keep == [True, True]
    expected = filter_batch(batch, keep, T0 + 5 + 1000)
    got = _clean_records_native(batch, rules, CleanStats())
    assert got == expected
    cleaned = RecordBatch(got)
    cleaned.ensure_valid()
    assert [(o, ts, k, v) for o, ts, k, v, _ in cleaned.records()] == [
        (0, T0, b"k", None), (1, T0, b"j", b"v")]
