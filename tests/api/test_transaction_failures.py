"""Transactions when a write fails part way: a batch written but not durable, an epoch bump
or a marker that cannot be written yet, a coordinator that cannot start. Each case ends as
Kafka's does (TransactionManager.java, TransactionCoordinator.scala), with nothing lost and
no transaction left half visible."""
import threading

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.broker.broker import Broker
from streamlog.coordinator.transaction import TxnState
from streamlog.coordinator.transaction_coordinator import find_transaction_coordinator
from streamlog.coordinator.transaction_log import TRANSACTION_STATE_TOPIC, encode_key
from streamlog.errors import (CorruptRecordError, InvalidTxnStateError, KafkaStorageError,
                              ProducerFencedError)
from streamlog.storage.keyed_log import encode_changes
from streamlog.storage.producer_state import COORDINATOR

TP = TopicPartition("t", 0)
# No timeout check runs by itself: the tests call it.
NO_CHECKS = {"transaction.state.log.num.partitions": 1,
             "transaction.abort.timed.out.transaction.cleanup.interval.ms": 3_600_000}


@pytest.fixture
def db(tmp_path):
    with streamlog.open(str(tmp_path / "db"), config=NO_CHECKS) as db:
        db.create_topic("t")
        yield db


def read_committed(db, *tps):
    consumer = db.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
    consumer.assign(list(tps or [TP]))
    out = []
    while got := consumer.poll(timeout=0.05):
        out += [r.value for r in got]
    consumer.close()
    return out


def fail_first_call(monkeypatch, obj, name, outcome):
    """obj.name's first call raises outcome (an exception) or returns it; the later calls
    are the real method's."""
    real = getattr(obj, name)
    calls = []

    def first_fails(*args, **kwargs):
        calls.append(args)
        if len(calls) > 1:
            return real(*args, **kwargs)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    monkeypatch.setattr(obj, name, first_fails)


def test_a_failed_epoch_bump_leaves_the_producer_aborting_until_the_abort_is_retried(
        db, monkeypatch):
    """After an abortable error the abort bumps the epoch (KIP-360). When that
    InitProducerId failed, the producer went back to READY with the old epoch: its next
    transaction's batch took the failed batch's sequence, the partition answered it as a
    retry of that written (and aborted) batch, and the record was lost while its commit
    succeeded. Kafka's client stays INITIALIZING until the bump succeeds
    (TransactionManager.completeTransaction)."""
    db.alter_topic_config("t", {"flush.messages": "1"})   # each append fsyncs at once
    fail_first_call(monkeypatch, db._broker.partition_log(TP), "flush",
                    KafkaStorageError("injected: fsync EIO"))
    p = db.producer(transactional_id="a")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"written, not durable", partition=0)
    with pytest.raises(KafkaStorageError, match="fsync EIO"):
        p.commit_transaction()
    fail_first_call(monkeypatch, find_transaction_coordinator(db._broker), "init_producer_id",
                    KafkaStorageError("injected: bump failed"))
    with pytest.raises(KafkaStorageError, match="bump failed"):
        p.abort_transaction()
    with pytest.raises(InvalidTxnStateError, match="if abort_transaction\\(\\) failed, call "
                                                   "it again"):
        p.begin_transaction()
    p.abort_transaction()    # retries the bump
    p.begin_transaction()
    p.send("t", value=b"important", partition=0).result()
    p.commit_transaction()
    assert read_committed(db) == [b"important"]


@pytest.mark.parametrize("failure", ["fsync error, seen by flush()", "flush stopped short"])
def test_a_batch_written_but_not_durable_makes_the_transaction_abortable(db, monkeypatch,
                                                                         failure):
    """Kafka's handleFailedBatch makes the transaction abortable for any failed batch. A
    batch whose fsync failed (acks="all") was only counted as a failure: after flush() had
    raised it, commit_transaction() committed the record; and a flush that stopped short
    (RuntimeError) escaped commit_transaction() leaving it COMMITTING, abort refused."""
    fsync_error = failure.startswith("fsync")
    # -1: what a closed log's flush answers, nothing made durable.
    fail_first_call(monkeypatch, db._broker.partition_log(TP), "flush_to",
                    KafkaStorageError("injected: fsync EIO") if fsync_error else -1)
    p = db.producer(transactional_id="a")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"not durable", partition=0)
    if fsync_error:
        with pytest.raises(KafkaStorageError):
            p.flush()
        with pytest.raises(InvalidTxnStateError, match="call abort_transaction"):
            p.commit_transaction()
    else:
        with pytest.raises(RuntimeError, match="was not flushed up to"):
            p.commit_transaction()
    p.abort_transaction()
    assert read_committed(db) == []
    p.begin_transaction()
    p.send("t", value=b"next", partition=0)
    p.commit_transaction()
    assert read_committed(db) == [b"next"]


def test_a_transaction_whose_markers_fail_holds_back_no_other_timeout(db):
    """Kafka's abortTimedOutTransactions handles each transactional id alone. The check
    stopped at the first id whose markers failed, so another producer's timed-out
    transaction stayed open and its partition's LSO stuck, check after check."""
    db.create_topic("bad")
    broker = db._broker
    real = broker.write_txn_markers
    healed = threading.Event()

    def bad_disk(markers):
        if not healed.is_set() and any(m[0].topic == "bad" for m in markers):
            raise KafkaStorageError("injected: the log dir of bad-0 is offline")
        return real(markers)
    broker.write_txn_markers = bad_disk
    stuck = db.producer(transactional_id="stuck")
    stuck.init_transactions()
    stuck.begin_transaction()
    stuck.send("bad", value=b"x")
    with pytest.raises(KafkaStorageError):
        stuck.commit_transaction()     # PrepareCommit written, its marker not
    slow = db.producer(transactional_id="slow", transaction_timeout_ms=1)
    slow.init_transactions()
    slow.begin_transaction()
    slow.send("t", value=b"y", partition=0).result()
    coordinator = find_transaction_coordinator(broker)
    start = broker.clock_ms()
    while broker.clock_ms() <= start + 1:   # past slow's 1 ms timeout
        threading.Event().wait(0.001)
    coordinator.abort_timed_out()
    assert coordinator.describe("slow").state == TxnState.COMPLETE_ABORT
    assert coordinator.describe("stuck").state == TxnState.PREPARE_COMMIT
    assert db.describe_topic("t").partitions[0].last_stable_offset == 2   # data + marker
    healed.set()
    coordinator.abort_timed_out()
    assert coordinator.describe("stuck").state == TxnState.COMPLETE_COMMIT
    assert read_committed(db, TopicPartition("bad", 0)) == [b"x"]
    with pytest.raises(ProducerFencedError):
        slow.commit_transaction()


def test_fencing_an_open_transaction_whose_marker_fails_is_retried_by_init_transactions(
        db, monkeypatch):
    """The fence's abort is decided once PrepareAbort is written; Kafka answers
    CONCURRENT_TRANSACTIONS then, and the client retries. A marker that could not be
    written yet escaped init_transactions() as the marker's own error."""
    old = db.producer(transactional_id="app")
    old.init_transactions()
    old.begin_transaction()
    old.send("t", value=b"zombie", partition=0).result()
    broker = db._broker
    fail_first_call(monkeypatch, broker, "write_txn_markers",
                    KafkaStorageError("injected: transient"))
    new = db.producer(transactional_id="app")
    new.init_transactions()
    assert find_transaction_coordinator(broker).describe("app").state == TxnState.EMPTY
    with pytest.raises(ProducerFencedError):
        old.commit_transaction()
    assert read_committed(db) == []


def test_a_completion_the_disk_refuses_at_open_is_retried_not_fatal(tmp_path, monkeypatch):
    """A PrepareCommit whose marker could not be written is finished at the next open; the
    open failed while that marker still failed, every topic with it. Kafka loads the
    transaction log and retries the markers in the background."""
    root = str(tmp_path / "db")
    healed = threading.Event()
    real = Broker.write_txn_markers

    def bad_disk(self, markers):
        if not healed.is_set() and any(m[0].topic == "bad" for m in markers):
            raise KafkaStorageError("injected: the log dir of bad-0 is offline")
        return real(self, markers)
    monkeypatch.setattr(Broker, "write_txn_markers", bad_disk)
    with streamlog.open(root, config=NO_CHECKS) as db:
        db.create_topic("bad")
        db.create_topic("t")
        p = db.producer(transactional_id="a")
        p.init_transactions()
        p.begin_transaction()
        p.send("bad", value=b"x")
        p.send("t", value=b"y")
        with pytest.raises(KafkaStorageError):
            p.commit_transaction()
        p.close(timeout=0)
    with streamlog.open(root, config=NO_CHECKS) as db:
        coordinator = find_transaction_coordinator(db._broker)
        assert coordinator.describe("a").state == TxnState.PREPARE_COMMIT
        healed.set()
        coordinator.abort_timed_out()
        assert coordinator.describe("a").state == TxnState.COMPLETE_COMMIT
        assert sorted(read_committed(db, TopicPartition("bad", 0), TopicPartition("t", 0))) \
            == [b"x", b"y"]


def test_an_open_that_fails_closes_the_broker_it_made(tmp_path):
    """A transaction log the coordinator cannot load fails the open; the broker the open
    had made kept its threads and the directory's lock, so every later open in the
    process was refused as locked (DatabaseLockedError) instead of saying what is wrong."""
    root = str(tmp_path / "db")
    with streamlog.open(root, config=NO_CHECKS) as db:
        p = db.producer(transactional_id="a")
        p.init_transactions()
        p.close()
        # A value of a version this database does not read.
        db._broker.produce(TopicPartition(TRANSACTION_STATE_TOPIC, 0),
                           encode_changes([(encode_key("b"), b"\x00\x01" + b"\x00" * 30)], 0),
                           origin=COORDINATOR)
    before = set(threading.enumerate())   # other tests' threads of this process stay out
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="__transaction_state"):
            streamlog.open(root)
    assert not [t.name for t in set(threading.enumerate()) - before
                if t.name.startswith("streamlog-")]
