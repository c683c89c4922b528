"""Consumer groups on a cluster: a group's coordinator is the leader of its partition of
__consumer_offsets, which is replicated; when that broker dies, the next leader loads the
partition and the group goes on from its committed offsets (Kafka's GroupMetadataManager
loading a partition on election; commits appended with acks=all)."""
import threading

import pytest

from streamlog.cluster import Cluster
from streamlog.coordinator import GROUP_COORDINATOR
from streamlog.coordinator.group_coordinator import find_coordinator
from streamlog.coordinator.offsets import OFFSETS_TOPIC, partition_for
from streamlog.errors import CoordinatorNotAvailableError, StreamlogError
from streamlog.structs import OffsetAndMetadata, TopicPartition

from support import GENEROUS_S, wait_until
from support.cluster_steps import led_by_another_than_preferred

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


def test_a_restarted_follower_writes_nothing_of_its_own_into_the_offsets_topic(cluster):
    # Its group coordinator starts before the broker holds any replica state: loading a
    # group whose record lists members must not append there (a record only that replica
    # would hold, at an offset where the leader has another: replicas differing for good).
    # A code review found that append with a hand-written record sequence; this test
    # drives it through a real consumer and checks the outcome (the guard that fixes it,
    # Broker.produce's, refuses every append a cluster broker does not lead).
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"x"])
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "group.id": "stable", "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    consumer.subscribe(["t"])
    try:
        wait_until(lambda: _poll_into(consumer, []) or consumer.assignment(), "an assignment")
        partition = partition_for("stable", 50)
        state = cluster.partition_state(OFFSETS_TOPIC, partition)
        follower = next(r for r in state.replicas if r != state.leader)
        cluster.stop(follower)   # its log holds the group record naming the member
        for offset in (1, 1):
            consumer.commit(offsets=[confluent_kafka.TopicPartition("t", 0, offset)],
                            asynchronous=False)
        cluster.restart(follower)
        cluster.wait_in_sync(OFFSETS_TOPIC, [partition])
        logs = [cluster.replica_records(OFFSETS_TOPIC, partition, b) for b in state.replicas]
        assert logs[0] == logs[1] == logs[2]
    finally:
        consumer.close()


def test_a_stale_load_retry_does_not_load_a_partition_already_loaded(cluster):
    # A failed load is retried a second later (replica_manager.LOAD_RETRY_S); if the
    # partition was loaded at the current leader epoch meanwhile (a new election's load
    # succeeded), the retry must not load it again: a group coordinator's load starts
    # every group Empty, so its live members would have to join again.
    from streamlog.structs import TopicPartition
    leader = cluster.coordinator_for("g-stale")
    cluster.wait_in_sync(OFFSETS_TOPIC)
    manager = cluster.replica_manager(leader)
    loaded, fresh = [TopicPartition(OFFSETS_TOPIC, p) for p in range(50)
                     if cluster.leader(OFFSETS_TOPIC, p) == leader][:2]
    wait_until(lambda: manager.loaded(loaded) and manager.loaded(fresh), "the first loads")
    calls = []
    manager.leadership_listeners.append(lambda tp, epoch: calls.append(tp))
    manager._loaded.pop(fresh)          # as if its load had failed: it must load again
    manager._elections.put(loaded)      # a retry left over from a failed earlier load
    manager._elections.put(fresh)
    wait_until(lambda: fresh in calls, "the failed partition's load")
    assert loaded not in calls          # one loader thread: the stale retry came first


def test_a_coordinator_that_loses_its_partition_alive_unloads_its_groups(tmp_path):
    # A preferred-leader election moves the group's __consumer_offsets partition away from
    # a live coordinator: it unloads the partition's groups (Kafka's GroupMetadataManager.
    # removeGroupsForPartition, onGroupUnloaded): a member waiting on its JoinGroup there
    # is answered NOT_COORDINATOR at once, to find the new coordinator, instead of a join
    # answer from a broker that coordinates the group no longer.
    from streamlog.coordinator.group_coordinator import find_coordinator
    from streamlog.errors import NotCoordinatorError
    config = {"group.initial.rebalance.delay.ms": 600_000}   # the join waits for good
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=1000,
                 config=config) as cluster:
        tp, old = led_by_another_than_preferred(cluster, "g-moved", 0)
        wait_until(lambda: cluster.replica_manager(old).loaded(tp), "the coordinator's load")
        resigned = find_coordinator(cluster.broker(old))
        waiting = resigned.join_group("g-moved", "", None, "c-1", 10_000, 60_000, "consumer",
                                      [("range", b"")], lambda event, member_id: None)
        assert not waiting.done()
        new = cluster.elect_preferred_leader(tp.topic, tp.partition).leader
        assert cluster.coordinator_for("g-moved") == new != old
        assert waiting.wait(30), "the waiting join was not answered"
        with pytest.raises(NotCoordinatorError):
            waiting.result()
        assert "g-moved" not in resigned._groups


def test_a_commit_counts_only_once_its_replicas_hold_it(tmp_path):
    # Kafka keeps an offset commit pending (GroupMetadata.prepareOffsetCommit) until its
    # acks=all append succeeds: onOffsetCommitAppend makes it the committed offset,
    # failPendingOffsetWrite drops it. OffsetFetch answers committed offsets only, and
    # with require_stable a pending one is UNSTABLE_OFFSET_COMMIT
    # (hasPendingOffsetCommitsForTopicPartition). Served from memory at once, a commit
    # the coordinator then failed (or lost with it) would steer the group meanwhile.
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=300,
                 config={"min.insync.replicas": 2}) as cluster:
        cluster.create_topic("t", 1, 3)
        at = cluster.coordinator_partition("g", GROUP_COORDINATOR)
        cluster.wait_in_sync(at.topic, [at.partition])
        coordinator = cluster.leader(at.topic, at.partition)
        groups = find_coordinator(cluster.broker(coordinator))
        tp = TopicPartition("t", 0)
        groups.offset_commit("g", "", -1, None, {tp: OffsetAndMetadata(1)})
        for broker_id in cluster.broker_ids:
            if broker_id != coordinator:
                cluster.isolate(broker_id)
        offsets_log = cluster.broker(coordinator).partition_log(at)
        end = offsets_log.log_end_offset
        outcome = []

        def commit():
            try:
                groups.offset_commit("g", "", -1, None, {tp: OffsetAndMetadata(7)})
                outcome.append(None)
            except StreamlogError as exc:
                outcome.append(exc)
        thread = threading.Thread(target=commit, daemon=True)
        thread.start()
        wait_until(lambda: offsets_log.log_end_offset > end, "the commit appended")
        assert groups.offset_fetch("g", [tp])[tp].offset == 1
        assert groups.offset_fetch_stable("g", [tp])[1] == {tp}
        thread.join(GENEROUS_S)
        # The followers left the ISR: under min.insync.replicas the high watermark stays.
        assert isinstance(outcome[0], CoordinatorNotAvailableError)
        assert groups.offset_fetch("g", [tp])[tp].offset == 1
        assert groups.offset_fetch_stable("g", [tp])[1] == set()
        # Alone in the ISR now, the coordinator refuses a commit before writing it: Kafka
        # appends commits with acks=all (NOT_ENOUGH_REPLICAS, answered
        # COORDINATOR_NOT_AVAILABLE by GroupCoordinatorService.handleOperationException).
        wait_until(lambda: tuple(cluster.partition_state(at.topic, at.partition).isr) ==
                   (coordinator,), "the coordinator alone in the ISR")
        end = offsets_log.log_end_offset
        with pytest.raises(CoordinatorNotAvailableError):
            groups.offset_commit("g", "", -1, None, {tp: OffsetAndMetadata(8)})
        assert offsets_log.log_end_offset == end
        cluster.heal()
        cluster.wait_in_sync(at.topic, [at.partition])
        groups.offset_commit("g", "", -1, None, {tp: OffsetAndMetadata(9)})
        assert groups.offset_fetch("g", [tp])[tp].offset == 9
