"""ElectLeaders (key 43) sent to a broker of a cluster: the controller elects, with Kafka's
rules (ReplicationControlManager.electLeader, PartitionChangeBuilder): PREFERRED hands
leadership back to the first replica when it is alive and in the ISR
(PREFERRED_LEADER_NOT_AVAILABLE otherwise, ELECTION_NOT_NEEDED when it leads already);
UNCLEAN gives a partition without a leader its first live replica, in sync or not, whatever
unclean.leader.election.enable says (ELECTION_NOT_NEEDED when it has a leader,
ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is alive)."""
import datetime
import socket

import pytest
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from streamlog.cluster.cluster import Cluster
from streamlog.broker.replica_manager import NO_LEADER

from support.wire import call

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_module = pytest.importorskip("confluent_kafka.admin")

PREFERRED, UNCLEAN = 0, 1


@pytest.fixture
def cluster(tmp_path):
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=300) as c:
        yield c


def test_a_preferred_election_through_an_admin_client_moves_leadership_back(cluster):
    cluster.create_topic("t", 1, 3)
    preferred = cluster.partition_state("t", 0).replicas[0]
    tp = confluent_kafka.TopicPartition("t", 0)
    cluster.kill(preferred)
    admin = admin_module.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    error = admin.elect_leaders(confluent_kafka.ElectionType.PREFERRED, [tp]).result(30)[tp]
    assert error.code() == confluent_kafka.KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
    cluster.restart(preferred)
    cluster.wait_in_sync("t")
    before = cluster.partition_state("t", 0)
    assert before.leader != preferred
    assert admin.elect_leaders(confluent_kafka.ElectionType.PREFERRED, [tp]).result(30) == \
        {tp: None}
    after = cluster.partition_state("t", 0)
    assert (after.leader, after.leader_epoch) == (preferred, before.leader_epoch + 1)
    error = admin.elect_leaders(confluent_kafka.ElectionType.PREFERRED, [tp]).result(30)[tp]
    assert error.code() == confluent_kafka.KafkaError.ELECTION_NOT_NEEDED
    # Every partition: those needing no election are left out.
    assert admin.elect_leaders(confluent_kafka.ElectionType.PREFERRED, None).result(30) == {}


def test_an_unclean_election_gives_a_leaderless_partition_an_out_of_sync_leader(cluster):
    cluster.create_topic("u", 1, 2)   # unclean.leader.election.enable: false, Kafka's default
    first, second = cluster.partition_state("u", 0).replicas
    other = next(b for b in cluster.broker_ids if b not in (first, second))
    cluster.kill(second)   # out of the ISR
    cluster.kill(first)    # the ISR's last member: no leader
    with socket.create_connection((cluster.host, cluster._slots[other].port)) as sock:
        assert unclean(sock, "u") == (ErrorCode.eligible_leaders_not_available,
                                      "Eligible topic partition leaders are not available.")
        cluster.restart(second)   # alive, out of the ISR: not elected by itself
        assert cluster.partition_state("u", 0).leader == NO_LEADER
        assert unclean(sock, "u") == (ErrorCode.none, None)
        state = cluster.partition_state("u", 0)
        assert (state.leader, state.isr) == (second, (second,))
        assert unclean(sock, "u") == (ErrorCode.election_not_needed,
                                      "Leader election not needed for topic partition.")


def unclean(sock, topic):
    answer = call(sock, ElectLeadersRequest(
        election_type=i8(UNCLEAN), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_partitions=(TopicPartitions(topic=topic, partitions=(i32(0),)),)))
    assert answer.error_code == ErrorCode.none
    (result,) = answer.replica_election_results
    (partition,) = result.partition_result
    return partition.error_code, partition.error_message
