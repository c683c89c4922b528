"""Failover tests of a small confluent-kafka application against three replicated brokers in
this process: the application's code runs unchanged while a test kills the leader, and the
test reads the cluster's state to decide when to act and what to expect.

    python examples/test_failover.py      # runs the tests below with pytest
    pytest examples/test_failover.py      # the same

The kafka_cluster fixture comes from streamlog's pytest plugin (docs/CLUSTER.md);
streamlog.testing.cluster(brokers=N) makes one of any size.
"""
import sys
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")


# --- the application -----------------------------------------------------------------------

class PaymentRecorder:
    """Records payments durably: idempotent, acks=all (the client's defaults since Kafka 3),
    so a payment it reports recorded survives the loss of any one broker."""

    def __init__(self, bootstrap_servers):
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap_servers, "enable.idempotence": True,
            "acks": "all", "linger.ms": 2, "reconnect.backoff.max.ms": 1000})
        self.recorded, self.failed = [], []

    def record(self, payment_id):
        def report(err, msg):
            (self.failed if err else self.recorded).append(msg.value() if not err else err)
        self.producer.produce("payments", value=payment_id.encode(), on_delivery=report)
        self.producer.poll(0)

    def flush(self):
        self.producer.flush(60)


def read_all(bootstrap_servers, topic):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap_servers,
                                         "group.id": "audit", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values, idle_since = [], time.monotonic()
    while time.monotonic() - idle_since < 3:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            values.append(message.value())
            idle_since = time.monotonic()
    consumer.close()
    return values


# --- its tests -------------------------------------------------------------------------------

def test_no_recorded_payment_is_lost_when_the_leader_dies(kafka_cluster):
    kafka_cluster.create_topic("payments", partitions=1, replication_factor=3,
                               config={"min.insync.replicas": 2})
    app = PaymentRecorder(kafka_cluster.bootstrap_servers)
    for i in range(100):
        app.record(f"p-{i}")
    app.flush()
    leader = kafka_cluster.leader("payments", 0)
    kafka_cluster.kill(leader)                   # no clean shutdown: its unflushed tail is gone
    for i in range(100, 200):
        app.record(f"p-{i}")                     # the client finds the new leader and retries
    app.flush()
    state = kafka_cluster.partition_state("payments", 0)
    assert state.leader != leader and leader not in state.isr
    assert app.failed == [] and len(app.recorded) == 200
    stored = read_all(kafka_cluster.bootstrap_servers, "payments")
    assert sorted(stored) == sorted(app.recorded)      # each exactly once
    kafka_cluster.restart(leader)                      # it truncates, catches up, rejoins
    kafka_cluster.wait_in_sync("payments")


def test_without_enough_in_sync_replicas_payments_wait_then_fail(kafka_cluster):
    kafka_cluster.create_topic("payments", partitions=1, replication_factor=3,
                               config={"min.insync.replicas": 2})
    leader = kafka_cluster.leader("payments", 0)
    for broker_id in kafka_cluster.broker_ids:
        if broker_id != leader:
            kafka_cluster.stop(broker_id)
    outcome = []
    for retries in (0, 2147483647):
        producer = confluent_kafka.Producer({
            "bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all",
            "retries": retries, "message.timeout.ms": 2000})
        producer.produce("payments", b"p-x", on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(10)
    # The broker refuses with NOT_ENOUGH_REPLICAS (retriable): a client that does not retry
    # reports it; one that does retries until its delivery timeout, then reports that.
    assert [err.code() for err in outcome] == [confluent_kafka.KafkaError.NOT_ENOUGH_REPLICAS,
                                               confluent_kafka.KafkaError._MSG_TIMED_OUT]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
