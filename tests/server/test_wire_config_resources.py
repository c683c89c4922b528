"""ListConfigResources (key 74; version 0 was ListClientMetricsResources) answered as Kafka
4.1's KafkaApis.handleListConfigResources with ListConfigResourcesRequest
.supportedResourceTypes: version 0 lists client metrics resources only (none here); version
1 the types asked (none: all five), in the handler's order GROUP, CLIENT_METRICS,
BROKER_LOGGER, BROKER, TOPIC; a type the version does not know UNSUPPORTED_VERSION alone.
The brokers of a cluster: tests/cluster/test_cluster_wire.py."""
import pytest
from kio.schema.errors import ErrorCode
from kio.schema.list_config_resources.v0.request import \
    ListConfigResourcesRequest as ListConfigResourcesRequestV0
from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest
from kio.static.primitive import i8

import streamlog
from support.wire import call

kafka = pytest.importorskip("kafka")

UNKNOWN, TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 0, 2, 4, 8, 16, 32


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    database.create_topic("t", partitions=2)
    database.create_topic("b", partitions=1)
    database.create_topic("a", partitions=1, config={"retention.ms": "1000"})
    yield database
    database.close()


def list_resources(sock, types):
    answer = call(sock, ListConfigResourcesRequest(resource_types=tuple(map(i8, types))))
    return answer.error_code, [(r.resource_type, r.resource_name)
                               for r in answer.config_resources]


def test_every_type_in_kafkas_order_when_none_is_asked(sock):
    # Groups have no dynamic configs here and no client metrics subscription is kept:
    # neither lists anything. The one broker is node 0, as a logger and as a broker.
    assert list_resources(sock, []) == (ErrorCode.none, [
        (BROKER_LOGGER, "0"), (BROKER, "0"), (TOPIC, "a"), (TOPIC, "b"), (TOPIC, "t")])


def test_the_types_asked_each_once_in_kafkas_order(db, sock):
    assert list_resources(sock, [TOPIC, BROKER, TOPIC]) == (ErrorCode.none, [
        (BROKER, "0"), (TOPIC, "a"), (TOPIC, "b"), (TOPIC, "t")])
    assert list_resources(sock, [GROUP, CLIENT_METRICS]) == (ErrorCode.none, [])
    # A group with committed offsets is still no config resource: it has no configs.
    db.consumer(group_id="g").commit({streamlog.TopicPartition("t", 0): 1})
    assert list_resources(sock, [GROUP]) == (ErrorCode.none, [])
    # Internal topics are topics too (KRaftMetadataCache.getAllTopics).
    assert ("__consumer_offsets" in
            [name for kind, name in list_resources(sock, [TOPIC])[1]])


@pytest.mark.parametrize("types", [[UNKNOWN], [TOPIC, 64], [1]])
def test_a_type_the_version_does_not_know_is_unsupported_version(sock, types):
    assert list_resources(sock, types) == (ErrorCode.unsupported_version, [])


def test_version_0_lists_client_metrics_resources_only(sock):
    answer = call(sock, ListConfigResourcesRequestV0())
    assert (answer.error_code, answer.config_resources) == (ErrorCode.none, ())


def test_kafka_python_lists_config_resources(server):
    admin = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        assert admin.list_config_resources() == {
            "broker_logger": ["0"], "broker": ["0"], "topic": ["a", "b", "t"]}
        assert admin.list_config_resources(["TOPIC", "GROUP"]) == {"topic": ["a", "b", "t"]}
        with pytest.raises(kafka.errors.UnsupportedVersionError):
            admin.list_config_resources(["UNKNOWN"])
    finally:
        admin.close()
