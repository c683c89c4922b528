"""A topic's compression.type decides the codec its batches are stored in.

Kafka's rule (docs, topic config `compression.type`; LogValidator.validateMessagesAndAssign
OffsetsCompressed with BrokerCompressionType.targetCompression): 'producer' (the default)
keeps the codec the producer chose; 'uncompressed', 'gzip', 'snappy', 'lz4' or 'zstd'
make the broker rebuild a produced batch whose codec differs, keeping its records and its
producer fields, and check the rebuilt batch's size against max.message.bytes again.
"""
import os
import time

import pytest
from kio.schema.errors import ErrorCode

import streamlog
from streamlog import TopicPartition
from streamlog.errors import InvalidRecordError, InvalidTimestampError, RecordTooLargeError
from streamlog.server.error_codes import error_code
from streamlog.storage import compression
from streamlog.storage.record_batch import RECORDS_OFFSET, RecordBatch, build_batch, seal
from streamlog.testing import records


def stored_batches(db, topic):
    log = db._broker.partition_log(TopicPartition(topic, 0))
    return list(log.read(0, 1 << 24).batches)


def sent(db, topic, compression_type, n=50):
    producer = db.producer(compression_type=compression_type, linger_ms=50)
    for i in range(n):
        producer.send(topic, key=b"k%d" % i, value=b"value %d " % i * 20,
                      headers=[("h", b"%d" % i)], timestamp_ms=1_000 + i, partition=0)
    producer.flush()
    producer.close()
    return [(b"k%d" % i, b"value %d " % i * 20, [("h", b"%d" % i)], 1_000 + i)
            for i in range(n)]


def read_back(db, topic):
    return [(r.key, r.value, list(r.headers), r.timestamp) for r in records(db, topic)]


@pytest.mark.parametrize("topic_codec, producer_codec, stored", [
    ("gzip", "none", compression.GZIP),
    ("zstd", "gzip", compression.ZSTD),
    ("lz4", "zstd", compression.LZ4),
    ("snappy", "none", compression.SNAPPY),
    ("uncompressed", "gzip", compression.NONE),
    ("producer", "lz4", compression.LZ4),
    ("producer", "none", compression.NONE),
])
def test_batches_are_stored_in_the_topics_codec(db, topic_codec, producer_codec, stored):
    db.create_topic("t", config={"compression.type": topic_codec})
    expected = sent(db, "t", producer_codec)
    batches = stored_batches(db, "t")
    assert batches and {b.compression for b in batches} == {stored}
    assert read_back(db, "t") == expected
    for batch in batches:
        batch.ensure_valid()   # a new CRC over the rebuilt batch


def _check_compressed_at(stored):
    """stored: [(batch, level)], the same records at two levels of one codec. Each batch's
    records are that codec's bytes at its level, the two differ, and they read back alike."""
    sections, records = [], []
    for batch, level in stored:
        section = bytes(batch.view()[RECORDS_OFFSET:batch.size_in_bytes])
        raw = compression.decompress(batch.compression, section)
        assert section == compression.compress(batch.compression, raw, level)
        sections.append(section)
        records.append(raw)
    assert sections[0] != sections[1]
    assert records[0] == records[1]


@pytest.mark.parametrize("codec, low, high", [("gzip", 1, 9), ("zstd", 1, 19),
                                               ("lz4", 9, 12)])
def test_a_rebuilt_batch_is_compressed_at_the_topics_level_of_its_codec(db, codec, low,
                                                                          high):
    # Kafka's LogConfig.compression: compression.gzip/lz4/zstd.level (KIP-390) set the level
    # LogValidator recompresses at (lz4's default, 9, its fast compressor: Lz4BlockOutputStream).
    # Each level gives its own bytes for the same records, and both read back the same.
    stored = []
    for level in (low, high):
        topic = f"{codec}-{level}"
        db.create_topic(topic, config={"compression.type": codec,
                                       f"compression.{codec}.level": level})
        producer = db.producer(compression_type="none", linger_ms=60_000)   # one batch
        for i in range(50):
            producer.send(topic, key=b"k%d" % i, value=b"value %d " % i * 20,
                          timestamp_ms=1_000 + i, partition=0)
        producer.flush()
        producer.close()
        (batch,) = stored_batches(db, topic)
        stored.append((batch, level))
    _check_compressed_at(stored)


@pytest.mark.parametrize("codec, low, high", [("gzip", 1, 9), ("zstd", 1, 19),
                                               ("lz4", 9, 12)])
def test_a_producer_compresses_at_its_level_of_its_codec(db, codec, low, high):
    # Kafka's ProducerConfig compression.gzip/lz4/zstd.level (KIP-390): the producer's own
    # batches, stored as sent on a topic that keeps the producer's codec. The level of
    # another codec is taken and has no say.
    db.create_topic("t")
    stored = []
    for level in (low, high):
        producer = db.producer(compression_type=codec, linger_ms=60_000,
                               **{f"compression.{codec}.level": level,
                                  "compression.gzip.level" if codec != "gzip"
                                  else "compression.zstd.level": 2})
        assert producer.settings[f"compression.{codec}.level"] == level
        for i in range(50):
            producer.send("t", key=b"k%d" % i, value=b"value %d " % i * 20,
                          timestamp_ms=1_000 + i, partition=0)
        producer.flush()
        producer.close()
        stored.append((stored_batches(db, "t")[-1], level))
    _check_compressed_at(stored)
    with pytest.raises(streamlog.InvalidConfigurationError,
                       match=rf"'compression.{codec}.level': must be an integer in \["):
        db.producer(**{f"compression.{codec}.level": 23})


def test_an_idempotent_batch_keeps_its_producer_fields_and_a_retry_is_a_duplicate(db):
    db.create_topic("t", config={"compression.type": "gzip"})
    log = db._broker.partition_log(TopicPartition("t", 0))
    pid, _ = db._broker.init_producer_id()
    batch = build_batch([b"a", b"b", b"c"], timestamp=5, producer_id=pid, producer_epoch=0,
                        base_sequence=0)
    first = log.append(bytes(batch))
    retry = log.append(bytes(batch))       # the same batch again: a producer's retry
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    (stored,) = stored_batches(db, "t")
    assert stored.compression == compression.GZIP
    assert (stored.producer_id, stored.producer_epoch, stored.base_sequence,
            stored.records_count, stored.last_offset_delta) == (pid, 0, 0, 3, 2)
    assert [r[3] for r in stored.tuples()[0]] == [b"a", b"b", b"c"]


def test_the_rebuilt_batch_is_held_to_max_message_bytes_again(db):
    # Random bytes do not compress: gzip's frame makes the stored batch larger than the sent
    # one, which fits max.message.bytes exactly (Kafka re-checks a recompressed batch).
    batch = bytes(build_batch([os.urandom(4_000)], timestamp=1))
    for topic, codec in (("t", "gzip"), ("kept", "producer")):
        db.create_topic(topic, config={"compression.type": codec,
                                       "max.message.bytes": len(batch)})
    with pytest.raises(RecordTooLargeError, match=f"exceeds max.message.bytes={len(batch)}"):
        db._broker.partition_log(TopicPartition("t", 0)).append(batch)
    assert db._broker.partition_log(TopicPartition("kept", 0)).append(batch).first_offset == 0


def test_a_batch_whose_records_do_not_decode_is_refused_not_copied(db):
    db.create_topic("t", config={"compression.type": "gzip"})
    db.create_topic("kept")
    batch = build_batch([b"first", b"second"], timestamp=7)
    # Cut the last byte of the second record and seal the batch again: header and CRC are
    # sound, the records section is not.
    damaged = bytearray(batch[:-1])
    header = RecordBatch(batch)
    seal(damaged, 0, base_offset=0, attributes=header.attributes, last_offset_delta=1,
         base_timestamp=7, max_timestamp=7, producer_id=-1, producer_epoch=-1,
         base_sequence=-1, records_count=2)
    assert len(damaged) > RECORDS_OFFSET and RecordBatch(damaged).is_valid()
    with pytest.raises(InvalidRecordError, match="rejected a batch"):
        db._broker.partition_log(TopicPartition("t", 0)).append(bytes(damaged))
    assert db.describe_topic("t").partitions[0].high_watermark == 0
    # The producer's codec kept, the broker does not decode (as Kafka's in-place path).
    db._broker.partition_log(TopicPartition("kept", 0)).append(bytes(damaged))


def test_altering_compression_type_applies_to_the_next_batches(db):
    db.create_topic("t")
    sent(db, "t", "none", n=5)
    db.alter_topic_config("t", {"compression.type": "gzip"})
    sent(db, "t", "none", n=5)
    codecs = [b.compression for b in stored_batches(db, "t")]
    assert codecs[0] == compression.NONE and codecs[-1] == compression.GZIP
    assert len(read_back(db, "t")) == 10


def test_a_transactional_batch_recompressed_stays_in_its_transaction(db):
    db.create_topic("t", config={"compression.type": "zstd"})
    producer = db.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_batch("t", [b"x", b"y"], partition=0)
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send_batch("t", [b"z"], partition=0)
    producer.commit_transaction()
    producer.close()
    data = [b for b in stored_batches(db, "t") if not b.is_control]
    assert [b.compression for b in data] == [compression.ZSTD] * 2
    assert all(b.is_transactional for b in data)
    assert [r.value for r in records(db, "t")] == [b"z"]
    assert [r.value for r in records(db, "t", "read_uncommitted")] == [b"x", b"y", b"z"]


def damaged_batch(timestamp):
    """A batch of two records whose second runs past the batch's end, with a sound header
    and CRC: its records section does not decode."""
    batch = build_batch([b"first", b"second"], timestamp=timestamp)
    damaged = bytearray(batch[:-1])
    seal(damaged, 0, base_offset=0, attributes=RecordBatch(batch).attributes,
         last_offset_delta=1, base_timestamp=timestamp, max_timestamp=timestamp,
         producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=2)
    assert RecordBatch(damaged).is_valid()
    return bytes(damaged)


@pytest.mark.parametrize("config", [
    {"message.timestamp.before.max.ms": 3_600_000},
    {"message.timestamp.after.max.ms": 3_600_000},
    {"cleanup.policy": "compact"},
])
def test_records_that_do_not_decode_are_invalid_record_where_a_check_reads_them(db, config):
    # Kafka's LogValidator iterates the records of a produced batch (validateRecord: the
    # key of a compacted topic's record, the timestamp window of KIP-937); a section that
    # does not parse fails there with InvalidRecordException (DefaultRecord.readFrom),
    # INVALID_RECORD, as the recompressing path above answers. Not CorruptRecordError:
    # that says the log's own bytes are damaged, and goes over the wire as
    # CORRUPT_MESSAGE, which producers retry.
    db.create_topic("t", config=config)
    with pytest.raises(InvalidRecordError, match="rejected a batch for t-0") as caught:
        db._broker.partition_log(TopicPartition("t", 0)).append(
            damaged_batch(int(time.time() * 1000)))
    assert error_code(caught.value) == ErrorCode.invalid_record
    assert db.describe_topic("t").partitions[0].log_end_offset == 0


def test_altered_configs_apply_to_the_next_append_though_each_append_reads_them_cached(db):
    # LogConfig derives compression.type's codec and the timestamp window once per config
    # (the append path reads them for every batch); an altered config is a new LogConfig.
    db.create_topic("t")
    log = db._broker.partition_log(TopicPartition("t", 0))
    old = int(time.time() * 1000) - 3_600_000
    log.append(build_batch([b"a"], timestamp=old))
    db.alter_topic_config("t", {"message.timestamp.before.max.ms": 60_000,
                                "compression.type": "gzip"})
    with pytest.raises(InvalidTimestampError):
        log.append(build_batch([b"b"], timestamp=old))
    log.append(build_batch([b"c"], timestamp=old + 3_600_000))
    db._broker.alter_topic_config("t", {}, remove=("message.timestamp.before.max.ms",
                                                   "compression.type"))
    log.append(build_batch([b"d"], timestamp=old))
    assert [b.compression for b in stored_batches(db, "t")] == [
        compression.NONE, compression.GZIP, compression.NONE]
