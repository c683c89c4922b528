"""Whole batches built and read through the native codec and through the Python reference agree.

test_codec_parity.py compares the records-section functions; here the whole
of build_batch / build_control_batch runs twice in one process, once with
storage.codec bound to the native functions and once to records_py's, so the
header, the CRC, the compression step and the decoded views are covered too.
record_batch reads `codec.<name>` at call time, which is what lets the test
rebind it (test_record_batch_calls_the_codec_bound_at_call_time proves it).
"""
import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlog import native
from streamlog.storage import codec, compression, records_py
from streamlog.storage import record_batch as rb

# STREAMLOG_EXPECT_NATIVE=1 already fails the session when the module is missing (conftest).
pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason=str(native.UNAVAILABLE_REASON))

CODEC_NAMES = ("crc32c", "records_bound", "records_encode_into", "records_decode",
               "records_to_tuples", "slices_to_list", "gather", "gather_many")
SOURCES = {"native": native, "python": records_py}

COMPRESSIONS = [compression.NONE, compression.GZIP] + \
    ([compression.ZSTD] if compression._zstd is not None else []) + \
    ([compression.LZ4] if compression._lz4 is not None else [])

INT16 = st.integers(-1, 2**15 - 1)
INT32 = st.integers(-1, 2**31 - 1)
INT64 = st.integers(-1, 2**63 - 1)
TIMESTAMPS = st.integers(-2**40, 2**50)

maybe_bytes = st.one_of(st.none(), st.binary(max_size=200))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))


@contextlib.contextmanager
def codec_bound_to(source):
    """Rebind storage.codec's functions to `source` (native or records_py) for the block."""
    saved = {name: getattr(codec, name) for name in CODEC_NAMES}
    try:
        for name in CODEC_NAMES:
            setattr(codec, name, getattr(source, name))
        yield
    finally:
        for name, fn in saved.items():
            setattr(codec, name, fn)


@st.composite
def batch_args(draw):
    n = draw(st.integers(1, 25))
    values = draw(st.lists(maybe_bytes, min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(maybe_bytes, min_size=n, max_size=n)))
    headers = draw(st.one_of(st.none(), st.lists(st.lists(header, max_size=3), min_size=n,
                                                 max_size=n)))
    kwargs = {
        "keys": keys, "headers": headers, "base_offset": draw(st.integers(0, 2**62)),
        "compression_type": draw(st.sampled_from(COMPRESSIONS)),
        "timestamp_type": draw(st.sampled_from([rb.CREATE_TIME, rb.LOG_APPEND_TIME])),
        "producer_id": draw(INT64), "producer_epoch": draw(INT16),
        "base_sequence": draw(INT32), "is_transactional": draw(st.booleans()),
        "partition_leader_epoch": draw(INT32)}
    if draw(st.booleans()):
        kwargs["timestamps"] = draw(st.lists(TIMESTAMPS, min_size=n, max_size=n))
    else:
        kwargs["timestamp"] = draw(TIMESTAMPS)
    return values, kwargs


def expected_records(values, kwargs):
    """(offset, timestamp, key, value, headers) per record, as the input describes them."""
    n = len(values)
    stamps = kwargs.get("timestamps") or [kwargs.get("timestamp")] * n
    if kwargs["timestamp_type"] == rb.LOG_APPEND_TIME:
        stamps = [max(stamps)] * n  # invariant 4 of record_batch: maxTimestamp for every record
    keys = kwargs["keys"] or [None] * n
    headers = kwargs["headers"] or [[]] * n
    return [(kwargs["base_offset"] + i, stamps[i], keys[i], values[i], list(headers[i]))
            for i in range(n)]


def decode(data, source):
    """Everything a reader gets from the batch, decoded with codec bound to `source`."""
    with codec_bound_to(source):
        batch = rb.RecordBatch(data)
        batch.ensure_valid()
        records = list(batch.records())
        tuples, with_headers = batch.tuples()
    return batch, records, tuples, with_headers


@settings(max_examples=400)
@given(batch_args(), st.booleans())
def test_whole_batches_are_bit_identical_and_round_trip(args, reuse_buffer):
    values, kwargs = args
    built = {}
    for name, source in SOURCES.items():
        # A reused buffer holding garbage from an earlier, larger batch must not leak into this one.
        buffer = bytearray(b"\xee" * 5000) if reuse_buffer else None
        with codec_bound_to(source):
            built[name] = bytes(rb.build_batch(values, buffer=buffer, **kwargs))
    # Compression runs the same library call on the same records bytes in both, so even
    # compressed batches are identical; their decoded records are compared below as well.
    assert built["native"] == built["python"]

    want = expected_records(values, kwargs)
    data = built["native"]
    for source in SOURCES.values():  # each codec decodes the batch to exactly the input
        batch, records, tuples, with_headers = decode(data, source)
        assert records == want
        assert tuples == [r[:4] for r in want]
        assert with_headers == sum(1 for r in want if r[4])
        assert (batch.base_offset, batch.last_offset_delta, batch.records_count) == \
            (kwargs["base_offset"], len(values) - 1, len(values))
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence,
                batch.partition_leader_epoch) == (kwargs["producer_id"], kwargs["producer_epoch"],
                                                  kwargs["base_sequence"],
                                                  kwargs["partition_leader_epoch"])
        assert batch.compression == kwargs["compression_type"]
        assert batch.timestamp_type == kwargs["timestamp_type"]
        assert batch.is_transactional == kwargs["is_transactional"] and not batch.is_control
        assert batch.max_timestamp == max(r[1] for r in want)


@settings(max_examples=200)
@given(st.sampled_from([rb.CONTROL_ABORT, rb.CONTROL_COMMIT]), INT64, INT16, INT32, TIMESTAMPS,
       st.integers(0, 2**62))
def test_control_batches_are_bit_identical_and_round_trip(control_type, producer_id,
                                                          producer_epoch, coordinator_epoch,
                                                          timestamp, base_offset):
    built = {}
    for name, source in SOURCES.items():
        with codec_bound_to(source):
            built[name] = bytes(rb.build_control_batch(
                control_type, producer_id=producer_id, producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch, timestamp=timestamp,
                base_offset=base_offset))
    assert built["native"] == built["python"]
    for source in SOURCES.values():
        batch, records, _, _ = decode(built["native"], source)
        with codec_bound_to(source):
            assert batch.control_type() == control_type
        assert batch.is_control and batch.is_transactional
        assert (batch.producer_id, batch.producer_epoch, batch.base_offset) == \
            (producer_id, producer_epoch, base_offset)
        [(offset, ts, key, value, headers)] = records
        assert (offset, ts, headers) == (base_offset, timestamp, [])
        assert rb._CONTROL_KEY.unpack(key) == (0, control_type)
        assert rb._END_TXN_VALUE.unpack(value) == (0, coordinator_epoch)


def test_record_batch_calls_the_codec_bound_at_call_time():
    """The premise of this file: rebinding storage.codec's names reroutes record_batch."""
    for source in SOURCES.values():
        called = set()

        def spy(name, fn, called=called):
            def wrapper(*a, **kw):
                called.add(name)
                return fn(*a, **kw)
            return wrapper
        spies = type("Spies", (), {n: staticmethod(spy(n, getattr(source, n)))
                                   for n in CODEC_NAMES})
        with codec_bound_to(spies):
            data = rb.build_batch([b"v", None], keys=[b"k", None], headers=[[("h", b"1")], []],
                                  timestamp=5)
            batch = rb.RecordBatch(data)
            list(batch.records())
            batch.tuples()
        assert called >= {"records_bound", "records_encode_into", "crc32c", "records_decode",
                          "slices_to_list", "records_to_tuples"}
    # and the binding is restored afterwards
    assert codec.records_encode_into is (native if codec.NATIVE else records_py).records_encode_into
