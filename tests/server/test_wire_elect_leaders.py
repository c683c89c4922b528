"""ElectLeaders (key 43) on a database on its own: the only replica leads every partition,
so nothing is elected, with the answers of Kafka's controller
(ReplicationControlManager.electLeaders / electLeader): ELECTION_NOT_NEEDED for a
PREFERRED election and for an UNCLEAN one of a partition with a leader,
UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist, every topic listed and the
partitions needing no election left out when all are asked for (a null list).
The cluster's elections: tests/cluster/test_cluster_elect_leaders.py."""
import datetime
import importlib

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from support.wire import call

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_module = pytest.importorskip("confluent_kafka.admin")
kafka = pytest.importorskip("kafka")

PREFERRED, UNCLEAN = 0, 1
NOT_NEEDED = (ErrorCode.election_not_needed, "Leader election not needed for topic partition.")


def elect(sock, version, topic_partitions, election=PREFERRED):
    module = importlib.import_module(f"kio.schema.elect_leaders.v{version}.request")
    fields = {"election_type": i8(election)} if version >= 1 else {}
    asked = None if topic_partitions is None else tuple(
        module.TopicPartitions(topic=t, partitions=tuple(i32(p) for p in ps))
        for t, ps in topic_partitions)
    return call(sock, module.ElectLeadersRequest(
        topic_partitions=asked, timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        **fields))


def results(answer):
    return [(r.topic, [(p.partition_id, p.error_code, p.error_message)
                       for p in r.partition_result]) for r in answer.replica_election_results]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_answers_each_partition_as_kafkas_controller(sock, version):
    elections = [PREFERRED] if version == 0 else [PREFERRED, UNCLEAN]
    for election in elections:
        answer = elect(sock, version, [("t", [0, 1, 7]), ("missing", [0])], election)
        assert getattr(answer, "error_code", ErrorCode.none) == ErrorCode.none
        assert results(answer) == [
            ("t", [(0, *NOT_NEEDED), (1, *NOT_NEEDED),
                   (7, ErrorCode.unknown_topic_or_partition, "No such partition as t-7")]),
            ("missing", [(0, ErrorCode.unknown_topic_or_partition,
                          "No such topic as missing")])]
        # Every partition (null): each topic listed, what needed no election left out.
        assert results(elect(sock, version, None, election)) == [("t", [])]


@pytest.mark.parametrize("version", [1, 2])
def test_an_unknown_election_type_is_an_invalid_request(sock, version):
    # ReplicationControlManager.electionType throws InvalidRequestException, answered by
    # ElectLeadersRequest.getErrorResponse: top-level and for every partition asked.
    answer = elect(sock, version, [("t", [0])], election=5)
    assert answer.error_code == ErrorCode.invalid_request
    assert results(answer) == [("t", [(0, ErrorCode.invalid_request,
                                       "Unknown election type 5")])]
    # Nothing asked (an empty list, not null): nothing done, nothing answered
    # (QuorumController.electLeaders).
    answer = elect(sock, version, [], election=5)
    assert (answer.error_code, answer.replica_election_results) == (ErrorCode.none, ())


def test_admin_clients_elect_leaders(server):
    admin = admin_module.AdminClient({"bootstrap.servers": server.bootstrap_servers})
    asked = [confluent_kafka.TopicPartition("t", 0), confluent_kafka.TopicPartition("t", 9)]
    answer = admin.elect_leaders(confluent_kafka.ElectionType.PREFERRED, asked).result(10)
    by_partition = {tp.partition: error for tp, error in answer.items()}
    assert by_partition[0].code() == confluent_kafka.KafkaError.ELECTION_NOT_NEEDED
    assert by_partition[9].code() == \
        confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
    assert admin.elect_leaders(confluent_kafka.ElectionType.UNCLEAN, None).result(10) == {}
    kp = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        # kafka-python takes ELECTION_NOT_NEEDED as no error.
        response = kp.elect_leaders(PREFERRED, {"t": [0, 1]})
        assert [(p.partition_id, p.error_code)
                for r in response.replica_election_results for p in r.partition_result] == \
            [(0, NOT_NEEDED[0]), (1, NOT_NEEDED[0])]
        with pytest.raises(kafka.errors.UnknownTopicOrPartitionError):
            kp.elect_leaders(PREFERRED, {"t": [9]})
    finally:
        kp.close()
