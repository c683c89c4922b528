"""Exactly-once consume-transform-produce through the public API: input topic -> a
transactional producer that commits the consumer's offsets in its transactions
(send_offsets_to_transaction) -> output topic. Aborts, a fenced zombie and a timed-out
transaction must leave the output equal to exactly one processing of the input, as
Kafka's (KAFKA_REFERENCE.md §6.2: TxnOffsetCommit pending until the COMMIT marker)."""
import time

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.coordinator.group_coordinator import find_coordinator
from streamlog.errors import ProducerFencedError

INPUTS = [b"in-%03d" % i for i in range(60)]
IN = [TopicPartition("in", 0), TopicPartition("in", 1)]


def transform(value):
    return value.replace(b"in-", b"out-")


@pytest.fixture
def db(tmp_path):
    with streamlog.open(str(tmp_path / "db"), config={
            "transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 20}) as db:
        db.create_topic("in", partitions=2)
        db.create_topic("out", partitions=1)
        plain = db.producer()
        for i, value in enumerate(INPUTS):
            plain.send("in", value=value, partition=i % 2)
        plain.flush()
        yield db


class Instance:
    """One copy of the application: a group member and a transactional producer."""

    def __init__(self, db, **producer_settings):
        self.consumer = db.consumer(group_id="etl", isolation_level="read_committed",
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    max_poll_records=7)
        self.consumer.subscribe(["in"])
        self.producer = db.producer(transactional_id="etl-app", **producer_settings)
        self.producer.init_transactions()

    def poll(self):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            records = self.consumer.poll(timeout=0.1)
            if records:
                return records
            if self.consumer.assignment() and all(
                    self.consumer.position(tp) >= 30 for tp in self.consumer.assignment()):
                return []
        return []

    def process(self, records):
        """Begin, write the outputs, put the input offsets in the transaction."""
        self.producer.begin_transaction()
        for r in records:
            self.producer.send("out", value=transform(r.value))
        ends = {}
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            ends[tp] = max(ends.get(tp, 0), r.offset + 1)
        self.producer.send_offsets_to_transaction(ends, self.consumer.group_metadata())

    def rewind(self):
        """After an abort: back to the group's committed offsets (Kafka's pattern)."""
        committed = self.consumer.committed(self.consumer.assignment())
        for tp in self.consumer.assignment():
            c = committed.get(tp)
            self.consumer.seek(tp, c.offset if c is not None else 0)

    def run_to_the_end(self):
        while True:
            records = self.poll()
            if not records:
                return
            self.process(records)
            self.producer.commit_transaction()

    def close(self):
        self.consumer.close()
        self.producer.close()


def output(db):
    consumer = db.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
    consumer.assign([TopicPartition("out", 0)])
    out = []
    while True:
        got = consumer.poll(timeout=0.1)
        if not got:
            return out
        out += [r.value for r in got]


def assert_exactly_once(db):
    assert sorted(output(db)) == sorted(transform(v) for v in INPUTS)
    lags = db.describe_group("etl").partitions
    assert {tp: p.committed for tp, p in lags.items()} == {IN[0]: 30, IN[1]: 30}


def test_commits_and_aborts(db):
    app = Instance(db)
    app.process(app.poll())
    app.producer.commit_transaction()
    for _ in range(2):                  # processed, then thrown away
        app.process(app.poll())
        app.producer.abort_transaction()
        app.rewind()
    app.run_to_the_end()
    app.close()
    assert_exactly_once(db)
    # The aborted outputs are in the log, invisible to read_committed only.
    raw = db.consumer(auto_offset_reset="earliest")
    raw.assign([TopicPartition("out", 0)])
    seen = []
    while got := raw.poll(timeout=0.1):
        seen += got
    assert len(seen) > len(INPUTS)


def test_a_zombie_is_fenced_and_its_work_redone_once(db):
    zombie = Instance(db)
    zombie.process(zombie.poll())
    zombie.producer.commit_transaction()
    zombie.process(zombie.poll())       # in flight when a second copy takes over
    zombie.consumer.close()             # it leaves the group (a stall, a partition)
    successor = Instance(db)            # init_transactions() aborts the zombie's open txn
    with pytest.raises(ProducerFencedError):
        zombie.producer.commit_transaction()
    successor.run_to_the_end()
    successor.close()
    assert_exactly_once(db)


def test_offsets_of_a_member_that_left_fail_as_commit_failed_and_the_transaction_aborts(db):
    """Kafka's TransactionManager.TxnOffsetCommitHandler turns UNKNOWN_MEMBER_ID and
    ILLEGAL_GENERATION into CommitFailedException ("consumer group metadata mismatch"), an
    abortable error: the group's own errors (UnknownMemberIdError, IllegalGenerationError)
    reached the caller instead."""
    app = Instance(db)
    records = app.poll()
    metadata = app.consumer.group_metadata()
    app.consumer.close()                 # leaves the group: its member id is unknown now
    app.producer.begin_transaction()
    with pytest.raises(streamlog.CommitFailedError, match="group metadata does not match"):
        app.producer.send_offsets_to_transaction(
            {TopicPartition(records[0].topic, records[0].partition): records[0].offset + 1},
            metadata)
    with pytest.raises(streamlog.InvalidTxnStateError, match="abort_transaction"):
        app.producer.commit_transaction()
    app.producer.abort_transaction()
    app.producer.close()
    assert db.describe_group("etl").partitions == {}


def test_a_transaction_that_times_out_is_aborted_and_redone(db):
    from streamlog.coordinator.transaction import TxnState
    from streamlog.coordinator.transaction_coordinator import find_transaction_coordinator
    slow = Instance(db, transaction_timeout_ms=1000)
    slow.process(slow.poll())
    slow.producer.commit_transaction()
    slow.process(slow.poll())
    # Left open past its timeout: the coordinator's check aborts it (waiting is bounded; the
    # verdict is the state, not the time).
    coordinator = find_transaction_coordinator(db._broker)
    deadline = time.monotonic() + 30
    while coordinator.describe("etl-app").state != TxnState.COMPLETE_ABORT:
        assert time.monotonic() < deadline, coordinator.describe("etl-app")
        time.sleep(0.01)
    with pytest.raises(ProducerFencedError):
        slow.producer.commit_transaction()
    slow.producer.close()
    slow.consumer.close()
    again = Instance(db)
    again.run_to_the_end()
    again.close()
    assert_exactly_once(db)


def test_a_transactions_offsets_are_fsynced_before_send_offsets_returns(db):
    # They are part of the transaction's data: were they still in the page cache when
    # PrepareCommit is fsynced, a power loss could keep the outputs committed (the next
    # open writes the markers from PrepareCommit) and lose the offsets, so the input would
    # be processed twice. Kafka appends TxnOffsetCommit with acks=all, as a produce.
    app = Instance(db)
    app.process(app.poll())
    offsets_log = db._broker.partition_log(
        find_coordinator(db._broker).offsets_partition("etl"))
    assert offsets_log.log_end_offset > 0
    assert offsets_log.recovery_point == offsets_log.log_end_offset
    app.producer.commit_transaction()
    app.close()


def committed(db, tp):
    """Group g's committed offset of tp."""
    consumer = db.consumer(group_id="g")
    try:
        return consumer.committed([tp])[tp].offset
    finally:
        consumer.close()


def assert_kept_through_reopen_and_compaction(path, config, tp, offset):
    """Group g's committed offset of tp is `offset` after a reopen, and after the cleaner
    compacted __consumer_offsets (it keeps the last record of each key)."""
    with streamlog.open(path, config=config) as db:
        assert committed(db, tp) == offset
        db.compact("__consumer_offsets")
    with streamlog.open(path, config=config) as db:
        assert committed(db, tp) == offset


def test_a_plain_commit_after_a_transactions_offset_wins_as_compaction_keeps_it(tmp_path):
    # A transaction commits offset 3 of a partition, a plain commit gives it 9 before the
    # transaction ends. Kafka keeps the record written last (replayEndTransactionMarker
    # materializes a pending offset only above the committed one's record offset), and so
    # does compaction of __consumer_offsets: the group read 3 until the cleaner ran, then 9.
    path, tp = str(tmp_path / "db"), IN[0]
    config = {"offsets.topic.num.partitions": 1}

    with streamlog.open(path, config=config) as db:
        db.create_topic("in", partitions=2)
        producer = db.producer(transactional_id="tx")
        producer.init_transactions()
        producer.begin_transaction()
        consumer = db.consumer(group_id="g", enable_auto_commit=False)
        producer.send_offsets_to_transaction({tp: 3}, consumer.group_metadata())
        consumer.commit({tp: 9})
        producer.commit_transaction()
        producer.close()
        consumer.close()
        assert committed(db, tp) == 9
    assert_kept_through_reopen_and_compaction(path, config, tp, 9)


def test_a_transaction_whose_offset_record_is_older_loses_though_it_commits_last(tmp_path):
    # Two transactions hold an offset of the same group and partition: a's record (3) is
    # written before b's (9), and b commits first. Kafka's replayEndTransactionMarker
    # materializes a's at its marker only if its record offset is above the committed
    # one's -- it is not, so 9 stays, as compaction (the last record of the key) keeps.
    # Without the record offsets the group read 3 until the cleaner ran, then 9.
    path, tp = str(tmp_path / "db"), IN[0]
    config = {"offsets.topic.num.partitions": 1}

    with streamlog.open(path, config=config) as db:
        db.create_topic("in", partitions=2)
        consumer = db.consumer(group_id="g", enable_auto_commit=False)
        producers = {}
        for transactional_id, offset in (("a", 3), ("b", 9)):
            producer = producers[transactional_id] = db.producer(
                transactional_id=transactional_id)
            producer.init_transactions()
            producer.begin_transaction()
            producer.send_offsets_to_transaction({tp: offset}, consumer.group_metadata())
        producers["b"].commit_transaction()
        assert committed(db, tp) == 9
        producers["a"].commit_transaction()
        assert committed(db, tp) == 9
        for producer in producers.values():
            producer.close()
        consumer.close()
    assert_kept_through_reopen_and_compaction(path, config, tp, 9)
