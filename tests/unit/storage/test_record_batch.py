"""RecordBatch v2: a batch assembled by hand from the format spec, header fields,
validation, compression, control batches and the decoded views."""
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlog.errors import CorruptRecordError, InvalidRecordError
from streamlog.storage import compression, records_py
from streamlog.storage import record_batch as rb

from support import bitwise_crc32c


def hand_made_batch():
    """Two records written field by field from the RecordBatch v2 / Record spec.

    record 0: key b"k", value b"v1", timestamp delta 0, no headers
    record 1: null key, value b"xyz", timestamp delta 5, header ("h", b"1")
    """
    record0 = bytes.fromhex(
        "12"        # length varint: 9
        "00"        # attributes
        "00"        # timestampDelta varlong 0
        "00"        # offsetDelta varint 0
        "02" "6b"   # keyLength 1, 'k'
        "04" "7631"  # valueLength 2, 'v1'
        "00")       # headerCount 0
    record1 = bytes.fromhex(
        "1a"        # length varint: 13
        "00"        # attributes
        "0a"        # timestampDelta varlong 5
        "02"        # offsetDelta varint 1
        "01"        # keyLength -1 (null)
        "06" "78797a"  # valueLength 3, 'xyz'
        "02"        # headerCount 1
        "02" "68"   # header key length 1, 'h'
        "02" "31")  # header value length 1, '1'
    records = record0 + record1
    after_crc = bytes.fromhex(
        "0000"              # attributes: no compression, CreateTime
        "00000001"          # lastOffsetDelta 1
        "00000000000003e8"  # baseTimestamp 1000
        "00000000000003ed"  # maxTimestamp 1005
        "ffffffffffffffff"  # producerId -1
        "ffff"              # producerEpoch -1
        "ffffffff"          # baseSequence -1
        "00000002") + records  # recordsCount 2
    crc = bitwise_crc32c(after_crc)
    head = bytes.fromhex(
        "0000000000000005"  # baseOffset 5
        "00000049"          # batchLength 73 = 61 - 12 + 24
        "ffffffff"          # partitionLeaderEpoch -1
        "02")               # magic
    return head + struct.pack(">I", crc) + after_crc


def test_builder_writes_the_hand_made_bytes():
    built = rb.build_batch([b"v1", b"xyz"], keys=[b"k", None], headers=[[], [("h", b"1")]],
                           timestamps=[1000, 1005], base_offset=5)
    assert bytes(built) == hand_made_batch()


def test_hand_made_bytes_parse_and_decode():
    batch = rb.RecordBatch(hand_made_batch())
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (5, 6, 2)
    assert (batch.base_timestamp, batch.max_timestamp) == (1000, 1005)
    assert batch.size_in_bytes == 85 and batch.is_valid()
    assert list(batch.records()) == [(5, 1000, b"k", b"v1", []),
                                     (6, 1005, None, b"xyz", [("h", b"1")])]


def test_python_reference_decodes_the_hand_made_records():
    raw = hand_made_batch()
    cols = records_py.records_decode(raw, 61, len(raw) - 61, 2)
    offset_deltas, ts_deltas, key_pos, key_lens, value_pos, value_lens, _, _, counts = cols
    assert offset_deltas.tolist() == [0, 1] and ts_deltas.tolist() == [0, 5]
    assert key_lens.tolist() == [1, -1] and value_lens.tolist() == [2, 3]
    assert raw[value_pos[1]:value_pos[1] + 3] == b"xyz" and counts.tolist() == [0, 1]


def test_header_fields_round_trip():
    built = rb.build_batch([b"a", b"b", b"c"], timestamps=[7, 3, 9], base_offset=2**40,
                           producer_id=77, producer_epoch=3, base_sequence=2**31 - 2,
                           is_transactional=True, partition_leader_epoch=12)
    batch = rb.RecordBatch(built)
    assert batch.base_offset == 2**40 and batch.partition_leader_epoch == 12
    assert batch.producer_id == 77 and batch.producer_epoch == 3
    assert batch.base_sequence == 2**31 - 2
    assert batch.last_sequence == 0  # wraps past Int.MAX to 0, as Kafka's incrementSequence
    assert batch.is_transactional and not batch.is_control
    assert batch.max_timestamp == 9 and batch.base_timestamp == 7
    assert batch.records().timestamps.tolist() == [7, 3, 9]


@pytest.mark.parametrize("codec", [compression.GZIP, compression.ZSTD, compression.LZ4])
def test_compressed_batches_round_trip(codec):
    values = [b"value-%d" % i * 20 for i in range(200)]
    built = rb.build_batch(values, keys=[b"k%d" % i for i in range(200)], timestamp=5,
                           compression_type=codec)
    batch = rb.RecordBatch(bytes(built))
    assert batch.compression == codec and batch.is_valid()
    assert len(built) < sum(map(len, values))
    assert batch.records().values() == values


@pytest.mark.parametrize("framed", [False, True], ids=["raw block", "xerial"])
def test_a_snappy_block_claiming_an_absurd_length_is_corrupt_not_an_abort(framed):
    # The decoder allocates the block's declared length before decoding: a flipped bit in
    # it (a server's fuzz test found one: 182 GB) must be refused before, as corrupt.
    block = bytearray(compression.compress(compression.SNAPPY, b"abc" * 1000)[16 + 4:])
    honest = compression.decompress(compression.SNAPPY, bytes(block))   # a raw block
    assert honest == b"abc" * 1000
    block[:5] = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])     # 2**32 - 1 bytes claimed
    data = bytes(block)
    if framed:
        data = compression.compress(compression.SNAPPY, b"")[:16] + \
            struct.pack(">i", len(data)) + data
    with pytest.raises(compression.CodecError, match="claims 4294967295 bytes"):
        compression.decompress(compression.SNAPPY, data)


def test_gzip_payload_is_a_gzip_stream():
    built = rb.build_batch([b"x" * 100], timestamp=1, compression_type=compression.GZIP)
    assert bytes(built[61:63]) == b"\x1f\x8b"  # gzip magic: readable by Kafka's GZIPInputStream


def test_control_batch_layout():
    built = rb.build_control_batch(rb.CONTROL_COMMIT, producer_id=9, producer_epoch=1,
                                   coordinator_epoch=4, timestamp=100)
    batch = rb.RecordBatch(built)
    assert batch.is_control and batch.is_transactional and batch.records_count == 1
    assert batch.control_type() == rb.CONTROL_COMMIT
    (_, _, key, value, _), = batch.records()
    assert key == b"\x00\x00\x00\x01" and value == b"\x00\x00\x00\x00\x00\x04"


@settings(max_examples=100)
@given(st.integers(-2**15, 2**15 - 1), st.integers(0, 2**40), st.integers(-2**20, 2**20),
       st.sampled_from([compression.NONE, compression.GZIP]), st.integers(-2**31, 2**31 - 1))
def test_control_type_read_in_place_is_the_decoded_keys(kind, timestamp, delta, codec_id,
                                                        coordinator_epoch):
    """control_type() and end_txn_marker() read an uncompressed batch's first record without
    decoding the batch: the same answers as the decode, whatever the varints around the key
    and value take."""
    value = rb._END_TXN_VALUE.pack(0, coordinator_epoch)
    built = rb.build_batch([value, b"v"],
                           keys=[rb._CONTROL_KEY.pack(0, kind), b"other"],
                           timestamps=[timestamp, timestamp + delta], is_control=True,
                           is_transactional=True, compression_type=codec_id)
    batch = rb.RecordBatch(built)
    decoded = batch.records()
    assert batch.control_type() == rb._CONTROL_KEY.unpack(decoded.key(0))[1] == kind
    marker = kind in (rb.CONTROL_ABORT, rb.CONTROL_COMMIT)
    assert batch.end_txn_marker() == \
        (kind, rb._END_TXN_VALUE.unpack(decoded.values()[0])[1] if marker else -1)
    assert batch.end_txn_marker()[1] == (coordinator_epoch if marker else -1)


def test_control_type_refuses_a_bad_key_and_checks_the_crc_unless_told_not_to():
    keyless = rb.RecordBatch(rb.build_batch([b"v"], timestamp=1, is_control=True))
    with pytest.raises(CorruptRecordError, match="without a valid key"):
        keyless.control_type()
    built = rb.build_control_batch(rb.CONTROL_ABORT, producer_id=1, producer_epoch=0,
                                   coordinator_epoch=0, timestamp=5)
    built[-2] ^= 0xFF   # in the value: the key still reads, the CRC no longer matches
    batch = rb.RecordBatch(built)
    with pytest.raises(CorruptRecordError, match="CRC"):
        batch.control_type()
    assert batch.control_type(verify=False) == rb.CONTROL_ABORT
    long_key = rb.build_control_batch(rb.CONTROL_ABORT, producer_id=1, producer_epoch=0,
                                      coordinator_epoch=0, timestamp=5)
    long_key[rb.RECORDS_OFFSET + 4] = 0x7E   # key length 63: past the end of the batch
    with pytest.raises(CorruptRecordError, match="past the end"):
        rb.RecordBatch(long_key).control_type(verify=False)
    valueless = rb.build_batch([None], keys=[rb._CONTROL_KEY.pack(0, rb.CONTROL_COMMIT)],
                               timestamp=1, is_control=True)
    assert rb.RecordBatch(valueless).control_type() == rb.CONTROL_COMMIT
    with pytest.raises(CorruptRecordError, match="without a valid value"):
        rb.RecordBatch(valueless).end_txn_marker()


def test_log_append_time_uses_max_timestamp_for_every_record():
    built = rb.build_batch([b"a", b"b"], timestamps=[1, 2])
    rb.set_max_timestamp(built, 0, rb.LOG_APPEND_TIME, 999)
    batch = rb.RecordBatch(built)
    assert batch.timestamp_type == rb.LOG_APPEND_TIME and batch.is_valid()
    assert batch.records().timestamps.tolist() == [999, 999]


def test_every_flipped_crc_covered_byte_is_detected():
    raw = bytearray(hand_made_batch())
    for pos in range(rb.ATTRIBUTES_OFFSET, len(raw)):
        raw[pos] ^= 0x40
        assert not rb.RecordBatch(raw).is_valid(), pos
        with pytest.raises(CorruptRecordError):
            rb.RecordBatch(raw).records()
        raw[pos] ^= 0x40
    assert rb.RecordBatch(raw).is_valid()


def test_crc_error_names_file_and_position():
    raw = bytearray(hand_made_batch())
    raw[70] ^= 1
    batch = rb.RecordBatch(raw, 0, path="/x/00000000000000000000.log", file_position=4096)
    with pytest.raises(CorruptRecordError) as info:
        batch.records()
    assert info.value.path.endswith(".log") and info.value.position == 4096
    assert "00000000000000000000.log" in str(info.value) and "4096" in str(info.value)


def test_bad_magic_and_short_length_are_corrupt():
    raw = bytearray(hand_made_batch())
    raw[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        rb.RecordBatch(raw).ensure_valid()
    raw[16] = 2
    struct.pack_into(">i", raw, 8, 10)
    with pytest.raises(CorruptRecordError, match="below"):
        rb.RecordBatch(raw).ensure_valid()


def test_iter_batches_stops_at_a_partial_tail():
    one = bytes(rb.build_batch([b"a"], timestamp=1))
    two = bytes(rb.build_batch([b"b"], timestamp=1, base_offset=1))
    data = one + two[:-1]
    assert [b.base_offset for b in rb.iter_batches(data)] == [0]
    assert [b.base_offset for b in rb.iter_batches(one + two)] == [0, 1]


def test_builder_refuses_bad_input():
    with pytest.raises(InvalidRecordError):
        rb.build_batch([], timestamp=1)
    with pytest.raises(InvalidRecordError):
        rb.build_batch([b"a"])  # no timestamp
    with pytest.raises(InvalidRecordError):
        rb.build_batch([b"a"], keys=[b"k", b"l"], timestamp=1)


def test_columnar_gather_matches_values():
    values = [b"", None, b"abc", b"de"]
    recs = rb.RecordBatch(rb.build_batch(values, timestamp=1)).records()
    data, offsets = recs.gather_values()
    assert offsets.tolist() == [0, 0, 0, 3, 5] and bytes(data) == b"abcde"
    assert recs.values() == values and isinstance(recs.offsets, np.ndarray)


@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP])
def test_encoding_into_a_reused_buffer_gives_the_same_bytes(codec):
    buffer = bytearray()
    for n in (50, 3, 200, 1):  # grow, shrink, grow: stale bytes must never leak in
        values = [b"v%d-" % i * (i % 5 + 1) for i in range(n)]
        fresh = rb.build_batch(values, keys=[b"k"] * n, timestamp=n, compression_type=codec)
        reused = rb.build_batch(values, keys=[b"k"] * n, timestamp=n, compression_type=codec,
                                buffer=buffer)
        assert isinstance(reused, memoryview) and bytes(reused) == bytes(fresh)
        assert rb.RecordBatch(bytes(reused)).records().values() == values
        reused.release()  # the view must be gone before the buffer is reused


def test_recompressed_from_records_decoded_already_is_the_same_batch():
    # The log hands recompressed the records its checks decoded: the copy must not differ.
    for source in (compression.NONE, compression.GZIP):
        built = rb.build_batch([b"a" * 50, None, b"c"], keys=[b"k", b"l", None],
                               timestamps=[5, 3, 9], compression_type=source)
        batch = rb.RecordBatch(built)
        for target in (compression.NONE, compression.GZIP):
            assert rb.recompressed(batch, target, batch.records()) == \
                rb.recompressed(batch, target)
