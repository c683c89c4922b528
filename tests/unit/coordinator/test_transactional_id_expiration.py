"""transactional.id.expiration.ms: the transaction coordinator forgets an id that has had
no transaction open for that long, with a tombstone in __transaction_state, as Kafka's
TransactionStateManager.removeExpiredTransactionalIds does (shouldExpire: the state is
Empty, CompleteCommit or CompleteAbort -- isExpirationAllowed -- and
txnLastUpdateTimestamp <= now - transactionalIdExpirationMs)."""
import pytest

from streamlog.broker.broker import Broker
from streamlog.coordinator.transaction import TxnState
from streamlog.coordinator.transaction_coordinator import find_transaction_coordinator
from streamlog.errors import InvalidConfigurationError, InvalidProducerIdMappingError
from streamlog.structs import TopicPartition

from support import wait_until

EXPIRATION_MS = 60_000
CONFIG = {"transaction.state.log.num.partitions": 1,
          "transactional.id.expiration.ms": EXPIRATION_MS,
          # No check runs by itself: the tests call it.
          "transaction.remove.expired.transaction.cleanup.interval.ms": 3_600_000,
          "transaction.abort.timed.out.transaction.cleanup.interval.ms": 3_600_000}
TP = TopicPartition("t", 0)


class Clock:
    def __init__(self):
        self.now_ms = 1_700_000_000_000

    def __call__(self):
        return self.now_ms


@pytest.fixture
def clock():
    return Clock()


def open_broker(path, clock):
    broker = Broker(str(path), config=CONFIG, clock_ms=clock)
    if "t" not in broker.topics():
        broker.create_topic("t", 1)
    return broker


def test_ids_with_no_transaction_open_expire_and_an_open_one_stays(tmp_path, clock):
    broker = open_broker(tmp_path / "db", clock)
    try:
        coordinator = find_transaction_coordinator(broker)
        empty = coordinator.init_producer_id("empty", 60_000)
        committed = coordinator.init_producer_id("committed", 60_000)
        coordinator.add_partitions("committed", *committed, [TP])
        coordinator.end_txn("committed", *committed, commit=True)
        aborted = coordinator.init_producer_id("aborted", 60_000)
        coordinator.add_partitions("aborted", *aborted, [TP])
        coordinator.end_txn("aborted", *aborted, commit=False)
        ongoing = coordinator.init_producer_id("ongoing", 60_000)
        coordinator.add_partitions("ongoing", *ongoing, [TP])
        clock.now_ms += EXPIRATION_MS - 1
        assert coordinator.expire_transactional_ids() == 0
        clock.now_ms += 1
        assert coordinator.expire_transactional_ids() == 3
        for gone in ("empty", "committed", "aborted"):
            assert coordinator.describe(gone) is None
        assert coordinator.describe("ongoing").state == TxnState.ONGOING
        # The old producer no longer owns its id (Kafka: INVALID_PRODUCER_ID_MAPPING);
        # a new InitProducerId starts it afresh, with a new producer id at epoch 0.
        with pytest.raises(InvalidProducerIdMappingError):
            coordinator.add_partitions("empty", *empty, [TP])
        producer_id, epoch = coordinator.init_producer_id("empty", 60_000)
        assert producer_id != empty[0] and epoch == 0
    finally:
        broker.close()


def test_an_expired_id_stays_forgotten_after_a_reopen(tmp_path, clock):
    broker = open_broker(tmp_path / "db", clock)
    try:
        coordinator = find_transaction_coordinator(broker)
        coordinator.init_producer_id("gone", 60_000)
        kept = coordinator.init_producer_id("kept", 60_000)
        clock.now_ms += EXPIRATION_MS // 2
        coordinator.add_partitions("kept", *kept, [TP])   # a state change: its clock restarts
        coordinator.end_txn("kept", *kept, commit=True)
        clock.now_ms += EXPIRATION_MS // 2
        assert coordinator.expire_transactional_ids() == 1
    finally:
        broker.close()
    broker = open_broker(tmp_path / "db", clock)
    try:
        coordinator = find_transaction_coordinator(broker)
        assert coordinator.describe("gone") is None
        assert coordinator.describe("kept").state == TxnState.COMPLETE_COMMIT
    finally:
        broker.close()


@pytest.mark.parametrize("name", ["transactional.id.expiration.ms",
                                  "transaction.remove.expired.transaction.cleanup.interval.ms"])
def test_the_settings_are_at_least_one_ms(name):
    # TransactionStateManagerConfig: both are atLeast(1).
    with pytest.raises(InvalidConfigurationError):
        Broker.config_from({name: 0})


def test_the_check_runs_every_cleanup_interval_by_itself(tmp_path):
    broker = Broker(str(tmp_path / "db"), config={
        **CONFIG, "transactional.id.expiration.ms": 1,
        "transaction.remove.expired.transaction.cleanup.interval.ms": 20})
    try:
        coordinator = find_transaction_coordinator(broker)
        coordinator.init_producer_id("idle", 60_000)
        wait_until(lambda: coordinator.describe("idle") is None, "the idle id to expire")
    finally:
        broker.close()
