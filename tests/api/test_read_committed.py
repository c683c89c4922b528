"""Transactional data, markers, the last stable offset and read_committed (KAFKA_REFERENCE.md
§6.3), driven at the broker's request interface: the partitions' side of transactions, which
the transaction coordinator's markers complete."""
import contextlib
import os
import time

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.errors import InvalidRecordError, KafkaStorageError
from streamlog.storage import files
from streamlog.storage.record_batch import CONTROL_COMMIT, build_batch, build_control_batch
from streamlog.storage.txn_index import AbortedTxn, encode_entry

from support.child import run_py

TP = TopicPartition("t", 0)
A, B = 100, 200


class Txn:
    """A transactional producer's batches, numbered as a client numbers them."""

    def __init__(self, broker, pid, epoch=0):
        self.broker, self.pid, self.epoch, self.seq = broker, pid, epoch, 0

    def send(self, *values, tp=TP, keys=None):
        data = build_batch(list(values), keys, timestamp=int(time.time() * 1000),
                           producer_id=self.pid, producer_epoch=self.epoch,
                           base_sequence=self.seq, is_transactional=True)
        self.seq += len(values)
        return self.broker.produce(tp, data)

    def end(self, commit, tp=TP):
        return self.broker.write_txn_markers([(tp, self.pid, self.epoch, 0, commit)])[tp]


def read(db, isolation, tp=TP):
    """(offset, value) of what a consumer gets; the columnar poll_batch must agree."""
    out = []
    for columns in (False, True):
        consumer = db.consumer(isolation_level=isolation, auto_offset_reset="earliest")
        consumer.assign([tp])
        got = []
        while True:
            if columns:
                chunks = consumer.poll_batch(timeout=0.05)
                rows = [(int(o), bytes(v)) for c in chunks
                        for o, v in zip(c.offsets, c.values(), strict=True)]
            else:
                rows = [(r.offset, r.value) for r in consumer.poll(timeout=0.05)]
            if not rows:
                break
            got += rows
        consumer.close()
        out.append(got)
    assert out[0] == out[1]
    return out[0]


@pytest.fixture
def db(tmp_path):
    with streamlog.open(str(tmp_path / "db")) as db:
        db.create_topic("t", partitions=1)
        yield db


def test_interleaved_transactions_give_kafkas_lso_and_aborted_ranges(db):
    broker = db._broker
    log = broker.partition_log(TP)
    a, b = Txn(broker, A), Txn(broker, B)
    a.send(b"a0", b"a1")                 # 0-1
    b.send(b"b0", b"b1")                 # 2-3
    assert log.last_stable_offset == 0   # the oldest open transaction's first offset
    a.end(commit=False)                  # ABORT marker at 4
    # LSO after A's abort: B's first offset, the earliest other open transaction (§6.3).
    assert log.txn_indexes.entries() == [AbortedTxn(A, 0, 4, 2)]
    assert log.last_stable_offset == 2
    assert read(db, "read_committed") == []          # below 2 there is only aborted data
    b.end(commit=True)                   # COMMIT marker at 5
    assert log.last_stable_offset == log.high_watermark == 6
    assert read(db, "read_committed") == [(2, b"b0"), (3, b"b1")]
    # read_uncommitted returns every data record, never a marker.
    assert read(db, "read_uncommitted") == [(0, b"a0"), (1, b"a1"), (2, b"b0"), (3, b"b1")]
    assert db.describe_topic("t").partitions[0].last_stable_offset == 6


def test_an_abort_marker_the_disk_refused_leaves_no_index_entry_behind(db, monkeypatch):
    """The entry is written before its marker (so that a marker always has one); when the
    marker's append failed, the entry stayed, and every retry of the marker was refused as
    "not above the last one": the transaction could never end and the LSO stuck. Kafka
    indexes after the log append (UnifiedLog.append), so a refused marker leaves none."""
    broker = db._broker
    log = broker.partition_log(TP)
    txn = Txn(broker, A)
    txn.send(b"a0", b"a1")
    segment = log.active_segment
    real = segment.append
    refusals = []

    def full_disk(*args):
        if not refusals:
            refusals.append(args)
            raise KafkaStorageError("injected: no space left on device")
        return real(*args)
    monkeypatch.setattr(segment, "append", full_disk)
    with pytest.raises(KafkaStorageError, match="no space"):
        txn.end(commit=False)
    assert log.txn_indexes.entries() == [] and log.last_stable_offset == 0
    txn.end(commit=False)   # the coordinator's retry
    assert log.txn_indexes.entries() == [AbortedTxn(A, 0, 2, 3)]
    assert log.last_stable_offset == 3 and read(db, "read_committed") == []


def test_time_lookups_under_read_committed_stop_at_the_lso(db):
    # Kafka's Partition.fetchOffsetForTimestamp bounds a lookup by time (and the largest
    # timestamp, -3) by the last fetchable offset, the LSO for read_committed, and
    # ReplicaManager.fetchOffset answers no offset for a record found at or past it.
    broker = db._broker
    producer = db.producer()
    producer.send("t", b"committed", partition=0, timestamp_ms=1_000).get()
    producer.flush()
    Txn(broker, A).send(b"open")             # offset 1, an open transaction, newer
    assert broker.partition_log(TP).last_stable_offset == 1
    committed = db.consumer(isolation_level="read_committed")
    uncommitted = db.consumer()
    assert committed.offsets_for_times({TP: 2_000})[TP] is None
    assert uncommitted.offsets_for_times({TP: 2_000})[TP].offset == 1
    assert committed.offsets_for_times({TP: 500})[TP].offset == 0
    assert broker.list_offsets({TP: -3}, read_committed=True)[TP] is None
    assert broker.list_offsets({TP: -3})[TP][0] == 1
    committed.close()
    uncommitted.close()


def open_transaction_among_plain_records(db):
    """p0 p1 (plain), a0 a1 (A's transaction at 2-3, left open), p4 p5 p6 (plain); A's Txn."""
    plain = db.producer(linger_ms=0)
    for value in (b"p0", b"p1"):
        plain.send("t", value=value, partition=0).result()
    a = Txn(db._broker, A)
    a.send(b"a0", b"a1")
    for value in (b"p4", b"p5", b"p6"):
        plain.send("t", value=value, partition=0).result()
    return a


def test_the_lso_never_falls_below_the_log_start(db):
    # DeleteRecords may remove the start of a transaction still open: the LSO is then the
    # log start (Kafka's maybeIncrementFirstUnstableOffset), so a read_committed consumer
    # at the end waits there, and reads what follows once the transaction commits.
    broker = db._broker
    a = open_transaction_among_plain_records(db)
    broker.delete_records({TP: 5})   # the wire server's DeleteRecords
    assert db.describe_topic("t").partitions[0].last_stable_offset == 5
    consumer = db.consumer(isolation_level="read_committed", auto_offset_reset="none")
    consumer.assign([TP])
    consumer.seek_to_end([TP])
    assert consumer.position(TP) == 5
    assert consumer.poll(timeout=0.05) == []
    a.end(commit=True)                            # marker at 7
    got = []
    while True:
        records = consumer.poll(timeout=0.05)
        if not records:
            break
        got += [(r.offset, r.value) for r in records]
    assert got == [(5, b"p5"), (6, b"p6")]
    consumer.close()


def test_a_view_open_before_delete_records_keeps_its_lso_at_the_new_log_start(db, tmp_path):
    # As above, seen from a read-only view opened before the DeleteRecords, which moves the
    # start inside the first segment (no file goes): the view's LSO was the open
    # transaction's start, 2, below the log start, and its EARLIEST 0.
    broker = db._broker
    with streamlog.open(str(tmp_path / "db"), readonly=True) as view:
        a = open_transaction_among_plain_records(db)
        consumer = view.consumer(isolation_level="read_committed", auto_offset_reset="none")
        consumer.assign([TP])
        consumer.seek_to_end([TP])
        assert consumer.position(TP) == 2
        broker.delete_records({TP: 5})
        partition = view.describe_topic("t").partitions[0]
        assert partition.segments == 1
        assert (partition.log_start_offset, partition.last_stable_offset) == (5, 5)
        assert consumer.beginning_offsets([TP]) == {TP: 5}
        consumer.seek_to_end([TP])
        assert consumer.position(TP) == 5
        assert consumer.poll(timeout=0.05) == []
        a.end(commit=True)                            # marker at 7
        assert read(view, "read_committed") == [(5, b"p5"), (6, b"p6")]
        consumer.close()


def test_a_producer_aborting_twice_and_committing_in_between(db):
    broker = db._broker
    a = Txn(broker, A)
    plain = db.producer()
    a.send(b"x1")
    a.end(commit=False)                  # aborted
    plain.send("t", value=b"plain", partition=0).result()
    a.send(b"x2")
    a.end(commit=True)                   # committed
    a.send(b"x3")
    a.end(commit=False)                  # aborted again: the same producer id
    assert [v for _, v in read(db, "read_committed")] == [b"plain", b"x2"]


def test_an_open_transaction_holds_read_committed_back_and_stays_open_across_a_reopen(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", partitions=1)
        db.producer().send("t", value=b"before", partition=0).result()
        Txn(db._broker, A).send(b"open")
        db.producer().send("t", value=b"after", partition=0).result()
        assert read(db, "read_committed") == [(0, b"before")]
    with streamlog.open(root) as db:
        log = db._broker.partition_log(TP)
        assert log.last_stable_offset == 1 and log.producer_state.ongoing == {A: 1}
        assert read(db, "read_committed") == [(0, b"before")]
        Txn(db._broker, A, epoch=0).end(commit=False)
        assert [v for _, v in read(db, "read_committed")] == [b"before", b"after"]


WRITER = """
import os, signal, sys, time, streamlog
from streamlog import TopicPartition
from streamlog.storage.record_batch import build_batch
root = sys.argv[1]
db = streamlog.open(root, config={"segment.bytes": 2048})
db.create_topic("t", partitions=1)
broker = db._broker
tp = TopicPartition("t", 0)
now = int(time.time() * 1000)
for i in range(30):
    pid = 1000 + i
    broker.produce(tp, build_batch([b"t%d" % i] * 3, timestamp=now, producer_id=pid,
                                   producer_epoch=0, base_sequence=0, is_transactional=True))
    broker.write_txn_markers([(tp, pid, 0, 0, i % 3 != 0)])  # every third one aborted
broker.produce(tp, build_batch([b"open"], timestamp=now, producer_id=5000, producer_epoch=0,
                               base_sequence=0, is_transactional=True))
broker.logs.flush_all()
print(len(broker.partition_log(tp).segments), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_after_kill_9_aborted_data_stays_hidden_and_the_open_transaction_open(tmp_path):
    root = str(tmp_path / "db")
    child = run_py(WRITER, root)
    assert child.returncode == -9, child.stderr
    assert int(child.stdout) >= 3  # the aborts landed in several segments' .txnindex files
    with streamlog.open(root) as db:
        got = [v for _, v in read(db, "read_committed")]
        assert got == [b"t%d" % i for i in range(30) if i % 3 != 0 for _ in range(3)]
        log = db._broker.partition_log(TP)
        assert len(log.txn_indexes) == 10
        assert len([n for n in os.listdir(log.directory)
                    if n.endswith(files.TXN_INDEX_SUFFIX)]) >= 2
        assert log.last_stable_offset == log.log_end_offset - 1   # the open one's offset


def test_an_index_entry_whose_marker_a_crash_lost_is_dropped(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", partitions=1)
        txn = Txn(db._broker, A)
        txn.send(b"a")
        end = db._broker.partition_log(TP).log_end_offset
        directory = db._broker.partition_log(TP).directory
        # The entry is written (and fsynced) before its marker; a stop in between:
        with open(files.txn_index_file(directory, 0), "ab") as f:
            f.write(encode_entry(AbortedTxn(A, 0, end, end + 1)))
        db._broker._dir_lock.release()
        db._broker.logs.close(mark_clean=False)
        db._broker._closed = True
    with streamlog.open(root) as db:
        assert len(db._broker.partition_log(TP).txn_indexes) == 0
        assert not os.path.exists(files.txn_index_file(directory, 0))


def test_clients_may_not_write_markers(db):
    marker = build_control_batch(CONTROL_COMMIT, producer_id=A, producer_epoch=0,
                                 coordinator_epoch=0, timestamp=1)
    with pytest.raises(InvalidRecordError, match="control batch"):
        db._broker.produce(TP, marker)


def test_a_read_only_view_follows_the_writers_transactions(db, tmp_path):
    # Another process's view (Spark executors read this way): the LSO from the snapshot and
    # the batches the writer appends, aborted data from the .txnindex files it adds.
    broker = db._broker
    plain = db.producer()
    plain.send("t", value=b"p0", partition=0).result()
    a = Txn(broker, A)
    a.send(b"a0", b"a1")
    plain.send("t", value=b"p1", partition=0).result()
    with streamlog.open(str(tmp_path / "db"), readonly=True) as view:
        assert read(view, "read_committed") == [(0, b"p0")]      # held at A's first offset
        waiting = view.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
        waiting.assign([TP])
        assert [r.value for r in waiting.poll(timeout=0.1)] == [b"p0"]
        assert waiting.poll(timeout=0.05) == []
        a.end(commit=True)
        # The same consumer, stopped at the LSO, sees the commit.
        assert [r.value for r in waiting.poll(timeout=5)] == [b"a0", b"a1", b"p1"]
        b = Txn(broker, B)
        b.send(b"b0")
        b.end(commit=False)
        plain.send("t", value=b"p2", partition=0).result()
        assert [v for _, v in read(view, "read_committed")] == [b"p0", b"a0", b"a1", b"p1",
                                                                 b"p2"]
        assert len(read(view, "read_uncommitted")) == 6
    with streamlog.open(str(tmp_path / "db"), readonly=True) as fresh:  # from its own listing
        assert [v for _, v in read(fresh, "read_committed")] == [b"p0", b"a0", b"a1", b"p1",
                                                                  b"p2"]


def test_verify_checks_the_txn_index_against_the_markers(db):
    from streamlog.storage.verify import verify_directory
    broker = db._broker
    a = Txn(broker, A)
    a.send(b"a0")
    a.end(commit=False)
    assert verify_directory(db.path).ok
    directory = broker.partition_log(TP).directory
    with open(files.txn_index_file(directory, 0), "r+b") as f:
        f.seek(2)
        f.write((B).to_bytes(8, "big"))          # the entry now names another producer
    report = verify_directory(db.path)
    assert [p.message for p in report.problems] == [
        f"entry (producer {B}, offsets 0..1) does not end at an ABORT marker of that producer"]


def test_a_read_only_view_that_retention_overtook_agrees_with_the_writer(db, tmp_path):
    # A view (a Spark executor's) that did not refresh while the writer's DeleteRecords and
    # retention removed batches it had not followed -- a transaction's marker, another's
    # start -- starts following again from the writer's snapshot and .txnindex files: its
    # LSO and read_committed records are the writer's (they were stuck at the removed
    # transaction's start, or ran past the open one).
    broker = db._broker
    db.create_topic("r", partitions=1, config={"segment.bytes": 200})
    tp = TopicPartition("r", 0)
    plain = db.producer(linger_ms=0)

    def send_plain(count):
        for _ in range(count):
            plain.send("r", value=b"p", partition=0).result()
    send_plain(1)
    a, b = Txn(broker, A), Txn(broker, B)
    a.send(b"a0", tp=tp)                                      # A open at 1
    writer = broker.partition_log(tp)
    with streamlog.open(str(tmp_path / "db"), readonly=True) as view:
        view_log = view._broker.partition_log(tp)
        assert read(view, "read_committed", tp) == [(0, b"p")]   # held at A's start
        a.end(commit=True, tp=tp)
        b.send(b"b0", tp=tp)                                  # B open
        send_plain(12)                                        # several segments
        broker.delete_records({tp: writer.log_end_offset - 3})   # A's marker, B's start
        writer.delete_old_segments()
        assert writer.last_stable_offset == writer.log_start_offset   # B is still open
        assert read(view, "read_committed", tp) == read(db, "read_committed", tp) == []
        assert view_log.last_stable_offset == writer.last_stable_offset
        b.end(commit=False, tp=tp)
        send_plain(1)
        expected = read(db, "read_committed", tp)
        assert [v for _, v in expected] == [b"p"] * 4
        assert read(view, "read_committed", tp) == expected
        assert view_log.last_stable_offset == writer.last_stable_offset


def test_a_view_whose_following_was_cut_short_does_not_run_past_an_open_transaction(
        db, tmp_path, monkeypatch):
    # Retention removing a segment while a view follows the writer's new batches cuts the
    # following short (a KafkaStorageError from the read). The high watermark then moves
    # to the log end: a transaction that opened in the batches not followed must still
    # hold the view's LSO at its start, as it holds the writer's (KAFKA_REFERENCE §6.3).
    broker = db._broker
    plain = db.producer()
    plain.send("t", value=b"p0", partition=0).result()
    with streamlog.open(str(tmp_path / "db"), readonly=True) as view:
        view_log = view._broker.partition_log(TP)
        assert read(view, "read_committed") == [(0, b"p0")]
        a = Txn(broker, A)
        a.send(b"a0")                                          # A open at 1
        plain.send("t", value=b"p1", partition=0).result()
        follow = view_log._batches_between
        calls = []

        def cut_short_once(offset, end, **kwargs):
            calls.append(offset)
            if len(calls) == 1:
                raise KafkaStorageError("a segment file vanished under the read")
            yield from follow(offset, end, **kwargs)
        monkeypatch.setattr(view_log, "_batches_between", cut_short_once)
        assert read(view, "read_committed") == [(0, b"p0")]
        assert len(calls) >= 2                                 # it was cut short, then again
        assert view_log.last_stable_offset == broker.partition_log(TP).last_stable_offset == 1
        a.end(commit=True)
        assert read(view, "read_committed") == [(0, b"p0"), (1, b"a0"), (2, b"p1")]


def test_a_read_only_view_does_not_run_past_a_transaction_whose_start_it_never_saw(db,
                                                                                    tmp_path):
    # The view had followed everything; then a transaction opened and DeleteRecords removed
    # its start before the view refreshed. The writer's LSO stays at the log start while
    # it is open, and so must the view's (it returned the records after it as committed).
    broker = db._broker
    db.create_topic("r", partitions=1, config={"segment.bytes": 200})
    tp = TopicPartition("r", 0)
    plain = db.producer(linger_ms=0)
    plain.send("r", value=b"p", partition=0).result()
    writer = broker.partition_log(tp)
    with streamlog.open(str(tmp_path / "db"), readonly=True) as view:
        assert read(view, "read_committed", tp) == [(0, b"p")]
        b = Txn(broker, B)
        b.send(b"b0", tp=tp)                                  # B open at 1
        for _ in range(12):
            plain.send("r", value=b"q", partition=0).result()
        broker.delete_records({tp: writer.log_end_offset - 3})
        writer.delete_old_segments()
        assert read(db, "read_committed", tp) == []
        assert read(view, "read_committed", tp) == []
        assert view._broker.partition_log(tp).last_stable_offset == writer.log_start_offset


@pytest.mark.parametrize("commit", [True, False])
def test_a_read_only_view_behind_the_cleaner_that_removed_a_marker_agrees_with_the_writer(
        db, tmp_path, commit):
    # Kafka's cleaner removes a transaction's marker once a pass finds none of its data left
    # and delete.retention.ms has passed since (LogCleaner, CleanedTransactionMetadata.
    # onControlBatchRead); an expired producer has no last batch the cleaner keeps. A view
    # that had followed the transaction's start, not its marker, followed the cleaned log
    # from where it stopped, never met the marker, and held its LSO at the transaction's
    # start for good. It starts again from the writer's snapshot, as a view opened then does.
    broker = db._broker
    db.create_topic("c", partitions=1, config={"cleanup.policy": "compact",
                                               "delete.retention.ms": 0})
    tp = TopicPartition("c", 0)
    writer = broker.partition_log(tp)
    plain = db.producer(linger_ms=0)

    def put(key, value):
        plain.send("c", key=key, value=value, partition=0).result()
    put(b"p", b"p0")
    a = Txn(broker, A)
    a.send(b"a0", keys=[b"x"], tp=tp)                         # A open at 1
    with streamlog.open(str(tmp_path / "db"), readonly=True) as view:
        view_log = view._broker.partition_log(tp)
        assert read(view, "read_committed", tp) == [(0, b"p0")]   # held at A's start
        a.end(commit=commit, tp=tp)                           # its marker at 2
        put(b"x", b"p1")                                      # a committed a0 is superseded
        state = writer.producer_state                         # a day later A is forgotten
        assert state.expire(writer.clock_ms() + state.expiration_ms) >= 1
        for i in range(3):       # a0 goes; the marker gets its horizon; the marker goes
            put(b"q%d" % i, b"q")
            db.compact("c")
        assert not any(b.is_control for b in writer.read(0, below_high_watermark=False).batches)
        expected = read(db, "read_committed", tp)
        assert [v for _, v in expected] == [b"p0", b"p1", b"q", b"q", b"q"]
        assert read(view, "read_committed", tp) == expected
        assert view_log.last_stable_offset == writer.last_stable_offset


@pytest.mark.parametrize("opened", ["before", "after"])
def test_a_read_only_view_reads_the_markers_between_a_snapshot_and_the_log_start(
        db, tmp_path, opened):
    # Snapshots come at rolls, and DeleteRecords may put the log start inside the segment
    # after one: a view starting from that snapshot (opened then, or after the writer's
    # retention overtook it) must read the COMMIT marker between the snapshot and the log
    # start, still on disk, or the committed transaction stays open in it for good.
    broker = db._broker
    db.create_topic("r", partitions=1, config={"segment.bytes": 300})
    tp = TopicPartition("r", 0)
    plain = db.producer(linger_ms=0)

    def send():
        plain.send("r", value=b"p", partition=0).result()
    send()
    writer = broker.partition_log(tp)
    path = str(tmp_path / "db")
    with contextlib.ExitStack() as stack:
        if opened == "before":
            view = stack.enter_context(streamlog.open(path, readonly=True))
            assert read(view, "read_committed", tp) == [(0, b"p")]
        a = Txn(broker, A)
        a.send(b"a0", tp=tp)
        while len(writer._segments) < 2:      # a roll while A is open: its snapshot has A
            send()
        a.end(commit=True, tp=tp)
        send()
        snapshot = writer._bases[-1]
        broker.delete_records({tp: writer.log_end_offset})   # past the marker
        writer.delete_old_segments()
        assert writer._bases == [snapshot] < [writer.log_start_offset]
        if opened == "after":
            view = stack.enter_context(streamlog.open(path, readonly=True))
        for more in (0, 2):
            for _ in range(more):
                send()
            expected = read(db, "read_committed", tp)
            assert len(expected) == more
            assert read(view, "read_committed", tp) == expected
            assert view._broker.partition_log(tp).last_stable_offset == \
                writer.last_stable_offset
