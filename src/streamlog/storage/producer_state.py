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

Transaction verification (Kafka's KIP-890 part 1, on by default since 3.6): a wire
client's transactional batch that would open a transaction on this partition is taken
only with the guard `start_verification` gave its request before the request asked
the transaction coordinator whether the partition is in the producer's transaction.
Any transactional batch or marker of that producer appended meanwhile drops the guard,
so a request verified before its transaction was aborted cannot open another one that
no coordinator knows of (its LSO would be stuck for good). Guards live in memory only,
as Kafka's VerificationStateEntry.

Thread-safety: none of its own; the partition log's append lock covers it.
"""
import logging
import os
import struct
from collections import deque
from typing import NamedTuple

from ..errors import (CorruptRecordError, InvalidProducerEpochError, InvalidRecordError,
                      InvalidTxnStateError, KafkaStorageError, OutOfOrderSequenceError,
                      TransactionCoordinatorFencedError)
from . import codec, files
from .durable import read_whole, write_atomically
from .record_batch import (CONTROL_ABORT, CONTROL_COMMIT, NO_PRODUCER_EPOCH, NO_SEQUENCE,
                           iter_batches)

# Who wrote a batch (Kafka's AppendOrigin): a client is held to every rule, a coordinator
# (markers, transactional offsets) to the epoch rule, a replica (or a repair) to none.
CLIENT, COORDINATOR, REPLICA = "client", "coordinator", "replica"

# check(verification=UNVERIFIED): the append does not take part in transaction verification
# (the in-process producer, which adds its partitions to the transaction before it appends).
UNVERIFIED = object()

log = logging.getLogger("streamlog.storage")

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
    control_type: int      # CONTROL_ABORT / CONTROL_COMMIT of a marker, else -1
    coordinator_epoch: int = -1   # a COMMIT/ABORT marker's, else -1

    @property
    def offset_delta(self):
        return self.last_offset - self.first_offset


def producer_batch(batch, first_offset, verified=False):
    """ProducerBatch of a RecordBatch header that will sit at first_offset; verified: its
    CRC was checked already (an append's validation), so a marker's is not again."""
    control_type, coordinator_epoch = batch.end_txn_marker(verify=not verified) \
        if batch.is_control else (-1, -1)
    return ProducerBatch(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                         batch.last_sequence, first_offset, first_offset + batch.last_offset_delta,
                         batch.max_timestamp, batch.is_transactional, batch.is_control,
                         control_type, coordinator_epoch)


class CompletedTxn(NamedTuple):
    """A transaction a marker in an append ends."""

    producer_id: int
    first_offset: int
    marker_offset: int
    aborted: bool


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
        self.ongoing = {}           # producer id -> first offset of its open transaction
        self.map_end_offset = 0     # every batch below it is reflected
        self.snapshot_offsets = []  # offsets of the snapshot files on disk, ascending
        self.verifications = {}     # producer id -> (guard, ms): verifications in flight

    # --- the append path ------------------------------------------------------

    def start_verification(self, producer_id, now_ms):
        """The guard a request carries through the coordinator's check of its transaction
        (Kafka's maybeStartTransactionVerification): None when the producer has a
        transaction open here already (nothing to verify; an append then needs it still
        open). One guard per producer until a batch of it is appended."""
        if producer_id in self.ongoing:
            return None
        guard = self.verifications.get(producer_id)
        if guard is None:
            guard = self.verifications[producer_id] = (object(), now_ms)
        return guard[0]

    def check(self, batches, origin=CLIENT, verification=UNVERIFIED):
        """Judge the producer batches of one append (ProducerBatch each, in order).

        origin: CLIENT (every rule), COORDINATOR (markers and transactional offsets: the
        epoch and transaction rules, no sequences) or
        REPLICA (batches that bring their own offsets: taken as they are, as Kafka takes a
        replica's).

        Returns (updated entries by producer id, None, [CompletedTxn]), to give apply()
        once the batches are written; or (None, the BatchMetadata of the batch this request
        repeats, None): a client's retry of a batch still in its producer's window, to be
        answered with the original offsets and not written. verification: the guard from
        start_verification (or None) of a request that verified its transaction, which a
        client's batch opening a transaction here must still hold. Raises
        InvalidProducerEpochError, OutOfOrderSequenceError, InvalidTxnStateError,
        InvalidRecordError (a marker from a client).
        """
        updated, completed = {}, []
        for b in batches:
            current = self.producers.get(b.producer_id)
            if origin == CLIENT and current is not None:
                duplicate = current.duplicate_of(b.epoch, b.first_seq, b.last_seq)
                if duplicate is not None:
                    return None, duplicate, None
            entry = updated.get(b.producer_id)
            if entry is None:
                entry = current.copy() if current is not None else ProducerEntry(b.producer_id)
                updated[b.producer_id] = entry
            if origin == REPLICA:
                _replay(entry, b, completed)
                continue
            if b.is_control:
                if origin == CLIENT:
                    raise InvalidRecordError("a client may not write a control batch; "
                                             "transaction markers come from the coordinator")
                self._check_epoch(entry, b)
                self._check_coordinator_epoch(entry, b)
                _replay(entry, b, completed)
                continue
            if verification is not UNVERIFIED and b.is_transactional and \
                    entry.txn_first_offset < 0:
                self._check_verified(b, verification)
            self._check_epoch(entry, b)
            if origin == CLIENT:
                # The group coordinator's transactional offsets carry no sequence of their
                # own (Kafka's TxnOffsetCommit): only a client's batches are numbered.
                self._check_sequence(current, entry, b)
            if entry.txn_first_offset >= 0 and not b.is_transactional:
                raise InvalidTxnStateError(
                    f"producer {b.producer_id} wrote a non-transactional batch while its "
                    f"transaction (from offset {entry.txn_first_offset}) is open")
            _add(entry, b)
        return updated, None, completed

    def _check_verified(self, b, guard):
        held = self.verifications.get(b.producer_id)
        if guard is None or held is None or held[0] is not guard:
            raise InvalidTxnStateError(
                f"producer {b.producer_id}'s transactional batch is not part of an ongoing "
                "transaction: its partition was not added to the transaction, or the "
                "transaction ended before the batch arrived")

    @staticmethod
    def _check_epoch(entry, b):
        if b.epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {b.producer_id} wrote with epoch {b.epoch}, older than its current "
                f"epoch {entry.epoch}: a newer instance of this producer fenced it; close it")

    @staticmethod
    def _check_coordinator_epoch(entry, b):
        # A marker of a coordinator that lost its partition of __transaction_state to a
        # newer one (a killed broker's EndTxn still running) would end whatever transaction
        # the producer has open now: refused, as Kafka's checkCoordinatorEpoch.
        if b.control_type in (CONTROL_ABORT, CONTROL_COMMIT) and \
                b.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"a marker of producer {b.producer_id} from coordinator epoch "
                f"{b.coordinator_epoch}, older than the {entry.coordinator_epoch} of the last "
                "marker here: a newer coordinator took over its transactions")

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
        for entry in updated.values():
            self._track(entry)
            # A batch of the producer is in: its transaction here is open (or just ended),
            # and a guard taken before that must not let a later request open another.
            self.verifications.pop(entry.producer_id, None)
        self.map_end_offset = end_offset

    def _track(self, entry):
        if entry.txn_first_offset >= 0:
            self.ongoing[entry.producer_id] = entry.txn_first_offset
        else:
            self.ongoing.pop(entry.producer_id, None)

    def replay(self, b):
        """Take a ProducerBatch read back from the log (recovery): no checks."""
        entry = self.producers.get(b.producer_id)
        if entry is None:
            entry = self.producers[b.producer_id] = ProducerEntry(b.producer_id)
        _replay(entry, b, [])
        self._track(entry)

    def follow(self, batch):
        """A read-only view's replay of one batch the writer appended (each once, in order):
        only which transactions are open (the LSO) is kept. Returns (producer id, first
        offset, marker offset, last stable offset) for an ABORT marker that ends an open
        transaction -- the .txnindex entry the writer made for it -- else None."""
        if batch.last_offset < self.map_end_offset:
            return None
        self.map_end_offset = batch.next_offset
        pid = batch.producer_id
        if pid < 0:
            return None
        if batch.is_control:
            first = self.ongoing.pop(pid, None)
            if first is None or batch.control_type() != CONTROL_ABORT:
                return None
            stable = min(self.ongoing.values(), default=batch.base_offset + 1)
            return pid, first, batch.base_offset, stable
        if batch.is_transactional and pid not in self.ongoing:
            self.ongoing[pid] = batch.base_offset
        return None

    def load_readonly(self, snapshot_offsets, end_offset):
        """A read-only view's start: the open transactions of the newest readable snapshot
        at or below end_offset (deleting nothing); returns its offset, or None."""
        for offset in sorted((o for o in snapshot_offsets if o <= end_offset), reverse=True):
            path = files.snapshot_file(self.directory, offset)
            try:
                entries = decode_snapshot(read_whole(path), path)
            except (OSError, CorruptRecordError):
                continue  # the writer may be replacing it, or it is damaged: an older one
            self.ongoing = {e.producer_id: e.txn_first_offset for e in entries
                            if e.txn_first_offset >= 0}
            self.map_end_offset = offset
            return offset
        return None

    def first_unstable_offset(self):
        """The first offset of the oldest open transaction, or None (the LSO's bound)."""
        return min(self.ongoing.values(), default=None)

    def stable_offsets(self, batches, completed):
        """{marker offset: the LSO once that marker is written} for the transactions
        `completed` that `batches` (one append's, in offset order, not applied yet) end:
        the first offset of the oldest other open transaction at the marker, else the
        offset after it (Kafka's lastStableOffset(completedTxn)). A follower appends many
        batches at once: transactions they open before a marker count, and those they end
        before it do not, so each entry is the one its leader wrote."""
        ending = {txn.marker_offset for txn in completed}
        open_txns = dict(self.ongoing)
        stable = {}
        for batch in batches:
            if batch.is_control:
                if batch.first_offset in ending:
                    others = [o for pid, o in open_txns.items() if pid != batch.producer_id]
                    stable[batch.first_offset] = min(others) if others else \
                        batch.first_offset + 1
                open_txns.pop(batch.producer_id, None)
            elif batch.is_transactional and batch.producer_id not in open_txns:
                open_txns[batch.producer_id] = batch.first_offset
        return stable
    # --- expiration -----------------------------------------------------------------

    def expire(self, now_ms):
        """Forget producers idle for producer.id.expiration.ms with no open transaction."""
        gone = [pid for pid, e in self.producers.items()
                if e.txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms]
        for pid in gone:
            del self.producers[pid]
        for pid in [p for p, (_, ms) in self.verifications.items()
                    if now_ms - ms >= self.expiration_ms]:
            del self.verifications[pid]   # a request that never came back to append
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

    def load(self, snapshot_offsets, end_offset, now_ms, start_offset=0):
        """Start from the newest readable snapshot in [start_offset, end_offset]; returns its
        offset (where the caller replays the log from) or None when no snapshot is usable.
        Deleted, as Kafka does: snapshots above end_offset (a truncated tail), below
        start_offset (the log start moved past them: they hold producers of deleted data,
        and replaying from them would skip the batches between), and corrupt ones."""
        self.snapshot_offsets = sorted(snapshot_offsets)
        self.producers = {}
        self.verifications = {}   # taken against a state this replaces
        self.ongoing = {}   # a rebuild from the log start must not keep a truncated tail's
        for offset in [o for o in self.snapshot_offsets if o > end_offset or o < start_offset]:
            self._delete_snapshot(offset)
        while self.snapshot_offsets:
            offset = self.snapshot_offsets[-1]
            path = files.snapshot_file(self.directory, offset)
            try:
                entries = decode_snapshot(read_whole(path), path)
            except FileNotFoundError:
                self.snapshot_offsets.remove(offset)
                continue
            except CorruptRecordError as exc:
                log.warning("%s; deleting it and using an older one", exc.reason)
                self._delete_snapshot(offset)
                continue
            except OSError as exc:
                # Not damage (EMFILE, EIO): a snapshot is only deleted when it is corrupt.
                raise KafkaStorageError(f"cannot read {path}: {exc}") from exc
            self.producers = {e.producer_id: e for e in entries}
            self.ongoing = {}
            for entry in entries:
                self._track(entry)
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

    def remove_stray_snapshots(self, snapshot_offsets, segment_bases):
        """At a writer's open: the snapshots left at no segment's base go, but the newest
        of them when it lies above every base (a clean close's, at the log end), as
        Kafka's LogLoader does (ProducerStateManager.removeStraySnapshots). A cleaner swap
        cut short by a crash leaves its merged-away segments' snapshots behind. Returns
        the offsets kept."""
        bases = set(segment_bases)
        stray = sorted(o for o in snapshot_offsets if o not in bases)
        if stray and bases and stray[-1] > max(bases):
            stray.pop()   # the newest, above every base: kept
        self.snapshot_offsets = sorted(snapshot_offsets)
        for offset in stray:
            self._delete_snapshot(offset)
        return list(self.snapshot_offsets)

    def delete_snapshots_at(self, offsets):
        """Segments at these bases left the log, merged into others by the cleaner: their
        snapshots go (Kafka's UnifiedLog.deleteProducerSnapshots). A rebuild starts at the
        newest one, which a pass never removes (the active segment's is never merged)."""
        for offset in set(offsets) & set(self.snapshot_offsets):
            self._delete_snapshot(offset)

    def truncate_fully(self):
        """The log was emptied (a replica restarted at its leader's log start): every
        producer and snapshot goes, as in Kafka's truncateFullyAndStartAt."""
        for offset in list(self.snapshot_offsets):
            self._delete_snapshot(offset)
        self.producers = {}
        self.ongoing = {}
        self.verifications = {}

    def _delete_snapshot(self, offset):
        try:
            os.remove(files.snapshot_file(self.directory, offset))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise KafkaStorageError(f"cannot delete producer snapshot {offset} in "
                                    f"{self.directory}: {exc}") from exc
        self.snapshot_offsets.remove(offset)


def highest_producer_id(directory):
    """The highest producer id the partition in directory knows of, or -1: from its
    snapshots and the batches after the newest (before it, an id is in that snapshot or
    expired). For `streamlog repair`, when the metadata log's producer id mark is lost."""
    listing = files.list_directory(directory)
    highest = -1
    for offset in listing.snapshot_offsets:
        path = files.snapshot_file(directory, offset)
        try:
            entries = decode_snapshot(read_whole(path), path)
        except (OSError, CorruptRecordError):
            continue
        highest = max([highest] + [e.producer_id for e in entries])
    if not listing.snapshot_offsets:
        return highest  # no snapshot: no producer id ever wrote here (module doc)
    newest = listing.snapshot_offsets[-1]
    bases = [b for b in listing.bases if b >= newest] or listing.bases[-1:]
    below = [b for b in listing.bases if b < newest]
    for base in below[-1:] + bases:
        with open(files.log_file(directory, base), "rb") as f:
            data = f.read()
        for batch in iter_batches(data):
            highest = max(highest, batch.producer_id)
    return highest


def _replay(entry, b, completed):
    if b.is_control:
        # A transaction marker ends the producer's transaction (and may carry a new epoch).
        if b.control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
            return  # a control type this version does not know: Kafka skips it too
        if entry.txn_first_offset >= 0:
            completed.append(CompletedTxn(b.producer_id, entry.txn_first_offset, b.first_offset,
                                          b.control_type == CONTROL_ABORT))
        if b.epoch > entry.epoch:
            entry.set_epoch(b.epoch)
        entry.coordinator_epoch = b.coordinator_epoch
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
        # The producer's last timestamp, a marker's too (Kafka's writeSnapshot): its
        # expiry counts from it, not from its last data batch.
        body += _ENTRY.pack(e.producer_id, e.epoch, last.last_seq, last.last_offset,
                            last.offset_delta, e.last_timestamp, e.coordinator_epoch,
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
