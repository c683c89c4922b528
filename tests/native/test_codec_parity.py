"""The native codec and the pure-Python reference produce identical bytes and columns.

Both are called directly (not through storage.codec), so these tests compare
the two implementations in one process whichever one the library selected.
"""
import os
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlog import native
from streamlog.errors import CorruptRecordError
from streamlog.storage import records_py
from streamlog.storage.record_batch import _column, encode_headers

pytestmark = pytest.mark.skipif(not native.AVAILABLE and os.environ.get(
    "STREAMLOG_EXPECT_NATIVE") != "1", reason=str(native.UNAVAILABLE_REASON))

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20)))
record = st.tuples(maybe_bytes, maybe_bytes, st.lists(header, max_size=3),
                   st.integers(-2**40, 2**40))


def test_native_module_is_loaded():
    assert native.AVAILABLE, native.UNAVAILABLE_REASON


def encode_both(records, base_timestamp):
    n = len(records)
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    key_blob, key_lens = _column(keys)
    value_blob, value_lens = _column(values)
    sections = [encode_headers(r[2]) if r[2] else b"\x00" for r in records]
    header_blob, header_lens = b"".join(sections), array("i", map(len, sections))
    timestamps = array("q", [base_timestamp + r[3] for r in records])
    args = (n, base_timestamp, timestamps, key_blob, key_lens, value_blob, value_lens,
            header_blob, header_lens)
    bound = native.records_bound(n, len(key_blob), len(value_blob), len(header_blob))
    assert bound == records_py.records_bound(n, len(key_blob), len(value_blob), len(header_blob))
    out = bytearray(bound)
    written = native.records_encode_into(out, 0, *args)
    return bytes(out[:written]), records_py.encode_records(*args)


@settings(max_examples=300)
@given(st.lists(record, min_size=1, max_size=40), st.integers(-2**50, 2**50))
def test_encode_is_bit_identical(records, base_timestamp):
    native_bytes, python_bytes = encode_both(records, base_timestamp)
    assert native_bytes == python_bytes


@settings(max_examples=300)
@given(st.lists(record, min_size=1, max_size=40), st.integers(-2**50, 2**50))
def test_decode_columns_are_identical_and_round_trip(records, base_timestamp):
    data, _ = encode_both(records, base_timestamp)
    n = len(records)
    a = native.records_decode(data, 0, len(data), n)
    b = records_py.records_decode(data, 0, len(data), n)
    for x, y in zip(a, b, strict=True):
        assert x.tolist() == y.tolist()
    offset_deltas, ts_deltas, key_pos, key_lens, value_pos, value_lens = a[:6]
    assert offset_deltas.tolist() == list(range(n))
    assert ts_deltas.tolist() == [r[3] for r in records]
    for i, (key, value, _, _) in enumerate(records):
        got_key = None if key_lens[i] < 0 else data[key_pos[i]:key_pos[i] + key_lens[i]]
        got_value = None if value_lens[i] < 0 else data[value_pos[i]:value_pos[i] + value_lens[i]]
        assert (got_key, got_value) == (key, value)


@given(st.lists(maybe_bytes, max_size=50))
def test_gather_is_identical(items):
    data, lens = _column(items)
    import numpy as np
    lens = np.frombuffer(lens, dtype=np.int32)
    pos = np.zeros(len(items), dtype=np.int32)
    np.cumsum(np.maximum(lens, 0)[:-1], out=pos[1:]) if len(items) > 1 else None
    d1, o1 = native.gather(data, pos, lens)
    d2, o2 = records_py.gather(data, pos, lens)
    assert bytes(d1) == bytes(d2) == b"".join(x for x in items if x)
    assert o1.tolist() == o2.tolist()


@given(st.lists(st.lists(maybe_bytes, max_size=20), max_size=5))
def test_gather_many_is_identical_and_equals_one_gather_of_everything(columns):
    import numpy as np
    pieces = []
    for items in columns:
        data, lens = _column(items)
        lens = np.frombuffer(lens, dtype=np.int32)
        pos = np.zeros(len(items), dtype=np.int32)
        if len(items) > 1:
            np.cumsum(np.maximum(lens, 0)[:-1], out=pos[1:])
        pieces.append((data, pos, lens))
    d1, o1 = native.gather_many(pieces)
    d2, o2 = records_py.gather_many(pieces)
    everything = [x for items in columns for x in items]
    assert bytes(d1) == bytes(d2) == b"".join(x for x in everything if x)
    lengths = [len(x) if x is not None else 0 for x in everything]
    assert o1.tolist() == o2.tolist() == [sum(lengths[:i]) for i in range(len(lengths) + 1)]


@settings(max_examples=500)
@given(st.binary(max_size=200), st.integers(0, 20))
def test_garbage_is_rejected_identically(data, n):
    """Random bytes never crash either decoder, and both accept or reject the same input."""
    results = []
    for decode in (native.records_decode, records_py.records_decode):
        try:
            cols = decode(data, 0, len(data), n, "f.log", 1000)
            results.append(("ok", [c.tolist() for c in cols]))
        except CorruptRecordError as exc:
            results.append(("corrupt", exc.reason, exc.position))
    assert results[0] == results[1]


@settings(max_examples=300)
@given(st.lists(record, min_size=1, max_size=10), st.data())
def test_mutated_records_are_rejected_identically(records, data):
    """Valid encodings with one byte changed or cut: same verdict from both decoders."""
    raw, _ = encode_both(records, 0)
    raw = bytearray(raw)
    if data.draw(st.booleans()):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= data.draw(st.integers(1, 255))
    else:
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    verdicts = []
    for decode in (native.records_decode, records_py.records_decode):
        try:
            verdicts.append([c.tolist() for c in decode(bytes(raw), 0, len(raw), len(records),
                                                         "f.log", 0)])
        except CorruptRecordError as exc:
            verdicts.append((exc.reason, exc.position))
    assert verdicts[0] == verdicts[1]


@settings(max_examples=300)
@given(st.lists(maybe_bytes, max_size=60))
def test_marshal_slices_build_the_same_list_as_slicing(items):
    """Guards the marshal format the native path writes: any change in Python fails here."""
    import marshal

    import numpy as np
    data, lens = _column(items)
    lens = np.asarray(lens, dtype=np.int32)
    pos = np.zeros(len(items), dtype=np.int32)
    if len(items) > 1:
        np.cumsum(np.maximum(lens, 0)[:-1], out=pos[1:])
    got = native.slices_to_list(data, pos, lens)
    assert got == items == records_py.slices_to_list(data, pos, lens)
    assert all(type(x) is bytes for x in got if x is not None)
    assert marshal.loads(marshal.dumps(items)) == got


@settings(max_examples=300)
@given(st.lists(record, min_size=1, max_size=40), st.integers(-2**62, 2**62),
       st.integers(-2**50, 2**50), st.one_of(st.none(), st.integers(-2**62, 2**62)))
def test_tuples_from_both_decoders_are_identical(records, base_offset, base_timestamp, fixed):
    data, _ = encode_both(records, base_timestamp)
    n = len(records)
    a = native.records_to_tuples(data, 0, len(data), n, base_offset, base_timestamp, fixed)
    b = records_py.records_to_tuples(data, 0, len(data), n, base_offset, base_timestamp, fixed)
    assert a == b
    tuples, with_headers = a
    assert with_headers == sum(1 for r in records if r[2])
    for i, (offset, ts, key, value) in enumerate(tuples):
        assert offset == base_offset + i
        assert ts == (fixed if fixed is not None else base_timestamp + records[i][3])
        assert (key, value) == records[i][:2]


def test_repeated_large_timestamps_come_back_right_and_shared():
    big = 1_700_000_000_000
    stamps = [big, big, big + 1, big + 1, big, 5, big, -2**40, -2**40]
    records = [(b"k", b"v%d" % i, [], ts - big) for i, ts in enumerate(stamps)]
    data, _ = encode_both(records, big)
    tuples, _ = native.records_to_tuples(data, 0, len(data), len(stamps), 0, big)
    assert [t[1] for t in tuples] == stamps
    assert tuples[0][1] is tuples[1][1]  # a repeat is a back-reference to one object
    assert tuples == records_py.records_to_tuples(data, 0, len(data), len(stamps), 0, big)[0]


@settings(max_examples=200)
@given(st.lists(record, min_size=1, max_size=30), st.integers(0, 2**40), st.data())
def test_record_form_and_min_offset_agree(records, base_offset, data):
    data_bytes, _ = encode_both(records, 1_700_000_000_000)
    n = len(records)
    min_offset = base_offset + data.draw(st.integers(0, n))
    topic = data.draw(st.text(min_size=1, max_size=12))
    kwargs = dict(topic=topic, partition=7, timestamp_type=1, min_offset=min_offset)
    a = native.records_to_tuples(data_bytes, 0, len(data_bytes), n, base_offset,
                                 1_700_000_000_000, **kwargs)
    b = records_py.records_to_tuples(data_bytes, 0, len(data_bytes), n, base_offset,
                                     1_700_000_000_000, **kwargs)
    assert a == b
    rows, with_headers = a
    assert [r[2] for r in rows] == list(range(min_offset, base_offset + n))
    assert all(r[0] == topic and r[1] == 7 and r[4] == 1 for r in rows)
    assert [r[7] for r in rows] == [tuple(map(tuple, records[o - base_offset][2]))
                                    for o in range(min_offset, base_offset + n)]
    assert with_headers == sum(1 for i, r in enumerate(records) if r[2] and
                               base_offset + i >= min_offset)
