"""The open database handle: `streamlog.open()` and what it returns.

A Database is a handle onto a Broker (shared by every handle on the same
directory in this process, see broker.registry): it administers topics and
makes producers and consumers. Closing the handle closes the producers and
consumers it made; the broker closes when its last handle does.
"""
import logging
import os
import shutil
import tempfile
import threading
from typing import NamedTuple

from ..broker import registry
from ..broker.broker import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Broker,
                             PartitionInfo)  # noqa: F401 - PartitionInfo: public as streamlog's
from ..broker.cleaner import CompactionResult  # noqa: F401 - public as streamlog.CompactionResult
from ..broker.repair import RepairReport, repair as _repair
from ..coordinator.group_coordinator import delete_topic
from ..coordinator.transaction_coordinator import find_transaction_coordinator, has_transactions
from ..errors import InvalidConfigurationError, InvalidTopicError, LogClosedError, ReadOnlyError
from . import group_admin
from .config import ISOLATION_LEVELS
from .consumer import Consumer, OffsetAndTimestamp
from .producer import Producer
from .validation import by_topic_partition

MEMORY = ":memory:"
log = logging.getLogger("streamlog")
# list_offsets()'s specs, the names of Kafka's OffsetSpec (and of kafka-get-offsets' --time).
OFFSET_SPECS = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP,
                "max-timestamp": MAX_TIMESTAMP}


class TopicDescription(NamedTuple):
    name: str
    topic_id: str
    internal: bool
    partitions: list  # [PartitionInfo]
    config: dict      # every topic config, Kafka names -> effective values
    overrides: dict   # only the configs set on this topic


def open(path=None, readonly=False, config=None):  # noqa: A001 - the API's name, as sqlite3.connect
    """Open (creating if needed) the database in directory `path`.

    path None or ":memory:" makes a throw-away temporary directory, removed
    on close. readonly=True opens a database another process writes: no lock,
    no writes, reads see what the writer appends. config: database settings
    (see broker.config), only honoured by the first open of a directory in
    this process; a later open there with a different config is refused
    (InvalidConfigurationError).
    """
    temporary = path is None or path == MEMORY
    if temporary:
        if readonly:
            raise InvalidConfigurationError("a temporary database cannot be opened read-only")
        path = tempfile.mkdtemp(prefix="streamlog-")
    path = os.fspath(path)
    made = []

    def make():
        made.append(True)
        return Broker(path, readonly=readonly, config=config, temporary=temporary)
    try:
        broker = registry.acquire(path, readonly, make)
    except BaseException:
        if temporary:
            shutil.rmtree(path, ignore_errors=True)
        raise
    if config and not made and broker.opened_config != Broker.config_from(config):
        _let_go(broker)
        raise InvalidConfigurationError(
            f"{path} is already open in this process with a different config; open it without "
            "config= to share that broker")
    if made and not readonly and has_transactions(broker):
        # Transactions a stop left half-completed are finished, and open ones time out,
        # whether or not a transactional producer comes back (docs/TRANSACTIONS.md).
        try:
            find_transaction_coordinator(broker)
        except BaseException:
            # The broker this open made is closed again: its threads stopped, the
            # directory's lock let go for the next open.
            try:
                _let_go(broker)
            except Exception:
                log.exception("closing %s after its open failed", path)
            raise
    return Database(broker)


def _let_go(broker):
    """Drop one open's reference to broker, closing it when that was the last."""
    if registry.release(broker):
        broker.close()


def repair(path, dry_run=False) -> RepairReport:
    """Rebuild the metadata log of the database at `path` from its partition directories.

    For a database whose metadata log is damaged or gone: topics the log lost
    come back with the names, partition counts, ids and configs their
    directories record. Deletes nothing (the old log is renamed aside) and
    needs the writer's lock: close the database first. dry_run=True only
    reports. `report.lines()` says what was done and what could not be
    recovered, and why.
    """
    return _repair(os.fspath(path), dry_run=dry_run)


class Database:
    def __init__(self, broker):
        self._broker = broker
        self._children = []
        self._lock = threading.Lock()
        self._closed = False

    # --- properties ---------------------------------------------------------------

    @property
    def path(self):
        return self._broker.root

    @property
    def readonly(self):
        return self._broker.readonly

    @property
    def closed(self):
        return self._closed

    @property
    def unexplained_paths(self):
        """Directories under the database named like partitions that no topic explains:
        kept as they are (never deleted), found by the writable open."""
        return list(self._broker.unexplained_paths)

    def __repr__(self):
        mode = "read-only" if self.readonly else "read-write"
        return f"<streamlog.Database {self.path} ({mode}{', closed' if self._closed else ''})>"

    def _check(self):
        if self._closed:
            raise LogClosedError("the database handle is closed")

    # --- topics ----------------------------------------------------------------------

    def create_topic(self, name, partitions=1, config=None):
        """Create a topic; config uses Kafka's topic config names. Returns its description."""
        self._check()
        self._broker.create_topic(name, partitions, config)
        return self.describe_topic(name)

    def delete_topic(self, name):
        self._check()
        delete_topic(self._broker, name)

    def delete_records(self, offsets):
        """Make each partition's records below an offset unreadable, as Kafka's
        Admin.deleteRecords: {tp: offset}, -1 meaning the high watermark -> {tp: the new log
        start offset} (Broker.delete_records: a refusal changes nothing). The segments below
        go at the next retention pass."""
        self._check()
        offsets = by_topic_partition(offsets, "delete_records()")
        for tp, offset in offsets.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise TypeError(f"delete_records() takes an int offset for {tp}, not "
                                f"{offset!r}")
            if self._broker.topic(tp.topic).internal:
                # The coordinators' own topics, as the wire's DeleteRecords refuses them.
                raise InvalidTopicError(f"cannot delete records of internal topic {tp.topic}")
        # An unknown partition is the broker's refusal, before any log start moves.
        return self._broker.delete_records(offsets)

    def list_offsets(self, specs, isolation_level="read_uncommitted"):
        """{tp: spec} -> {tp: OffsetAndTimestamp or None}, as Kafka's Admin.listOffsets.

        spec: "earliest" (the log start), "latest" (the high watermark, or the last stable
        offset under read_committed), "max-timestamp" (the record with the largest
        timestamp) or a time in ms (the first record at or after it). earliest and latest
        answer timestamp -1, as Kafka does; None where no record matches (a time past the
        last record, max-timestamp of an empty log, or a record read_committed may not
        read yet)."""
        self._check()
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"list_offsets() takes isolation_level {' or '.join(ISOLATION_LEVELS)}"
                             f", not {isolation_level!r}")
        timestamps = {}
        for tp, spec in by_topic_partition(specs, "list_offsets()", "spec").items():
            if isinstance(spec, str) and spec in OFFSET_SPECS:
                timestamps[tp] = OFFSET_SPECS[spec]
            elif isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
                timestamps[tp] = spec
            else:
                raise ValueError(f"list_offsets() takes {', '.join(map(repr, OFFSET_SPECS))} or a "
                                 f"time in ms (an int >= 0) for {tp}, not {spec!r}")
        found = self._broker.list_offsets(
            timestamps, read_committed=isolation_level == "read_committed")
        return {tp: None if v is None else OffsetAndTimestamp(*v) for tp, v in found.items()}

    def add_partitions(self, name, total):
        """Grow the topic to `total` partitions (counts only grow, as in Kafka)."""
        self._check()
        self._broker.create_partitions(name, total)
        return self.describe_topic(name)

    def alter_topic_config(self, name, config):
        """Set topic configs (Kafka names); the others keep their values."""
        self._check()
        self._broker.alter_topic_config(name, config)
        return self.describe_topic(name)

    def topics(self, internal=False):
        """Names of the topics, sorted (internal ones only with internal=True)."""
        self._check()
        return sorted(name for name, info in self._broker.topics().items()
                      if internal or not info.internal)

    def describe_topic(self, name):
        self._check()
        info, partitions = self._broker.describe_topic(name)
        return TopicDescription(info.name, info.topic_id, info.internal, list(partitions),
                                info.config.to_dict(), dict(info.overrides))

    def compact(self, topic=None, wait=True, progress=None):
        """Run a log cleaning pass now on every partition of `topic` (a compacted topic),
        or on every compacted log of the database when None (docs/COMPACTION.md).

        The active segment is rolled first, so everything written so far may be cleaned;
        min.compaction.lag.ms and open transactions still hold records back. With wait,
        returns [CompactionResult] once every pass is done; else None at once. A result's
        stats is None when its pass did nothing; its aborted then says why, when the log
        changed under every pass tried (retention, DeleteRecords) or was deleted.
        progress(nbytes): called from the cleaner thread as each segment is read.
        """
        self._check()
        if self.readonly:
            raise ReadOnlyError("a read-only database cannot compact; open it for writing")
        return self._broker.compact(topic, wait, progress)

    def serve(self, host="127.0.0.1", port=0):
        """A Kafka wire-protocol server on this database, in background threads: Kafka's own
        clients connect to `server.bootstrap_servers` (port 0: a free port). Closed with
        the handle, or by server.close(). What it serves so far: docs/SERVER.md."""
        self._check()
        if self.readonly:
            raise ReadOnlyError("a read-only database cannot serve Kafka clients; open it for "
                                "writing")
        # Imported here: the server's codec (kio) is needed only by a database that serves
        # (and kio imports hypothesis where installed, which pytest plugins must not do early).
        from ..server import KafkaServer
        server = KafkaServer(self._broker, host, port)
        self._adopt(server)
        return server

    # --- consumer groups -------------------------------------------------------------------

    def list_groups(self):
        """[GroupListing(group_id, state, protocol_type)] of every known group, sorted."""
        self._check()
        return group_admin.list_groups(self._broker)

    def describe_group(self, group_id):
        """State, members and their assignments, committed offsets and lag of one group.

        Returns a GroupDescription; GroupIdNotFoundError if no consumer has
        joined the group and it has no committed offsets.
        """
        self._check()
        return group_admin.describe_group(self._broker, group_id)

    def delete_group(self, group_id):
        """Forget a group with no active member and its committed offsets."""
        self._check()
        group_admin.delete_group(self._broker, group_id)

    def delete_group_offsets(self, group_id, partitions):
        """Forget a group's committed offsets of some partitions (Kafka's OffsetDelete): not
        those of a topic a member of the group subscribes to (GroupSubscribedToTopicError,
        raised once the others are deleted)."""
        self._check()
        group_admin.delete_group_offsets(self._broker, group_id, partitions)

    def alter_group_offsets(self, group_id, offsets):
        """Set committed offsets ({tp: offset | OffsetAndMetadata}) of a group with no active
        member (NonEmptyGroupError otherwise)."""
        self._check()
        group_admin.alter_group_offsets(self._broker, group_id, offsets)

    def reset_group_offsets(self, group_id, partitions, strategy, value=None, dry_run=False):
        """Move a group's committed offsets as kafka-consumer-groups --reset-offsets does.

        strategy: "earliest", "latest", "offset" (value = the offset),
        "datetime" (value = ms since the epoch) or "shift" (value = +/-
        records); targets are clamped into each partition's [log start, log
        end]. Returns {tp: new offset}; with dry_run=True nothing changes.
        """
        self._check()
        plan = group_admin.plan_offset_reset(self._broker, group_id, partitions, strategy, value)
        if not dry_run:
            group_admin.alter_group_offsets(self._broker, group_id, plan)
        return plan

    # --- clients ------------------------------------------------------------------------

    def producer(self, config=None, **settings):
        """A Producer (see client.producer for settings; Kafka names accepted in config)."""
        self._check()
        if self.readonly:
            raise ReadOnlyError("a read-only database cannot make producers; open it for writing")
        producer = Producer(self._broker, config, **settings)
        self._adopt(producer)
        return producer

    def consumer(self, config=None, **settings):
        """A Consumer (see client.consumer for settings; Kafka names accepted in config)."""
        self._check()
        consumer = Consumer(self._broker, config, **settings)
        self._adopt(consumer)
        return consumer

    # --- lifecycle ---------------------------------------------------------------------

    def _adopt(self, child):
        """Keep child (a producer, consumer or server) to close with the handle; those closed
        already are let go, or a long-lived handle would keep every client it ever made."""
        with self._lock:
            self._children = [c for c in self._children if not c.closed]
            self._children.append(child)

    def close(self):
        """Close the producers (flushing them) and consumers made here, then the handle."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            children, self._children = self._children, []
        errors = []
        for child in children:
            try:
                child.close()
            except Exception as exc:  # keep closing the rest; report the first
                errors.append(exc)
        _let_go(self._broker)
        if errors:
            raise errors[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
