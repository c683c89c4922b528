"""A config's synonyms (KIP-226) as Kafka's ConfigHelper lists them, and each config's type
and documentation: server/configs.py and server/config_catalog.py on their own, from a
database config and a topic, with no server."""
from streamlog.broker.config import BrokerConfig
from streamlog.broker.metadata import TopicInfo
from streamlog.server.config_catalog import BOOLEAN, CATALOG, DOUBLE, INT, LIST, LONG, STRING
from streamlog.server.configs import broker_configs, topic_configs

TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5   # Kafka's ConfigSource


def topic(broker_config, overrides):
    config = broker_config.topic_defaults.with_overrides(overrides)
    return TopicInfo("t", "id", 1, dict(overrides), config, 0)


def by_name(entries):
    return {e.name: e for e in entries}


def test_a_topic_configs_chain_is_its_override_then_the_broker_names_given_then_defaults():
    # ConfigHelper.createTopicConfigEntry: the topic's own value (TOPIC_CONFIG) ahead of
    # configSynonyms of its ServerTopicConfigSynonyms name, which lists every name of
    # DynamicBrokerConfig.brokerConfigSynonyms (log.retention.ms, .minutes, .hours) given
    # in server.properties, then each with a default (log.retention.ms and .minutes have
    # none in Kafka's ConfigDef).
    broker = BrokerConfig.from_dict({"retention.ms": 60_000, "compression.type": "gzip"})
    configs = by_name(topic_configs(topic(broker, {"retention.ms": 5000,
                                                   "compression.type": "zstd"}), broker))
    assert configs["retention.ms"].synonyms == (
        ("retention.ms", "5000", TOPIC_CONFIG),
        ("log.retention.ms", "60000", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG))
    assert configs["retention.ms"].source == TOPIC_CONFIG
    # A topic config whose broker synonym has its own name (ServerTopicConfigSynonyms.sameName).
    assert configs["compression.type"].synonyms == (
        ("compression.type", "zstd", TOPIC_CONFIG),
        ("compression.type", "gzip", STATIC_BROKER_CONFIG),
        ("compression.type", "producer", DEFAULT_CONFIG))
    assert configs["segment.bytes"].synonyms == (
        ("log.segment.bytes", str(1 << 30), DEFAULT_CONFIG),)
    assert configs["segment.bytes"].source == DEFAULT_CONFIG
    assert configs["cleanup.policy"].synonyms == (
        ("log.cleanup.policy", "delete", DEFAULT_CONFIG),)
    assert configs["max.message.bytes"].synonyms == (
        ("message.max.bytes", str((1 << 20) + 12), DEFAULT_CONFIG),)


def test_a_config_no_broker_config_defaults_has_only_its_override_as_synonym():
    # LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS have no ServerTopicConfigSynonyms name:
    # ConfigHelper.createTopicConfigEntry lists the topic's own value alone, or nothing.
    broker = BrokerConfig.from_dict({"local.retention.ms": 1000})
    configs = by_name(topic_configs(topic(broker, {"remote.log.copy.disable": True}), broker))
    assert (configs["remote.log.copy.disable"].synonyms,
            configs["remote.log.copy.disable"].source) == (
        (("remote.log.copy.disable", "true", TOPIC_CONFIG),), TOPIC_CONFIG)
    assert (configs["remote.storage.enable"].synonyms,
            configs["remote.storage.enable"].source) == ((), DEFAULT_CONFIG)
    assert configs["local.retention.ms"].synonyms == (
        ("log.local.retention.ms", "1000", STATIC_BROKER_CONFIG),
        ("log.local.retention.ms", "-2", DEFAULT_CONFIG))
    assert "remote.log.copy.disable" not in by_name(broker_configs(broker))


def test_a_chain_starts_at_the_configs_own_broker_name():
    # ConfigHelper.configSynonyms drops what comes ahead of the config's own name: with
    # log.retention.ms neither set nor defaulted, the log.retention.hours default standing
    # in for it goes too, and the chain is empty (the source still DEFAULT_CONFIG).
    broker = BrokerConfig.from_dict({"log.flush.scheduler.interval.ms": 2000})
    configs = by_name(topic_configs(topic(broker, {}), broker))
    for name in ("retention.ms", "segment.ms", "segment.jitter.ms", "flush.ms"):
        assert (configs[name].synonyms, configs[name].source) == ((), DEFAULT_CONFIG), name
    # flush.ms given at the open: log.flush.scheduler.interval.ms follows, given then default.
    broker = BrokerConfig.from_dict({"flush.ms": 500, "log.flush.scheduler.interval.ms": 2000})
    assert by_name(topic_configs(topic(broker, {}), broker))["flush.ms"].synonyms == (
        ("log.flush.interval.ms", "500", STATIC_BROKER_CONFIG),
        ("log.flush.scheduler.interval.ms", "2000", STATIC_BROKER_CONFIG),
        ("log.flush.scheduler.interval.ms", "1000", DEFAULT_CONFIG))


def test_a_broker_configs_chain_is_its_static_value_then_its_default():
    # ConfigHelper.createBrokerConfigEntry: configSynonyms of the config's own name.
    broker = BrokerConfig.from_dict({"retention.ms": 60_000, "auto.create.topics.enable": True,
                                     "max.open.files": 100})
    configs = by_name(broker_configs(broker))
    assert configs["log.retention.ms"].synonyms == (
        ("log.retention.ms", "60000", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG))
    assert configs["auto.create.topics.enable"].synonyms == (
        ("auto.create.topics.enable", "true", STATIC_BROKER_CONFIG),
        ("auto.create.topics.enable", "false", DEFAULT_CONFIG))
    assert configs["num.partitions"].synonyms == (("num.partitions", "1", DEFAULT_CONFIG),)
    assert configs["max.open.files"].synonyms == (("max.open.files", "100",
                                                   STATIC_BROKER_CONFIG),)
    # A default the database leaves unset (max.open.files) is no synonym, as Kafka's null
    # defaults are not; nor is log.retention.hours ahead of an unset log.retention.ms.
    unset = by_name(broker_configs(BrokerConfig.from_dict({})))
    for name in ("max.open.files", "log.retention.ms"):
        assert (unset[name].synonyms, unset[name].source) == ((), DEFAULT_CONFIG), name


def test_every_described_config_has_a_type_and_documentation():
    broker = BrokerConfig.from_dict({})
    names = {e.name for e in topic_configs(topic(broker, {}), broker)}
    names |= {e.name for e in broker_configs(broker)}
    assert names <= CATALOG.keys(), names - CATALOG.keys()
    assert all(CATALOG[name].documentation for name in names)


def test_config_types_are_kafkas():
    # The ConfigDef types Kafka defines these names with (storage LogConfig,
    # ServerConfigs, CleanerConfig, GroupCoordinatorConfig, TransactionLogConfig).
    expected = {"segment.bytes": INT, "retention.ms": LONG, "cleanup.policy": LIST,
                "min.cleanable.dirty.ratio": DOUBLE, "compression.type": STRING,
                "preallocate": BOOLEAN, "message.max.bytes": INT, "log.retention.ms": LONG,
                "log.cleaner.min.cleanable.ratio": DOUBLE, "log.cleaner.dedupe.buffer.size": LONG,
                "offsets.retention.check.interval.ms": LONG, "producer.id.expiration.ms": INT,
                "auto.create.topics.enable": BOOLEAN, "max.open.files": 0,
                "leader.replication.throttled.replicas": LIST, "local.retention.ms": LONG,
                "remote.storage.enable": BOOLEAN, "log.local.retention.bytes": LONG,
                "log.message.downconversion.enable": BOOLEAN}
    assert {name: CATALOG[name].config_type for name in expected} == expected
