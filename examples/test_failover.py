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
        # Until every payment has its delivery report, recorded or failed: the client's
        # message.timeout.ms (5 minutes by default) bounds the wait, not a guess at how long
        # a failover takes.
        self.producer.flush()


def read_all(bootstrap_servers, topic):
    """Every record of the (one-partition) topic, up to its end when the read starts: the
    consumer reports the partition's end (enable.partition.eof) once it has read them all.
    A pause in the records, however long, is not taken for the end."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap_servers, "group.id": "audit",
        "auto.offset.reset": "earliest", "enable.partition.eof": True})
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 120   # only a broken build reaches it
    while True:
        assert time.monotonic() < deadline, f"read {len(values)} records, never the end"
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                break
            continue
        values.append(message.value())
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
    kafka_cluster.wait_in_sync("payments", timeout=120)


def test_without_enough_in_sync_replicas_payments_wait_then_fail(kafka_cluster):
    kafka_cluster.create_topic("payments", partitions=1, replication_factor=3,
                               config={"min.insync.replicas": 2})
    leader = kafka_cluster.leader("payments", 0)
    for broker_id in kafka_cluster.broker_ids:
        if broker_id != leader:
            kafka_cluster.stop(broker_id)
    outcome = []
    # The client that does not retry has a minute to reach the broker (its refusal comes at
    # once); the one that retries gives up after 2 s of refusals. flush() returns when the
    # message has its delivery report, however long that took.
    for retries, timeout_ms in ((0, 60_000), (2147483647, 2000)):
        producer = confluent_kafka.Producer({
            "bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all",
            "retries": retries, "message.timeout.ms": timeout_ms})
        producer.produce("payments", b"p-x", on_delivery=lambda err, msg: outcome.append(err))
        producer.flush()
    # The broker refuses with NOT_ENOUGH_REPLICAS (retriable): a client that does not retry
    # reports it; one that does retries until its delivery timeout, then reports that.
    assert [err.code() for err in outcome] == [confluent_kafka.KafkaError.NOT_ENOUGH_REPLICAS,
                                               confluent_kafka.KafkaError._MSG_TIMED_OUT]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
