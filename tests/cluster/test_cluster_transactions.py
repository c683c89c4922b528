"""Transactions on a cluster: the coordinator of a transactional id is the leader of its
partition of __transaction_state (replicated); markers go to each partition's leader and
are replicated before the transaction completes; a coordinator's death hands the id's
state to the next leader, and the producer goes on (Kafka's TransactionStateManager and
TransactionMarkerChannelManager)."""
import pytest

from streamlog.cluster import Cluster
from streamlog.coordinator.transaction_log import TRANSACTION_STATE_TOPIC

from support import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
TRANSACTION = 1


@pytest.fixture
def cluster(tmp_path):
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=1000,
                 config={"min.insync.replicas": 2}) as c:
        yield c


def committed_values(bootstrap, topic, expect, group="reader"):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest",
                                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    got = []

    def poll():
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            got.append(message.value())
        return len(got) >= expect
    try:
        wait_until(poll, f"{expect} committed records of {topic}", timeout_s=30)
        # Nothing more comes: an aborted record would have been delivered by now.
        for _ in range(10):
            poll()
    finally:
        consumer.close()
    return got


def transaction(producer, values, commit=True):
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce("out", value=value, partition=i % 3)
    producer.flush(30)
    (producer.commit_transaction if commit else producer.abort_transaction)(30)


def test_transactions_commit_abort_and_survive_their_coordinators_death(cluster):
    cluster.create_topic("out", 3, 3)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "transactional.id": "payments-tx",
                                         "reconnect.backoff.max.ms": 1000})
    producer.init_transactions(30)
    coordinator = cluster.coordinator_for("payments-tx", TRANSACTION)
    leaders = {cluster.leader("out", p) for p in range(3)}
    assert len(leaders) == 3   # the markers go to three brokers, two of them remote
    transaction(producer, [b"a1", b"a2", b"a3"])
    transaction(producer, [b"x1", b"x2", b"x3"], commit=False)
    cluster.kill(coordinator)
    assert cluster.coordinator_for("payments-tx", TRANSACTION) != coordinator
    transaction(producer, [b"b1", b"b2", b"b3"])   # the new coordinator knows the id
    assert sorted(committed_values(cluster.bootstrap_servers, "out", 6)) == \
        [b"a1", b"a2", b"a3", b"b1", b"b2", b"b3"]
    cluster.restart(coordinator)
    cluster.wait_in_sync(TRANSACTION_STATE_TOPIC)
    cluster.wait_in_sync("out")
    for p in range(3):   # every replica holds the same records and markers
        logs = {b: cluster.replica_records("out", p, b) for b in cluster.broker_ids}
        assert logs[0] == logs[1] == logs[2]
    producer.flush(10)


def test_a_new_instance_fences_the_old_one_across_a_coordinator_change(cluster):
    cluster.create_topic("out", 3, 3)
    config = {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "t2",
              "reconnect.backoff.max.ms": 1000}
    old = confluent_kafka.Producer(config)
    old.init_transactions(30)
    old.begin_transaction()
    old.produce("out", value=b"zombie", partition=0)
    old.flush(30)
    cluster.kill(cluster.coordinator_for("t2", TRANSACTION))
    new = confluent_kafka.Producer(config)
    new.init_transactions(30)        # aborts the old instance's open transaction
    transaction(new, [b"n1"])
    with pytest.raises(confluent_kafka.KafkaException):
        old.commit_transaction(10)   # fenced
    assert committed_values(cluster.bootstrap_servers, "out", 1) == [b"n1"]
