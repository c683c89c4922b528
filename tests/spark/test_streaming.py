"""Structured Streaming: availableNow and restarts, admission control, discovery, triggers."""
import json

import pytest

import streamlog
from streamlog_spark import StreamlogDataSource
from streamlog_spark.errors import DataLossError
from streamlog_spark.streaming import StreamReader

pytestmark = pytest.mark.spark


def produce(path, topic, values, partition=None):
    with streamlog.open(path) as db:
        if topic not in db.topics():
            db.create_topic(topic, partitions=2)
        db.producer().send_batch(topic, values, partition=partition).result()


def stream(spark, path, **options):
    reader = spark.readStream.format("streamlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def run_available_now(df, out, checkpoint):
    """Run to completion into a Parquet sink; return each batch's (rows, end offsets)."""
    q = (df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
         .writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    return [(p["numInputRows"], json.loads(p["sources"][0]["endOffset"]))
            for p in q.recentProgress if p["numInputRows"]]


def test_available_now_reads_all_and_a_restart_reads_only_new_records(spark, fresh_db,
                                                                       tmp_path):
    produce(fresh_db, "s", [b"a%d" % i for i in range(30)], partition=0)
    produce(fresh_db, "s", [b"b%d" % i for i in range(10)], partition=1)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    df = stream(spark, fresh_db, subscribe="s", startingOffsets="earliest",
                maxOffsetsPerTrigger="15")
    batches = run_available_now(df, out, ck)
    assert [n for n, _ in batches] == [15, 15, 10]  # the limit holds under availableNow
    # maxOffsetsPerTrigger is spread over the partitions in proportion to their backlog.
    assert batches[0][1] == {"s": {"0": 11, "1": 4}}
    assert batches[-1][1] == {"s": {"0": 30, "1": 10}}

    produce(fresh_db, "s", [b"c%d" % i for i in range(4)], partition=1)
    batches = run_available_now(df, out, ck)
    assert [n for n, _ in batches] == [4]
    rows = spark.read.parquet(out).collect()
    keys = [(r.partition, r.offset) for r in rows]
    assert len(keys) == len(set(keys)) == 44  # every record once, none twice
    assert sorted(r.value for r in rows if r.partition == 1)[-4:] == ["c0", "c1", "c2", "c3"]


def test_streaming_starts_at_latest_by_default(spark, fresh_db, tmp_path):
    produce(fresh_db, "late", [b"old%d" % i for i in range(5)], partition=0)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    df = stream(spark, fresh_db, subscribe="late")
    assert run_available_now(df, out, ck) == []
    produce(fresh_db, "late", [b"new"], partition=0)
    assert [n for n, _ in run_available_now(df, out, ck)] == [1]
    assert [r.value for r in spark.read.parquet(out).collect()] == ["new"]


def test_streaming_starting_offsets_json_and_timestamp(spark, fresh_db, tmp_path):
    with streamlog.open(fresh_db) as db:
        db.create_topic("j", partitions=2)
        p = db.producer()
        for i in range(6):
            p.send("j", value=b"%d" % i, partition=i % 2, timestamp_ms=1000 * (i + 1))
        p.flush()
    df = stream(spark, fresh_db, subscribe="j",
                startingOffsets=json.dumps({"j": {"0": 2, "1": -2}}))
    run_available_now(df, str(tmp_path / "o1"), str(tmp_path / "c1"))
    got = sorted((r.partition, r.offset) for r in spark.read.parquet(str(tmp_path / "o1"))
                 .collect())
    assert got == [(0, 2), (1, 0), (1, 1), (1, 2)]
    df = stream(spark, fresh_db, subscribe="j", startingTimestamp="4000")
    run_available_now(df, str(tmp_path / "o2"), str(tmp_path / "c2"))
    got = sorted(r.value for r in spark.read.parquet(str(tmp_path / "o2")).collect())
    assert got == ["3", "4", "5"]


def test_new_partitions_and_new_matching_topics_are_picked_up(spark, fresh_db, tmp_path):
    produce(fresh_db, "dyn-a", [b"a0", b"a1"], partition=0)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    df = stream(spark, fresh_db, subscribePattern="dyn-.*", startingOffsets="earliest")
    assert sum(n for n, _ in run_available_now(df, out, ck)) == 2
    with streamlog.open(fresh_db) as db:
        db.add_partitions("dyn-a", 3)
        db.create_topic("dyn-b", partitions=1)
        db.create_topic("other", partitions=1)
        p = db.producer()
        p.send_batch("dyn-a", [b"a2"], partition=2).result()
        p.send_batch("dyn-b", [b"b0", b"b1"], partition=0).result()
        p.send_batch("other", [b"x"], partition=0).result()
    assert sum(n for n, _ in run_available_now(df, out, ck)) == 3
    values = sorted(r.value for r in spark.read.parquet(out).collect())
    assert values == ["a0", "a1", "a2", "b0", "b1"]


def test_processing_time_trigger_reads_appends_while_running(spark, fresh_db, tmp_path):
    produce(fresh_db, "live", [b"x0"], partition=0)
    df = stream(spark, fresh_db, subscribe="live", startingOffsets="earliest")
    q = (df.selectExpr("CAST(value AS STRING) AS value").writeStream.format("memory")
         .queryName("live_sink").trigger(processingTime="200 milliseconds").start())
    try:
        q.processAllAvailable()
        produce(fresh_db, "live", [b"x1", b"x2"], partition=1)
        q.processAllAvailable()
        values = sorted(r.value for r in spark.sql("SELECT value FROM live_sink").collect())
    finally:
        q.stop()
    assert values == ["x0", "x1", "x2"]


def test_include_headers_in_streaming(spark, fresh_db, tmp_path):
    with streamlog.open(fresh_db) as db:
        db.create_topic("h", partitions=1)
        p = db.producer()
        p.send("h", value=b"with", headers=[("a", b"1")])
        p.send("h", value=b"without")
        p.flush()
    df = stream(spark, fresh_db, subscribe="h", startingOffsets="earliest",
                includeHeaders="true")
    q = (df.selectExpr("CAST(value AS STRING) AS value", "headers").writeStream
         .format("parquet").option("path", str(tmp_path / "o"))
         .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True).start())
    q.awaitTermination()
    got = {r.value: r.headers for r in spark.read.parquet(str(tmp_path / "o")).collect()}
    assert got["without"] is None
    assert [(h.key, h.value) for h in got["with"]] == [("a", b"1")]


# --- the stream reader driven through the DataSource API as Spark drives it -------------------

def _reader(path, clock=None, **options):
    """A stream reader made as Spark makes it; clock: its time source (maxTriggerDelay)."""
    source = StreamlogDataSource({k.lower(): str(v) for k, v in {"path": path, **options}.items()})
    reader = source.streamReader(source.schema())
    return reader if clock is None else StreamReader(reader.options, clock=clock)


def test_max_offsets_per_trigger_is_prorated_and_no_partition_is_starved(fresh_db):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    with streamlog.open(fresh_db) as db:
        db.create_topic("b", partitions=3)
        p = db.producer()
        p.send_batch("b", [b"x"] * 100, partition=0).result()
        p.send_batch("b", [b"x"] * 50, partition=1).result()
        p.send_batch("b", [b"x"] * 1, partition=2).result()
    reader = _reader(fresh_db, subscribe="b", startingOffsets="earliest",
                     maxOffsetsPerTrigger=30)
    start = reader.initialOffset()
    assert start == {"b": {"0": 0, "1": 0, "2": 0}}
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(30)
    end = reader.latestOffset(start, limit)
    assert end == {"b": {"0": 19, "1": 10, "2": 1}}  # 30 in all, partition 2 not starved
    assert reader.reportLatestOffset() == {"b": {"0": 100, "1": 50, "2": 1}}
    reader.stop()


def test_min_offsets_per_trigger_waits_until_enough_or_max_trigger_delay(fresh_db):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    produce(fresh_db, "m", [b"x"] * 5, partition=0)
    waiting = _reader(fresh_db, subscribe="m", startingOffsets="earliest",
                      minOffsetsPerTrigger=10, maxTriggerDelay="1h")
    start = waiting.initialOffset()
    # A query's first trigger is admitted whatever waits: Spark's KafkaMicroBatchStream
    # starts lastTriggerMillis at 0, so delayBatch finds maxTriggerDelay long passed.
    first = waiting.latestOffset(start, ReadAllAvailable())
    assert first == {"m": {"0": 5, "1": 0}}
    produce(fresh_db, "m", [b"x"] * 5, partition=1)
    assert waiting.latestOffset(first, ReadAllAvailable()) == first  # 5 < 10: no batch yet
    produce(fresh_db, "m", [b"x"] * 5, partition=1)
    assert waiting.latestOffset(first, ReadAllAvailable()) == {"m": {"0": 5, "1": 10}}
    waiting.stop()
    impatient = _reader(fresh_db, subscribe="m", startingOffsets="earliest",
                        minOffsetsPerTrigger=100, maxTriggerDelay="0s")
    first = impatient.latestOffset(impatient.initialOffset(), ReadAllAvailable())
    assert first == {"m": {"0": 5, "1": 10}}
    produce(fresh_db, "m", [b"x"], partition=0)
    assert impatient.latestOffset(first, ReadAllAvailable()) == {"m": {"0": 6, "1": 10}}
    impatient.stop()


def test_max_trigger_delay_counts_from_the_last_admitted_batch(fresh_db):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    produce(fresh_db, "d", [b"x"] * 5, partition=0)
    now = [0.0]
    reader = _reader(fresh_db, clock=lambda: now[0], subscribe="d", startingOffsets="earliest",
                     minOffsetsPerTrigger=10, maxTriggerDelay="10s")
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first == {"d": {"0": 5, "1": 0}}  # the query's first trigger: at once
    produce(fresh_db, "d", [b"y"] * 3, partition=0)
    now[0] = 4.0  # 3 < 10 wait, 4 s since the last batch
    assert reader.latestOffset(first, ReadAllAvailable()) == first
    now[0] = 10.5  # the delay passed: a batch of what waits
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second == {"d": {"0": 8, "1": 0}}
    produce(fresh_db, "d", [b"z"], partition=0)
    now[0] = 15.0  # 15 s since the query started, but only 4.5 s since that batch
    assert reader.latestOffset(second, ReadAllAvailable()) == second
    now[0] = 20.5
    assert reader.latestOffset(second, ReadAllAvailable()) == {"d": {"0": 9, "1": 0}}
    reader.stop()


def _rows(reader, start, end):
    return sum(batch.num_rows for task in reader.partitions(start, end)
               for batch in reader.read(task))


def _data_loss_reported(path, topic, checkpointed, caplog, message):
    """The trigger after `checkpointed`, as a restarted query takes it: DataLossError naming
    message (failOnDataLoss, the default); with failOnDataLoss=false a warning naming it.
    Returns (the second reader, still open, and the offsets its trigger answered)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    failing = _reader(path, subscribe=topic)
    with pytest.raises(DataLossError, match=message):
        failing.latestOffset(checkpointed, ReadAllAvailable())
    failing.stop()
    going_on = _reader(path, subscribe=topic, failOnDataLoss="false")
    with caplog.at_level("WARNING", logger="streamlog.spark"):
        after = going_on.latestOffset(checkpointed, ReadAllAvailable())
    assert message in caplog.text
    return going_on, after


def test_a_log_end_below_where_the_query_stands_is_data_loss_then_it_goes_on_from_it(
        fresh_db, caplog):
    # Spark's KafkaOffsetReader.getOffsetRangesFromResolvedOffsets: "Partition t-0's offset
    # was changed from 5 to 2": reportDataLoss (fail, or warn and go on). Here the topic is
    # deleted and made again under a query's checkpoint; the query must neither stall at 5
    # until the new log passes it nor then skip the new log's first records silently.
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    produce(fresh_db, "r", [b"old"] * 5, partition=0)
    reader = _reader(fresh_db, subscribe="r", startingOffsets="earliest")
    checkpointed = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert checkpointed == {"r": {"0": 5, "1": 0}}
    reader.stop()
    with streamlog.open(fresh_db) as db:
        db.delete_topic("r")
    produce(fresh_db, "r", [b"new"] * 2, partition=0)
    going_on, after = _data_loss_reported(fresh_db, "r", checkpointed, caplog,
                                          "Partition r-0's offset was changed from 5 to 2")
    assert after == {"r": {"0": 2, "1": 0}}
    assert _rows(going_on, checkpointed, after) == 0
    produce(fresh_db, "r", [b"more"] * 3, partition=0)
    later = going_on.latestOffset(after, ReadAllAvailable())
    assert later == {"r": {"0": 5, "1": 0}} and _rows(going_on, after, later) == 3
    going_on.stop()


def test_a_partition_found_mid_stream_whose_log_no_longer_starts_at_0_is_data_loss(
        fresh_db, caplog):
    # getOffsetRangesFromResolvedOffsets: "Added partition t-2 starts from 3 instead of 0".
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    produce(fresh_db, "g", [b"a"] * 2, partition=0)
    reader = _reader(fresh_db, subscribe="g", startingOffsets="earliest")
    first = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    reader.stop()
    with streamlog.open(fresh_db) as db:
        db.add_partitions("g", 3)
        db.producer().send_batch("g", [b"p2-%d" % i for i in range(5)], partition=2).result()
        db.delete_records({streamlog.TopicPartition("g", 2): 3})
    going_on, after = _data_loss_reported(fresh_db, "g", first, caplog,
                                          "Added partition g-2 starts from 3 instead of 0")
    assert after == {"g": {"0": 2, "1": 0, "2": 5}} and _rows(going_on, first, after) == 2
    going_on.stop()


def test_available_now_stops_at_the_log_ends_of_when_it_was_prepared(fresh_db):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    produce(fresh_db, "a", [b"x"] * 5, partition=0)
    reader = _reader(fresh_db, subscribe="a", startingOffsets="earliest")
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    produce(fresh_db, "a", [b"y"] * 3, partition=0)  # appended after the trigger started
    assert reader.latestOffset(start, ReadAllAvailable()) == {"a": {"0": 5, "1": 0}}
    assert reader.reportLatestOffset() == {"a": {"0": 8, "1": 0}}  # it did see them
    reader.stop()


def test_the_stream_readers_executor_read_uses_the_isolation_level(
        events_db, consumer_isolation_levels):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    path, _ = events_db
    for options, level in (({}, "read_uncommitted"),
                           ({"isolationLevel": "read_committed"}, "read_committed")):
        reader = _reader(path, subscribe="events", startingOffsets="earliest", **options)
        start = reader.initialOffset()
        ranges = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
        consumer_isolation_levels.clear()
        assert sum(batch.num_rows for batch in reader.read(ranges[0])) == 20
        assert consumer_isolation_levels == [level]
        reader.stop()


def test_a_new_query_starting_below_the_log_start_fails_or_starts_at_the_log_start(
        retained_db):
    path, log_start = retained_db
    starting = json.dumps({"r": {"0": 0}})
    failing = _reader(path, subscribe="r", startingOffsets=starting)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        failing.initialOffset()
    failing.stop()
    skipping = _reader(path, subscribe="r", startingOffsets=starting, failOnDataLoss="false")
    assert skipping.initialOffset() == {"r": {"0": log_start}}
    skipping.stop()


def test_min_offsets_above_max_offsets_is_refused(spark, events_db):
    path, _ = events_db
    with pytest.raises(Exception, match=r"minOffsetPerTrigger\(10\) is higher than the "
                                        r"maxOffsetsPerTrigger\(5\)"):
        stream(spark, path, subscribe="events", minOffsetsPerTrigger="10",
               maxOffsetsPerTrigger="5").writeStream.format("noop").start().awaitTermination()


def test_ending_offsets_are_refused_in_streaming(spark, events_db):
    path, _ = events_db
    with pytest.raises(Exception, match="ending offset not valid in streaming queries"):
        stream(spark, path, subscribe="events", endingOffsets="latest") \
            .writeStream.format("noop").start().awaitTermination()
