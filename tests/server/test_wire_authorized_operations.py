"""Authorized operations (KIP-430) over the wire: asked for, Metadata (topics, and v8-v10
the cluster), DescribeCluster and DescribeGroups (v3+) answer every operation the resource
type supports, as a Kafka broker without an authorizer does (Kafka's
AuthHelper.authorizedOperations: AclEntry.supportedOperations folded by
Utils.to32BitField); not asked for, INT32_MIN."""
import dataclasses
import importlib
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from streamlog.structs import TopicPartition
from support.wire import call

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_module = pytest.importorskip("confluent_kafka.admin")

# Kafka's AclOperation codes, and AclEntry.supportedOperations of each resource type.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
TOPIC_OPS = {READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS}
GROUP_OPS = {READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS}
CLUSTER_OPS = {CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE,
               ALTER, DESCRIBE}
NOT_ASKED = -2**31


def _bits(operations):
    return sum(1 << code for code in operations)


def _request(api, version):
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


@pytest.mark.parametrize("version", [8, 10, 11, 12])
@pytest.mark.parametrize("asked", [True, False])
def test_metadata_answers_every_supported_operation_when_asked(sock, version, asked):
    # KafkaApis.handleTopicMetadataRequest: each topic asked by name, one that does not
    # exist too, and (v8-v10 only) the cluster.
    module = _request("metadata", version)
    fields = {"include_topic_authorized_operations": asked}
    if version <= 10:
        fields["include_cluster_authorized_operations"] = asked
    by_id = {"topic_id": uuid.UUID(int=0)} if "topic_id" in {
        f.name for f in dataclasses.fields(module.MetadataRequestTopic)} else {}
    answer = call(sock, module.MetadataRequest(
        topics=tuple(module.MetadataRequestTopic(name=n, **by_id) for n in ("t", "missing")),
        allow_auto_topic_creation=False, **fields))
    assert [(t.name, t.error_code, t.topic_authorized_operations) for t in answer.topics] == [
        ("t", ErrorCode.none, _bits(TOPIC_OPS) if asked else NOT_ASKED),
        ("missing", ErrorCode.unknown_topic_or_partition,
         _bits(TOPIC_OPS) if asked else NOT_ASKED)]
    if version <= 10:
        assert answer.cluster_authorized_operations == \
            (_bits(CLUSTER_OPS) if asked else NOT_ASKED)


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("asked", [True, False])
def test_describe_cluster_answers_the_clusters_operations_when_asked(sock, version, asked):
    module = _request("describe_cluster", version)
    fields = {"endpoint_type": i8(1)} if version >= 1 else {}   # a broker's endpoint
    answer = call(sock, module.DescribeClusterRequest(
        include_cluster_authorized_operations=asked, **fields))
    assert answer.cluster_authorized_operations == \
        (_bits(CLUSTER_OPS) if asked else NOT_ASKED) == \
        (8096 if asked else NOT_ASKED)   # bits 5, 7-12


@pytest.mark.parametrize("version", [3, 5])
@pytest.mark.parametrize("asked", [True, False])
def test_describe_groups_answers_each_groups_operations_when_asked(db, sock, version, asked):
    # KafkaApis.handleDescribeGroupsRequest: every group described without an error, an
    # unknown one (Dead before v6) included.
    db.alter_group_offsets("g", {TopicPartition("t", 0): 0})   # an Empty group
    module = _request("describe_groups", version)
    answer = call(sock, module.DescribeGroupsRequest(
        groups=("g", "nobody"), include_authorized_operations=asked))
    expected = _bits(GROUP_OPS) if asked else NOT_ASKED
    assert [(g.group_id, g.error_code, g.authorized_operations) for g in answer.groups] == [
        ("g", ErrorCode.none, expected), ("nobody", ErrorCode.none, expected)]


def test_admin_client_describes_authorized_operations(db, server):
    db.alter_group_offsets("g", {TopicPartition("t", 0): 0})
    admin = admin_module.AdminClient({"bootstrap.servers": server.bootstrap_servers})
    ops = admin_module.AclOperation
    topic = admin.describe_topics(confluent_kafka.TopicCollection(["t"]),
                                  include_authorized_operations=True)["t"].result(10)
    assert set(topic.authorized_operations) == {
        ops.READ, ops.WRITE, ops.CREATE, ops.DESCRIBE, ops.DELETE, ops.ALTER,
        ops.DESCRIBE_CONFIGS, ops.ALTER_CONFIGS}
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == {
        ops.CREATE, ops.CLUSTER_ACTION, ops.DESCRIBE_CONFIGS, ops.ALTER_CONFIGS,
        ops.IDEMPOTENT_WRITE, ops.ALTER, ops.DESCRIBE}
    group = admin.describe_consumer_groups(
        ["g"], include_authorized_operations=True)["g"].result(10)
    assert set(group.authorized_operations) == {
        ops.READ, ops.DESCRIBE, ops.DELETE, ops.DESCRIBE_CONFIGS, ops.ALTER_CONFIGS}
    # Not asked for: None, as against Kafka.
    assert admin.describe_cluster().result(10).authorized_operations is None
