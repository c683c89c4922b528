"""streamlog._per_record (native/py_per_record.c): per-record work through the CPython API.

key_partition against the Python reference. For records_to_list, what the
parity tests in test_codec_parity.py do not check: the record type
and the GC untracking it relies on, reference counts on success and on
error (a leaked or missing reference shows as a count that moved), buffers
read at an offset, and corrupt input giving the same verdict as the Python
reference in the record form.
"""
import gc
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlog import native
from streamlog.client.murmur2 import murmur2_py, to_positive
from streamlog.client.records import Record
from streamlog.errors import CorruptRecordError
from streamlog.storage import records_py
from streamlog.storage.record_batch import _column, encode_headers

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason=native.UNAVAILABLE_REASON or "")

maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12)))
record = st.tuples(maybe_bytes, maybe_bytes, st.lists(header, max_size=3))
BASE_TS = 1_700_000_000_000


def encode(records, timestamps=None):
    keys, key_lens = _column([r[0] for r in records])
    values, value_lens = _column([r[1] for r in records])
    sections = [encode_headers(r[2]) if r[2] else b"\x00" for r in records]
    header_lens = [len(s) for s in sections]
    n = len(records)
    out = bytearray(records_py.records_bound(n, len(keys), len(values), sum(header_lens)))
    written = records_py.records_encode_into(out, 0, n, BASE_TS, timestamps, keys, key_lens,
                                             values, value_lens, b"".join(sections),
                                             header_lens)
    return bytes(out[:written])


def decode(data, n, topic="events", **kwargs):
    return native.records_to_tuples(data, 0, len(data), n, 100, BASE_TS, topic=topic,
                                    partition=3, timestamp_type=0, record_type=Record, **kwargs)


def test_record_form_builds_records_with_headers_that_the_gc_does_not_track():
    records = [(b"k", b"v", [("h", b"x"), ("n", None)]), (None, b"w", []), (b"z", None, [])]
    rows, with_headers = decode(encode(records), 3)
    assert with_headers == 1
    assert all(type(r) is Record for r in rows)
    assert rows[0] == Record("events", 3, 100, BASE_TS, 0, b"k", b"v", (("h", b"x"), ("n", None)))
    assert rows[0].headers[0].__class__ is tuple
    assert rows[1].key is None and rows[2].value is None and rows[1].headers == ()
    # The point of building them in C: no record, nor its headers, costs the cyclic GC.
    assert not any(gc.is_tracked(r) or gc.is_tracked(r.headers) for r in rows)
    assert not any(gc.is_tracked(h) for h in rows[0].headers)
    # A Record changed in Python is an ordinary tracked object again.
    assert gc.is_tracked(rows[0]._replace(value={"a": 1}))


def test_short_form_is_plain_untracked_tuples():
    rows, _ = native.records_to_tuples(encode([(b"k", b"v", [])]), 0, 9, 1, 5, BASE_TS)
    assert rows == [(5, BASE_TS, b"k", b"v")] and type(rows[0]) is tuple
    assert not gc.is_tracked(rows[0])


def test_reference_counts_are_unchanged_after_success_and_after_a_corrupt_record():
    topic = "refcount-topic-" + str(id(object()))  # a str no one else holds
    fixed = 10**15 + 7
    data = encode([(b"k%d" % i, b"v" * i, [("h", b"1")]) for i in range(50)])
    before = sys.getrefcount(topic), sys.getrefcount(fixed), sys.getrefcount(Record)
    for _ in range(200):
        rows, _ = decode(data, 50, topic=topic, fixed_timestamp=fixed)
        assert rows[-1].timestamp == fixed and rows[-1].topic is topic
        del rows
        with pytest.raises(CorruptRecordError):
            decode(data[:-3], 50, topic=topic, fixed_timestamp=fixed)
    assert (sys.getrefcount(topic), sys.getrefcount(fixed), sys.getrefcount(Record)) == before


def test_a_slice_of_a_larger_buffer_reports_corruption_at_its_file_position():
    data = encode([(b"k", b"v", []), (b"k2", b"v2", [])])
    framed = b"#" * 61 + data + b"tail"
    rows, _ = native.records_to_tuples(framed, 61, len(data), 2, 0, BASE_TS)
    assert [r[3] for r in rows] == [b"v", b"v2"]
    with pytest.raises(CorruptRecordError) as info:
        native.records_to_tuples(framed, 61, len(data) - 1, 2, 0, BASE_TS, path="p.log",
                                 file_position=4000)
    expected = records_py.records_to_tuples
    with pytest.raises(CorruptRecordError) as reference:
        expected(framed, 61, len(data) - 1, 2, 0, BASE_TS, path="p.log", file_position=4000)
    assert (info.value.path, info.value.position) == ("p.log", reference.value.position)
    assert 4000 < info.value.position < 4000 + len(data)


def test_wrong_argument_types_are_refused_not_trusted():
    data = encode([(b"k", b"v", [])])

    def call(**kwargs):
        return native.records_to_tuples(data, 0, len(data), 1, 0, 0, **kwargs)
    for bad in (dict(topic=b"bytes-topic", record_type=Record), dict(topic="t", record_type=dict),
                dict(topic="t", partition="0")):
        with pytest.raises(TypeError):
            call(**bad)
    assert call(topic="t", record_type=None)[0] == [("t", 0, 0, 0, 0, b"k", b"v", ())]


@settings(max_examples=300)
@given(st.lists(record, min_size=1, max_size=10), st.data())
def test_mutated_batches_give_the_same_records_or_the_same_error_as_the_reference(records, data):
    raw = bytearray(encode(records))
    if data.draw(st.booleans()):
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    else:
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    verdicts = []
    for source in (native, records_py):
        try:
            verdicts.append(source.records_to_tuples(
                bytes(raw), 0, len(raw), len(records), 0, BASE_TS, None, "f.log", 0, "t", 0, 0,
                None, Record))
        except CorruptRecordError as exc:
            verdicts.append((exc.reason, exc.position))
    assert verdicts[0] == verdicts[1]


@settings(max_examples=500)
@given(st.binary(max_size=64), st.sampled_from([1, 2, 3, 7, 12, 1000, 2**31 - 1]))
def test_key_partition_is_kafkas_placement_for_any_key_and_partition_count(key, partitions):
    expected = to_positive(murmur2_py(key)) % partitions
    assert native.key_partition(key, partitions) == expected
    assert native.key_partition(bytearray(key), partitions) == expected
    assert native.key_partition(memoryview(b"xx" + key)[2:], partitions) == expected


def test_key_partition_refuses_bad_arguments():
    for partitions in (0, -3, 2**31):
        with pytest.raises(ValueError):
            native.key_partition(b"k", partitions)
    with pytest.raises(TypeError):
        native.key_partition("a str key", 3)
    with pytest.raises(TypeError):
        native.key_partition(b"k")
