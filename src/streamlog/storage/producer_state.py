"""Producer state of one partition, and its `<offset>.snapshot` files.

What idempotence and transactions need to know about each producer id that wrote
to the partition (Kafka's ProducerStateManager): its epoch, the metadata of its
last 5 batches (the window in which a retried batch is recognised and answered
with its original offsets), its last timestamp (expiration) and the first offset
of its open transaction. The partition log asks `check` before an append and
calls `apply` after it, both under its append lock, so every writer -- the
in-process producer, a wire client, the coordinator's markers -- is judged by
the same rules (KAFKA_REFERENCE.md §5).

Snapshot file (Kafka's ProducerSnapshot, version 1, all big-endian):
    int16 version | uint32 CRC-32C of every byte after it | int32 count |
    count x {int64 producer id, int16 epoch, int32 last sequence,
             int64 last offset, int32 offset delta, int64 timestamp,
             int32 coordinator epoch, int64 current txn first offset (-1: none)}
Only the last batch of each producer is kept, as in Kafka: after a restart a
retry of an older batch of the window is refused as out of order, not answered.
A snapshot named N holds the state of every batch below offset N.

When the log writes snapshots (see partition_log): at a roll (at the new base)
and at a clean close (at the log end), but only once the log has seen a
producer id: a log never written by an idempotent producer has no snapshot, and
"no snapshot" then means "no producer" -- the absence Kafka also reads that way
after a clean shutdown. The first batch with a producer id writes an empty
snapshot at its own offset first, so a crash after it rebuilds from there, not
from the log start.

Thread-safety: none of its own; the partition log's append lock covers it.
"""
import os
import struct
from collections import deque
from typing import NamedTuple

from ..errors import (CorruptRecordError, InvalidProducerEpochError, InvalidTxnStateError,
                      KafkaStorageError, OutOfOrderSequenceError)
from . import codec, files
from .durable import read_whole, write_atomically
from .record_batch import NO_PRODUCER_EPOCH, NO_SEQUENCE

NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms
INT32_MAX = 2**31 - 1
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hIi")          # version, crc, count
_ENTRY = struct.Struct(">qhiqiqiq")      # 46 bytes, see the module doc
_CRC_FROM = 6                            # the CRC covers everything after itself


class BatchMetadata(NamedTuple):
    """One appended batch as the producer state remembers it."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self):
        return _wrap(self.last_seq - self.offset_delta)

    @property
    def first_offset(self):
        return self.last_offset - self.offset_delta


class ProducerEntry:
    """The state of one producer id in one partition."""

    __slots__ = ("producer_id", "epoch", "batches", "coordinator_epoch", "last_timestamp",
                 "txn_first_offset")

    def __init__(self, producer_id, epoch=NO_PRODUCER_EPOCH, batches=(), coordinator_epoch=-1,
                 last_timestamp=-1, txn_first_offset=-1):
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches = deque(batches, maxlen=NUM_BATCHES_TO_RETAIN)
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.txn_first_offset = txn_first_offset  # -1: no open transaction

    def copy(self):
        return ProducerEntry(self.producer_id, self.epoch, self.batches, self.coordinator_epoch,
                             self.last_timestamp, self.txn_first_offset)

    @property
    def last_seq(self):
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self):
        return self.batches[-1].last_offset if self.batches else -1

    def duplicate_of(self, epoch, first_seq, last_seq):
        """The retained batch with exactly these sequences under this epoch, else None."""
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta.last_seq == last_seq and meta.first_seq == first_seq:
                return meta
        return None

    def set_epoch(self, epoch):
        """A new epoch starts a new sequence: the old epoch's batches are forgotten."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()

    def __eq__(self, other):
        return isinstance(other, ProducerEntry) and all(
            getattr(self, a) == getattr(other, a) for a in self.__slots__)

    def __repr__(self):
        return (f"ProducerEntry(pid={self.producer_id}, epoch={self.epoch}, "
                f"batches={list(self.batches)}, txn_first_offset={self.txn_first_offset})")


class ProducerBatch(NamedTuple):
    """What the producer state reads of a batch that carries a producer id."""

    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int
    first_offset: int      # as the log assigns it
    last_offset: int
    max_timestamp: int
    is_transactional: bool
    is_control: bool

    @property
    def offset_delta(self):
        return self.last_offset - self.first_offset


def producer_batch(batch, first_offset):
    """ProducerBatch of a RecordBatch header that will sit at first_offset."""
    return ProducerBatch(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                         batch.last_sequence, first_offset, first_offset + batch.last_offset_delta,
                         batch.max_timestamp, batch.is_transactional, batch.is_control)


def in_sequence(last_seq, next_seq):
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def _wrap(seq):
    """A sequence below 0 reached by subtraction wraps to the top of int32, as it counts."""
    return seq if seq >= 0 else seq + INT32_MAX + 1


class ProducerState:
    """Every producer id of one partition, up to map_end_offset."""

    def __init__(self, directory, expiration_ms):
        self.directory = directory
        self.expiration_ms = expiration_ms
        self.producers = {}
        self.map_end_offset = 0     # every batch below it is reflected
        self.snapshot_offsets = []  # offsets of the snapshot files on disk, ascending

    # --- the append path ------------------------------------------------------

    def check(self, batches, client=True):
        """Judge the producer batches of one append (ProducerBatch each, in order) as a client's.
        client=False: batches that bring their own offsets (a replica's, a repair's) are
        taken as they are, as Kafka takes a replica's: no duplicate, epoch or sequence rule.

        Returns (updated entries by producer id, None), to give apply() once the batches are
        written; or (None, the BatchMetadata of the batch this request repeats): a retry of
        a batch still in its producer's window, to be answered with the original offsets and
        not written. Raises InvalidProducerEpochError, OutOfOrderSequenceError,
        InvalidTxnStateError.
        """
        updated = {}
        if not client:
            for b in batches:
                if b.producer_id not in updated:
                    current = self.producers.get(b.producer_id)
                    updated[b.producer_id] = current.copy() if current is not None else \
                        ProducerEntry(b.producer_id)
                _replay(updated[b.producer_id], b)
            return updated, None
        for b in batches:
            current = self.producers.get(b.producer_id)
            if current is not None:
                duplicate = current.duplicate_of(b.epoch, b.first_seq, b.last_seq)
                if duplicate is not None:
                    return None, duplicate
            entry = updated.get(b.producer_id)
            if entry is None:
                entry = current.copy() if current is not None else ProducerEntry(b.producer_id)
                updated[b.producer_id] = entry
            self._check_epoch(entry, b)
            self._check_sequence(current, entry, b)
            if entry.txn_first_offset >= 0 and not b.is_transactional:
                raise InvalidTxnStateError(
                    f"producer {b.producer_id} wrote a non-transactional batch while its "
                    f"transaction (from offset {entry.txn_first_offset}) is open")
            _add(entry, b)
        return updated, None

    @staticmethod
    def _check_epoch(entry, b):
        if b.epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {b.producer_id} wrote with epoch {b.epoch}, older than its current "
                f"epoch {entry.epoch}: a newer instance of this producer fenced it; close it")

    @staticmethod
    def _check_sequence(current, entry, b):
        if b.epoch != entry.epoch:
            if b.first_seq != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {b.producer_id} began epoch {b.epoch} at sequence "
                    f"{b.first_seq}; a new epoch starts at 0")
            return
        if current is None or current.epoch == NO_PRODUCER_EPOCH:
            return  # a producer this partition has no state for may start anywhere
        if not in_sequence(entry.last_seq, b.first_seq):
            raise OutOfOrderSequenceError(
                f"producer {b.producer_id} (epoch {b.epoch}) sent sequence {b.first_seq} after "
                f"{entry.last_seq}: a batch in between is missing")

    def apply(self, updated, end_offset):
        """Take the entries check() returned, once their batches are in the log below
        end_offset."""
        self.producers.update(updated)
        self.map_end_offset = end_offset

    def replay(self, b):
        """Take a ProducerBatch read back from the log (recovery): no checks."""
        entry = self.producers.get(b.producer_id)
        if entry is None:
            entry = self.producers[b.producer_id] = ProducerEntry(b.producer_id)
        _replay(entry, b)

    # --- expiration -----------------------------------------------------------------

    def expire(self, now_ms):
        """Forget producers idle for producer.id.expiration.ms with no open transaction."""
        gone = [pid for pid, e in self.producers.items()
                if e.txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    # --- snapshots ------------------------------------------------------------------

    @property
    def has_history(self):
        """True once the log has seen a producer id: it keeps snapshots from then on."""
        return bool(self.producers) or bool(self.snapshot_offsets)

    def take_snapshot(self, offset=None):
        """Write the state as `<map end offset>.snapshot` (KafkaStorageError if it cannot)."""
        offset = self.map_end_offset if offset is None else offset
        if self.snapshot_offsets and self.snapshot_offsets[-1] == offset:
            return
        write_atomically(files.snapshot_file(self.directory, offset),
                         encode_snapshot(self.producers.values()))
        self.snapshot_offsets.append(offset)
        self.snapshot_offsets.sort()

    def load(self, snapshot_offsets, end_offset, now_ms):
        """Start from the newest readable snapshot at or below end_offset; returns its offset
        (where the caller replays the log from) or None when no snapshot is usable. Snapshots
        above end_offset (a truncated tail) and unreadable ones are deleted, as Kafka does."""
        self.snapshot_offsets = sorted(snapshot_offsets)
        self.producers = {}
        for offset in [o for o in self.snapshot_offsets if o > end_offset]:
            self._delete_snapshot(offset)
        while self.snapshot_offsets:
            offset = self.snapshot_offsets[-1]
            path = files.snapshot_file(self.directory, offset)
            try:
                entries = decode_snapshot(read_whole(path), path)
            except (OSError, CorruptRecordError):
                self._delete_snapshot(offset)
                continue
            self.producers = {e.producer_id: e for e in entries}
            self.map_end_offset = offset
            self.expire(now_ms)
            return offset
        self.map_end_offset = 0
        return None

    def delete_snapshots_below(self, offset):
        """Retention removed the log below offset: its older snapshots go with it; the
        newest at or below offset stays (a rebuild starts there)."""
        keep = max((o for o in self.snapshot_offsets if o <= offset), default=None)
        for old in [o for o in self.snapshot_offsets if o < offset and o != keep]:
            self._delete_snapshot(old)

    def _delete_snapshot(self, offset):
        try:
            os.remove(files.snapshot_file(self.directory, offset))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise KafkaStorageError(f"cannot delete producer snapshot {offset} in "
                                    f"{self.directory}: {exc}") from exc
        self.snapshot_offsets.remove(offset)


def _replay(entry, b):
    if b.is_control:
        # A transaction marker ends the producer's transaction (and may carry a new epoch).
        if b.epoch > entry.epoch:
            entry.set_epoch(b.epoch)
        entry.txn_first_offset = -1
        entry.last_timestamp = b.max_timestamp
        return
    _add(entry, b)


def _add(entry, b):
    entry.set_epoch(b.epoch)
    entry.batches.append(BatchMetadata(b.last_seq, b.last_offset, b.offset_delta,
                                       b.max_timestamp))
    entry.last_timestamp = b.max_timestamp
    if b.is_transactional and entry.txn_first_offset < 0:
        entry.txn_first_offset = b.first_offset


def encode_snapshot(entries):
    body = bytearray(_HEADER.pack(SNAPSHOT_VERSION, 0, 0))
    count = 0
    for e in entries:
        last = e.batches[-1] if e.batches else BatchMetadata(NO_SEQUENCE, -1, 0, e.last_timestamp)
        body += _ENTRY.pack(e.producer_id, e.epoch, last.last_seq, last.last_offset,
                            last.offset_delta, last.timestamp, e.coordinator_epoch,
                            e.txn_first_offset)
        count += 1
    struct.pack_into(">i", body, _CRC_FROM, count)
    struct.pack_into(">I", body, 2, codec.crc32c(memoryview(body)[_CRC_FROM:]))
    return bytes(body)


def decode_snapshot(data, path=None):
    """[ProducerEntry] of a snapshot file's bytes; CorruptRecordError if they are not one."""
    if len(data) < _HEADER.size:
        raise CorruptRecordError(f"producer snapshot of {len(data)} bytes is too short", path)
    version, crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptRecordError(f"producer snapshot version {version} is not "
                                 f"{SNAPSHOT_VERSION}", path)
    actual = codec.crc32c(memoryview(data)[_CRC_FROM:])
    if actual != crc:
        raise CorruptRecordError(f"producer snapshot CRC {actual:#010x} does not match the "
                                 f"stored {crc:#010x}", path)
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptRecordError(f"producer snapshot claims {count} entries in {len(data)} "
                                 "bytes", path)
    entries = []
    for i in range(count):
        (pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch,
         txn_first) = _ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size)
        batches = [] if last_offset < 0 else [BatchMetadata(last_seq, last_offset, delta,
                                                            timestamp)]
        entries.append(ProducerEntry(pid, epoch, batches, coordinator_epoch, timestamp,
                                     txn_first))
    return entries
