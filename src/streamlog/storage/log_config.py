"""Per-topic log configuration: Kafka's config names, defaults and validation rules.

Keys are accepted with Kafka's dotted names ("retention.ms") or as Python
names ("retention_ms"); values may be given as Python values or as strings
(from the command line). Every problem raises InvalidConfigurationError
naming the key, the rule and the value.
"""
import random
import re
from dataclasses import dataclass, fields, replace
from functools import cached_property

from ..errors import InvalidConfigurationError
from ..parsing import LONG_MAX, bad_value, parse_bool, parse_choice, parse_int
from . import compression


def _label(key):
    return f"topic config {key!r}"


def _int(minimum=None, maximum=None):
    return lambda key, value: parse_int(_label(key), value, minimum, maximum)


def _float(minimum, maximum):
    def parse(key, value):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise bad_value(_label(key), value, "a number") from None
        if not minimum <= value <= maximum:
            raise bad_value(_label(key), value, f"a number in [{minimum}, {maximum}]")
        return value
    return parse


def _bool(key, value):
    return parse_bool(_label(key), value)


def _choice(*options):
    return lambda key, value: parse_choice(_label(key), value, options)


def _policy(key, value):
    items = value.split(",") if isinstance(value, str) else list(value)
    items = tuple(sorted({str(i).strip() for i in items if str(i).strip()}))
    if not items or any(i not in ("delete", "compact") for i in items):
        raise bad_value(_label(key), value, "'delete', 'compact' or 'compact,delete'")
    return items


def _level(cid):
    return lambda key, value: compression.parse_level(cid, _label(key), value)


# Kafka's MetadataVersion (server-common): each release and how many inter-broker protocol
# versions (IV0, IV1, ...) it has; the 0.8 and 0.9 ones have none. A release's name stands
# for its last production version (4.0 for 4.0-IV0, the LATEST_PRODUCTION).
_IBP_SUBVERSIONS = {"0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0, "0.10.0": 2, "0.10.1": 3,
                    "0.10.2": 1, "0.11.0": 3, "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3, "2.2": 2,
                    "2.3": 2, "2.4": 2, "2.5": 1, "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2,
                    "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3, "3.6": 3, "3.7": 5,
                    "3.8": 1, "3.9": 1, "4.0": 4}
_IBP_VERSIONS = frozenset(_IBP_SUBVERSIONS) | {
    f"{release}-IV{i}" for release, count in _IBP_SUBVERSIONS.items() for i in range(count)}


def _message_format_version(key, value):
    # Kafka's MetadataVersionValidator (MetadataVersion.fromVersionString): the release's
    # first three parts for a 0.x version, two otherwise ("2.8.1" is 2.8), or a whole
    # "2.8-IV1"; a STRING config is trimmed (ConfigDef.parseType).
    text = value.strip() if isinstance(value, str) else None
    parts = (text or "").split(".")
    count = 3 if (text or "").startswith("0.") else 2
    if text is None or ".".join(parts[:count]) not in _IBP_VERSIONS:
        raise bad_value(_label(key), value, "a Kafka version, such as 3.0, 2.8 or 0.10.2-IV0")
    return text


def _throttled_replicas(key, value):
    # Kafka's ThrottledReplicaListValidator over a LIST (ConfigDef splits on commas and
    # trims): '*', or partition:broker pairs (an empty item passes, as in Kafka).
    items = value.split(",") if isinstance(value, str) else list(value)
    items = tuple(str(i).strip() for i in items)
    if items == ("",):
        items = ()
    if "".join(items) != "*" and not all(re.fullmatch(r"([0-9]+:[0-9]+)?", i) for i in items):
        raise bad_value(_label(key), value, "'*' or a list of replicas "
                        "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    return items


# dotted name -> (attribute, parser). Defaults live on the dataclass below.
_RULES = {
    "segment.bytes": ("segment_bytes", _int(14, 2**31 - 1)),
    "segment.ms": ("segment_ms", _int(1)),
    "segment.jitter.ms": ("segment_jitter_ms", _int(0)),
    "segment.index.bytes": ("segment_index_bytes", _int(4, 2**31 - 1)),
    "index.interval.bytes": ("index_interval_bytes", _int(0, 2**31 - 1)),
    "retention.ms": ("retention_ms", _int(-1)),
    "retention.bytes": ("retention_bytes", _int()),
    "cleanup.policy": ("cleanup_policy", _policy),
    "max.message.bytes": ("max_message_bytes", _int(0, 2**31 - 1)),
    # Deprecated in Kafka 3.0 and ignored there (inter-broker protocol 3.0 and later): every
    # batch is RecordBatch v2 whatever it says.
    "message.format.version": ("message_format_version", _message_format_version),
    "message.timestamp.type": ("message_timestamp_type", _choice("CreateTime", "LogAppendTime")),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _int(0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _int(0)),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", _int(0)),
    "flush.messages": ("flush_messages", _int(1)),
    "flush.ms": ("flush_ms", _int(0)),
    "min.insync.replicas": ("min_insync_replicas", _int(1)),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool),
    "delete.retention.ms": ("delete_retention_ms", _int(0)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _float(0.0, 1.0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _int(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _int(1)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _int(0)),
    "preallocate": ("preallocate", _bool),
    "compression.type": ("compression_type",
                         _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    "compression.gzip.level": ("compression_gzip_level", _level(compression.GZIP)),
    "compression.lz4.level": ("compression_lz4_level", _level(compression.LZ4)),
    "compression.zstd.level": ("compression_zstd_level", _level(compression.ZSTD)),
    # Accepted, checked and kept, with no effect in one process (docs/API.md): replication
    # throttling, down-conversion to old record formats, tiered storage.
    "leader.replication.throttled.replicas": ("leader_replication_throttled_replicas",
                                              _throttled_replicas),
    "follower.replication.throttled.replicas": ("follower_replication_throttled_replicas",
                                                _throttled_replicas),
    "message.downconversion.enable": ("message_downconversion_enable", _bool),
    "remote.storage.enable": ("remote_storage_enable", _bool),
    "local.retention.ms": ("local_retention_ms", _int(-2)),
    "local.retention.bytes": ("local_retention_bytes", _int(-2)),
    "remote.log.copy.disable": ("remote_log_copy_disable", _bool),
    "remote.log.delete.on.disable": ("remote_log_delete_on_disable", _bool),
}
_BY_ATTRIBUTE = {attr: name for name, (attr, _) in _RULES.items()}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 << 20
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: tuple = ("delete",)
    max_message_bytes: int = (1 << 20) + 12
    message_format_version: str = "3.0-IV1"   # ServerLogConfigs: IBP_3_0_IV1
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX   # deprecated by the two above
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    preallocate: bool = False
    compression_type: str = "producer"
    compression_gzip_level: int = compression.DEFAULT_LEVELS[compression.GZIP]
    compression_lz4_level: int = compression.DEFAULT_LEVELS[compression.LZ4]
    compression_zstd_level: int = compression.DEFAULT_LEVELS[compression.ZSTD]
    leader_replication_throttled_replicas: tuple = ()
    follower_replication_throttled_replicas: tuple = ()
    message_downconversion_enable: bool = True
    remote_storage_enable: bool = False
    local_retention_ms: int = -2      # -2: retention.ms's (Kafka's LogConfig.localRetentionMs)
    local_retention_bytes: int = -2   # -2: retention.bytes's
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False

    @classmethod
    def from_dict(cls, overrides=None, base=None, check=True):
        """A config from `base` (default: Kafka's defaults) with `overrides` applied and checked."""
        return (base or cls()).with_overrides(overrides or {}, check)

    def with_overrides(self, overrides, check=True):
        """This config with `overrides` applied, each value checked by its own rule. `check`
        also holds the result to Kafka's rules across configs (LogConfig.validate), where a
        config is set; a stored config is read back without them, as Kafka builds a log's
        config from what it stored without them (LogConfig.fromProps), so a database written
        before a rule was added still opens."""
        changes = {}
        for key, value in dict(overrides).items():
            name = key if key in _RULES else _BY_ATTRIBUTE.get(key)
            if name is None:
                raise InvalidConfigurationError(
                    f"unknown topic config {key!r}; known configs: {', '.join(sorted(_RULES))}")
            attr, parse = _RULES[name]
            changes[attr] = parse(name, value)
        config = replace(self, **changes)
        if not check:
            return config
        # Kafka's LogConfig.validateValues, then validateTopicLogConfigValues, over the
        # topic's configs with the defaults under them.
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise InvalidConfigurationError(
                "conflict topic config setting min.compaction.lag.ms "
                f"({config.min_compaction_lag_ms}) > max.compaction.lag.ms "
                f"({config.max_compaction_lag_ms})")
        if config.remote_storage_enable:
            # Kafka's LogConfig.validateRemoteStorageOnlyIfSystemEnabled, with the broker's
            # remote.log.storage.system.enable false: there is no remote tier here.
            raise InvalidConfigurationError(
                "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                "configured with remote log storage.")
        return config

    def to_dict(self):
        """Every config under its dotted name, as Kafka's DescribeConfigs would show it."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[_BY_ATTRIBUTE[f.name]] = ",".join(value) if isinstance(value, tuple) else value
        return out

    def overrides(self):
        """Only the configs that differ from the defaults (what a topic stores)."""
        default = LogConfig()
        full, base = self.to_dict(), default.to_dict()
        return {k: v for k, v in full.items() if v != base[k]}

    @property
    def compact(self):
        return "compact" in self.cleanup_policy

    @property
    def delete(self):
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self):
        return self.message_timestamp_type == "LogAppendTime"

    @cached_property   # read by every append: derived once per config
    def compression_codec(self):
        """The codec id a produced batch is stored in (compression.type), or None to keep
        the producer's ('producer', Kafka's default)."""
        if self.compression_type == "producer":
            return None
        return compression.IDS.get(self.compression_type, compression.NONE)  # 'uncompressed'

    @property
    def compression_level(self):
        """The level compression_codec compresses at (its compression.<codec>.level), None
        for a codec without levels (Kafka's LogConfig.compression)."""
        return {compression.GZIP: self.compression_gzip_level,
                compression.LZ4: self.compression_lz4_level,
                compression.ZSTD: self.compression_zstd_level}.get(self.compression_codec)

    @cached_property   # read by every append: derived once per config
    def timestamp_window_ms(self):
        """(before, after): how far before or after the broker's clock the timestamp of a
        record appended to a CreateTime topic may lie (KIP-937), or None when nothing is
        bounded (LogAppendTime, or the defaults). Each of before.max.ms and after.max.ms
        left at its default falls back to the deprecated difference.max.ms, as Kafka's
        LogConfig.getMessageTimestampBeforeMaxMs / AfterMaxMs do."""
        if self.log_append_time:
            return None
        before, after = self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms
        before = self.message_timestamp_difference_max_ms if before == LONG_MAX else before
        after = self.message_timestamp_difference_max_ms if after == LONG_MAX else after
        return None if before == after == LONG_MAX else (before, after)

    def random_segment_jitter(self):
        """A new segment's roll jitter, drawn once per segment as Kafka's
        LogConfig.randomSegmentJitter does: below the smaller of segment.jitter.ms and
        segment.ms, so that partitions made together do not all roll together."""
        if self.segment_jitter_ms == 0:
            return 0
        return random.randrange(min(self.segment_jitter_ms, self.segment_ms))

    @property
    def max_segment_ms(self):
        """segment.ms, shortened to max.compaction.lag.ms for compacted topics."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms


CONFIG_NAMES = tuple(_RULES)
# Kafka's LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS: topic configs no broker config sets a
# default for (a database config refuses them).
NO_SERVER_DEFAULTS = frozenset({
    "remote.storage.enable", "remote.log.delete.on.disable", "remote.log.copy.disable",
    "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"})
# The configs of Kafka's type LIST: IncrementalAlterConfigs may APPEND to and SUBTRACT from them.
LIST_CONFIGS = frozenset(name for name, (attr, _) in _RULES.items()
                         if isinstance(getattr(LogConfig, attr), tuple))
