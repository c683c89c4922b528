"""The producer through the public API."""
import json
import os
import threading
import time

import numpy as np
import pytest

import streamlog
from streamlog import TopicPartition
from support import GENEROUS_S, callback_catching, wait_until


def drain(db, topic, **settings):
    """Every record of every partition of topic, from the start (a fresh consumer)."""
    partitions = db.describe_topic(topic).partitions
    consumer = db.consumer(auto_offset_reset="earliest", **settings)
    tps = [TopicPartition(topic, p.partition) for p in partitions]
    consumer.assign(tps)
    end = consumer.end_offsets(tps)
    out = []
    while any(consumer.position(tp) < end[tp] for tp in tps):
        out.extend(consumer.poll(timeout=5))
    consumer.close()
    return out



def test_send_returns_metadata_and_records_keep_their_order(db):
    db.create_topic("t", partitions=1)
    producer = db.producer()
    futures = [producer.send("t", value=b"%d" % i, timestamp_ms=1000 + i) for i in range(500)]
    producer.flush()
    metas = [f.result() for f in futures]
    assert [m.offset for m in metas] == list(range(500))
    assert metas[7] == streamlog.RecordMetadata("t", 0, 7, 1007)
    assert [r.value for r in drain(db, "t")] == [b"%d" % i for i in range(500)]


# key -> partition for 3 partitions, from Kafka's murmur2 test vectors
KAFKA_PLACEMENT_3 = {"21": 0, "foobar": 0, "a-little-bit-long-string": 2,
                     "a-little-bit-longer-string": 2, "abc": 0}


def test_keys_land_where_kafka_would_put_them(db):
    db.create_topic("t", partitions=3)
    producer = db.producer()
    for key, partition in KAFKA_PLACEMENT_3.items():
        assert producer.send("t", value=b"v", key=key.encode()).result().partition == partition


def test_same_key_same_partition_and_in_order(db):
    db.create_topic("t", partitions=8)
    producer = db.producer()
    sent = [(f"user-{i % 13}".encode(), b"%d" % i) for i in range(2000)]
    for key, value in sent:
        producer.send("t", value=value, key=key)
    producer.flush()
    by_key = {}
    for record in drain(db, "t"):
        by_key.setdefault(record.key, []).append((record.partition, record.value))
    for key, rows in by_key.items():
        assert len({p for p, _ in rows}) == 1, key
        assert [v for _, v in rows] == [v for k, v in sent if k == key]


def test_sticky_partitioner_spreads_null_key_batches_over_all_partitions(db):
    db.create_topic("t", partitions=6)
    producer = db.producer(batch_size=1000, linger_ms=10_000)
    futures = [producer.send("t", value=b"x" * 90) for _ in range(3000)]
    producer.flush()
    parts = [f.result().partition for f in futures]
    counts = [p.high_watermark for p in db.describe_topic("t").partitions]
    assert sum(counts) == 3000 and all(c > 0 for c in counts), counts
    # Sticky: consecutive null-key records stay on one partition for about a batch
    # (1000 bytes / ~111 bytes a record), instead of changing partition every record.
    switches = sum(1 for a, b in zip(parts, parts[1:], strict=False) if a != b)
    assert 3000 / 20 < switches < 3000 / 5, switches


def test_explicit_and_invalid_partitions(db):
    """A numpy integer is a partition, as it is a timestamp and in a (topic, partition) pair:
    send(partition=np.int64(1)) was refused with "topic 't' has partitions 0..1; cannot send
    to partition np.int64(1)", and so were send_batch's and a partitioner's."""
    db.create_topic("t", partitions=2)
    producer = db.producer()
    assert producer.send("t", value=b"v", partition=1).result().partition == 1
    assert producer.send("t", value=b"v", partition=np.int64(1)).result().partition == 1
    assert producer.send_batch("t", [b"v"], partition=np.int32(1)).result().partitions[0] == 1
    numpy_partitioner = db.producer(partitioner=lambda topic, key, n: np.int64(n - 1))
    assert numpy_partitioner.send("t", value=b"v").result().partition == 1
    for bad in (2, -1, "0", True, np.int64(2)):
        with pytest.raises(streamlog.InvalidRequestError):
            producer.send("t", value=b"v", partition=bad)
        with pytest.raises(streamlog.InvalidRequestError):
            producer.send_batch("t", [b"v"], partition=bad)


def test_an_internal_topic_is_refused_and_its_groups_keep_working(db):
    """send() to __consumer_offsets appended the record, which the group coordinator then
    read back as a group record: every later list_groups() failed with "undecodable record
    in __consumer_offsets-N". Kafka's ReplicaManager refuses a client's append to an
    internal topic ("Cannot append to internal topic", INVALID_TOPIC_EXCEPTION), as the
    wire's Produce here does; partitionsFor still answers for it."""
    db.create_topic("t")
    consumer = db.consumer(group_id="g", enable_auto_commit=False)
    consumer.assign([TopicPartition("t", 0)])
    consumer.commit({TopicPartition("t", 0): 0})
    producer = db.producer()
    for send in (lambda: producer.send("__consumer_offsets", key=b"k", value=b"x"),
                 lambda: producer.send_batch("__consumer_offsets", [b"x"], keys=[b"k"])):
        with pytest.raises(streamlog.InvalidTopicError,
                           match="cannot append to internal topic __consumer_offsets"):
            send()
    producer.flush()
    assert len(producer.partitions_for("__consumer_offsets")) == 50
    assert [g.group_id for g in db.list_groups()] == ["g"]
    consumer.close()


@pytest.mark.parametrize("name", ["round_robin", "random"])
def test_named_partitioners(db, name):
    db.create_topic("t", partitions=4)
    producer = db.producer(partitioner=name)
    parts = [producer.send("t", value=b"v", key=b"same").result().partition for _ in range(40)]
    if name == "round_robin":
        assert parts == [p % 4 for p in range(parts[0], parts[0] + 40)]
    else:
        assert len(set(parts)) > 1  # keys ignored: 40 draws over 4 partitions


def test_callable_partitioner(db):
    db.create_topic("t", partitions=3)
    producer = db.producer(partitioner=lambda topic, key, n: len(key or b"") % n)
    assert producer.send("t", value=b"v", key=b"ab").result().partition == 2
    bad = db.producer(partitioner=lambda topic, key, n: 7)
    with pytest.raises(streamlog.InvalidRequestError, match="partitioner returned 7"):
        bad.send("t", value=b"v")


def test_acks_zero_reports_offset_minus_one_but_appends(db):
    db.create_topic("t")
    producer = db.producer(acks=0)
    assert producer.send("t", value=b"v").result().offset == -1
    assert [r.value for r in drain(db, "t")] == [b"v"]


def test_acks_all_completes_only_after_the_fdatasync_of_its_segment(db, monkeypatch):
    db.create_topic("t")
    log_file = os.path.realpath(os.path.join(db.path, "t-0", "00000000000000000000.log"))
    disk = threading.Event()  # held: the disk has not finished the fdatasync yet
    synced = []               # (path, whether the acks="all" future was done by then)
    real_fdatasync = os.fdatasync
    durable = None

    def held_fdatasync(fd):
        disk.wait(30)
        real_fdatasync(fd)
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), durable is not None and durable.done()))

    monkeypatch.setattr(os, "fdatasync", held_fdatasync)
    try:
        durable = db.producer(acks="all").send("t", value=b"durable")
        # acks=1 completes at the append, while the fdatasync for acks="all" is held
        assert db.producer(acks=1).send("t", value=b"fast").result(timeout=10).offset >= 0
        assert not durable.done()
    finally:
        disk.set()
    assert durable.result(timeout=10).offset >= 0
    # the partition's .log was fdatasynced, and the future was still pending when it finished
    assert (log_file, False) in synced, synced


def test_an_acks_all_batch_appended_as_the_database_closes_fails_and_holds_nothing(
        db, monkeypatch):
    """The wait for the batch's fsync could not be set up (the database closed between the
    append and it): the batch was never finished, and flush() and close() waited for it
    for good. It fails with that error now."""
    db.create_topic("t")
    producer = db.producer(acks="all")

    def closing(*_):
        raise streamlog.errors.LogClosedError("injected: the database is closing")
    monkeypatch.setattr(db._broker, "when_durable", closing)
    future = producer.send("t", value=b"appended, never fsynced")
    assert isinstance(future.exception(timeout=GENEROUS_S), streamlog.errors.LogClosedError)
    with pytest.raises(streamlog.errors.LogClosedError):
        producer.flush(timeout=GENEROUS_S)
    monkeypatch.undo()
    assert producer.send("t", value=b"next").result(timeout=GENEROUS_S).offset == 1


def test_a_closed_client_is_not_kept_by_its_database(db):
    """The handle kept every producer and consumer it made until it closed: a long-lived
    database making a client per request held them all (120 KiB a closed producer of a
    64-partition topic)."""
    import gc
    import weakref
    db.create_topic("t")
    clients = [db.producer(), db.consumer()]
    refs = [weakref.ref(c) for c in clients]
    for client in clients:
        client.close()
    del clients, client
    db.producer().close()   # a later client lets the closed ones go
    gc.collect()
    assert [ref() for ref in refs] == [None, None]


def test_acks_all_group_commit_shares_fsyncs_across_threads(db):
    db.create_topic("t", partitions=2)
    producer = db.producer(acks="all", linger_ms=0)
    futures = []

    def send(n):
        futures.extend(producer.send("t", value=b"%d" % i, partition=n % 2) for i in range(200))
    threads = [threading.Thread(target=send, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    producer.flush()
    assert sorted((m.partition, m.offset) for m in (f.result() for f in futures)) == \
        sorted((p, o) for p in range(2) for o in range(400))


def test_callbacks_get_metadata_or_the_error(db):
    db.create_topic("t")
    producer = db.producer()
    got = []
    producer.send("t", value=b"ok", callback=lambda md, err: got.append((md, err)))
    producer.flush()
    assert got[0][0].offset == 0 and got[0][1] is None
    # An error found only at append time: the topic vanishes while the batch lingers.
    lingering = db.producer(linger_ms=60_000)
    future = lingering.send("t", value=b"late", callback=lambda md, err: got.append((md, err)))
    future.add_done_callback(got.append)
    db.delete_topic("t")
    with pytest.raises(streamlog.UnknownTopicOrPartitionError):
        lingering.flush()  # a failed append is never reported as success
    assert got[1][0] is None and isinstance(got[1][1], streamlog.UnknownTopicOrPartitionError)
    assert got[2] is future
    with pytest.raises(streamlog.UnknownTopicOrPartitionError):
        future.result()


@pytest.mark.parametrize("acks", [1, "all"])
def test_callbacks_of_one_partition_run_in_offset_order_across_sending_threads(db, acks):
    # KafkaProducer.send: "Callbacks for records being sent to the same partition are
    # guaranteed to execute in order." A record's callback used to be added after its batch
    # could complete on another thread's drain, and batches drained by two threads could
    # complete in either order: hundreds of callbacks ran after a later record's.
    db.create_topic("t")
    p = db.producer(acks=acks, linger_ms=0, batch_size=300)
    seen = []

    def send_all():
        for _ in range(2000):
            p.send("t", b"x" * 50, partition=0,
                   callback=lambda metadata, error: seen.append(metadata.offset))

    threads = [threading.Thread(target=send_all) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    p.close()
    assert len(seen) == 8000
    assert seen == sorted(seen)


def test_a_raising_callback_is_logged_never_raised_by_send(db, caplog):
    """A callback's exception is logged, as Kafka's ProducerBatch.completeFutureAndFireCallbacks
    logs it ("Error executing user-provided callback"): an idle producer appends inside
    send(), so the callback runs there, and send() raising for a record already written
    would have its caller send it again."""
    db.create_topic("t")
    producer = db.producer()  # fresh and idle: its first record is appended inside send()

    def fails(metadata, error):
        raise RuntimeError("callback bug")

    future = producer.send("t", value=b"once", callback=fails)
    assert future.result().offset == 0
    future.add_done_callback(lambda f: 1 / 0)  # done already: runs at once, logged too
    producer.flush()
    assert [r.value for r in drain(db, "t")] == [b"once"]
    assert [r.exc_info[0] for r in caplog.records if r.name == "streamlog.producer"] == \
        [RuntimeError, ZeroDivisionError]


def finishes(call):
    """call() on another thread, which must return: a deadlock fails the test, never hangs
    it (the bound only limits how long a broken build takes to fail). Returns its result."""
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(call()), daemon=True)
    thread.start()
    thread.join(GENEROUS_S)
    assert not thread.is_alive(), f"{call} never returned: the thread waits on itself"
    return outcome[0] if outcome else None


def test_a_callback_may_send_a_record_that_fills_a_batch_of_its_own_partition(db):
    """Kafka runs callbacks on its sender thread, where send() is allowed. They ran while
    the appending thread held the partition's drain lock, so a send() from one whose record
    filled a batch of that partition drained it again and the thread waited on itself."""
    db.create_topic("t")
    producer = db.producer(linger_ms=60_000, batch_size=200)
    chained = []

    def chain(metadata, error):
        chained.append(producer.send("t", value=b"y" * 300))   # fills a batch: drained now

    producer.send("t", value=b"x", callback=chain)
    finishes(producer.flush)
    assert [f.result().offset for f in chained] == [1]


@pytest.mark.parametrize("settings", [{"linger_ms": 60_000}, {"acks": "all"}])
def test_flush_inside_a_callback_is_refused_and_close_does_not_wait(db, settings):
    """Kafka's KafkaProducer.flush() throws when called on the thread that runs callbacks
    (KIP-1118: it would wait for batches that thread completes), and close() there is
    close(Duration.ZERO). Here flush() waited on the partition's drain lock its own thread
    held (linger), or, with acks="all", for fsyncs of the flusher thread it ran on."""
    db.create_topic("t", partitions=2)
    producer = db.producer(**settings)
    flushes, raised = callback_catching(producer.flush, streamlog.IllegalStateError)
    producer.send("t", value=b"x", partition=0, callback=flushes)
    producer.send("t", value=b"y", partition=1)
    finishes(producer.flush)
    assert len(raised) == 1 and "inside a producer callback" in str(raised[0])
    producer.send("t", value=b"z", partition=0, callback=lambda md, err: producer.close())
    finishes(producer.flush)
    assert producer.closed
    assert sorted(r.value for r in drain(db, "t")) == [b"x", b"y", b"z"]


def test_a_send_that_close_overtakes_is_refused_never_left_pending(db):
    """close() flushes what was added before it, and a send() that looked before close()
    began but adds its record after close() sealed the batches was left in an open batch
    that nothing appends: its future never completed (12 of ~70,000 sends racing close()
    from 3 threads). Kafka's RecordAccumulator refuses an append once closed ("Producer
    closed while send in progress"). The serializer runs between the two points."""
    db.create_topic("t")

    def closing_serializer(value):
        producer.close()
        return value
    producer = db.producer(linger_ms=60_000, value_serializer=closing_serializer)
    with pytest.raises(streamlog.ProducerClosedError):
        producer.send("t", value=b"late")
    assert db.describe_topic("t").partitions[0].high_watermark == 0


def test_serializers(db):
    db.create_topic("t")
    producer = db.producer(key_serializer=str.encode,
                           value_serializer=lambda v: json.dumps(v).encode())
    producer.send("t", key="k", value={"a": 1}).result()
    (record,) = drain(db, "t", key_deserializer=bytes.decode, value_deserializer=json.loads)
    assert record.key == "k" and record.value == {"a": 1}


def test_non_bytes_without_serializer_is_a_type_error(db):
    db.create_topic("t")
    with pytest.raises(TypeError, match="serializer"):
        db.producer().send("t", value="text")


def test_record_too_large_for_the_topic_or_the_request(db):
    db.create_topic("small", config={"max.message.bytes": 1000})
    producer = db.producer()
    with pytest.raises(streamlog.RecordTooLargeError, match="max.message.bytes"):
        producer.send("small", value=b"x" * 1000)
    db.create_topic("big")
    with pytest.raises(streamlog.RecordTooLargeError):
        db.producer(max_request_size=500).send("big", value=b"x" * 600)
    # batches respect max.message.bytes: many records just under it go in several batches
    for _ in range(20):
        producer.send("small", value=b"y" * 400)
    producer.flush()
    assert len(drain(db, "small")) == 20


def test_linger_holds_a_batch_until_it_fills_or_flush(db):
    db.create_topic("t")
    producer = db.producer(linger_ms=60_000, batch_size=1000)
    producer.send("t", value=b"a")
    assert db.describe_topic("t").partitions[0].high_watermark == 0  # lingering (60 s)
    for _ in range(20):
        producer.send("t", value=b"b" * 100)  # fills the batch: it is sent without flush
    assert wait_until(lambda: db.describe_topic("t").partitions[0].high_watermark >= 9)
    producer.flush()
    assert db.describe_topic("t").partitions[0].high_watermark == 21


def test_linger_expiry_sends_without_flush(db):
    db.create_topic("t")
    producer = db.producer(linger_ms=20)
    future = producer.send("t", value=b"a")
    assert future.result(timeout=10).offset == 0  # the wheel sealed it after ~20 ms


def test_slow_appends_do_not_make_every_send_idle(db, monkeypatch):
    # linger_ms=0: a send after a quiet spell goes out at once, one in a burst joins a
    # batch. The quiet was counted from the previous send's start, so an append slower
    # than that spell (one waiting on an fdatasync of the same file) made every next send
    # "idle": a batch per record, appended at once, each append slow again. An idempotent
    # acks="all" producer sat there at 10,000 rec/s instead of ~250,000.
    db.create_topic("t")
    broker = db._broker
    produce, appends = broker.produce, []

    def slow_produce(*args, **kwargs):
        appends.append(1)
        time.sleep(0.0005)               # far longer than the quiet that counts as idle
        return produce(*args, **kwargs)
    monkeypatch.setattr(broker, "produce", slow_produce)
    producer = db.producer(acks="all")
    for i in range(400):
        producer.send("t", value=b"%d" % i, partition=0)
    producer.flush()
    assert len(appends) <= 100, f"{len(appends)} appends for 400 records sent in a burst"
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition("t", 0)])
    got = []
    while len(got) < 400:
        got += [r.value for r in consumer.poll(timeout=5)]
    assert got == [b"%d" % i for i in range(400)]
    consumer.close()


def test_full_buffer_memory_sends_lingering_batches_at_once(db):
    db.create_topic("t")
    producer = db.producer(linger_ms=60_000, batch_size=10**6, buffer_memory=2000)
    futures = [producer.send("t", value=b"x" * 900) for _ in range(6)]
    # Each send past 2000 buffered bytes made every batch ready, as in Kafka: no 60 s wait.
    assert [f.result(timeout=10).offset for f in futures[:4]] == [0, 1, 2, 3]
    producer.flush()
    with pytest.raises(streamlog.RecordTooLargeError, match="buffer.memory"):
        producer.send("t", value=b"x" * 3000)


def test_full_buffer_memory_blocks_then_times_out_when_acks_never_come(db):
    db.create_topic("t")
    producer = db.producer(acks="all", buffer_memory=2000, max_block_ms=200)
    stuck = []  # a disk that does not sync until the test lets it
    real_add_waiter = db._broker.flusher.add_waiter
    db._broker.flusher.add_waiter = lambda tp, offset, callback: stuck.append(
        (tp, offset, callback))
    first = producer.send("t", value=b"x" * 900)
    producer.send("t", value=b"x" * 900)
    started = time.monotonic()
    with pytest.raises(streamlog.KafkaTimeoutError, match="max.block.ms"):
        producer.send("t", value=b"x" * 900)
    assert time.monotonic() - started >= 0.2 and not first.done()
    db._broker.flusher.add_waiter = real_add_waiter
    for waiter in stuck:
        real_add_waiter(*waiter)
    assert first.result(timeout=10).offset == 0


def test_headers_and_timestamps_round_trip(db):
    db.create_topic("t")
    producer = db.producer()
    producer.send("t", value=b"v", headers=[("trace", b"abc"), ("empty", None)],
                  timestamp_ms=123456)
    producer.send("t", value=b"w")
    producer.flush()
    first, second = drain(db, "t")
    assert first.headers == (("trace", b"abc"), ("empty", None)) and first.timestamp == 123456
    assert second.headers == ()


def test_log_append_time_topic_stamps_records_and_metadata(db):
    db.create_topic("t", config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    meta = db.producer().send("t", value=b"v", timestamp_ms=1).result()
    (record,) = drain(db, "t")
    assert meta.timestamp == record.timestamp >= before and record.timestamp_type == 1


def test_a_timestamp_outside_the_topics_window_fails_its_send(db):
    # KIP-937 (Kafka's LogValidator.validateTimestamp): on a CreateTime topic a record's
    # timestamp may lie at most message.timestamp.before.max.ms before the broker's clock
    # and after.max.ms after it (INVALID_TIMESTAMP otherwise); each left at its default
    # falls back to the deprecated difference.max.ms (LogConfig); LogAppendTime topics
    # replace the timestamps and check none.
    minute, hour = 60_000, 3_600_000
    db.create_topic("window", config={"message.timestamp.before.max.ms": minute,
                                      "message.timestamp.after.max.ms": minute})
    db.create_topic("difference", config={"message.timestamp.difference.max.ms": minute,
                                          "message.timestamp.before.max.ms": 10 * hour})
    db.create_topic("appended", config={"message.timestamp.type": "LogAppendTime",
                                        "message.timestamp.before.max.ms": minute})
    producer = db.producer()
    now = int(time.time() * 1000)
    for topic, offset_ms in [("window", -hour), ("window", hour), ("difference", hour)]:
        with pytest.raises(streamlog.InvalidTimestampError, match="out of range"):
            producer.send(topic, value=b"v", timestamp_ms=now + offset_ms).result()
    with pytest.raises(streamlog.InvalidTimestampError):
        producer.flush()   # reports the failed sends once
    for topic, offset_ms in [("window", -1000), ("difference", -hour), ("appended", -hour)]:
        producer.send(topic, value=b"v", timestamp_ms=now + offset_ms).result()
    assert {t: db.describe_topic(t).partitions[0].log_end_offset
            for t in ("window", "difference", "appended")} == {
        "window": 1, "difference": 1, "appended": 1}


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_compressed_sends_round_trip(db, codec):
    db.create_topic("t")
    producer = db.producer(compression_type=codec, linger_ms=5)
    values = [b"compressible %d " % i * 10 for i in range(300)]
    for v in values:
        producer.send("t", value=v)
    producer.flush()
    assert [r.value for r in drain(db, "t")] == values


def test_unknown_topic_and_auto_create(db_path):
    with streamlog.open(db_path) as db:
        with pytest.raises(streamlog.UnknownTopicOrPartitionError, match="create_topic"):
            db.producer().send("nope", value=b"v")
    with streamlog.open(db_path + "-auto", config={"auto.create.topics.enable": True,
                                                   "num.partitions": 2}) as db:
        db.producer().send("fresh", value=b"v").result()
        assert len(db.describe_topic("fresh").partitions) == 2


def test_closed_producer_refuses_sends_after_flushing(db):
    db.create_topic("t")
    producer = db.producer(linger_ms=60_000)
    future = producer.send("t", value=b"last")
    producer.close()
    assert future.result(timeout=0).offset == 0
    with pytest.raises(streamlog.ProducerClosedError):
        producer.send("t", value=b"late")


def test_flush_of_another_acks_all_producer_inside_a_callback_is_refused(db):
    """An acks="all" producer's callbacks run on the database's one flusher thread, which
    completes every acks="all" producer's batches: a flush() of another such producer
    there waited for that thread's own fsync, and every acks="all" producer of the database
    stopped. Refused as the producer's own flush() is there (KIP-1118)."""
    db.create_topic("t")
    first, second = db.producer(acks="all"), db.producer(acks="all")

    def sends_and_flushes():
        second.send("t", value=b"b")
        second.flush()

    callback, raised = callback_catching(sends_and_flushes, streamlog.IllegalStateError)
    first.send("t", value=b"a", callback=callback)
    finishes(first.flush)
    wait_until(lambda: raised, "the callback ran")
    assert "inside a producer callback" in str(raised[0])
    finishes(second.flush)
    assert sorted(r.value for r in drain(db, "t")) == [b"a", b"b"]


def test_close_with_a_timeout_stops_waiting_without_raising(db, monkeypatch):
    """Kafka's KafkaProducer.close(Duration): "a timeout of zero means do not wait for
    pending send requests to complete"; past the timeout it raises nothing. close(timeout=0)
    raised KafkaTimeoutError while an acks="all" batch waited for its fsync."""
    db.create_topic("t")
    held = []   # the fsync acknowledgements, held back until the producer is closed
    monkeypatch.setattr(db._broker, "when_durable",
                        lambda tp, offset, callback: held.append(callback))
    producer = db.producer(acks="all")
    future = producer.send("t", value=b"v")
    producer.close(timeout=0)
    assert producer.closed and not future.done()
    for acknowledge in held:
        acknowledge(None)
    assert future.result(timeout=0).offset == 0


def test_kafka_dotted_config_names(db):
    db.create_topic("t")
    producer = db.producer(config={"linger.ms": 60_000, "batch.size": 10**6})
    producer.send("t", value=b"v")
    assert db.describe_topic("t").partitions[0].high_watermark == 0
    producer.flush()
    with pytest.raises(streamlog.InvalidConfigurationError, match="unknown producer config"):
        db.producer(config={"linger.secs": 1})
    with pytest.raises(streamlog.InvalidConfigurationError, match="twice"):
        db.producer(config={"acks": 0}, acks=1)


def test_delivery_timeout_below_linger_plus_request_timeout_is_refused_unless_defaulted(db):
    """Kafka's KafkaProducer.configureDeliveryTimeout: delivery.timeout.ms must be at least
    linger.ms + request.timeout.ms; a smaller one given is a ConfigException, the default
    (120,000) is raised to that sum."""
    with pytest.raises(streamlog.InvalidConfigurationError,
                       match=r"delivery_timeout_ms \(1000\) must be at least linger_ms \+ "
                             r"request_timeout_ms \(0 \+ 30000\)"):
        db.producer(delivery_timeout_ms=1000)
    with pytest.raises(streamlog.InvalidConfigurationError, match="delivery_timeout_ms"):
        db.producer(config={"delivery.timeout.ms": 40_000, "linger.ms": 20_000})
    assert db.producer(delivery_timeout_ms=30_000).settings["delivery.timeout.ms"] == 30_000
    assert db.producer(linger_ms=200_000).settings["delivery.timeout.ms"] == 230_000
    assert db.producer(linger_ms=2**40).settings["delivery.timeout.ms"] == 2**31 - 1


def test_send_batch_columnar_path(db):
    db.create_topic("t", partitions=4)
    producer = db.producer()
    keys = [b"k%d" % (i % 10) for i in range(5000)]
    values = [b"v%d" % i for i in range(5000)]
    result = producer.send_batch("t", values, keys=keys).result(timeout=10)
    assert len(result) == 5000
    single = {k: producer.send("t", value=b"probe", key=k).result().partition for k in set(keys)}
    assert all(int(result.partitions[i]) == single[keys[i]] for i in range(5000))
    records = {(r.partition, r.offset): r for r in drain(db, "t")}
    for i in (0, 1, 2499, 4999):
        rec = records[(int(result.partitions[i]), int(result.offsets[i]))]
        assert (rec.key, rec.value) == (keys[i], values[i])


def test_send_batch_keeps_order_with_earlier_sends(db):
    db.create_topic("t")
    producer = db.producer(linger_ms=60_000)
    producer.send("t", value=b"first")
    producer.send_batch("t", [b"second", b"third"])
    producer.send("t", value=b"fourth")
    producer.flush()
    assert [r.value for r in drain(db, "t")] == [b"first", b"second", b"third", b"fourth"]


def test_send_batch_null_keys_spread_and_explicit_partition(db):
    db.create_topic("t", partitions=4)
    producer = db.producer(batch_size=2000)
    result = producer.send_batch("t", [b"x" * 100] * 2000).result()
    assert len(set(result.partitions.tolist())) == 4
    pinned = producer.send_batch("t", [b"y"] * 10, partition=2).result()
    assert set(pinned.partitions.tolist()) == {2}


def test_batches_of_keyed_records_stay_under_the_topics_max_message_bytes(db):
    from streamlog.storage.file_records import FileRecords
    db.create_topic("t", config={"max.message.bytes": 1000})
    producer = db.producer(linger_ms=60_000)  # batch.size 16384 > the topic's limit
    for _ in range(50):
        producer.send("t", value=b"z" * 300, key=b"k")
    producer.flush()
    log = FileRecords(f"{db.path}/t-0/00000000000000000000.log", readonly=True)
    sizes = [b.size_in_bytes for b in log.batches()]
    log.close()
    assert sum(b for b in sizes) > 0 and max(sizes) <= 1000 and len(sizes) >= 17


def test_a_batch_left_behind_by_a_sticky_switch_is_appended_without_flush(db):
    db.create_topic("t", partitions=2)
    producer = db.producer(batch_size=500, linger_ms=60_000)
    for _ in range(10):  # ~5 records fill a batch; the sticky partition then moves on
        producer.send("t", value=b"x" * 90)
    counts = [p.high_watermark for p in db.describe_topic("t").partitions]
    assert sum(counts) >= 4, counts  # full batches went out though linger is 60 s
    producer.flush()


def test_a_record_joins_its_partitions_batch_while_that_waits_to_be_appended(db):
    """Kafka's accumulator appends to the last batch of a partition's queue until the sender
    takes it: a ready (sealed) batch still takes records while it waits, up to batch.size."""
    db.create_topic("t")
    producer = db.producer(linger_ms=60_000, batch_size=1000)
    first = producer.send("t", value=b"a")
    state = producer._partitions[TopicPartition("t", 0)]
    later = []
    sender = threading.Thread(target=lambda: later.extend(
        producer.send("t", value=b"b" * 100) for _ in range(8)))
    with state.drain_lock:   # holds back whoever appends this partition's batches
        flusher = threading.Thread(target=producer.flush)
        flusher.start()
        wait_until(lambda: state.sealed, "flush sealed the lingering batch")
        # Records that each opened a batch of their own would fill one and wait for this lock.
        sender.start()
        wait_until(lambda: not sender.is_alive(), "the sends return while the batch waits")
    flusher.join(10)
    producer.flush()
    log = db._broker.partition_log(TopicPartition("t", 0))
    # The sealed batch took records up to ~1000 bytes; the last one opened the next batch.
    assert [b.records_count for b in log.read(0, 1 << 20).batches] == [8, 1]
    assert [f.result(timeout=10).offset for f in [first, *later]] == list(range(9))
    assert [r.value for r in drain(db, "t")] == [b"a"] + [b"b" * 100] * 8


def test_a_send_blocked_on_buffer_memory_with_a_huge_max_block_ms_waits_instead_of_failing(db):
    # max.block.ms is a long; a wait longer than threading.TIMEOUT_MAX used to raise OverflowError.
    db.create_topic("t")
    producer = db.producer(acks="all", buffer_memory=2000, max_block_ms=10**15)
    stuck = []
    real_add_waiter = db._broker.flusher.add_waiter
    db._broker.flusher.add_waiter = lambda tp, offset, callback: stuck.append(
        (tp, offset, callback))
    producer.send("t", value=b"x" * 900)
    producer.send("t", value=b"x" * 900)
    sent = []
    blocked = threading.Thread(target=lambda: sent.append(producer.send("t", value=b"x" * 900)))
    blocked.start()
    wait_until(lambda: producer._space_waiters, "the third send waits for room")
    assert producer._space_waiters == 1 and not sent  # blocked for room, not failed
    db._broker.flusher.add_waiter = real_add_waiter
    for waiter in stuck:
        real_add_waiter(*waiter)
    blocked.join(10)
    assert not blocked.is_alive() and sent[0].result(timeout=10).offset == 2


def test_close_with_timeout_0_fails_the_records_not_sent_yet(db):
    # Kafka's close(Duration.ZERO) is a forced close: RecordAccumulator.abortIncompleteBatches
    # "will fail any unsent and unacknowledged records immediately". A record still
    # lingering was appended by it all the same.
    db.create_topic("t")
    producer = db.producer(linger_ms=60_000)
    future = producer.send("t", value=b"lingering")
    producer.close(timeout=0)
    with pytest.raises(streamlog.ProducerClosedError, match="forced close"):
        future.result(timeout=0)
    assert db.describe_topic("t").partitions[0].high_watermark == 0
