"""Database-wide configuration: the broker settings that make sense in one process.

Keys are Kafka's broker config names (dotted or with underscores). Any topic
config key (segment.bytes, retention.ms, ...) may also be given: it becomes
the default of every topic created in this database, as Kafka's log.*
broker settings are. A writable open records those topic defaults in the
metadata log (broker/metadata.py); a read-only open applies the recorded ones
(with_recorded_topic_defaults), since they are what the writer applies.
"""
from dataclasses import dataclass, field, replace

from ..errors import InvalidConfigurationError
from ..parsing import parse_bool, parse_int
from ..storage.log_config import CONFIG_NAMES, NO_SERVER_DEFAULTS, LogConfig
from ..storage.open_files import max_open_files_problem

_BROKER_KEYS = {
    "auto.create.topics.enable": ("auto_create_topics_enable", bool),
    "num.partitions": ("num_partitions", int),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", int),
    "log.flush.offset.checkpoint.interval.ms": ("log_flush_offset_checkpoint_interval_ms", int),
    "log.flush.scheduler.interval.ms": ("log_flush_scheduler_interval_ms", int),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", int),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", int),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", int),
    "group.max.size": ("group_max_size", int),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", int),
    "offsets.retention.minutes": ("offsets_retention_minutes", int),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", int),
    "max.open.files": ("max_open_files", int),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", int),
    "producer.id.expiration.check.interval.ms": ("producer_id_expiration_check_interval_ms", int),
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", int),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", int),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", int),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", int),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "transaction_remove_expired_transaction_cleanup_interval_ms", int),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_transaction_cleanup_interval_ms", int),
    "log.cleaner.enable": ("log_cleaner_enable", bool),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", int),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
}


@dataclass(frozen=True)
class BrokerConfig:
    # Kafka's broker default is true; here a typo in a topic name should be an error, so
    # auto-creation is opt-in (docs/API.md).
    auto_create_topics_enable: bool = False
    num_partitions: int = 1
    log_retention_check_interval_ms: int = 300_000
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_flush_scheduler_interval_ms: int = 1_000
    # Consumer groups: Kafka's broker defaults, except the initial rebalance delay
    # (Kafka: 3 s): in one process every member is a thread away, so a new group
    # forms at once (docs/GROUPS.md).
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 0
    group_max_size: int = 2_147_483_647
    offsets_topic_num_partitions: int = 50
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    # Descriptors the segments of the database may hold (storage/open_files.py): None is
    # half the soft RLIMIT_NOFILE (32..16,000) at open, -1 unbounded (as RocksDB's).
    max_open_files: int = None
    # Idempotence: how long a producer id's state outlives its last write, and how often
    # that is checked (Kafka's defaults).
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    # Transactions (Kafka's defaults): __transaction_state's partitions and the replicas
    # a record of it needs (its min.insync.replicas), the longest transaction.timeout.ms
    # a producer may ask for, how often timed-out ones are aborted.
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_min_isr: int = 2
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # How long a transactional id with no transaction open outlives its last state change,
    # and how often that is checked (Kafka's defaults: 7 days, 1 hour).
    transactional_id_expiration_ms: int = 604_800_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # Compaction (Kafka's defaults): the cleaner thread, its offset map's memory, and how
    # long it sleeps when no log needs cleaning.
    log_cleaner_enable: bool = True
    log_cleaner_dedupe_buffer_size: int = 128 << 20
    log_cleaner_backoff_ms: int = 15_000
    # The most bytes a Kafka Fetch is answered with, whatever its max_bytes asks
    # (Kafka's fetch.max.bytes broker setting and default, at least 1024).
    fetch_max_bytes: int = 55 << 20
    topic_defaults: LogConfig = LogConfig()
    # The settings given when the database was opened (dotted names, topic configs under
    # their topic names): Kafka's DescribeConfigs answers them STATIC_BROKER_CONFIG, the
    # rest DEFAULT_CONFIG. Not compared: the same values given or left out are one config.
    given: frozenset = field(default=frozenset(), compare=False)

    def to_dict(self):
        """The database's own settings under their dotted names (the topic defaults are
        topic_defaults.to_dict())."""
        return {name: getattr(self, attr) for name, (attr, _) in _BROKER_KEYS.items()}

    def given_topic_defaults(self):
        """{Kafka name: value} of the topic configs given (what the metadata log records)."""
        values = self.topic_defaults.to_dict()
        return {name: values[name] for name in sorted(self.given) if name in CONFIG_NAMES}

    def with_recorded_topic_defaults(self, overrides):
        """This config with the topic defaults a writer recorded in place of those given here:
        they count as given (DescribeConfigs answers STATIC_BROKER_CONFIG, as the writer)."""
        broker_keys = frozenset(name for name in self.given if name not in CONFIG_NAMES)
        return replace(self, topic_defaults=LogConfig.from_dict(overrides, check=False),
                       given=broker_keys | frozenset(overrides))

    @classmethod
    def from_dict(cls, settings=None):
        changes, topic, given = {}, {}, set()
        for key, value in dict(settings or {}).items():
            dotted = key.replace("_", ".") if isinstance(key, str) else key
            given.add(dotted)
            if dotted in _BROKER_KEYS:
                attr, kind = _BROKER_KEYS[dotted]
                changes[attr] = _parse(dotted, value, kind)
            elif dotted in CONFIG_NAMES and dotted not in NO_SERVER_DEFAULTS:
                topic[dotted] = value
            else:
                # A topic config no broker config defaults (Kafka's LogConfig
                # .CONFIGS_WITH_NO_SERVER_DEFAULTS) is unknown here too.
                known = sorted(_BROKER_KEYS) + [
                    f"<any topic config but {', '.join(sorted(NO_SERVER_DEFAULTS))}>"]
                raise InvalidConfigurationError(f"unknown database config {key!r}; known: "
                                                f"{', '.join(known)}")
        config = replace(cls(), **changes)
        if config.num_partitions < 1:
            raise InvalidConfigurationError("num.partitions must be >= 1")
        for attr in ("log_retention_check_interval_ms", "log_flush_offset_checkpoint_interval_ms",
                     "log_flush_scheduler_interval_ms", "group_min_session_timeout_ms",
                     "group_max_size",
                     "offsets_topic_num_partitions", "offsets_retention_minutes",
                     "offsets_retention_check_interval_ms", "producer_id_expiration_ms",
                     "producer_id_expiration_check_interval_ms",
                     "transaction_state_log_num_partitions", "transaction_state_log_min_isr",
                     "transaction_max_timeout_ms", "transactional_id_expiration_ms",
                     "transaction_remove_expired_transaction_cleanup_interval_ms",
                     "transaction_abort_timed_out_transaction_cleanup_interval_ms",
                     "log_cleaner_backoff_ms"):
            if getattr(config, attr) < 1:
                raise InvalidConfigurationError(f"{attr.replace('_', '.')} must be >= 1")
        if config.group_max_session_timeout_ms < config.group_min_session_timeout_ms:
            raise InvalidConfigurationError(
                "group.max.session.timeout.ms must be >= group.min.session.timeout.ms")
        if config.max_open_files is not None and max_open_files_problem(config.max_open_files):
            raise InvalidConfigurationError(max_open_files_problem(config.max_open_files))
        if config.log_cleaner_dedupe_buffer_size < 1 << 20:
            raise InvalidConfigurationError("log.cleaner.dedupe.buffer.size must be >= 1 MiB")
        if config.fetch_max_bytes < 1024:
            raise InvalidConfigurationError("fetch.max.bytes must be >= 1024")
        if config.group_initial_rebalance_delay_ms < 0:
            raise InvalidConfigurationError("group.initial.rebalance.delay.ms must be >= 0")
        return replace(config, topic_defaults=LogConfig.from_dict(topic), given=frozenset(given))


def _parse(key, value, kind):
    return parse_bool(key, value) if kind is bool else parse_int(key, value)
