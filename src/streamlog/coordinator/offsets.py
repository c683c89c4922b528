"""Committed offsets and group records, kept in the internal topic `__consumer_offsets`.

As in Kafka, the store is a compacted topic: every commit appends records
keyed by (group, topic, partition), every generation of a group appends a
record keyed by the group, and a null value (tombstone) deletes either. The
topic has offsets.topic.num.partitions partitions (Kafka: 50) and a group's
records all go to partition abs(javaHashCode(group)) % n, Kafka's rule, so
one group's history is one ordered stream. Opening the database replays the
topic into memory; reads are then dictionary lookups.

Record layout (msgpack; the leading number is the key's type, like Kafka's
key version, and each value starts with its own version):

    offset commit   key [1, group, topic, partition]
                    value [2, offset, metadata, commit_timestamp_ms, leader_epoch]
                    (version 1 values, without the epoch, are read too)
    group           key [2, group]
                    value [2, protocol_type, generation, protocol, leader,
                           state_timestamp_ms, member_count, members]
                    members: [[member_id, group_instance_id, client_id,
                               assignment]], assignment [[topic, partition]...]
                    (or the bytes of a protocol other than "consumer");
                    version 1 values (no members) are read too

A transactional producer's offsets (send_offsets_to_transaction) are
written as a transactional batch with its producer id and epoch. They are
pending -- invisible to committed() -- until the transaction's COMMIT marker
lands in the same partition, and dropped at an ABORT, or when a plain
commit or a tombstone of the same offset is written after them, or another
transaction's offset of a later record commits first (Kafka's
OffsetMetadataManager keeps the record written last); a replay reaches the
same result (keyed_log), as does one after compaction.

The group record exists so that, after a restart, a group keeps its
generation and the time it became Empty (offsets expire that long after,
offsets.retention.minutes), and so that a reader (`streamlog groups
describe` from another process) sees the members of the generation the
writer's group is in, as Kafka's GroupMetadataValue lists them. A reopened
writer has every group Empty: its members were threads and connections of
the process that stopped.

Thread-safety: the coordinator calls this under its own lock.
"""
import functools
from typing import NamedTuple

import msgpack

from ..errors import CorruptRecordError
from ..storage.keyed_log import encode_changes, end_transaction, hold, replay, supersede
from ..storage.producer_state import UNVERIFIED
from ..structs import TopicPartition
from . import internal_appends
from .java_order import java_string_hash

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 104857600}

# Kafka's offsets.commit.timeout.ms: how long a commit waits for its replicas.
OFFSETS_COMMIT_TIMEOUT_MS = 5000

_INT_MAX, _INT_MIN_BITS = (1 << 31) - 1, 1 << 31   # Java's Integer.MAX_VALUE, MIN_VALUE's bits

_OFFSET_KEY, _GROUP_KEY = 1, 2
_VALUE_VERSION = 2   # 2: the committed leader epoch (KIP-320)
_GROUP_VALUE_VERSION = 2   # 2: the members' ids, client ids and assignments


class CommittedOffset(NamedTuple):
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1


class GroupRecord(NamedTuple):
    """What the log remembers of a group between runs."""

    protocol_type: object      # "consumer", or None for offsets-only (standalone) groups
    generation: int
    protocol: object
    leader: object
    state_timestamp: int       # when this record was written
    member_count: int
    members: tuple = ()        # ((member_id, group_instance_id, client_id, assignment),)


def _assignment_out(assignment):
    if isinstance(assignment, (bytes, bytearray, memoryview)):
        return bytes(assignment)   # a protocol other than "consumer": its own bytes
    return [[tp[0], tp[1]] for tp in assignment]


def _assignment_in(assignment):
    if isinstance(assignment, bytes):
        return assignment
    return [TopicPartition(topic, partition) for topic, partition in assignment]


def partition_for(group_id, partitions):
    """Kafka's Utils.abs(groupId.hashCode()) % partitions (GroupMetadataManager.partitionFor,
    TransactionStateManager.partitionFor); Utils.abs maps Integer.MIN_VALUE to 0.

    Uncached: a scan over every id (a coordinator partition loaded or unloaded) calls this,
    so that it neither pays a cache's bookkeeping for ids met once nor evicts the ids of
    the requests in flight."""
    h = java_string_hash(group_id)   # unsigned: above 2**31 the int is negative in Java
    return (h if h <= _INT_MAX else 0 if h == _INT_MIN_BITS else (1 << 32) - h) % partitions


# The same for a request's one id: every coordinator request asks again for its id's
# partition, which a hit answers in ~0.1 us against ~1.5 us for the hash.
cached_partition_for = functools.lru_cache(maxsize=4096)(partition_for)


def _pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


def _offset_key(group_id, tp):
    return _pack([_OFFSET_KEY, group_id, tp.topic, tp.partition])


def _group_key(group_id):
    return _pack([_GROUP_KEY, group_id])


def _unreplicated(end_offset):
    """The key under which a commit waiting for its replicas is held among the pending
    changes: negative, so never a producer id, and one per batch (its end offset)."""
    return -end_offset


def _offset_changes(group_id, offsets, now_ms):
    """(key, value) of each offset commit record; offsets: {TopicPartition:
    OffsetAndMetadata}, stamped now_ms (a plain and a transactional commit alike)."""
    return [(_offset_key(group_id, tp),
             _pack([_VALUE_VERSION, om.offset, om.metadata, now_ms, om.leader_epoch]))
            for tp, om in offsets.items()]


class OffsetStore:
    """Every group's committed offsets and group record, in memory and in the log."""

    def __init__(self, broker):
        self._broker = broker
        self.offsets = {}      # group -> {TopicPartition: CommittedOffset}
        self.groups = {}       # group -> GroupRecord
        self._replayed = {}    # partition of OFFSETS_TOPIC -> next offset to replay
        # partition -> {producer id: [(key, value, timestamp, record offset)]}:
        # transactional offsets waiting for their transaction's marker (keyed_log.hold),
        # and, under _unreplicated(end offset), a cluster's commits waiting for replicas.
        self.pending = {}
        self.partitions = 0
        if OFFSETS_TOPIC in broker.topics():
            self.partitions = broker.topic(OFFSETS_TOPIC).partitions
            self.refresh()

    # --- the topic -------------------------------------------------------------

    def _ensure_topic(self):
        if not self.partitions:
            # A cluster's controller makes the topic (replicated) before any group request
            # reaches this broker; a database on its own makes it here, on first use.
            info = self._broker.topics().get(OFFSETS_TOPIC) or self._broker.create_topic(
                OFFSETS_TOPIC, self._broker.config.offsets_topic_num_partitions,
                OFFSETS_TOPIC_CONFIG, internal=True)
            self.partitions = info.partitions

    def partition_of(self, group_id):
        self._ensure_topic()
        return TopicPartition(OFFSETS_TOPIC, cached_partition_for(group_id, self.partitions))

    def reload_partition(self, partition):
        """Forget what came from `partition` and replay it from its start: a cluster's
        broker that now leads it (its replica may have been truncated under what was
        replayed before). Returns the groups whose records live there."""
        self._ensure_topic()
        mine = {g for g in self.known_groups() if partition_for(g, self.partitions) == partition}
        for group in mine:
            self.offsets.pop(group, None)
            self.groups.pop(group, None)
        self.pending[partition] = {}
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        self._replayed[partition] = replay(self._broker.partition_log(tp), 0,
                                           lambda k, v, _ts: self._apply(tp, k, v),
                                           pending=self.pending[partition], to_log_end=True)
        return mine | {g for g in self.known_groups()
                       if partition_for(g, self.partitions) == partition}

    def refresh(self):
        """Apply records appended since the last look (a read-only reader follows the writer)."""
        if not self.partitions and OFFSETS_TOPIC in self._broker.topics():
            self.partitions = self._broker.topic(OFFSETS_TOPIC).partitions
        for p in range(self.partitions):
            tp = TopicPartition(OFFSETS_TOPIC, p)
            partition_log = self._broker.partition_log(tp)
            if self._broker.readonly:
                partition_log.refresh()
            self._replayed[p] = replay(partition_log, self._replayed.get(p, 0),
                                       lambda k, v, _ts, tp=tp: self._apply(tp, k, v),
                                       pending=self.pending.setdefault(p, {}))

    def _apply(self, tp, key_bytes, value_bytes):
        try:
            key = msgpack.unpackb(key_bytes, raw=False)
            value = None if value_bytes is None else msgpack.unpackb(value_bytes, raw=False)
            if key[0] == _OFFSET_KEY:
                _, group, topic, partition = key
                committed = self.offsets.setdefault(group, {})
                at = TopicPartition(topic, partition)
                if value is None:
                    committed.pop(at, None)
                    if not committed:
                        del self.offsets[group]
                else:
                    committed[at] = CommittedOffset(*value[1:5])
            elif key[0] == _GROUP_KEY:
                group = key[1]
                if value is None:
                    self.groups.pop(group, None)
                else:
                    members = value[7] if value[0] >= 2 else ()
                    self.groups[group] = GroupRecord(*value[1:7], members=tuple(
                        (member_id, instance, client_id, _assignment_in(assignment))
                        for member_id, instance, client_id, assignment in members))
            # Other key types belong to later versions: skipped, as Kafka skips unknown keys.
        except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException) as exc:
            raise CorruptRecordError(f"undecodable record in {tp}: {exc}") from None

    # --- writing -----------------------------------------------------------------

    def _append(self, group_id, changes, now_ms, until_replicated=False):
        """Write changes as one batch and apply them; returns (partition of the topic, its
        end offset after them), for wait_replicated. until_replicated: in a cluster, held
        as pending (the open transactions' way) until settle() says whether the in-sync
        replicas took them."""
        tp = self.partition_of(group_id)
        # An offset commit is appended as Kafka's coordinator appends it, with acks=all; a
        # group record with acks=1, applied at once (the group coordinator does not wait
        # on it: docs/GROUPS.md).
        info = internal_appends.append(self._broker, tp, encode_changes(changes, now_ms),
                                       acks_all=until_replicated)
        end_offset = info.last_offset + 1
        pending = self.pending.setdefault(tp.partition, {})
        if until_replicated and internal_appends.replicated(self._broker, tp):
            hold(pending, _unreplicated(end_offset),
                 [(key, value, now_ms, record_offset)
                  for record_offset, (key, value) in enumerate(changes, info.first_offset)])
        else:
            # Applied from the records just written: memory is exactly what a replay gives.
            for record_offset, (key, value) in enumerate(changes, info.first_offset):
                if pending:
                    supersede(pending, key, record_offset)
                self._apply(tp, key, value)
        self._replayed[tp.partition] = self._broker.partition_log(tp).log_end_offset
        return tp, end_offset

    def commit(self, group_id, offsets, now_ms):
        """offsets: {TopicPartition: OffsetAndMetadata}; one batch, so all or nothing.
        Returns (partition of the topic, its end offset after the batch), for
        wait_replicated and then settle; None when there was nothing to write. In a
        cluster the offsets stay pending until settle(), as Kafka's
        GroupMetadata.prepareOffsetCommit keeps them until the acks=all append ends:
        OffsetFetch does not answer them, and with require_stable answers
        UNSTABLE_OFFSET_COMMIT for them."""
        changes = _offset_changes(group_id, offsets, now_ms)
        return self._append(group_id, changes, now_ms, until_replicated=True) \
            if changes else None

    def settle(self, tp, end_offset, replicated):
        """A commit's wait_replicated ended: its offsets become the committed ones, in log
        order (GroupMetadata.onOffsetCommitAppend), or are dropped (failPendingOffsetWrite).
        Nothing to do on a database on its own, where commit applied them."""
        end_transaction(self.pending.setdefault(tp.partition, {}), _unreplicated(end_offset),
                        replicated, lambda key, value, _ts: self._apply(tp, key, value))

    def wait_replicated(self, tp, end_offset, timeout_ms=OFFSETS_COMMIT_TIMEOUT_MS):
        """In a cluster, wait until the in-sync replicas hold tp below end_offset, as
        Kafka's coordinator appends commits with acks=all: a commit answered is one the
        next coordinator finds. NotCoordinatorError when this broker lost the partition,
        CoordinatorNotAvailableError when too few replicas are in sync or the wait timed
        out (Kafka's GroupMetadataManager maps the append's errors so). A database on its
        own: nothing to wait for."""
        internal_appends.wait_replicated(self._broker, tp, end_offset, timeout_ms / 1000)

    def commit_transactional(self, group_id, offsets, producer_id, producer_epoch, now_ms,
                             verification=UNVERIFIED):
        """Write offsets inside producer_id's open transaction: pending until its marker.
        Returns (partition, its end offset after the batch) for wait_durable; None when
        there was nothing to write."""
        changes = _offset_changes(group_id, offsets, now_ms)
        if not changes:
            return None
        tp = self.partition_of(group_id)
        info = internal_appends.append(
            self._broker, tp, encode_changes(changes, now_ms, producer_id, producer_epoch),
            verification=verification)
        hold(self.pending.setdefault(tp.partition, {}), producer_id,
             [(key, value, now_ms, record_offset)
              for record_offset, (key, value) in enumerate(changes, info.first_offset)])
        self._replayed[tp.partition] = self._broker.partition_log(tp).log_end_offset
        return tp, info.last_offset + 1

    def wait_durable(self, tp, end_offset):
        """A transaction's offsets are part of its data, which must be durable before its
        PrepareCommit (docs/TRANSACTIONS.md): held by the in-sync replicas in a cluster
        (wait_replicated), fsynced on a database on its own. A plain commit is not fsynced:
        losing one to a power loss only replays records, as at-least-once allows; losing a
        transaction's would replay records whose outputs the transaction committed."""
        if internal_appends.replicated(self._broker, tp):
            self.wait_replicated(tp, end_offset)
        else:
            self._broker.partition_log(tp).flush_to(end_offset)

    def complete_transaction(self, tp, producer_id, commit):
        """The transaction's marker was written to tp: its offsets apply, or are dropped."""
        end_transaction(self.pending.setdefault(tp.partition, {}), producer_id, commit,
                        lambda key, value, _ts: self._apply(tp, key, value))
        self._replayed[tp.partition] = self._broker.partition_log(tp).log_end_offset

    def offset_partitions(self, group_id):
        """The TopicPartitions for which group_id has an offset: committed, or pending (a
        tombstone deletes both)."""
        return set(self.committed(group_id)) | self.pending_partitions(group_id)

    def pending_partitions(self, group_id):
        """The TopicPartitions for which group_id has an offset pending: in an open
        transaction, or in a commit waiting for its replicas (committed() does not show
        it yet)."""
        return {tp for group, tp in self._pending_offsets() if group == group_id}

    def offsets_of_topic(self, topic):
        """{group: {TopicPartition}}: every group's offsets of the topic's partitions,
        committed or pending."""
        out = {}
        for group, committed in self.offsets.items():
            for tp in committed:
                if tp.topic == topic:
                    out.setdefault(group, set()).add(tp)
        for group, tp in self._pending_offsets():
            if tp.topic == topic:
                out.setdefault(group, set()).add(tp)
        return out

    def _pending_offsets(self):
        """(group, TopicPartition) of each offset pending (pending_partitions)."""
        for producers in self.pending.values():
            for held in producers.values():
                for key, *_ in held:
                    kind, group, *where = msgpack.unpackb(key, raw=False)
                    if kind == _OFFSET_KEY:
                        yield group, TopicPartition(*where)

    def write_group(self, group_id, record, now_ms):
        *fields, members = record
        self._append(group_id, [(_group_key(group_id), _pack(
            [_GROUP_VALUE_VERSION, *fields,
             [[member_id, instance, client_id, _assignment_out(assignment)]
              for member_id, instance, client_id, assignment in members]]))], now_ms)

    def delete(self, group_id, partitions, now_ms, group_record=False):
        """Tombstones for the group's offsets of `partitions` (and its group record).
        Returns (partition of the topic, its end offset after them), for wait_replicated;
        None when there was nothing to write."""
        changes = [(_offset_key(group_id, tp), None) for tp in partitions]
        if group_record and group_id in self.groups:
            changes.append((_group_key(group_id), None))
        return self._append(group_id, changes, now_ms) if changes else None

    # --- reading -------------------------------------------------------------------

    def committed(self, group_id):
        """{TopicPartition: CommittedOffset} of the group (a live view; do not change it)."""
        return self.offsets.get(group_id, {})

    def known_groups(self):
        return set(self.offsets) | set(self.groups)
