"""ListPartitionReassignments (key 46): nothing here moves replicas, so no reassignment is
ever in progress, and Kafka's controller (ReplicationControlManager.listPartitionReassignments)
answers every request with no topic and error NONE: a null list asks for every reassigning
topic (none); a topic asked that does not exist, or whose partitions asked are not being
reassigned, is left out. A cluster's controller answers the same:
tests/cluster/test_cluster_wire.py."""
import datetime

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsTopics)
from kio.static.primitive import i32, i32Timedelta

from support.wire import call

kafka = pytest.importorskip("kafka")


def list_reassignments(sock, topics):
    asked = None if topics is None else tuple(
        ListPartitionReassignmentsTopics(name=name, partition_indexes=tuple(map(i32, parts)))
        for name, parts in topics)
    answer = call(sock, ListPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)), topics=asked))
    return answer.error_code, answer.error_message, answer.topics


@pytest.mark.parametrize("topics", [
    None,                                   # every reassigning topic
    [("t", [0, 1])],                        # partitions that are not being reassigned
    [("t", [7]), ("missing", [0])],         # a partition and a topic that do not exist
    [("t", [])],                            # a topic with no partition asked
    [],
], ids=["null", "existing", "unknown", "no-partitions", "empty"])
def test_no_reassignment_is_ever_listed(sock, topics):
    assert list_reassignments(sock, topics) == (ErrorCode.none, None, ())


def test_kafka_python_lists_no_reassignment(server):
    admin = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        assert admin.list_partition_reassignments() == {}
        assert admin.list_partition_reassignments({"t": [0, 1], "missing": [0]}) == {}
        assert admin.list_partition_reassignments(
            [kafka.TopicPartition("t", 1)]) == {}
    finally:
        admin.close()
