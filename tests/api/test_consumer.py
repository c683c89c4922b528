"""The consumer through the public API, and the system behaviour around it."""
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import streamlog
from streamlog import TopicPartition
from support import wait_until

TP0 = TopicPartition("t", 0)



def fill(db, n, topic="t", partitions=1, **send):
    if topic not in db.topics():
        db.create_topic(topic, partitions=partitions)
    producer = db.producer(linger_ms=5)
    for i in range(n):
        producer.send(topic, value=b"v%d" % i, key=b"k%d" % i, timestamp_ms=10_000 + i * 10,
                      **send)
    producer.flush()
    producer.close()


def test_poll_returns_records_with_every_field(db):
    fill(db, 3)
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TP0])
    records = consumer.poll(timeout=5)
    assert records[1] == streamlog.Record("t", 0, 1, 10_010, 0, b"k1", b"v1", ())
    assert consumer.position(TP0) == 3


def test_max_poll_records_and_position_advance(db):
    fill(db, 1200)
    consumer = db.consumer(auto_offset_reset="earliest", max_poll_records=500)
    consumer.assign([TP0])
    sizes = []
    while consumer.position(TP0) < 1200:
        batch = consumer.poll(timeout=5)
        sizes.append(len(batch))
        assert [r.offset for r in batch] == list(range(batch[0].offset,
                                                       batch[0].offset + len(batch)))
    assert max(sizes) <= 500 and sum(sizes) == 1200


def test_auto_offset_reset_latest_earliest_none(db):
    fill(db, 5)
    latest = db.consumer()  # Kafka's default: latest
    latest.assign([TP0])
    assert latest.position(TP0) == 5 and latest.poll(timeout=0) == []
    earliest = db.consumer(auto_offset_reset="earliest")
    earliest.assign([TP0])
    assert earliest.position(TP0) == 0
    none = db.consumer(auto_offset_reset="none")
    none.assign([TP0])
    with pytest.raises(streamlog.NoOffsetForPartitionError) as missing:
        none.poll(timeout=0)
    # Kafka's two InvalidOffsetExceptions are siblings: catching one does not catch the other.
    assert isinstance(missing.value, streamlog.InvalidOffsetError)
    assert not isinstance(missing.value, streamlog.OffsetOutOfRangeError)
    none.seek(TP0, 99)
    with pytest.raises(streamlog.OffsetOutOfRangeError):
        none.poll(timeout=0)


def test_out_of_range_position_resets_per_policy(db):
    fill(db, 5)
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TP0])
    consumer.seek(TP0, 50)
    assert [r.offset for r in consumer.poll(timeout=5)] == [0, 1, 2, 3, 4]


def test_positions_below_a_log_start_raised_by_retention_reset_or_fail(db_path):
    with streamlog.open(db_path, config={"log.retention.check.interval.ms": 50}) as db:
        db.create_topic("t", config={"segment.bytes": 400, "file.delete.delay.ms": 0})
        producer = db.producer()
        for i in range(20):
            producer.send("t", value=b"%02d" % i + b"x" * 48).result()
        # Retention limited only now, so the first check (every 50 ms) sees the whole log and
        # deletes all it will ever delete: the log start does not move again under the test.
        db.alter_topic_config("t", {"retention.bytes": 400})
        assert wait_until(lambda: db.describe_topic("t").partitions[0].log_start_offset > 0)
        log_start = db.describe_topic("t").partitions[0].log_start_offset
        assert 0 < log_start < 20
        earliest = db.consumer(auto_offset_reset="earliest")
        earliest.assign([TP0])
        assert earliest.beginning_offsets([TP0]) == {TP0: log_start}
        assert earliest.position(TP0) == log_start
        earliest.seek(TP0, 0)  # below the log start: reset by auto_offset_reset
        records = earliest.poll(timeout=5)
        assert records[0].offset == log_start
        assert records[0].value.startswith(b"%02d" % log_start)
        strict = db.consumer(auto_offset_reset="none")
        strict.assign([TP0])
        strict.seek(TP0, 0)
        with pytest.raises(streamlog.OffsetOutOfRangeError) as refused:
            strict.poll(timeout=1)
        assert not isinstance(refused.value, streamlog.NoOffsetForPartitionError)
        assert (refused.value.partition, refused.value.offset) == (TP0, 0)
        assert db.describe_topic("t").partitions[0].log_start_offset == log_start


@pytest.mark.parametrize("readonly", [False, True])
def test_a_batch_larger_than_a_partitions_share_of_a_fetch_skips_nothing_after_it(db_path,
                                                                                  readonly):
    # A fetch reads the first partition with min_one_batch and the next ones without
    # (Kafka's ReplicaManager.readFromLog: minOneMessage only while nothing was read). A
    # segment whose first batch at the position did not fit made the read go on to the
    # next segment: the consumer got offsets 0 and 3, never 1 and 2. The segment holding
    # the position answers, also with nothing (Kafka's LocalLog.read reads on only while a
    # segment has no offset at or above it); the next fetch takes the large batch first.
    with streamlog.open(db_path) as db:
        db.create_topic("u", partitions=2)
        producer = db.producer(linger_ms=0)
        for p in range(2):
            for i in range(3):
                value = os.urandom(20000) if i == 1 else b"x" * 30
                producer.send("u", value=value, partition=p).result()
            db._broker.partition_log(TopicPartition("u", p)).roll()
            producer.send("u", value=b"y" * 30, partition=p).result()
    with streamlog.open(db_path, readonly=readonly) as db:
        consumer = db.consumer(auto_offset_reset="earliest", max_partition_fetch_bytes=1000)
        consumer.assign([TopicPartition("u", 0), TopicPartition("u", 1)])
        got = {0: [], 1: []}

        def eight_records():
            for record in consumer.poll(timeout=0.2):
                got[record.partition].append(record.offset)
            return len(got[0]) + len(got[1]) >= 8
        wait_until(eight_records, "8 records")
        assert got == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}
        consumer.close()


def test_seek_and_seek_to_ends(db):
    fill(db, 10)
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TP0])
    consumer.seek(TP0, 7)
    assert [r.offset for r in consumer.poll(timeout=5)] == [7, 8, 9]
    consumer.seek_to_beginning()
    assert consumer.poll(timeout=5)[0].offset == 0
    consumer.seek_to_end([TP0])
    assert consumer.position(TP0) == 10 and consumer.poll(timeout=0) == []
    with pytest.raises(ValueError):
        consumer.seek(TP0, -1)


def test_seek_to_end_is_evaluated_at_the_next_position_or_poll_and_empty_means_all(db):
    """Kafka's seekToBeginning/seekToEnd (KafkaConsumer javadoc, SubscriptionState
    .requestOffsetReset): "evaluates lazily ... only when poll(Duration) or
    position(TopicPartition) are called", and "if no partitions are provided", every
    assigned partition. The end was taken at the call, and an empty list sought nothing."""
    fill(db, 3)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest")
    consumer.assign([TP0])
    consumer.commit({TP0: 1})
    consumer.seek_to_end([TP0])
    fill(db, 2)                            # appended after the call, before the position
    assert consumer.position(TP0) == 5     # neither the end at the call nor the commit
    consumer.seek(TP0, 0)
    consumer.seek_to_end([])
    fill(db, 1)
    assert consumer.poll(timeout=0) == [] and consumer.position(TP0) == 6
    consumer.seek_to_beginning([])
    consumer.seek(TP0, 4)                  # a seek() after it wins
    assert [r.offset for r in consumer.poll(timeout=5)] == [4, 5]
    consumer.close()


def test_seek_discards_data_fetched_for_the_old_position(db):
    fill(db, 100)
    consumer = db.consumer(auto_offset_reset="earliest", max_poll_records=10)
    consumer.assign([TP0])
    assert consumer.poll(timeout=5)[0].offset == 0  # 100 fetched, 10 returned
    consumer.seek(TP0, 50)
    assert consumer.poll(timeout=5)[0].offset == 50


def test_offsets_for_times_and_end_offsets(db):
    fill(db, 10)  # timestamps 10_000, 10_010, ...
    consumer = db.consumer()
    consumer.assign([TP0])
    found = consumer.offsets_for_times({TP0: 10_045})
    assert found[TP0] == streamlog.OffsetAndTimestamp(5, 10_050)
    assert consumer.offsets_for_times({TP0: 99_999})[TP0] is None
    assert consumer.beginning_offsets([TP0]) == {TP0: 0}
    assert consumer.end_offsets([TP0]) == {TP0: 10}


def test_pause_and_resume(db):
    fill(db, 4, partitions=2)
    consumer = db.consumer(auto_offset_reset="earliest")
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    consumer.assign(tps)
    consumer.pause([tps[0]])
    got = consumer.poll(timeout=1)
    assert {r.partition for r in got} <= {1} and consumer.paused() == {tps[0]}
    consumer.resume([tps[0]])
    rest = []
    while consumer.position(tps[0]) < consumer.end_offsets([tps[0]])[tps[0]]:
        rest += consumer.poll(timeout=5)
    assert {r.partition for r in rest} == {0}


def test_iteration_yields_records_one_by_one(db):
    fill(db, 5)
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TP0])
    seen = []
    for record in consumer:
        seen.append(record.offset)
        if len(seen) == 5:
            break
    assert seen == [0, 1, 2, 3, 4]


def test_iteration_ends_when_another_thread_closes_the_consumer(db):
    """`for record in consumer` runs until close() (docs/API.md), which may come from any
    thread. close() holds the consumer while it leaves the group; the iterating thread,
    whose poll close() ended, polled again meanwhile and got "busy in another thread"."""
    fill(db, 1)
    iterated = threading.Event()
    ended = threading.Event()
    outcome = []

    class HoldsTheClose:
        def on_partitions_revoked(self, partitions):
            ended.wait(10)  # close() goes on once the iterating thread is done

    consumer = db.consumer(group_id="g", auto_offset_reset="earliest")
    consumer.subscribe(["t"], listener=HoldsTheClose())

    def iterate():
        try:
            for _ in consumer:
                iterated.set()
            outcome.append("ended")
        except streamlog.StreamlogError as exc:
            outcome.append(exc)
        finally:
            ended.set()
    t = threading.Thread(target=iterate)
    t.start()
    assert iterated.wait(10)
    consumer.close()
    t.join(10)
    assert outcome == ["ended"]


def test_poll_batch_gives_columns(db):
    fill(db, 300, partitions=1)
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TP0])
    chunks = consumer.poll_batch(timeout=5)
    assert len(chunks) == 1
    cols = chunks[0]
    assert (cols.topic, cols.partition) == ("t", 0) and len(cols) == 300
    assert cols.offsets.tolist() == list(range(300))
    assert cols.values() == [b"v%d" % i for i in range(300)]
    assert cols.keys()[5] == b"k5" and cols.timestamps[3] == 10_030
    assert consumer.position(TP0) == 300


def test_poll_batch_to_arrow(db):
    pa = pytest.importorskip("pyarrow")
    fill(db, 10)
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TP0])
    table = consumer.poll_batch(timeout=5)[0].to_arrow()
    assert table.num_rows == 10 and table.column("value")[3].as_py() == b"v3"
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")


def test_deserializers(db):
    fill(db, 2)
    consumer = db.consumer(auto_offset_reset="earliest", key_deserializer=bytes.decode,
                           value_deserializer=lambda b: b.upper())
    consumer.assign([TP0])
    assert [(r.key, r.value) for r in consumer.poll(timeout=5)] == [("k0", b"V0"), ("k1", b"V1")]


def positions_polled(consumer, tp, polls):
    """Per poll: the offsets it returned, or the error it raised; and the position after."""
    out = []
    for _ in range(polls):
        try:
            got = [r.offset for r in consumer.poll(timeout=1)]
        except streamlog.StreamlogError as exc:
            got = type(exc)
        out.append((got, consumer.position(tp)))
    return out


def test_a_record_the_deserializer_refuses_stops_the_position_there(db):
    """Kafka's CompletedFetch raises RecordDeserializationException at the record and leaves
    the position there; FetchCollector returns the records taken before it first. The
    exception used to drop the records of that poll (positions already past them) and the
    whole batch, so the next poll went on after the batch: offsets 0-6, 8 and 9 unseen."""
    db.create_topic("d")
    producer = db.producer()
    for values in ([b"%d" % i for i in range(5)], [b"5", b"6", b"bad", b"8", b"9"]):
        producer.send_batch("d", values, partition=0)
    producer.flush()

    def deserialize(value):
        if value == b"bad":
            raise ValueError("not a number")
        return int(value)
    tp = TopicPartition("d", 0)
    consumer = db.consumer(auto_offset_reset="earliest", value_deserializer=deserialize)
    consumer.assign([tp])
    assert positions_polled(consumer, tp, 3) == [
        (list(range(7)), 7), (streamlog.RecordDeserializationError, 7),
        (streamlog.RecordDeserializationError, 7)]
    try:
        consumer.poll(timeout=1)
    except streamlog.RecordDeserializationError as exc:
        assert (exc.topic_partition, exc.offset) == (tp, 7)
        assert isinstance(exc.__cause__, ValueError)
    consumer.seek(tp, 8)
    assert [r.value for r in consumer.poll(timeout=1)] == [8, 9]


def test_a_batch_that_fails_its_crc_is_raised_at_its_offset_until_sought_past(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t")
        producer = db.producer()
        for b in range(3):
            producer.send_batch("t", [b"batch%d-record%d-" % (b, i) for i in range(3)],
                                partition=0)
    log_file = os.path.join(root, "t-0", "00000000000000000000.log")
    with open(log_file, "r+b") as f:
        data = f.read()
        f.seek(data.index(b"batch1-record1-") + 3)
        f.write(b"X")                   # the second batch's CRC no longer holds
    with streamlog.open(root) as db:
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TP0])
        assert positions_polled(consumer, TP0, 3) == [
            ([0, 1, 2], 3), (streamlog.CorruptRecordError, 3),
            (streamlog.CorruptRecordError, 3)]
        consumer.seek(TP0, 6)
        assert [r.offset for r in consumer.poll(timeout=1)] == [6, 7, 8]


def test_poll_batch_after_a_partial_poll_keeps_to_max_records_and_gives_raw_bytes(db):
    """The records a poll() left of a batch were handed to poll_batch() whole, past its
    max_records, and as already-deserialized values it could not put in columns."""
    fill(db, 10)
    consumer = db.consumer(auto_offset_reset="earliest", value_deserializer=bytes.upper)
    consumer.assign([TP0])
    assert [r.value for r in consumer.poll(timeout=5, max_records=1)] == [b"V0"]
    (chunk,) = consumer.poll_batch(timeout=5, max_records=2)
    assert chunk.offsets.tolist() == [1, 2] and list(chunk.values()) == [b"v1", b"v2"]
    assert consumer.position(TP0) == 3
    assert [r.value for r in consumer.poll(timeout=5, max_records=1)] == [b"V3"]


@pytest.mark.parametrize("forever", [float("inf"), 1e12])
def test_a_timeout_past_what_a_thread_can_wait_means_no_bound(db, forever):
    """Kafka takes Long.MAX_VALUE ms for ever; poll(inf) and result(1e12) ended in an
    OverflowError from deep inside (math.ceil, lock.acquire)."""
    db.create_topic("forever")
    producer = db.producer()
    assert producer.send("forever", value=b"v").result(timeout=forever).offset == 0
    producer.flush(timeout=forever)
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition("forever", 0)])
    assert [r.value for r in consumer.poll(timeout=forever)] == [b"v"]
    producer.close(timeout=forever)


def test_unassigned_or_unknown_partitions_are_errors(db):
    fill(db, 1)
    consumer = db.consumer()
    with pytest.raises(streamlog.IllegalStateError, match="assign"):
        consumer.poll(timeout=0)
    with pytest.raises(streamlog.UnknownTopicOrPartitionError):
        consumer.assign([TopicPartition("t", 5)])
    with pytest.raises(streamlog.UnknownTopicOrPartitionError):
        consumer.assign([TopicPartition("nope", 0)])
    with pytest.raises(streamlog.IllegalStateError):
        consumer.seek(TopicPartition("t", 0), 0)


def test_every_call_on_a_closed_consumer_says_it_is_closed(db):
    """Kafka's consumer refuses every call but close() and wakeup() once closed
    (ClassicKafkaConsumer.acquireAndEnsureOpen: "This consumer has already been closed.").
    A closed consumer has no assignment: seek() and position() said the partition was
    not assigned, and the offset lookups answered as if it were open."""
    fill(db, 1)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest")
    consumer.assign([TP0])
    consumer.poll(timeout=5)
    consumer.close()
    calls = [lambda: consumer.poll(timeout=0), lambda: consumer.position(TP0),
             lambda: consumer.seek(TP0, 0), lambda: consumer.seek_to_beginning(),
             lambda: consumer.seek_to_end([TP0]), lambda: consumer.pause([TP0]),
             lambda: consumer.resume([TP0]), consumer.paused, consumer.assignment,
             consumer.subscription, lambda: consumer.beginning_offsets([TP0]),
             lambda: consumer.end_offsets([TP0]), lambda: consumer.offsets_for_times({TP0: 0}),
             lambda: consumer.committed([TP0]), consumer.group_metadata,
             lambda: consumer.commit(), lambda: consumer.assign([TP0])]
    for call in calls:
        with pytest.raises(streamlog.IllegalStateError, match="the consumer is closed"):
            call()
    consumer.wakeup()
    consumer.close()


def test_a_consumer_is_used_by_one_thread_at_a_time(db):
    fill(db, 1)
    consumer = db.consumer(fetch_max_wait_ms=5000)
    consumer.assign([TP0])
    inside = threading.Event()
    errors = []

    def long_poll():
        inside.set()
        consumer.poll(timeout=2)
    t = threading.Thread(target=long_poll)
    t.start()
    inside.wait()
    wait_until(lambda: db._broker.fetch_purgatory.watched() > 0, "the first poll is waiting")
    # poll, and (docs/API.md) seek: the calls that move positions, as Kafka's all refuse
    # a second thread (acquireAndEnsureOpen); seek() and the rest went through.
    for call in (lambda: consumer.poll(timeout=0), lambda: consumer.seek(TP0, 0),
                 lambda: consumer.seek_to_end(), lambda: consumer.position(TP0),
                 lambda: consumer.pause([TP0]), lambda: consumer.resume([TP0])):
        try:
            call()
        except streamlog.IllegalStateError as exc:
            errors.append(exc)
    t.join()
    assert len(errors) == 6 and all("one thread at a time" in str(e) for e in errors)


def test_long_poll_wakes_on_append_not_on_timeout(db, completions):
    """Each poll waits in the purgatory and is completed by the append that brings its record
    (on the appending thread), never by fetch.max.wait.ms on the wheel. How fast it wakes is
    measured in bench/bench_client.py, not asserted here."""
    completed_by = completions
    db.create_topic("t")
    consumer = db.consumer(fetch_max_wait_ms=60_000)
    consumer.assign([TP0])
    consumer.position(TP0)
    producer = db.producer()
    purgatory = db._broker.fetch_purgatory
    for i in range(5):
        got = []
        thread = threading.Thread(target=lambda got=got: got.append(consumer.poll(timeout=120)))
        thread.start()
        wait_until(lambda: purgatory.watched() > 0, "the poll is parked in the purgatory")
        producer.send("t", value=b"wake %d" % i).result()
        thread.join(60)
        assert not thread.is_alive() and [r.value for r in got[0]] == [b"wake %d" % i]
        assert completed_by[-1] == threading.current_thread().name  # the appender woke it
    assert len(completed_by) == 5


def test_an_idle_long_poll_waits_parked_instead_of_rereading_the_log(db, monkeypatch):
    """Parked in the purgatory until the wheel expires it: the log is read once before and
    once after the wait, never in a loop in between (a busy loop would read it thousands of
    times in a second)."""
    db.create_topic("t")
    consumer = db.consumer(fetch_max_wait_ms=500)
    consumer.assign([TP0])
    consumer.position(TP0)
    reads = []
    real_read = db._broker._read
    monkeypatch.setattr(db._broker, "_read", lambda *a: reads.append(1) or real_read(*a))
    assert consumer.poll(timeout=1.2) == []
    # The poll's 1.2 s take up to three fetches of 500 ms, each read before and after its wait.
    assert 1 <= len(reads) <= 6, f"{len(reads)} reads of the log in one idle poll"


WRITER = """
import sys, streamlog
path, n = sys.argv[1], int(sys.argv[2])
with streamlog.open(path) as db:
    db.create_topic("live", partitions=2)
    print("ready", flush=True)
    producer = db.producer(linger_ms=1, batch_size=4096)
    for i in range(n):
        producer.send("live", key=b"%d" % (i % 2), partition=i % 2,
                      value=b"%08d|" % i + b"x" * (i % 500))
    producer.flush()
print("done", flush=True)
"""


def test_readonly_process_follows_a_live_writer_and_never_sees_a_partial_batch(db_path):
    n = 20_000
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), db_path, str(n)],
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "ready"
    seen = {0: [], 1: []}
    with streamlog.open(db_path, readonly=True) as ro:
        consumer = ro.consumer(auto_offset_reset="earliest", fetch_max_wait_ms=50)
        consumer.assign([TopicPartition("live", 0), TopicPartition("live", 1)])
        deadline = time.monotonic() + 120
        while sum(len(v) for v in seen.values()) < n and time.monotonic() < deadline:
            for record in consumer.poll(timeout=1):
                i = int(record.value[:8])
                # whole, correct records only: the value is a pure function of its number
                assert record.value == b"%08d|" % i + b"x" * (i % 500)
                assert record.partition == i % 2 and record.offset == len(seen[i % 2])
                seen[i % 2].append(i)
    assert writer.stdout.readline().strip() == "done"
    writer.wait()
    writer.stdout.close()
    assert seen[0] == list(range(0, n, 2)) and seen[1] == list(range(1, n, 2))


def test_readonly_open_stops_before_a_torn_batch_at_the_tail(db_path):
    with streamlog.open(db_path) as db:
        db.create_topic("t")
        log_file = os.path.join(db_path, "t-0", "00000000000000000000.log")
        producer = db.producer()
        producer.send("t", value=b"a" * 1000).result()
        first_batch_end = os.path.getsize(log_file)
        producer.send("t", value=b"b" * 1000).result()
        second_batch_end = os.path.getsize(log_file)
    # Cut the second batch in the middle: its 61-byte header is whole, its records are not,
    # as a reader finds a batch that a writer (or a crash) left half-written.
    os.truncate(log_file, (first_batch_end + second_batch_end) // 2)
    with streamlog.open(db_path, readonly=True) as ro:
        consumer = ro.consumer(auto_offset_reset="earliest", fetch_max_wait_ms=50)
        consumer.assign([TP0])
        records = consumer.poll(timeout=5) + consumer.poll(timeout=0.5)
        assert [(r.offset, r.value) for r in records] == [(0, b"a" * 1000)]
        assert consumer.position(TP0) == 1 and consumer.end_offsets([TP0]) == {TP0: 1}
        p = ro.describe_topic("t").partitions[0]
        assert (p.high_watermark, p.log_end_offset) == (1, 1)


@pytest.mark.parametrize("producers", ["shared", "one_per_thread"])
def test_eight_producer_threads_and_four_consumer_threads_lose_and_duplicate_nothing(db,
                                                                                      producers):
    db.create_topic("busy", partitions=4)
    # One shared producer (producers are thread-safe) funnels each partition's records through
    # one accumulator. A producer per thread, with small batches, makes hundreds of appends
    # from several threads race on each partition log: only its append lock keeps them apart.
    shared = db.producer(linger_ms=1) if producers == "shared" else None
    per_thread = 2500
    expected = {b"t%d-%d" % (t, i) for t in range(8) for i in range(per_thread)}
    received = {p: [] for p in range(4)}
    done = threading.Event()
    errors = []

    def produce(t):
        try:
            producer = shared if shared is not None else db.producer(linger_ms=1, batch_size=512)
            for i in range(per_thread):
                producer.send("busy", value=b"t%d-%d" % (t, i), key=b"t%d" % t)
            if shared is None:
                producer.flush()
        except Exception as exc:  # reported below
            errors.append(exc)

    def consume(p):
        try:
            consumer = db.consumer(auto_offset_reset="earliest", fetch_max_wait_ms=100)
            consumer.assign([TopicPartition("busy", p)])
            while True:
                records = consumer.poll(timeout=0.5)
                received[p].extend(records)
                if not records and done.is_set():
                    end = consumer.end_offsets([TopicPartition("busy", p)])
                    if consumer.position(TopicPartition("busy", p)) >= \
                            end[TopicPartition("busy", p)]:
                        return
        except Exception as exc:  # reported below
            errors.append(exc)

    consumers = [threading.Thread(target=consume, args=(p,)) for p in range(4)]
    producer_threads = [threading.Thread(target=produce, args=(t,)) for t in range(8)]
    for t in consumers + producer_threads:
        t.start()
    for t in producer_threads:
        t.join()
    if shared is not None:
        shared.flush()
    done.set()
    for t in consumers:
        t.join(timeout=120)
    assert errors == []
    values = [r.value for p in range(4) for r in received[p]]
    assert len(values) == len(expected) and set(values) == expected  # nothing lost or twice
    for p in range(4):
        assert [r.offset for r in received[p]] == list(range(len(received[p])))
    # each producer thread's records keep their order (one key -> one partition)
    for t in range(8):
        mine = [int(r.value.split(b"-")[1]) for p in range(4) for r in received[p]
                if r.value.startswith(b"t%d-" % t)]
        assert mine == list(range(per_thread))


def test_a_partition_of_a_deleted_topic_reads_nothing_and_holds_no_other_back(db, caplog):
    # Kafka's FetchCollector.handleInitializeErrors: UNKNOWN_TOPIC_OR_PARTITION is logged and
    # the metadata refreshed, and the other partitions' records come as before. Raised out
    # of every poll, it kept u-0's records from the application for as long as t-0 stayed
    # assigned, and a deleted topic's partition listed first kept every other unread.
    fill(db, 1)
    fill(db, 3, topic="u")
    u0 = TopicPartition("u", 0)
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TP0, u0])
    db.delete_topic("t")
    got = []
    with caplog.at_level("WARNING", logger="streamlog.consumer"):
        for _ in range(3):
            got += [(r.topic, r.offset) for r in consumer.poll(timeout=0.2)]
    assert got == [("u", 0), ("u", 1), ("u", 2)]
    assert sum("t-0 is assigned but does not exist" in m for m in caplog.messages) == 1
    consumer.close()


def test_an_out_of_range_partition_without_a_reset_fails_after_the_others_are_read(db):
    # Kafka's FetchCollector drops the failing partition's fetch alone and throws only when
    # the poll has no records: with auto_offset_reset none, t-0 out of range raises, and
    # t-1's records, fetched with it, come with the next poll, whatever the order of the
    # assignment. Raised at once, they were never read when t-0 came first.
    db.create_topic("t", partitions=2)
    producer = db.producer()
    for partition in (0, 1):
        producer.send_batch("t", [b"v"] * 3, partition=partition)
    producer.flush()
    t1 = TopicPartition("t", 1)
    for order in ([TP0, t1], [t1, TP0]):
        consumer = db.consumer(auto_offset_reset="none")
        consumer.assign(order)
        consumer.seek(TP0, 99)
        consumer.seek(t1, 0)
        outcomes = []
        for _ in range(3):
            try:
                outcomes.append([(r.partition, r.offset) for r in consumer.poll(timeout=1)])
            except streamlog.OffsetOutOfRangeError:
                outcomes.append("out of range")
        assert [(1, 0), (1, 1), (1, 2)] in outcomes, (order, outcomes)
        assert "out of range" in outcomes
        consumer.close()


def test_closing_the_database_wakes_a_waiting_consumer(db_path):
    db = streamlog.open(db_path)
    db.create_topic("t")
    consumer = db.consumer(fetch_max_wait_ms=60_000)
    consumer.assign([TP0])
    consumer.position(TP0)
    result = {}

    def wait():
        try:
            result["records"] = consumer.poll(timeout=120)
        except streamlog.StreamlogError as exc:
            result["error"] = exc
    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: db._broker.fetch_purgatory.watched() > 0, "the poll is waiting")
    db.close()
    t.join(timeout=30)
    assert not t.is_alive()


def test_poll_batch_to_arrow_has_sparks_kafka_schema_with_null_headers(db):
    pa = pytest.importorskip("pyarrow")
    db.create_topic("t")
    producer = db.producer()
    producer.send("t", value=b"a", key=None, headers=[("h", b"1"), ("n", None)],
                  timestamp_ms=1500)
    producer.send("t", value=None, key=b"k", timestamp_ms=2500)
    producer.flush()
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TP0])
    (cols,) = consumer.poll_batch(timeout=5, include_headers=True)
    batch = cols.to_arrow(include_headers=True)
    assert batch.schema.names == ["key", "value", "topic", "partition", "offset", "timestamp",
                                  "timestampType", "headers"]
    assert all(f.nullable for f in batch.schema)
    assert batch.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    rows = batch.to_pylist()
    assert rows[0]["key"] is None and rows[1]["value"] is None
    assert rows[0]["headers"] == [{"key": "h", "value": b"1"}, {"key": "n", "value": None}]
    assert rows[1]["headers"] is None  # null, not empty, as Spark's Kafka source
    assert rows[0]["timestamp"].timestamp() == 1.5 and rows[1]["partition"] == 0
    with pytest.raises(ValueError, match="include_headers"):
        consumer.seek(TP0, 0)
        consumer.poll_batch(timeout=5)[0].to_arrow(include_headers=True)


def test_a_commit_with_a_deleted_topics_partition_stores_the_others(db):
    # Kafka's OffsetCommit answers per partition: the deleted topic's UNKNOWN_TOPIC_OR_PARTITION,
    # and the live topics' offsets stored. All or nothing, the auto-commit before a rebalance
    # (or on close) that followed a deletion stored none, and the group read the live
    # topics again from their last commit.
    fill(db, 3)
    fill(db, 5, topic="u")
    u0 = TopicPartition("u", 0)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest")
    consumer.subscribe(["t", "u"])
    got = []
    while len(got) < 8:
        got += consumer.poll(timeout=5)
    db.delete_topic("t")
    with pytest.raises(streamlog.UnknownTopicOrPartitionError):
        consumer.commit({TP0: 3, u0: 5})
    assert consumer.committed([u0])[u0].offset == 5
    consumer.close()


def test_a_loop_left_early_commits_only_the_records_it_received(db):
    # Kafka's consumer commits what poll() handed the application. The iterator polls a
    # batch and hands it on one record at a time: a loop that broke after 10 records of
    # 100 had the close() commit 100, and the group's next member never saw 10..99.
    fill(db, 100)
    with db.consumer(group_id="g", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["t"])
        for record in consumer:
            if record.offset == 9:
                break
    with db.consumer(group_id="g", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["t"])
        assert consumer.committed([TP0])[TP0].offset == 10
        assert next(iter(consumer)).offset == 10
