"""The JVM reader (streamlog_spark/java) at the edges: boundaries of batches, segments, Spark
column batches and the read window, logs written by hand (torn tails, compaction gaps,
control batches, malformed but CRC-valid batches), nested column pruning, empty partitions,
and reads while a writer keeps appending.

The consumer API (a read-only open, as every reader besides the writer) is the ground truth;
where the Python executors (python_reader) are right, the JVM reader must say the same.
"""
import datetime
import json
import os
import re
import shutil
import struct
import threading
import time

import pytest
from spark.frames import read
from streamlog_spark import jvm

import streamlog
from streamlog import TopicPartition
from streamlog.storage import codec, compression
from streamlog.storage.record_batch import CONTROL_COMMIT, build_control_batch, seal
from streamlog.storage.varint import encode_varint, encode_varlong

pytestmark = pytest.mark.spark

UTC = datetime.timezone.utc
T0 = 1_700_000_000_000


# --- helpers -------------------------------------------------------------------------------


def _sorted(rows):
    return sorted(rows, key=repr)   # keys and values may be None: no natural order


def _plain(v):
    if isinstance(v, list):   # headers: Rows -> tuples
        return tuple((h.key, None if h.value is None else bytes(h.value)) for h in v)
    if isinstance(v, bytearray):
        return bytes(v)
    if isinstance(v, datetime.datetime):
        return v.replace(tzinfo=UTC)   # Spark hands timestamps back naive, in UTC here
    return v


def _rows(df):
    return _sorted(tuple(_plain(v) for v in r) for r in df.collect())


def _with_python_reader(spark, make):
    spark.conf.set(jvm.ENABLED_CONF, "false")
    try:
        return make()
    finally:
        spark.conf.unset(jvm.ENABLED_CONF)


def _truth(path, topic):
    """Every record of the topic, as the consumer API returns them (read-only open)."""
    with streamlog.open(path, readonly=True) as db:
        count = len(db.describe_topic(topic).partitions)
        tps = [TopicPartition(topic, p) for p in range(count)]
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        records = []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            records.extend(consumer.poll(timeout=0))
        return records


def _full(r):
    """A consumer record as the row of a read with includeHeaders=true."""
    ts = datetime.datetime.fromtimestamp(r.timestamp / 1000, tz=UTC)
    headers = tuple(r.headers) if r.headers else None
    return (r.key, r.value, r.topic, r.partition, r.offset, ts, r.timestamp_type, headers)


def _expected(records, keep=lambda r: True, columns=8):
    return _sorted(_full(r)[:columns] for r in records if keep(r))


def _segment_logs(path, topic, partition):
    d = os.path.join(path, f"{topic}-{partition}")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".log"))


def _batches(log_path):
    """[(position, size, baseOffset, lastOffset)] of the whole batches of a .log file."""
    with open(log_path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while len(data) - pos >= 61:
        base, length = struct.unpack_from(">qi", data, pos)
        size = 12 + length
        if pos + size > len(data):
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        out.append((pos, size, base, base + delta))
        pos += size
    return out


def _reseal(buf, pos, size):
    """Recompute the CRC-32C of the batch at buf[pos:pos + size] after editing it."""
    struct.pack_into(">I", buf, pos + 17, codec.crc32c(memoryview(buf)[pos + 21:pos + size]))


def _record(offset_delta, timestamp_delta, key, value, headers=()):
    """One record of a batch's records section (docs/FORMAT.md, "Record")."""
    body = bytearray(b"\x00") + encode_varlong(timestamp_delta) + encode_varint(offset_delta)
    for field in (key, value):
        body += encode_varint(-1) if field is None else encode_varint(len(field)) + field
    body += encode_varint(len(headers))
    for k, v in headers:
        k = k.encode()
        body += encode_varint(len(k)) + k
        body += encode_varint(-1) if v is None else encode_varint(len(v)) + v
    return encode_varint(len(body)) + bytes(body)


def _batch(base_offset, records, last_offset_delta, base_timestamp, max_timestamp, codec_id=0,
           attributes=0, producer_id=-1):
    """A sealed batch of hand-made records (offset deltas may leave gaps, as compaction does)."""
    body = b"".join(records)
    if codec_id:
        body = compression.compress(codec_id, body)
    buf = bytearray(61) + body
    seal(buf, 0, base_offset=base_offset, attributes=attributes | codec_id,
         last_offset_delta=last_offset_delta, base_timestamp=base_timestamp,
         max_timestamp=max_timestamp, producer_id=producer_id,
         producer_epoch=0 if producer_id >= 0 else -1, base_sequence=-1,
         records_count=len(records))
    return bytes(buf)


# --- column pruning --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def headers_db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("headersdb") / "db")
    with streamlog.open(path) as db:
        db.create_topic("h", partitions=2)
        producer = db.producer(linger_ms=0)
        for i in range(200):
            headers = None if i % 3 == 0 else [(f"k{i}", b"v%d" % i), ("n", None)]
            producer.send("h", value=b"x%d" % i, key=b"k", partition=i % 2, headers=headers,
                          timestamp_ms=T0 + i)
            if i % 7 == 0:
                producer.flush()
        producer.flush()
    return path, _truth(path, "h")


def _field_rows(df):
    out = []
    for row in df.collect():
        out.append(tuple(tuple(bytes(x) if isinstance(x, bytearray) else x for x in v)
                         if isinstance(v, list) else v for v in row))
    return _sorted(out)


@pytest.mark.parametrize("field", ["key", "value"])
def test_selecting_one_field_of_the_headers_structs(spark, headers_db, field):
    """Spark prunes nested columns (spark.sql.optimizer.nestedSchemaPruning.enabled, on by
    default): `headers.value` asks the scan for headers array<struct<value>> only."""
    path, truth = headers_db
    make = lambda: read(spark, path, subscribe="h", includeHeaders="true") \
        .select("partition", "offset", f"headers.{field}")
    at = 0 if field == "key" else 1
    expected = _sorted((r.partition, r.offset,
                        tuple(h[at] for h in r.headers) if r.headers else None) for r in truth)
    assert _with_python_reader(spark, lambda: _field_rows(make())) == expected
    assert _field_rows(make()) == expected


def test_one_header_of_each_record_by_position(spark, headers_db):
    path, truth = headers_db
    got = _rows(read(spark, path, subscribe="h", includeHeaders="true")
                .selectExpr("offset", "partition", "headers[0].value as v"))
    assert got == _sorted((r.offset, r.partition, r.headers[0][1] if r.headers else None)
                          for r in truth)


# --- empty partitions and topics ---------------------------------------------------------------


def test_an_empty_partition_next_to_a_full_one_and_an_empty_topic(spark, fresh_db):
    with streamlog.open(fresh_db) as db:
        db.create_topic("sparse", partitions=3)
        db.create_topic("nothing", partitions=2)
        producer = db.producer()
        producer.send_batch("sparse", [b"v%d" % i for i in range(50)], partition=1)
        producer.flush()
    truth = _truth(fresh_db, "sparse")
    assert {r.partition for r in truth} == {1}
    for options in ({}, {"minPartitions": "7"},
                    {"startingOffsets": json.dumps({"sparse": {"0": -2, "1": 20, "2": -2}})}):
        first = 20 if "startingOffsets" in options else 0
        df = read(spark, fresh_db, subscribe="sparse", includeHeaders="true", **options)
        assert _rows(df) == _expected(truth, lambda r, first=first: r.offset >= first)
        assert df.count() == 50 - first
        assert [tuple(r) for r in df.groupBy("partition").count().collect()] == \
            [(1, 50 - first)]
    empty = read(spark, fresh_db, subscribe="nothing")
    assert empty.count() == 0 and empty.collect() == []
    both = read(spark, fresh_db, subscribe="sparse,nothing")
    assert both.count() == 50 and len(both.select("value").collect()) == 50


# --- batch, segment and column-batch boundaries --------------------------------------------


def test_many_one_record_batches_over_many_segments(spark, fresh_db):
    with streamlog.open(fresh_db) as db:
        db.create_topic("tiny", partitions=2, config={"segment.bytes": 1500,
                                                     "index.interval.bytes": 1})
        producer = db.producer(linger_ms=0)
        for i in range(1200):
            producer.send("tiny", value=b"%d" % i, key=None if i % 4 else b"k",
                          partition=i % 2, timestamp_ms=T0 + i).result()
    truth = _truth(fresh_db, "tiny")
    assert len(truth) == 1200
    assert len(_segment_logs(fresh_db, "tiny", 0)) > 20
    assert all(len(_batches(log)) <= 30 for log in _segment_logs(fresh_db, "tiny", 0))
    starting = json.dumps({"tiny": {"0": 333, "1": 5}})
    ending = json.dumps({"tiny": {"0": 577, "1": -1}})
    for options in ({}, {"minPartitions": "37"},
                    {"startingOffsets": starting, "endingOffsets": ending, "minPartitions": "5"}):
        lo = {0: 333, 1: 5} if "startingOffsets" in options else {0: 0, 1: 0}
        hi = {0: 577, 1: 10**9} if "endingOffsets" in options else {0: 10**9, 1: 10**9}
        keep = lambda r, lo=lo, hi=hi: lo[r.partition] <= r.offset < hi[r.partition]
        df = read(spark, fresh_db, subscribe="tiny", **options)
        assert _rows(df) == _expected(truth, keep, columns=7)
        assert df.count() == sum(1 for r in truth if keep(r))


@pytest.mark.parametrize("codec_name", ["none", "zstd"])
def test_kafka_batches_of_more_records_than_a_spark_column_batch(spark, fresh_db, codec_name):
    """RangeReader fills 8,192 rows per ColumnarBatch: the boundary falls inside Kafka
    batches, with headers, null keys and null values around it."""
    n = 20_000
    with streamlog.open(fresh_db) as db:
        db.create_topic("big", partitions=1, config={"max.message.bytes": 8 << 20})
        producer = db.producer(compression_type=codec_name)
        values = [None if i % 9 == 0 else b"value-%d" % i for i in range(n)]
        keys = [None if i % 5 == 0 else b"k%d" % i for i in range(n)]
        headers = [None if i % 3 else [("h", b"%d" % i), ("z", None)] for i in range(n)]
        producer.send_batch("big", values, keys=keys, partition=0,
                            timestamps=[T0 + i for i in range(n)], headers=headers)
        producer.flush()
    truth = _truth(fresh_db, "big")
    batches = _batches(_segment_logs(fresh_db, "big", 0)[0])
    assert max(last - base + 1 for _, _, base, last in batches) > 8192
    df = read(spark, fresh_db, subscribe="big", includeHeaders="true")
    assert _rows(df) == _expected(truth)
    assert df.count() == n
    split = read(spark, fresh_db, subscribe="big", minPartitions="3")
    assert sorted(r.offset for r in split.select("offset").collect()) == list(range(n))


def test_a_batch_larger_than_the_read_window(spark, fresh_db):
    """SegmentCursor reads through a 1 MiB window that grows for a larger batch."""
    with streamlog.open(fresh_db) as db:
        db.create_topic("huge", partitions=1, config={"max.message.bytes": 16 << 20})
        producer = db.producer(linger_ms=0, max_request_size=16 << 20)
        producer.send("huge", value=b"a" * 100, partition=0).result()
        producer.send("huge", value=bytes(range(256)) * (3 << 12), partition=0).result()
        producer.send("huge", value=b"c" * 100, partition=0).result()
        producer.send_batch("huge", [b"%d" % i * 1000 for i in range(3000)], partition=0)
        producer.send("huge", value=b"e" * 100, partition=0).result()
        producer.flush()
    truth = _truth(fresh_db, "huge")
    assert max(size for _, size, _, _ in _batches(_segment_logs(fresh_db, "huge", 0)[0])) \
        > 1 << 20
    df = read(spark, fresh_db, subscribe="huge")
    assert _rows(df) == _expected(truth, columns=7)
    assert df.count() == len(truth)
    starting = json.dumps({"huge": {"0": 2}})
    assert _rows(read(spark, fresh_db, subscribe="huge", startingOffsets=starting)) == \
        _expected(truth, lambda r: r.offset >= 2, columns=7)


def test_every_offset_its_own_task(spark, fresh_db):
    """minPartitions as large as the log: every range starts and ends inside a batch."""
    with streamlog.open(fresh_db) as db:
        db.create_topic("each", partitions=1)
        for codec_name in ("gzip", "lz4"):
            producer = db.producer(compression_type=codec_name)
            producer.send_batch("each", [b"%s-%d" % (codec_name.encode(), i) for i in range(30)],
                                partition=0, headers=[[("i", b"%d" % i)] for i in range(30)])
            producer.flush()
    truth = _truth(fresh_db, "each")
    df = read(spark, fresh_db, subscribe="each", includeHeaders="true", minPartitions="60")
    assert df.rdd.getNumPartitions() == 60
    assert _rows(df) == _expected(truth)
    assert df.count() == 60


# --- logs written by hand --------------------------------------------------------------------


def test_a_partial_batch_at_the_end_of_the_active_segment(spark, fresh_db):
    """A writer's batch half written when the read starts: neither its bytes nor anything
    after them is read, and the whole batches before it all are."""
    with streamlog.open(fresh_db) as db:
        db.create_topic("torn", partitions=3)
        producer = db.producer(linger_ms=0)
        for i in range(90):
            producer.send("torn", value=b"t%d" % i, partition=i % 3, timestamp_ms=T0 + i)
            if i % 10 == 0:
                producer.flush()
        producer.flush()
    truth = _truth(fresh_db, "torn")
    for partition, cut in ((0, 30), (1, 70), (2, None)):
        log = _segment_logs(fresh_db, "torn", partition)[-1]
        pos, size, _, last = _batches(log)[-1]
        with open(log, "rb") as f:
            f.seek(pos)
            whole = bytearray(f.read(size))
        struct.pack_into(">q", whole, 0, last + 1)   # the next batch the log would append
        with open(log, "ab") as f:
            # partition 0: part of the header; 1: the header and part of the records;
            # 2: everything but the last byte.
            f.write(whole[:cut] if cut is not None else whole[:-1])
    assert _truth(fresh_db, "torn") == truth
    for options in ({}, {"minPartitions": "9"},
                    {"startingOffsets": json.dumps({"torn": {"0": 29, "1": 3, "2": 17}})}):
        first = {0: 29, 1: 3, 2: 17} if options.get("startingOffsets") else {0: 0, 1: 0, 2: 0}
        keep = lambda r, first=first: r.offset >= first[r.partition]
        make = lambda o=options: read(spark, fresh_db, subscribe="torn", includeHeaders="true",
                                      **o)
        got = _rows(make())
        assert got == _expected(truth, keep)
        assert make().count() == len(got)
        assert got == _with_python_reader(spark, lambda make=make: _rows(make()))


@pytest.fixture
def gapped_db(tmp_path):
    """(path, truth): topic "g", one partition whose segment is written by hand, as a
    compacted, transactional Kafka log looks: batches whose records skip offsets, offsets
    no batch holds, commit markers (control batches) in the middle and at the end, and
    compressed batches among them. The log end is 41."""
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        # Compacted, as the log it imitates: only the cleaner leaves offsets no batch holds
        # (segment.py, invariant 1), so a topic that is not compacted reads such gaps as damage.
        db.create_topic("g", partitions=1, config={"cleanup.policy": "compact"})
    r = lambda d, i, hdr=(): _record(d, i, b"key-%d" % i, None if i % 6 == 0 else b"v%d" % i, hdr)
    batches = [
        _batch(0, [r(0, 0), r(1, 1), r(2, 2)], 2, T0, T0 + 2),
        build_control_batch(CONTROL_COMMIT, producer_id=5, producer_epoch=0,
                            coordinator_epoch=0, timestamp=T0 + 3, base_offset=3),
        # records at 4, 7, 9 of 4..9 (compaction removed 5, 6, 8)
        _batch(4, [r(0, 4, [("a", b"1")]), r(3, 7), r(5, 9, [("b", None)])], 5, T0 + 4, T0 + 9),
        # 10..14 held by no batch
        _batch(15, [r(0, 15), r(2, 17)], 3, T0 + 15, T0 + 17, codec_id=compression.GZIP),
        _batch(19, [r(0, 19), r(1, 20)], 1, T0 + 19, T0 + 20, attributes=0x10, producer_id=5),
        build_control_batch(CONTROL_COMMIT, producer_id=5, producer_epoch=0,
                            coordinator_epoch=0, timestamp=T0 + 21, base_offset=21),
        # one record left of 22..33, compressed
        _batch(22, [r(7, 29)], 11, T0 + 22, T0 + 29, codec_id=compression.ZSTD),
        _batch(34, [r(0, 34), r(1, 35), r(4, 38)], 5, T0 + 34, T0 + 38, codec_id=compression.LZ4),
        build_control_batch(CONTROL_COMMIT, producer_id=5, producer_epoch=0,
                            coordinator_epoch=0, timestamp=T0 + 40, base_offset=40),
    ]
    log = _segment_logs(path, "g", 0)[0]
    with open(log, "wb") as f:
        f.writelines(batches)
    truth = _truth(path, "g")
    assert [t.offset for t in truth] == [0, 1, 2, 4, 7, 9, 15, 17, 19, 20, 29, 34, 35, 38]
    with streamlog.open(path, readonly=True) as db:
        consumer = db.consumer()
        assert consumer.end_offsets([TopicPartition("g", 0)])[TopicPartition("g", 0)] == 41
    return path, truth


def test_compaction_gaps_and_control_batches(spark, gapped_db):
    path, truth = gapped_db
    df = read(spark, path, subscribe="g", includeHeaders="true")
    assert _rows(df) == _expected(truth)
    assert df.count() == len(truth)                               # header counts, no decoding
    assert sorted(r.offset for r in df.select("offset").collect()) == [t.offset for t in truth]


@pytest.mark.parametrize("start,end", [(0, 41), (5, 9), (10, 15), (3, 4), (5, 7), (8, 10),
                                       (21, 22), (23, 41), (30, 41), (39, 41), (40, 41)])
def test_ranges_that_start_or_end_in_gaps_and_on_control_batches(spark, gapped_db, start, end):
    path, truth = gapped_db
    df = read(spark, path, subscribe="g", startingOffsets=json.dumps({"g": {"0": start}}),
              endingOffsets=json.dumps({"g": {"0": end}}))
    keep = lambda r: start <= r.offset < end
    assert _rows(df) == _expected(truth, keep, columns=7)
    assert df.count() == sum(1 for r in truth if keep(r))
    python = _with_python_reader(spark, lambda: _rows(read(
        spark, path, subscribe="g", startingOffsets=json.dumps({"g": {"0": start}}),
        endingOffsets=json.dumps({"g": {"0": end}}))))
    assert python == _expected(truth, keep, columns=7)   # the Python executors too


def test_a_compacted_log_split_into_single_offsets(spark, gapped_db):
    path, truth = gapped_db
    df = read(spark, path, subscribe="g", minPartitions="41")
    assert df.rdd.getNumPartitions() == 41
    offsets = sorted(r.offset for r in df.select("offset").collect())
    assert offsets == [t.offset for t in truth]                   # none twice, none missing
    assert df.count() == len(truth)
    python = _with_python_reader(spark, lambda: sorted(
        r.offset for r in read(spark, path, subscribe="g", minPartitions="41")
        .select("offset").collect()))
    assert python == offsets


def test_a_log_the_cleaner_compacted(spark, tmp_path):
    """What the log cleaner leaves (docs/COMPACTION.md): gaps, tombstones with a delete
    horizon in the base timestamp, batches emptied but kept, merged segments."""
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("c", partitions=1, config={"cleanup.policy": "compact",
                                                   "segment.bytes": 2048})
        producer = db.producer(linger_ms=0, batch_size=200)
        for i in range(400):
            producer.send("c", key=b"key-%d" % (i % 13), partition=0,
                          value=None if i % 50 == 49 else b"v%d" % i)
            if i % 7 == 6:
                producer.flush()
        producer.close()
        (result,) = db.compact("c")
        assert result.stats.records_kept < 40
    batches = [b for log in _segment_logs(path, "c", 0) for b in _batches(log)]
    counts = [int.from_bytes(open(log, "rb").read()[pos + 57:pos + 61], "big")
              for log in _segment_logs(path, "c", 0) for pos, *_ in _batches(log)]
    assert 0 in counts and len(batches) == len(counts)     # emptied batches are there
    truth = _truth(path, "c")
    assert any(t.value is None for t in truth)               # a tombstone within its horizon
    df = read(spark, path, subscribe="c", includeHeaders="true")
    assert _rows(df) == _expected(truth)
    assert df.count() == len(truth)
    python = _with_python_reader(spark, lambda: _rows(read(spark, path, subscribe="c",
                                                           includeHeaders="true")))
    assert python == _expected(truth)


def _copy(path, tmp_path, name="copy"):
    copy = str(tmp_path / name)
    shutil.copytree(path, copy)
    return copy


@pytest.fixture
def segmented_db(tmp_path):
    """(path, truth): topic "s", one partition over several sealed segments of 5-record
    batches, then the active one."""
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("s", partitions=1, config={"segment.bytes": 600})
        producer = db.producer(linger_ms=0)
        for b in range(12):
            producer.send_batch("s", [b"s%03d" % (5 * b + i) for i in range(5)], partition=0,
                                keys=[b"k"] * 5)
            producer.flush()
    assert len(_segment_logs(path, "s", 0)) >= 3
    return path, _truth(path, "s")


def test_a_flipped_high_bit_in_a_base_offset_of_the_active_segment_is_an_error(
        spark, segmented_db, tmp_path):
    """baseOffset is outside the CRC (docs/FORMAT.md): a batch whose offsets leave the int32
    range of its segment's base offset is corrupt (segment.py invariant 1), not records at
    offset 2**40. The Python reader says so; the planner, which only scans headers, plans a
    range up to the bogus end."""
    path, _ = segmented_db
    copy = _copy(path, tmp_path)
    log = _segment_logs(copy, "s", 0)[-1]
    pos = _batches(log)[-1][0]
    with open(log, "r+b") as f:
        f.seek(pos + 2)   # byte 2 of the big-endian int64: bits 40..47
        byte = f.read(1)[0]
        f.seek(pos + 2)
        f.write(bytes([byte ^ 0x01]))
    make = lambda: read(spark, copy, subscribe="s").select("offset", "value").collect()
    with pytest.raises(Exception, match="streamlog verify|corrupt|out of order"):
        _with_python_reader(spark, make)
    with pytest.raises(Exception, match="streamlog verify"):
        rows = make()
        pytest.fail(f"the JVM reader returned offsets up to {max(r.offset for r in rows)}")


# count() of a batch wholly inside its range takes the header's record count once the CRC
# checks out (docs/SPARK.md): a CRC-valid batch claiming 3 of its 5 records counts 3 there, so
# that one combination is not asked of the JVM reader.
@pytest.mark.parametrize("count, action", [(-1, "rows"), (-1, "offsets"), (-1, "count"),
                                           (3, "rows"), (3, "offsets")])
def test_a_batch_whose_record_count_disagrees_with_its_records_is_an_error(
        spark, segmented_db, tmp_path, count, action):
    """A batch with a valid CRC whose recordsCount is negative, or smaller than the records it
    holds (5): the Python reader (RecordBatch.check_header, records_decode) and Kafka's own
    reader refuse it; returning fewer rows would lose records silently."""
    path, truth = segmented_db
    copy = _copy(path, tmp_path)
    log = _segment_logs(copy, "s", 0)[0]                          # sealed: the planner skips it
    pos, size, _, _ = _batches(log)[1]
    with open(log, "r+b") as f:
        data = bytearray(f.read())
        struct.pack_into(">i", data, pos + 57, count)
        _reseal(data, pos, size)
        f.seek(0)
        f.write(data)
    df = lambda: read(spark, copy, subscribe="s")
    # A DataFrame keeps the plan of its first action: a fresh one for each reader.
    with pytest.raises(Exception, match="streamlog verify"):
        _with_python_reader(spark, lambda: df().collect())
    run = {"rows": lambda: len(df().collect()),
           "offsets": lambda: len(df().select("offset").collect()),
           "count": lambda: df().count()}[action]
    try:
        n = run()
    except Exception as e:  # noqa: BLE001 -- Py4J wraps the executor's error
        assert "streamlog verify" in str(e)
    else:
        pytest.fail(f"the JVM reader returned {n} of {len(truth)} {action}, no error")


# --- timestamps --------------------------------------------------------------------------------


def test_a_partition_whose_timestamp_type_changes(spark, fresh_db):
    """A topic switched to LogAppendTime mid-way: each record keeps its own batch's type."""
    with streamlog.open(fresh_db) as db:
        db.create_topic("tt", partitions=1)
        producer = db.producer(linger_ms=0)
        for i in range(10):
            producer.send("tt", value=b"c%d" % i, partition=0, timestamp_ms=1000 + i).result()
        db.alter_topic_config("tt", {"message.timestamp.type": "LogAppendTime"})
        for i in range(10):
            producer.send("tt", value=b"a%d" % i, partition=0, timestamp_ms=1000 + i).result()
        producer.flush()
    truth = _truth(fresh_db, "tt")
    assert {r.timestamp_type for r in truth} == {0, 1}
    df = read(spark, fresh_db, subscribe="tt")
    assert _rows(df) == _expected(truth, columns=7)


def test_count_under_a_pushed_down_timestamp_filter(spark, events_db, pushdown):
    """count() reads no column, so the timestamp filter is applied on the undecoded path."""
    path, expected = events_db
    low, high = T0 + 10_000, T0 + 40_000
    lo = datetime.datetime.fromtimestamp(low / 1000, tz=UTC).isoformat()
    hi = datetime.datetime.fromtimestamp(high / 1000, tz=UTC).isoformat()
    df = read(spark, path, subscribe="events", filterPushdown="true") \
        .where(f"timestamp >= '{lo}' and timestamp < '{hi}'")
    want = sum(1 for e in expected if low <= e[4] < high)
    assert 0 < want < len(expected)
    plan = df.groupBy().count()._jdf.queryExecution().executedPlan().toString()
    assert "(JVM reader) struct<>" in plan            # the filter went into the scan
    assert df.count() == want
    assert sorted(r.offset for r in df.select("offset").collect()) == \
        sorted(e[1] for e in expected if low <= e[4] < high)


# --- a writer appending while the read runs --------------------------------------------------


def _appender(db, topic, partitions, stop, sent, pause=0.0):
    """Appends to every partition until stop; pause: seconds after every fifth round, or a
    one-item list the test may change meanwhile."""
    producer = db.producer(linger_ms=0)
    i = 0
    while not stop.is_set():
        for p in range(partitions):
            producer.send(topic, value=b"%d" % sent[p], key=b"k%d" % (i % 3), partition=p,
                          headers=[("i", b"%d" % i)] if i % 2 else None)
            sent[p] += 1
        i += 1
        if i % 5 == 0:
            producer.flush()
            wait = pause[0] if isinstance(pause, list) else pause
            if wait:
                time.sleep(wait)
    producer.flush()


def _check_prefix(rows, partitions, at_least):
    """Each partition's rows are offsets 0..n-1, each once, value == offset, n >= at_least."""
    by_partition = {p: [] for p in range(partitions)}
    for r in rows:
        by_partition[r.partition].append(r)
    for p, got in by_partition.items():
        offsets = sorted(r.offset for r in got)
        assert offsets == list(range(len(offsets))), f"partition {p}: not a prefix"
        assert len(offsets) >= at_least[p]
        assert all(bytes(r.value) == b"%d" % r.offset for r in got)


def test_reads_while_another_thread_appends_and_rolls_segments(spark, fresh_db):
    """The writer (this process) appends, rolls segments and fills their preallocated
    indexes while Spark plans and reads (the planner and the JVM reader are other
    processes): every read is a prefix of the log, whole batches only."""
    partitions = 2
    with streamlog.open(fresh_db) as db:
        db.create_topic("live", partitions=partitions,
                        config={"segment.bytes": 8192, "index.interval.bytes": 64})
        stop, sent = threading.Event(), [0] * partitions
        thread = threading.Thread(target=_appender, args=(db, "live", partitions, stop, sent))
        thread.start()
        try:
            for _ in range(4):
                time.sleep(0.3)
                floor = list(sent)   # appended (maybe not yet flushed) before planning
                time.sleep(0.1)
                df = read(spark, fresh_db, subscribe="live", includeHeaders="true",
                          minPartitions="5")
                rows = df.collect()
                _check_prefix(rows, partitions, [max(0, f - 200) for f in floor])
                counted = df.count()             # the same planned ranges, counted
                assert counted == len(rows)
        finally:
            stop.set()
            thread.join()
    assert len(_segment_logs(fresh_db, "live", 0)) > 3


def test_a_read_from_the_middle_of_the_active_segment_with_its_zero_filled_index(
        spark, fresh_db):
    """While the writer has the database open, the active segment's offset index holds a
    reserved, zero-filled tail after its entries (docs/FORMAT.md)."""
    with streamlog.open(fresh_db) as db:
        db.create_topic("open", partitions=1, config={"index.interval.bytes": 200,
                                                     "segment.index.bytes": 1 << 16})
        producer = db.producer(linger_ms=0)
        for b in range(40):
            producer.send_batch("open", [b"o%04d" % (10 * b + i) for i in range(10)],
                                partition=0)
            producer.flush()
        index = _segment_logs(fresh_db, "open", 0)[0][:-4] + ".index"
        with open(index, "rb") as f:
            data = f.read()
        assert len(data) % 4096 == 0 and data[:8] != bytes(8) and data[-64:] == bytes(64)
        truth = _truth(fresh_db, "open")
        for start in (0, 9, 10, 155, 379, 399):
            df = read(spark, fresh_db, subscribe="open",
                      startingOffsets=json.dumps({"open": {"0": start}}))
            keep = lambda r, start=start: r.offset >= start
            assert _rows(df) == _expected(truth, keep, columns=7)
            assert df.count() == 400 - start


def _check_slices(rows, partitions):
    """Each partition's rows: each offset once, value == offset. Returns {p: sorted offsets}."""
    out = {p: [] for p in range(partitions)}
    for r in rows:
        assert bytes(r.value) == b"%d" % r.offset
        out[r.partition].append(r.offset)
    for p, offsets in out.items():
        offsets.sort()
        assert len(offsets) == len(set(offsets)), f"partition {p}: an offset read twice"
    return out


def test_reads_while_retention_deletes_segments(spark, fresh_db):
    """Retention renames the oldest segments away while tasks plan and read: a lenient read
    returns records at their own offsets, none twice; a strict one returns a contiguous
    stretch or fails with Spark's data-loss advice for offsets really below the log start,
    never a silent hole."""
    partitions = 2
    config = {"log.retention.check.interval.ms": 10}
    lost = re.compile(r"Cannot fetch offset (\d+) of ret-\d: the log starts at (\d+)")
    with streamlog.open(fresh_db, config=config) as db:
        db.create_topic("ret", partitions=partitions,
                        config={"segment.bytes": 2048, "retention.bytes": 32 << 10,
                                "index.interval.bytes": 64})
        stop, sent = threading.Event(), [0] * partitions
        # Retention must keep running, but slowly enough that a strict read can plan and
        # read before the start moves: how fast depends on the machine, so a strict read
        # that lost its data slows the appender down.
        pause = [0.003]
        thread = threading.Thread(target=_appender,
                                  args=(db, "ret", partitions, stop, sent, pause))
        thread.start()
        reads = {"lenient": 0, "lenient after retention": 0, "strict": 0, "strict data loss": 0}
        retained = lambda: all(p.log_start_offset > 0 for p in db.describe_topic("ret").partitions)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (reads["lenient after retention"] < 4
                                                   or reads["strict"] < 2):
                time.sleep(0.05)
                after_retention = retained()
                lenient = read(spark, fresh_db, subscribe="ret", failOnDataLoss="false",
                               minPartitions="4")
                try:
                    rows = lenient.collect()
                except Exception as e:  # noqa: BLE001 -- only the planner's open may race
                    assert "cannot open log file" in str(e), str(e)[:2000]
                    continue
                _check_slices(rows, partitions)
                reads["lenient"] += 1
                reads["lenient after retention"] += after_retention
                strict = read(spark, fresh_db, subscribe="ret", minPartitions="4")
                try:
                    rows = strict.collect()
                except Exception as e:  # noqa: BLE001 -- Py4J wraps the executor's error
                    if "cannot open log file" in str(e):
                        continue
                    found = lost.search(str(e))
                    assert found and int(found[1]) < int(found[2]) and \
                        "failOnDataLoss" in str(e), str(e)[:2000]
                    reads["strict data loss"] += 1
                    pause[0] = min(pause[0] * 2, 0.2)
                    continue
                for p, offsets in _check_slices(rows, partitions).items():
                    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) \
                        if offsets else True, f"partition {p}: a hole in a strict read"
                reads["strict"] += 1
        finally:
            stop.set()
            thread.join()
    assert reads["lenient after retention"] >= 4 and reads["strict"] >= 2, reads


def test_a_sealed_segment_cut_inside_a_batch_is_an_error_not_a_hole(
        spark, segmented_db, tmp_path):
    """Only the last segment can end inside a batch (one being written); a sealed segment
    that does was damaged, and the records after the cut are the next segment's. Reading on
    from there would return the log with a hole in it, silently."""
    path, truth = segmented_db
    copy = _copy(path, tmp_path)
    log = _segment_logs(copy, "s", 0)[0]
    pos, size, base, last = _batches(log)[-1]
    with open(log, "r+b") as f:
        f.truncate(pos + size // 2)
    with pytest.raises(Exception, match="ends inside a record batch"):   # the storage layer
        _with_python_reader(spark, lambda: read(spark, copy, subscribe="s").collect())
    try:
        rows = read(spark, copy, subscribe="s").select("offset").collect()
    except Exception as e:  # noqa: BLE001 -- Py4J wraps the executor's error
        assert "streamlog verify" in str(e) or "failOnDataLoss" in str(e)
    else:
        offsets = sorted(r.offset for r in rows)
        assert offsets == [t.offset for t in truth], \
            f"offsets {base}..{last} are missing, and no error said so"


def _open_files_under(pid, root):
    fd_dir = f"/proc/{pid}/fd"
    out = []
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith(root):
            out.append(target)
    return out


def test_no_file_is_left_open_by_finished_stopped_or_failed_reads(spark, segmented_db, tmp_path):
    path, truth = segmented_db
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    df = lambda p, **o: read(spark, p, subscribe="s", **o)
    assert len(df(path).collect()) == len(truth)
    assert df(path, minPartitions="9").count() == len(truth)
    assert len(df(path).take(1)) == 1                               # stopped early
    assert len(df(path, includeHeaders="true").limit(3).collect()) == 3
    corrupt = _copy(path, tmp_path, "corrupt")
    log = _segment_logs(corrupt, "s", 0)[1]
    with open(log, "r+b") as f:
        f.seek(80)
        b = f.read(1)[0]
        f.seek(80)
        f.write(bytes([b ^ 0x40]))
    with pytest.raises(Exception, match="CRC-32C"):
        df(corrupt).collect()
    time.sleep(0.5)   # task-completion listeners run after the job's result
    assert _open_files_under(pid, os.path.dirname(path)) == []
    assert _open_files_under(pid, str(tmp_path)) == []


def _set_log_start(path, topic, partition, offset):
    """Write the log-start-offset-checkpoint entry of one partition, as a writer would after
    deleteRecords moved the log start inside a segment."""
    checkpoint = os.path.join(path, "log-start-offset-checkpoint")
    entries = {}
    if os.path.exists(checkpoint):
        with open(checkpoint) as f:
            for line in f.read().splitlines()[2:]:
                t, p, o = line.split(" ")
                entries[(t, int(p))] = int(o)
    entries[(topic, partition)] = offset
    with open(checkpoint, "w") as f:
        f.write(f"0\n{len(entries)}\n")
        f.writelines(f"{t} {p} {o}\n" for (t, p), o in sorted(entries.items()))


def test_a_log_start_inside_a_batch_of_the_first_segment(spark, segmented_db, tmp_path):
    path, truth = segmented_db
    copy = _copy(path, tmp_path)
    _set_log_start(copy, "s", 0, 23)             # inside the 20..24 batch
    assert [t.offset for t in _truth(copy, "s")] == list(range(23, 60))
    keep = lambda r: r.offset >= 23
    for options in ({}, {"minPartitions": "4"},
                    {"startingOffsets": json.dumps({"s": {"0": 3}}), "failOnDataLoss": "false"}):
        make = lambda o=options: read(spark, copy, subscribe="s", **o)
        got = _rows(make())
        assert got == _expected(truth, keep, columns=7)
        assert make().count() == 37
        assert got == _with_python_reader(spark, lambda make=make: _rows(make()))
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, copy, subscribe="s", startingOffsets=json.dumps({"s": {"0": 3}})).collect()
    # Planned before the log start moved: the executors apply the rule themselves.
    strict, lenient = (read(spark, path, subscribe="s", failOnDataLoss=v)
                       for v in ("true", "false"))
    assert strict.count() == lenient.count() == 60
    _set_log_start(path, "s", 0, 23)
    try:
        with pytest.raises(Exception, match="Cannot fetch offset 0 of s-0: the log starts at 23"):
            strict.collect()
        assert sorted(r.offset for r in lenient.collect()) == list(range(23, 60))
    finally:
        _set_log_start(path, "s", 0, 0)


def _write_partition(path, topic, batches, partitions=1):
    """A topic whose partition 0 is exactly these batches, written by hand."""
    with streamlog.open(path) as db:
        db.create_topic(topic, partitions=partitions)
    with open(_segment_logs(path, topic, 0)[0], "wb") as f:
        f.writelines(batches)


def _raw_record(*fields):
    """A record from already-encoded fields (after the attributes byte)."""
    body = b"\x00" + b"".join(fields)
    return encode_varint(len(body)) + body


def test_varints_of_every_length_and_non_minimal_encodings(spark, fresh_db):
    """Kafka's readVarint/readVarlong: at most 5 / 10 bytes, non-minimal encodings accepted,
    bits of a 5-byte varint beyond 32 dropped (docs/FORMAT.md, "Record")."""
    far = 2**62 + 1
    padded_3 = bytes([0x86, 0x80, 0x80, 0x00])               # 3, in 4 bytes
    wide_3 = bytes([0x86, 0x80, 0x80, 0x80, 0x70])           # 3, plus bits beyond 32
    records = [
        # timestampDelta -(2**62) - 1: a 10-byte varlong
        _raw_record(encode_varlong(-far), encode_varint(0), encode_varint(-1), padded_3 + b"abc",
                    encode_varint(0)),
        _raw_record(encode_varlong(-far + 5), bytes([0x82, 0x80, 0x00]),      # offsetDelta 1
                    wide_3 + b"key", encode_varint(2) + b"vv", encode_varint(1),
                    encode_varint(1) + b"h", wide_3 + b"xyz"),
        _raw_record(encode_varlong(-far + 2**40), encode_varint(2), encode_varint(0),
                    encode_varint(0), bytes([0x80, 0x00])),                   # 0 headers
    ]
    batches = [_batch(0, records, 2, T0 + far, T0 + 2**40),
               _batch(3, records, 2, T0 + far, T0 + 2**40, codec_id=compression.GZIP)]
    _write_partition(fresh_db, "vi", batches)
    truth = _truth(fresh_db, "vi")
    assert [(t.offset, t.timestamp - T0, t.key, t.value, tuple(t.headers)) for t in truth] == [
        (0, 0, None, b"abc", ()), (1, 5, b"key", b"vv", (("h", b"xyz"),)),
        (2, 2**40, b"", b"", ()),
        (3, 0, None, b"abc", ()), (4, 5, b"key", b"vv", (("h", b"xyz"),)),
        (5, 2**40, b"", b"", ())]
    df = read(spark, fresh_db, subscribe="vi", includeHeaders="true")
    assert _rows(df) == _expected(truth)
    assert _rows(df) == _with_python_reader(
        spark, lambda: _rows(read(spark, fresh_db, subscribe="vi", includeHeaders="true")))


def test_a_partition_of_nothing_but_control_batches(spark, fresh_db):
    marker = lambda offset: build_control_batch(CONTROL_COMMIT, producer_id=9, producer_epoch=0,
                                                coordinator_epoch=0, timestamp=T0,
                                                base_offset=offset)
    _write_partition(fresh_db, "ctl", [marker(0), marker(1), marker(2)], partitions=2)
    with streamlog.open(fresh_db) as db:
        db.producer().send_batch("ctl", [b"x", b"y"], partition=1).result()
    df = lambda **o: read(spark, fresh_db, subscribe="ctl", **o)
    assert df().count() == 2
    assert sorted((r.partition, r.offset) for r in df().collect()) == [(1, 0), (1, 1)]
    assert df(minPartitions="5").select("offset").count() == 2
    assert df(startingOffsets=json.dumps({"ctl": {"0": 1, "1": 1}})).collect()[0].value == b"y"


@pytest.mark.parametrize("damage", ["missing", "previous batch", "inside a batch",
                                    "offsets one too high", "offsets one too low"])
def test_a_missing_or_wrong_offset_index_costs_a_scan_never_records(spark, fresh_db, damage):
    with streamlog.open(fresh_db) as db:
        db.create_topic("ix", partitions=1, config={"segment.bytes": 1200,
                                                   "index.interval.bytes": 1})
        producer = db.producer(linger_ms=0)
        for b in range(30):
            producer.send_batch("ix", [b"i%03d" % (3 * b + i) for i in range(3)], partition=0)
            producer.flush()
    truth = _truth(fresh_db, "ix")
    entries = 0
    logs = _segment_logs(fresh_db, "ix", 0)
    if damage == "inside a batch":
        logs = logs[:-1]   # the planner finds the log end from the last segment's last entry
    for log in logs:
        index = log[:-4] + ".index"
        with open(index, "rb") as f:
            data = bytearray(f.read())
        pairs = [struct.unpack_from(">ii", data, i) for i in range(0, len(data), 8)]
        entries += len(pairs)
        if damage == "missing":
            os.unlink(index)
            continue
        out = []
        for k, (rel, pos) in enumerate(pairs):
            if damage == "previous batch":
                pos = pairs[k - 1][1] if k else pos
            elif damage == "inside a batch":
                pos += 7
            elif damage == "offsets one too high":
                rel += 1
            elif damage == "offsets one too low":
                rel -= 1
            out.append(struct.pack(">ii", rel, pos))
        with open(index, "wb") as f:
            f.write(b"".join(out))
    assert entries > 20
    for start in (1, 2, 3, 4, 17, 44, 45, 46, 88, 89):
        df = read(spark, fresh_db, subscribe="ix",
                  startingOffsets=json.dumps({"ix": {"0": start}}))
        keep = lambda r, start=start: r.offset >= start
        assert _rows(df) == _expected(truth, keep, columns=7), start


@pytest.mark.parametrize("checkpoint", ["0\n3\ns 0 23\n", "0\n1\ns 0 2x\n", "7\n1\ns 0 23\n"],
                         ids=["entry count wrong", "offset not a number", "unknown version"])
def test_a_malformed_log_start_checkpoint_is_read_as_the_planner_reads_it(
        spark, segmented_db, tmp_path, checkpoint):
    """The planner (storage/checkpoint.py) ignores a checkpoint file that does not parse, so
    the log starts at its first segment; the executors must agree with the plan, not fail
    it with a data-loss error (or a NumberFormatException) or skip records it planned."""
    path, truth = segmented_db
    copy = _copy(path, tmp_path)
    with open(os.path.join(copy, "log-start-offset-checkpoint"), "w") as f:
        f.write(checkpoint)
    assert [t.offset for t in _truth(copy, "s")] == list(range(60))
    for options in ({}, {"failOnDataLoss": "false"}):
        make = lambda o=options: read(spark, copy, subscribe="s", **o)
        assert _with_python_reader(spark, lambda make=make: _rows(make())) == \
            _expected(truth, columns=7)
        assert _rows(make()) == _expected(truth, columns=7)


def test_read_committed_hides_aborted_and_open_transactions_in_both_readers(spark, fresh_db):
    # Kafka's source: isolationLevel read_committed plans up to the last stable offset and
    # never returns an aborted transaction's records; read_uncommitted (the default, the
    # Kafka consumer's) returns every data record. The JVM reader and the Python executors
    # must agree.
    with streamlog.open(fresh_db) as db:
        db.create_topic("tx", partitions=2)
        plain = db.producer()
        p = db.producer(transactional_id="spark-tx")
        p.init_transactions()
        for i in range(6):
            p.begin_transaction()
            p.send_batch("tx", [b"t%d-%d" % (i, k) for k in range(3)], partition=i % 2)
            plain.send("tx", value=b"plain-%d" % i, partition=i % 2).result()
            if i % 3 == 2:
                p.abort_transaction()
            else:
                p.commit_transaction()
        p.begin_transaction()
        p.send("tx", value=b"open", partition=1)
        p.flush()
        plain.send("tx", value=b"after-open", partition=1).result()
        p.close(timeout=0)   # Kafka's forced close: the transaction stays open

    def values(**options):
        df = read(spark, fresh_db, subscribe="tx", **options)
        return sorted(bytes(r.value) for r in df.select("value").collect())
    committed = sorted([b"t%d-%d" % (i, k) for i in range(6) if i % 3 != 2 for k in range(3)]
                       + [b"plain-%d" % i for i in range(6)])
    def committed_values():
        return values(isolationLevel="read_committed")
    assert committed_values() == committed      # the open one holds "after-open" back
    assert _with_python_reader(spark, committed_values) == committed
    everything = sorted(committed + [b"t%d-%d" % (i, k) for i in (2, 5) for k in range(3)]
                        + [b"open", b"after-open"])
    assert values() == everything
    assert _with_python_reader(spark, values) == everything


def test_a_log_compacted_under_the_databases_compact_default(spark, tmp_path):
    """The topic has no cleanup.policy of its own: the readers' read-only opens apply the
    writer's recorded default (docs/FORMAT.md, `!topic-defaults`), not Kafka's delete, so the
    cleaner's gaps are not damage (before, CorruptRecordError at the first gap)."""
    path = str(tmp_path / "db")
    with streamlog.open(path, config={"cleanup.policy": "compact",
                                      "segment.bytes": 1024}) as db:
        db.create_topic("d", partitions=1)
        producer = db.producer(linger_ms=0)
        for i in range(60):
            producer.send("d", key=b"k%d" % (i % 5), value=b"v%d" % i).result()
        db.compact("d")
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("d", 0)])
        written = []
        while len(written) < 5:
            written.extend((r.offset, r.value) for r in consumer.poll(timeout=5.0))
        consumer.close()
    assert [offset for offset, _ in written] == [55, 56, 57, 58, 59]

    def rows():
        return sorted((r.offset, bytes(r.value)) for r in
                      read(spark, path, subscribe="d").select("offset", "value").collect())
    assert rows() == written
    assert _with_python_reader(spark, rows) == written
