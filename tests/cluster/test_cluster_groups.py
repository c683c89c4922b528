"""Consumer groups on a cluster: a group's coordinator is the leader of its partition of
__consumer_offsets, which is replicated; when that broker dies, the next leader loads the
partition and the group goes on from its committed offsets (Kafka's GroupMetadataManager
loading a partition on election; commits appended with acks=all)."""
import pytest

from streamlog.cluster import Cluster
from streamlog.coordinator.offsets import OFFSETS_TOPIC, partition_for

from support import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture
def cluster(tmp_path):
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=1000) as c:
        yield c


def consume(bootstrap, group, want, timeout_s=30):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    consumer.subscribe(["t"])
    got = []
    try:
        wait_until(lambda: _poll_into(consumer, got) >= want, f"{want} records",
                   timeout_s=timeout_s)
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def _poll_into(consumer, got):
    message = consumer.poll(0.2)
    if message is not None and not message.error():
        got.append(message.value())
    return len(got)


def test_committed_offsets_survive_the_death_of_the_groups_coordinator(cluster):
    cluster.create_topic("t", 3, 3)
    for p in range(3):
        cluster.produce("t", p, [b"old-%d-%d" % (p, i) for i in range(10)])
    first = consume(cluster.bootstrap_servers, "billing", 30)
    assert len(first) == 30
    coordinator = cluster.coordinator_for("billing")
    state = cluster.partition_state(OFFSETS_TOPIC, partition_for("billing", 50))
    assert state.leader == coordinator and len(state.replicas) == 3   # replicated
    cluster.kill(coordinator)   # its unflushed tail goes with it: the commit must be elsewhere
    assert cluster.coordinator_for("billing") != coordinator
    for p in range(3):
        cluster.produce("t", p, [b"new-%d" % p])
    second = consume(cluster.bootstrap_servers, "billing", 3)
    assert sorted(second) == [b"new-0", b"new-1", b"new-2"]   # nothing read twice
    cluster.restart(coordinator)
    cluster.wait_in_sync(OFFSETS_TOPIC)
