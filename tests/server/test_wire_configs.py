"""DescribeConfigs as Kafka's ConfigHelper answers it: the broker's own configs (a BROKER
resource), each config's source (a topic default the database was opened with is
STATIC_BROKER_CONFIG), and no configuration keys meaning every config."""
import pytest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

import streamlog

from support.wire import call

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_module = pytest.importorskip("confluent_kafka.admin")

TOPIC, BROKER = 2, 4   # Kafka's ConfigResource.Type
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5   # ConfigSource


@pytest.fixture
def db(tmp_path):
    # As the pytest plugin's database: topics created on first use; and a topic default.
    database = streamlog.open(str(tmp_path / "db"), config={"auto.create.topics.enable": True,
                                                            "retention.ms": 60_000})
    database.create_topic("t", partitions=1, config={"segment.bytes": 1 << 20})
    yield database
    database.close()


def describe(sock, resource_type, name, keys=None):
    (result,) = call(sock, DescribeConfigsRequest(
        resources=(DescribeConfigsResource(resource_type=i8(resource_type), resource_name=name,
                                           configuration_keys=keys),),
        include_synonyms=False, include_documentation=False)).results
    return result


def test_a_broker_resource_describes_the_databases_settings_as_kafkas_broker_configs(sock):
    # Kafka's ConfigHelper.describeConfigs, ConfigResource.Type.BROKER: this broker's id gives
    # its configs, topic defaults under their ServerTopicConfigSynonyms names; an empty name
    # the cluster-wide dynamic defaults (none here); another id, or one that is not an
    # integer, INVALID_REQUEST.
    result = describe(sock, BROKER, "0")
    assert result.error_code == ErrorCode.none
    configs = {c.name: (c.value, c.config_source, c.read_only) for c in result.configs}
    assert configs["auto.create.topics.enable"] == ("true", STATIC_BROKER_CONFIG, True)
    assert configs["log.retention.ms"] == ("60000", STATIC_BROKER_CONFIG, True)
    assert configs["num.partitions"] == ("1", DEFAULT_CONFIG, True)
    assert configs["message.max.bytes"] == (str((1 << 20) + 12), DEFAULT_CONFIG, True)
    assert "retention.ms" not in configs
    wanted = describe(sock, BROKER, "0", keys=("num.partitions", "log.cleanup.policy"))
    assert [(c.name, c.value) for c in wanted.configs] == [("log.cleanup.policy", "delete"),
                                                           ("num.partitions", "1")]
    defaults = describe(sock, BROKER, "")
    assert (defaults.error_code, defaults.configs) == (ErrorCode.none, ())
    for name, message in (("7", "Unexpected broker id, expected 0 or empty string, but "
                                "received 7"),
                          ("zero", "Broker id must be an integer, but it is: zero")):
        refused = describe(sock, BROKER, name)
        assert (refused.error_code, refused.error_message, refused.configs) == (
            ErrorCode.invalid_request, message, ())


def test_a_topic_default_the_database_was_opened_with_is_a_static_broker_config(sock):
    # ConfigHelper.createTopicConfigEntry: an override is DYNAMIC_TOPIC_CONFIG, a default
    # the broker was configured with (its synonym, log.retention.ms) STATIC_BROKER_CONFIG,
    # the rest DEFAULT_CONFIG.
    configs = {c.name: (c.value, c.config_source) for c in describe(sock, TOPIC, "t").configs}
    assert configs["segment.bytes"] == (str(1 << 20), DYNAMIC_TOPIC_CONFIG)
    assert configs["retention.ms"] == ("60000", STATIC_BROKER_CONFIG)
    assert configs["cleanup.policy"] == ("delete", DEFAULT_CONFIG)


def test_empty_configuration_keys_ask_for_every_config(sock):
    # ConfigHelper.createResponseConfig: null or empty configuration keys, every config.
    every = {c.name for c in describe(sock, TOPIC, "t", keys=None).configs}
    assert "retention.ms" in every
    assert {c.name for c in describe(sock, TOPIC, "t", keys=()).configs} == every
    assert [c.name for c in describe(sock, TOPIC, "t", keys=("retention.ms",)).configs] == \
        ["retention.ms"]


def test_confluent_kafka_describes_the_brokers_configs(server):
    admin = admin_module.AdminClient({"bootstrap.servers": server.bootstrap_servers})
    resource = admin_module.ConfigResource(admin_module.ResourceType.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(10)
    created_on_first_use = configs["auto.create.topics.enable"]
    assert created_on_first_use.value == "true"
    assert created_on_first_use.source == admin_module.ConfigSource.STATIC_BROKER_CONFIG.value
    assert created_on_first_use.is_read_only
    assert configs["log.retention.ms"].value == "60000"
