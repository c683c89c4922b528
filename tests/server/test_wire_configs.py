"""DescribeConfigs as Kafka's ConfigHelper answers it: the broker's own configs (a BROKER
resource), each config's source (a topic default the database was opened with is
STATIC_BROKER_CONFIG), no configuration keys meaning every config, and each config's
synonyms (v1+), type and documentation (v3+) when asked for."""
import datetime

import pytest
from kio.schema.create_topics.v7.request import (CreatableTopic, CreatableTopicConfig,
                                                 CreateTopicsRequest)
from kio.schema.describe_configs.v2 import request as v2
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i32Timedelta

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


def describe(sock, resource_type, name, keys=None, synonyms=False, documentation=False):
    (result,) = call(sock, DescribeConfigsRequest(
        resources=(DescribeConfigsResource(resource_type=i8(resource_type), resource_name=name,
                                           configuration_keys=keys),),
        include_synonyms=synonyms, include_documentation=documentation)).results
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


def chain(entry):
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def test_synonyms_come_when_asked_for(sock):
    # ConfigHelper.createTopicConfigEntry: every entry carries its synonyms only when the
    # request's include_synonyms is set (v1+); a topic's override, then its broker name
    # given at the open, then that name's default.
    alone = {c.name: c for c in describe(sock, TOPIC, "t", keys=("segment.bytes",)).configs}
    assert alone["segment.bytes"].synonyms == ()
    asked = {c.name: c for c in describe(sock, TOPIC, "t", synonyms=True).configs}
    assert chain(asked["segment.bytes"]) == [
        ("segment.bytes", str(1 << 20), DYNAMIC_TOPIC_CONFIG),
        ("log.segment.bytes", str(1 << 30), DEFAULT_CONFIG)]
    assert chain(asked["retention.ms"]) == [("log.retention.ms", "60000", STATIC_BROKER_CONFIG),
                                            ("log.retention.hours", "168", DEFAULT_CONFIG)]
    broker = {c.name: c for c in describe(sock, BROKER, "0", synonyms=True).configs}
    assert chain(broker["num.partitions"]) == [("num.partitions", "1", DEFAULT_CONFIG)]
    # Version 2, which has no config types: the synonyms all the same.
    (old,) = call(sock, v2.DescribeConfigsRequest(resources=(v2.DescribeConfigsResource(
        resource_type=i8(TOPIC), resource_name="t", configuration_keys=("retention.ms",)),),
        include_synonyms=True)).results
    assert [chain(c) for c in old.configs] == [chain(asked["retention.ms"])]


def test_every_entry_has_its_kafka_type_and_documentation_when_asked_for(sock):
    # ConfigHelper.configResponseType (v3+): the ConfigDef type of the name, LONG for
    # retention.ms (LogConfig), INT for num.partitions (ServerLogConfigs), LIST for
    # cleanup.policy; the documentation only with include_documentation.
    LONG, INT, LIST = 5, 3, 7
    plain = {c.name: c for c in describe(sock, TOPIC, "t").configs}
    assert (plain["retention.ms"].config_type, plain["retention.ms"].documentation) == (LONG,
                                                                                         None)
    assert plain["cleanup.policy"].config_type == LIST
    documented = describe(sock, TOPIC, "t", documentation=True).configs
    assert all(c.documentation for c in documented)
    broker = {c.name: c for c in describe(sock, BROKER, "0", documentation=True).configs}
    assert broker["num.partitions"].config_type == INT
    assert broker["num.partitions"].documentation


def test_kafka_python_describes_synonyms_and_types(server):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType
    admin = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        answer = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "t")],
                                        include_synonyms=True, config_filter="all")
    finally:
        admin.close()
    configs = answer["topic"]["t"]
    assert configs["segment.bytes"]["synonyms"] == [
        {"name": "segment.bytes", "value": str(1 << 20), "source": "DYNAMIC_TOPIC_CONFIG"},
        {"name": "log.segment.bytes", "value": str(1 << 30), "source": "DEFAULT_CONFIG"}]
    assert configs["segment.bytes"]["config_type"] == "INT"
    assert configs["retention.ms"]["config_type"] == "LONG"


def test_confluent_kafka_describes_synonyms(server):
    # librdkafka asks for synonyms on every DescribeConfigs (v1+).
    admin = admin_module.AdminClient({"bootstrap.servers": server.bootstrap_servers})
    resource = admin_module.ConfigResource(admin_module.ResourceType.TOPIC, "t")
    retention = admin.describe_configs([resource])[resource].result(10)["retention.ms"]
    assert [(s.name, s.value, s.source) for s in retention.synonyms.values()] == [
        ("log.retention.ms", "60000", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG)]


def test_a_created_topics_answer_carries_its_configs_as_describe_configs_gives_them(sock):
    # KIP-525 (CreateTopics v5+): Kafka's ReplicationControlManager.createTopic answers the
    # new topic's effective configs, by name, each with its source; a topic not created
    # none.
    created, refused = call(sock, CreateTopicsRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)), validate_only=False,
        topics=tuple(CreatableTopic(name=name, num_partitions=i32(2), replication_factor=i16(-1),
                                    assignments=(), configs=(CreatableTopicConfig(
                                        name="segment.bytes", value="1048576"),))
                     for name in ("new", "t")))).topics
    answered = [(c.name, c.value, c.config_source, c.read_only) for c in created.configs]
    assert answered == [(c.name, c.value, c.config_source, False)
                        for c in describe(sock, TOPIC, "new").configs]
    assert ("segment.bytes", "1048576", DYNAMIC_TOPIC_CONFIG, False) in answered
    assert ("retention.ms", "60000", STATIC_BROKER_CONFIG, False) in answered
    assert (refused.error_code, refused.configs) == (ErrorCode.topic_already_exists, ())


def test_every_topic_config_kafkas_log_config_defines_is_described(sock):
    # Kafka's LogConfig.configNames (storage/.../log/LogConfig.java): every topic config,
    # those with no effect in one process too (replication throttling, down-conversion,
    # tiered storage), with Kafka's default, type and no synonyms for those no broker
    # config defaults (LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS).
    BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7
    configs = {c.name: c for c in describe(sock, TOPIC, "t", synonyms=True,
                                           documentation=True).configs}
    expected = {"leader.replication.throttled.replicas": ("", LIST, []),
                "follower.replication.throttled.replicas": ("", LIST, []),
                "remote.storage.enable": ("false", BOOLEAN, []),
                "remote.log.copy.disable": ("false", BOOLEAN, []),
                "remote.log.delete.on.disable": ("false", BOOLEAN, []),
                "message.downconversion.enable": ("true", BOOLEAN, [
                    ("log.message.downconversion.enable", "true", DEFAULT_CONFIG)]),
                "local.retention.ms": ("-2", LONG, [
                    ("log.local.retention.ms", "-2", DEFAULT_CONFIG)]),
                "local.retention.bytes": ("-2", LONG, [
                    ("log.local.retention.bytes", "-2", DEFAULT_CONFIG)]),
                # ServerTopicConfigSynonyms.sameName: the broker config of the same name.
                "compression.gzip.level": ("-1", INT, [
                    ("compression.gzip.level", "-1", DEFAULT_CONFIG)]),
                "compression.lz4.level": ("9", INT, [
                    ("compression.lz4.level", "9", DEFAULT_CONFIG)]),
                "compression.zstd.level": ("3", INT, [
                    ("compression.zstd.level", "3", DEFAULT_CONFIG)]),
                "message.format.version": ("3.0-IV1", STRING, [
                    ("log.message.format.version", "3.0-IV1", DEFAULT_CONFIG)])}
    assert {name: (configs[name].value, configs[name].config_type, chain(configs[name]))
            for name in expected} == expected
    assert all(configs[name].config_source == DEFAULT_CONFIG and configs[name].documentation
               for name in expected)
    broker = {c.name for c in describe(sock, BROKER, "0").configs}
    assert {"log.message.format.version", "log.message.downconversion.enable",
            "log.local.retention.ms",
            "log.local.retention.bytes"} <= broker
    assert not broker & {name for name in expected if not name.startswith("compression.")}
    assert {"compression.gzip.level", "compression.lz4.level",
            "compression.zstd.level"} <= broker


def test_remote_storage_is_invalid_config_with_kafkas_message(sock):
    # LogConfig.validateRemoteStorageOnlyIfSystemEnabled, remote.log.storage.system.enable
    # false: CreateTopics and IncrementalAlterConfigs both answer INVALID_CONFIG.
    from kio.schema.incremental_alter_configs.v1.request import (AlterableConfig,
                                                                 AlterConfigsResource,
                                                                 IncrementalAlterConfigsRequest)
    message = ("Tiered Storage functionality is disabled in the broker. Topic cannot be "
               "configured with remote log storage.")
    (created,) = call(sock, CreateTopicsRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)), validate_only=False,
        topics=(CreatableTopic(name="tiered", num_partitions=i32(1), replication_factor=i16(-1),
                               assignments=(), configs=(CreatableTopicConfig(
                                   name="remote.storage.enable", value="true"),)),))).topics
    assert (created.error_code, created.error_message) == (ErrorCode.invalid_config, message)
    (altered,) = call(sock, IncrementalAlterConfigsRequest(validate_only=False, resources=(
        AlterConfigsResource(resource_type=i8(TOPIC), resource_name="t", configs=(
            AlterableConfig(name="remote.storage.enable", config_operation=i8(0),
                            value="true"),)),))).responses
    assert (altered.error_code, altered.error_message) == (ErrorCode.invalid_config, message)
