"""Transactional producers through the public API (KAFKA_REFERENCE.md §6, docs/TRANSACTIONS.md):
commit and abort as read_committed and read_uncommitted consumers see them, wrong-state calls,
zombie fencing, timeouts, and a stop between PrepareCommit and the markers."""
import time

import pytest

import streamlog
from streamlog import ConsumerGroupMetadata, TopicPartition
from streamlog.coordinator.transaction import TxnState
from streamlog.coordinator import transaction_coordinator
from streamlog.coordinator.transaction_coordinator import find_transaction_coordinator
from streamlog.errors import (ConcurrentTransactionsError, InvalidConfigurationError,
                              InvalidTransactionTimeoutError, InvalidTxnStateError,
                              ProducerFencedError)

from support import callback_catching
from support.child import run_py

TPS = [TopicPartition("t", 0), TopicPartition("t", 1)]


def committed_view(db, isolation="read_committed"):
    consumer = db.consumer(isolation_level=isolation, auto_offset_reset="earliest")
    consumer.assign(TPS)
    out = []
    while True:
        got = consumer.poll(timeout=0.05)
        if not got:
            break
        out += [r.value for r in got]
    consumer.close()
    return sorted(out)


@pytest.fixture
def db(tmp_path):
    with streamlog.open(str(tmp_path / "db"),
                        config={"transaction.state.log.num.partitions": 3}) as db:
        db.create_topic("t", partitions=2)
        yield db


def producer(db, tid="tx", **kw):
    p = db.producer(transactional_id=tid, **kw)
    p.init_transactions()
    return p


def test_committed_records_appear_together_and_aborted_ones_never(db):
    p = producer(db)
    p.begin_transaction()
    p.send("t", value=b"c1", partition=0)
    p.send_batch("t", [b"c2", b"c3"], partition=1)
    assert committed_view(db) == []                    # open: held back by the LSO
    p.commit_transaction()
    assert committed_view(db) == [b"c1", b"c2", b"c3"]
    p.begin_transaction()
    p.send("t", value=b"a1", partition=0)
    p.send("t", value=b"a2", partition=1)
    p.abort_transaction()
    assert committed_view(db) == [b"c1", b"c2", b"c3"]
    # read_uncommitted sees every data record, aborted ones too (never the markers).
    assert committed_view(db, "read_uncommitted") == [b"a1", b"a2", b"c1", b"c2", b"c3"]
    for tp in TPS:
        batches = db._broker.partition_log(tp).read(0, 1 << 20).batches
        assert [b.is_control for b in batches][-1] and all(b.is_transactional for b in batches)


def test_a_transactional_producer_is_idempotent_with_acks_all(db):
    p = db.producer(transactional_id="tx")
    assert p.settings["acks"] == "all" and p.settings["enable.idempotence"] is True
    with pytest.raises(InvalidConfigurationError, match="acks='all'"):
        db.producer(transactional_id="tx", acks=1)
    with pytest.raises(InvalidConfigurationError, match="idempotent"):
        db.producer(transactional_id="tx", enable_idempotence=False)


def test_calls_in_the_wrong_state_say_which_call_was_expected(db):
    p = db.producer(transactional_id="tx")
    with pytest.raises(InvalidTxnStateError, match="init_transactions"):
        p.begin_transaction()
    p.init_transactions()
    with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
        p.send("t", value=b"x", partition=0)
    with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
        p.commit_transaction()
    with pytest.raises(InvalidTxnStateError, match="init_transactions.. is not allowed"):
        p.init_transactions()
    p.begin_transaction()
    with pytest.raises(InvalidTxnStateError, match="commit_transaction"):
        p.begin_transaction()
    p.commit_transaction()  # nothing sent: nothing to tell the coordinator
    p.begin_transaction()
    p.send("t", value=b"k", key=b"k")   # send()'s fast path: a keyed record, no options
    p.commit_transaction()
    for _ in range(2):   # the fast path refuses it too, with the topic's metadata cached
        with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
            p.send("t", value=b"x", key=b"k")
    assert committed_view(db) == [b"k"]
    with pytest.raises(InvalidTxnStateError, match="transactional producer"):
        db.producer().begin_transaction()


def test_commit_inside_a_callback_is_refused_and_leaves_the_transaction_open(db):
    """A transactional producer's callbacks run on the database's flusher thread (acks=all),
    where a commit waits for fsyncs that thread makes: it waited on itself. It is refused
    as flush() is there (Kafka's KafkaProducer.flush, KIP-1118), before it changes the
    transaction, which the caller then commits."""
    p = producer(db)
    p.begin_transaction()
    commits, raised = callback_catching(p.commit_transaction, streamlog.IllegalStateError)
    p.send("t", value=b"a", partition=0, callback=commits)
    p.send("t", value=b"b", partition=1)
    p.flush()
    assert len(raised) == 1 and "commit_transaction() was called from inside a producer callback" in \
        str(raised[0])
    p.commit_transaction()
    assert committed_view(db) == [b"a", b"b"]


def test_send_offsets_checks_the_group_metadata_and_sends_nothing_for_no_offsets(db):
    """Kafka's KafkaProducer.sendOffsetsToTransaction: throwIfInvalidGroupMetadata first (a
    generation > 0 without a member id is an IllegalArgumentException, the transaction
    untouched), and empty offsets send nothing, so the group's __consumer_offsets partition
    does not join the transaction. The first made the transaction abortable; the second
    wrote a COMMIT marker into __consumer_offsets."""
    p = producer(db)
    p.begin_transaction()
    with pytest.raises(ValueError, match="generation but no member id"):
        p.send_offsets_to_transaction({TPS[0]: 1}, ConsumerGroupMetadata("g", 3, "", None))
    p.send_offsets_to_transaction({}, "g")
    p.send("t", value=b"a", partition=0)
    p.commit_transaction()
    assert committed_view(db) == [b"a"]
    assert "__consumer_offsets" not in db.topics(internal=True)   # made by a first commit


def test_a_new_instance_fences_the_zombie_and_aborts_its_open_transaction(db):
    zombie = producer(db)
    zombie.begin_transaction()
    zombie.send("t", value=b"zombie", partition=0).result()
    fresh = producer(db)       # the same transactional id: bumps the epoch
    meta = find_transaction_coordinator(db._broker).describe("tx")
    assert meta.state == TxnState.EMPTY and meta.producer_epoch == 2  # fence bump + init bump
    with pytest.raises(ProducerFencedError):
        zombie.send("t", value=b"late", partition=0).result()
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    fresh.begin_transaction()
    fresh.send("t", value=b"fresh", partition=0)
    fresh.commit_transaction()
    assert committed_view(db) == [b"fresh"]


def test_close_aborts_an_open_transaction_unless_forced(db):
    # KafkaProducer.close(): its Sender aborts a transaction still open ("Aborting incomplete
    # transaction due to shutdown", Sender.run); a forced close (zero timeout) leaves it to
    # the coordinator's transaction.timeout.ms. Without the abort, read_committed consumers
    # of its partitions wait up to that timeout (60 s by default) for the records after it.
    def partition(p):
        return db.describe_topic("t").partitions[p]

    closed = producer(db, "closed")
    closed.begin_transaction()
    closed.send("t", value=b"left open", partition=0)
    closed.close()
    assert find_transaction_coordinator(db._broker).describe("closed").state == \
        TxnState.COMPLETE_ABORT
    assert partition(0).last_stable_offset == partition(0).log_end_offset == 2   # + marker
    with pytest.raises(RuntimeError):
        with producer(db, "raised") as raised:
            raised.begin_transaction()
            raised.send("t", value=b"raised", partition=1)
            raise RuntimeError("the with-block's body failed")
    assert partition(1).last_stable_offset == partition(1).log_end_offset == 2
    forced = producer(db, "forced")
    forced.begin_transaction()
    forced.send("t", value=b"forced", partition=0).result()
    forced.close(timeout=0)
    assert find_transaction_coordinator(db._broker).describe("forced").state == \
        TxnState.ONGOING
    assert partition(0).last_stable_offset == 2 < partition(0).log_end_offset
    assert committed_view(db, "read_uncommitted") == [b"forced", b"left open", b"raised"]
    assert committed_view(db) == []


def test_init_during_an_open_transaction_aborts_it_and_answers_concurrent_transactions(
        db, monkeypatch):
    # TransactionCoordinator.handleInitProducerId / prepareInitProducerIdTransit, case
    # Ongoing: prepareFenceProducerEpoch bumps the epoch ("never returned to the user"),
    # endTransaction aborts with it, and the answer is CONCURRENT_TRANSACTIONS; the
    # client's retry finds CompleteAbort and bumps again (prepareIncrementProducerEpoch).
    # At an exhausted epoch (4 here) the retry moves to a new producer id.
    monkeypatch.setattr(transaction_coordinator, "MAX_EPOCH", 5)   # exhausted at 4
    coordinator = find_transaction_coordinator(db._broker)
    for _ in range(3):
        pid, epoch = coordinator.init_producer_id("tx", 60_000)
    assert epoch == 2
    coordinator.add_partitions("tx", pid, epoch, [TPS[0]])
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.init_producer_id("tx", 60_000)
    meta = coordinator.describe("tx")
    assert (meta.state, meta.producer_id, meta.producer_epoch) == \
        (TxnState.COMPLETE_ABORT, pid, epoch + 1)
    assert coordinator.init_producer_id("tx", 60_000) == (pid, epoch + 2)
    coordinator.add_partitions("tx", pid, epoch + 2, [TPS[0]])
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.init_producer_id("tx", 60_000)
    # The fence may take even Short.MaxValue (5 here): the epoch is never handed out.
    assert coordinator.describe("tx").producer_epoch == 5
    new_pid, new_epoch = coordinator.init_producer_id("tx", 60_000)
    assert new_pid != pid and new_epoch == 0


def test_init_transactions_retries_until_the_fenced_transaction_is_aborted(db, monkeypatch):
    # The in-process producer retries CONCURRENT_TRANSACTIONS as Kafka's does
    # (TransactionManager.InitProducerIdHandler: a retriable error is re-enqueued).
    zombie = producer(db)
    zombie.begin_transaction()
    zombie.send("t", value=b"zombie", partition=0).result()
    answers = []
    init_producer_id = transaction_coordinator.TransactionCoordinator.init_producer_id

    def recording(self, *args):
        try:
            answers.append(init_producer_id(self, *args))
        except ConcurrentTransactionsError as exc:
            answers.append(type(exc))
            raise
        return answers[-1]
    monkeypatch.setattr(transaction_coordinator.TransactionCoordinator, "init_producer_id",
                        recording)
    producer(db)
    assert answers == [ConcurrentTransactionsError, (0, 2)]


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(tmp_path):
    with streamlog.open(str(tmp_path / "db"), config={
            "transaction.state.log.num.partitions": 1,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 20}) as db:
        db.create_topic("t", partitions=2)
        p = producer(db, transaction_timeout_ms=50)
        p.begin_transaction()
        p.send("t", value=b"slow", partition=1).result()
        coordinator = find_transaction_coordinator(db._broker)
        deadline = time.monotonic() + 30   # a bound on waiting, not the verdict
        while coordinator.describe("tx").state != TxnState.COMPLETE_ABORT:
            assert time.monotonic() < deadline, coordinator.describe("tx")
            time.sleep(0.01)
        with pytest.raises(ProducerFencedError, match="transaction.timeout.ms"):
            p.commit_transaction()
        assert committed_view(db) == []
        assert db.describe_topic("t").partitions[1].last_stable_offset == 2  # data + marker


def test_the_timeout_is_bounded_by_the_database(db):
    p = db.producer(transactional_id="tx", transaction_timeout_ms=900_001)
    with pytest.raises(InvalidTransactionTimeoutError, match="900000"):
        p.init_transactions()


def test_a_failed_batch_makes_the_transaction_abortable_then_sequences_restart(db, monkeypatch):
    p = producer(db)
    p.begin_transaction()
    real = db._broker.produce
    monkeypatch.setattr(db._broker, "produce", lambda tp, data, **_: (_ for _ in ()).throw(
        streamlog.errors.KafkaStorageError("injected")))
    p.send("t", value=b"lost", partition=0)
    with pytest.raises(streamlog.errors.KafkaStorageError):
        p.commit_transaction()
    with pytest.raises(InvalidTxnStateError, match="abort_transaction"):
        p.commit_transaction()
    monkeypatch.setattr(db._broker, "produce", real)
    p.abort_transaction()
    p.begin_transaction()
    p.send("t", value=b"ok", partition=0)
    p.commit_transaction()
    assert committed_view(db) == [b"ok"]


def test_the_epoch_bump_after_a_failed_transaction_cannot_fence_a_newer_instance(
        db, monkeypatch):
    # Kafka's client bumps its epoch after an abortable error with InitProducerId naming
    # the producer id and epoch it holds (KIP-360); the coordinator fences it if another
    # instance bumped meanwhile (TransactionMetadata.scala:283-298, PRODUCER_FENCED). A
    # bump naming nothing would fence the newer instance instead.
    a = producer(db)
    a.begin_transaction()
    coordinator = find_transaction_coordinator(db._broker)
    monkeypatch.setattr(coordinator, "add_partitions", lambda *_: (_ for _ in ()).throw(
        streamlog.errors.KafkaStorageError("injected")))
    with pytest.raises(streamlog.errors.KafkaStorageError):
        a.send("t", value=b"lost", partition=0)   # no partition joined: nothing to end
        a.flush()
    monkeypatch.undo()
    b = producer(db)
    with pytest.raises(ProducerFencedError):
        a.abort_transaction()
    b.begin_transaction()
    b.send("t", value=b"b", partition=0)
    b.commit_transaction()
    assert committed_view(db) == [b"b"]


def test_a_kip_360_bump_at_an_exhausted_epoch_moves_to_a_new_producer_id_once(
        db, monkeypatch):
    # TransactionCoordinator.scala:243-252: at an exhausted epoch (isEpochExhausted:
    # >= Short.MaxValue - 1, TransactionMetadata.scala:166) a new producer id, epoch 0,
    # remembering the old epoch (prepareProducerIdRotation, recordLastEpoch); its retry
    # names the previous producer id (isValidProducerId, case 3) and gets the same answer.
    monkeypatch.setattr(transaction_coordinator, "MAX_EPOCH", 5)   # exhausted at 4
    coordinator = find_transaction_coordinator(db._broker)
    pid, epoch = coordinator.init_producer_id("tx", 60_000)
    while epoch < 4:
        pid, epoch = coordinator.init_producer_id("tx", 60_000, (pid, epoch))
    new_pid, new_epoch = coordinator.init_producer_id("tx", 60_000, (pid, 4))
    assert new_pid != pid and new_epoch == 0
    assert coordinator.init_producer_id("tx", 60_000, (pid, 4)) == (new_pid, 0)
    with pytest.raises(ProducerFencedError):
        coordinator.init_producer_id("tx", 60_000, (pid, 3))


def test_the_last_epoch_is_not_in_the_record_so_a_reopen_forgets_it(tmp_path):
    # Kafka's TransactionLogValue has no lastProducerEpoch: TransactionLog.scala:127 loads
    # it as -1, so a retry after the coordinator reloaded is fenced (the comment at
    # TransactionMetadata.scala:291-293 accepts this "rare case"). The record stays Kafka's
    # version 0 value.
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        coordinator = find_transaction_coordinator(db._broker)
        pid, epoch = coordinator.init_producer_id("tx", 60_000)
        assert coordinator.init_producer_id("tx", 60_000, (pid, epoch)) == (pid, epoch + 1)
        assert coordinator.init_producer_id("tx", 60_000, (pid, epoch)) == (pid, epoch + 1)
    with streamlog.open(root) as db:
        coordinator = find_transaction_coordinator(db._broker)
        assert coordinator.describe("tx").last_producer_epoch == -1
        with pytest.raises(ProducerFencedError):
            coordinator.init_producer_id("tx", 60_000, (pid, epoch))
        assert coordinator.init_producer_id("tx", 60_000, (pid, epoch + 1)) == \
            (pid, epoch + 2)


STOPPED_WRITER = """
import os, signal, sys, streamlog
from streamlog.coordinator import transaction_coordinator as tc
from streamlog.coordinator.transaction import TxnState
root = sys.argv[1]
db = streamlog.open(root, config={"transaction.state.log.num.partitions": 2})
db.create_topic("t", partitions=2)
p = db.producer(transactional_id="tx")
p.init_transactions()
p.begin_transaction()
p.send("t", value=b"before the stop", partition=0)
p.send("t", value=b"before the stop", partition=1)
real = tc.TransactionCoordinator._complete
def stop_before_markers(self, meta):
    if meta.state == TxnState.PREPARE_COMMIT:
        os.kill(os.getpid(), signal.SIGKILL)   # PrepareCommit is durable; no marker yet
    return real(self, meta)
tc.TransactionCoordinator._complete = stop_before_markers
p.commit_transaction()
"""


def test_a_stop_after_prepare_commit_is_finished_by_the_next_open(tmp_path):
    root = str(tmp_path / "db")
    child = run_py(STOPPED_WRITER, root)
    assert child.returncode == -9, child.stderr
    with streamlog.open(root) as db:
        # The open completed the commit: markers in both partitions, CompleteCommit.
        assert find_transaction_coordinator(db._broker).describe("tx").state == \
            TxnState.COMPLETE_COMMIT
        assert committed_view(db) == [b"before the stop", b"before the stop"]
        p = producer(db)   # and the id is usable again, with a newer epoch
        p.begin_transaction()
        p.send("t", value=b"after", partition=0)
        p.commit_transaction()
        assert committed_view(db).count(b"after") == 1


def test_a_commit_whose_markers_failed_part_way_completes_on_retry(db, monkeypatch):
    p = producer(db)
    p.begin_transaction()
    for tp in TPS:
        p.send("t", value=b"both-%d" % tp.partition, partition=tp.partition)
    broker = db._broker
    real = broker.write_txn_markers
    calls = []

    def second_fails(markers):
        calls.append(markers)
        if len(calls) == 2:
            raise streamlog.errors.KafkaStorageError("injected: disk full")
        return real(markers)
    monkeypatch.setattr(broker, "write_txn_markers", second_fails)
    with pytest.raises(streamlog.errors.KafkaStorageError):
        p.commit_transaction()
    # PrepareCommit is durable: the transaction is committed, and a partition shows it once
    # its marker is written (Kafka writes markers partition by partition too).
    assert committed_view(db) == [b"both-0"]
    p.commit_transaction()            # the retry finishes the markers
    assert committed_view(db) == [b"both-0", b"both-1"]
    assert find_transaction_coordinator(broker).describe("tx").state == TxnState.COMPLETE_COMMIT


def test_a_read_only_view_follows_transactions_across_segment_rolls(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root, config={"segment.bytes": 512,
                                      "transaction.state.log.num.partitions": 1}) as db:
        db.create_topic("t", partitions=2)
        plain = db.producer()
        plain.send("t", value=b"first", partition=0).result()
        with streamlog.open(root, readonly=True) as view:
            assert committed_view(view) == [b"first"]
            p = producer(db)
            p.begin_transaction()
            p.send("t", value=b"open" * 10, partition=0)
            p.flush()
            for i in range(30):      # rolls several segments past the open transaction
                plain.send("t", value=b"later-%02d" % i * 3, partition=0).result()
            log = db._broker.partition_log(TopicPartition("t", 0))
            assert len(log.segments) > 3
            assert committed_view(view) == [b"first"]        # held at the open one
            p.commit_transaction()
            for i in range(30):
                plain.send("t", value=b"after-%02d" % i * 3, partition=0).result()
            seen = committed_view(view)
            assert b"open" * 10 in seen and len(seen) == 62
