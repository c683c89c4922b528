"""What each broker of a cluster answers on the wire: Metadata with leaders, replicas, ISR
and offline replicas; NOT_LEADER_OR_FOLLOWER from a follower; LEADER_NOT_AVAILABLE for a
partition without a leader; CreateTopics with a replication factor; DescribeCluster and
FindCoordinator naming brokers of the cluster; NOT_COORDINATOR from a broker that does
not coordinate the group. Each rule is Kafka's (KafkaApis, ReplicaManager, MetadataCache)."""
import dataclasses
import datetime
import socket
import threading

import pytest

from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_records.v2.request import (DeleteRecordsPartition, DeleteRecordsRequest,
                                                  DeleteRecordsTopic)
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest
from kio.schema.describe_topic_partitions.v0.request import \
    TopicRequest as DescribeTopicPartitionsTopic
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest
from kio.schema.list_offsets.v4.request import ListOffsetsPartition as ListOffsetsPartitionV4
from kio.schema.list_offsets.v4.request import ListOffsetsRequest as ListOffsetsRequestV4
from kio.schema.list_offsets.v4.request import ListOffsetsTopic as ListOffsetsTopicV4
from kio.schema.list_offsets.v7.request import (ListOffsetsPartition, ListOffsetsRequest,
                                                ListOffsetsTopic)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_for_leader_epoch.v4.request import (OffsetForLeaderEpochRequest,
                                                           OffsetForLeaderPartition,
                                                           OffsetForLeaderTopic)
from kio.schema.produce.v9.request import (PartitionProduceData, ProduceRequest,
                                           TopicProduceData)
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64
from streamlog.cluster.cluster import Cluster
from streamlog.storage import record_batch
from streamlog.structs import TopicPartition

from support import wait_until
from support.wire import NEVER_S, call, call_without_long_poll, list_offsets

SECONDS = i32Timedelta.parse(datetime.timedelta(seconds=5))


@pytest.fixture
def cluster(tmp_path):
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=300) as c:
        yield c


def connect(cluster, broker_id):
    slot = cluster._slots[broker_id]
    return socket.create_connection((cluster.host, slot.port))


def metadata(sock, *topics):
    return call(sock, MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))


def produce(topic, partition, acks=-1):
    batch = bytes(record_batch.build_batch([b"v"], timestamp=1))
    return ProduceRequest(transactional_id=None, acks=i16(acks), timeout=SECONDS, topic_data=(
        TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=i32(partition), records=batch),)),))


def test_every_broker_answers_the_same_leaders_replicas_and_isr(cluster):
    cluster.create_topic("t", 3, 3)
    answers = []
    for broker_id in cluster.broker_ids:
        with connect(cluster, broker_id) as sock:
            answers.append(metadata(sock, "t"))
    for answer in answers:
        assert sorted(b.node_id for b in answer.brokers) == [0, 1, 2]
        parts = sorted(answer.topics[0].partitions, key=lambda p: p.partition_index)
        for p in parts:
            state = cluster.partition_state("t", p.partition_index)
            assert p.error_code == ErrorCode.none
            assert p.leader_id == state.leader and p.leader_epoch == state.leader_epoch
            assert tuple(p.replica_nodes) == state.replicas
            assert tuple(p.isr_nodes) == state.isr and p.offline_replicas == ()
    assert answers[0].topics[0].topic_id == answers[1].topics[0].topic_id  # one id per topic
    assert len({p.leader_id for p in answers[0].topics[0].partitions}) == 3  # spread


def test_a_follower_refuses_produce_with_not_leader_or_follower(cluster):
    cluster.create_topic("t", 1, 3)
    leader = cluster.leader("t", 0)
    follower = next(b for b in cluster.broker_ids if b != leader)
    with connect(cluster, follower) as sock:
        answer = call(sock, produce("t", 0))
    assert answer.responses[0].partition_responses[0].error_code == \
        ErrorCode.not_leader_or_follower
    with connect(cluster, leader) as sock:
        answer = call(sock, produce("t", 0))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_produce_10_names_the_leader_beside_not_leader_or_follower(cluster):
    # KIP-951 (Kafka's KafkaApis.handleProduceRequest, Produce 10+): the partition's current
    # leader and epoch, and that leader's endpoint, so the producer moves to it without a
    # Metadata round trip. Before 10, neither field exists.
    from kio.schema.produce.v10.request import PartitionProduceData as PartitionV10
    from kio.schema.produce.v10.request import ProduceRequest as ProduceV10
    from kio.schema.produce.v10.request import TopicProduceData as TopicV10
    cluster.create_topic("t", 1, 3)
    leader = cluster.leader("t", 0)
    epoch = cluster.partition_state("t", 0).leader_epoch
    follower = next(b for b in cluster.broker_ids if b != leader)
    with connect(cluster, follower) as sock:
        answer = call(sock, ProduceV10(transactional_id=None, acks=i16(1), timeout=SECONDS,
                                       topic_data=(TopicV10(name="t", partition_data=(
                                           PartitionV10(index=i32(0), records=bytes(
                                               record_batch.build_batch([b"v"], timestamp=1))),
                                       )),)))
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert (int(part.current_leader.leader_id), int(part.current_leader.leader_epoch)) == \
        (leader, epoch)
    assert [(int(n.node_id), n.host, int(n.port)) for n in answer.node_endpoints] == \
        [(leader, cluster.host, cluster._slots[leader].port)]


def test_a_partition_without_a_leader_is_leader_not_available_with_its_offline_replica(
        cluster):
    cluster.create_topic("t", 1, 1)
    only = cluster.leader("t", 0)
    cluster.stop(only)
    other = next(b for b in cluster.broker_ids if b != only)
    with connect(cluster, other) as sock:
        p = metadata(sock, "t").topics[0].partitions[0]
    assert p.error_code == ErrorCode.leader_not_available and p.leader_id == -1
    assert tuple(p.offline_replicas) == (only,)


def test_describe_topic_partitions_names_no_leader_for_a_partition_whose_leader_is_down(
        cluster):
    # KRaftMetadataCache.getPartitionMetadataForDescribeTopicResponse: leader -1 (no error
    # code, unlike Metadata) when the leader is not alive; the replica listed offline.
    cluster.create_topic("t", 3, 1)   # one replica each: no other can lead
    down = cluster.leader("t", 0)
    cluster.stop(down)
    other = next(b for b in cluster.broker_ids if b != down)
    with connect(cluster, other) as sock:
        answer = call(sock, DescribeTopicPartitionsRequest(
            topics=(DescribeTopicPartitionsTopic(name="t"),), response_partition_limit=i32(10),
            cursor=None))
    for p in answer.topics[0].partitions:
        state = cluster.partition_state("t", p.partition_index)
        assert p.error_code == ErrorCode.none and p.leader_epoch == state.leader_epoch
        assert p.leader_id == (state.leader if state.leader != down else -1)
        assert tuple(p.replica_nodes) == state.replicas and tuple(p.isr_nodes) == state.isr
        assert tuple(p.offline_replicas) == ((down,) if down in state.replicas else ())
    assert answer.topics[0].partitions[0].leader_id == -1


def test_metadata_names_as_leader_only_a_broker_it_lists(cluster, monkeypatch):
    # Kafka's KRaftMetadataCache.getPartitionMetadata: a partition whose leader has no live
    # endpoint in the answer is LEADER_NOT_AVAILABLE with leader -1. A leader id missing
    # from the brokers is one a client cannot reach (kafka-python raises
    # UnknownBrokerIdError out of poll()). Here the leader's listener is gone from the
    # brokers list while the controller still names it, as when a Metadata request is
    # answered across that broker's going down.
    cluster.create_topic("t", 1, 3)
    leader = cluster.leader("t", 0)
    other = next(b for b in cluster.broker_ids if b != leader)
    listed = cluster.reachable_brokers()
    monkeypatch.setattr(cluster, "reachable_brokers",
                        lambda: [b for b in listed if b[0] != leader])
    with connect(cluster, other) as sock:
        answer = metadata(sock, "t")
    assert leader not in [b.node_id for b in answer.brokers]
    p = answer.topics[0].partitions[0]
    assert p.error_code == ErrorCode.leader_not_available and p.leader_id == -1


def test_metadata_creates_a_topic_only_where_auto_create_topics_enable_is_on(cluster):
    # Kafka's KafkaApis.handleTopicMetadataRequest creates a missing topic only when the
    # request allows it and the broker's auto.create.topics.enable is on (allowAutoCreation);
    # this cluster's brokers leave it at the database's default, off.
    with connect(cluster, 0) as sock:
        answer = call(sock, MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name="typo"),),
            allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("typo", ErrorCode.unknown_topic_or_partition)]
    assert "typo" not in cluster.broker(0).topics()


def test_create_topics_takes_a_replication_factor_and_refuses_one_above_the_brokers(cluster):
    with connect(cluster, 1) as sock:
        answer = call(sock, CreateTopicsRequest(
            timeout=SECONDS, validate_only=False, topics=(
                CreatableTopic(name="r2", num_partitions=i32(2), replication_factor=i16(2),
                               assignments=(), configs=()),
                CreatableTopic(name="r4", num_partitions=i32(1), replication_factor=i16(4),
                               assignments=(), configs=()))))
    ok, refused = answer.topics
    assert ok.error_code == ErrorCode.none and ok.replication_factor == 2
    assert refused.error_code == ErrorCode.invalid_replication_factor   # 4 > 3 brokers
    for p in range(2):
        assert len(cluster.partition_state("r2", p).replicas) == 2
        for broker_id in cluster.broker_ids:   # the topic exists on every broker
            assert "r2" in cluster.broker(broker_id).topics()


def test_metadata_auto_creation_makes_a_coordinators_topic_through_the_controller(tmp_path):
    # AutoTopicCreationManager.creatableTopic: __transaction_state with
    # transaction.state.log.num.partitions, replicated as its coordinator would make it.
    config = {"auto.create.topics.enable": True, "transaction.state.log.num.partitions": 2}
    with Cluster(2, path=str(tmp_path / "c"), config=config) as c, connect(c, 1) as sock:
        (topic,) = call(sock, MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name="__transaction_state"),),
            allow_auto_topic_creation=True, include_topic_authorized_operations=False)).topics
        assert (topic.error_code, topic.is_internal, len(topic.partitions)) == \
            (ErrorCode.none, True, 2)
        assert [len(p.replica_nodes) for p in topic.partitions] == [2, 2]
        assert c.coordinator_for("tx", 1) in (0, 1)


def test_two_colliding_names_of_one_request_are_both_created_on_every_broker(cluster):
    # ReplicationControlManager.validateNewTopicNames checks a request's names against the
    # topics committed before it: 'x.1' and 'x_1' of one request are both made, and a
    # broker down meanwhile makes both from the controller's records when it returns.
    cluster.stop(2)
    with connect(cluster, 0) as sock:
        answer = call(sock, CreateTopicsRequest(timeout=SECONDS, validate_only=False, topics=tuple(
            CreatableTopic(name=name, num_partitions=i32(1), replication_factor=i16(2),
                           assignments=(), configs=()) for name in ("x.1", "x_1"))))
    assert [(t.name, t.error_code) for t in answer.topics] == [("x.1", ErrorCode.none),
                                                               ("x_1", ErrorCode.none)]
    cluster.restart(2)
    for broker_id in cluster.broker_ids:
        assert {"x.1", "x_1"} <= set(cluster.broker(broker_id).topics())


def test_create_topics_validate_only_answers_the_replication_factor_it_would_place(cluster):
    # ReplicationControlManager.createTopic places a validated topic as a created one
    # (its replica placer refuses a factor above the brokers: INVALID_REPLICATION_FACTOR)
    # and answers the factor placed, -1 standing for the default (min(3, brokers) here).
    with connect(cluster, 1) as sock:
        answer = call(sock, CreateTopicsRequest(
            timeout=SECONDS, validate_only=True, topics=tuple(
                CreatableTopic(name=name, num_partitions=i32(2), replication_factor=i16(rf),
                               assignments=(), configs=())
                for name, rf in (("r2", 2), ("default", -1), ("r4", 4)))))
    assert [(t.name, t.error_code, t.num_partitions, t.replication_factor)
            for t in answer.topics] == [
        ("r2", ErrorCode.none, 2, 2), ("default", ErrorCode.none, 2, 3),
        ("r4", ErrorCode.invalid_replication_factor, -1, -1)]
    assert not {"r2", "default"} & set(cluster.broker(1).topics())


def test_a_manual_replica_assignment_places_the_replicas_on_the_brokers_it_names(cluster):
    # ReplicationControlManager.createTopic and createPartitions: each partition on the
    # brokers listed, the first leading; a down broker may be listed, a list of down brokers
    # only is INVALID_REPLICA_ASSIGNMENT, as a list of the wrong length is.
    from kio.schema.create_partitions.v3.request import (CreatePartitionsAssignment,
                                                         CreatePartitionsRequest,
                                                         CreatePartitionsTopic)
    from kio.schema.create_topics.v7.request import CreatableReplicaAssignment
    cluster.stop(0)
    with connect(cluster, 1) as sock:
        (created,) = call(sock, CreateTopicsRequest(timeout=SECONDS, validate_only=False, topics=(
            CreatableTopic(name="placed", num_partitions=i32(-1), replication_factor=i16(-1),
                           configs=(), assignments=tuple(
                CreatableReplicaAssignment(partition_index=i32(p),
                                           broker_ids=tuple(BrokerId(b) for b in brokers))
                for p, brokers in ((0, (2, 0)), (1, (1, 2))))),))).topics

        def grow(count, *lists):
            (result,) = call(sock, CreatePartitionsRequest(
                timeout=SECONDS, validate_only=False, topics=(CreatePartitionsTopic(
                    name="placed", count=i32(count), assignments=tuple(
                        CreatePartitionsAssignment(broker_ids=tuple(BrokerId(b) for b in ids))
                        for ids in lists)),))).results
            return result.error_code, result.error_message
        assert grow(3, (0, 1, 2)) == (
            ErrorCode.invalid_replica_assignment, "The manual partition assignment includes "
            "a partition with 3 replica(s), but this is not consistent with previous "
            "partitions, which have 2 replica(s).")
        assert grow(3, (0,)) == (
            ErrorCode.invalid_replica_assignment, "The manual partition assignment includes "
            "a partition with 1 replica(s), but this is not consistent with previous "
            "partitions, which have 2 replica(s).")
        assert grow(3, (0, 0)) == (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes the broker 0 more than once.")
        assert grow(3, (2, 1)) == (ErrorCode.none, None)
        (down,) = call(sock, CreateTopicsRequest(timeout=SECONDS, validate_only=False, topics=(
            CreatableTopic(name="down", num_partitions=i32(-1), replication_factor=i16(-1),
                           configs=(), assignments=(CreatableReplicaAssignment(
                               partition_index=i32(0), broker_ids=(BrokerId(0),)),)),))).topics
    assert (down.error_code, down.error_message) == (
        ErrorCode.invalid_replica_assignment, "All brokers specified in the manual partition "
        "assignment for partition 0 are fenced or in controlled shutdown.")
    assert (created.error_code, created.num_partitions, created.replication_factor) == (
        ErrorCode.none, 2, 2)
    placed = {p: cluster.partition_state("placed", p) for p in range(3)}
    assert {p: (s.replicas, s.leader) for p, s in placed.items()} == {
        0: ((2, 0), 2), 1: ((1, 2), 1), 2: ((2, 1), 2)}


def test_describe_cluster_and_find_coordinator_name_the_clusters_brokers(cluster):
    with connect(cluster, 2) as sock:
        brokers = call(sock, DescribeClusterRequest(include_cluster_authorized_operations=False))
        found = call(sock, FindCoordinatorRequest(key="group-a", key_type=i8(0)))
    assert sorted(b.broker_id for b in brokers.brokers) == [0, 1, 2]
    coordinator = cluster.coordinator_for("group-a")
    assert found.node_id == coordinator
    assert found.port == cluster._slots[coordinator].port
    other = next(b for b in cluster.broker_ids if b != coordinator)
    with connect(cluster, other) as sock:
        beat = call(sock, HeartbeatRequest(group_id="group-a", generation_id=i32(1),
                                           member_id="m", group_instance_id=None))
    assert beat.error_code == ErrorCode.not_coordinator
    cluster.kill(coordinator)   # the group moves to a live broker
    moved = cluster.coordinator_for("group-a")
    assert moved != coordinator and cluster.alive(moved)
    wait_until(lambda: moved in [b[0] for b in cluster.reachable_brokers()], "its listener")


def test_list_config_resources_names_every_broker_of_the_cluster_down_ones_too(cluster):
    # KafkaApis.handleListConfigResources lists MetadataCache.getBrokerNodes: every
    # registered broker, fenced ones too; a stopped broker stays registered.
    kafka = pytest.importorskip("kafka")
    cluster.create_topic("r", partitions=1, replication_factor=3)
    kp = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        listed = kp.list_config_resources(["BROKER", "TOPIC"])
        # kafka-python asks the controller; no reassignment is ever in progress.
        assert kp.list_partition_reassignments() == {}
    finally:
        kp.close()
    assert listed["broker"] == ["0", "1", "2"] and "r" in listed["topic"]
    cluster.stop(2)
    with connect(cluster, 1) as sock:
        answer = call(sock, ListConfigResourcesRequest(resource_types=(i8(8), i8(4))))
    assert answer.error_code == ErrorCode.none
    assert [(r.resource_type, r.resource_name) for r in answer.config_resources] == [
        (8, "0"), (8, "1"), (8, "2"), (4, "0"), (4, "1"), (4, "2")]


def test_describe_log_dirs_lists_the_replicas_each_broker_holds(cluster):
    # A Kafka broker's LogManager holds only its replicas' logs (ReplicaManager
    # .describeLogDirs lists allLogs); a broker here keeps an empty log of every partition.
    from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
    cluster.create_topic("t", 3, 1)
    for broker_id in cluster.broker_ids:
        with connect(cluster, broker_id) as sock:
            (result,) = call(sock, DescribeLogDirsRequest(topics=None)).results
        held = [(t.name, p.partition_index) for t in result.topics for p in t.partitions
                if t.name == "t"]
        assert held == [("t", p) for p in range(3)
                        if cluster.partition_state("t", p).replicas == (broker_id,)]
        assert len(held) == 1


def test_a_coordinator_still_loading_a_group_answers_as_kafka_does(cluster, monkeypatch):
    # Kafka's GroupCoordinator while it loads a group's partition: JoinGroup and OffsetFetch
    # answer COORDINATOR_LOAD_IN_PROGRESS (clients retry), SyncGroup REBALANCE_IN_PROGRESS
    # (the rebalance was lost; older clients do not expect the other), and a Heartbeat NONE
    # (its member keeps its partitions): GroupCoordinator.scala's handleJoinGroup,
    # handleSyncGroup and handleHeartbeat. What it held of the group before is not answered.
    from kio.schema.join_group.v3.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.offset_fetch.v6.request import OffsetFetchRequest
    from kio.schema.sync_group.v3.request import SyncGroupRequest
    from streamlog.coordinator.group_coordinator import GroupCoordinator
    old = cluster.coordinator_for("group-l")
    cluster.wait_in_sync("__consumer_offsets")
    release, loading = threading.Event(), threading.Event()
    take_over = GroupCoordinator.take_over

    def slow_take_over(self, partition):
        loading.set()
        release.wait(60)
        return take_over(self, partition)
    monkeypatch.setattr(GroupCoordinator, "take_over", slow_take_over)
    cluster.kill(old)
    assert loading.wait(60)
    new = cluster.coordinator_for("group-l")
    wait_until(lambda: new in [b[0] for b in cluster.reachable_brokers()], "its listener")
    with connect(cluster, new) as sock:
        def beat():
            return call(sock, HeartbeatRequest(group_id="group-l", generation_id=i32(1),
                                               member_id="m", group_instance_id=None))
        joined = call(sock, JoinGroupRequest(
            group_id="group-l", session_timeout=SECONDS, rebalance_timeout=SECONDS,
            member_id="", protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),)))
        synced = call(sock, SyncGroupRequest(group_id="group-l", generation_id=i32(1),
                                             member_id="m", group_instance_id=None,
                                             assignments=()))
        fetched = call(sock, OffsetFetchRequest(group_id="group-l", topics=None))
        assert joined.error_code == ErrorCode.coordinator_load_in_progress
        assert synced.error_code == ErrorCode.rebalance_in_progress
        assert fetched.error_code == ErrorCode.coordinator_load_in_progress
        assert beat().error_code == ErrorCode.none
        release.set()
        # Loaded: the member is unknown to the group (it never joined this coordinator).
        wait_until(lambda: beat().error_code == ErrorCode.unknown_member_id,
                   "the coordinator to answer from the loaded group")


def test_topics_deleted_or_grown_while_a_broker_is_down_are_so_when_it_returns(cluster):
    cluster.create_topic("gone", 1, 3)
    cluster.create_topic("grows", 1, 3)
    cluster.produce("gone", 0, [b"x"])
    cluster.stop(2)
    cluster.delete_topic("gone")
    cluster.create_partitions("grows", 3)
    for broker_id in (0, 1):
        assert "gone" not in cluster.broker(broker_id).topics()
        assert cluster.broker(broker_id).topic("grows").partitions == 3
    cluster.restart(2)
    assert "gone" not in cluster.broker(2).topics()
    assert cluster.broker(2).topic("grows").partitions == 3
    cluster.wait_in_sync("grows")
    for p in range(3):
        cluster.produce("grows", p, [b"p%d" % p])
    cluster.wait_in_sync("grows")
    cluster.create_topic("gone", 2, 2)   # the name is free again, under a new topic id
    ids = {cluster.broker(b).topic("gone").topic_id for b in cluster.broker_ids}
    assert len(ids) == 1


def test_delete_records_on_the_leader_reaches_the_followers(cluster):
    # Kafka's DeleteRecords goes to the leader; followers take the leader's log start
    # offset from their fetches, so a new leader does not bring the records back.
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"r%d" % i for i in range(10)])
    leader = cluster.leader("t", 0)
    cluster.broker(leader).delete_records({TopicPartition("t", 0): 6})
    cluster.produce("t", 0, [b"after"])
    wait_until(lambda: all(cluster.broker(b).partition_log(TopicPartition("t", 0))
                           .log_start_offset == 6 for b in cluster.broker_ids),
               "every replica's log start at 6")
    cluster.kill(leader)
    new = wait_until(lambda: cluster.partition_state("t", 0).leader not in (-1, leader)
                     and cluster.partition_state("t", 0).leader, "a new leader")
    assert [v for _, v in cluster.replica_records("t", 0, new)] == \
        [b"r6", b"r7", b"r8", b"r9", b"after"]


def delete_records(sock, topic, partition, offset, timeout_s):
    answer = call(sock, DeleteRecordsRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=timeout_s)),
        topics=(DeleteRecordsTopic(name=topic, partitions=(DeleteRecordsPartition(
            partition_index=i32(partition), offset=i64(offset)),)),)))
    result = answer.topics[0].partitions[0]
    return result.error_code, int(result.low_watermark)


def test_delete_records_answers_once_every_live_replica_deleted_them(cluster):
    # Kafka's ReplicaManager.deleteRecords parks a DelayedDeleteRecords until the low
    # watermark (Partition.lowWatermarkIfLeader: the smallest log start of the leader and
    # every live replica, in the ISR or not) reaches the offset; REQUEST_TIMED_OUT at the
    # request's timeout, with the low watermark of the deletion. Answered NONE while a
    # follower still held the records, the deletion was undone when that follower led.
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"r%d" % i for i in range(10)])
    cluster.wait_in_sync("t")
    leader = cluster.leader("t", 0)
    cut = next(b for b in cluster.broker_ids if b != leader)
    with connect(cluster, leader) as sock:
        assert delete_records(sock, "t", 0, 3, 30) == (ErrorCode.none, 3)
        assert all(cluster.broker(b).partition_log(TopicPartition("t", 0)).log_start_offset
                   == 3 for b in cluster.broker_ids)
        cluster.isolate(cut)   # alive, registered, and fetching nothing
        sock.settimeout(30)
        assert delete_records(sock, "t", 0, 5, 0.5) == (ErrorCode.request_timed_out, 3)
        cluster.heal()
        assert delete_records(sock, "t", 0, 5, 30) == (ErrorCode.none, 5)
    assert cluster.broker(cut).partition_log(TopicPartition("t", 0)).log_start_offset == 5
    cluster.kill(cut)   # a replica the controller let go holds nothing back
    with connect(cluster, leader) as sock:
        assert delete_records(sock, "t", 0, 7, 30) == (ErrorCode.none, 7)


def test_metadata_names_a_new_leader_only_once_that_broker_leads(cluster):
    # Otherwise a client sends to the new leader before it leads: the first requests of an
    # idempotent producer's pipeline are refused and the next ones meet OUT_OF_ORDER_
    # SEQUENCE, which librdkafka answers by bumping its epoch and sending again what the
    # old leader had acknowledged as NOT_LEADER_OR_FOLLOWER: duplicates.
    cluster.create_topic("t", 1, 3)
    seen = []
    for broker_id in cluster.broker_ids:
        manager = cluster.broker(broker_id).replicas

        def spy(tp, state, b=broker_id, manager=manager, apply=manager.apply):
            apply(tp, state)
            if state.leader == b:   # what Metadata answers the moment b took the lead
                seen.append((b, cluster.controller.partitions[tp].leader, manager.leads(tp)))
        manager.apply = spy
    old = cluster.leader("t", 0)
    cluster.kill(old)
    new = cluster.leader("t", 0)
    assert (new, old, True) in seen   # the new leader led while Metadata still named the old


def offsets_for_epochs(sock, topic, asks):
    """OffsetForLeaderEpoch v4 as a consumer sends it: asks = [(partition, current leader
    epoch, leader epoch)]; the answers [(error code, leader epoch, end offset)]."""
    answer = call(sock, OffsetForLeaderEpochRequest(replica_id=BrokerId(-1), topics=(
        OffsetForLeaderTopic(topic=topic, partitions=tuple(
            OffsetForLeaderPartition(partition=i32(p), current_leader_epoch=i32(current),
                                     leader_epoch=i32(epoch))
            for p, current, epoch in asks)),)))
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in answer.topics[0].partitions]


def test_offset_for_leader_epoch_answers_where_each_epoch_ends_on_the_leader(cluster):
    # Kafka's Partition.lastOffsetForLeaderEpoch: the latest epoch ends at the log end, an
    # older one where the next began; the current leader epoch is checked first (older:
    # FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH); a follower answers
    # NOT_LEADER_OR_FOLLOWER.
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"a", b"b", b"c"])
    old = cluster.leader("t", 0)
    cluster.stop(old)
    new = wait_until(lambda: cluster.leader("t", 0) not in (-1, old) and cluster.leader("t", 0),
                     "a new leader")
    cluster.produce("t", 0, [b"d", b"e"])
    assert cluster.partition_state("t", 0).leader_epoch == 1
    with connect(cluster, new) as sock:
        assert offsets_for_epochs(sock, "t", [(0, 1, 0), (0, 1, 1), (0, -1, 1), (0, 0, 1),
                                               (0, 2, 1), (0, 1, 7)]) == [
            (ErrorCode.none, 0, 3), (ErrorCode.none, 1, 5), (ErrorCode.none, 1, 5),
            (ErrorCode.fenced_leader_epoch, -1, -1), (ErrorCode.unknown_leader_epoch, -1, -1),
            (ErrorCode.none, -1, -1)]
    follower = next(b for b in cluster.broker_ids if b not in (old, new))
    with connect(cluster, follower) as sock:
        assert offsets_for_epochs(sock, "t", [(0, 1, 1)]) == [
            (ErrorCode.not_leader_or_follower, -1, -1)]


def test_a_kafka_python_consumer_reads_on_after_a_leader_change(cluster):
    # kafka-python validates its position with OffsetForLeaderEpoch once Metadata shows a
    # newer leader epoch (KIP-320), and fetches nothing from the partition until it has.
    kafka = pytest.importorskip("kafka")
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"a", b"b", b"c"])
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                                   auto_offset_reset="earliest", request_timeout_ms=5000,
                                   retry_backoff_ms=50, metadata_max_age_ms=200)
    try:
        consumer.assign([kafka.TopicPartition("t", 0)])
        got = []

        def read(n):
            for records in consumer.poll(timeout_ms=100).values():
                got.extend(r.value for r in records)
            return len(got) >= n
        wait_until(lambda: read(3), "the first three records")
        old = cluster.leader("t", 0)
        cluster.stop(old)
        wait_until(lambda: cluster.leader("t", 0) not in (-1, old), "a new leader")
        cluster.produce("t", 0, [b"d", b"e"])
        wait_until(lambda: read(5), "the records written under the new leader")
        assert got == [b"a", b"b", b"c", b"d", b"e"]
    finally:
        consumer.close()


def test_a_coordinator_asked_for_while_its_topic_is_created_is_not_available_yet(
        cluster, monkeypatch):
    # The controller records the internal topic, then its partitions' states (pushed to
    # the brokers before they are visible): a FindCoordinator arriving in between answers
    # COORDINATOR_NOT_AVAILABLE, which clients retry (it was an UNKNOWN_SERVER_ERROR).
    from streamlog.cluster.controller import Controller
    from streamlog.errors import CoordinatorNotAvailableError
    change = Controller._change
    pushing, release = threading.Event(), threading.Event()

    def slow_change(self, states):
        if any(tp.topic == "__consumer_offsets" for tp in states):
            pushing.set()
            release.wait(30)
        return change(self, states)
    monkeypatch.setattr(Controller, "_change", slow_change)
    first = threading.Thread(target=cluster.coordinator_for, args=("group-c",))
    first.start()
    try:
        assert pushing.wait(30)
        with pytest.raises(CoordinatorNotAvailableError):
            cluster.coordinator_for("group-c")
    finally:
        release.set()
        first.join(30)
    assert cluster.coordinator_for("group-c") in cluster.broker_ids


def offsets_at(sock, topic, timestamps, v4=False):
    """ListOffsets (v7, or v4) of partition 0 for each timestamp: [(error code, offset)]."""
    request, topic_cls, partition_cls = (ListOffsetsRequestV4, ListOffsetsTopicV4,
                                         ListOffsetsPartitionV4) if v4 else \
        (ListOffsetsRequest, ListOffsetsTopic, ListOffsetsPartition)
    answers = []
    for timestamp in timestamps:
        answer = call(sock, request(replica_id=BrokerId(-1), isolation_level=i8(0), topics=(
            topic_cls(name=topic, partitions=(partition_cls(partition_index=i32(0),
                                                            timestamp=i64(timestamp)),)),)))
        part = answer.topics[0].partitions[0]
        answers.append((part.error_code, part.offset))
    return answers


def test_a_new_leader_whose_high_watermark_lags_its_epoch_start_answers_offset_not_available(
        tmp_path):
    # KIP-207 (Partition.fetchOffsetForTimestamp): until the high watermark of a new leader
    # reaches the start offset of its epoch, ListOffsets for the latest offset (or a
    # timestamp found at or past the high watermark) is OFFSET_NOT_AVAILABLE, v5 and later
    # (LEADER_NOT_AVAILABLE before): the old leader's high watermark was ahead, and clients
    # may already have read up to it. The earliest offset is answered.
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=60_000) as cluster:
        cluster.create_topic("t", 1, 3)
        old, new, lagging = cluster.partition_state("t", 0).replicas
        cluster.produce("t", 0, [b"a"] * 5)
        cluster.wait_in_sync("t")
        cluster.isolate(lagging)   # stays in the ISR (60 s): the high watermark waits for it
        cluster.produce("t", 0, [b"b"] * 5, acks=1)
        wait_until(lambda: cluster.partition_state("t", 0).replica_states[new]
                   .log_end_offset == 10, "the new leader to copy offsets 5..9")
        cluster.stop(old)
        assert cluster.leader("t", 0) == new
        assert cluster.partition_state("t", 0).high_watermark == 5   # its epoch starts at 10
        with connect(cluster, new) as sock:
            assert offsets_at(sock, "t", [-1, -2, 0]) == [
                (ErrorCode.offset_not_available, -1), (ErrorCode.none, 0),
                (ErrorCode.none, 0)]
            assert offsets_at(sock, "t", [-1], v4=True) == [
                (ErrorCode.leader_not_available, -1)]
            cluster.heal(lagging)
            wait_until(lambda: cluster.partition_state("t", 0).high_watermark == 10,
                       "the high watermark to reach the epoch start")
            assert offsets_at(sock, "t", [-1]) == [(ErrorCode.none, 10)]


def fetch(topic, partitions, max_wait_s=5):
    return FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(seconds=max_wait_s)), min_bytes=i32(1),
        topics=(FetchTopic(topic=topic, partitions=tuple(
            FetchPartition(partition=i32(p), fetch_offset=i64(0),
                           partition_max_bytes=i32(1 << 20)) for p in partitions)),),
        forgotten_topics_data=())


def test_a_fetch_naming_a_partition_led_elsewhere_answers_at_once(cluster):
    # Kafka's ReplicaManager.fetchMessages: a read error (NOT_LEADER_OR_FOLLOWER) on any
    # partition answers the fetch at once; a consumer learns its leader moved without
    # waiting out max_wait on the partitions this broker still leads.
    cluster.create_topic("t", 3, 3)   # a follower of the partitions it does not lead
    here = cluster.leader("t", 0)
    elsewhere = [p for p in range(3) if cluster.leader("t", p) != here]
    assert elsewhere
    with connect(cluster, here) as sock:
        # max_wait is NEVER_S: an answer at all is one that did not wait it out.
        answer = call_without_long_poll(sock, fetch("t", range(3), max_wait_s=NEVER_S))
    errors = {p.partition_index: p.error_code for p in answer.responses[0].partitions}
    assert errors[0] == ErrorCode.none
    assert all(errors[p] == ErrorCode.not_leader_or_follower for p in elsewhere)


def test_a_broker_without_a_replica_of_a_partition_serves_none_of_its_reads(cluster):
    # Kafka's ReplicaManager.getPartitionOrError: a partition the cluster has but this
    # broker holds no replica of is NOT_LEADER_OR_FOLLOWER (the client looks up its
    # leader), never answered from a copy nothing replicates to: its ListOffsets would say
    # the partition is empty, its DeleteRecords would succeed and delete nothing, its
    # OffsetForLeaderEpoch would say epoch 0 ends at 0.
    cluster.create_topic("t", 1, 1)
    leader = cluster.leader("t", 0)
    stranger = next(b for b in cluster.broker_ids if b != leader)
    with connect(cluster, leader) as sock:
        answer = call(sock, produce("t", 0, acks=1))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    with connect(cluster, stranger) as sock:
        assert list_offsets(sock, "t", 0, -1).error_code == ErrorCode.not_leader_or_follower
        answer = call(sock, DeleteRecordsRequest(timeout=SECONDS, topics=(DeleteRecordsTopic(
            name="t", partitions=(
                DeleteRecordsPartition(partition_index=i32(0), offset=i64(-1)),)),)))
        assert answer.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
        answer = call(sock, fetch("t", [0], max_wait_s=0))
        assert answer.responses[0].partitions[0].error_code == \
            ErrorCode.not_leader_or_follower
        # ReplicaManager.lastOffsetForLeaderEpoch: a partition in the metadata that this
        # broker does not host; one of no topic is UNKNOWN_TOPIC_OR_PARTITION.
        assert offsets_for_epochs(sock, "t", [(0, -1, 0), (1, -1, 0)]) == [
            (ErrorCode.not_leader_or_follower, -1, -1),
            (ErrorCode.unknown_topic_or_partition, -1, -1)]
    leader_log = cluster.broker(leader).partition_log(TopicPartition("t", 0))
    assert (leader_log.log_start_offset, leader_log.high_watermark) == (0, 1)


def test_a_fetch_or_list_offsets_at_another_leader_epoch_is_fenced_or_unknown(cluster):
    # KIP-320 (Kafka's Partition.localLogWithEpochOrThrow): a consumer names the leader
    # epoch it learned from Metadata (Fetch 9+, ListOffsets 4+). An older one is
    # FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH: the consumer refreshes its
    # metadata and validates its position (OffsetForLeaderEpoch) before it reads on.
    cluster.create_topic("t", 1, 3)
    cluster.wait_in_sync("t")
    old_leader = cluster.leader("t", 0)
    cluster.kill(old_leader)
    wait_until(lambda: cluster.leader("t", 0) not in (old_leader, -1), "a new leader")
    leader, epoch = cluster.leader("t", 0), cluster.partition_state("t", 0).leader_epoch
    assert epoch >= 1

    def fetch_error(sock, current):
        request = fetch("t", [0], max_wait_s=0)
        topic = request.topics[0]
        partition = dataclasses.replace(topic.partitions[0], current_leader_epoch=i32(current))
        request = dataclasses.replace(request, topics=(
            dataclasses.replace(topic, partitions=(partition,)),))
        return call(sock, request).responses[0].partitions[0].error_code

    def list_offsets_error(sock, current):
        return list_offsets(sock, "t", 0, -2, current_leader_epoch=current).error_code

    with connect(cluster, leader) as sock:
        for ask in (fetch_error, list_offsets_error):
            assert ask(sock, epoch - 1) == ErrorCode.fenced_leader_epoch
            assert ask(sock, epoch + 1) == ErrorCode.unknown_leader_epoch
            assert ask(sock, epoch) == ErrorCode.none
            assert ask(sock, -1) == ErrorCode.none   # none named: not checked


def test_list_offsets_answers_the_leader_epoch_of_the_record_it_finds(cluster):
    # Kafka's UnifiedLog.fetchOffsetByTimestamp: the earliest offset, one found by timestamp
    # and the max timestamp's each come with the leader epoch of the batch holding them
    # (FileRecords.searchForTimestamp), the latest with the current epoch
    # (Partition.fetchOffsetForTimestamp), nothing found with -1 (ReplicaManager
    # .fetchOffset). A consumer seeking there validates its position against that epoch.
    cluster.create_topic("t", 1, 3)
    cluster.wait_in_sync("t")

    def send(timestamps):
        batch = bytes(record_batch.build_batch([b"v"] * len(timestamps), timestamps=timestamps))
        with connect(cluster, cluster.leader("t", 0)) as sock:
            answer = call(sock, ProduceRequest(
                transactional_id=None, acks=i16(-1), timeout=SECONDS, topic_data=(
                    TopicProduceData(name="t", partition_data=(
                        PartitionProduceData(index=i32(0), records=batch),)),)))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    send([1000, 9000, 1002])   # offsets 0..2, epoch 0; the largest timestamp at offset 1
    old = cluster.leader("t", 0)
    cluster.stop(old)
    wait_until(lambda: cluster.leader("t", 0) not in (-1, old), "a new leader")
    assert cluster.partition_state("t", 0).leader_epoch == 1
    send([2000, 2001])         # offsets 3, 4, epoch 1
    with connect(cluster, cluster.leader("t", 0)) as sock:
        answers = [(part.error_code, part.offset, part.leader_epoch)
                   for part in (list_offsets(sock, "t", 0, timestamp)
                                for timestamp in (-2, -1, -3, 1001, 9001))]
    assert answers == [(ErrorCode.none, 0, 0), (ErrorCode.none, 5, 1), (ErrorCode.none, 1, 0),
                       (ErrorCode.none, 1, 0), (ErrorCode.none, -1, -1)]
