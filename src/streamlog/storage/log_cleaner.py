"""One cleaning pass over one partition log: Kafka's Cleaner.doClean (KAFKA_REFERENCE.md §4).

A compacted log has three sections:
    [log start ... first dirty)              clean: compacted by an earlier pass
    [first dirty ... first uncleanable)      dirty: this pass compacts it
    [first uncleanable ... log end)          the head: never touched (the active segment,
                                             min.compaction.lag.ms, the LSO)
(cleaner_manager.cleanable_offsets says where the boundaries are.)

The pass, in order:
  1. Offset map: for every keyed record of the dirty section, key -> its latest
     offset (OffsetMap, fixed memory). Control batches and aborted transactions
     never enter it. A full map ends the pass's range early: the next pass goes on
     from there. The map's latest offset + 1 is the new first dirty offset.
  2. Groups: the segments from the log start up to that offset, merged while the
     result fits segment.bytes, segment.index.bytes and int32 relative offsets.
  3. Each group is copied into one `<base>.log.cleaned` segment (and its indexes and
     .txnindex), keeping, in offset order, each batch's records that the record
     rule keeps (batch_filter). Offsets never change.
  4. PartitionLog.replace_segments swaps every group in at once (see there for the
     order of renames that makes a crash leave either the old log or the new one).

Record rule (Kafka's shouldRetainRecord): a record past the map's latest offset
is kept (this pass did not read its key's later records); a record without a key
is dropped; otherwise it is kept iff no later record of its key is in the map,
and it has a value or is a tombstone still within its batch's delete horizon.
The first pass that keeps a tombstone sets its batch's delete horizon to now +
delete.retention.ms (a batch attribute, Kafka v2); passes after the horizon drop it.

Batch rule (checkBatchRetention): the batch holding an active producer's last data
(or, if it wrote only markers, its last marker) is kept even when emptied, as an
empty batch, so its sequence and epoch survive; so is the last batch of each group
(Kafka keeps the one ending the round: keeping each group's also makes every cleaned
segment end where its sources did, which is what the loader's swap completion
relies on). Batches of aborted transactions are removed whatever their keys. A
transaction marker is kept while this pass saw its transaction's data; after that
it is a tombstone (horizon, then removal). Aborted transactions whose markers stay
are written again to the cleaned segment's .txnindex.

Runs beside appends and reads: it reads only sealed segments below the first
uncleanable offset, which appends never touch; the log's lock is taken only by
the snapshot at the start and the swap at the end. One pass at a time per log
(the broker's cleaner thread runs them all).
"""
import bisect
import os
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from .. import native
from ..errors import CorruptRecordError, KafkaStorageError
from . import files
from .batch_filter import empty_batch, filter_batch, sealed_batch
from .file_records import IncompleteBatch
from .offset_map import SLOT_BYTES, OffsetMap
from .record_batch import CONTROL_ABORT, CONTROL_COMMIT, RecordBatch
from .segment import BatchInfo, LogSegment
from .txn_index import write_index_file

# The per-record work (keys into the map, the record rule) in C, one call per batch
# (native/sl_cleaner.h); the Python paths below are its twin (tests hold them to parity).
USE_NATIVE = native.CLEANER_AVAILABLE
_INT32_MAX = 2**31 - 1
# Bytes of cleaned batches gathered before one write to the cleaned segment.
_WRITE_CHUNK = 1 << 20


@dataclass
class CleanStats:
    """What one pass read and wrote (logged, shown by `streamlog compact`)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_records: int = 0
    segments_read: int = 0
    segments_written: int = 0
    aborted_batches_removed: int = 0
    keyless_records_removed: int = 0
    map_bytes: int = 0
    elapsed_s: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def done(self):
        self.elapsed_s = time.monotonic() - self.started
        return self


class CleaningAborted(Exception):
    """The pass was asked to stop (the database is closing); nothing was swapped in."""


class CleanResult(NamedTuple):
    first_dirty: int        # the next pass starts here (cleaner-offset-checkpoint)
    stats: CleanStats


class CleanerSnapshot(NamedTuple):
    """What a pass reads of the log, taken under its lock at the start
    (PartitionLog.cleaner_snapshot)."""

    segments: tuple                 # every segment, the active one last
    log_start_offset: int
    last_stable_offset: int
    aborted: tuple                  # AbortedTxn, by last offset
    active_producers: dict          # producer id -> (last data offset or None, epoch)
    truncations: int                # the log's truncation count (replace_segments checks it)


# --- transactions --------------------------------------------------------------------


class _Aborted:
    """An aborted transaction met in a group: whether the pass saw any of its data."""

    __slots__ = ("txn", "seen_data")

    def __init__(self, txn):
        self.txn = txn
        self.seen_data = False


class TransactionTracker:
    """Kafka's CleanedTransactionMetadata for one pass (across its groups, as a
    transaction's data may lie in one group and its marker in the next): which batches
    of transactions may go, which markers must stay, and which aborted transactions a
    cleaned segment's .txnindex keeps (take_retained, after each group)."""

    def __init__(self, aborted):
        self._pending = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._ongoing_aborted = {}
        self._ongoing_committed = set()
        self.retained = []   # AbortedTxn whose marker the current group keeps

    def take_retained(self):
        retained, self.retained = self.retained, []
        return retained

    def _start_up_to(self, offset):
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            txn = pending[self._next]
            self._ongoing_aborted.setdefault(txn.producer_id, _Aborted(txn))
            self._next += 1

    def _aborted_of(self, batch):
        """The aborted transaction of batch's producer that spans it, if any. An entry whose
        marker lies below the batch is over (its marker was in a segment this pass did not
        read): it must not claim the producer's later, committed transactions."""
        aborted = self._ongoing_aborted.get(batch.producer_id)
        if aborted is not None and batch.base_offset > aborted.txn.last_offset:
            del self._ongoing_aborted[batch.producer_id]
            return None
        return aborted

    def data_batch(self, batch):
        """True when the batch belongs to an aborted transaction (remove it)."""
        self._start_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        aborted = self._aborted_of(batch)
        if aborted is not None:
            aborted.seen_data = True
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False

    def control_batch(self, batch, control_type):
        """True when the marker may go (subject to its delete horizon): this pass saw
        none of its transaction's data."""
        self._start_up_to(batch.last_offset)
        if batch.records_count == 0:
            return True   # emptied by an earlier pass
        pid = batch.producer_id
        if control_type == CONTROL_ABORT:
            aborted = self._aborted_of(batch)
            self._ongoing_aborted.pop(pid, None)
            if aborted is not None and aborted.seen_data:
                self.retained.append(aborted.txn)
                return False
            return True
        if control_type == CONTROL_COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False   # a control type this version does not know: kept


class _AbortedRanges:
    """Whether a transactional batch lies in an aborted transaction (the map build)."""

    def __init__(self, aborted):
        self._by_producer = {}
        for txn in sorted(aborted, key=lambda t: t.first_offset):
            firsts, lasts = self._by_producer.setdefault(txn.producer_id, ([], []))
            firsts.append(txn.first_offset)
            lasts.append(txn.last_offset)

    def contains(self, batch):
        if not batch.is_transactional:
            return False
        ranges = self._by_producer.get(batch.producer_id)
        if ranges is None:
            return False
        firsts, lasts = ranges
        i = bisect.bisect_right(firsts, batch.base_offset) - 1
        return i >= 0 and batch.base_offset <= lasts[i]


# --- reading the segments ----------------------------------------------------------------


def _segment_batches(segment, start_offset=None, buffer=None):
    """Every batch of a sealed segment, CRC-checked, from the one holding start_offset.
    buffer: a bytearray the reads reuse (a batch is then valid until the next one)."""
    with segment.pinned():
        position = 0
        if start_offset is not None and start_offset > segment.base_offset:
            position = segment.translate_offset(start_offset)
            if position is None:
                return
        try:
            for batch in segment.log.batches(position, buffer=buffer):
                batch.ensure_valid()
                yield batch
        except IncompleteBatch as exc:
            raise CorruptRecordError(f"sealed segment ends inside a record batch ({exc})",
                                     segment.path, exc.position) from None


def _check_stop(stop):
    if stop is not None and stop():
        raise CleaningAborted()


def build_offset_map(snapshot, offset_map, start, end, stats, progress=None, stop=None):
    """Step 1 over [start, end); returns the offset after the last one it covered."""
    aborted = _AbortedRanges(snapshot.aborted)
    segments = snapshot.segments
    buffer = bytearray()
    offset_map.update_latest(start - 1)
    for i, segment in enumerate(segments[:-1]):
        next_base = segments[i + 1].base_offset
        if next_base <= start:
            continue
        if segment.base_offset >= end:
            break
        _check_stop(stop)
        for batch in _segment_batches(segment, start, buffer):
            if batch.base_offset >= end:
                break
            if batch.is_control or not batch.records_count or aborted.contains(batch):
                offset_map.update_latest(batch.last_offset)
                continue
            put, full = _put_keys(offset_map, batch, start)
            stats.map_records += put
            if full:
                return offset_map.latest_offset + 1   # the range ends here
            offset_map.update_latest(batch.last_offset)
        offset_map.update_latest(min(next_base, end) - 1)
        if progress is not None:
            progress(segment.size)
    return offset_map.latest_offset + 1


def _put_keys(offset_map, batch, start):
    """Key -> offset for each keyed record of batch at or after start: (records put,
    whether the map filled before the batch's end)."""
    if USE_NATIVE:
        buf, pos, length, _ = batch._records_section()
        return native.map_put_section(offset_map, buf, pos, length, batch.records_count,
                                      batch.base_offset, start, batch.path)
    return _put_keys_py(offset_map, batch, start)


def _put_keys_py(offset_map, batch, start):
    """_put_keys' pure-Python twin (the native path's parity tests call it too)."""
    records = batch.records(verify=False)
    put = 0
    for offset, key in zip(records.offsets.tolist(), records.keys(), strict=True):
        if key is None or offset < start:
            continue
        if not offset_map.put(key, offset):
            return put, True
        put += 1
    return put, False


# --- grouping ------------------------------------------------------------------------------


def group_segments(segments, ends, max_bytes, max_index_bytes):
    """Step 2: consecutive segments merged while their log bytes fit max_bytes, each of
    their indexes' bytes fit max_index_bytes and their offsets stay within int32 of the
    group's base. ends[i]: the offset segment i's offsets stay below."""
    groups = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [first]
        log_bytes, offset_bytes, time_bytes = _sizes(first)
        i += 1
        while i < len(segments):
            size, offset_size, time_size = _sizes(segments[i])
            if log_bytes + size > max_bytes or offset_bytes + offset_size > max_index_bytes or \
                    time_bytes + time_size > max_index_bytes or \
                    ends[i] - 1 - first.base_offset > _INT32_MAX:
                break
            group.append(segments[i])
            log_bytes += size
            offset_bytes += offset_size
            time_bytes += time_size
            i += 1
        groups.append(group)
    return groups


def _sizes(segment):
    with segment.pinned():
        return (segment.size, segment.offset_index.size_in_bytes,
                segment.time_index.size_in_bytes)


# --- cleaning one group ----------------------------------------------------------------


class _Rules(NamedTuple):
    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int
    round_end: int
    active_producers: dict


def _last_of_producer(batch, active_producers):
    """Whether batch is an active producer's last data (or, with none, its marker)."""
    last = active_producers.get(batch.producer_id) if batch.producer_id >= 0 else None
    if last is None:
        return False
    last_data_offset, epoch = last
    if last_data_offset is not None:
        return batch.last_offset == last_data_offset
    return batch.is_control and batch.producer_epoch == epoch


def _clean_batch(batch, rules, txns, stats):
    """The bytes of batch to keep (possibly emptied), or None; and whether it may be kept
    as an empty batch when nothing of it is (RETAIN_EMPTY)."""
    now_ms = rules.now_ms
    if batch.is_control:
        can_discard = txns.control_batch(batch, batch.control_type())
        discard_records = can_discard and batch.has_delete_horizon and \
            batch.delete_horizon_ms <= now_ms
    else:
        can_discard = discard_records = txns.data_batch(batch)
        if can_discard:
            stats.aborted_batches_removed += 1
    retain_empty = _last_of_producer(batch, rules.active_producers) or \
        batch.next_offset == rules.round_end
    if discard_records and not retain_empty:
        return None, False
    count = batch.records_count
    stats.records_read += count
    if count and not discard_records and not batch.is_control and USE_NATIVE:
        return _clean_records_native(batch, rules, stats), retain_empty
    if discard_records or not count:
        keep = [False] * count
    elif batch.is_control:
        keep = [True] * count
    else:
        keep = _records_to_keep(batch, rules, stats)
    horizon = None
    if not batch.has_delete_horizon:
        if batch.is_control:
            needs = can_discard and any(keep)
        else:
            records = batch.records(verify=False)
            needs = any(k and n < 0 for k, n in zip(keep, records.value_lens.tolist(),
                                                    strict=True))
        if needs:
            horizon = now_ms + rules.delete_retention_ms
    kept = filter_batch(batch, keep, horizon) if count else None
    if kept is not None:
        stats.records_kept += sum(keep)
    return kept, retain_empty


def _clean_records_native(batch, rules, stats):
    """_records_to_keep and filter_batch of a data batch in one native call."""
    buf, pos, length, _ = batch._records_section()
    has_horizon = batch.has_delete_horizon
    keep_tombstones = not has_horizon or rules.now_ms < batch.delete_horizon_ms
    section, kept, _last_delta, max_ts, _tombstones, keyless, rebased = native.clean_section(
        rules.offset_map, buf, pos, length, batch.records_count, batch.base_offset,
        batch.base_timestamp, rules.offset_map.latest_offset, keep_tombstones,
        None if has_horizon else rules.now_ms + rules.delete_retention_ms, batch.path)
    stats.keyless_records_removed += keyless
    stats.records_kept += kept
    if not kept:
        return None
    if kept == batch.records_count and not rebased:
        return bytes(batch.view())   # nothing removed, no horizon to set
    horizon = batch.base_timestamp if has_horizon else \
        rules.now_ms + rules.delete_retention_ms if rebased else None
    return sealed_batch(batch, section, kept, max_ts, horizon)


def _records_to_keep(batch, rules, stats):
    offset_map = rules.offset_map
    latest = offset_map.latest_offset
    records = batch.records(verify=False)
    keep_tombstones = not batch.has_delete_horizon or rules.now_ms < batch.delete_horizon_ms
    keep = []
    for offset, key, value_len in zip(records.offsets.tolist(), records.keys(),
                                      records.value_lens.tolist(), strict=True):
        if offset > latest:
            keep.append(True)
        elif key is None:
            stats.keyless_records_removed += 1
            keep.append(False)
        else:
            keep.append(offset >= offset_map.get(key) and (value_len >= 0 or keep_tombstones))
    return keep


def clean_group(partition_log, group, rules, txns, stats, progress=None, stop=None):
    """Step 3 for one group: its `.cleaned` segment, sealed and fsynced, with the aborted
    transactions it keeps; None when the group holds no batch at all."""
    directory = partition_log.directory
    base = group[0].base_offset
    _remove_cleaned_files(directory, base)
    cleaned = LogSegment(directory, base, partition_log.config, suffix=files.CLEANED_SUFFIX,
                         now_ms=rules.now_ms, open_files=partition_log.open_files, new=True)
    buffer = bytearray()
    try:
        infos, pieces, pending = [], [], 0
        first = None
        last_empty = None   # the last batch read, emptied, if nothing of it was kept
        for segment in group:
            _check_stop(stop)
            stats.segments_read += 1
            for batch in _segment_batches(segment, buffer=buffer):
                stats.bytes_read += batch.size_in_bytes
                kept, retain_empty = _clean_batch(batch, rules, txns, stats)
                last_empty = None
                if kept is None:
                    if retain_empty:
                        kept = empty_batch(batch)
                    else:
                        last_empty = empty_batch(batch)   # the batch's bytes are reused
                        continue
                _gather(kept, infos, pieces)
                if first is None:
                    first = batch.base_offset
                pending += len(kept)
                if pending >= _WRITE_CHUNK:
                    cleaned.append(infos, pieces, first)
                    stats.bytes_written += pending
                    infos, pieces, pending, first = [], [], 0, None
            if progress is not None:
                progress(segment.size)
        if last_empty is not None:
            # The group's last batch: kept, emptied, so the segment ends where its sources did.
            _gather(last_empty, infos, pieces)
            first = RecordBatch(last_empty).base_offset if first is None else first
            pending += len(last_empty)
        if infos:
            cleaned.append(infos, pieces, first)
            stats.bytes_written += pending
        retained = txns.take_retained()
        if cleaned.size == 0:
            cleaned.delete()
            return None, []
        cleaned.on_become_inactive()
        cleaned.flush()
        # Kafka gives the cleaned segment its last source's modification time: time-based
        # retention of a segment without timestamps reads it.
        try:
            source_mtime = os.stat(group[-1].path).st_mtime
        except FileNotFoundError:
            # Retention renamed the group's segments away while the pass read them: there is
            # nothing left to replace (replace_segments would refuse it too).
            cleaned.delete()
            return None, []
        os.utime(cleaned.path, (source_mtime, source_mtime))
        if retained:
            write_index_file(files.txn_index_file(directory, base, files.CLEANED_SUFFIX),
                             retained)
        stats.segments_written += 1
        return cleaned, retained
    except BaseException:
        cleaned.delete()
        raise


def _gather(data, infos, pieces):
    batch = RecordBatch(data)
    infos.append(BatchInfo(batch.last_offset, batch.max_timestamp, len(data)))
    pieces.append(data)


def _remove_cleaned_files(directory, base):
    """A `.cleaned` segment an earlier pass left behind (it failed): never swapped in."""
    for make in (files.log_file, files.offset_index_file, files.time_index_file,
                 files.txn_index_file):
        try:
            os.remove(make(directory, base, files.CLEANED_SUFFIX))
        except FileNotFoundError:
            pass


# --- the pass --------------------------------------------------------------------------


def map_memory(dirty_offsets, max_bytes):
    """Bytes of offset map for a dirty section of dirty_offsets offsets: a slot for each
    record it can hold (no more than it has offsets), at the load factor, never more than
    max_bytes (log.cleaner.dedupe.buffer.size)."""
    wanted = (dirty_offsets + 64) * SLOT_BYTES * 10 // 9
    return max(SLOT_BYTES * 64, min(max_bytes, wanted))


def clean_log(partition_log, first_dirty, first_uncleanable, now_ms, max_map_bytes,
              progress=None, stop=None):
    """One pass over partition_log's dirty section [first_dirty, first_uncleanable);
    returns CleanResult, or None when the log changed under the pass (retention removed
    a segment it cleaned): nothing was swapped in, the next pass tries again.
    progress(nbytes): called as each segment is read (the map's dirty segments, then every
    segment copied), for a progress bar. stop(): asked before each segment; True ends the
    pass with CleaningAborted, nothing swapped in."""
    stats = CleanStats()
    snapshot = partition_log.cleaner_snapshot()
    config = partition_log.config
    memory = map_memory(first_uncleanable - first_dirty, max_map_bytes)
    offset_map = OffsetMap(memory)
    end = build_offset_map(snapshot, offset_map, first_dirty, first_uncleanable, stats,
                           progress, stop)
    stats.map_bytes = memory
    if end <= first_dirty:
        raise KafkaStorageError(
            f"{partition_log.name}: the cleaner's offset map ({memory} bytes) cannot hold the "
            f"keys of even one batch at offset {first_dirty}; raise "
            "log.cleaner.dedupe.buffer.size")
    segments = snapshot.segments
    # The sealed segments holding offsets below end (Kafka cleans from the log start on).
    chosen = [i for i in range(len(segments) - 1) if segments[i].base_offset < end and
              segments[i + 1].base_offset > snapshot.log_start_offset]
    sealed = [segments[i] for i in chosen]
    ends = [segments[i + 1].base_offset for i in chosen]
    groups = group_segments(sealed, ends, config.segment_bytes, config.segment_index_bytes)
    rules = _Rules(offset_map, now_ms, config.delete_retention_ms, end,
                   snapshot.active_producers)
    # Kafka's collectAbortedTransactions: the aborted transactions the cleaned segments
    # can hold (a marker below the first of them was removed with its segment).
    txns = TransactionTracker(t for t in snapshot.aborted
                              if sealed and t.last_offset >= sealed[0].base_offset)
    replacements = []
    try:
        for group in groups:
            cleaned, retained = clean_group(partition_log, group, rules, txns, stats,
                                            progress, stop)
            if cleaned is not None:
                replacements.append((group, cleaned, retained))
        swapped = partition_log.replace_segments(replacements, snapshot.truncations)
    except BaseException:
        for _, cleaned, _ in replacements:
            # Only what never reached the swap's commit point (still `.cleaned`): a `.swap`
            # is the new log, which the next open completes.
            if not cleaned.closed and cleaned.suffix == files.CLEANED_SUFFIX:
                cleaned.delete()
        raise
    if not swapped:
        return None
    return CleanResult(end, stats.done())
