"""The database's configs as Kafka's DescribeConfigs shows them (Kafka's ConfigHelper): a
topic's, and the broker's own.

A topic config comes from the topic's overrides (DYNAMIC_TOPIC_CONFIG), else from the
database's setting of it when it was opened (STATIC_BROKER_CONFIG: Kafka's broker config of
the same meaning, its ServerTopicConfigSynonyms name, set in server.properties), else from
the default (DEFAULT_CONFIG). The broker's configs are the database's settings and those
topic defaults under their broker names (log.retention.ms for retention.ms), each
STATIC_BROKER_CONFIG when given at the open and DEFAULT_CONFIG otherwise.

Where Kafka leaves a broker config null and derives it from another (log.retention.ms from
log.retention.hours), the value shown is the one in force.
"""
# Kafka's ConfigSource (DescribeConfigsResponse.ConfigSource).
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5

# Kafka's ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS: each topic config the database
# keeps, and the broker config that is its default (the first synonym, which Kafka answers).
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
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
}


def topic_configs(info, broker_config):
    """[(name, value, source)] of a topic (a TopicInfo), sorted by name."""
    def source(name):
        if name in info.overrides:
            return DYNAMIC_TOPIC_CONFIG
        return STATIC_BROKER_CONFIG if name in broker_config.given else DEFAULT_CONFIG
    return [(name, value, source(name)) for name, value in sorted(info.config.to_dict().items())]


def broker_configs(broker_config):
    """[(name, value, source)] of the broker itself, sorted by name."""
    values = dict(broker_config.to_dict())
    given = set(broker_config.given & values.keys())
    for name, value in broker_config.topic_defaults.to_dict().items():
        values[TOPIC_CONFIG_SYNONYMS[name]] = value
        if name in broker_config.given:
            given.add(TOPIC_CONFIG_SYNONYMS[name])
    return [(name, value, STATIC_BROKER_CONFIG if name in given else DEFAULT_CONFIG)
            for name, value in sorted(values.items())]
