"""Bad arguments fail in the call that made them, alone, with a typed error naming them.

A record joins a batch shared with other calls' records: anything wrong with it that is found
only when the batch is encoded fails every record of that batch. These tests send good records
around each bad call and check the good ones are all written.
"""
import glob
import struct
import sys

import numpy as np
import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.storage import compression

from support import bitwise_crc32c


def drain(db, topic, partitions=1):
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    total = sum(p.high_watermark for p in db.describe_topic(topic).partitions)
    out = []
    while len(out) < total:
        records = consumer.poll(timeout=5.0)
        assert records, "records below the high watermark did not come"
        out.extend(records)
    consumer.close()
    return out


# --- send(): one bad call fails alone -------------------------------------------------


BAD_SENDS = [
    ({"timestamp_ms": "now"}, TypeError, "timestamp_ms"),
    ({"timestamp_ms": 1.5}, TypeError, "timestamp_ms"),
    ({"timestamp_ms": True}, TypeError, "timestamp_ms"),
    ({"timestamp_ms": -1}, ValueError, "timestamp_ms"),
    ({"timestamp_ms": 2**63}, ValueError, "timestamp_ms"),
    ({"headers": {"h": b"v"}}, TypeError, "list"),
    ({"headers": 7}, TypeError, "headers"),
    # It said "set a 'h'_serializer": headers have no serializer.
    ({"headers": [("h", "text")]}, TypeError, "header 'h' must be bytes .*encode it to bytes"),
    ({"headers": [(b"h", b"v")]}, TypeError, "header key"),
    ({"headers": [("h",)]}, TypeError, "pair"),
    ({"key": 42}, TypeError, "key must be bytes .*key_serializer"),
    ({"value": "text"}, TypeError, "value must be bytes .*value_serializer"),
]


@pytest.mark.parametrize("bad, error, named", BAD_SENDS)
def test_a_bad_send_fails_in_the_call_and_the_records_around_it_are_written(db, bad, error,
                                                                            named):
    """The reported case: send(..., timestamp_ms="now") was accepted, and the batch it joined
    failed at encoding: 0 records written, and flush() returned normally."""
    db.create_topic("t")
    producer = db.producer(linger_ms=60_000)  # every good record shares one batch
    before = [producer.send("t", value=b"before-%d" % i) for i in range(3)]
    args = {"value": b"bad"}
    args.update(bad)
    with pytest.raises(error, match=named):
        producer.send("t", **args)
    after = [producer.send("t", value=b"after-%d" % i) for i in range(3)]
    producer.flush()
    assert [f.result().offset for f in before + after] == list(range(6))
    assert [r.value for r in drain(db, "t")] == [b"before-0", b"before-1", b"before-2",
                                                 b"after-0", b"after-1", b"after-2"]


def test_good_headers_and_timestamps_still_round_trip(db):
    db.create_topic("t")
    producer = db.producer()
    producer.send("t", value=b"v", headers=[("a", b"1"), ("a", None), ("b", bytearray(b"2"))],
                  timestamp_ms=0).result()
    (record,) = drain(db, "t")
    assert record.headers == (("a", b"1"), ("a", None), ("b", b"2")) and record.timestamp == 0


# --- send_batch() -------------------------------------------------------------------


def test_send_batch_names_the_bad_item_and_queues_nothing(db):
    db.create_topic("t")
    producer = db.producer()
    with pytest.raises(TypeError, match=r"keys\[1\]"):
        producer.send_batch("t", [b"a", b"b"], keys=[b"k", 2])
    with pytest.raises(TypeError, match=r"values\[2\]"):
        producer.send_batch("t", [b"a", b"b", "c"])
    with pytest.raises(TypeError, match="list"):
        producer.send_batch("t", (b"v%d" % i for i in range(3)))
    with pytest.raises(TypeError, match="values must be a sequence .* not NoneType"):
        producer.send_batch("t", None)  # was len()'s "object of type 'NoneType' has no len()"
    with pytest.raises(ValueError, match="keys has 1 items, values has 2"):
        producer.send_batch("t", [b"a", b"b"], keys=[b"k"])
    with pytest.raises(ValueError, match=r"timestamps\[1\]"):
        producer.send_batch("t", [b"a", b"b"], timestamps=[5, -5])
    with pytest.raises(TypeError, match=r"timestamps\[0\]"):
        producer.send_batch("t", [b"a"], timestamps=["now"])
    with pytest.raises(TypeError, match=r"timestamps\[1\].*not None"):
        producer.send_batch("t", [b"a", b"b"], timestamps=[1, None])
    with pytest.raises(TypeError, match=r"timestamps\[0\].*bool"):
        producer.send_batch("t", [b"a", b"b"], timestamps=[True, 1])  # as send() refuses it
    with pytest.raises(TypeError, match=r"headers\[0\]"):
        producer.send_batch("t", [b"a"], headers=[{"h": b"v"}])
    with pytest.raises(ValueError, match="timestamp_ms"):
        producer.send_batch("t", [b"a"], timestamp_ms=-3)
    producer.flush()
    assert db.describe_topic("t").partitions[0].high_watermark == 0
    producer.send_batch("t", [b"a", b"b"], keys=[b"k", None], timestamps=[1, 2],
                        headers=[[("h", b"v")], None]).result()
    producer.send_batch("t", (b"c",), timestamps=np.array([3], dtype=np.uint64),
                        headers=[()]).result()
    assert [(r.key, r.value, r.timestamp, r.headers) for r in drain(db, "t")] == [
        (b"k", b"a", 1, (("h", b"v"),)), (None, b"b", 2, ()), (None, b"c", 3, ())]


# --- flush() never reports a failed append as success ------------------------------------


def test_flush_raises_when_records_it_flushed_failed(db):
    db.create_topic("t")
    producer = db.producer(linger_ms=60_000)
    futures = [producer.send("t", value=b"v%d" % i) for i in range(4)]
    db.delete_topic("t")  # the lingering batch's append fails
    with pytest.raises(streamlog.UnknownTopicOrPartitionError) as raised:
        producer.flush()
    assert "4 record(s) in 1 batch(es)" in " ".join(raised.value.__notes__)
    for future in futures:
        with pytest.raises(streamlog.UnknownTopicOrPartitionError):
            future.result()
    producer.flush()  # reported once: nothing failed since


def test_flush_and_close_check_their_timeout_as_poll_does(db):
    """flush("1") and close("1") failed inside with "unsupported operand type(s) for +", the
    close() after having closed the producer; a negative timeout passed as 0. Kafka's
    close(Duration) refuses a negative one ("The timeout cannot be negative.")."""
    db.create_topic("t")
    producer = db.producer(linger_ms=60_000)
    future = producer.send("t", value=b"v")
    for call in (producer.flush, producer.close):
        with pytest.raises(TypeError, match=r"timeout must be a number of seconds"):
            call(timeout="1")
        with pytest.raises(ValueError, match=r"timeout must be >= 0 seconds, got -1"):
            call(timeout=-1)
    assert not producer.closed and not future.done()
    producer.close(timeout=5)
    assert future.result().offset == 0


# --- consumer and admin arguments ----------------------------------------------------------


def test_consumer_arguments_are_checked(db):
    db.create_topic("t")
    consumer = db.consumer()
    consumer.assign([TopicPartition("t", 0)])
    with pytest.raises(TypeError, match="timeout"):
        consumer.poll(timeout="1")
    with pytest.raises(ValueError, match="timeout"):
        consumer.poll(timeout=-1)  # Kafka: "Timeout must not be negative"
    for call in (consumer.poll, consumer.poll_batch):  # 0 was max.poll.records to poll()
        with pytest.raises(ValueError, match="max_records must be a positive int, got 0"):
            call(timeout=0, max_records=0)
    with pytest.raises(ValueError, match="seek offset"):
        consumer.seek(TopicPartition("t", 0), 2**63)
    with pytest.raises(TypeError, match="seek offset"):
        consumer.seek(TopicPartition("t", 0), "10")
    assert consumer.poll(timeout=0) == []
    with pytest.raises(streamlog.InvalidConfigurationError, match="group.id"):
        db.consumer(group_id="")  # KIP-289: "" is no group id; None is


def test_a_bad_subscription_pattern_and_bad_group_metadata_are_named(db):
    """subscribe(pattern="[") raised re.error ("unterminated character set at position 0"),
    and send_offsets_to_transaction(offsets, 42) an AttributeError ('int' object has no
    attribute 'group_id') after the group's partition had joined the transaction."""
    db.create_topic("t")
    consumer = db.consumer(group_id="g")
    with pytest.raises(streamlog.InvalidRegularExpressionError, match=r"pattern '\[' is not"):
        consumer.subscribe(pattern="[")
    assert consumer.subscription() == set()
    producer = db.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    with pytest.raises(TypeError, match="group_metadata\\(\\) \\(or a group id str\\), not int"):
        producer.send_offsets_to_transaction({TopicPartition("t", 0): 1}, 42)
    producer.send("t", value=b"v")
    producer.commit_transaction()   # the refused call left the transaction whole
    consumer.close()
    producer.close()


def test_one_partition_where_a_list_or_a_dict_is_taken_is_named_in_the_call(db):
    """consumer.committed(tp), with the list left out, iterated the TopicPartition into its
    fields: TypeError "TopicPartition.__new__() missing 1 required positional argument", from
    a line of the consumer; a two-letter topic name given to end_offsets() was read as the
    partition ("a", "b"); db.delete_group_offsets("g", tp) raised a TypeError of the same kind from the
    group coordinator."""
    db.create_topic("ab")
    tp = TopicPartition("ab", 0)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest")
    consumer.assign([("ab", 0)])   # (topic, partition) pairs stay accepted
    calls = {"assign()": lambda a: consumer.assign(a),
             "pause()": lambda a: consumer.pause(a),
             "resume()": lambda a: consumer.resume(a),
             "seek_to_beginning()": lambda a: consumer.seek_to_beginning(a),
             "seek_to_end()": lambda a: consumer.seek_to_end(a),
             "beginning_offsets()": lambda a: consumer.beginning_offsets(a),
             "end_offsets()": lambda a: consumer.end_offsets(a),
             "committed()": lambda a: consumer.committed(a),
             "reset_group_offsets()": lambda a: db.reset_group_offsets("g", a, "earliest"),
             "delete_group_offsets()": lambda a: db.delete_group_offsets("g", a)}
    for call, fn in calls.items():
        with pytest.raises(TypeError, match=rf"{call[:-2]}\(\) takes a list of "
                                            r"TopicPartitions, not TopicPartition.*pass \["):
            fn(tp)
        with pytest.raises(TypeError, match=rf"{call[:-2]}\(\) takes a list of "
                                            r"TopicPartitions, not the str 'ab'"):
            fn("ab")
        with pytest.raises(TypeError, match=rf"{call[:-2]}\(\) takes TopicPartitions .* "
                                            r"not 'ab'"):
            fn(["ab"])
    with pytest.raises(TypeError, match=r"position\(\) takes TopicPartitions"):
        consumer.position([tp])
    producer = db.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    dicts = {"commit()": lambda a: consumer.commit(a),
             "offsets_for_times()": lambda a: consumer.offsets_for_times(a),
             "alter_group_offsets()": lambda a: db.alter_group_offsets("g", a),
             "send_offsets_to_transaction()":
                 lambda a: producer.send_offsets_to_transaction(a, "g")}
    for call, fn in dicts.items():
        with pytest.raises(TypeError, match=rf"{call[:-2]}\(\) takes a dict"):
            fn([tp])
        with pytest.raises(TypeError, match=rf"{call[:-2]}\(\) takes TopicPartitions"):
            fn({"ab": 0})
    producer.send("ab", value=b"v")
    producer.commit_transaction()   # the refused calls left the transaction whole
    assert consumer.end_offsets([tp]) == {tp: 2}
    assert consumer.position(tp) == 0
    consumer.commit({tp: 1})
    assert consumer.committed([tp]) == {tp: streamlog.OffsetAndMetadata(1)}
    consumer.close()
    producer.close()


def test_altering_committed_offsets_past_the_log_end_is_refused(db):
    db.create_topic("t")
    db.producer().send_batch("t", [b"a", b"b", b"c"]).result()
    tp = TopicPartition("t", 0)
    db.alter_group_offsets("g", {tp: 3})  # the log end itself is fine
    with pytest.raises(streamlog.OffsetOutOfRangeError, match=r"outside \[0, 3\]"):
        db.alter_group_offsets("g", {tp: 10})
    with pytest.raises(streamlog.OffsetOutOfRangeError):
        db.alter_group_offsets("g", {tp: -1})
    with pytest.raises(streamlog.UnknownTopicOrPartitionError):
        db.alter_group_offsets("g", {TopicPartition("t", 5): 0})
    lag = db.describe_group("g").partitions[tp]
    assert (lag.committed, lag.lag) == (3, 0)
    assert db.reset_group_offsets("g", [tp], "offset", 10) == {tp: 3}  # clamps, as the tool


def test_every_call_that_commits_offsets_takes_the_same_value_forms(db):
    """An offset, an OffsetAndMetadata, an (offset, metadata) pair or an (offset,
    metadata, leader epoch) triple, in each call that stores committed offsets (one
    reading: OffsetAndMetadata.of); a tuple of another length is refused by name, not by a
    constructor's TypeError."""
    db.create_topic("t")
    db.producer().send_batch("t", [b"a", b"b", b"c"]).result()
    tp = TopicPartition("t", 0)
    consumer = db.consumer(group_id="g", enable_auto_commit=False)
    consumer.assign([tp])
    calls = {"commit": lambda o: consumer.commit(o),
             "alter_group_offsets": lambda o: db.alter_group_offsets("g", o)}
    for name, call in calls.items():
        for value, want in [(1, streamlog.OffsetAndMetadata(1)),
                            (streamlog.OffsetAndMetadata(2, "x"),
                             streamlog.OffsetAndMetadata(2, "x")),
                            ((2, name, 6), streamlog.OffsetAndMetadata(2, name, 6)),
                            ((3, name), streamlog.OffsetAndMetadata(3, name))]:
            call({tp: value})
            assert consumer.committed([tp]) == {tp: want}, (name, value)
        with pytest.raises(ValueError, match=r"an \(offset, metadata, leader epoch\), "
                                             r"not \(1, 'm', 2, 3\)"):
            call({tp: (1, "m", 2, 3)})
    assert consumer.committed([tp]) == {tp: streamlog.OffsetAndMetadata(3, "alter_group_offsets")}
    consumer.close()


def test_to_arrow_without_pyarrow_names_the_extra(db, monkeypatch):
    db.create_topic("t")
    db.producer().send("t", value=b"v").result()
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition("t", 0)])
    (columns,) = consumer.poll_batch(timeout=5.0)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails
    with pytest.raises(ImportError, match=r"streamlog\[arrow\]"):
        columns.to_arrow()


# --- snappy: supported, in Kafka's Java framing ------------------------------------------------

# snappy-java's xerial stream of b"hello": magic, version 1, compatible 1, one block of
# 7 bytes: the raw snappy block (varint length 5, literal tag (5-1)<<2, the bytes).
XERIAL_HELLO = (b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", 7) +
                b"\x05\x10hello")


def test_snappy_uses_the_xerial_framing_and_reads_raw_blocks_too():
    assert compression.compress(compression.SNAPPY, b"hello") == XERIAL_HELLO
    assert compression.decompress(compression.SNAPPY, XERIAL_HELLO) == b"hello"
    assert compression.decompress(compression.SNAPPY, b"\x05\x10hello") == b"hello"
    big = bytes(range(256)) * 1000  # several 32 KiB blocks
    assert compression.decompress(compression.SNAPPY,
                                  compression.compress(compression.SNAPPY, big)) == big
    with pytest.raises(compression.CodecError):
        compression.decompress(compression.SNAPPY, XERIAL_HELLO[:-3])


def test_a_snappy_producer_round_trips_through_the_log(db):
    db.create_topic("t")
    producer = db.producer(compression_type="snappy", linger_ms=10_000)
    for i in range(500):
        producer.send("t", key=b"k%d" % i, value=b"value-%d" % i * 20)
    producer.flush()
    records = drain(db, "t")
    assert [(r.key, r.value) for r in records] == [(b"k%d" % i, b"value-%d" % i * 20)
                                                   for i in range(500)]


# --- a payload that does not decompress is corruption, not a codec library's error ------------


def test_a_crc_valid_gzip_batch_with_a_garbled_payload_is_corrupt_record_error(db_path):
    """It raised zlib.error from poll(): zlib.error is neither OSError nor ValueError."""
    with streamlog.open(db_path) as db:
        db.create_topic("t")
        db.producer(compression_type="gzip").send("t", value=b"x" * 1000).result()
    (log_file,) = glob.glob(f"{db_path}/t-0/*.log")
    with open(log_file, "r+b") as f:
        data = bytearray(f.read())
        data[61 + 12] ^= 0xFF                # inside the deflate stream (records section)
        crc = bitwise_crc32c(bytes(data[21:]))  # the CRC covers attributes to the end
        data[17:21] = crc.to_bytes(4, "big")
        f.seek(0)
        f.write(data)
    with streamlog.open(db_path) as db:
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("t", 0)])
        with pytest.raises(streamlog.CorruptRecordError, match="does not decompress"):
            consumer.poll(timeout=5.0)
