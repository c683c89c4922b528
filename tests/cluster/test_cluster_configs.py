"""A topic's config in a cluster is one record of the controller's metadata log, which
every broker applies and the controller's elections read, as Kafka's
ConfigurationControlManager makes it (metadata/.../controller/ConfigurationControlManager
.java: an AlterConfigs on any broker becomes a ConfigRecord that every broker's
MetadataCache and the controller's PartitionChangeBuilder then see). The cluster-wide
topic defaults (the brokers' config) are the controller's defaults too
(ReplicationControlManager.electLeader reads unclean.leader.election.enable with the
cluster's default under the topic's override)."""
import socket

import pytest

from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (AlterableConfig,
                                                             AlterConfigsResource,
                                                             IncrementalAlterConfigsRequest)
from kio.static.primitive import i8
from streamlog.cluster import Cluster
from streamlog.errors import InvalidConfigurationError, UnknownTopicOrPartitionError

from support.cluster_steps import lose_the_isr_but_one
from support.wire import call

TOPIC, SET, DELETE = 2, 0, 1


@pytest.fixture
def cluster(tmp_path):
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=300) as c:
        yield c


def alter_on(cluster, broker_id, topic, *changes):
    """IncrementalAlterConfigs of (name, operation, value) sent to one broker."""
    slot = cluster._slots[broker_id]
    with socket.create_connection((cluster.host, slot.port)) as sock:
        (answer,) = call(sock, IncrementalAlterConfigsRequest(validate_only=False, resources=(
            AlterConfigsResource(resource_type=i8(TOPIC), resource_name=topic, configs=tuple(
                AlterableConfig(name=name, config_operation=i8(op), value=value)
                for name, op, value in changes)),))).responses
    return answer


def only_an_unclean_election_can_lead(cluster, topic):
    """The follower misses acknowledged records, comes back reachable, and the leader
    dies: only an unclean election can give the partition a leader now."""
    leader, follower = lose_the_isr_but_one(cluster, topic)
    cluster.heal(follower)
    cluster.kill(leader)
    return leader, follower


def test_a_config_altered_on_one_broker_is_every_brokers_and_reaches_one_that_was_down(
        cluster):
    cluster.create_topic("t", 1, 3)
    cluster.stop(2)
    answer = alter_on(cluster, 0, "t", ("retention.ms", SET, "1234"))
    assert answer.error_code == ErrorCode.none
    for broker_id in (0, 1):
        assert cluster.broker(broker_id).topic("t").config.retention_ms == 1234
    assert cluster.controller.topics["t"]["config"]["retention.ms"] == 1234
    cluster.restart(2)
    assert cluster.broker(2).topic("t").config.retention_ms == 1234
    # A DELETE taken on another broker is everyone's as well.
    assert alter_on(cluster, 1, "t", ("retention.ms", DELETE, None)).error_code == \
        ErrorCode.none
    for broker_id in cluster.broker_ids:
        assert "retention.ms" not in cluster.broker(broker_id).topic("t").overrides


def test_the_config_survives_a_restart_of_the_whole_cluster(tmp_path):
    with Cluster(2, path=str(tmp_path / "c")) as cluster:
        cluster.create_topic("t", 1, 2)
        cluster.alter_topic_config("t", {"max.message.bytes": "5000"})
    with Cluster(2, path=str(tmp_path / "c")) as cluster:
        assert cluster.controller.topics["t"]["config"]["max.message.bytes"] == 5000
        for broker_id in cluster.broker_ids:
            assert cluster.broker(broker_id).topic("t").config.max_message_bytes == 5000


def test_a_refused_config_changes_no_broker_and_no_record(cluster):
    cluster.create_topic("t", 1, 3)
    answer = alter_on(cluster, 0, "t", ("retention.ms", SET, "-7"))
    assert answer.error_code == ErrorCode.invalid_config
    with pytest.raises(InvalidConfigurationError):
        cluster.alter_topic_config("t", {"segment.bytes": "1"})
    with pytest.raises(UnknownTopicOrPartitionError):
        cluster.alter_topic_config("nope", {"retention.ms": "5"})
    assert cluster.controller.topics["t"]["config"] == {}
    for broker_id in cluster.broker_ids:
        assert cluster.broker(broker_id).topic("t").overrides == {}


def test_unclean_election_turned_off_after_creation_keeps_the_partition_leaderless(cluster):
    # The topic was made allowing unclean elections; AlterConfigs on a broker that leads
    # nothing of it takes that back. The controller must elect by the altered config.
    cluster.create_topic("t", 1, 2, config={"unclean.leader.election.enable": "true"})
    bystander = next(b for b in cluster.broker_ids
                     if b not in cluster.partition_state("t", 0).replicas)
    assert alter_on(cluster, bystander, "t", ("unclean.leader.election.enable", SET,
                                              "false")).error_code == ErrorCode.none
    leader, _ = only_an_unclean_election_can_lead(cluster, "t")
    state = cluster.partition_state("t", 0)
    assert state.leader == -1 and state.isr == (leader,)   # waits for the in-sync replica


def test_unclean_election_turned_on_after_creation_elects_the_follower(cluster):
    cluster.create_topic("t", 1, 2)
    cluster.alter_topic_config("t", {"unclean.leader.election.enable": "true"})
    _, follower = only_an_unclean_election_can_lead(cluster, "t")
    state = cluster.partition_state("t", 0)
    assert state.leader == follower and state.isr == (follower,)


def test_the_cluster_wide_unclean_default_is_the_controllers(tmp_path):
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=300,
                 config={"unclean.leader.election.enable": "true"}) as cluster:
        cluster.create_topic("t", 1, 2)   # no override: the cluster's default holds
        _, follower = only_an_unclean_election_can_lead(cluster, "t")
        state = cluster.partition_state("t", 0)
        assert state.leader == follower and state.isr == (follower,)
