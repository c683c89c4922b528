"""`streamlog repair`: rebuild the metadata log from the partition directories on disk.

The metadata log (`__cluster_metadata-0`) is what names a database's topics.
When it is damaged, a writable open cuts it after its last whole valid batch
(Kafka's recovery) and keeps the partition directories the surviving records
no longer explain (reported in `unexplained_paths`); when a record in it is
CRC-valid but malformed, every open refuses with CorruptRecordError; when it
is gone, open refuses the directory. Repair is the way back, in the spirit of
SQLite's `.recover`:

  1. read the old log as far as it is valid, keeping the last record of each
     topic and skipping records that do not parse;
  2. list the partition directories; each names its topic id in
     `partition.metadata` and its topic's configs in `topic.json`;
  3. decide, per topic name: explained (the log has it), recovered (the log
     lost it: name and partition count from the directories, id and configs
     from the files), grown (directories past the log's partition count), or
     not recovered, with the reason (no partition.metadata, a topic id that the
     log deleted or that conflicts with the topic the log has);
  4. when anything changes, rename the old log aside (`__cluster_metadata-0.
     before-repair-<UTC time>`: every byte kept) and write a new one holding
     the surviving records, deleted topics as record + tombstone (so their ids
     stay provably deleted), and the recovered topics.

It deletes nothing and never touches a partition's data. It takes the
writer's lock, so it cannot run beside a writer. A partition that has no
directory (a gap below the highest one found) is created empty by the next
open; the report says so.
"""
import logging
import os
import time
from dataclasses import dataclass, field

from ..errors import (CorruptRecordError, InvalidConfigurationError, KafkaStorageError,
                      NotADatabaseError)
from ..storage import files, partition_metadata
from ..storage.keyed_log import replay
from ..storage.producer_state import highest_producer_id
from ..storage.log_directory import LogDirectory
from ..storage.verify import VerifyReport, verify_partition
from .config import BrokerConfig
from .database_root import METADATA_DIR
from .lock import DirectoryLock
from .metadata import (METADATA_LOG_CONFIG, METADATA_PARTITION, METADATA_TOPIC,
                       PRODUCER_ID_BLOCK_SIZE, PRODUCER_IDS_KEY, TOPIC_DEFAULTS_KEY,
                       MalformedTopicRecord, TopicRegistry, normalized_overrides,
                       parse_producer_ids, parse_topic_defaults, parse_topic_record)

log = logging.getLogger("streamlog.repair")


@dataclass
class RecoveredTopic:
    name: str
    topic_id: str           # 32 hex digits
    partitions: int
    overrides: dict
    created_ms: int
    grown_from: int = 0     # > 0: the log had the topic with this many partitions
    notes: list = field(default_factory=list)


@dataclass
class RepairReport:
    root: str
    dry_run: bool
    metadata_log: str                 # "intact", "damaged: ...", "missing"
    records_kept: int = 0
    malformed_records: list = field(default_factory=list)
    recovered: list = field(default_factory=list)      # RecoveredTopic
    not_recovered: list = field(default_factory=list)  # (path, reason)
    backup: str = None                # where the old metadata log went
    topics_written: int = 0

    @property
    def changed(self):
        return bool(self.recovered or self.malformed_records or
                    self.metadata_log != "intact")

    def lines(self):
        """The report as a user reads it."""
        out = [f"metadata log: {self.metadata_log}; {self.records_kept} topic record(s) read"]
        out += [f"malformed record dropped: {m}" for m in self.malformed_records]
        for t in self.recovered:
            what = (f"grown from {t.grown_from} to {t.partitions} partitions" if t.grown_from
                    else f"recovered with {t.partitions} partition(s)")
            out.append(f"topic {t.name!r} (id {partition_metadata.kafka_uuid(t.topic_id)}): "
                       f"{what}")
            out += [f"  {note}" for note in t.notes]
        for path, reason in self.not_recovered:
            out.append(f"not recovered: {path}: {reason}")
        if not self.changed:
            out.append("nothing to repair")
        elif self.dry_run:
            out.append("dry run: nothing was changed")
        else:
            out.append(f"wrote a new metadata log: {self.topics_written} topic(s)")
            if self.backup:
                out.append(f"the old metadata log was kept as {self.backup}")
        return out


class _History:
    """What the old metadata log still says."""

    def __init__(self):
        self.topics = {}    # name -> record dict
        self.deleted = []   # record dicts of deleted topics, in log order
        self.malformed = []
        self.records = 0
        self.next_producer_id = 0  # the producer id mark: ids below it were handed out
        self.topic_defaults = None  # the last topic defaults record's overrides, if any

    def apply(self, key, value, _timestamp):
        self.records += 1
        if key == PRODUCER_IDS_KEY:
            try:
                self.next_producer_id = max(self.next_producer_id,
                                            parse_producer_ids(key, value))
            except CorruptRecordError as exc:
                self.malformed.append(f"key {key!r}: {exc.reason}")
            return
        if key == TOPIC_DEFAULTS_KEY:
            try:
                self.topic_defaults = parse_topic_defaults(key, value)
            except CorruptRecordError as exc:
                self.malformed.append(f"key {key!r}: {exc.reason}")
            return
        try:
            name, doc = parse_topic_record(key, value)
        except MalformedTopicRecord as exc:
            self.malformed.append(f"key {key!r}: {exc}")
            return
        if doc is None:
            gone = self.topics.pop(name, None)
            if gone is not None:
                self.deleted.append(gone)
        else:
            self.topics[name] = doc

    @property
    def deleted_ids(self):
        return {doc["id"] for doc in self.deleted}


def repair(root, dry_run=False, clock_ms=None):
    """Rebuild root's metadata log from its partition directories; a RepairReport."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise NotADatabaseError(f"{root} is not a directory: nothing to repair")
    logs = LogDirectory(root, readonly=True)
    if not os.path.isdir(logs.partition_dir(METADATA_PARTITION)) and \
            not logs.partitions_on_disk():
        # Somebody's folder, or a mistyped path: a metadata log written there (and the lock
        # file) would make it a database with nothing in it.
        raise NotADatabaseError(
            f"{root} holds no metadata log ({files.partition_dir_name(*METADATA_PARTITION)}) "
            "and no partition directory: nothing to repair")
    lock = DirectoryLock(root)
    lock.acquire()
    try:
        history, state = _read_history(logs)
        report = RepairReport(root, dry_run, state, history.records - len(history.malformed),
                              list(history.malformed))
        _plan(logs, history, report)
        if report.changed and not dry_run:
            _rewrite(root, history, report, clock_ms)
        return report
    finally:
        lock.release()


def _read_history(logs):
    history = _History()
    directory = logs.partition_dir(METADATA_PARTITION)
    if not os.path.isdir(directory):
        return history, "missing"
    checked = VerifyReport(directory)
    verify_partition(directory, checked)
    # Index findings are not damage: indexes are rebuilt from the log.
    damage = [str(f) for f in checked.problems + checked.notes
              if f.path.endswith(files.LOG_SUFFIX)]
    try:
        metadata_log = logs.open_log(METADATA_PARTITION, METADATA_LOG_CONFIG)
        try:
            replay(metadata_log, 0, history.apply)
        finally:
            metadata_log.close(flush=False)
    except (CorruptRecordError, KafkaStorageError) as exc:
        damage = damage or [str(exc)]
    if not damage:
        return history, "intact"
    more = f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""
    return history, f"damaged: {damage[0]}{more}; the records after it are lost"


def _plan(logs, history, report):
    on_disk = {}  # topic name -> {partition: directory}
    for tp in logs.partitions_on_disk():
        if tp.topic != METADATA_TOPIC:
            on_disk.setdefault(tp.topic, {})[tp.partition] = logs.partition_dir(tp)
    deleted_ids = history.deleted_ids
    for name in sorted(on_disk):
        by_id = {}
        for partition, directory in sorted(on_disk[name].items()):
            try:
                topic_id = partition_metadata.read(directory)
            except partition_metadata.CorruptPartitionMetadataError as exc:
                report.not_recovered.append((directory, str(exc)))
                continue
            if topic_id is None:
                report.not_recovered.append((directory, "no partition.metadata: nothing proves "
                                             "the library made this directory"))
                continue
            by_id.setdefault(topic_id, {})[partition] = directory
        live = history.topics.get(name)
        chosen = _choose_id(name, by_id, live, deleted_ids, report)
        if chosen is None:
            continue
        partitions = by_id[chosen]
        count = max(partitions) + 1
        if live is not None:
            if count > live["partitions"]:
                report.recovered.append(RecoveredTopic(
                    name, chosen, count, live.get("config", {}), live["created_ms"],
                    grown_from=live["partitions"]))
            continue
        report.recovered.append(_recovered(name, chosen, partitions, count))


def _choose_id(name, by_id, live, deleted_ids, report):
    """The topic id the directories of `name` belong to; the others are reported."""
    if live is not None:
        keep = live["id"] if live["id"] in by_id else None
    else:
        candidates = [i for i in by_id if i not in deleted_ids]
        keep = candidates[0] if len(candidates) == 1 else None
    for topic_id, partitions in by_id.items():
        if topic_id == keep:
            continue
        shown = partition_metadata.kafka_uuid(topic_id)
        if topic_id in deleted_ids:
            reason = f"a leftover of deleted topic {name!r} (id {shown}): the next open removes it"
        elif live is not None:
            reason = (f"belongs to topic id {shown}, not to the topic {name!r} the metadata log "
                      f"has (id {partition_metadata.kafka_uuid(live['id'])})")
        else:
            reason = (f"topic {name!r} has directories of several topic ids ({shown} among "
                      "them): which one is the topic cannot be proven")
        for directory in partitions.values():
            report.not_recovered.append((directory, reason))
    return keep


def _recovered(name, topic_id, partitions, count):
    topic = RecoveredTopic(name, topic_id, count, {}, int(time.time() * 1000))
    described = None
    for directory in partitions.values():
        try:
            doc = partition_metadata.read_topic_config(directory)
        except partition_metadata.CorruptPartitionMetadataError as exc:
            topic.notes.append(f"ignored: {exc}")
            continue
        if doc is not None and doc["topic_id"] == topic_id and doc["name"] == name:
            described = doc
            break
    if described is None:
        topic.notes.append("no topic.json: configs are the defaults")
    else:
        try:
            topic.overrides = normalized_overrides(described["config"])
        except InvalidConfigurationError as exc:
            topic.notes.append(f"configs in topic.json not valid ({exc}): defaults used")
        topic.created_ms = described["created_ms"]
    missing = [p for p in range(count) if p not in partitions]
    if missing:
        topic.notes.append(f"partition(s) {', '.join(map(str, missing))} had no directory: "
                           "the next open creates them empty")
    return topic


def _rewrite(root, history, report, clock_ms):
    old = os.path.join(root, METADATA_DIR)
    if os.path.isdir(old):
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        backup = f"{old}.before-repair-{stamp}"
        n = 1
        while os.path.lexists(backup):
            n += 1
            backup = f"{old}.before-repair-{stamp}.{n}"
        os.rename(old, backup)
        report.backup = backup
    was_clean = os.path.exists(os.path.join(root, files.CLEAN_SHUTDOWN_MARKER))
    kwargs = {} if clock_ms is None else {"clock_ms": clock_ms}
    logs = LogDirectory(root, **kwargs)
    try:
        metadata_log = logs.open_log(METADATA_PARTITION, METADATA_LOG_CONFIG)
        registry = TopicRegistry(metadata_log, BrokerConfig().topic_defaults, logs.clock_ms)
        if history.topic_defaults is not None:
            # Readers apply these: a compact default's cleaned logs must stay compacted to them.
            registry.restore_topic_defaults(history.topic_defaults)
        for doc in history.deleted:
            registry.restore(doc["name"], doc["id"], doc["partitions"], doc.get("config", {}),
                             doc["created_ms"], deleted=True)
        grown = {t.name: t for t in report.recovered}
        for name, doc in history.topics.items():
            partitions = grown.pop(name).partitions if name in grown else doc["partitions"]
            registry.restore(name, doc["id"], partitions, doc.get("config", {}),
                             doc["created_ms"])
        for t in grown.values():
            registry.restore(t.name, t.topic_id, t.partitions, t.overrides, t.created_ms)
            log.info("recovered topic %r with %d partition(s)", t.name, t.partitions)
        # Ids handed out before must never be handed out again: a partition may still hold
        # an old producer's state under one, and a new producer's first batch could be
        # taken for its repeat. The partitions say how far ids went if the log lost it.
        on_disk = max([-1] + [highest_producer_id(logs.partition_dir(tp))
                              for tp in logs.partitions_on_disk()])
        mark = max(history.next_producer_id, on_disk + 1)
        if mark:
            registry.restore_producer_ids(-(-mark // PRODUCER_ID_BLOCK_SIZE)
                                          * PRODUCER_ID_BLOCK_SIZE)
        report.topics_written = len(registry.topics)
    finally:
        # The other partitions were not opened: a stop that was not clean must still be
        # recovered by the next open.
        logs.close(mark_clean=was_clean)

