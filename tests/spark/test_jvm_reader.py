"""The JVM reader (streamlog_spark/java): the rows the consumer API returns, from every kind of
batch the log holds, equal to the Python reader's; and its own checks (CRC, data loss).

The shared session has the reader's jar on its classpath, so every other Spark test reads
through it too; these tests compare it with the Python executors (python_reader) and with
the consumer API as ground truth.
"""
import datetime
import json
import os
import pickle
import shutil

import pytest
from spark.frames import read
from streamlog_spark import jvm
from streamlog_spark.planning import OffsetRange
from streamlog_spark.tasks import MAGIC, ReadTask, pack_task, unpack_task
from support import wait_until

import streamlog
from streamlog import TopicPartition

pytestmark = pytest.mark.spark

UTC = datetime.timezone.utc
CODECS = ("none", "gzip", "lz4", "zstd")
PARTITIONS = 3


def _headers(i):
    if i % 3 == 0:
        return None
    if i % 3 == 1:
        return [("one", b"%d" % i)]
    return [("a", b""), ("b", None), ("\u00e9t\u00e9", b"\x00\xff" * (i % 7))]


@pytest.fixture(scope="module")
def mixed_db(tmp_path_factory):
    """(path, truth): topics of every codec, a LogAppendTime topic and a topic of many small
    segments, holding null keys, null and empty values, and headers with null values; truth
    maps each topic to its records as the consumer API returns them."""
    path = str(tmp_path_factory.mktemp("jvmdb") / "db")
    with streamlog.open(path) as db:
        for codec in CODECS:
            db.create_topic(codec, partitions=PARTITIONS)
            producer = db.producer(compression_type=codec, linger_ms=0)
            for i in range(300):
                key = None if i % 5 == 0 else b"key-%d" % i
                value = None if i % 11 == 0 else b"" if i % 13 == 0 else b"v%d-" % i * (i % 9)
                producer.send(codec, value=value, key=key, partition=i % PARTITIONS,
                              timestamp_ms=1_700_000_000_000 + i * 7 - (i % 4) * 1000,
                              headers=_headers(i))
                if i % 17 == 0:
                    producer.flush()   # batches of many sizes, one-record ones included
            producer.send_batch(codec, [b"bulk-%d" % i for i in range(500)], partition=1)
            producer.flush()
        db.create_topic("appended", partitions=1,
                        config={"message.timestamp.type": "LogAppendTime"})
        producer = db.producer()
        for i in range(40):
            producer.send("appended", value=b"a%d" % i, timestamp_ms=1000 + i)
            if i % 10 == 9:
                producer.flush()
        db.create_topic("small", partitions=2, config={"segment.bytes": 2048,
                                                      "index.interval.bytes": 100})
        producer = db.producer()
        for i in range(600):
            producer.send("small", value=b"s%04d" % i + b"." * (i % 50), partition=i % 2)
            if i % 9 == 0:
                producer.flush()
        producer.flush()
        truth = {}
        consumer = db.consumer(auto_offset_reset="earliest")
        for topic in (*CODECS, "appended", "small"):
            tps = [TopicPartition(topic, p) for p in range(db.describe_topic(topic).partitions
                                                           .__len__())]
            consumer.assign(tps)
            ends = consumer.end_offsets(tps)
            records = []
            while any(consumer.position(tp) < ends[tp] for tp in tps):
                records.extend(consumer.poll(timeout=0))
            truth[topic] = records
    assert len(os.listdir(os.path.join(path, "small-0"))) > 20   # many segments and indexes
    return path, truth


def _sorted(rows):
    return sorted(rows, key=repr)   # keys and values may be None: no natural order


def _rows(df):
    return _sorted(tuple(_plain(v) for v in r) for r in df.collect())


def _plain(v):
    if isinstance(v, list):   # headers: Rows -> tuples
        return tuple((h.key, None if h.value is None else bytes(h.value)) for h in v)
    return bytes(v) if isinstance(v, bytearray) else v


def _both(spark, make_df):
    """(rows through the JVM reader, rows through Python executors) of the same query."""
    jvm_rows = _rows(make_df())
    spark.conf.set(jvm.ENABLED_CONF, "false")
    try:
        python_rows = _rows(make_df())
    finally:
        spark.conf.unset(jvm.ENABLED_CONF)
    return jvm_rows, python_rows


def _expected(records, keep=lambda r: True):
    out = []
    for r in records:
        if keep(r):
            ts = datetime.datetime.fromtimestamp(r.timestamp / 1000, tz=UTC)
            headers = tuple(r.headers) if r.headers else None
            out.append((r.key, r.value, r.topic, r.partition, r.offset, ts, r.timestamp_type,
                        headers))
    return _sorted(out)


def _utc(rows):
    """Spark hands timestamps back naive, in the session time zone (UTC in these tests)."""
    return _sorted(tuple(v.replace(tzinfo=UTC) if isinstance(v, datetime.datetime) else v
                         for v in r) for r in rows)


def test_batch_reads_are_planned_onto_the_jvm_reader_unless_it_is_switched_off(spark, mixed_db):
    path, _ = mixed_db
    plan = read(spark, path, subscribe="none")._jdf.queryExecution().executedPlan().toString()
    assert "JVM reader" in plan and "ColumnarToRow" in plan
    spark.conf.set(jvm.ENABLED_CONF, "false")
    try:
        plan = read(spark, path, subscribe="none")._jdf.queryExecution().executedPlan() \
            .toString()
    finally:
        spark.conf.unset(jvm.ENABLED_CONF)
    assert "JVM reader" not in plan


@pytest.mark.parametrize("topic", [*CODECS, "appended", "small"])
def test_every_column_equals_the_consumer_api_and_the_python_reader(spark, mixed_db, topic):
    path, truth = mixed_db
    got, python = _both(spark, lambda: read(spark, path, subscribe=topic,
                                             includeHeaders="true"))
    assert _utc(got) == _expected(truth[topic])
    assert got == python


def test_without_include_headers_there_is_no_headers_column(spark, mixed_db):
    path, truth = mixed_db
    got, python = _both(spark, lambda: read(spark, path, subscribe="zstd"))
    assert _utc(got) == _sorted(r[:7] for r in _expected(truth["zstd"]))
    assert got == python


def test_ranges_that_start_and_end_inside_batches_and_segments(spark, mixed_db):
    path, truth = mixed_db
    starting = json.dumps({"small": {"0": 17, "1": 151}})
    ending = json.dumps({"small": {"0": 263, "1": -1}})
    make = lambda: read(spark, path, subscribe="small", startingOffsets=starting,
                         endingOffsets=ending, minPartitions="13")
    assert make().rdd.getNumPartitions() >= 13
    got, python = _both(spark, make)
    ends = {0: 263, 1: 10**9}
    starts = {0: 17, 1: 151}
    assert _utc(got) == _sorted(r[:7] for r in _expected(
        truth["small"], lambda r: starts[r.partition] <= r.offset < ends[r.partition]))
    assert got == python


@pytest.mark.parametrize("topic", ["none", "gzip", "small"])
def test_count_and_projections_agree_with_the_records(spark, mixed_db, topic):
    path, truth = mixed_db
    starting = json.dumps({topic: {str(p): 5 for p in range(PARTITIONS if topic != "small"
                                                             else 2)}})
    for options in ({}, {"minPartitions": "11"}, {"startingOffsets": starting}):
        first = 5 if "startingOffsets" in options else 0
        expected = [r for r in truth[topic] if r.offset >= first]
        df = read(spark, path, subscribe=topic, **options)
        assert df.count() == len(expected)                       # no column decoded
        assert sorted(r.offset for r in df.select("offset").collect()) == \
            sorted(r.offset for r in expected)
        got = {(r.partition, r.n) for r in df.groupBy("partition").count()
               .withColumnRenamed("count", "n").collect()}
        assert got == {(p, sum(1 for r in expected if r.partition == p))
                       for p in {r.partition for r in expected}}


def test_a_pushed_down_timestamp_filter_is_applied_exactly(spark, mixed_db, pushdown):
    path, truth = mixed_db
    low = datetime.datetime.fromtimestamp(1_700_000_000_500 / 1000, tz=UTC)
    high = datetime.datetime.fromtimestamp(1_700_000_001_200 / 1000, tz=UTC)
    make = lambda: read(spark, path, subscribe="lz4", filterPushdown="true") \
        .where(f"timestamp >= '{low.isoformat()}' and timestamp < '{high.isoformat()}'")
    got, python = _both(spark, make)
    keep = lambda r: 1_700_000_000_500 <= r.timestamp < 1_700_000_001_200
    expected = _expected(truth["lz4"], keep)
    assert expected and len(expected) < len(truth["lz4"])
    assert _utc(got) == _sorted(r[:7] for r in expected)
    assert got == python


def _copy(path, tmp_path):
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    return copy


def test_a_flipped_byte_is_reported_as_a_corrupt_batch_not_returned(spark, mixed_db, tmp_path):
    path, _ = mixed_db
    copy = _copy(path, tmp_path)
    partition = os.path.join(copy, "none-1")
    # The largest batch of the partition's segments (which segment holds it depends on
    # where the log rolled): a byte inside its records, which the CRC covers.
    batches = []
    for name in sorted(n for n in os.listdir(partition) if n.endswith(".log")):
        with open(os.path.join(partition, name), "rb") as f:
            data = f.read()
        at = 0
        while at + 12 <= len(data):
            size = int.from_bytes(data[at + 8:at + 12], "big")
            batches.append((size, name, at))
            at += 12 + size
    size, name, at = max(batches)
    assert size >= 200
    at += 12 + size // 2
    with open(os.path.join(partition, name), "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))
    df = read(spark, copy, subscribe="none")
    with pytest.raises(Exception, match="CRC-32C") as raised:
        df.count()
    assert "streamlog verify" in str(raised.value)


def test_records_removed_after_planning_are_data_loss_or_skipped(spark, tmp_path):
    """A DataFrame keeps the ranges planned at its first action; retention removing part of
    them before a later action is seen by the executors themselves."""
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("r", partitions=1, config={"segment.bytes": 300})
        producer = db.producer()
        for i in range(30):
            producer.send("r", value=b"%02d" % i + b"x" * 48).result()
            producer.flush()
    strict = read(spark, path, subscribe="r")
    lenient = read(spark, path, subscribe="r", failOnDataLoss="false")
    assert strict.count() == lenient.count() == 30         # planned: offsets 0..29
    with streamlog.open(path, config={"log.retention.check.interval.ms": 20}) as db:
        db.alter_topic_config("r", {"retention.bytes": 400})
        assert wait_until(lambda: db.describe_topic("r").partitions[0].log_start_offset > 0,
                          timeout_s=30), "retention did not run"
    with streamlog.open(path, readonly=True) as db:
        log_start = db.describe_topic("r").partitions[0].log_start_offset
    with pytest.raises(Exception, match="failOnDataLoss") as raised:
        strict.collect()
    assert f"Cannot fetch offset 0 of r-0: the log starts at {log_start}" in str(raised.value)
    assert sorted(int(r.value[:2]) for r in lenient.collect()) == list(range(log_start, 30))


def test_a_read_task_pickles_to_the_packed_form_the_jvm_finds():
    from pyspark import cloudpickle  # what Spark pickles input partitions with

    task = ReadTask("/data/d\u00f6", OffsetRange("t.\u00fc-1", 7, 2**40, 2**40 + 9, None, -5),
                    include_headers=True, fail_on_data_loss=False, read_committed=True,
                    aborted=((5, 2**40, 2**40 + 3), (2**62, 2**40 + 4, 2**40 + 8)))
    packed = pack_task(task)
    assert packed.startswith(MAGIC)
    assert unpack_task(packed) == task
    for dumps in (pickle.dumps, cloudpickle.dumps):
        blob = dumps(task)
        assert packed in blob            # verbatim, as OffsetRangePartition.unpack reads it
        assert pickle.loads(blob) == task


def test_configure_falls_back_to_python_reads_with_a_warning_when_there_is_no_javac(
        monkeypatch, tmp_path):
    from pyspark.sql import SparkSession

    monkeypatch.setenv("STREAMLOG_CACHE_DIR", str(tmp_path))   # no jar built yet
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    builder = SparkSession.builder
    before = dict(builder._options)
    with pytest.warns(UserWarning, match="no javac found"):
        assert jvm.configure(builder) is builder
    assert builder._options == before


def test_configure_adds_the_jar_to_spark_jars_already_set(tmp_path):
    from pyspark.sql import SparkSession

    builder = SparkSession.Builder().config("spark.jars", "/elsewhere/x.jar")
    jvm.configure(jvm.configure(builder))   # twice: the jar is listed once
    jars = builder._options["spark.jars"].split(",")
    assert jars == ["/elsewhere/x.jar", jvm.jar_path()]
    assert os.path.isfile(jars[1])


def test_the_jar_is_compiled_once_into_an_empty_cache(monkeypatch, tmp_path, capsys):
    import zipfile

    monkeypatch.setenv("STREAMLOG_CACHE_DIR", str(tmp_path))
    jar = jvm.jar_path()
    assert "compiling the JVM reader" in capsys.readouterr().err   # progress on a slow step
    assert os.path.dirname(jar) == str(tmp_path)
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    assert {"streamlog/DefaultSource.class", "streamlog/RangeReader.class"} <= names
    built = os.stat(jar).st_mtime_ns
    assert jvm.jar_path() == jar and os.stat(jar).st_mtime_ns == built   # cached
    assert "compiling" not in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(jar)]   # no leftovers


def _columnar_batches(spark, df):
    """How many ColumnarBatches the scan handed to Spark when df ran (Spark's own metric)."""
    df.collect()
    nodes = [df._jdf.queryExecution().executedPlan()]
    while nodes:
        node = nodes.pop()
        if node.nodeName() == "ColumnarToRow":
            return node.metrics().apply("numInputBatches").value()
        children = node.children()
        nodes.extend(children.apply(i) for i in range(children.size()))
    raise AssertionError("no ColumnarToRow in the plan: the JVM reader was not used")


def test_large_records_are_handed_over_in_batches_of_bounded_bytes(spark, tmp_path):
    """8,192 rows of 1 MiB records would be one 8 GiB batch; a batch closes at 32 MiB."""
    path = str(tmp_path / "db")
    value = bytes(range(256)) * (2 << 12)   # 2 MiB
    with streamlog.open(path) as db:
        db.create_topic("big", partitions=1, config={"max.message.bytes": 4 << 20})
        producer = db.producer(max_request_size=4 << 20, batch_size=4 << 20)
        for i in range(40):
            producer.send("big", value=value, key=b"%d" % i).result()
        producer.flush()
    spark.conf.set("spark.sql.adaptive.enabled", "false")   # the plan that ran, not its wrapper
    try:
        df = read(spark, path, subscribe="big").selectExpr("sum(length(value)) as n")
        assert _columnar_batches(spark, df) == 3   # 16 + 16 + 8 records of 2 MiB
        assert df.collect()[0].n == 40 * len(value)
        small = read(spark, path, subscribe="big").selectExpr("count(offset) as n")
        assert _columnar_batches(spark, small) == 1   # offsets alone: one batch of 40 rows
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")


def _stream(spark, path, topic, checkpoint, name):
    """(source description, rows) of an availableNow query over topic into a memory table."""
    query = (spark.readStream.format("streamlog").option("subscribe", topic)
             .option("startingOffsets", "earliest").option("includeHeaders", "true")
             .option("maxOffsetsPerTrigger", "97").load(path)
             .writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) > 1   # maxOffsetsPerTrigger still applies: several micro-batches
    return batches[0]["sources"][0]["description"], _rows(spark.table(name))


@pytest.mark.parametrize("topic", ["gzip", "small"])
def test_micro_batches_read_through_the_jvm_reader_the_same_rows(spark, mixed_db, tmp_path,
                                                                 topic):
    path, truth = mixed_db
    description, got = _stream(spark, path, topic, tmp_path / "jvm", f"jvm_{topic}")
    assert "JVM reader" in description
    assert _utc(got) == _expected(truth[topic])
    spark.conf.set(jvm.ENABLED_CONF, "false")
    try:
        description, python = _stream(spark, path, topic, tmp_path / "py", f"py_{topic}")
    finally:
        spark.conf.unset(jvm.ENABLED_CONF)
    assert "JVM reader" not in description
    assert python == got
