"""The open database: one directory, one Broker, behind a narrow request interface.

The Broker owns the writer lock, the log directory, the topic registry, the
partition logs, the timing wheel (SystemTimer), the fetch purgatory, the
flusher thread and the appender thread (appends a timer task hands off).
Clients talk to it only through methods named after Kafka's
request types -- produce, fetch, list_offsets, create_topics,
delete_topics, create_partitions, describe_configs, metadata -- so a Kafka
wire-protocol server could later be a thin adapter over the same calls.

Lifecycle::

    Broker() --[lock acquired, logs recovered, metadata replayed]--> OPEN
    OPEN --[close(): flusher drained, waiting fetches answered, timer stopped,
            logs flushed + sealed + checkpointed + marked clean, lock released]--> CLOSED

A read-only Broker (another process's writer may be live) takes no lock,
changes no file, refreshes its view of the directory when a reader reaches
the end of what it knows, and long-polls by re-reading the files (there is no
in-process append to wake it).

Thread-safety: every request may come from any thread. Topic changes and the
partition map are guarded by `_lock`; appends and reads are each log's own
business (see storage.partition_log).
"""
import contextlib
import functools
import gc
import logging
import os
import shutil
import threading
import time
from typing import NamedTuple

from ..errors import (InvalidConfigurationError, KafkaStorageError, LogClosedError,
                      OffsetOutOfRangeError, PolicyViolationError, ReadOnlyError, StreamlogError,
                      UnknownTopicOrPartitionError)
from ..storage import files, partition_metadata
from ..storage.cleaner_manager import log_to_clean
from ..storage.log_directory import LogDirectory
from ..storage.partition_log import NegativeReadSizeError, wall_clock_ms
from ..storage.producer_state import UNVERIFIED
from ..structs import TopicPartition
from ..timer import SystemTimer
from .appender import Appender
from .cleaner import LogCleaner
from .config import BrokerConfig
from .database_root import check_root, storage_error
from .delayed_fetch import DelayedFetch
from .flusher import CHECKPOINT, FLUSH_MS, PRODUCER_EXPIRATION, RETENTION, LogFlusher
from .lock import DirectoryLock
from .metadata import (METADATA_LOG_CONFIG, METADATA_PARTITION, METADATA_TOPIC, TopicRegistry,
                       overrides_after, validate_partitions, validate_topic_name)
from .purgatory import DelayedOperationPurgatory

log = logging.getLogger("streamlog.broker")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

# A read-only reader's long poll re-reads the files with this backoff.
_READONLY_POLL_S = (0.001, 0.002, 0.005, 0.01, 0.02)


class PartitionFetch(NamedTuple):
    """What a fetch returns for one partition; `error` is an exception or None."""

    batches: list
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    error: object = None
    # read_committed: the aborted transactions the batches may hold (txn_index.AbortedTxn),
    # for the consumer to drop; None for read_uncommitted.
    aborted_transactions: list = None

    @property
    def size(self):
        return sum(b.size_in_bytes for b in self.batches)


class PartitionInfo(NamedTuple):
    """One partition of describe_topic (also what the public API returns)."""

    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    log_end_offset: int
    segments: int
    size_bytes: int
    # Compacted topics (cleanup.policy has compact): where the cleaner's next pass starts
    # and the share of the log's bytes it would clean (storage/cleaner_manager.py); None
    # for a topic that is not compacted.
    first_dirty_offset: int = None
    dirty_ratio: float = None


class Broker:
    def __init__(self, root, readonly=False, config=None, clock_ms=wall_clock_ms,
                 temporary=False):
        self.root = os.path.abspath(root)
        self.readonly = readonly
        self.temporary = temporary
        # What this open was given (a second open in the process must give the same); a
        # read-only open's `config` takes the writer's recorded topic defaults instead.
        self.opened_config = self.config = BrokerConfig.from_dict(config)
        self.clock_ms = clock_ms
        self._lock = threading.RLock()
        self._closed = False
        self._dir_lock = None
        self.timer = self.flusher = self.cleaner = None
        # Appends a timer task hands off (the producer's linger sweep): see appender.py.
        self.appender = Appender()
        self._services = []  # (name, object with close()): see attach_service
        self._producer_ids = iter(())  # what is left of the block init_producer_id hands out
        # In a cluster (streamlog.cluster): this broker's replicas (replica_manager.py);
        # None for a database on its own, where every partition is a single replica.
        self.replicas = None
        self.partitions = {}  # TopicPartition -> PartitionLog, replaced on change
        # Directories named like partitions that the metadata log cannot explain: kept as they
        # are, listed here and logged (see _remove_deleted_leftovers).
        self.unexplained_paths = []
        try:
            check_root(self.root, readonly)
            if not readonly:
                self._dir_lock = DirectoryLock(self.root)
                self._dir_lock.acquire()
            # (The saved listings the root's marker holds are hundreds of thousands of objects
            # at 10,000 partitions: the collector is held off from their reading on.)
            with _collection_paused():
                self.logs = LogDirectory(self.root, readonly, clock_ms,
                                         max_open_files=self.config.max_open_files,
                                         descriptors_elsewhere=0 if readonly else 1,  # LOCK
                                         producer_id_expiration_ms=(
                                             self.config.producer_id_expiration_ms))
                metadata_log = self.logs.open_log(METADATA_PARTITION, METADATA_LOG_CONFIG)
                self.metadata = TopicRegistry(metadata_log, self.config.topic_defaults,
                                              clock_ms, readonly)
                if readonly:
                    self._follow_recorded_defaults()
                else:
                    self._check_defaults_keep_compaction()
                    self.metadata.record_topic_defaults(self.config.given_topic_defaults())
                self._sync_partitions()
            self.timer = SystemTimer("broker")
            self.fetch_purgatory = DelayedOperationPurgatory("fetch", self.timer)
            if not readonly:
                self.flusher = LogFlusher(self, self.timer, {
                    RETENTION: self.config.log_retention_check_interval_ms,
                    CHECKPOINT: self.config.log_flush_offset_checkpoint_interval_ms,
                    FLUSH_MS: self.config.log_flush_scheduler_interval_ms,
                    PRODUCER_EXPIRATION: self.config.producer_id_expiration_check_interval_ms})
                self.cleaner = LogCleaner(
                    self.logs, clock_ms, enabled=self.config.log_cleaner_enable,
                    dedupe_buffer_size=self.config.log_cleaner_dedupe_buffer_size,
                    backoff_ms=self.config.log_cleaner_backoff_ms)
        except OSError as exc:
            self._abandon()
            raise storage_error(self.root, exc) from exc
        except BaseException:
            self._abandon()
            raise

    @staticmethod
    def config_from(settings):
        """The BrokerConfig a config dict means (to compare with an open broker's)."""
        return BrokerConfig.from_dict(settings)

    def _abandon(self):
        """Undo a failed open: stop threads, close files, release the lock."""
        self.appender.close()
        if self.cleaner is not None:
            self.cleaner.close()
        if self.flusher is not None:
            self.flusher.close()
        if self.timer is not None:
            self.timer.close()
        logs = getattr(self, "logs", None)
        if logs is not None:
            for partition_log in list(logs.logs.values()):
                partition_log.close(flush=False)
        if self._dir_lock is not None:
            self._dir_lock.release()

    # --- partitions ----------------------------------------------------------

    def _sync_partitions(self):
        """Open the logs of every partition the registry knows; finish interrupted deletions."""
        with self._lock:
            wanted = {TopicPartition(t.name, p): t for t in self.metadata.topics.values()
                      for p in range(t.partitions)}
            if not self.readonly:
                self._remove_deleted_leftovers(self.logs.partitions_on_disk(but=wanted))
            partitions = {tp: pl for tp, pl in self.partitions.items() if tp in wanted}
            if self.readonly:
                for tp, partition_log in partitions.items():
                    # The writer's topic config or defaults changed since the log was opened
                    # (the registry makes a new config object only then: `is` is enough).
                    if partition_log.config is not wanted[tp].config:
                        partition_log.config = wanted[tp].config
            with _collection_paused():
                self._open_partitions(wanted, partitions)
            self.partitions = partitions

    def _open_partitions(self, wanted, partitions):
        for tp, topic in wanted.items():
            if tp not in partitions and (not self.readonly or
                                         os.path.isdir(self.logs.partition_dir(tp))):
                partition_log = partitions[tp] = self.logs.open_log(tp, topic.config,
                                                                    topic.topic_id)
                # After a clean stop an existing topic.json is current: the open's own listing
                # says whether there is one (a stat each would slow the open).
                if not self.readonly and not (
                        self.logs.clean_shutdown and
                        files.TOPIC_CONFIG_FILE in partition_log.other_files_at_open):
                    self._write_topic_config(tp, topic, check=not self.logs.clean_shutdown)

    def _write_topic_config(self, tp, topic, check=True):
        """Keep tp's topic.json (what `streamlog repair` rebuilds the topic from) equal to the
        registry's record. check=False only fills in a missing one: after a clean stop every
        existing one is current, and reading them all would slow the open."""
        partition_metadata.ensure_topic_config(self.logs.partition_dir(tp), topic.name,
                                               topic.topic_id, topic.overrides,
                                               topic.created_ms, check)

    def _remove_deleted_leftovers(self, candidates):
        """Remove the directories among candidates that a deletion in the metadata log left
        behind (their partition.metadata names a deleted topic id); keep and report the rest.

        Removing only what the log proves it deleted is what keeps a user's folder that
        happens to be named like `<name>-<number>` safe. A removal that fails is reported and
        retried at the next open: it never stops this one.
        """
        for tp in candidates:
            if tp.topic == METADATA_TOPIC or tp in self.partitions:
                continue
            directory = self.logs.partition_dir(tp)
            topic_id = self.logs.topic_id_on_disk(tp)
            if topic_id is None or topic_id not in self.metadata.deleted_topic_ids:
                if directory not in self.unexplained_paths:
                    self.unexplained_paths.append(directory)
                    log.warning("%s is named like partition %d of topic %r, which this "
                                "database does not have; it is kept as it is", directory,
                                tp.partition, tp.topic)
                continue
            try:
                self.logs.delete_log(tp)  # a deletion interrupted after its tombstone
            except StreamlogError as exc:
                log.warning("%s; the next open retries", exc)

    def _check_new_partition_dirs(self, name, first, total):
        """Refuse to make partitions first..total-1 of `name` where a directory the
        library did not make already has the name: it would write into somebody's folder."""
        tps = [TopicPartition(name, p) for p in range(first, total)]
        self._remove_deleted_leftovers(tp for tp in tps
                                       if os.path.isdir(self.logs.partition_dir(tp)))
        taken = [self.logs.partition_dir(tp) for tp in tps
                 if os.path.lexists(self.logs.partition_dir(tp))]
        if taken:
            raise KafkaStorageError(
                f"{taken[0]} already exists and is not a partition of this database"
                f"{f' ({len(taken)} such paths)' if len(taken) > 1 else ''}; streamlog never "
                "writes into a folder it did not make: move it away or choose another topic "
                "name")

    def partition_log(self, tp):
        partition_log = self.partitions.get(tp)
        if partition_log is None:
            if self.readonly:
                self.refresh_metadata()
                partition_log = self.partitions.get(tp)
            if partition_log is None:
                self._check_open()
                self._raise_unknown(tp)
        return partition_log

    def has_partition(self, tp):
        """Whether tp is a partition of this database (a topic deleted or never made: no)."""
        try:
            self.partition_log(tp)
        except (UnknownTopicOrPartitionError, LogClosedError):
            return False
        return True

    def _raise_unknown(self, tp):
        topic = self.metadata.topics.get(tp.topic)
        if self.readonly and topic is not None and 0 <= tp.partition < topic.partitions:
            raise UnknownTopicOrPartitionError(
                f"partition {tp} is in the metadata log but not yet on disk: the writer is "
                "creating it; retry", retriable=True)
        if topic is None:
            raise UnknownTopicOrPartitionError(
                f"topic {tp.topic!r} does not exist; create it with create_topic({tp.topic!r})",
                tp.topic)
        raise UnknownTopicOrPartitionError(
            f"topic {tp.topic!r} has partitions 0..{topic.partitions - 1}, not {tp.partition}")

    def refresh_metadata(self):
        """Read-only: pick up topics created, grown or deleted by the writer, and its
        topic defaults."""
        self.metadata.refresh()
        self._follow_recorded_defaults()
        self._sync_partitions()

    def _follow_recorded_defaults(self):
        """Read-only: the topic defaults the writer recorded are the ones its logs are
        written under (a compact default means the cleaner's gaps), so they replace any given
        to this open; a database without the record keeps those given."""
        recorded = self.metadata.recorded_defaults
        if recorded is not None:
            self.config = self.opened_config.with_recorded_topic_defaults(recorded)

    def _check_open(self):
        if self._closed:
            raise LogClosedError(f"the database {self.root} is closed")

    def _check_writable(self):
        self._check_open()
        if self.readonly:
            raise ReadOnlyError(f"{self.root} was opened read-only; writes go through the "
                                "process that opened it for writing")

    # --- requests: topics ------------------------------------------------------

    def create_topic(self, name, partitions=None, config=None, internal=False, topic_id=None,
                     made_with=()):
        """made_with: the names made by the same CreateTopics request
        (metadata.check_name_free)."""
        self._check_writable()
        with self._lock:
            count = self.config.num_partitions if partitions is None else partitions
            validate_topic_name(name, allow_internal=internal)
            validate_partitions(count)
            if name not in self.metadata.topics:
                self._check_new_partition_dirs(name, 0, count)
            info = self.metadata.create(name, count, config, allow_internal=internal,
                                        topic_id=topic_id, made_with=made_with)
            try:
                self._sync_partitions()
            except Exception as exc:
                # All or nothing: a topic whose directories could not all be made (no
                # descriptor, no space) is deleted again, its directories with it.
                self._undo_create(info, exc)
                if isinstance(exc, OSError):
                    raise storage_error(self.root, exc, f"create topic {name!r} in") from exc
                raise
            return info

    def _undo_create(self, info, cause):
        try:
            self.metadata.delete(info.name, allow_internal=True)
        except StreamlogError as exc:
            # The record stays: the next open makes the missing directories.
            log.warning("creating topic %r failed (%s) and so did deleting it again (%s): "
                        "the next open completes it", info.name, cause, exc)
            return
        self._drop_partitions_locked(info)

    def _drop_partitions_locked(self, info):
        """After info's tombstone: forget its partitions and remove their directories."""
        gone = [TopicPartition(info.name, p) for p in range(info.partitions)]
        self.partitions = {tp: pl for tp, pl in self.partitions.items()
                           if tp.topic != info.name}
        try:
            self.logs.delete_logs(gone)
        except StreamlogError as exc:
            # The tombstone is written: the topic is gone. Its directories, marked by their
            # partition.metadata, are removed by a later create or open.
            log.warning("topic %r deleted; not all of its directories could be removed "
                        "yet (%s): the next open removes them", info.name, exc)
        return gone

    # --- services (higher layers attach to the broker without it importing them) ------

    def attach_service(self, name, factory):
        """The service `name` of this broker, made by factory(broker) on first use.

        The group coordinator lives here: it sits in a higher layer, so the
        broker knows it only as an object to close (before the logs) on close().
        """
        with self._lock:
            self._check_open()
            for existing_name, service in self._services:
                if existing_name == name:
                    return service
            service = factory(self)
            self._services.append((name, service))
            return service

    def delete_topic(self, name, keep_files=False):
        """Delete a topic; then each attached service with an on_topic_deleted(info) hears of
        it, outside the lock (the group coordinator writes tombstones for the groups'
        offsets of its partitions, as Kafka's broker tells its GroupCoordinator
        onPartitionsDeleted).

        keep_files=True takes the topic (internal ones too) out of this broker but keeps its
        data: each partition directory is set aside (LogDirectory.set_aside_logs) before the
        tombstone is written, so no crash leaves a directory the tombstone proves deleted.
        For a cluster broker's topic that its controller does not have and never deleted."""
        self._check_writable()
        with self._lock:
            if keep_files:
                topic = self.metadata.get(name)
                self.logs.set_aside_logs([TopicPartition(name, p)
                                          for p in range(topic.partitions)])
            info = self.metadata.delete(name, allow_internal=keep_files)
            if self.replicas is not None:
                for p in range(info.partitions):
                    self.replicas.forget(TopicPartition(name, p))
            gone = self._drop_partitions_locked(info)
            for tp in gone:
                self.fetch_purgatory.check_and_complete(tp)  # waiting fetches answer now
            services = [service for _, service in self._services]
        for service in services:
            hook = getattr(service, "on_topic_deleted", None)
            if hook is not None:
                hook(info)
        return info

    def create_partitions(self, name, total):
        self._check_writable()
        with self._lock:
            validate_partitions(total)
            current = self.metadata.topics.get(name)
            if current is not None and total > current.partitions:
                self._check_new_partition_dirs(name, current.partitions, total)
            info = self.metadata.add_partitions(name, total)
            self._sync_partitions()
            return info

    def delete_records(self, offsets):
        """{tp: offset} -> {tp: new log start} (Kafka's DeleteRecords): records below each
        offset (-1: the high watermark) become unreadable; their segments go at the next
        retention pass. OffsetOutOfRangeError past the high watermark; PolicyViolationError
        where cleanup.policy lacks "delete" (Kafka's rule: a compacted log keeps each key's
        last record, which moving its start would drop). Every offset is checked before
        any log start moves: a refusal changes nothing."""
        self._check_writable()
        targets = {}
        for tp, offset in offsets.items():
            partition_log = self.partition_log(tp)
            if not partition_log.config.delete:
                raise PolicyViolationError(
                    f"cannot delete records of {tp}: its cleanup.policy is "
                    f"{','.join(partition_log.config.cleanup_policy)}; records are deleted "
                    "only where it holds delete (compact,delete)")
            high_watermark = partition_log.high_watermark
            if not -1 <= offset <= high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {tp} below offset {offset}: it takes an offset "
                    f"in [0, {high_watermark}] (its high watermark), or -1 for the high "
                    "watermark; nothing was deleted", tp.topic, offset)
            targets[partition_log] = tp, high_watermark if offset == -1 else offset
        # A high watermark only grows, so each target checked above is still in range.
        return {tp: partition_log.increase_log_start_offset(target)
                for partition_log, (tp, target) in targets.items()}

    def alter_topic_config(self, name, overrides, remove=()):
        """Set topic config overrides; `remove`: configs taken back to their defaults."""
        self._check_writable()
        with self._lock:
            self.check_config_change(name, overrides, remove)
            info = self.metadata.alter_config(name, overrides, remove)
            for p in range(info.partitions):
                tp = TopicPartition(name, p)
                partition_log = self.partitions.get(tp)
                if partition_log is not None:
                    partition_log.config = info.config
                    self._write_topic_config(tp, info)
            return info

    def check_config_change(self, name, overrides, remove=()):
        """What this broker's logs allow of a config change (a cluster's controller asks
        every live broker before it records one): it refuses to take compaction off a
        topic the cleaner has compacted: its logs hold
        offset gaps, which a log that is not compacted reads as damage (storage/segment.py
        invariant 1). Kafka allows the change; here it waits until density is known per log
        rather than per policy."""
        current = self.topic(name)
        if not current.config.compact:
            return
        changed = self.config.topic_defaults.with_overrides(
            overrides_after(current.overrides, overrides, remove))
        if changed.compact:
            return
        self._refuse_uncompacting(current, "keep compact in cleanup.policy (compact,delete "
                                           "adds retention), or copy the topic to a new one",
                                  scan=True)

    def _check_defaults_keep_compaction(self):
        """At the open, before any log: a topic without a cleanup.policy of its own follows
        the database's default, whose change between opens alter_topic_config never sees."""
        for topic in self.metadata.topics.values():
            if not topic.config.compact:
                self._refuse_uncompacting(
                    topic, "open the database with the cleanup.policy default it had and give "
                    "the topic cleanup.policy=compact (or compact,delete) of its own")

    def _refuse_uncompacting(self, topic, advice, scan=False):
        """InvalidConfigurationError when a partition of topic has been cleaned: its logs
        hold the cleaner's offset gaps, which a log that is not compacted reads as damage
        and which recovery after an unclean stop cuts there, deleting what follows
        (log_loader step 4). The cleaner's checkpoint says so; scan: a partition without
        one (never cleaned, or its cleaner-offset-checkpoint file lost) has its batch
        headers read for a gap, as losing that one file must not cost the data."""
        def cleaned_partition(tp):
            if self.logs.cleaner_checkpoint(tp) is not None:
                return True
            partition_log = self.partitions.get(tp) if scan else None
            return partition_log is not None and partition_log.first_offset_gap() is not None

        cleaned = [p for p in range(topic.partitions)
                   if cleaned_partition(TopicPartition(topic.name, p))]
        if cleaned:
            raise InvalidConfigurationError(
                f"topic {topic.name!r} has been compacted (partitions {cleaned[:5]}): its logs "
                "have offsets the cleaner removed, which a topic without compaction would "
                f"read as missing data; {advice}")

    def topics(self):
        if self.readonly:
            self.refresh_metadata()
        return dict(self.metadata.topics)

    def topic(self, name):
        if self.readonly and name not in self.metadata.topics:
            self.refresh_metadata()
        return self.metadata.get(name)

    def ensure_topic(self, name):
        """The topic, created on first use when auto.create.topics.enable is set."""
        info = self.metadata.topics.get(name)
        if info is None and self.config.auto_create_topics_enable and not self.readonly:
            with self._lock:
                info = self.metadata.topics.get(name)
                if info is None:
                    info = self.create_topic(name)
        return info if info is not None else self.topic(name)

    def describe_topic(self, name):
        info = self.topic(name)
        out = []
        for p in range(info.partitions):
            partition_log = self.partition_log(TopicPartition(name, p))
            if self.readonly:
                partition_log.refresh()
            first_dirty = dirty_ratio = None
            if partition_log.config.compact:
                measured = log_to_clean(partition_log, self.logs.cleaner_checkpoint(
                    TopicPartition(name, p)), self.clock_ms())
                first_dirty, dirty_ratio = measured.first_dirty, measured.dirty_ratio
            out.append(PartitionInfo(
                p, partition_log.log_start_offset, partition_log.high_watermark,
                partition_log.last_stable_offset, partition_log.log_end_offset,
                len(partition_log.segments), partition_log.size_in_bytes, first_dirty,
                dirty_ratio))
        return info, out

    def compact(self, topic=None, wait=True, progress=None):
        """Run a cleaning pass now on every partition of topic (every compacted log when
        None); see cleaner.LogCleaner.compact."""
        self._check_writable()
        if topic == METADATA_TOPIC:
            tps = [METADATA_PARTITION]   # the registry's own log: no topic record of its own
        elif topic is not None:
            info = self.topic(topic)
            if not info.config.compact:
                raise InvalidConfigurationError(
                    f"topic {topic!r} is not compacted (cleanup.policy="
                    f"{','.join(info.config.cleanup_policy)}); set cleanup.policy=compact "
                    "(or compact,delete) to compact it")
            tps = [TopicPartition(topic, p) for p in range(info.partitions)]
        else:
            tps = sorted(tp for tp, pl in self.logs.logs.items() if pl.config.compact)
        return self.cleaner.compact(tps, wait, progress)

    # --- requests: produce ----------------------------------------------------

    def produce(self, tp, data, origin=None, acks=1, verification=UNVERIFIED):
        """Append encoded batches to tp; returns storage's AppendInfo (acks=1 semantics).

        Waiting fetches on tp are checked at once, so a long poll wakes as
        soon as the append returns. origin: who writes, for the producer rules
        (storage.producer_state: a client by default; the coordinators pass theirs).
        verification: the guard start_txn_verification gave a request that had its
        transaction verified. A replicated partition appends on its leader only
        (replica_manager.py); acks=-1 then refuses when too few replicas are in sync.
        """
        self._check_writable()
        if self.replicas is not None:
            # In a cluster every append goes through a replica this broker leads; one whose
            # state has not arrived (a broker starting) has no leader here yet.
            return self.replicas.append(tp, data, origin, acks, verification)
        info = self.partition_log(tp).append(data, origin=origin, verification=verification)
        if self.fetch_purgatory.check_and_complete(tp):
            # A consumer thread was woken: let it have the GIL now rather than after this
            # thread's next switch interval (up to 5 ms), so a long poll returns at once.
            time.sleep(0)
        return info

    def start_txn_verification(self, tp, producer_id):
        """The guard a produce request carries while the transaction coordinator is asked
        whether tp is in producer_id's transaction, or None when a transaction of it is
        open on tp already (storage.producer_state's module doc)."""
        self._check_writable()
        if self.replicas is not None:
            return self.replicas.leader_replica(tp).log.start_verification(producer_id)
        return self.partition_log(tp).start_verification(producer_id)

    def init_producer_id(self):
        """(producer id, epoch) for an idempotent producer: a fresh id, epoch 0 (Kafka's
        InitProducerId without a transactional id)."""
        self._check_writable()
        with self._lock:
            producer_id = next(self._producer_ids, None)
            if producer_id is None:
                # In a cluster the ids must be unique across brokers: the controller's.
                self._producer_ids = iter(self.metadata.allocate_producer_ids()
                                          if self.replicas is None
                                          else self.replicas.allocate_producer_ids())
                producer_id = next(self._producer_ids)
            return producer_id, 0

    def write_txn_markers(self, markers):
        """Append transaction markers (the coordinator's WriteTxnMarkers): markers is
        [(tp, producer id, epoch, coordinator epoch, commit)]; returns {tp: AppendInfo}.
        Waiting read_committed fetches wake: the last stable offset may have moved. In a
        cluster each marker goes to its partition's leader, and is replicated before this
        returns (replica_manager.py's view: cluster.ClusterView.write_txn_markers)."""
        if self.replicas is not None:
            return self.replicas.view.write_txn_markers(markers)
        return self.write_txn_markers_here(markers)

    def write_txn_markers_here(self, markers):
        """write_txn_markers on this broker's own replicas (its leaders, in a cluster)."""
        self._check_writable()
        out = {}
        for tp, producer_id, epoch, coordinator_epoch, commit in markers:
            if self.replicas is not None:
                self.replicas.leader_replica(tp)
            out[tp] = self.partition_log(tp).write_txn_marker(producer_id, epoch,
                                                              coordinator_epoch, commit)
            if self.replicas is not None:
                # As a leader's append: the high watermark moves when the ISR holds the
                # marker (at once with no follower), and waiting followers fetch it now.
                self.replicas.appended_here(tp)
            self.fetch_purgatory.check_and_complete(tp)
        return out

    def when_durable(self, tp, offset, callback):
        """callback(error or None) once tp is fsynced below `offset` (acks="all")."""
        self._check_writable()
        self.flusher.add_waiter(tp, offset, callback)

    # --- requests: fetch --------------------------------------------------------

    def fetch(self, positions, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20,
              partition_max_bytes=1 << 20, max_offsets=None, wakeup_key=None, interrupted=None,
              read_committed=False):
        """Read from each tp at positions[tp]; wait up to max_wait_ms for min_bytes.

        Returns {tp: PartitionFetch}. max_offsets optionally bounds what is
        visible per partition. read_committed: nothing at or above a partition's
        last stable offset is visible, and each answer names the aborted
        transactions its batches may hold (KAFKA_REFERENCE §6.3).
        partition_max_bytes: one limit for every partition, or {tp: limit}
        (a Kafka Fetch names one per partition; ReplicaManager.readFromLocalLog
        reads each within its own, and all within max_bytes). The first
        non-empty partition returns at least one whole batch even above the
        byte limits, as Kafka does. wakeup_key: a key under which
        wakeup(key) ends the wait early; interrupted: a callable that says
        the same (the caller sets its flag, then calls wakeup(key), so a
        wakeup arriving before the wait began is seen too).
        """
        self._check_open()
        if not isinstance(partition_max_bytes, dict):
            partition_max_bytes = dict.fromkeys(positions, partition_max_bytes)
        read = functools.partial(self._read, positions, max_bytes, partition_max_bytes,
                                 max_offsets, read_committed)
        result, total, failed = read()
        if total >= min_bytes or failed or max_wait_ms <= 0:
            return result
        deadline = time.monotonic() + max_wait_ms / 1000
        if self.readonly:
            return self._poll_files(read, deadline, min_bytes, interrupted)
        op = DelayedFetch(max_wait_ms, self.partitions, dict(positions), min_bytes, interrupted,
                          read_committed, partition_max_bytes)
        keys = list(positions) if wakeup_key is None else list(positions) + [wakeup_key]
        if not self.fetch_purgatory.try_complete_else_watch(op, keys):
            # Completion (an append) or expiry (the wheel) always sets `done`;
            # the timeout only guards against a broker closed under the waiter.
            op.done.wait(max_wait_ms / 1000 + 1.0)
        result, _, _ = read()
        return result

    def wakeup(self, wakeup_key):
        """Answer at once every fetch waiting under wakeup_key (see fetch)."""
        for op in self.fetch_purgatory.cancel_for_key(wakeup_key):
            op.woken = True
            op.force_complete()

    def _poll_files(self, read, deadline, min_bytes, interrupted=None):
        step = 0
        while True:
            result, total, failed = read()
            remaining = deadline - time.monotonic()
            if total >= min_bytes or failed or remaining <= 0 or self._closed or (
                    interrupted is not None and interrupted()):
                return result
            time.sleep(min(_READONLY_POLL_S[min(step, len(_READONLY_POLL_S) - 1)], remaining))
            step += 1

    def _read(self, positions, max_bytes, partition_max_bytes, max_offsets, read_committed):
        result = {}
        total = 0
        # What is left of max_bytes, as Kafka's ReplicaManager.readFromLog counts it: a
        # request's max_bytes below 0 reaches the first partition as it is (its read is
        # refused when it has records) and is 0 from the next partition on.
        left = max_bytes
        failed = False
        for tp, offset in positions.items():
            try:
                partition_log = self.partition_log(tp)
                limit = None if max_offsets is None else max_offsets.get(tp)
                if read_committed and self.readonly and \
                        offset >= partition_log.last_stable_offset:
                    partition_log.refresh()  # at what it knows is stable: has a marker come?
                stable = partition_log.last_stable_offset
                if read_committed:
                    limit = stable if limit is None else min(limit, stable)
                budget = min(partition_max_bytes[tp], left)
                fetched = partition_log.read(offset, budget, max_offset=limit,
                                             min_one_batch=total == 0)
                aborted = None
                if read_committed:
                    aborted = partition_log.aborted_transactions(offset, limit) \
                        if fetched.batches and len(partition_log.txn_indexes) else []
                entry = PartitionFetch(fetched.batches, fetched.high_watermark,
                                       fetched.log_start_offset, stable, None, aborted)
                total += entry.size
            except (OffsetOutOfRangeError, UnknownTopicOrPartitionError, LogClosedError,
                    NegativeReadSizeError) as exc:
                # NegativeReadSizeError: a size below 0 that a Kafka client sent; that
                # partition alone fails, as Kafka's ReplicaManager.readFromLog answers any
                # failed read (UNKNOWN_SERVER_ERROR for this one). Any other error is a fault
                # of the read path and is not turned into an error code here. A failed read
                # tells nothing of the partition: high watermark, log start and last stable
                # offset are -1, as Kafka's ReplicaManager.createLogReadResult(e) gives every
                # failed read of a log without tiered storage (handleOffsetOutOfRangeError
                # included), and as KafkaApis then answers them.
                entry = PartitionFetch([], -1, -1, -1, exc)
                failed = True
            result[tp] = entry
            left = max(left - entry.size, 0)
        return result, total, failed

    # --- requests: list offsets ------------------------------------------------

    def list_offsets(self, timestamps, read_committed=False):
        """{tp: timestamp} -> {tp: (offset, timestamp) or None}, as Kafka's ListOffsets.

        timestamp -2 = earliest (log start), -1 = latest (the high watermark, or
        the last stable offset for read_committed, as Kafka answers), -3 = the
        record with the largest timestamp; otherwise the first offset whose
        timestamp is at or after it, or None when there is none. A record found at
        or past what the reader may fetch (the LSO for read_committed) is None too,
        as Kafka's ReplicaManager.fetchOffset answers.
        """
        out = {}
        for tp, ts in timestamps.items():
            partition_log = self.partition_log(tp)
            if self.readonly:
                partition_log.refresh()
            if ts == EARLIEST_TIMESTAMP:
                out[tp] = (partition_log.log_start_offset, -1)
            elif ts == LATEST_TIMESTAMP:
                out[tp] = (partition_log.last_stable_offset if read_committed
                           else partition_log.high_watermark, -1)
            elif ts < 0 and ts != MAX_TIMESTAMP:
                raise ValueError(f"timestamp {ts} is not -1, -2, -3 or a time in ms")
            else:
                found = _offset_of_max_timestamp(partition_log) if ts == MAX_TIMESTAMP \
                    else partition_log.find_offset_by_timestamp(ts)
                # find_offset_by_timestamp stops at the high watermark already.
                if found is not None and read_committed and \
                        found[0] >= partition_log.last_stable_offset:
                    found = None
                out[tp] = found
        return out

    # --- background jobs (run on the flusher thread) ----------------------------

    def apply_retention(self):
        """The retention check (log.retention.check.interval.ms). A compacted log's is the
        cleaner thread's, run between its passes (LogCleaner.owns_retention): here it would
        remove segments a pass is reading and make the cleaner throw the pass away."""
        now_ms = self.clock_ms()
        cleaner = self.cleaner
        for tp, partition_log in list(self.partitions.items()):
            if not partition_log.closed:
                if cleaner is None or not cleaner.owns_retention(tp, partition_log):
                    partition_log.delete_old_segments(now_ms)
                partition_log.delete_pending_files(now_ms)
        if cleaner is not None:
            cleaner.request_retention()

    def write_checkpoints(self):
        self.logs.checkpoint()

    def expire_producers(self):
        """Forget producer ids idle past producer.id.expiration.ms (KAFKA_REFERENCE §5)."""
        now_ms = self.clock_ms()
        for partition_log in list(self.partitions.values()):
            if not partition_log.closed:
                partition_log.expire_producers(now_ms)

    def flush_on_time(self):
        for partition_log in list(self.partitions.values()):
            if not partition_log.closed:
                partition_log.maybe_flush_on_time()

    # --- lifecycle -------------------------------------------------------------------

    @property
    def closed(self):
        return self._closed

    def crash(self):
        """Stop as a killed process does: threads stopped, files closed unflushed, no
        clean-shutdown marker; the next open recovers (a cluster's broker kill)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.replicas is not None:
            self.replicas.close(checkpoint=False)
        for _, service in reversed(self._services):
            try:
                service.close()
            except Exception:
                log.exception("closing a broker service failed")
        for tp in list(self.partitions):
            for op in self.fetch_purgatory.cancel_for_key(tp):
                op.force_complete()
        self.fetch_purgatory.shutdown()
        self._abandon()

    def close(self):
        """Drain, answer waiting fetches, stop the threads, seal the logs, release the lock."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.replicas is not None:
            self.replicas.close()
        for _, service in reversed(self._services):
            try:
                service.close()
            except Exception:
                log.exception("closing a broker service failed")
        if self.cleaner is not None:
            self.cleaner.close()  # no pass may run while the logs close
        self.appender.close()  # before the flusher: a late append may still wait on an fsync
        if self.flusher is not None:
            self.flusher.close()
        for tp in list(self.partitions):
            for op in self.fetch_purgatory.cancel_for_key(tp):
                op.force_complete()  # wake the consumer threads waiting in fetch
        self.fetch_purgatory.shutdown()
        self.timer.close()
        try:
            self.logs.close()  # on a full disk this fails; the stop is then an unclean one
            self.partitions = {}  # closed: see LogDirectory.close
        finally:
            if self._dir_lock is not None:
                self._dir_lock.release()
            if self.temporary:
                shutil.rmtree(self.root, ignore_errors=True)


def _offset_of_max_timestamp(partition_log):
    # By the records' timestamps alone, as Kafka's fetchOffsetByTimestamp(MAX_TIMESTAMP)
    # picks its segment by maxTimestampSoFar: a file's mtime (largest_timestamp's stand-in
    # for retention) is no record's.
    best = None
    for segment in partition_log.segments:
        if segment.size and (best is None or segment.max_timestamp > best[1]):
            best = (segment, segment.max_timestamp)
    if best is None:
        return None
    return partition_log.find_offset_by_timestamp(best[1])


@contextlib.contextmanager
def _collection_paused():
    """Hold off the cyclic garbage collector while thousands of partitions open.

    Each partition leaves a few hundred long-lived objects and no cycles to collect; the
    collector, triggered by allocation counts, would walk all of them again and again (a
    quarter of a 10,000-partition open). Reference counting frees as usual meanwhile; the
    collector's previous state comes back at the end.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
