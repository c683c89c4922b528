"""Writing DataFrames into topics: round trips, columns as Spark's Kafka sink takes them, errors,
staging files cleaned up on commit and on abort, streaming writes."""
import os

import pytest

import streamlog

pytestmark = pytest.mark.spark

HEADERS = "ARRAY<STRUCT<key: STRING, value: BINARY>>"


def make_topics(path, **partitions):
    with streamlog.open(path) as db:
        for name, count in partitions.items():
            db.create_topic(name, partitions=count)


def read_back(spark, path, topic):
    return (spark.read.format("streamlog").option("subscribe", topic)
            .option("includeHeaders", "true").load(path))


def staging_left(path):
    """Staged data files still on disk (an aborted job's mark is not data)."""
    root = os.path.join(path, "spark-staging")
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files
            if not f.endswith(".aborted")]


def test_a_written_dataframe_reads_back_identical(spark, fresh_db):
    make_topics(fresh_db, rt=3)
    rows = [(b"k%d" % i if i % 3 else None, b"v%d" % i * (i % 7), i % 3,
             [("h", b"%d" % i)] if i % 2 else None) for i in range(90)]
    df = spark.createDataFrame(rows, f"key BINARY, value BINARY, partition INT, headers {HEADERS}")
    df.repartition(3).write.format("streamlog").mode("append").option("topic", "rt").save(fresh_db)
    back = read_back(spark, fresh_db, "rt").collect()
    got = [(r.key, r.value, r.partition,
            None if r.headers is None else [(h.key, h.value) for h in r.headers]) for r in back]
    assert sorted(got, key=repr) == sorted(rows, key=repr)
    # Rows of one partition keep their offsets dense: 0..n-1, nothing lost or repeated.
    for p in range(3):
        offsets = sorted(r.offset for r in back if r.partition == p)
        assert offsets == list(range(30))
    assert staging_left(fresh_db) == []


def test_string_columns_are_written_as_utf8_and_the_topic_column_routes_rows(spark, fresh_db):
    make_topics(fresh_db, left=1, right=1)
    df = spark.createDataFrame([("left", "ключ", "zé"), ("right", None, "b"), ("left", "k", "c")],
                               "topic STRING, key STRING, value STRING")
    df.coalesce(1).write.format("streamlog").mode("append").save(fresh_db)
    left = read_back(spark, fresh_db, "left").orderBy("offset").collect()
    assert [(r.key, r.value) for r in left] == [("ключ".encode(), "zé".encode()), (b"k", b"c")]
    assert [(r.key, r.value) for r in read_back(spark, fresh_db, "right").collect()] == \
        [(None, b"b")]


def test_a_source_dataframe_writes_as_is_its_other_columns_ignored(spark, fresh_db):
    # Spark's KafkaWriter.validateQuery looks up key, value, topic, partition and headers
    # alone: a DataFrame read from the source (offset, timestamp, timestampType besides)
    # mirrors into another topic unchanged.
    make_topics(fresh_db, src=2, dst=2)
    rows = [(b"k%d" % i, b"v%d" % i, i % 2, [("h", b"%d" % i)]) for i in range(6)]
    spark.createDataFrame(rows, f"key BINARY, value BINARY, partition INT, headers {HEADERS}") \
        .write.format("streamlog").mode("append").option("topic", "src").save(fresh_db)
    source = read_back(spark, fresh_db, "src")
    assert {"offset", "timestamp", "timestampType"} <= set(source.columns)
    source.write.format("streamlog").mode("append").option("topic", "dst").save(fresh_db)
    copied = [(r.key, r.value, r.partition, [(h.key, h.value) for h in r.headers])
              for r in read_back(spark, fresh_db, "dst").collect()]
    assert sorted(copied) == sorted(rows)


def test_the_topic_option_overrides_the_topic_column(spark, fresh_db):
    make_topics(fresh_db, chosen=1, ignored=1)
    df = spark.createDataFrame([("ignored", "v")], "topic STRING, value STRING")
    df.write.format("streamlog").mode("append").option("topic", "chosen").save(fresh_db)
    assert read_back(spark, fresh_db, "chosen").count() == 1
    assert read_back(spark, fresh_db, "ignored").count() == 0


def test_rows_without_a_partition_go_where_the_producer_would_put_their_key(spark, fresh_db):
    make_topics(fresh_db, keyed=4)
    keys = [b"user-%d" % i for i in range(40)]
    df = spark.createDataFrame([(k, b"v") for k in keys], "key BINARY, value BINARY")
    df.write.format("streamlog").mode("append").option("topic", "keyed").save(fresh_db)
    got = {r.key: r.partition for r in read_back(spark, fresh_db, "keyed").collect()}
    with streamlog.open(fresh_db) as db:
        placed = db.producer().send_batch("keyed", [b"probe"] * len(keys), keys=keys).result()
    assert got == {k: int(p) for k, p in zip(keys, placed.partitions, strict=True)}
    assert len(set(got.values())) > 1  # hashed over partitions, not all in one


def test_streaming_write_routes_rows_by_the_topic_column_and_keeps_headers(spark, fresh_db,
                                                                          tmp_path):
    make_topics(fresh_db, src=2, even=2, odd=2)
    headers = [[("n", b"%d" % i)] if i % 3 else None for i in range(12)]
    with streamlog.open(fresh_db) as db:
        db.producer().send_batch("src", [b"s%d" % i for i in range(12)], partition=1,
                                 headers=headers).result()
    q = (spark.readStream.format("streamlog").option("subscribe", "src")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "5")
         .option("includeHeaders", "true").load(fresh_db)
         .selectExpr("IF(offset % 2 = 0, 'even', 'odd') AS topic", "key", "value", "partition",
                     "headers")
         .writeStream.format("streamlog")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
         .start(fresh_db))
    q.awaitTermination()
    assert q.exception() is None
    assert len([p for p in q.recentProgress if p["numInputRows"]]) == 3  # 3 micro-batches
    for topic, parity in (("even", 0), ("odd", 1)):
        copied = read_back(spark, fresh_db, topic).orderBy("offset").collect()
        assert [(r.partition, r.value, None if r.headers is None else
                 [(h.key, h.value) for h in r.headers]) for r in copied] == \
            [(1, b"s%d" % i, headers[i]) for i in range(parity, 12, 2)]
    assert staging_left(fresh_db) == []


def test_a_failed_job_appends_nothing_and_leaves_no_staging_files(spark, fresh_db):
    from pyspark.sql.functions import udf

    make_topics(fresh_db, fails=1)

    @udf("string")
    def explode_on_last(v):
        if v == "v39":
            raise ValueError("task failure on purpose")
        return v
    df = spark.createDataFrame([("v%d" % i,) for i in range(40)], "value STRING") \
        .repartition(4).select(explode_on_last("value").alias("value"))
    with pytest.raises(Exception, match="task failure on purpose"):
        df.write.format("streamlog").mode("append").option("topic", "fails").save(fresh_db)
    assert read_back(spark, fresh_db, "fails").count() == 0
    assert staging_left(fresh_db) == []


@pytest.mark.parametrize("ddl, options, message", [
    ("key STRING", {"topic": "t"}, "Required attribute 'value' not found"),
    ("value STRING", {}, "topic option required when no 'topic' attribute is present"),
    ("value INT", {"topic": "t"}, "value must be a(n) string or binary"),
    ("key INT, value STRING", {"topic": "t"}, "key must be a(n) string or binary"),
    ("topic INT, value STRING", {}, "topic must be a(n) string"),
    ("value STRING, partition STRING", {"topic": "t"}, "partition must be a(n) int"),
    ("value STRING, headers STRING", {"topic": "t"}, "headers must be a(n) array"),
])
def test_columns_the_sink_cannot_write_are_refused(spark, fresh_db, ddl, options, message):
    make_topics(fresh_db, t=1)
    df = spark.createDataFrame([], ddl)
    writer = df.write.format("streamlog").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception) as info:
        writer.save(fresh_db)
    assert message in str(info.value)


def test_overwrite_is_refused_because_topics_are_append_only(spark, fresh_db):
    make_topics(fresh_db, t=1)
    df = spark.createDataFrame([("v",)], "value STRING")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("streamlog").mode("overwrite").option("topic", "t").save(fresh_db)
    assert read_back(spark, fresh_db, "t").count() == 0


def test_a_writer_waits_for_the_lock_up_to_lock_timeout_ms(spark, fresh_db):
    make_topics(fresh_db, locked=1)
    df = spark.createDataFrame([("v",)], "value STRING")
    with streamlog.open(fresh_db):  # this process holds the writer lock during the job
        with pytest.raises(Exception, match="DatabaseLockedError"):
            df.write.format("streamlog").mode("append").option("topic", "locked") \
                .option("lockTimeoutMs", "200").save(fresh_db)
    assert staging_left(fresh_db) == []
    df.write.format("streamlog").mode("append").option("topic", "locked").save(fresh_db)
    assert read_back(spark, fresh_db, "locked").count() == 1
