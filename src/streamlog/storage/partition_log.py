"""A partition's log: ordered segments, offsets, high watermark, retention and flushing.

Invariants:
  1. Offsets are dense on append: each batch gets base offset = log end
     offset (LEO) and LEO moves past its last offset. Segments never overlap
     and are kept sorted by base offset.
  2. log_start_offset <= high_watermark <= LEO, and log_start_offset never
     decreases. With one replica the high watermark is the LEO as soon as an
     append returns (acks=1 semantics); durability is tracked separately by
     the recovery point.
  3. recovery_point <= LEO, and everything below it was fsynced: after an
     unclean stop only segments from the one holding it need re-validating.
     Recovery rebuilds those segments' indexes, so a flush (acks="all") fsyncs
     the log files only and leaves the last segment's indexes to the page
     cache; the indexes of the segments below the one holding the recovery
     point are msynced before that point reaches the checkpoint file
     (checkpoint_recovery_point). The checkpointed point never stays above a
     truncation: the cut lowers it before anything is appended after it.
  4. Retention deletes whole segments, oldest first, stopping at the first
     one that must stay, never one that reaches past the high watermark, and
     never the last remaining segment (a new empty one is rolled first).
  5. A deleted segment's files are renamed `.deleted` and closed only after
     file.delete.delay.ms, so a reader that picked the segment up just
     before keeps a valid file descriptor.

Thread-safety: append, roll, retention and truncation hold `_lock`; flush
holds `_flush_lock` and takes `_lock` only to snapshot, so appends continue
while a flush waits on the disk (many appends share one fsync). Reads take no
lock: they work on a snapshot of the segment list, and a segment's readable
size only grows after its bytes are written.

On a crash: see log_loader (recovery from the recovery point).
"""
import bisect
import contextlib
import logging
import os
import threading
import time
from typing import NamedTuple

from ..errors import (CorruptInputBatchError, CorruptRecordError, InvalidRecordError,
                      InvalidTimestampError, KafkaStorageError, LogClosedError,
                      NotLeaderOrFollowerError, OffsetOutOfRangeError, ReadOnlyError,
                      RecordBatchTooLargeError, RecordTooLargeError,
                      UnknownTopicOrPartitionError)
from ..parsing import LONG_MAX
from . import files
from .durable import fsync_dir
from .file_records import IncompleteBatch
from .leader_epoch_cache import LeaderEpochCache
from .log_cleaner import CleanerSnapshot
from .log_loader import SWAP_WAITS, list_directory, load_log, settled_listing
from .open_files import OpenSegments
from .record_batch import (CONTROL_ABORT, CONTROL_COMMIT, CREATE_TIME, LOG_APPEND_TIME,
                           LOG_OVERHEAD, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD, RecordBatch,
                           build_control_batch, iter_batches, recompressed, set_max_timestamp)
from .producer_state import (CLIENT, COORDINATOR, DEFAULT_PRODUCER_ID_EXPIRATION_MS, REPLICA,
                             UNVERIFIED, ProducerState, producer_batch)
from .segment import BatchInfo, LogSegment, open_readonly_segments
from .txn_index import AbortedTxn, TxnIndexes

log = logging.getLogger("streamlog.storage")

# How many times a read-only view's read looks at the directory again when a segment file it
# was about to read vanished (the writer's cleaner or retention removed it meanwhile). Each
# time means the writer changed the log under the read; a cleaner rewriting a small log
# back to back can win the race more than once.
_VANISHED_RETRIES = 5


# The leader epoch of a log that is not replicated (a database on its own, a cluster's
# internal topics): its one leader leads it in epoch 0 for ever, as Metadata tells clients.
# Every batch it gives offsets to (a client's, a coordinator's, a marker) is stamped so, as
# Kafka's leader stamps its epoch on every batch it appends (LogValidator, appendAsLeader):
# kept as sent, an epoch the client made up (or one from a leader it wrote to before)
# became the epoch a consumer commits with its position and validates it with (KIP-320),
# which OffsetForLeaderEpoch here answers unknown: the Java consumer takes that for a
# truncation and resets its position (SubscriptionState.maybeCompleteValidation). Batches
# copied with their offsets keep theirs. Batches written before with -1 (none) read as they
# did: readers do not look at the field.
UNREPLICATED_LEADER_EPOCH = 0


def wall_clock_ms():
    return int(time.time() * 1000)


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    record_count: int
    batch_count: int
    size: int


class FetchData(NamedTuple):
    """Whole batches starting with the one that holds the fetch offset."""

    batches: list
    high_watermark: int
    log_start_offset: int
    log_end_offset: int

    @property
    def size(self):
        return sum(b.size_in_bytes for b in self.batches)


class NegativeReadSizeError(ValueError):
    """A read asked for fewer than 0 bytes where there was something to read (Kafka's
    LogSegment.read refuses it: IllegalArgumentException)."""


class _MissingOffsets(CorruptRecordError):
    """Offsets inside the log that no segment holds (see PartitionLog._read)."""


def _holding(bases, offset):
    """Index in bases (segment base offsets, ascending) of the segment holding offset (the
    first, when offset is below them all)."""
    return max(bisect.bisect_right(bases, offset) - 1, 0)


def _timestamp_errors(records, now_ms, window, skip):
    """Kafka's LogValidator.validateTimestamp on a CreateTime topic: each record's timestamp
    (but NO_TIMESTAMP, -1) at most `before` ms before now_ms and `after` ms after it. Returns
    [(index, why)] of the records outside, but those in `skip` (refused for their key: the
    first of a record's errors is the one Kafka names). Only a topic that sets a window pays
    for decoding the records: the header's maxTimestamp cannot bound the smallest one (a
    record may be older than the batch's first)."""
    before, after = window
    timestamps = records.timestamps
    lag = now_ms - timestamps
    bad = ((lag > before) | (-lag > after)) & (timestamps != NO_TIMESTAMP)
    if not bad.any():
        return []
    allowed = _allowed_timestamps(now_ms, before, after)
    return [(i, f"timestamp {int(timestamps[i])} should be {allowed}")
            for i in bad.nonzero()[0].tolist() if i not in skip]


def _refuse_records(keyless, late, name):
    """Refuse a batch for its records' errors, every one named (Kafka's LogValidator
    .processRecordErrors): INVALID_TIMESTAMP if a timestamp is among them, else
    INVALID_RECORD."""
    record_errors = sorted(keyless + late)
    if late:
        index, why = late[0]
        raise InvalidTimestampError(
            f"record {index} of a batch for {name} is out of range: its {why} "
            "(message.timestamp.before.max.ms / after.max.ms of the topic, at this append)",
            record_errors)
    raise InvalidRecordError(
        f"compacted topic partition {name} cannot accept a record without a key; give every "
        "record a key, or use cleanup.policy=delete", record_errors)


def _allowed_timestamps(now_ms, before, after):
    """The timestamps a window allows at now_ms, in words. A side left unbounded (Long.MAX
    ms, the default) is not named: its bound would lie past what a timestamp can be."""
    if before == LONG_MAX:
        return f"at most {now_ms + after}"
    if after == LONG_MAX:
        return f"at least {now_ms - before}"
    return f"within [{now_ms - before}, {now_ms + after}]"


class PartitionLog:
    def __init__(self, directory, config, *, recovery_point=0, log_start_offset=None,
                 clean_shutdown=False, readonly=False, clock_ms=wall_clock_ms,
                 log_start_checkpoint=None, root_entry=None, open_files=None,
                 producer_id_expiration_ms=DEFAULT_PRODUCER_ID_EXPIRATION_MS, listing=None,
                 saved_end=None):
        """log_start_offset: the checkpointed log start, None if unknown (see load_log).
        log_start_checkpoint: where the log start is kept durably (read() -> offset or None,
        write(offset)); retention writes it before removing a segment, so a missing first
        segment can be told from a deleted one, and DeleteRecords before it returns. A
        read-only view reads it at each refresh (cheaply: see _writer_log_start). None:
        nowhere (a log on its own).
        root_entry: the log's place in its root (None: a log on its own):
        lower_recovery_point(offset), which a truncation calls at once (invariant 3), and
        sync_name(), which the first flush calls: a new directory's name in the root must
        be durable before anything acknowledged is only in it.
        open_files: the root's bound on open files (open_files.OpenSegments); None: the log
        has one of its own, unbounded.
        producer_id_expiration_ms: how long a producer id's state outlives its last write
        (Kafka's broker setting producer.id.expiration.ms).
        listing: the directory's files.SegmentListing as the last clean close saved it, the
        directory unchanged since (saved_listings.py); None lists it. saved_end: the end of
        its last segment saved with it (saved_listings.take)."""
        self.directory = directory
        self._log_start_checkpoint = log_start_checkpoint
        self._root_entry = root_entry
        self._open_files = open_files if open_files is not None else OpenSegments()
        self.config = config
        self.readonly = readonly
        self.clock_ms = clock_ms
        self.name = os.path.basename(directory)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        loaded = load_log(directory, config, recovery_point=recovery_point,
                          log_start_offset=log_start_offset, clean_shutdown=clean_shutdown,
                          readonly=readonly, now_ms=clock_ms(), open_files=self._open_files,
                          listing=listing, saved_end=saved_end)
        self._segments = loaded.segments
        self._bases = [s.base_offset for s in self._segments]
        self._next_offset = loaded.next_offset
        self.high_watermark = loaded.next_offset
        self.log_start_offset = loaded.log_start_offset
        self.recovery_point = loaded.recovery_point
        # Offset in the first segment whose indexes may hold entries not yet msynced
        # (invariant 3): the segments below the one holding it have durable indexes.
        self._index_sync_point = loaded.recovery_point
        self._truncations = 0   # a flush that straddles a truncation advances nothing
        self.recovery_report = loaded.report
        # The directory's files besides segments when it was opened (writer): what the
        # broker needs to know of them at open, without a stat each (topic.json).
        self.other_files_at_open = loaded.other_names
        if readonly and loaded.report.missing_head:
            # The writer's retention may have moved the start since this view read it.
            self.log_start_offset = max(self.log_start_offset, self._writer_log_start(False))
            if self.log_start_offset >= self._bases[0]:
                loaded.report.missing_head = None
        self._pending_deletes = []  # (deadline_ms, segment)
        self._unflushed_records = 0
        self._last_flush_ms = clock_ms()
        # The base of the newest segment a roll made: what is below it is sealed and waits
        # for the flusher's next pass (maybe_flush_on_time).
        self._sealed_end = 0
        # The first flush fsyncs the directory: a new log's segment files (or the directory
        # itself) may be new names not yet durable.
        self._dir_dirty = not readonly
        self._closed = False
        self._tail = (None, 0, 0)  # read-only: (segment, position, next offset) scanned
        self.producer_state = ProducerState(directory, producer_id_expiration_ms)
        self.txn_indexes = TxnIndexes(directory)
        # Replication (start_replication): the high watermark is then the replica manager's
        # to move, `epochs` the leader epoch history, `leader_epoch` the epoch stamped on the
        # batches this log assigns offsets to (None: a follower, or not replicated), and
        # `_unreplicated` the (first offset, marker offset) of transactions whose marker the
        # high watermark has not passed yet: they keep the LSO down (Kafka's
        # unreplicatedTxns), so a read_committed reader never sees a transaction's records
        # without its marker being as safe as they are. start_replication reads them back
        # from the log above the high watermark it starts from.
        self.replicated = False
        self.epochs = None
        self.leader_epoch = None
        self._unreplicated = []
        if not readonly:
            # The loader's verdict: a log marked clean may be found damaged.
            clean_shutdown = loaded.report.clean_shutdown
            self.txn_indexes.load(loaded.txn_index_bases)
            if not clean_shutdown:
                self.txn_indexes.truncate_from(self._next_offset)
            self._load_producer_state(loaded.snapshot_offsets, clean_shutdown)
        else:
            self._start_following()

    def _start_following(self):
        """Read-only: learn which transactions the writer has open (the LSO) and which it
        aborted, from files listed only now: a writer makes a log's first snapshot before
        its first batch with a producer id, and a .txnindex entry before its marker, so
        what is listed after the log end was read covers every batch below it."""
        try:
            listing = list_directory(self.directory)
        except FileNotFoundError:
            raise self._deleted_by_the_writer() from None
        self.txn_indexes.load(listing.txn_index_bases)
        state = self.producer_state
        start = state.load_readonly(listing.snapshot_offsets, self._next_offset)
        if start is None:
            state.ongoing = {}
            if not listing.snapshot_offsets:
                state.map_end_offset = self._next_offset  # no producer id below it
                return
            start = self.log_start_offset   # none readable: read the whole log
        # A snapshot below the log start (snapshots come at rolls; DeleteRecords moves the
        # start inside a segment): the batches after it that are still on disk are read
        # too, or a marker among them would leave its transaction open in this view.
        state.map_end_offset = max(start, self._bases[0]) if self._bases else start
        self._follow(self._next_offset)

    def _deleted_by_the_writer(self):
        """Read-only: the error for a directory gone under the view. The writer deleted the
        topic (a deletion renames the directory away, then removes it): the partition is
        gone, as a writable open would say."""
        return UnknownTopicOrPartitionError(
            f"partition {self.name} was deleted by the writer (its directory "
            f"{self.directory} is gone)")

    def _batches_between(self, offset, end, below_high_watermark=True, below_log_start=False):
        """Every whole batch from the one holding offset up to end, in order (the producer
        state's rebuild and a read-only view's following)."""
        while offset < end:
            fetch = self._read(offset, 1 << 20, end, True, None, below_high_watermark,
                               below_log_start)
            if not fetch.batches:
                return
            for batch in fetch.batches:
                yield batch
                offset = batch.next_offset

    def _follow_to(self, end, segments_left=False):
        """Read-only: follow() the writer's batches up to end; an ABORT marker seen adds the
        entry the writer put in its .txnindex (this view need not list the file again).
        segments_left: segments of this view left the directory since it last followed."""
        state = self.producer_state
        if self._bases and (state.map_end_offset < self._bases[0] or (
                self.config.compact and (segments_left or
                                         state.map_end_offset < self._bases[-1]))):
            # The writer's retention removed batches this view had not followed yet: a
            # transaction's start or its marker may be among them, and the open
            # transactions it knows are no longer right. So on a compacted log the writer
            # rolled past: its cleaner rewrites every segment below the active one, and
            # drops a marker once its transaction's data is gone and delete.retention.ms
            # has passed (Kafka's LogCleaner, CleanedTransactionMetadata.onControlBatchRead)
            # -- the transaction would stay open in this view for good; and an aborted
            # one it had learnt would stay aborted after the cleaner dropped its entry
            # and marker, hiding that producer's later committed batches, even from a
            # view that had followed to the roll already. It starts again
            # from the writer's newest snapshot (taken at that roll, above all the cleaner
            # rewrote) and .txnindex files, as a view opened now would. (Batches below a
            # log start that DeleteRecords moved are still read while on disk.)
            self._start_following()
        elif not self._follow(end):
            # Cut short: retention removed a segment under this view while it read. The
            # batches it did not follow may hold a transaction's start, and the high
            # watermark moves past them next: it starts again from the writer's newest
            # snapshot and .txnindex files, as when retention overtook it.
            self._start_following()

    def _follow(self, end):
        """Replay the writer's batches from where this view stopped up to end; False when
        an error cut it short."""
        state = self.producer_state
        try:
            # Before the high watermark moves: a reader must never see the new high
            # watermark without the transactions that opened below it.
            for batch in self._batches_between(state.map_end_offset, end,
                                               below_high_watermark=False,
                                               below_log_start=True):
                aborted = state.follow(batch)
                if aborted is not None:
                    self.txn_indexes.remember(AbortedTxn(*aborted))
        except (KafkaStorageError, _MissingOffsets, OffsetOutOfRangeError):
            return False   # retention removed it under this view (or damage: see _read)
        return True

    def _load_producer_state(self, snapshot_offsets, clean_shutdown):
        """The newest snapshot, then the batches after it (KAFKA_REFERENCE §5). No snapshot
        means no producer ever wrote here (producer_state's module doc), unless snapshots
        there were could not be read: then the whole log is read again, as Kafka does."""
        state = self.producer_state
        snapshot_offsets = state.remove_stray_snapshots(snapshot_offsets, self._bases)
        start = state.load(snapshot_offsets, self._next_offset, self.clock_ms(),
                           self.log_start_offset)
        if start is None:
            if not snapshot_offsets:
                state.map_end_offset = self._next_offset
                return
            start = self.log_start_offset
            log.warning("%s: no readable producer snapshot; rebuilding producer state from "
                        "offset %d", self.name, start)
        start = max(start, self.log_start_offset)
        for batch in self._batches_between(start, self._next_offset, below_high_watermark=False):
            if batch.last_offset >= start and batch.producer_id >= 0:
                state.replay(producer_batch(batch, batch.base_offset))
        state.map_end_offset = self._next_offset
        if not clean_shutdown or start != self._next_offset:
            self._sync_logs_before_snapshot()
            state.take_snapshot()

    def _sync_logs_before_snapshot(self):
        """fsync the log files the recovery point does not cover yet. A producer snapshot is
        written durably (write_atomically), so it must never reach the disk before the
        batches it describes: after a power loss that kept it and lost their bytes, with a
        later segment kept past the hole, it would be trusted, and a producer's retry of a
        lost batch answered as a duplicate. The loader cuts a log at such a hole, and with
        it the snapshots above the cut, only where the log is not compacted: a compacted
        log's gaps are its cleaner's (log_loader step 4)."""
        for segment in self._segments[_holding(self._bases, self.recovery_point):]:
            segment.flush_log()

    # --- state -------------------------------------------------------------

    @property
    def log_end_offset(self):
        return self._next_offset

    @property
    def segments(self):
        return tuple(self._segments)

    @property
    def active_segment(self):
        return self._segments[-1]

    @property
    def size_in_bytes(self):
        return sum(s.size for s in self._segments)

    @property
    def closed(self):
        return self._closed

    @property
    def open_files(self):
        """The bound on open files this log's segments go through (open_files.py)."""
        return self._open_files

    def __repr__(self):
        return (f"PartitionLog({self.name}, start={self.log_start_offset}, "
                f"end={self._next_offset}, segments={len(self._segments)})")

    def first_offset_gap(self):
        """The first offset no batch holds from the first segment's base to the log end,
        or None. Only the cleaner leaves such gaps (invariant 1): where its checkpoint is
        lost, this still tells a log that has been compacted. Reads every batch header."""
        with self._lock:
            expected = None
            for segment in self._segments:
                if expected is not None and segment.base_offset != expected:
                    return expected
                expected = segment.base_offset
                for base, last in segment.batch_offsets():
                    if base != expected:
                        return expected
                    expected = last + 1
        return None

    def _check_writable(self):
        if self._closed:
            raise LogClosedError(f"partition log {self.name} is closed")
        if self.readonly:
            raise ReadOnlyError(f"partition log {self.name} was opened read-only")

    # --- append ------------------------------------------------------------

    def append(self, data, assign_offsets=True, origin=None, verification=UNVERIFIED):
        """Append one or more whole batches (bytes-like); returns AppendInfo.

        Each batch is checked (header, CRC, size limits) before anything is
        written. With assign_offsets the log gives the batches consecutive
        offsets from its end; otherwise their own offsets must lie above it.
        origin (producer_state): who wrote them, for the producer rules; the default
        is CLIENT, or REPLICA for batches that bring their own offsets.
        verification: what start_verification gave a request that had its transaction
        verified (producer_state's module doc).
        """
        if origin is None:
            origin = CLIENT if assign_offsets else REPLICA
        view = memoryview(data).cast("B")
        with self._lock:
            self._check_writable()
            if self.replicated and assign_offsets and self.leader_epoch is None:
                # A replica that is not (or no longer) the leader: an append that passed the
                # broker's leader check just before the role changed must not slip in after
                # the follower's truncation, where the leader's batches will go.
                raise NotLeaderOrFollowerError(f"{self.name} is a follower replica here")
            now_ms = self.clock_ms()
            infos, pieces, summary, producer_batches = self._validate(view, assign_offsets,
                                                                      now_ms, origin)
            first_offset, last_offset, max_ts, offset_of_max_ts, records = summary
            updated = completed = None
            if producer_batches:
                updated, duplicate, completed = self._check_producers(
                    producer_batches, origin, first_offset, verification)
                if duplicate is not None:
                    # Kafka answers the batch's time as its log append time too
                    # (UnifiedLog.append: setLogAppendTime(duplicate.timestamp)).
                    return AppendInfo(duplicate.first_offset, duplicate.last_offset,
                                      duplicate.timestamp, duplicate.last_offset,
                                      duplicate.timestamp, duplicate.offset_delta + 1, 1, 0)
            total = sum(i.size for i in infos)
            segment = self.active_segment
            if segment.should_roll(total, max_ts, last_offset, now_ms, self.config.segment_bytes,
                                   self.config.max_segment_ms):
                segment = self._roll_locked(first_offset, now_ms)
            stable = self.producer_state.stable_offsets(producer_batches, completed) \
                if completed else {}
            for txn in completed or ():
                if txn.aborted:
                    # Durable before its marker is (txn_index.py): a marker always has it.
                    self.txn_indexes.append(segment.base_offset, AbortedTxn(
                        txn.producer_id, txn.first_offset, txn.marker_offset,
                        stable[txn.marker_offset]))
            try:
                segment.append(infos, pieces, first_offset)
            except BaseException:
                # The markers were not written (a full disk refuses the append and the log
                # goes on): their entries go too, or a retried marker would be refused as
                # not above them and the transaction stay open (Kafka indexes only after
                # the log append).
                if any(txn.aborted for txn in completed or ()):
                    self.txn_indexes.truncate_from(first_offset)
                raise
            if self.replicated:
                self._unreplicated.extend((txn.first_offset, txn.marker_offset)
                                          for txn in completed or ())
            self._next_offset = last_offset + 1
            if updated is not None:
                self.producer_state.apply(updated, self._next_offset)
            else:
                self.producer_state.map_end_offset = self._next_offset
            if not self.replicated:
                self.high_watermark = self._next_offset
            elif not assign_offsets:
                # A follower learns the epochs from the leader's batches (Kafka's
                # appendAsFollower assigns each new epoch at its first batch).
                for batch in iter_batches(view, 0, len(view)):
                    self.epochs.assign(batch.partition_leader_epoch, batch.base_offset)
            self._unflushed_records += records
            need_flush = self._unflushed_records >= self.config.flush_messages
        if need_flush:
            self.flush()
        log_append_time = now_ms if self.config.log_append_time else -1
        return AppendInfo(first_offset, last_offset, max_ts, offset_of_max_ts, log_append_time,
                          records, len(infos), total)

    def start_verification(self, producer_id):
        """The guard for a request whose transaction the coordinator is asked about
        (producer_state.start_verification); None when it is open here already."""
        with self._lock:
            self._check_writable()
            return self.producer_state.start_verification(producer_id, self.clock_ms())

    def _check_producers(self, producer_batches, origin, first_offset, verification):
        """The producer state's check() of the batches from origin."""
        state = self.producer_state
        if not state.has_history:
            # The log's first producer id: an empty snapshot below it says, after a crash,
            # where rebuilding starts (producer_state's module doc).
            state.map_end_offset = first_offset
            state.take_snapshot()
        return state.check(producer_batches, origin, verification)

    def write_txn_marker(self, producer_id, producer_epoch, coordinator_epoch, commit,
                         timestamp_ms=None):
        """Append the COMMIT or ABORT marker of producer_id's transaction (the coordinator's
        WriteTxnMarkers); returns AppendInfo. An abort of a transaction that wrote here
        is recorded in the .txnindex first."""
        marker = build_control_batch(CONTROL_COMMIT if commit else CONTROL_ABORT,
                                     producer_id=producer_id, producer_epoch=producer_epoch,
                                     coordinator_epoch=coordinator_epoch,
                                     timestamp=self.clock_ms() if timestamp_ms is None
                                     else timestamp_ms)
        return self.append(marker, origin=COORDINATOR)

    def active_producers(self):
        """[(producer id, epoch, last sequence, last timestamp, coordinator epoch, first
        offset of its open transaction or -1)] of the producers this log keeps state of
        (Kafka's DescribeProducers answer)."""
        with self._lock:
            return [(e.producer_id, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                     e.txn_first_offset) for e in self.producer_state.producers.values()]

    @property
    def last_stable_offset(self):
        """The LSO: the first offset of the oldest open transaction, bounded by the high
        watermark (KAFKA_REFERENCE §6.3); read_committed readers stop below it."""
        # The high watermark first: an append records a new transaction before it moves the
        # high watermark past it, so this order never sees the one without the other.
        high_watermark = self.high_watermark
        unstable = self.producer_state.first_unstable_offset()
        unreplicated = self._unreplicated
        if unreplicated:
            first = min(f for f, _ in unreplicated)
            unstable = first if unstable is None else min(unstable, first)
        if unstable is None:
            return high_watermark
        # Never below the log start: delete_records or retention may remove the start of a
        # transaction still open (Kafka's maybeIncrementFirstUnstableOffset takes the max).
        return min(max(unstable, self.log_start_offset), high_watermark)

    def aborted_transactions(self, fetch_offset, upper_bound):
        """The aborted transactions a read_committed fetch from fetch_offset up to
        upper_bound (its LSO) must know of, to drop their batches (txn_index.collect)."""
        return self.txn_indexes.collect(fetch_offset, upper_bound)

    def _check_batch_size(self, size):
        """A batch of `size` bytes fits the topic's max.message.bytes and segments (checked
        as it arrives and, as Kafka's LogValidator does, again once recompressed), in
        Kafka's order: UnifiedLog.analyzeAndValidateRecords refuses a batch above
        max.message.bytes (MESSAGE_TOO_LARGE, on which a producer splits its batch) before
        append checks the segment size (RECORD_LIST_TOO_LARGE)."""
        if size > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"a {size}-byte batch exceeds max.message.bytes={self.config.max_message_bytes}"
                f" of {self.name}; raise the topic's max.message.bytes or send less per batch")
        if size > self.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"a {size}-byte batch can never fit {self.name}'s {self.config.segment_bytes}"
                "-byte segments; raise segment.bytes or send smaller batches")

    @contextlib.contextmanager
    def _refusing(self):
        """Around a check of a batch handed to the log: a header or records section that
        does not parse is the sender's INVALID_RECORD, as Kafka's validation refuses it
        (DefaultRecord.readFrom: InvalidRecordException), not CorruptRecordError, which
        says the bytes on disk are damaged and which the wire answers CORRUPT_MESSAGE, an
        error a producer retries."""
        try:
            yield
        except CorruptRecordError as exc:
            raise InvalidRecordError(f"rejected a batch for {self.name}: {exc.reason}") from None

    def _check_client_log_append_time(self, batch):
        """A client's batch marked LogAppendTime (Kafka's LogValidator.validateTimestamp):
        the append time is the broker's to give, so on a LogAppendTime topic the batch is
        refused (INVALID_TIMESTAMP) whatever its time; on a CreateTime topic its records read
        as its maxTimestamp, which is checked as a create time would be (the topic's window),
        and refused only when it is NO_TIMESTAMP, as no record then has a time at all. The
        log's own writers never mark a batch so; a replica copies what its leader stamped."""
        if self.config.log_append_time:
            why = f"{self.name} gives its records their append time itself"
        elif batch.max_timestamp == NO_TIMESTAMP:
            why = "the batch gives its records no time (maxTimestamp -1)"
        else:
            return
        raise InvalidTimestampError(
            f"a produced batch may not be marked LogAppendTime: {why}; send CreateTime "
            "batches", [(i, "marked LogAppendTime by its producer")
                        for i in range(batch.records_count)])

    def _validate(self, view, assign_offsets, now_ms, origin=CLIENT):
        """Check every batch and build what to write: (infos, pieces, summary, the batches
        with a producer id as producer_state.ProducerBatch)."""
        infos, pieces, producer_batches = [], [], []
        next_offset = self._next_offset
        first_offset = None
        max_ts, offset_of_max_ts, records = -1, -1, 0
        consumed = 0
        config = self.config
        # The codec and the timestamp window (below) are derived once per config (cached):
        # a topic left at the defaults pays nothing per batch for the checks they enable.
        codec = config.compression_codec
        size_limit = min(config.segment_bytes, config.max_message_bytes)   # _check_batch_size
        leader_epoch = self.leader_epoch if self.replicated else \
            UNREPLICATED_LEADER_EPOCH if assign_offsets else None
        if leader_epoch is not None:
            leader_epoch = leader_epoch.to_bytes(4, "big", signed=True)
        # A leader's append checks timestamps, a follower's copies what its leader checked
        # (Kafka's LogValidator runs on the leader only).
        window = config.timestamp_window_ms if assign_offsets else None
        for batch in iter_batches(view, 0, len(view)):
            size = batch.size_in_bytes
            with self._refusing():
                batch.check_header()
            if batch.compute_checksum() != batch.crc:
                # A sound header with a wrong CRC: damaged on its way here, so the sender may
                # try again (Kafka answers CORRUPT_MESSAGE, retriable, not INVALID_RECORD).
                raise CorruptInputBatchError(
                    f"rejected a batch for {self.name}: it fails its CRC (stored "
                    f"{batch.crc:#010x}); it was damaged before it arrived")
            if size > size_limit:
                self._check_batch_size(size)
            if batch.records_count == 0 and assign_offsets:
                raise InvalidRecordError("a produced batch must hold at least one record")
            if origin == CLIENT and batch.records_count != batch.last_offset_delta + 1:
                # Only the cleaner leaves offsets without records (Kafka's LogValidator
                # refuses such a batch from a client): taken, it would leave gaps in a log
                # that reads gaps as missing data.
                raise InvalidRecordError(
                    f"a produced batch spans {batch.last_offset_delta + 1} offsets but holds "
                    f"{batch.records_count} records")
            if batch.is_control and origin == CLIENT:
                # A batch's own rules come before its records' (Kafka's LogValidator runs
                # validateBatch before validateRecord), so a marker is refused as one.
                raise InvalidRecordError("a client may not write a control batch; transaction "
                                         "markers come from the transaction coordinator")
            if origin == CLIENT and batch.producer_id >= 0 and batch.base_sequence < 0:
                # Kafka's LogValidator.validateBatch: a client numbers every batch it stamps
                # with a producer id; a new producer's first batch would otherwise be taken
                # at any sequence, and its next ones judged against a negative one.
                raise InvalidRecordError(
                    f"a batch of producer {batch.producer_id} has base sequence "
                    f"{batch.base_sequence}; a producer's batches are numbered from 0")
            decoded = None   # the client's records, decoded once for the checks reading them
            if self.config.compact and origin == CLIENT and not batch.is_control and \
                    batch.records_count:
                # Kafka's LogValidator rule: the cleaner could only drop such a record. The
                # coordinators key every record they write, and a replica copies what its
                # leader checked: decoding their batches here would only cost them time.
                with self._refusing():
                    decoded = batch.records(verify=False)
                keyless = [(i, "no key, on a compacted topic")
                           for i in (decoded.key_lens < 0).nonzero()[0].tolist()]
            else:
                keyless = []
            late = []
            if window is not None and batch.records_count:
                if decoded is None:
                    with self._refusing():
                        decoded = batch.records(verify=False)
                late = _timestamp_errors(decoded, now_ms, window, {i for i, _ in keyless})
            if keyless or late:
                _refuse_records(keyless, late, self.name)
            if origin == CLIENT and batch.timestamp_type == LOG_APPEND_TIME:
                self._check_client_log_append_time(batch)
            if codec is not None and origin == CLIENT and batch.compression != codec:
                # Kafka's LogValidator rebuilds a produced batch whose codec differs from the
                # topic's, keeping its records and producer fields, at the topic's level of
                # that codec (LogConfig.compression).
                with self._refusing():
                    batch = RecordBatch(recompressed(batch, codec, decoded,
                                                     config.compression_level))
                if batch.size_in_bytes > size_limit:
                    self._check_batch_size(batch.size_in_bytes)
            if assign_offsets:
                base = next_offset
            else:
                base = batch.base_offset
                if base < next_offset:
                    raise InvalidRecordError(
                        f"batch offset {base} is below the log end offset {next_offset}")
                if base > next_offset and self.active_segment.dense:
                    # Density is how a flipped baseOffset is told from a real one (segment.py,
                    # invariant 1): only a compacted log may skip offsets. The active segment
                    # decides, as its reads will judge what is written here.
                    raise InvalidRecordError(
                        f"batch offset {base} would leave offsets {next_offset}..{base - 1} of "
                        f"{self.name} empty, and only a compacted log may skip offsets")
            last = base + batch.last_offset_delta
            piece = batch.view()
            if assign_offsets and (self.config.log_append_time or
                                   batch.timestamp_type == LOG_APPEND_TIME):
                # The leader gives every batch its topic's timestamp type (LogValidator's
                # setMaxTimestamp): a LogAppendTime topic's stamped now, and a batch marked
                # LogAppendTime that a CreateTime topic took (its time checked above) kept
                # at its maxTimestamp but marked CreateTime, so no reader takes its time for
                # the broker's. A follower stores the leader's bytes as they are
                # (appendAsFollower), stamp and CRC included.
                piece = bytearray(piece)
                if self.config.log_append_time:
                    set_max_timestamp(piece, 0, LOG_APPEND_TIME, now_ms)
                else:
                    set_max_timestamp(piece, 0, CREATE_TIME, batch.max_timestamp)
                batch = RecordBatch(piece)
            if assign_offsets and leader_epoch is not None:
                # partitionLeaderEpoch lies outside the CRC, as the base offset does.
                pieces.append(base.to_bytes(8, "big", signed=True) + bytes(piece[8:12]) +
                              leader_epoch)
                pieces.append(piece[16:])
            elif assign_offsets:
                pieces.append(base.to_bytes(8, "big", signed=True))
                pieces.append(piece[8:])
            else:
                pieces.append(piece)
            if first_offset is None:
                first_offset = base
            if batch.max_timestamp > max_ts:
                max_ts, offset_of_max_ts = batch.max_timestamp, last
            infos.append(BatchInfo(last, batch.max_timestamp, len(piece)))
            if batch.producer_id >= 0:
                producer_batches.append(producer_batch(batch, base, verified=True))
            records += batch.records_count
            next_offset = last + 1
            consumed += size
        if consumed != len(view):
            raise InvalidRecordError(
                f"{len(view) - consumed} trailing bytes do not form a whole record batch "
                f"(a batch is at least {RECORD_BATCH_OVERHEAD} bytes, its size at byte "
                f"{LOG_OVERHEAD - 4})")
        if not infos:
            raise InvalidRecordError("nothing to append: no record batch in the data")
        return infos, pieces, (first_offset, next_offset - 1, max_ts, offset_of_max_ts,
                               records), producer_batches

    # --- replication --------------------------------------------------------

    def start_replication(self, high_watermark):
        """Hand the high watermark to the replica manager (set_high_watermark moves it from
        now on; appends no longer do) and load the leader epoch history, rebuilt from the
        batches when its file is missing or damaged. high_watermark: the last one known
        (a checkpoint's), kept within [log start, LEO]."""
        with self._lock:
            self._check_writable()
            if self.epochs is None:
                epochs = LeaderEpochCache(self.directory)
                if not epochs.loaded and self._next_offset > self.log_start_offset:
                    log.warning("%s: no readable %s; rebuilding it from the batches",
                                self.name, files.LEADER_EPOCH_CHECKPOINT)
                    epochs.rebuild(self._batches_between(self.log_start_offset,
                                                         self._next_offset,
                                                         below_high_watermark=False))
                epochs.truncate_from_end(self._next_offset)  # a recovery cut the tail
                epochs.truncate_from_start(self.log_start_offset)
                self.epochs = epochs
            self.replicated = True
            self.high_watermark = min(max(high_watermark, self.log_start_offset),
                                      self._next_offset)
            self._unreplicated = self._transactions_ended_from(self.high_watermark)

    def _transactions_ended_from(self, offset):
        """(first offset, marker offset) of each transaction whose marker lies at or above
        offset, read back from the log: a replica reopened with its high watermark below
        markers it holds must not count their transactions stable before the high watermark
        passes them, as the appends that wrote them did not (the `_unreplicated` rule). A
        clean close left no replay to learn them from; an unclean one replays only what
        follows the newest snapshot. The log above the high watermark is read for markers;
        only if it holds one is it read again from the newest snapshot at or below the
        first, whose open transactions say where those that end later began."""
        markers = [b.base_offset for b in self._batches_between(
            offset, self._next_offset, below_high_watermark=False)
            if b.is_control and b.producer_id >= 0]
        if not markers:
            return []
        opened = ProducerState(self.directory, self.producer_state.expiration_ms)
        start = opened.load_readonly(self.producer_state.snapshot_offsets, markers[0])
        if start is None:
            start = opened.map_end_offset = self.log_start_offset
        ended = []
        for batch in self._batches_between(max(start, self._bases[0]), self._next_offset,
                                           below_high_watermark=False, below_log_start=True):
            first = opened.ongoing.get(batch.producer_id) if batch.is_control else None
            opened.follow(batch)
            if first is not None and batch.base_offset >= offset:
                ended.append((first, batch.base_offset))
        return ended

    def become_leader(self, epoch):
        """Batches this log gives offsets to carry `epoch` from now on; the epoch begins at
        the log end (Kafka's makeLeader)."""
        with self._lock:
            self._check_writable()
            self.epochs.assign(epoch, self._next_offset)
            self.leader_epoch = epoch

    def become_follower(self):
        """Appends come from the leader, with their own offsets and epochs."""
        with self._lock:
            self.leader_epoch = None

    def set_high_watermark(self, offset):
        """Move the high watermark of a replicated log to offset, kept within [log start,
        LEO]; returns whether it moved. Transactions whose marker it passes are stable."""
        with self._lock:
            high_watermark = min(max(offset, self.log_start_offset), self._next_offset)
            if high_watermark == self.high_watermark:
                return False
            self.high_watermark = high_watermark
            if self._unreplicated:
                self._unreplicated = [t for t in self._unreplicated if t[1] >= high_watermark]
            return True

    def end_offset_for_epoch(self, epoch):
        """(epoch, end offset) for a follower asking where `epoch` ends here (Kafka's
        OffsetsForLeaderEpoch; leader_epoch_cache.end_offset_for)."""
        return self.epochs.end_offset_for(epoch, self._next_offset)

    def epoch_for_offset(self, offset):
        """The leader epoch whose leader gave offset (-1: none known), from the epoch
        history; None for a log that is not replicated (it keeps none). A leader's history
        starts each epoch at its first batch, so this is the partitionLeaderEpoch of the
        batch holding offset, which Kafka's ListOffsets answers."""
        with self._lock:   # truncate_from_end shortens the two columns in place
            return None if self.epochs is None else self.epochs.epoch_for_offset(offset)

    def truncate_to(self, offset):
        """Remove every record at or above offset: a replica's tail its leader does not have
        (KIP-101). Readers may be reading: removed segments wait out file.delete.delay.ms
        as retention's do, and a cut segment file is replaced rather than shortened when a
        view of it may be alive (file_records.cut_to). Segments go newest first, so a crash
        half way leaves a shorter log, never one with a hole. Returns the new log end
        offset (below offset if offset fell inside a batch)."""
        with self._lock:
            self._check_writable()
            if offset >= self._next_offset:
                return self._next_offset
            if offset <= self.log_start_offset:
                return self._restart_at_locked(max(offset, self.log_start_offset))
            keep = max(bisect.bisect_left(self._bases, offset), 1)
            removed = self._segments[keep:]
            deadline = self.clock_ms() + self.config.file_delete_delay_ms
            self._delete_pending_locked({s.base_offset for s in removed})
            for segment in reversed(removed):
                segment.rename_suffix("", files.DELETED_SUFFIX)
                self._pending_deletes.append((deadline, segment))
            self._segments = self._segments[:keep]
            self._bases = self._bases[:keep]
            self.txn_indexes.forget_segments(s.base_offset for s in removed)
            active = self._segments[-1]
            end = active.truncate_to(offset)
            active.resize_indexes(self.config.segment_index_bytes)
            self._after_truncation_locked(end)
            log.info("%s: truncated to offset %d", self.name, end)
            return end

    def restart_at(self, offset):
        """Empty the log and start it at offset (see _restart_at_locked); returns offset."""
        with self._lock:
            self._check_writable()
            return self._restart_at_locked(offset)

    def _restart_at_locked(self, offset):
        """Empty the log and start it at offset (a follower behind its leader's log start,
        or truncated to its own start: Kafka's truncateFullyAndStartAt)."""
        deadline = self.clock_ms() + self.config.file_delete_delay_ms
        old = self._segments
        self._delete_pending_locked({s.base_offset for s in old})
        for segment in reversed(old):
            segment.rename_suffix("", files.DELETED_SUFFIX)
            self._pending_deletes.append((deadline, segment))
        self.txn_indexes.forget_segments(s.base_offset for s in old)
        self.log_start_offset = offset
        if self._log_start_checkpoint is not None:
            self._log_start_checkpoint.write(offset)
        segment = LogSegment(self.directory, offset, self.config, now_ms=self.clock_ms(),
                             open_files=self._open_files, new=True)
        self._segments = [segment]
        self._bases = [offset]
        self.producer_state.truncate_fully()
        self._after_truncation_locked(offset)
        if self.epochs is not None:
            self.epochs.truncate_from_start(offset)
        log.info("%s: emptied; the log now starts at offset %d", self.name, offset)
        return offset

    def _after_truncation_locked(self, end):
        self._next_offset = end
        self.high_watermark = min(self.high_watermark, end)
        self.recovery_point = min(self.recovery_point, end)
        self._index_sync_point = min(self._index_sync_point, end)
        self._truncations += 1
        self._unreplicated = [t for t in self._unreplicated if t[1] < end]
        self.txn_indexes.truncate_from(end)
        if self.epochs is not None:
            self.epochs.truncate_from_end(end)
        self._load_producer_state(list(self.producer_state.snapshot_offsets), False)
        self._unflushed_records = 0
        self._dir_dirty = True
        if self._root_entry is not None:
            # Before anything is appended above the cut: a checkpointed point above it would
            # have the next unclean open trust the segments below that point, which the
            # appends after the cut rewrite unsynced (Kafka's truncateTo checkpoints too).
            self._root_entry.lower_recovery_point(end)
            # Likewise the cleaner's first dirty offset, to the active segment's base
            # (Kafka's LogManager.truncateTo, maybeTruncateCleanerCheckpointToActiveSegment
            # BaseOffset): left above the cut, the records appended after it below that
            # offset would count as cleaned, and a value they supersede stay for good.
            self._root_entry.lower_cleaner_checkpoint(self._segments[-1].base_offset)

    # --- roll --------------------------------------------------------------

    def roll(self):
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._check_writable()
            return self._roll_locked(self._next_offset, self.clock_ms())

    def _roll_locked(self, new_base, now_ms):
        active = self.active_segment
        if active.size == 0:
            if active.base_offset == new_base:
                return active
            # An empty active segment at another offset (a gap): replace it.
            self._segments.pop()
            self._bases.pop()
            active.delete()
        else:
            active.on_become_inactive()
        if os.path.exists(files.log_file(self.directory, new_base)):
            raise KafkaStorageError(
                f"cannot roll {self.name}: a segment file for offset {new_base} already exists")
        if self.producer_state.has_history:
            # Kafka's roll snapshot: a crash later rebuilds from here, not from further back.
            self._sync_logs_before_snapshot()
            self.producer_state.expire(now_ms)
            self.producer_state.take_snapshot(new_base)
        segment = LogSegment(self.directory, new_base, self.config, now_ms=now_ms,
                             open_files=self._open_files, new=True)
        # Copy-on-write: readers iterate the old lists without a lock.
        self._segments = self._segments + [segment]
        self._bases = self._bases + [new_base]
        self._dir_dirty = True
        self._sealed_end = new_base
        return segment

    # --- read --------------------------------------------------------------

    def read(self, fetch_offset, max_bytes=1 << 20, max_offset=None, min_one_batch=True,
             buffer=None, below_high_watermark=True):
        """Whole batches from the one holding fetch_offset, up to max_bytes.

        max_offset bounds what is visible (default: the high watermark; a
        read_committed reader passes the last stable offset). Raises
        OffsetOutOfRangeError below the log start offset or above the LEO.
        buffer: a bytearray the caller reuses across reads; the batches are
        then views into it, valid until the next read with that buffer.
        Offsets that no segment holds in a log that is not compacted are
        CorruptRecordError, never skipped (see _missing_offsets).
        below_high_watermark=False: up to the log end (a follower's fetch from its leader).
        """
        if self._closed:
            raise LogClosedError(f"partition log {self.name} is closed")
        if self.readonly and (fetch_offset >= self._next_offset or self._log_start_moved()):
            # Caught up with what we know: look for more. Or the writer's DeleteRecords moved
            # the log start: the records below it must not be served from here either.
            self.refresh()
        return self._retried_where_files_left(lambda: self._read(
            fetch_offset, max_bytes, max_offset, min_one_batch, buffer, below_high_watermark))

    def _retried_where_files_left(self, look):
        """look() at the segments; again when they were replaced under it, and in a
        read-only view again after listing them anew, as long as files it wanted vanished."""
        segments = self._segments
        try:
            return look()
        except (KafkaStorageError, _MissingOffsets) as exc:
            if self._segments is not segments:
                # The cleaner, retention or a read-only view's refresh replaced segments
                # under this look (one it held was closed or removed): look again, at the
                # log as it is now.
                return look()
            if not self.readonly:
                raise
            # Retention or the cleaner may have removed a segment under this view (its
            # offsets are then below the log start the writer moved, or in the cleaner's
            # new files; a lazy segment finds its file gone at its first use): look again
            # before calling it damage, as long as files keep vanishing.
            for _ in range(_VANISHED_RETRIES):
                if not (isinstance(exc, _MissingOffsets) or
                        isinstance(exc.__cause__, FileNotFoundError)):
                    raise exc
                self.refresh()
                try:
                    return look()
                except (KafkaStorageError, _MissingOffsets) as again:
                    exc = again
            raise exc

    def _read(self, fetch_offset, max_bytes, max_offset, min_one_batch, buffer,
              below_high_watermark=True, below_log_start=False):
        """below_high_watermark=False: max_offset alone bounds the read (a read-only view
        following the writer's batches before it moves its high watermark past them);
        below_log_start: what the first segment holds below the log start is read too."""
        segments, bases = self._segments, self._bases
        high_watermark = self.high_watermark
        log_start = bases[0] if below_log_start else self.log_start_offset
        end = self._next_offset
        if not below_high_watermark:
            upper = end if max_offset is None else max_offset
        else:
            upper = high_watermark if max_offset is None else min(max_offset, high_watermark)
        if fetch_offset < log_start or fetch_offset > end:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is out of range for {self.name} (log start {log_start}, "
                f"log end {end})", self.name, fetch_offset)
        batches = []
        if fetch_offset < upper:
            if max_bytes < 0:
                # As Kafka's LogSegment.read (IllegalArgumentException): a size below 0 is
                # refused once there is something to read; at the end of what is visible the
                # read is empty whatever its size.
                raise NegativeReadSizeError(f"cannot read {max_bytes} bytes of {self.name}: a "
                                            "read's size is 0 or more")
            if fetch_offset < bases[0]:
                raise _MissingOffsets(
                    f"offsets {fetch_offset}..{bases[0] - 1} of {self.name} are missing: the "
                    f"log starts at {log_start} but its first segment at {bases[0]} (a segment "
                    f"file of {self.directory} was removed); seek to {bases[0]}, or delete the "
                    f"records below it to accept the loss", self.directory)
            i = _holding(bases, fetch_offset)
            for j in range(i, len(segments)):
                segment = segments[j]
                sealed = j + 1 < len(bases)
                found = segment.read(fetch_offset, max_bytes, upper, min_one_batch,
                                     bases[j + 1] if sealed else end, buffer, sealed)
                if found is not None:
                    # The segment holding fetch_offset answers, also with nothing: its first
                    # batch too large for a read without min_one_batch, or past max_offset.
                    # The next segment's records come after the ones it holds (Kafka's
                    # LocalLog.read reads on only while a segment has no offset to read).
                    batches = found.batches
                    break
                if sealed and fetch_offset < bases[j + 1] and \
                        not self.config.compact:
                    # Appends fill a log densely and only compaction leaves holes between
                    # segments: this one is a segment damaged or removed behind the log's
                    # back (a recovery below the recovery point keeps the later segments).
                    # Reading on in the next segment would skip the hole's records unseen.
                    raise _MissingOffsets(
                        f"offsets {fetch_offset}..{bases[j + 1] - 1} of {self.name} are "
                        f"missing: the segment holding them ends below {fetch_offset} and the "
                        f"next one starts at {bases[j + 1]}; seek to {bases[j + 1]} to read on",
                        segment.path)
        return FetchData(batches, high_watermark, log_start, end)

    def find_offset_by_timestamp(self, timestamp):
        """(offset, timestamp) of the first record with timestamp >= the target, or None.

        As Kafka's ListOffsets: the first segment whose largest timestamp
        reaches the target is searched, from the log start offset on.
        """
        if self.readonly:
            self.refresh()
        return self._retried_where_files_left(
            lambda: self._find_offset_by_timestamp(timestamp))

    def _find_offset_by_timestamp(self, timestamp):
        segments = self._segments
        start = self.log_start_offset
        end = self._next_offset
        for i, segment in enumerate(segments):
            # A view counts the batches its segment's time index lacks too (the writer's
            # active one: LogSegment._with_unindexed_timestamps), reloaded by refresh().
            if segment.largest_timestamp >= timestamp:
                upper = segments[i + 1].base_offset if i + 1 < len(segments) else end
                found = segment.find_offset_by_timestamp(timestamp, start, upper,
                                                         sealed=i + 1 < len(segments))
                if found is not None and found[0] < self.high_watermark:
                    return found
        return None

    # --- retention -----------------------------------------------------------

    def delete_old_segments(self, now_ms=None):
        """Apply retention (log start offset, retention.bytes, retention.ms); returns segments deleted."""
        with self._lock:
            self._check_writable()
            now_ms = self.clock_ms() if now_ms is None else now_ms
            deleted = self._delete_segments_locked(self._log_start_breached)
            if self.config.delete:
                deleted += self._delete_size_breached_locked()
                retention_ms = self.config.retention_ms
                if retention_ms >= 0:
                    deleted += self._delete_segments_locked(
                        lambda seg, nxt: now_ms - seg.largest_timestamp > retention_ms)
            return deleted

    def _log_start_breached(self, segment, next_segment):
        return next_segment is not None and next_segment.base_offset <= self.log_start_offset

    def _delete_size_breached_locked(self):
        retention_bytes = self.config.retention_bytes
        size = self.size_in_bytes
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = [size - retention_bytes]

        def breached(segment, _next):
            if excess[0] - segment.size >= 0:
                excess[0] -= segment.size
                return True
            return False
        return self._delete_segments_locked(breached)

    def _delete_segments_locked(self, predicate):
        deletable = []
        segments = self._segments
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self._next_offset
            if upper > self.high_watermark or not predicate(segment, nxt):
                break
            if nxt is None and segment.size == 0:
                break  # the empty active segment stays
            deletable.append(segment)
        if not deletable:
            return 0
        if deletable[-1] is segments[-1]:
            self._roll_locked(self._next_offset, self.clock_ms())
        keep = self._segments[len(deletable):]
        self.log_start_offset = max(self.log_start_offset, keep[0].base_offset)
        if self._log_start_checkpoint is not None:
            # Durable before any segment goes: a crash in between must not leave a log whose
            # first segment starts above its checkpointed start, which reads as damage.
            self._log_start_checkpoint.write(self.log_start_offset)
        self._segments = keep
        self._bases = [s.base_offset for s in keep]
        if self.epochs is not None:
            self.epochs.truncate_from_start(self.log_start_offset)
        self.producer_state.delete_snapshots_below(keep[0].base_offset)
        self.txn_indexes.forget_segments(s.base_offset for s in deletable)
        deadline = self.clock_ms() + self.config.file_delete_delay_ms
        for segment in deletable:
            segment.rename_suffix("", files.DELETED_SUFFIX)
            self._pending_deletes.append((deadline, segment))
        self._dir_dirty = True
        log.info("%s: deleted %d segment(s); log start offset now %d", self.name, len(deletable),
                 self.log_start_offset)
        return len(deletable)

    # --- compaction (log_cleaner.py) ----------------------------------------------

    def cleaner_snapshot(self):
        """What a cleaning pass reads of the log, taken at once (log_cleaner.CleanerSnapshot).

        Refused while an earlier swap is unfinished (a rename after its commit point
        failed, replace_segments): its `.swap` files are committed, and a `.cleaned` file
        of this pass beside them, found by the next open after a crash, would tell the
        loader that swap never committed. It would discard it, and the segments it
        replaced are already gone. The next open finishes that swap."""
        with self._lock:
            self._check_writable()
            unfinished = [s.base_offset for s in self._segments
                          if s.suffix == files.SWAP_SUFFIX]
            if unfinished:
                raise KafkaStorageError(
                    f"{self.name}: a cleaned segment at offset {unfinished[0]} still has its "
                    "temporary .swap name (a rename failed after the swap was committed); "
                    "close and reopen the database to finish that swap before cleaning "
                    "the log again")
            producers = {pid: (e.batches[-1].last_offset if e.batches else None, e.epoch)
                         for pid, e in self.producer_state.producers.items()}
            return CleanerSnapshot(tuple(self._segments), self.log_start_offset,
                                   self.last_stable_offset, tuple(self.txn_indexes.entries()),
                                   producers, self._truncations)

    def replace_segments(self, replacements, truncations):
        """Swap cleaned segments in for the ones they replace, all at once.

        replacements: [(old segments, the `.cleaned` segment replacing them, the
        AbortedTxn its .txnindex holds)]; truncations: the log's truncation count when
        the pass read it (its cleaner_snapshot). Returns False, having removed the cleaned
        files and changed nothing, when an old segment left the log meanwhile (retention)
        or the log was truncated meanwhile: a truncation cuts its last kept segment in
        place, so that segment is still here while its cleaned copy holds the records cut
        (Kafka's truncateTo aborts the log's cleaning for the same reason).

        Crash safety, with log_loader's step 1; every cleaned file is already fsynced:
          1. every `.cleaned` file is renamed `.swap`, then the directory is fsynced: the
             commit point. A directory with a `.cleaned` file beside `.swap` ones is a
             swap that never committed: the loader removes both, the old log stays.
          2. the old segments are renamed `.deleted` (closed after file.delete.delay.ms,
             as retention's: a reader holding one reads on);
          3. every `.swap` file takes its final name; the directory is fsynced.
        The loader completes a swap a crash cut in 2 or 3: it removes the ordinary
        segments inside each `.swap` segment's offsets and renames the `.swap` files.
        """
        if not replacements:
            return True
        with self._lock:
            self._check_writable()
            current = {id(s) for s in self._segments}
            if not self.config.compact or truncations != self._truncations or \
                    any(id(s) not in current for old, _, _ in replacements for s in old):
                # Retention removed a segment meanwhile, a truncation cut one, or compaction
                # was taken off the topic (Broker.alter_topic_config): nothing of the pass
                # goes in.
                for _, cleaned, _ in replacements:
                    cleaned.delete()
                return False
            try:
                for _, cleaned, _ in replacements:
                    cleaned.rename_suffix(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
                fsync_dir(self.directory)
            except BaseException:
                for _, cleaned, _ in replacements:   # not committed: the old log stays
                    cleaned.delete()
                raise
            # Committed: from here on this process's view is the new log whatever fails (a
            # rename left undone is finished by the next open, see above).
            deadline = self.clock_ms() + self.config.file_delete_delay_ms
            old_bases = {s.base_offset for old, _, _ in replacements for s in old}
            new_by_first = {id(old[0]): cleaned for old, cleaned, _ in replacements}
            try:
                self._delete_pending_locked(old_bases)
                for old, _, _ in replacements:
                    for segment in old:
                        segment.rename_suffix("", files.DELETED_SUFFIX)
                        self._pending_deletes.append((deadline, segment))
                for _, cleaned, _ in replacements:
                    cleaned.rename_suffix(files.SWAP_SUFFIX, "")
                fsync_dir(self.directory)
            except OSError as exc:
                raise KafkaStorageError(
                    f"{self.name}: the cleaned segments are in, but renaming their files "
                    f"failed ({exc}); the next open of the database finishes it") from exc
            finally:
                self._install_replacements(replacements, new_by_first, old_bases)
            # The old segments no cleaned one starts at are gone: so are their snapshots,
            # which would otherwise pile up, one per roll, on a log whose start never moves.
            self.producer_state.delete_snapshots_at(
                old_bases - {cleaned.base_offset for _, cleaned, _ in replacements})
            return True

    def _install_replacements(self, replacements, new_by_first, old_bases):
        """replace_segments' change of the segment list (under the append lock)."""
        replaced = {id(s) for old, _, _ in replacements for s in old}
        segments = []
        for segment in self._segments:
            if id(segment) in new_by_first:
                segments.append(new_by_first[id(segment)])
            elif id(segment) not in replaced:
                segments.append(segment)
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.txn_indexes.replace_segments(
            old_bases, {cleaned.base_offset: kept for _, cleaned, kept in replacements})

    def _delete_pending_locked(self, bases):
        """Pending deletions of segments at these bases give up their `.deleted` names, which
        the segments replaced now take: their files are unlinked at once, but the segments
        stay open until their own deadline, so a reader holding one reads on."""
        for _, segment in self._pending_deletes:
            if segment.base_offset in bases:
                segment.unlink_files()

    def delete_pending_files(self, now_ms=None, force=False):
        """Close and remove segments deleted at least file.delete.delay.ms ago; returns count."""
        with self._lock:
            now_ms = self.clock_ms() if now_ms is None else now_ms
            due = [(d, s) for d, s in self._pending_deletes if force or d <= now_ms]
            self._pending_deletes = [(d, s) for d, s in self._pending_deletes
                                     if not (force or d <= now_ms)]
        for _, segment in due:
            segment.delete()
        return len(due)

    def increase_log_start_offset(self, new_start):
        """Move the log start offset up (DeleteRecords, or a follower taking its leader's);
        whole segments go at the next retention pass. A start that moves is in the log start
        checkpoint (fsynced) before this returns: records it deleted never come back after a
        crash, and read-only views stop serving them at their next read."""
        with self._lock:
            self._check_writable()
            if new_start > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start of {self.name} to {new_start}, past its high "
                    f"watermark {self.high_watermark}", self.name, new_start)
            if new_start > self.log_start_offset:
                # In memory first, as retention does: a periodic checkpoint in between
                # writes the new start too, never the old one after it.
                self.log_start_offset = new_start
                if self._log_start_checkpoint is not None:
                    self._log_start_checkpoint.write(new_start)
            if self.epochs is not None:
                self.epochs.truncate_from_start(self.log_start_offset)
            return self.log_start_offset

    def expire_producers(self, now_ms=None):
        """Forget producers idle past producer.id.expiration.ms; returns how many."""
        with self._lock:
            if self._closed or self.readonly:
                return 0
            return self.producer_state.expire(self.clock_ms() if now_ms is None else now_ms)

    # --- durability ----------------------------------------------------------

    def flush(self):
        """fsync everything appended so far and advance the recovery point; returns it.

        The last segment's indexes are not msynced (invariant 3): an unclean open rebuilds
        them from the log, and an acks="all" append would otherwise wait on two msyncs
        besides its fdatasync. Those of the segments before it are."""
        with self._flush_lock:
            return self._flush_locked()

    def flush_to(self, offset):
        """flush() unless everything below offset is fsynced already (Kafka's flush(offset));
        returns the recovery point."""
        with self._flush_lock:
            if self.recovery_point >= offset:
                return self.recovery_point
            return self._flush_locked()

    def _flush_locked(self):
        """flush() with _flush_lock held."""
        with self._lock:
            if self._closed or self.readonly:
                return self.recovery_point
            target = self._next_offset
            first = _holding(self._bases, min(self.recovery_point, self._index_sync_point))
            segments = self._segments[first:]
            unsynced_logs = segments[_holding(self._bases, self.recovery_point) - first:]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            self._unflushed_records = 0
            truncations = self._truncations
        for segment in unsynced_logs:
            segment.flush_log()
        with self._lock:
            for segment in segments[:-1]:
                segment.flush_indexes()
        if dir_dirty:
            fsync_dir(self.directory)
            if self._root_entry is not None:
                self._root_entry.sync_name()
        with self._lock:
            if truncations == self._truncations:
                # Not after a truncation meanwhile: it cut below target, and what is there
                # now was not all fsynced by this flush.
                self._index_sync_point = max(self._index_sync_point,
                                             segments[-1].base_offset)
                self.recovery_point = max(self.recovery_point, target)
        self._last_flush_ms = self.clock_ms()
        return self.recovery_point

    def checkpoint_recovery_point(self):
        """The recovery point to write to the checkpoint file, with the indexes that an
        unclean open will trust under it made durable first: those of every segment below
        the one holding it (a flush leaves the last segment's for later, and a roll since
        has put another after it).

        Under _lock alone, not _flush_lock: a flush moves the recovery point and the index
        sync point together under _lock, so either pair is consistent, and the checkpoint
        (which holds the directory's lock) never waits behind a flush's fsync.

        An msync that fails gives the index sync point instead: everything below the
        segment holding it is durable, and an unclean open rebuilds that segment."""
        with self._lock:
            if self._closed or self.readonly or self._index_sync_point >= self.recovery_point:
                return self.recovery_point
            first = _holding(self._bases, self._index_sync_point)
            holding = _holding(self._bases, self.recovery_point)
            try:
                for segment in self._segments[first:holding]:
                    segment.flush_indexes()
            except (KafkaStorageError, OSError) as exc:
                log.warning("%s: checkpointing recovery point %d instead of %d (%s)",
                            self.name, self._index_sync_point, self.recovery_point, exc)
                return self._index_sync_point
            self._index_sync_point = max(self._index_sync_point,
                                         self._segments[holding].base_offset)
            return self.recovery_point

    def maybe_flush_on_time(self, now_ms=None):
        """Flush when data is unflushed and flush.ms has passed since the last flush, or a
        roll sealed segments the recovery point has not passed. Kafka's roll schedules
        flushUptoOffsetExclusive(new base) for the latter: without it the recovery point of
        a log written with acks=1 never moves, and an unclean stop re-validates the whole
        log, cutting it at the first damage found in any old segment."""
        now_ms = self.clock_ms() if now_ms is None else now_ms
        unflushed = self.recovery_point < self._next_offset
        if unflushed and (now_ms - self._last_flush_ms >= self.config.flush_ms
                          or self.recovery_point < self._sealed_end):
            self.flush()
            return True
        return False

    # --- read-only following ---------------------------------------------------

    def refresh(self):
        """Read-only: pick up what the writer appended, rolled or deleted since the last look."""
        if not self.readonly:
            return
        with self._lock:
            # A file listed may leave before the view reads its size or tail (retention or
            # the cleaner removing it): the view then lists again, as a read does.
            for looks_left in range(_VANISHED_RETRIES, -1, -1):
                listed = self._listed_segments()
                if listed is None:
                    return   # a swap left unfinished: the view stays as it is (log_loader)
                keep, gone = listed
                if not keep:
                    return
                try:
                    self._take_listing(keep, gone)
                    return
                except KafkaStorageError as exc:
                    for segment in keep:
                        if segment not in self._segments:
                            segment.close()   # opened for this listing, now given up
                    if not looks_left or not isinstance(exc.__cause__, FileNotFoundError):
                        raise

    def _take_listing(self, keep, gone):
        """Read-only refresh: follow the writer to the segments listed. Nothing of the view
        changes before the sizes and the tail are read, which may find a file gone."""
        previous_last = self._segments[-1].base_offset if self._segments else -1
        for segment in keep:
            if segment.base_offset >= previous_last:  # the old active one may have grown
                segment.refresh_size()
                segment.forget_timestamps()
        next_offset = self._scan_tail(keep)
        self._segments = keep
        self._bases = [s.base_offset for s in keep]
        for segment in gone:
            segment.close()  # deleted by the writer's retention, or its cleaner
        self.log_start_offset = max(self.log_start_offset, self._writer_log_start(bool(gone)))
        self._next_offset = max(self._next_offset, next_offset)
        self._follow_to(self._next_offset, segments_left=bool(gone))
        self.high_watermark = self._next_offset

    def _listed_segments(self):
        """Read-only refresh's look at the directory: (the segments of the log now, those of
        this view that left it), or None while a writer's swap stays unfinished.

        A compacted log is listed again when a file it listed left before the view opened
        it: the cleaner's next swap began in between, and a view without that segment
        would skip its records (its log start would move past them). So it is when the
        listing changed while the view looked at its files (_listing_held)."""
        compact = self.config.compact
        for _ in range(SWAP_WAITS if compact else 1):
            try:
                listing = settled_listing(self.directory, compact)
            except FileNotFoundError:
                raise self._deleted_by_the_writer() from None
            if listing is None:
                return None
            present = set(listing.bases)
            keep, gone = [], []
            for segment in self._segments:
                stays = segment.base_offset in present and not (
                    compact and segment.replaced_on_disk())
                (keep if stays else gone).append(segment)
            held = {s.base_offset for s in keep}
            # Retention only removes segments and rolls add them at the end; the cleaner
            # also puts new files under the names of segments it replaced.
            new = [base for base in listing.bases if base not in held and
                   (compact or not keep or base > keep[-1].base_offset)]
            opened = open_readonly_segments(self.directory, new, self.config,
                                            open_files=self._open_files) if new else []
            if not compact or (len(opened) == len(new) and (
                    not (gone or opened) or self._listing_held(listing.bases, keep))):
                return sorted(keep + opened, key=lambda s: s.base_offset), gone
            for segment in opened:
                segment.close()
        return None

    def _listing_held(self, bases, keep):
        """Compacted log: whether the directory still lists `bases` and holds the segments
        kept, after the view looked at each. A swap whose renames ran during those looks
        leaves segments merged away beside the cleaned one that covers them (found replaced
        only after they were looked at): their offsets would then overlap, and the reads
        fail as corruption. The listing is then taken again."""
        try:
            again = settled_listing(self.directory, True)
        except FileNotFoundError:
            return False   # deleted: the next listing says so
        return again is not None and again.bases == bases and not any(
            segment.replaced_on_disk() for segment in keep)

    def _writer_log_start(self, removed):
        """Read-only: the log start the writer has moved to, as far as this view can prove it.

        The writer checkpoints its new start before retention removes a segment and before
        DeleteRecords returns; a segment that left this view went by that retention, while
        one absent since the open says nothing (see load_log). The checkpoint is looked at on
        every refresh: a caught-up reader refreshes on every poll, and the file lists every
        partition of the database, so it is read again only when its stat changed
        (LogDirectory._current_log_starts)."""
        checkpointed = None
        if self._log_start_checkpoint is not None:
            checkpointed = self._log_start_checkpoint.read()
        if removed:
            return max(self._segments[0].base_offset, checkpointed or 0)
        return checkpointed or 0

    def _log_start_moved(self):
        """Read-only: whether the writer checkpointed a log start above this view's (a stat of
        the checkpoint file, when it did not change since it was last read)."""
        checkpoint = self._log_start_checkpoint
        return checkpoint is not None and (checkpoint.read() or 0) > self.log_start_offset

    def _scan_tail(self, segments):
        """Next offset after the last whole batch, scanning only what is new since last time."""
        for segment in reversed(segments):
            if segment.size:
                break
        else:
            return segments[-1].base_offset
        scanned, position, next_offset = self._tail
        with segment.pinned():
            # The segment, not its base: the cleaner puts a new file under the same base.
            if scanned is not segment:
                position, next_offset = segment.tail_scan_start(), segment.base_offset
            try:
                for header in segment.log.headers(position):
                    position = header.file_position + header.size_in_bytes
                    next_offset = header.next_offset
            except IncompleteBatch as exc:
                segment.check_partial_tail(exc)  # else the writer is still writing this batch
        self._tail = (segment, position, next_offset)
        if segment is not segments[-1]:
            next_offset = max(next_offset, segments[-1].base_offset)
        return next_offset

    # --- lifecycle -------------------------------------------------------------

    def close(self, flush=True, seal=True):
        """Flush (unless told not to), seal the indexes and close every file. flush=False,
        seal=False: only close, writing nothing (the directory is about to be removed, and
        writing could need a descriptor the caller has run out of)."""
        if self._closed:
            return
        if flush and not self.readonly:
            self.flush()
        with self._lock:
            if seal and not self.readonly and self.producer_state.has_history:
                self.producer_state.expire(self.clock_ms())
                self.producer_state.take_snapshot(self._next_offset)
            self._closed = True
            for segment in self._segments:
                segment.close(seal)
        self.delete_pending_files(force=True)

