"""The topic registry, kept as records in the `__cluster_metadata` log.

Every change is one record, keyed by topic name, valued with msgpack:
`{"v": 1, "name", "id", "partitions", "config": {overrides}, "created_ms"}`;
a deletion is a tombstone (null value). One more key, which no topic name can
spell, holds the producer ids handed out so far (Kafka's ProducerIdsRecord):
`{"v": 1, "next": first id of the next block}`. A third such key holds the
database's topic defaults, the topic configs its writable open was given (Kafka
keeps cluster-wide default configs in its own __cluster_metadata as ConfigRecords
of the default broker resource: ConfigurationControlManager.DEFAULT_NODE):
`{"v": 1, "config": {Kafka name: value}}`, written by a writable open whose
defaults differ from the last record (an old database without one and a writer
given none keep having none). The writer applies its own config; a read-only
open applies the recorded defaults (what the writer applies), and follows a
change of them on refresh. Opening replays the log: the last record of each
topic wins. The record is appended and fsynced *before* any
partition directory is made or removed, so it is the commit point: a stop
between the two is finished by the next open (missing directories are
created; a directory whose partition.metadata names a topic id this log
deleted is removed). `deleted_topic_ids` is that proof: a directory the
log cannot explain is never removed.

Names follow Kafka's rule, internal names are reserved, and, as in Kafka, a
name that differs from an existing one only by '.' versus '_' is refused
(their metric names would collide), unless both come in one CreateTopics request.

Thread-safety: changes are serialised by `_lock`; readers of `topics` get
a dict that is replaced, never mutated.
"""
import threading
import time
import uuid
from collections.abc import Mapping
from typing import NamedTuple

import msgpack

from ..errors import (CorruptRecordError, InvalidConfigurationError, InvalidPartitionsError,
                      InvalidTopicError, ReadOnlyError, TopicAlreadyExistsError,
                      UnknownTopicOrPartitionError)
from ..storage.files import topic_name_problem
from ..storage.log_config import CONFIG_NAMES, LogConfig
from ..storage.keyed_log import encode_changes, replay
from ..structs import TopicPartition

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = TopicPartition(METADATA_TOPIC, 0)
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({METADATA_TOPIC, CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
MAX_PARTITIONS = 10_000  # a directory each; far beyond any embedded use
# '!' is not a topic name character: this key never collides with a topic's.
PRODUCER_IDS_KEY = b"!producer-ids"
PRODUCER_ID_BLOCK_SIZE = 1000  # ids taken per durable record, as Kafka's blocks
TOPIC_DEFAULTS_KEY = b"!topic-defaults"  # '!' again: no topic can be named so

# The metadata log itself: never deleted by retention, small segments.
METADATA_LOG_CONFIG = LogConfig.from_dict({"cleanup.policy": "compact", "segment.bytes": 1 << 20,
                                           "segment.index.bytes": 64 << 10})


class TopicInfo(NamedTuple):
    name: str
    topic_id: str
    partitions: int
    overrides: dict  # only the configs set on the topic (Kafka names)
    config: LogConfig
    created_ms: int

    @property
    def internal(self):
        return self.name in INTERNAL_TOPICS


def validate_topic_name(name, allow_internal=False):
    problem = topic_name_problem(name)
    if problem:
        raise InvalidTopicError(f"{problem}. Topic names use ASCII letters, digits, '.', '_' "
                                f"and '-', 1 to 249 characters")
    if name in INTERNAL_TOPICS and not allow_internal:
        raise InvalidTopicError(f"{name!r} is an internal topic name and cannot be used")


def check_name_free(name, topics, made_with=()):
    """TopicAlreadyExistsError when one of `topics` (names) is `name`, InvalidTopicError
    when one collides with it: '.' and '_' are alike in Kafka's metric names, and its
    controller refuses such a name (ReplicationControlManager.validateNewTopicNames).
    made_with: the names made by the same CreateTopics request, which do not collide:
    Kafka's controller checks a request's names against the topics committed before it
    (topicsWithCollisionChars, which only the replay of its records updates), so it
    makes both of two colliding names of one request."""
    if name in topics:
        raise TopicAlreadyExistsError(f"topic {name!r} already exists")
    twin = next((t for t in topics if t.replace(".", "_") == name.replace(".", "_")
                 and t not in made_with), None)
    if twin is not None:
        raise InvalidTopicError(
            f"topic {name!r} collides with existing topic {twin!r} ('.' and '_' are "
            "treated alike in metric names); choose another name")


def validate_partitions(partitions):
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise InvalidPartitionsError(f"partitions must be a positive integer, got {partitions!r}")
    if partitions > MAX_PARTITIONS:
        raise InvalidPartitionsError(f"{partitions} partitions is more than the limit of "
                                     f"{MAX_PARTITIONS}")


class TopicRegistry:
    """default_config: the topic defaults (a LogConfig) the opener was given. A writer applies
    them; a read-only registry applies the recorded ones instead once the log holds a record
    (the writer's), and default_config only where it holds none (an old database)."""

    def __init__(self, metadata_log, default_config, clock_ms, readonly=False):
        self._log = metadata_log
        self._default = default_config
        # The overrides of the last topic defaults record ({Kafka name: value}); None: none.
        self.recorded_defaults = None
        self._clock_ms = clock_ms
        self.readonly = readonly
        self._lock = threading.Lock()
        self.topics = {}
        self.deleted_topic_ids = set()  # ids of every topic a tombstone in the log deleted
        self.version = 0  # bumped on every change: clients cache metadata per version
        self.next_producer_id_block = 0  # no id at or above it has been handed out
        self._replayed_to = 0
        self.refresh()

    # --- reading ---------------------------------------------------------

    def refresh(self):
        """Apply metadata records appended since the last look (read-only followers)."""
        with self._lock:
            topics = dict(self.topics)
            if self.readonly:
                self._log.refresh()
            self._replayed_to = replay(
                self._log, self._replayed_to,
                lambda key, value, _ts: self._apply_record(topics, key, value))
            if topics != self.topics:
                self.topics = topics
                self.version += 1
        return self.topics

    @property
    def defaults(self):
        """The topic defaults this registry applies (a LogConfig)."""
        return self._default

    def _apply_record(self, topics, key, value):
        """Apply one record as read from the log: a record that is not one this module writes
        (CRC-valid but malformed) is CorruptRecordError naming the log, never msgpack's or a
        KeyError from deep inside every open."""
        if key == PRODUCER_IDS_KEY:
            self.next_producer_id_block = max(self.next_producer_id_block,
                                              parse_producer_ids(key, value,
                                                                 self._log.directory))
            return
        if key == TOPIC_DEFAULTS_KEY:
            self.recorded_defaults = parse_topic_defaults(key, value, self._log.directory)
            if self.readonly:
                self._apply_defaults(topics, LogConfig().with_overrides(self.recorded_defaults,
                                                                        check=False))
            return
        try:
            name, doc = parse_topic_record(key, value)
            self._apply(topics, name, doc)
        except MalformedTopicRecord as exc:
            raise CorruptRecordError(f"the metadata log holds a malformed record for key "
                                     f"{key!r} ({exc})", self._log.directory) from None

    def _apply(self, topics, name, doc):
        if doc is None:
            deleted = topics.pop(name, None)
            if deleted is not None:
                self.deleted_topic_ids.add(deleted.topic_id)
            return
        overrides = doc.get("config", {})
        topics[name] = TopicInfo(name, doc["id"], doc["partitions"], overrides,
                                 self._default.with_overrides(overrides, check=False),
                                 doc["created_ms"])

    def _apply_defaults(self, topics, default):
        """Make `default` the topic defaults: every topic's effective config follows it (a
        record of them may come after the topics' own in the log)."""
        self._default = default
        for name, info in topics.items():
            topics[name] = info._replace(config=default.with_overrides(info.overrides,
                                                                       check=False))

    def get(self, name):
        info = self.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(
                f"topic {name!r} does not exist; create it with create_topic({name!r})", name)
        return info

    # --- changing --------------------------------------------------------

    def _write(self, name, doc):
        if self.readonly:
            raise ReadOnlyError("the database was opened read-only; topics cannot change")
        value = None if doc is None else msgpack.packb(doc, use_bin_type=True)
        self._log.append(encode_changes([(name.encode("utf-8"), value)], self._clock_ms()))
        self._log.flush()  # the commit point of the change: durable before any directory work
        topics = dict(self.topics)
        self._apply(topics, name, doc)
        self._replayed_to = self._log.log_end_offset
        self.topics = topics
        self.version += 1
        return topics.get(name)

    def allocate_producer_ids(self, count=PRODUCER_ID_BLOCK_SIZE):
        """A block of producer ids never handed out before, in this process or any earlier
        one: the record saying so is durable before any id of it is used."""
        if self.readonly:
            raise ReadOnlyError("the database was opened read-only; it has no producer ids "
                                "to give")
        with self._lock:
            first = self.next_producer_id_block
            self._write_producer_ids(first + count)
            return range(first, first + count)

    def restore_producer_ids(self, next_block):
        """Write the producer id mark as it was (`streamlog repair`)."""
        with self._lock:
            self._write_producer_ids(max(next_block, self.next_producer_id_block))

    def _write_producer_ids(self, next_block):
        doc = {"v": 1, "next": next_block}
        self._log.append(encode_changes(
            [(PRODUCER_IDS_KEY, msgpack.packb(doc, use_bin_type=True))], self._clock_ms()))
        self._log.flush()
        self.next_producer_id_block = next_block
        self._replayed_to = self._log.log_end_offset

    def record_topic_defaults(self, overrides):
        """Record `overrides` (normalized topic configs) as the database's topic defaults
        unless the last record says the same: a writable open calls it before any log is
        opened, so a reader never applies other defaults than the writer's to its data.
        No record and no defaults is no change (an old database stays as it was)."""
        with self._lock:
            if overrides == (self.recorded_defaults or {}):
                return False
            self._write_topic_defaults(overrides)
            return True

    def restore_topic_defaults(self, overrides):
        """Write the topic defaults record as it was, {} included (`streamlog repair`)."""
        with self._lock:
            self._write_topic_defaults(overrides)

    def _write_topic_defaults(self, overrides):
        if self.readonly:
            raise ReadOnlyError("the database was opened read-only; its defaults cannot change")
        doc = {"v": 1, "config": dict(overrides)}
        self._log.append(encode_changes(
            [(TOPIC_DEFAULTS_KEY, msgpack.packb(doc, use_bin_type=True))], self._clock_ms()))
        self._log.flush()  # durable before the writer appends under these defaults
        self.recorded_defaults = dict(overrides)
        self._replayed_to = self._log.log_end_offset

    def create(self, name, partitions, overrides=None, allow_internal=False, topic_id=None,
               made_with=()):
        """topic_id: the id a cluster's controller gave the topic (every broker's replicas
        share it; the controller checked its name against the others); None: a fresh one.
        made_with: as check_name_free's."""
        validate_topic_name(name, allow_internal)
        validate_partitions(partitions)
        normalized = normalized_overrides(overrides or {})  # raises on a bad key or value
        with self._lock:
            check_name_free(name, self.topics, self.topics if topic_id else made_with)
            self._default.with_overrides(normalized)  # the rules across configs
            return self._write(name, {"v": 1, "name": name, "id": topic_id or uuid.uuid4().hex,
                                      "partitions": partitions, "config": normalized,
                                      "created_ms": int(time.time() * 1000)})

    def restore(self, name, topic_id, partitions, overrides, created_ms, deleted=False):
        """Write a topic's record as it was, id included (`streamlog repair`); deleted=True
        follows it with its tombstone, so the id stays provably deleted."""
        validate_topic_name(name, allow_internal=True)
        validate_partitions(partitions)
        with self._lock:
            self._write(name, {"v": 1, "name": name, "id": topic_id, "partitions": partitions,
                               "config": normalized_overrides(overrides), "created_ms": created_ms})
            if deleted:
                self._write(name, None)

    def delete(self, name, allow_internal=False):
        with self._lock:
            info = self.get(name)
            if info.internal and not allow_internal:
                raise InvalidTopicError(f"{name!r} is an internal topic and cannot be deleted")
            self._write(name, None)
            return info

    def add_partitions(self, name, total):
        validate_partitions(total)
        with self._lock:
            info = self.get(name)
            if total <= info.partitions:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {info.partitions} partitions; the count can only grow "
                    f"(asked for {total})")
            return self._write(name, {**_doc(info), "partitions": total})

    def alter_config(self, name, overrides, remove=()):
        """Set overrides on the topic, and take the configs named in `remove` back to their
        defaults (Kafka's DELETE of an IncrementalAlterConfigs)."""
        with self._lock:
            info = self.get(name)
            merged = overrides_after(info.overrides, overrides, remove)
            self._default.with_overrides(merged)  # validate before writing
            return self._write(name, {**_doc(info), "config": merged})


class MalformedTopicRecord(ValueError):
    """A CRC-valid metadata record that is not one this module writes."""


def parse_topic_record(key, value):
    """(topic name, record dict or None for a tombstone) of one metadata record."""
    try:
        name = key.decode("utf-8")
        if value is None:
            return name, None
        doc = msgpack.unpackb(value, raw=False)
        if not (isinstance(doc, dict) and isinstance(doc.get("id"), str) and
                type(doc.get("partitions")) is int and doc["partitions"] >= 1 and
                isinstance(doc.get("config", {}), dict) and type(doc.get("created_ms")) is int):
            raise ValueError(f"not a topic record: {doc!r:.200}")
        # Raises on a config it cannot hold (a value's own rule).
        LogConfig().with_overrides(doc.get("config", {}), check=False)
        return name, doc
    except (AttributeError, UnicodeDecodeError, ValueError, TypeError, KeyError,
            msgpack.UnpackException, InvalidConfigurationError) as exc:
        raise MalformedTopicRecord(str(exc)) from None


def parse_producer_ids(key, value, directory=None):
    """The `next` of a producer id record; CorruptRecordError if it is not one."""
    try:
        doc = msgpack.unpackb(value, raw=False)
        if isinstance(doc, dict) and type(doc.get("next")) is int and doc["next"] >= 0:
            return doc["next"]
    except (TypeError, ValueError, msgpack.UnpackException):
        pass
    raise CorruptRecordError(f"the metadata log holds a malformed record for key {key!r}",
                             directory)


def parse_topic_defaults(key, value, directory=None):
    """The overrides of a topic defaults record, normalized; CorruptRecordError if it is not
    one (a tombstone included: a writer never deletes the record, it writes {} instead)."""
    try:
        doc = msgpack.unpackb(value, raw=False)
        if isinstance(doc, dict) and isinstance(doc.get("config"), dict):
            return normalized_overrides(doc["config"])
    except (TypeError, ValueError, msgpack.UnpackException, InvalidConfigurationError):
        pass
    raise CorruptRecordError(f"the metadata log holds a malformed record for key {key!r}",
                             directory)


def _doc(info):
    return {"v": 1, "name": info.name, "id": info.topic_id, "partitions": info.partitions,
            "config": dict(info.overrides), "created_ms": info.created_ms}


def normalized_overrides(overrides):
    """Overrides checked and keyed by Kafka's dotted names, whatever spelling the caller
    used ("retention.ms" or "retention_ms"); values parsed ("100" -> 100). The rules across
    configs are for the config they make with the defaults under them (LogConfig)."""
    if not isinstance(overrides, Mapping):
        raise TypeError(f"a topic config is a dict {{name: value}}, not "
                        f"{type(overrides).__name__} {overrides!r}")
    full = LogConfig().with_overrides(overrides, check=False).to_dict()
    return {_dotted(key): full[_dotted(key)] for key in overrides}


def overrides_after(current, overrides, remove=()):
    """The overrides `current` (a topic's) become once `overrides` are set and the configs
    named in `remove` (either spelling) are back to their defaults; checked as
    normalized_overrides."""
    merged = dict(current)
    for key in remove:
        merged.pop(_dotted(key), None)
    merged.update(normalized_overrides(overrides))
    return merged


def _dotted(key):
    """A topic config's Kafka name from either spelling ("retention_ms" too)."""
    dotted = key if key in CONFIG_NAMES else key.replace("_", ".")
    if dotted not in CONFIG_NAMES:
        raise InvalidConfigurationError(f"unknown topic config {key!r}")
    return dotted
