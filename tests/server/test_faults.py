"""Fault injection (server.faults, KafkaServer.stop_listening / start_listening): each fault
does to a Kafka client what the same failure of a real broker does, and the client's own
recovery (retries, reconnects, rejoins, fencing) runs against it.

Kafka's rules the outcomes follow: NOT_LEADER_OR_FOLLOWER and REQUEST_TIMED_OUT are
retriable (the producer retries the batch; Kafka's Errors.java marks them
RetriableException); TOPIC_AUTHORIZATION_FAILED is not (the record fails); a bumped epoch
fences the producer of a transactional id (KAFKA_REFERENCE.md §6, PRODUCER_FENCED).
"""
import contextlib
import random
import socket

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.server import network
from streamlog.testing import records

from support import producer_in_a_transaction, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")


def produce_one(server, value=b"v", partition=0, **config):
    """Produce one record; the delivery report's error (None: delivered)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers,
                                         "retry.backoff.ms": 10, **config})
    reports = []
    producer.produce("t", value=value, partition=partition,
                     on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0
    return reports[0]


def values(db, partition=0):
    return [r.value for r in records(db, "t")
            if r.partition == partition]


def test_a_retriable_error_is_retried_and_the_record_lands_once(db, server):
    server.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=2, topic="t")
    assert produce_one(server, b"retried") is None
    assert values(db) == [b"retried"]     # the two refused attempts appended nothing
    assert server.faults.pending() == 0   # both injected errors were answered


def test_a_fatal_error_fails_the_record_and_writes_nothing(db, server):
    server.faults.error("produce", "TOPIC_AUTHORIZATION_FAILED", topic="t", partition=0)
    error = produce_one(server, b"refused")
    assert error.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert values(db) == []
    # Only the matching partition is affected; the fault was used up.
    assert produce_one(server, b"fine", partition=1) is None
    assert produce_one(server, b"now", partition=0) is None
    assert values(db, 1) == [b"fine"] and values(db, 0) == [b"now"]


def test_a_fetch_error_and_a_top_level_error(db, server):
    db.producer().send("t", value=b"x", partition=0).result()
    server.faults.error("Fetch", "NOT_LEADER_OR_FOLLOWER", count=3, topic="t")
    server.faults.error("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", count=2)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                         "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["t"])
    try:
        message = None
        while message is None or message.error():
            message = consumer.poll(10)
            assert message is not None, "the consumer never recovered"
        assert message.value() == b"x"
    finally:
        consumer.close()
    assert server.faults.pending() == 0


def test_a_dropped_request_and_dropped_connections_are_survived(db, server):
    server.faults.disconnect("Produce")
    assert produce_one(server, b"after-reconnect") is None
    assert values(db) == [b"after-reconnect"]   # the dropped request was never served
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers})
    producer.produce("t", value=b"1", partition=0)
    assert producer.flush(30) == 0
    server.faults.drop_connections()
    producer.produce("t", value=b"2", partition=0)
    assert producer.flush(30) == 0
    assert values(db) == [b"after-reconnect", b"1", b"2"]


def test_latency_holds_requests_without_failing_them(db, server):
    server.faults.delay("Produce", 0.2, count=1)
    assert produce_one(server, b"slow") is None
    assert values(db) == [b"slow"] and server.faults.pending() == 0


def test_the_listener_stops_and_comes_back_on_the_same_port(db, server):
    port = server.port
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers,
                                         "reconnect.backoff.max.ms": 100})
    producer.produce("t", value=b"before", partition=0)
    assert producer.flush(30) == 0
    server.stop_listening()
    reports = []
    producer.produce("t", value=b"while-down", partition=0,
                     on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(0.5) == 1     # nothing can be delivered while the broker is down
    server.start_listening()
    assert producer.flush(30) == 0 and reports == [None]
    assert server.port == port
    assert values(db) == [b"before", b"while-down"]


def test_a_listener_on_any_port_takes_one_no_client_connection_can_take_meanwhile(db,
                                                                                  monkeypatch):
    # A port of the kernel's ephemeral range, freed by stop_listening() (or by a cluster's
    # broker going down), can become the local end of any outgoing connection meanwhile,
    # and the listener could not come back on it (EADDRINUSE). Port 0 is a free port below
    # that range, one that is taken being passed over.
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lowest_ephemeral = int(f.read().split()[0])
    except OSError:
        pytest.skip("no ephemeral port range to read here")
    with network.KafkaServer(db._broker) as listener:
        assert listener.port < lowest_ephemeral
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    while True:
        port = random.randrange(network._LOWEST_CHOSEN_PORT, lowest_ephemeral)
        with contextlib.suppress(OSError):
            taken.bind(("127.0.0.1", port))
            break
    taken.listen()
    choices = iter([port])
    real = random.randrange
    monkeypatch.setattr(network.random, "randrange", lambda *a: next(choices, None) or real(*a))
    try:
        with network.KafkaServer(db._broker) as listener:
            assert network._LOWEST_CHOSEN_PORT <= listener.port < lowest_ephemeral
            assert listener.port != port
            listener.stop_listening()
            listener.start_listening()
            assert listener.listening
    finally:
        taken.close()


def test_a_forced_rebalance_reassigns_the_group(db, server):
    assignments = []
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                         "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["t"], on_assign=lambda c, parts: assignments.append(
        sorted(p.partition for p in parts)))
    try:
        def polled_until(n):
            consumer.poll(0.1)
            return len(assignments) >= n
        wait_until(lambda: polled_until(1), "the first assignment")
        generation = db.describe_group("g").generation
        server.faults.rebalance("g")
        wait_until(lambda: polled_until(2), "the assignment after the forced rebalance")
        assert assignments == [[0, 1], [0, 1]]
        assert db.describe_group("g").generation == generation + 1
    finally:
        consumer.close()


def test_fencing_a_transactional_id_fences_its_producer(db, server):
    producer = producer_in_a_transaction(server.bootstrap_servers, "tx", "t", b"doomed", 10)
    server.faults.fence("tx")   # as a new instance's init_transactions() would
    with pytest.raises(confluent_kafka.KafkaException) as fenced:
        producer.commit_transaction(10)
    assert fenced.value.args[0].fatal()
    consumer = db.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
    consumer.assign([TopicPartition("t", 0)])
    assert consumer.poll(0.5) == []    # the fenced transaction was aborted
    consumer.close()


def test_bad_fault_requests_are_refused_clearly(server):
    with pytest.raises(ValueError, match="unknown or unserved Kafka API"):
        server.faults.error("Frobnicate", "NONE")
    with pytest.raises(ValueError, match="unknown Kafka error code"):
        server.faults.error("Produce", "NOT_A_CODE")
    with pytest.raises(ValueError, match="no top-level error code"):
        server.faults.error("CreateTopics", "POLICY_VIOLATION")
    with pytest.raises(ValueError, match="narrow Produce and Fetch"):
        server.faults.error("JoinGroup", "UNKNOWN_MEMBER_ID", topic="t")
    with pytest.raises(ValueError, match="positive number"):
        server.faults.delay("Fetch", 1, count=0)
    with pytest.raises(streamlog.errors.InvalidRequestError, match="nothing to fence"):
        server.faults.fence("never-used")
    with pytest.raises(streamlog.errors.GroupIdNotFoundError):
        server.faults.rebalance("no-such-group")
    assert server.faults.pending() == 0
