"""What each config the server describes is: its type as Kafka's DescribeConfigs (v3+)
answers it, and a one-line description of what it does here (its documentation).

The types are Kafka's: each name has the ConfigDef type Kafka defines it with (LogConfig for
a topic config, KafkaConfig for a broker config), mapped as ConfigHelper.configResponseType
does. A name Kafka does not define (max.open.files) is UNKNOWN, as Kafka answers one.
"""
from typing import NamedTuple

# Kafka's DescribeConfigsResponse.ConfigType.
UNKNOWN, BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(10)


class ConfigInfo(NamedTuple):
    config_type: int
    documentation: str


_CATALOG = {
    # --- topic configs (Kafka's LogConfig) ----------------------------------------------
    "segment.bytes": (INT, "Size in bytes at which a partition's active segment is closed "
                           "and a new one started."),
    "segment.ms": (LONG, "Age in milliseconds after which the active segment is rolled even "
                         "if it is not full."),
    "segment.jitter.ms": (LONG, "Largest random amount taken off segment.ms, so that "
                                "segments of many partitions do not roll together."),
    "segment.index.bytes": (INT, "Size in bytes preallocated for each segment's offset and "
                                 "time indexes."),
    "index.interval.bytes": (INT, "Bytes appended between two offset index entries."),
    "retention.ms": (LONG, "How long a closed segment is kept before deletion; -1 keeps "
                           "segments forever."),
    "retention.bytes": (LONG, "Largest size a partition may reach before its oldest segments "
                              "are deleted; -1 sets no limit."),
    "cleanup.policy": (LIST, "What happens to old segments: delete them, compact them to the "
                             "latest value per key, or both."),
    "max.message.bytes": (INT, "Largest record batch, in bytes, the topic accepts."),
    "message.format.version": (STRING, "Deprecated record format version; ignored, as Kafka "
                                       "ignores it from protocol 3.0 on: batches are "
                                       "always v2."),
    "message.timestamp.type": (STRING, "Whether a record keeps the producer's timestamp "
                                       "(CreateTime) or gets the append time (LogAppendTime)."),
    "message.timestamp.before.max.ms": (LONG, "How far in the past of the broker's clock a "
                                              "CreateTime timestamp may be."),
    "message.timestamp.after.max.ms": (LONG, "How far in the future of the broker's clock a "
                                             "CreateTime timestamp may be."),
    "message.timestamp.difference.max.ms": (LONG, "Deprecated bound, either way, on a "
                                                  "CreateTime timestamp's distance from the "
                                                  "broker's clock; the two above replace it."),
    "flush.messages": (LONG, "Records appended to a partition between two forced flushes "
                             "to disk."),
    "flush.ms": (LONG, "Milliseconds between two forced flushes of a partition to disk."),
    "min.insync.replicas": (INT, "Replicas that must hold a write before an acks=all "
                                 "produce succeeds."),
    "unclean.leader.election.enable": (BOOLEAN, "Whether a replica that is out of sync may "
                                                "become leader, at the cost of lost records."),
    "delete.retention.ms": (LONG, "How long a compacted topic keeps tombstones (and "
                                  "transaction markers) once cleaned."),
    "min.cleanable.dirty.ratio": (DOUBLE, "Share of a log, not yet compacted, at which the "
                                          "cleaner takes it up."),
    "min.compaction.lag.ms": (LONG, "Least age a record must have before compaction may "
                                    "remove it."),
    "max.compaction.lag.ms": (LONG, "Greatest age a record may reach before its segment "
                                    "must be compacted."),
    "file.delete.delay.ms": (LONG, "Wait between a segment's removal from the log and the "
                                   "deletion of its files."),
    "preallocate": (BOOLEAN, "Whether a new segment's file is allocated at its full size "
                             "at once."),
    "compression.type": (STRING, "Codec batches are stored with; producer keeps the codec "
                                 "each batch was sent with."),
    "compression.gzip.level": (INT, "Level, 1 to 9 or -1 for zlib's default, of the gzip "
                                    "the database recompresses batches with."),
    "compression.lz4.level": (INT, "Level, 1 to 17, of the lz4 the database recompresses "
                                   "batches with; 9 is the fast mode."),
    "compression.zstd.level": (INT, "Level, -131072 to 22, of the zstd the database "
                                    "recompresses batches with."),
    "leader.replication.throttled.replicas": (LIST, "Replicas (partition:broker, or *) whose "
                                                    "leader-side replication traffic would be "
                                                    "throttled; kept, no effect here."),
    "follower.replication.throttled.replicas": (LIST, "Replicas (partition:broker, or *) "
                                                      "whose follower-side replication "
                                                      "traffic would be throttled; kept, no "
                                                      "effect here."),
    "message.downconversion.enable": (BOOLEAN, "Whether fetches by clients older than the "
                                               "stored record format would be converted; "
                                               "kept, no effect here."),
    "remote.storage.enable": (BOOLEAN, "Whether the topic's closed segments go to a remote "
                                       "tier; only false, as the database has none."),
    "local.retention.ms": (LONG, "How long segments would stay local once copied to the "
                                 "remote tier; -2 follows retention.ms. Kept, no effect here."),
    "local.retention.bytes": (LONG, "Local size a partition would keep once its segments are "
                                    "copied to the remote tier; -2 follows retention.bytes. "
                                    "Kept, no effect here."),
    "remote.log.copy.disable": (BOOLEAN, "Whether copying segments to the remote tier would "
                                         "stop; kept, no effect here."),
    "remote.log.delete.on.disable": (BOOLEAN, "Whether turning remote storage off would "
                                              "delete the remote segments; kept, no effect "
                                              "here."),
    # --- the same, as broker defaults (Kafka's KafkaConfig names) ------------------------
    "log.segment.bytes": (INT, "Default segment.bytes of a topic."),
    "log.roll.ms": (LONG, "Default segment.ms of a topic."),
    "log.roll.jitter.ms": (LONG, "Default segment.jitter.ms of a topic."),
    "log.index.size.max.bytes": (INT, "Default segment.index.bytes of a topic."),
    "log.index.interval.bytes": (INT, "Default index.interval.bytes of a topic."),
    "log.retention.ms": (LONG, "Default retention.ms of a topic."),
    "log.retention.bytes": (LONG, "Default retention.bytes of a topic."),
    "log.cleanup.policy": (LIST, "Default cleanup.policy of a topic."),
    "message.max.bytes": (INT, "Default max.message.bytes of a topic."),
    "log.message.format.version": (STRING, "Default message.format.version of a topic."),
    "log.message.timestamp.type": (STRING, "Default message.timestamp.type of a topic."),
    "log.message.timestamp.before.max.ms": (LONG, "Default message.timestamp.before.max.ms "
                                                  "of a topic."),
    "log.message.timestamp.after.max.ms": (LONG, "Default message.timestamp.after.max.ms "
                                                 "of a topic."),
    "log.message.timestamp.difference.max.ms": (LONG, "Default "
                                                      "message.timestamp.difference.max.ms "
                                                      "of a topic."),
    "log.flush.interval.messages": (LONG, "Default flush.messages of a topic."),
    "log.flush.interval.ms": (LONG, "Default flush.ms of a topic."),
    "log.cleaner.delete.retention.ms": (LONG, "Default delete.retention.ms of a topic."),
    "log.cleaner.min.cleanable.ratio": (DOUBLE, "Default min.cleanable.dirty.ratio of a "
                                                "topic."),
    "log.cleaner.min.compaction.lag.ms": (LONG, "Default min.compaction.lag.ms of a topic."),
    "log.cleaner.max.compaction.lag.ms": (LONG, "Default max.compaction.lag.ms of a topic."),
    "log.segment.delete.delay.ms": (LONG, "Default file.delete.delay.ms of a topic."),
    "log.preallocate": (BOOLEAN, "Default preallocate of a topic."),
    "log.message.downconversion.enable": (BOOLEAN, "Default message.downconversion.enable "
                                                   "of a topic."),
    "log.local.retention.ms": (LONG, "Default local.retention.ms of a topic."),
    "log.local.retention.bytes": (LONG, "Default local.retention.bytes of a topic."),
    # --- the database's own settings (Kafka's broker configs) --------------------------
    "auto.create.topics.enable": (BOOLEAN, "Whether an unknown topic is created when a "
                                           "client first asks for it."),
    "num.partitions": (INT, "Partitions of a topic created without a count."),
    "log.retention.check.interval.ms": (LONG, "How often logs are checked for segments "
                                              "past their retention."),
    "log.flush.offset.checkpoint.interval.ms": (INT, "How often each partition's recovery "
                                                     "point is written to its checkpoint."),
    "log.flush.scheduler.interval.ms": (LONG, "How often logs are checked for a flush that "
                                              "flush.ms calls for."),
    "group.min.session.timeout.ms": (INT, "Shortest session timeout a group member may "
                                          "ask for."),
    "group.max.session.timeout.ms": (INT, "Longest session timeout a group member may "
                                          "ask for."),
    "group.max.size": (INT, "Most members a consumer group may have."),
    "group.initial.rebalance.delay.ms": (INT, "How long a new group waits for more members "
                                              "before its first rebalance."),
    "offsets.topic.num.partitions": (INT, "Partitions of the internal topic of committed "
                                          "offsets."),
    "offsets.retention.minutes": (INT, "How long an empty group's committed offsets are "
                                       "kept."),
    "offsets.retention.check.interval.ms": (LONG, "How often expired committed offsets are "
                                                  "looked for."),
    "max.open.files": (UNKNOWN, "Segment files the database keeps open at once (unset: half "
                                "the process's limit); -1 sets no limit."),
    "producer.id.expiration.ms": (INT, "How long an idle producer id's state is kept after "
                                       "its last write."),
    "producer.id.expiration.check.interval.ms": (INT, "How often expired producer ids are "
                                                      "removed."),
    "transaction.state.log.num.partitions": (INT, "Partitions of the internal topic of "
                                                  "transaction states."),
    "transaction.state.log.min.isr": (INT, "The min.insync.replicas of the internal topic of "
                                           "transaction states: the replicas a state record "
                                           "needs."),
    "transaction.max.timeout.ms": (INT, "Longest transaction timeout a producer may ask "
                                        "for."),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        INT, "How often transactions past their timeout are looked for and aborted."),
    "transactional.id.expiration.ms": (INT, "How long a transactional id with no transaction "
                                            "open is kept after its last state change."),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        INT, "How often expired transactional ids are looked for and removed."),
    "log.cleaner.enable": (BOOLEAN, "Whether the cleaner that compacts logs runs."),
    "log.cleaner.dedupe.buffer.size": (LONG, "Memory in bytes for the cleaner's map of "
                                             "latest offsets per key."),
    "log.cleaner.backoff.ms": (LONG, "How long the cleaner sleeps when no log needs "
                                     "cleaning."),
    "fetch.max.bytes": (INT, "Most bytes a fetch is answered with, whatever it asks for."),
}
# Every name topic_configs and broker_configs (configs.py) list has its entry.
CATALOG = {name: ConfigInfo(*info) for name, info in _CATALOG.items()}
