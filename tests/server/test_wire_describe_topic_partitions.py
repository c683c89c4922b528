"""DescribeTopicPartitions (key 75) on a database on its own, paged by a cursor, with the
answers of Kafka's DescribeTopicPartitionsRequestHandler and
KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse (rules quoted per test). The
cluster's leaders and offline replicas: tests/cluster/test_cluster_wire.py."""
import uuid

import pytest
from kio.schema.describe_topic_partitions.v0.request import (
    Cursor, DescribeTopicPartitionsRequest, TopicRequest)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

import streamlog
from streamlog.server import describe_topic_partitions
from support.wire import call

kafka = pytest.importorskip("kafka")

ALL_TOPIC_OPERATIONS = 3576   # every topic operation: no authorizer refuses one


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    database.create_topic("a", partitions=3)
    database.create_topic("b", partitions=2)
    database.create_topic("t", partitions=2)
    yield database
    database.close()


def describe(sock, topics, limit=2000, cursor=None):
    return call(sock, DescribeTopicPartitionsRequest(
        topics=tuple(TopicRequest(name=n) for n in topics), response_partition_limit=i32(limit),
        cursor=None if cursor is None else Cursor(topic_name=cursor[0],
                                                  partition_index=i32(cursor[1]))))


def page(answer):
    """([(topic, error, [partition indexes])], next cursor or None)."""
    cursor = answer.next_cursor
    return ([(t.name, t.error_code, [p.partition_index for p in t.partitions])
             for t in answer.topics],
            None if cursor is None else (cursor.topic_name, cursor.partition_index))


def test_each_topic_asked_once_in_name_order_with_its_partitions(db, sock):
    answer = describe(sock, ["t", "missing", "a", "t", "bad name!"])
    # A HashSet of the names, sorted; an unknown one UNKNOWN_TOPIC_OR_PARTITION, a name no
    # topic can have INVALID_TOPIC_EXCEPTION (Topic.validate), both with the zero id.
    assert page(answer) == ([("a", ErrorCode.none, [0, 1, 2]),
                             ("bad name!", ErrorCode.invalid_topic_exception, []),
                             ("missing", ErrorCode.unknown_topic_or_partition, []),
                             ("t", ErrorCode.none, [0, 1])], None)
    a, bad, missing, t = answer.topics
    assert a.topic_id == uuid.UUID(hex=db._broker.topic("a").topic_id) and not a.is_internal
    assert bad.topic_id is None and missing.topic_id is None   # kio reads the zero id so
    assert {x.topic_authorized_operations for x in answer.topics} == {ALL_TOPIC_OPERATIONS}
    partition = t.partitions[1]
    assert (partition.error_code, partition.leader_id, partition.replica_nodes,
            partition.isr_nodes, partition.offline_replicas, partition.eligible_leader_replicas,
            partition.last_known_elr) == (ErrorCode.none, 0, (0,), (0,), (), (), ())


def test_pages_follow_the_cursor_to_the_last_partition(db, sock):
    # No topics asked: every topic. The limit counts partitions; the cursor names the first
    # one left out, and points at partition 0 of the next topic when a page ended with one.
    pages, cursor = [], None
    while True:
        topics, cursor = page(describe(sock, [], limit=2, cursor=cursor))
        pages.append((topics, cursor))
        if cursor is None:
            break
    ok = ErrorCode.none
    assert pages == [([("a", ok, [0, 1])], ("a", 2)),
                     ([("a", ok, [2]), ("b", ok, [0])], ("b", 1)),
                     ([("b", ok, [1]), ("t", ok, [0])], ("t", 1)),
                     ([("t", ok, [1])], None)]
    # A page that ends with its topic's last partition: the cursor starts the next topic.
    assert page(describe(sock, ["a", "b"], limit=3)) == ([("a", ok, [0, 1, 2])], ("b", 0))
    # A limit under 1 counts as 1 (Math.max(..., 1)).
    assert page(describe(sock, ["b"], limit=0)) == ([("b", ok, [0])], ("b", 1))
    # Topics before the cursor's are left out, unknown ones after it answered.
    assert page(describe(sock, ["a", "b", "zz"], cursor=("b", 1))) == \
        ([("b", ok, [1]), ("zz", ErrorCode.unknown_topic_or_partition, [])], None)


def test_the_broker_caps_the_limit(db, sock, monkeypatch):
    # max.request.partition.size.limit (2000) caps what a request asks for.
    monkeypatch.setattr(describe_topic_partitions, "MAX_PARTITIONS_PER_RESPONSE", 4)
    assert page(describe(sock, [], limit=2000)) == \
        ([("a", ErrorCode.none, [0, 1, 2]), ("b", ErrorCode.none, [0])], ("b", 1))


def test_a_cursor_the_request_cannot_follow_is_an_invalid_request(db, sock):
    # The cursor's topic must be among those asked, its partition not negative: else
    # InvalidRequestException, answered for every topic asked (getErrorResponse).
    for topics, cursor in ((["a", "t"], ("b", 0)), (["a", "b"], ("b", -1))):
        answer = describe(sock, topics, cursor=cursor)
        assert page(answer) == ([(n, ErrorCode.invalid_request, []) for n in topics], None)
        assert all(t.topic_id is None for t in answer.topics)   # the zero id
    # Every topic asked (an empty list): any cursor topic is fine, a negative partition not.
    assert page(describe(sock, [], cursor=("nope", 0)))[0] == [("t", ErrorCode.none, [0, 1])]
    assert page(describe(sock, [], cursor=("a", -1))) == ([], None)


def test_kafka_python_pages_through_describe_topic_partitions(db, server):
    admin = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        first = admin.describe_topic_partitions(["a", "b"], response_partition_limit=2)
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in first["topics"]] == [("a", [0, 1])]
        rest = admin.describe_topic_partitions(["a", "b"], cursor=first["next_cursor"])
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in rest["topics"]] == [("a", [2]), ("b", [0, 1])]
        assert rest["next_cursor"] is None
        assert rest["topics"][1]["partitions"][0]["leader_id"] == 0
    finally:
        admin.close()
