"""Idempotent producer through the public API (KAFKA_REFERENCE.md §5): who is idempotent,
what the batches carry, and that a repeated batch is never written twice -- across a clean
reopen, a kill -9, a failed append and retention."""
import os
import time

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.errors import InvalidConfigurationError, OutOfOrderSequenceError
from streamlog.storage import files
from streamlog.storage.record_batch import NO_PRODUCER_ID, build_batch

from support.child import run_py

TP = TopicPartition("t", 0)


def batches(db, tp=TP):
    return list(db._broker.partition_log(tp).read(0, 1 << 30).batches)


def idempotent_batch(pid, seq, count=2, epoch=0):
    # Timestamps of now: a producer whose last batch is older than producer.id.expiration.ms
    # (a day) is forgotten at the next open, as in Kafka.
    return build_batch([b"v%d" % (seq + i) for i in range(count)],
                       timestamp=int(time.time() * 1000), producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


@pytest.fixture
def db(tmp_path):
    with streamlog.open(str(tmp_path / "db")) as db:
        db.create_topic("t", partitions=2)
        yield db


def test_acks_all_makes_a_producer_idempotent_and_numbers_each_partition(db):
    p = db.producer(acks="all")
    assert p.settings["enable.idempotence"] is True
    for i in range(6):
        p.send("t", value=b"%d" % i, partition=i % 2)
    p.send_batch("t", values=[b"x"] * 5, partition=1)
    p.flush()
    for tp in (TP, TopicPartition("t", 1)):
        got = batches(db, tp)
        assert {b.producer_id for b in got} == {p._producer[0]}
        assert {b.producer_epoch for b in got} == {0}
        expected = 0
        for b in got:  # each batch's first sequence continues the last one's
            assert b.base_sequence == expected
            expected = b.last_sequence + 1
    p.close()


def test_send_batch_chunks_carry_their_sequences_whether_or_not_they_were_overtaken(
        db, monkeypatch):
    # A send_batch() chunk is encoded with the producer id, epoch and sequence it will most
    # likely get (no re-CRC of the whole batch at the append); a chunk another batch
    # overtook is stamped again. Either way the log holds a gapless run of sequences.
    from streamlog.client import producer as producer_module
    restamped = []
    real = producer_module.set_producer
    monkeypatch.setattr(producer_module, "set_producer",
                        lambda *args: (restamped.append(args[-1]), real(*args)))
    db.create_topic("small", config={"max.message.bytes": 1000})   # several chunks a call
    small = TopicPartition("small", 0)
    p = db.producer(acks="all")
    p.send_batch("small", values=[b"x" * 50] * 30)
    p.flush()
    assert restamped == []
    real_expected = p._expected_stamp
    monkeypatch.setattr(p, "_expected_stamp",   # as if a send() from another thread came first
                        lambda tp: (*real_expected(tp)[:2], real_expected(tp)[2] + 7))
    p.send_batch("small", values=[b"y" * 50] * 30)
    p.flush()
    assert restamped
    got = batches(db, small)
    assert len(got) >= 4 and {b.producer_id for b in got} == {p._producer[0]}
    expected = 0
    for b in got:
        assert b.base_sequence == expected
        expected = b.last_sequence + 1
    assert expected == 60
    p.close()


def test_the_default_acks_leaves_idempotence_off_as_kafka_does(db):
    # Kafka: enable.idempotence not set and acks != all -> idempotence disabled.
    p = db.producer()
    assert p.settings["acks"] == 1 and p.settings["enable.idempotence"] is False
    p.send("t", value=b"x", partition=0).result()
    assert batches(db)[0].producer_id == NO_PRODUCER_ID
    off = db.producer(acks="all", enable_idempotence=False)
    off.send("t", value=b"y", partition=0).result()
    assert batches(db)[-1].producer_id == NO_PRODUCER_ID


def test_idempotence_asked_for_needs_acks_all(db):
    with pytest.raises(InvalidConfigurationError, match="needs acks='all'"):
        db.producer(enable_idempotence=True, acks=1)
    with pytest.raises(InvalidConfigurationError, match="needs acks='all'"):
        db.producer(enable_idempotence=True)  # the default acks is 1 here


def test_a_repeated_batch_is_answered_with_its_offsets_and_not_written(db):
    broker = db._broker
    pid, _ = broker.init_producer_id()
    first = broker.produce(TP, idempotent_batch(pid, 0))
    broker.produce(TP, idempotent_batch(pid, 2))
    again = broker.produce(TP, idempotent_batch(pid, 0))   # a retry of the first
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert broker.partition_log(TP).log_end_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        broker.produce(TP, idempotent_batch(pid, 10))       # a gap


def test_a_repeated_batch_on_a_log_append_time_topic_is_answered_its_append_time(db):
    # UnifiedLog.append answers a duplicate with setLogAppendTime(duplicate.timestamp): the
    # retry gets the time the first append stamped, as its first answer did (it got -1).
    db.create_topic("stamped", config={"message.timestamp.type": "LogAppendTime"})
    broker, tp = db._broker, TopicPartition("stamped", 0)
    pid, _ = broker.init_producer_id()
    first = broker.produce(tp, idempotent_batch(pid, 0))
    again = broker.produce(tp, idempotent_batch(pid, 0))
    assert first.log_append_time > 0
    assert (again.first_offset, again.log_append_time) == (0, first.log_append_time)


def test_producer_ids_are_never_handed_out_twice_across_opens(tmp_path):
    root = str(tmp_path / "db")
    seen = set()
    for _ in range(3):
        with streamlog.open(root) as db:
            for _ in range(3):
                seen.add(db._broker.init_producer_id()[0])
    assert len(seen) == 9


def write_and_close(root, roll=False):
    """A database at root whose t-0 holds one producer's batches of sequences 0, 2 and 4
    (each in a segment of its own with roll); the producer id."""
    with streamlog.open(root) as db:
        db.create_topic("t", partitions=1)
        pid, _ = db._broker.init_producer_id()
        for seq in (0, 2, 4):
            db._broker.produce(TP, idempotent_batch(pid, seq))
            if roll:
                db._broker.partition_log(TP).roll()
    return pid


def test_a_clean_reopen_keeps_the_window(tmp_path):
    root = str(tmp_path / "db")
    pid = write_and_close(root)
    with streamlog.open(root) as db:
        broker = db._broker
        # Only the last batch of each producer is in a snapshot (as in Kafka).
        assert broker.produce(TP, idempotent_batch(pid, 4)).first_offset == 4
        with pytest.raises(OutOfOrderSequenceError):
            broker.produce(TP, idempotent_batch(pid, 2))
        assert broker.produce(TP, idempotent_batch(pid, 6)).first_offset == 6


def test_an_open_removes_the_snapshots_of_segments_no_longer_there(tmp_path):
    """Kafka's LogLoader removes stray snapshots (ProducerStateManager
    .removeStraySnapshots): those at no segment's base, but the newest when it lies above
    every base. A cleaner swap cut short after its commit point left the snapshots of the
    segments it had merged away for good."""
    root = str(tmp_path / "db")
    pid = write_and_close(root, roll=True)
    with streamlog.open(root) as db:
        db._broker.produce(TP, idempotent_batch(pid, 6))
    directory = os.path.join(root, "t-0")
    listed = files.list_directory(directory)
    # A snapshot at each roll, and the close's at the log end (8).
    assert listed.bases == [0, 2, 4, 6] and listed.snapshot_offsets == [0, 2, 4, 6, 8]
    with open(files.snapshot_file(directory, 6), "rb") as f:
        snapshot = f.read()
    for offset in (3, 5, 7):   # at no base: 7 is above every base, but not the newest
        with open(files.snapshot_file(directory, offset), "wb") as f:
            f.write(snapshot)
    with streamlog.open(root) as db:
        assert files.list_directory(directory).snapshot_offsets == [0, 2, 4, 6, 8]
        assert db._broker.produce(TP, idempotent_batch(pid, 6)).first_offset == 6   # a retry


CRASHING_WRITER = """
import os, signal, sys, time, streamlog
from streamlog import TopicPartition
from streamlog.storage.record_batch import build_batch
root, rolls = sys.argv[1], int(sys.argv[2])
db = streamlog.open(root, config={"segment.bytes": 4096})
db.create_topic("t", partitions=1)
broker = db._broker
tp = TopicPartition("t", 0)
pid, _ = broker.init_producer_id()
now = int(time.time() * 1000)
plain = build_batch([b"p" * 100] * 5, timestamp=now)
for seq in range(0, 200, 2):
    broker.produce(tp, build_batch([b"x" * 100] * 2, timestamp=now, producer_id=pid,
                                   producer_epoch=0, base_sequence=seq))
    broker.produce(tp, plain)
broker.logs.flush_all()
print(pid, broker.partition_log(tp).log_end_offset, len(broker.partition_log(tp).segments),
      flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_after_kill_9_the_state_is_rebuilt_from_a_snapshot_and_the_log(tmp_path):
    root = str(tmp_path / "db")
    child = run_py(CRASHING_WRITER, root, "1")
    assert child.returncode == -9, child.stderr
    pid, end, segments = map(int, child.stdout.split())
    assert segments > 3  # rolled: snapshots were taken on the way
    snapshots = [n for n in os.listdir(os.path.join(root, "t-0"))
                 if n.endswith(files.SNAPSHOT_SUFFIX)]
    assert snapshots and f"{end:020d}.snapshot" not in snapshots  # no clean close
    with streamlog.open(root) as db:
        broker = db._broker
        retry = broker.produce(TP, idempotent_batch(pid, 198))
        assert retry.last_offset == end - 6 and broker.partition_log(TP).log_end_offset == end
        assert broker.produce(TP, idempotent_batch(pid, 200)).first_offset == end


def test_a_log_no_producer_id_reached_keeps_no_snapshot(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root, config={"segment.bytes": 2048}) as db:
        db.create_topic("t", partitions=1)
        p = db.producer(batch_size=1000)
        for _ in range(100):
            p.send("t", value=b"x" * 100, partition=0)
        p.flush()
        assert len(db._broker.partition_log(TP).segments) > 2
    assert not [n for n in os.listdir(os.path.join(root, "t-0"))
                if n.endswith(files.SNAPSHOT_SUFFIX)]


def test_a_failed_append_gives_the_producer_a_fresh_id_and_sequences_restart(db, monkeypatch):
    p = db.producer(acks="all")
    p.send("t", value=b"a", partition=0).result()
    old_pid = p._producer[0]
    real = db._broker.produce
    calls = []

    def failing_once(tp, data):
        calls.append(tp)
        if len(calls) == 1:
            real(tp, data)  # written, and yet the caller hears an error
            raise streamlog.errors.KafkaStorageError("injected")
        return real(tp, data)
    monkeypatch.setattr(db._broker, "produce", failing_once)
    with pytest.raises(streamlog.errors.KafkaStorageError):
        p.send("t", value=b"b", partition=0).result()
    with pytest.raises(streamlog.errors.KafkaStorageError):
        p.flush()  # flush() reports the failure once
    p.send("t", value=b"c", partition=0).result()
    last = batches(db)[-1]
    assert last.producer_id != old_pid and last.base_sequence == 0


def test_retention_removes_old_snapshots_but_the_newest_below_the_start(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root, config={"segment.bytes": 1024}) as db:
        db.create_topic("t", partitions=1)
        pid, _ = db._broker.init_producer_id()
        for seq in range(0, 200, 2):
            db._broker.produce(TP, idempotent_batch(pid, seq))
        log = db._broker.partition_log(TP)
        before = list(log.producer_state.snapshot_offsets)
        assert len(before) > 3
        log.increase_log_start_offset(log.segments[-2].base_offset)
        log.delete_old_segments()
        start = log.segments[0].base_offset
        kept = log.producer_state.snapshot_offsets
        assert min(kept) == max(o for o in before if o <= start)
        assert sorted(kept) == sorted(int(n[:20]) for n in os.listdir(log.directory)
                                      if n.endswith(files.SNAPSHOT_SUFFIX))


MOVED_START_WRITER = """
import os, signal, sys, time, streamlog
from streamlog import TopicPartition
from streamlog.storage.record_batch import build_batch
root = sys.argv[1]
now = int(time.time() * 1000)
db = streamlog.open(root, config={"segment.bytes": 1024})
db.create_topic("t", partitions=1)
broker = db._broker
tp = TopicPartition("t", 0)
log = broker.partition_log(tp)
pid, _ = broker.init_producer_id()
seq = 0
def send():
    global seq
    broker.produce(tp, build_batch([b"v", b"w"], timestamp=now, producer_id=pid,
                                   producer_epoch=0, base_sequence=seq))
    seq += 2
while len(log.segments) < 3:
    send()
for _ in range(3):
    send()
broker.produce(tp, build_batch([b"plain"] * 2, timestamp=now))
# Inside the active segment, past the producer's batches: only the plain one stays.
log.increase_log_start_offset(log.log_end_offset - 2)
broker.logs.flush_all()
broker.logs.checkpoint()
print(pid, seq, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_snapshot_below_a_moved_log_start_is_not_replayed_from(tmp_path):
    # A snapshot below the log start describes deleted data; replaying from the log start
    # on top of it would skip the producer's batches in between and refuse its next one.
    root = str(tmp_path / "db")
    child = run_py(MOVED_START_WRITER, root)
    assert child.returncode == -9, child.stderr
    pid, seq = map(int, child.stdout.split())
    with streamlog.open(root) as db:
        log = db._broker.partition_log(TP)
        assert pid not in log.producer_state.producers  # its batches are all deleted
        info = db._broker.produce(TP, idempotent_batch(pid, seq))
        assert info.first_offset == log.log_end_offset - 2


def test_when_a_fresh_id_cannot_be_had_batches_fail_and_never_reuse_the_old_one(db,
                                                                              monkeypatch):
    p = db.producer(acks="all")
    p.send("t", value=b"a", partition=0).result()
    old = p._producer
    broker = db._broker
    real_produce, real_init = broker.produce, broker.init_producer_id

    def written_then_failed(tp, data, origin=None):
        real_produce(tp, data, origin)
        raise streamlog.errors.KafkaStorageError("injected after the write")

    def no_id():
        raise streamlog.errors.KafkaStorageError("no id for now")
    monkeypatch.setattr(broker, "produce", written_then_failed)
    monkeypatch.setattr(broker, "init_producer_id", no_id)
    with pytest.raises(streamlog.errors.KafkaStorageError):
        p.send("t", value=b"b", partition=0).result()
    monkeypatch.setattr(broker, "produce", real_produce)
    # Same size as b: under the old id and sequence it would be taken for b's repeat.
    with pytest.raises(streamlog.errors.KafkaStorageError, match="no id for now"):
        p.send("t", value=b"c", partition=0).result()
    monkeypatch.setattr(broker, "init_producer_id", real_init)
    with pytest.raises(streamlog.errors.KafkaStorageError):
        p.flush()
    p.send("t", value=b"d", partition=0).result()
    assert [b.producer_id for b in batches(db)][-1] not in (old[0], -1)
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TP])
    assert [r.value for r in consumer.poll(timeout=0.2)] == [b"a", b"b", b"d"]


def test_a_batch_the_log_refuses_does_not_break_later_appends(tmp_path):
    # A refused batch's error keeps views of the thread's encode buffer alive in its
    # traceback; the next batches must still be encoded (once: BufferError for every one).
    with streamlog.open(str(tmp_path / "db")) as db:
        db.create_topic("small", partitions=20, config={"segment.bytes": 4096})
        # Each partition's 100 records wait in one batch until flush(): 5.8 KB, more than a
        # 4,096-byte segment holds, so all 20 batches are refused one after another. (With
        # linger.ms=0 whether records piled up into such a batch depended on the machine's
        # speed; on the pure-Python path it came out never.)
        p = db.producer(linger_ms=60_000)
        futures = [p.send("small", value=b"x" * 50, partition=i % 20) for i in range(2000)]
        with pytest.raises(streamlog.errors.RecordBatchTooLargeError):
            p.flush()
        errors = set()
        for future in futures:
            try:
                future.result()
            except streamlog.errors.StreamlogError as exc:
                errors.add(type(exc).__name__)
            except BufferError:
                errors.add("BufferError")
        assert errors == {"RecordBatchTooLargeError"}
        future = p.send("small", value=b"fits", partition=0)
        p.flush()
        assert future.result().offset >= 0


def test_repair_never_hands_out_a_producer_id_a_partition_still_knows(tmp_path):
    from streamlog.broker.database_root import METADATA_DIR
    import shutil
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", partitions=1)
        p = db.producer(acks="all")
        old_pid = p._producer[0]
        p.send("t", value=b"old", partition=0).result()
    shutil.rmtree(os.path.join(root, METADATA_DIR))   # the metadata log, and its id mark, lost
    streamlog.repair(root)
    with streamlog.open(root) as db:
        p = db.producer(acks="all")
        assert p._producer[0] > old_pid
        # Same size as "old": under a reused id it would be answered as old's repeat.
        assert p.send("t", value=b"new", partition=0).result().offset == 1
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TP])
        assert [r.value for r in consumer.poll(timeout=0.2)] == [b"old", b"new"]
