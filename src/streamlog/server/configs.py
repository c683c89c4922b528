"""The database's configs as Kafka's DescribeConfigs shows them (Kafka's ConfigHelper): a
topic's, and the broker's own, each with its value, its source and its synonyms (KIP-226).

A topic config comes from the topic's overrides (DYNAMIC_TOPIC_CONFIG), else from the
database's setting of it when it was opened (STATIC_BROKER_CONFIG: Kafka's broker config of
the same meaning, its ServerTopicConfigSynonyms name, set in server.properties), else from
the default (DEFAULT_CONFIG). The broker's configs are the database's settings and those
topic defaults under their broker names (log.retention.ms for retention.ms), each
STATIC_BROKER_CONFIG when given at the open and DEFAULT_CONFIG otherwise.

A config's synonyms are the places its value may come from, the one in force first: the
topic's override, then each broker name standing for it (log.retention.ms, then
log.retention.minutes and log.retention.hours) given at the open, then each of those names
that has a default. As Kafka's ConfigHelper.configSynonyms does, the chain starts at the
config's own broker name: with log.retention.ms neither given nor defaulted, the
log.retention.hours default that stands in for it is left out, and the chain is empty.

Where Kafka leaves a broker config null and derives it from another (log.retention.ms from
log.retention.hours), the value shown is the one in force.
"""
import functools
from typing import NamedTuple

from ..broker.config import BrokerConfig

# Kafka's ConfigSource (DescribeConfigsResponse.ConfigSource).
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5

# Kafka's ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS: each topic config the database
# keeps, and the broker config that is its default (the first synonym, which Kafka answers).
# Those of LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS (remote.storage.enable, ...) have none:
# no synonyms, and no broker config.
TOPIC_CONFIG_SYNONYMS = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "max.message.bytes": "message.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "cleanup.policy": "log.cleanup.policy",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "preallocate": "log.preallocate",
    "message.format.version": "log.message.format.version",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "message.downconversion.enable": "log.message.downconversion.enable",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
}

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the broker configs that set the same
# thing, the one that wins first (a value in hours stands in for one in milliseconds when
# that is not set). Every other broker config is its own only synonym.
BROKER_CONFIG_SYNONYMS = {
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
    "log.roll.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
}

# Kafka's defaults (its ConfigDef) of the broker names above that the database does not take
# under that name: None where Kafka has none, which leaves the name out of a chain's
# defaults (ConfigDef.convertToStringMapWithPasswordValues drops null values). The hours
# are the database's 7-day segment.ms and retention.ms, as Kafka's are.
_KAFKA_BROKER_DEFAULTS = {"log.roll.ms": None, "log.roll.hours": 168,
                          "log.roll.jitter.ms": None, "log.roll.jitter.hours": 0,
                          "log.flush.interval.ms": None,
                          "log.retention.ms": None, "log.retention.minutes": None,
                          "log.retention.hours": 168}


class ConfigEntry(NamedTuple):
    """One config as DescribeConfigs answers it: values as text (None: null), and its
    synonyms, ((name, value, source), ...), the first one the value in force."""

    name: str
    value: str
    source: int
    synonyms: tuple


def config_text(value):
    """A config value as Kafka's DescribeConfigs shows it (None: null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def topic_configs(info, broker_config):
    """[ConfigEntry] of a topic (a TopicInfo), sorted by name (Kafka's
    ConfigHelper.createTopicConfigEntry)."""
    chains = _BrokerChains(broker_config)
    entries = []
    for name, value in sorted(info.config.to_dict().items()):
        text = config_text(value)
        own = ((name, text, DYNAMIC_TOPIC_CONFIG),) if name in info.overrides else ()
        broker_name = TOPIC_CONFIG_SYNONYMS.get(name)
        chain = chains.synonyms(broker_name) if broker_name else ()
        entries.append(_entry(name, text, own + chain))
    return entries


def broker_configs(broker_config):
    """[ConfigEntry] of the broker itself, sorted by name (Kafka's
    ConfigHelper.createBrokerConfigEntry)."""
    chains = _BrokerChains(broker_config)
    return [_entry(name, config_text(value), chains.synonyms(name))
            for name, value in sorted(_broker_values(broker_config).items())]


def _entry(name, text, synonyms):
    # The source is the first synonym's, DEFAULT_CONFIG with none (Kafka's rule).
    return ConfigEntry(name, text, synonyms[0][2] if synonyms else DEFAULT_CONFIG, synonyms)


def _broker_values(broker_config):
    """{broker name: value} of each config the broker lists: its own settings and the topic
    defaults under their broker names."""
    values = dict(broker_config.to_dict())
    for name, value in broker_config.topic_defaults.to_dict().items():
        if name in TOPIC_CONFIG_SYNONYMS:
            values[TOPIC_CONFIG_SYNONYMS[name]] = value
    return values


@functools.cache
def _default_texts():
    """{broker name: default value as text}: the same for every database, computed once."""
    defaults = _broker_values(BrokerConfig())
    defaults.update(_KAFKA_BROKER_DEFAULTS)
    return {name: config_text(value) for name, value in defaults.items() if value is not None}


class _BrokerChains:
    """Which broker names were given at the open, and which have defaults, as text."""

    def __init__(self, broker_config):
        given = {TOPIC_CONFIG_SYNONYMS.get(name, name) for name in broker_config.given}
        self.static = {name: config_text(value)
                       for name, value in _broker_values(broker_config).items() if name in given}
        self.defaults = _default_texts()

    def synonyms(self, broker_name):
        """((name, value, source), ...) of a broker config: Kafka's
        ConfigHelper.configSynonyms with no dynamic broker configs (the database takes its
        settings at the open)."""
        chain = BROKER_CONFIG_SYNONYMS.get(broker_name, (broker_name,))
        found = [(name, self.static[name], STATIC_BROKER_CONFIG)
                 for name in chain if name in self.static]
        found += [(name, self.defaults[name], DEFAULT_CONFIG)
                  for name in chain if name in self.defaults]
        # Kafka keeps the chain from the config's own name on.
        while found and found[0][0] != broker_name:
            found.pop(0)
        return tuple(found)
