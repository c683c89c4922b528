"""Manual replica assignments of CreateTopics and CreatePartitions on a database on its own,
broker 0, checked as Kafka's controller checks them (ReplicationControlManager.createTopic,
createPartitions, validateManualPartitionAssignment): confluent-kafka's
`NewTopic(replica_assignment=...)` and `NewPartitions(replica_assignment=...)`, and the
refusals sent raw."""
import datetime

import pytest
from kio.schema.create_partitions.v3.request import (CreatePartitionsAssignment,
                                                     CreatePartitionsRequest,
                                                     CreatePartitionsTopic)
from kio.schema.create_topics.v7.request import (CreatableReplicaAssignment, CreatableTopic,
                                                 CreateTopicsRequest)
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i32, i32Timedelta

from support.wire import call

admin_module = pytest.importorskip("confluent_kafka.admin")

SECONDS = i32Timedelta.parse(datetime.timedelta(seconds=5))
INVALID = ErrorCode.invalid_replica_assignment


def create(sock, assignment, partitions=-1, replication_factor=-1, validate_only=False):
    """CreateTopics of topic "a" with assignment [(partition, [broker id])]."""
    (topic,) = call(sock, CreateTopicsRequest(timeout=SECONDS, validate_only=validate_only,
                                              topics=(CreatableTopic(
        name="a", num_partitions=i32(partitions), replication_factor=i16(replication_factor),
        configs=(), assignments=tuple(
            CreatableReplicaAssignment(partition_index=i32(p),
                                       broker_ids=tuple(BrokerId(b) for b in brokers))
            for p, brokers in assignment)),))).topics
    return topic.error_code, topic.error_message


def grow(sock, count, assignment):
    (topic,) = call(sock, CreatePartitionsRequest(
        timeout=SECONDS, validate_only=False, topics=(CreatePartitionsTopic(
            name="t", count=i32(count), assignments=None if assignment is None else tuple(
                CreatePartitionsAssignment(broker_ids=tuple(BrokerId(b) for b in brokers))
                for brokers in assignment)),))).results
    return topic.error_code, topic.error_message


def test_confluent_kafka_places_a_topics_and_new_partitions_replicas_by_hand(db, server):
    admin = admin_module.AdminClient({"bootstrap.servers": server.bootstrap_servers})
    for future in admin.create_topics([admin_module.NewTopic(
            "placed", num_partitions=2, replica_assignment=[[0], [0]])]).values():
        future.result(10)
    for future in admin.create_partitions([admin_module.NewPartitions(
            "t", 3, replica_assignment=[[0]])]).values():
        future.result(10)
    assert (len(db.describe_topic("placed").partitions),
            len(db.describe_topic("t").partitions)) == (2, 3)
    refused = admin.create_topics([admin_module.NewTopic(
        "elsewhere", num_partitions=1, replica_assignment=[[1]])])["elsewhere"]
    with pytest.raises(admin_module.KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
        refused.result(10)


def test_a_topics_assignment_is_refused_as_kafkas_controller_refuses_it(db, sock):
    refusals = [
        (dict(assignment=[(0, [0])], replication_factor=1),
         (ErrorCode.invalid_request, "A manual partition assignment was specified, but "
                                     "replication factor was not set to -1.")),
        (dict(assignment=[(0, [0])], partitions=1),
         (ErrorCode.invalid_request, "A manual partition assignment was specified, but "
                                     "numPartitions was not set to -1.")),
        (dict(assignment=[(0, [0]), (0, [0])]),
         (INVALID, "Found multiple manual partition assignments for partition 0")),
        (dict(assignment=[(0, [])]),
         (INVALID, "The manual partition assignment includes an empty replica list.")),
        (dict(assignment=[(0, [0, 0])]),
         (INVALID, "The manual partition assignment includes the broker 0 more than once.")),
        (dict(assignment=[(0, [3])]),
         (INVALID, "The manual partition assignment includes broker 3, but no such broker "
                   "is registered.")),
        (dict(assignment=[(1, [0])]),
         (INVALID, "partitions should be a consecutive 0-based integer sequence")),
    ]
    for kwargs, answer in refusals:
        assert create(sock, **kwargs) == answer, kwargs
    assert create(sock, [(1, [0]), (0, [0])], validate_only=True) == (ErrorCode.none, None)
    assert "a" not in db.topics()
    assert create(sock, [(1, [0]), (0, [0])]) == (ErrorCode.none, None)
    assert len(db.describe_topic("a").partitions) == 2


def test_new_partitions_take_one_list_each_of_the_topics_replication_factor(db, sock):
    # ReplicationControlManager.createPartitions: as many lists as partitions added, each
    # of the topic's replication factor (1 here); a null list places them as the others.
    assert grow(sock, 4, [[0]]) == (INVALID, "Attempted to add 2 additional partition(s), "
                                             "but only 1 assignment(s) were specified.")
    assert grow(sock, 3, [[0, 1]]) == (INVALID, "The manual partition assignment includes "
                                                "broker 1, but no such broker is registered.")
    assert grow(sock, 3, [[0]]) == (ErrorCode.none, None)
    assert grow(sock, 4, None) == (ErrorCode.none, None)
    assert len(db.describe_topic("t").partitions) == 4
