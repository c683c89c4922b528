"""A log segment: the `.log` file of a range of offsets plus its offset and time indexes.

Invariants:
  1. Batches in the file have strictly increasing offsets, all >= base_offset
     and within int32 of it (so relative offsets fit the indexes). In a log
     that is not compacted they are dense too: the first batch starts at
     base_offset and each next one just past the last offset of the one
     before. baseOffset is outside the CRC, so density is what tells a flipped
     one from a real one (a jump up reads as records at offsets never written).
  2. Index rule, per batch, identical on append and on recovery so a rebuilt
     index equals the original: once more than index_interval_bytes have been
     appended since the last entry, the batch's last offset is indexed at the
     batch's start position (the first batch is never indexed), and the time
     index gets (max timestamp so far, batch where it was first reached).
  3. An inactive segment's indexes are trimmed to their entries and end with
     the entry for the segment's largest timestamp.

Thread-safety: append, roll-related calls, recover and close run under the
partition's append lock; read, translate_offset and find_offset_by_timestamp
may run on any thread at the same time.

Open files: a segment's descriptors and maps are the root's to bound
(open_files.OpenSegments). Every method that touches a file pins the segment
for its duration, which opens the files if they were released; a segment not
in use may have them released at any time, keeping its size, index entry
counts and timestamps. A segment made `lazy` (an existing one the loader did
not need to read) opens nothing until its first use, and checks its indexes
then: an index that fails the check is rebuilt from the log, as the loader
would have done. Until then it is not even made: it holds its identity only,
and the first touch of anything else makes the rest (_make_state), since a
database of 10,000 partitions x 20 segments makes 200,000 at open.

On a crash: bytes written after the last fsync may be missing or torn, and
the indexes may disagree with the log; recover() rebuilds both indexes from
the log and cuts the log after the last valid batch.
"""
import bisect
import functools
import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import NamedTuple

from ..errors import CorruptRecordError, KafkaStorageError
from . import files
from .file_records import FileRecords, IncompleteBatch
from .mapping import MAPS_HOLD_NO_DESCRIPTOR
from .offset_index import OffsetIndex
from .open_files import OpenSegments
from .record_batch import LOG_OVERHEAD, NO_TIMESTAMP, iter_batches
from .time_index import TimeIndex

_logger = logging.getLogger("streamlog.storage")

_INT32_MAX = 2**31 - 1
# How many recently appended batches a segment remembers exactly (see _recent).
_RECENT_BATCHES = 1024
# Held while a lazy segment makes its state (LogSegment.__getattr__): rare and short.
_MAKING_STATE = threading.Lock()


class BatchInfo(NamedTuple):
    """What the segment needs to know of each appended batch (gathered by the log)."""

    last_offset: int
    max_timestamp: int
    size: int


class FetchSlice(NamedTuple):
    """Whole batches read from one segment: header-parsed views over one buffer."""

    batches: list
    position: int  # file position of the first batch
    size: int      # bytes covered by `batches`


class RecoveryResult(NamedTuple):
    valid_bytes: int
    truncated_bytes: int
    next_offset: int     # one past the last valid batch (base_offset if none)
    batches: int
    reason: str          # why recovery stopped early ('' if it read to the end)


def open_readonly_segments(directory, bases, config, now_ms=None, open_files=None):
    """Read-only LogSegments of `bases`, leaving out any whose log file is gone by the time it
    is opened: the writer's retention may delete (or rename to .deleted) a segment between a
    reader's listing and its open. What it held is then below the log start, which a fetch
    answers as out of range, as Kafka's does."""
    segments = []
    for base in bases:
        try:
            segment = LogSegment(directory, base, config, readonly=True, now_ms=now_ms,
                                 open_files=open_files, lazy=True)
            if config.compact:
                # The cleaner replaces a segment by another of the same name: opening the
                # log now binds the segment to this file (FileRecords.identity, its size
                # too), which tells them apart (replaced_on_disk) and which a later open
                # must find again.
                with segment.pinned():
                    pass
            segments.append(segment)
        except (KafkaStorageError, FileNotFoundError) as exc:
            if not isinstance(exc, FileNotFoundError) and \
                    not isinstance(exc.__cause__, FileNotFoundError):
                raise
    return segments


def _uses_files(method):
    """Pin the segment (its files open) for the duration of the method."""
    @functools.wraps(method)
    def pinned_call(self, *args, **kwargs):
        self.pin()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.unpin()
    return pinned_call


class LogSegment:
    _unlinked = False   # unlink_files() took the files' names away

    def __init__(self, directory, base_offset, config, readonly=False, suffix="", now_ms=None,
                 open_files=None, lazy=False, new=False, recovering=False, active=False):
        """open_files: the root's OpenSegments (None: a bound of its own, unbounded).
        new: made just now, with no file at its offset yet (a roll, a new partition): only
        the log is created; each index file when its first entry needs room, or empty at
        the seal (sparse_index.start_new). recovering: recover() rebuilds its indexes
        next, so a missing index file is not made now (only if an entry or the seal needs
        it), nor are the indexes' last entries read.
        lazy: the segment's files exist and need not be looked at (nor their indexes
        checked) until used: only the identity below is made now, the rest by
        _make_state at the first touch of any of it (a database of many segments makes
        hundreds of thousands of these at open and uses few). active: lazy, but the log's
        last segment (a clean open that knows the log's end: saved_listings.py), so not
        sealed: its indexes are loaded at its first use, its timestamps at its first
        append."""
        self.directory = directory
        self.base_offset = base_offset
        self.readonly = readonly
        self._config = config
        self._suffix = suffix
        self._open_files_of = open_files if open_files is not None else OpenSegments()
        self._pins = 0
        # Descriptors while open (see open_files.py): the log's, plus one per index map
        # where maps hold one.
        self.file_cost = 1 if readonly or MAPS_HOLD_NO_DESCRIPTOR else 3
        self.created_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        self.roll_jitter_ms = config.random_segment_jitter()
        # A lazy segment's indexes are checked at its first use (see the module doc).
        self._unchecked = lazy and not readonly
        # Sealed: the final time entry is written and the indexes trimmed (a lazy segment
        # other than the active one is one the loader found below the last, sealed by the
        # run that rolled it).
        self._sealed = lazy and not active
        self._closed = False
        if readonly or not lazy:
            # Read-only: the file must exist now (open_readonly_segments skips one that
            # retention removed). Writer, not lazy: made or recovered here.
            self._make_state()
        if new or recovering:
            for index in (self.offset_index, self.time_index):
                if new or not index.load_unmapped():
                    index.start_new()
            self._timestamps_loaded = True
        if new:
            with self.pinned():
                pass   # creates the log file: the roll's one file creation
        elif not lazy:
            with self.pinned():
                # Its index files exist from now on (verify and the next open expect them),
                # and appends need their entry counts.
                self._load_indexes()
                self._load_timestamps()

    def _make_state(self):
        """The file objects and the append and read state; once, before any use of them."""
        config = self._config
        directory, base_offset, suffix = self.directory, self.base_offset, self._suffix
        self.index_interval_bytes = config.index_interval_bytes
        # No batch being written can be longer: a partial batch that claims more is corruption.
        self.max_batch_bytes = max(config.segment_bytes, config.max_message_bytes)
        # Only the cleaner leaves gaps between offsets (invariant 1); a segment keeps the
        # policy it was opened under, as it keeps index.interval.bytes.
        self.dense = not config.compact
        self.log = FileRecords(files.log_file(directory, base_offset, suffix), self.readonly,
                               lazy=True)
        self.offset_index = OffsetIndex(files.offset_index_file(directory, base_offset, suffix),
                                        base_offset, config.segment_index_bytes, self.readonly,
                                        lazy=True)
        self.time_index = TimeIndex(files.time_index_file(directory, base_offset, suffix),
                                    base_offset, config.segment_index_bytes, self.readonly,
                                    lazy=True)
        self.bytes_since_last_index_entry = 0
        # (base offset, position) of the batches appended in this process, newest last: a
        # reader at the tail finds its batch here by bisection instead of scanning headers
        # from the last sparse index entry. Replaced (never shrunk in place) so lock-free
        # readers always see a consistent list.
        self._recent = []
        self._recent_end = -1   # the last offset the newest of them holds
        # The first append's largest timestamp decides time-based rolling; loaded lazily.
        self._rolling_based_timestamp = None
        self._timestamps_loaded = False
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = base_offset
        self._check_lock = threading.Lock()
        self._state_made = True  # last: a reader that sees it sees everything above

    def _state_is_made(self):
        """False for a lazy segment nothing has used yet (see __init__)."""
        return "_state_made" in self.__dict__

    def __getattr__(self, name):
        """Only for what a lazy segment has not made yet (see __init__): make it, once, under
        a lock shared by all segments (two threads must not make two sets of file objects,
        one of which would leak its descriptor)."""
        if name.startswith("__") or "_state_made" in self.__dict__ \
                or "_config" not in self.__dict__:
            raise AttributeError(name)
        with _MAKING_STATE:
            if "_state_made" not in self.__dict__:
                self._make_state()
        return object.__getattribute__(self, name)

    # --- open files (see open_files.py) -----------------------------------

    def pin(self):
        """Open the files if they were released, and keep them until unpin()."""
        if self._closed:
            raise KafkaStorageError(f"segment {self.log.path} is closed")
        self._open_files_of.pin(self)
        if self._unchecked:
            try:
                self._check_indexes()
            except BaseException:
                self.unpin()
                raise

    def unpin(self):
        self._open_files_of.unpin(self)

    @contextmanager
    def pinned(self):
        self.pin()
        try:
            yield self
        finally:
            self.unpin()

    def _open_files(self):
        """Called by OpenSegments, under its lock. Only the log: each index maps itself at
        its first use (an append that adds no index entry, a read from the segment's
        start, never maps one), so a segment pushed out and back in costs one open."""
        self.log.open()

    def _load_timestamps(self):
        if not self._timestamps_loaded:
            largest, offset = self.time_index.last_entry()
            if self.readonly:
                largest, offset = self._with_unindexed_timestamps(largest, offset)
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = largest, offset
            self._timestamps_loaded = True

    def _with_unindexed_timestamps(self, largest, offset):
        """Read-only: (largest timestamp, its batch's last offset) counting the batches
        written after the time index's last entry. The writer's active segment holds its
        largest timestamp in memory; its time index has it only at the next index interval,
        or in the final entry at seal. Kafka's recovery takes a batch's last offset too."""
        _, position = self._entry_or_start(self.offset_index.lookup(offset))
        try:
            for header in self.log.headers(position):
                if header.max_timestamp > largest:
                    largest, offset = header.max_timestamp, header.last_offset
        except IncompleteBatch:
            pass   # a batch the writer is still writing: counted once it is whole
        return largest, offset

    def _release_files(self):
        """Called by OpenSegments, under its lock, when the segment is not pinned."""
        self.log.release()
        self.offset_index.release()
        self.time_index.release()

    def _check_indexes(self):
        with self._check_lock:
            if not self._unchecked:
                return
            problem = self._index_problem()
            if problem:
                # What the loader does for a segment it reads at open; the log is not cut
                # here (a read of damaged bytes is a CorruptRecordError instead).
                _logger.warning("rebuilding the indexes of %s: %s", self.log.path, problem)
                self._rebuild_indexes(truncate=False)
            self._unchecked = False

    # --- size and offsets -------------------------------------------------

    @property
    def size(self):
        return self.log.size

    @property
    def path(self):
        return self.log.path

    @property
    def suffix(self):
        """The temporary suffix of the segment's file names ('' for an ordinary segment)."""
        return self._suffix

    @property
    def closed(self):
        return self._closed

    def __repr__(self):
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"

    @_uses_files
    def read_next_offset(self):
        """One past the last offset in the segment (scans from the last index entry)."""
        next_offset = self.base_offset
        try:
            for header in self.log.headers(self.tail_scan_start()):
                next_offset = header.next_offset
        except IncompleteBatch as exc:
            if not self.readonly:
                raise
            self.check_partial_tail(exc)
        return next_offset

    @_uses_files
    def tail_scan_start(self):
        """Where a scan for the segment's end may start: the last index entry's position if a
        batch really starts there, else 0. An index never decides what a reader sees: a
        read-only view's index may be garbled, swapped, or point past a torn tail."""
        return self._entry_or_start(self.offset_index.last_entry())[1]

    def check_partial_tail(self, exc):
        """A read-only view met a file ending inside a batch (IncompleteBatch exc): fine for a
        batch being written, CorruptRecordError for one no writer could be writing."""
        if exc.needed > self.max_batch_bytes:
            raise CorruptRecordError(
                f"record batch of {exc.needed} bytes at byte {exc.position} is longer than "
                f"segment.bytes and max.message.bytes ({self.max_batch_bytes})", self.log.path,
                exc.position) from None

    @_uses_files
    def rolling_based_timestamp(self):
        if self._rolling_based_timestamp is None and self.size > 0:
            for header in self.log.headers(0):
                self._rolling_based_timestamp = header.max_timestamp
                break
        return self._rolling_based_timestamp

    @property
    def max_timestamp(self):
        """The largest record timestamp, -1 when no record has one (Kafka's
        maxTimestampSoFar)."""
        if not self._timestamps_loaded:
            with self.pinned():
                self._load_timestamps()
        return self.max_timestamp_so_far

    @property
    def largest_timestamp(self):
        """The largest record timestamp, or the file's mtime when there is none (for retention
        and the timestamp search, as Kafka's LogSegment.largestTimestamp)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp_so_far
        try:
            return int(os.stat(self.log.path).st_mtime * 1000)
        except FileNotFoundError:
            return self.created_ms

    # --- appending --------------------------------------------------------

    def should_roll(self, incoming_bytes, max_timestamp, last_offset, now_ms, segment_bytes,
                    max_segment_ms):
        """Whether the next append must go to a new segment (Kafka's four reasons).

        Only the age needs something in the segment: an empty one must roll too when the
        batch's offsets lie beyond its 32-bit relative offsets (a replica's first batch
        far above the segment's base), or they would not fit its indexes."""
        if last_offset - self.base_offset > _INT32_MAX:
            return True
        if self.size == 0:
            return False
        if self.size > segment_bytes - incoming_bytes:
            return True
        rolling_ts = self.rolling_based_timestamp()
        waited = (max_timestamp - rolling_ts if rolling_ts is not None and rolling_ts >= 0
                  else now_ms - self.created_ms)
        if waited > max_segment_ms - self.roll_jitter_ms:
            return True
        return self.offset_index.is_full() or self.time_index.is_full()

    @_uses_files
    def append(self, batch_infos, pieces, first_offset):
        """Write validated batches (pieces of bytes) and index them (invariant 2)."""
        # Room for the entries these batches may add (plus the final time entry of a roll),
        # reserved before the log grows: a full disk refuses here, with nothing written,
        # rather than after the batches are in the log but not in its index. Batches that
        # cannot reach index_interval_bytes (invariant 2: the last one's size never counts)
        # add none, and reserve nothing: a new segment's index files wait for an entry.
        self._load_timestamps()   # a lazy active segment's, before its first entry
        if self.bytes_since_last_index_entry + sum(b.size for b in batch_infos[:-1]) > \
                self.index_interval_bytes:
            self.offset_index.reserve(len(batch_infos))
            self.time_index.reserve(len(batch_infos) + 1)
        position = self.log.append(pieces)
        # Appended to, so no longer sealed: the close must write the final time entry again
        # (recovery seals the segment it rebuilt, and the log appends to it afterwards).
        self._sealed = False
        if position == 0 and batch_infos:
            self._rolling_based_timestamp = max(b.max_timestamp for b in batch_infos)
        recent = self._recent
        if len(recent) >= 2 * _RECENT_BATCHES:
            recent = self._recent = recent[_RECENT_BATCHES:]
        # Each entry starts where the batch before ended (a compacted log's gaps included), so
        # bisection finds the first batch ending at or after an offset.
        base = self._recent_end + 1 if recent else first_offset
        for info in batch_infos:
            self._index_batch(info.last_offset, info.max_timestamp, info.size, position)
            recent.append((base, position))
            base = info.last_offset + 1
            position += info.size
        self._recent_end = base - 1

    def _index_batch(self, last_offset, max_timestamp, size, position):
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp_so_far = last_offset
        # A full index only stops indexing: the index is sparse, never what decides which
        # batches the log keeps. Appends roll before an index fills (should_roll); recovery
        # of a segment written with a larger index, or another interval, may not.
        if self.bytes_since_last_index_entry > self.index_interval_bytes and not (
                self.offset_index.is_full() or self.time_index.is_full()):
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far,
                                         self.offset_of_max_timestamp_so_far)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    @_uses_files
    def on_become_inactive(self):
        self._seal()

    def _seal(self):
        """Record the final time-index entry and trim the indexes (invariant 3)."""
        self._append_final_time_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._sealed = True

    def _append_final_time_entry(self):
        self._load_timestamps()
        if self.max_timestamp_so_far >= 0 and not self.readonly:
            self.time_index.maybe_append(self.max_timestamp_so_far,
                                         self.offset_of_max_timestamp_so_far,
                                         skip_full_check=True)

    @_uses_files
    def resize_indexes(self, size):
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # --- reading ----------------------------------------------------------

    @_uses_files
    def translate_offset(self, offset, upper_offset=None, sealed=False):
        """File position of the first batch whose last offset is >= offset, or None."""
        found = self._locate(offset, upper_offset, sealed)
        return None if found is None else found[0]

    def _locate(self, offset, upper_offset=None, sealed=False):
        """(position, previous batch's last offset or None) of the first batch ending >= offset.

        The baseOffset field is outside the CRC, so offsets are checked
        structurally while scanning: the batch an index entry points at must
        end at that entry's offset, and every batch must lie in the segment's
        range after the one before it (invariant 1). A file that ends inside a
        batch is a batch being written only in the newest segment of a
        read-only view; a sealed one (a newer segment exists) was cut short,
        and reading on in the next segment would skip records unseen.
        """
        recent = self._recent
        if recent and recent[0][0] <= offset <= self._recent_end:
            i = bisect.bisect_right(recent, (offset, float("inf"))) - 1
            base, position = recent[i]
            # Appended one after the other here: the previous batch ends just below this one.
            return position, (base - 1 if i else None)
        index_offset, position = self.offset_index.lookup(offset)
        if self.readonly:   # the view's snapshot of the index may no longer match the file
            index_offset, position = self._entry_or_start((index_offset, position))
        expect_last = index_offset if position else None
        prev_last = None if position else self.base_offset - 1
        try:
            for header in self.log.headers(position):
                self._check_offsets(header, prev_last, upper_offset)
                if expect_last is not None and header.last_offset != expect_last:
                    raise CorruptRecordError(
                        f"record batch ends at offset {header.last_offset} but the index says "
                        f"{expect_last}", self.log.path, header.file_position)
                expect_last = None
                if header.last_offset >= offset:
                    return header.file_position, prev_last
                prev_last = header.last_offset
        except IncompleteBatch as exc:
            if not self.readonly or self._proved_whole(offset, upper_offset, sealed):
                raise CorruptRecordError("log ends inside a record batch", self.log.path,
                                         self.log.size) from None
            self.check_partial_tail(exc)
        return None

    @staticmethod
    def _proved_whole(offset, upper_offset, sealed):
        """Read-only: whether the batch holding offset must lie whole in the file.

        A file ending inside a batch is a batch being written only in the newest segment and
        only past the end the view's tail scan proved whole (upper_offset, when given):
        waiting on a batch below that end would stall a reader on damage forever."""
        return sealed or (upper_offset is not None and offset < upper_offset)

    def _check_offsets(self, header, prev_last, upper_offset):
        if header.base_offset < self.base_offset or \
                header.last_offset - self.base_offset > _INT32_MAX or \
                self._out_of_sequence(header.base_offset, prev_last) or \
                (upper_offset is not None and header.last_offset >= upper_offset):
            raise CorruptRecordError(
                f"record batch offsets {header.base_offset}..{header.last_offset} are out of "
                f"order for segment {self.base_offset}"
                + ("" if prev_last is None else f" after offset {prev_last}"),
                self.log.path, header.file_position)

    def _out_of_sequence(self, base_offset, prev_last):
        """Whether a batch at base_offset cannot follow one ending at prev_last (invariant 1)."""
        if prev_last is None:
            return False
        return base_offset != prev_last + 1 if self.dense else base_offset <= prev_last

    @_uses_files
    def batch_offsets(self):
        """(base offset, last offset) of each batch, in file order, from the headers alone."""
        return [(header.base_offset, header.last_offset) for header in self.log.headers()]

    def _entry_or_start(self, entry):
        """An offset-index entry (offset, position) when a batch of this file is there to
        match it, else the segment's start (base offset, 0): a scan from there is right
        whatever the index holds."""
        offset, position = entry
        if position and not self._index_entry_matches(position, offset):
            return self.base_offset, 0
        return offset, position

    def _index_entry_matches(self, position, last_offset):
        """Whether an index entry (last_offset, position) is of this file: a batch of this
        segment starts at position and ends at last_offset (an entry's offset is its
        batch's last; an index of another file under the same name points elsewhere)."""
        try:
            header = next(self.log.headers(position), None)
        except (IncompleteBatch, CorruptRecordError):
            return False
        return header is not None and \
            self.base_offset <= header.base_offset <= header.last_offset == last_offset

    @_uses_files
    def read(self, start_offset, max_size, max_offset=None, min_one_batch=True,
             upper_offset=None, buffer=None, sealed=False):
        """Whole batches from the one holding start_offset, up to max_size bytes.

        Stops before any batch whose base offset is >= max_offset (the high
        watermark or last stable offset). With min_one_batch, the first batch
        is returned even when it is larger than max_size. upper_offset is
        where the next segment starts (or the log end): no batch may reach it.
        None when the segment has no offset >= start_offset. With `buffer`,
        the batches are views into it (see FileRecords.read). sealed: a newer
        segment exists, so this one must end on a batch boundary.
        """
        found = self._locate(start_offset, upper_offset, sealed)
        if found is None:
            return None
        start, prev_last = found
        limit = self.log.size  # snapshot: everything below it is fully written
        want = min(max_size, limit - start)
        if self.readonly or buffer is not None:
            buf = self.log.read(start, want, buffer)
        else:
            buf = self.log.view(start, want)  # zero-copy from the mapping
        head = buf if len(buf) >= LOG_OVERHEAD else self.log.read(start, LOG_OVERHEAD)
        if min_one_batch and len(head) >= LOG_OVERHEAD:
            needed = int.from_bytes(bytes(head[8:12]), "big", signed=True) + LOG_OVERHEAD
            if needed > len(buf):
                # The first batch alone is larger than max_size: read exactly that batch.
                if start + needed > limit:
                    if self.readonly and not self._proved_whole(start_offset, upper_offset,
                                                                sealed):
                        return FetchSlice([], start, 0)  # still being written
                    raise CorruptRecordError("record batch runs past the end of the log",
                                             self.log.path, start)
                buf = self.log.read(start, needed)
        batches = []
        pos = 0
        for batch in iter_batches(buf, 0, len(buf), self.log.path, start):
            batch.check_header()
            if max_offset is not None and batch.base_offset >= max_offset:
                break  # not visible yet (or appended after the caller's snapshot)
            self._check_offsets(batch, prev_last, upper_offset)
            batches.append(batch)
            prev_last = batch.last_offset
            pos += batch.size_in_bytes
        if batches and len(buf) - pos >= LOG_OVERHEAD:
            # The header of the batch after the last one returned is at hand: check it too.
            next_base = int.from_bytes(bytes(buf[pos:pos + 8]), "big", signed=True)
            if self._out_of_sequence(next_base, prev_last):
                raise CorruptRecordError(
                    f"record batch at offset {next_base} follows one ending at {prev_last}",
                    self.log.path, start + pos)
        return FetchSlice(batches, start, pos)

    @_uses_files
    def find_offset_by_timestamp(self, timestamp, starting_offset, upper_offset=None,
                                 sealed=False):
        """(offset, timestamp) of the first record with timestamp >= target and
        offset >= starting_offset in this segment, or None. sealed: as in read()."""
        if self.readonly:
            ts_offset = self.base_offset  # the snapshot may not match the file any more: scan
        else:
            _, ts_offset = self.time_index.lookup(timestamp)
        scanned_to = max(ts_offset, starting_offset)
        position = self.translate_offset(scanned_to, upper_offset, sealed) or 0
        try:
            for header in self.log.headers(position):
                scanned_to = header.next_offset
                if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                    continue
                batch = next(self.log.batches(header.file_position,
                                              header.file_position + header.size_in_bytes))
                recs = batch.records()
                for off, ts in zip(recs.offsets.tolist(), recs.timestamps.tolist(), strict=True):
                    if ts >= timestamp and off >= starting_offset:
                        return off, ts
        except IncompleteBatch:
            if not self.readonly or self._proved_whole(scanned_to, upper_offset, sealed):
                raise CorruptRecordError("log ends inside a record batch", self.log.path,
                                         self.log.size) from None
        return None

    # --- recovery ---------------------------------------------------------

    @_uses_files
    def recover(self, seal=True):
        """Re-validate every batch, rebuild both indexes, cut the log after the last valid batch.
        seal=False: the segment stays the active one (its close seals it)."""
        return self._rebuild_indexes(truncate=True, seal=seal)

    @_uses_files
    def truncate_to(self, offset):
        """Cut every batch that ends at or after offset, while readers may be reading (a
        replica's divergent tail: PartitionLog.truncate_to); the segment is an active one
        afterwards, its indexes rebuilt. Returns its next offset (below offset when offset
        fell inside a batch: a batch is kept whole or not at all)."""
        position = self.translate_offset(offset)
        if position is not None:
            self._recent = []
            self._recent_end = -1
            self.log.cut_to(position)
        self._sealed = False
        return self._rebuild_indexes(truncate=False, seal=False).next_offset

    def _rebuild_indexes(self, truncate, seal=True):
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = self.base_offset
        self._timestamps_loaded = True
        self.bytes_since_last_index_entry = 0
        self._rolling_based_timestamp = None
        valid = batches = 0
        next_offset = self.base_offset
        reason = ""
        try:
            for batch in self.log.batches():
                batch.ensure_valid()
                if self._out_of_sequence(batch.base_offset, next_offset - 1):
                    raise CorruptRecordError(
                        f"record batch offset {batch.base_offset} cannot follow offset "
                        f"{next_offset - 1}", self.log.path, valid)
                if batch.last_offset - self.base_offset > _INT32_MAX:
                    raise CorruptRecordError("record batch offset out of the segment's range",
                                             self.log.path, valid)
                self._index_batch(batch.last_offset, batch.max_timestamp, batch.size_in_bytes,
                                  valid)
                valid += batch.size_in_bytes
                next_offset = batch.next_offset
                batches += 1
        except (CorruptRecordError, IncompleteBatch) as exc:
            reason = getattr(exc, "reason", str(exc))
        truncated = self.log.truncate_to(valid) if truncate else 0
        if seal:
            self._seal()
        return RecoveryResult(valid, truncated, next_offset, batches, reason)

    @_uses_files
    def index_problem(self):
        """None if both indexes pass their sanity checks against the log, else why not."""
        return self._index_problem()

    def _index_problem(self):
        self._load_indexes()
        if self.log.size and (self.offset_index.created or self.time_index.created):
            return f"an index file of {self.log.path} is missing"
        return (self.offset_index.sanity_problem(self.log.size)
                or self.time_index.sanity_problem(self.base_offset + _INT32_MAX))

    def _load_indexes(self):
        """Learn both indexes' entries, creating a missing file (and saying so: created).
        Read, not mapped: most segments loaded here (the active one of an idle log, a lazy one
        reopened for a seek) are never appended to or searched at length."""
        for index in (self.offset_index, self.time_index):
            if not index.load_unmapped():
                index.open()

    # --- lifecycle --------------------------------------------------------

    def flush(self):
        self.flush_log()
        self.flush_indexes()

    def flush_log(self):
        """fsync the log file (no-op once closed, or while a lazy segment is unused: its
        files are as the run that made them left them, fsynced)."""
        if not self._closed and self._state_is_made():
            with self.pinned():
                self.log.flush()

    def flush_indexes(self):
        if not self._closed and self._state_is_made():
            with self.pinned():
                self.offset_index.flush()
                self.time_index.flush()

    def replaced_on_disk(self):
        """Read-only, compacted log: whether the file under this segment's name is no longer
        the one the view opened (the cleaner swapped a cleaned segment in, or removed it)."""
        return self.log.replaced()

    def forget_timestamps(self):
        """Read-only: the largest timestamp is read again at its next use, with the time
        index: the writer may have appended to this segment, or sealed it with its final
        time-index entry, since they were read."""
        if self._state_is_made():
            self._timestamps_loaded = False
            self.time_index.forget_snapshot()

    def refresh_size(self):
        """Read-only: the log file's length now (a writer may have appended)."""
        with self.pinned():
            return self.log.refresh_size()

    def close(self, seal=True):
        """Write the final time-index entry, trim the indexes and close the files.
        seal=False: only close (the segment is about to be removed)."""
        if self._closed:
            return
        if not self._state_is_made():
            self._closed = True  # a lazy segment never used: nothing was opened
            return
        try:
            if seal and not self.readonly and not self.log.closed and not self._sealed:
                with self.pinned():
                    self._seal()
        finally:
            # Sealing may fail (a full disk, no descriptor left to trim with): the files are
            # let go all the same, and the next open finds the segment unsealed and reseals it.
            self._closed = True
            self._open_files_of.forget(self)
            self.offset_index.close(trim=False)
            self.time_index.close(trim=False)
            self.log.close()

    def rename_suffix(self, old_suffix, new_suffix):
        """Rename all of the segment's files from one temporary suffix to another."""
        for make, obj in ((files.log_file, self.log), (files.offset_index_file, self.offset_index),
                          (files.time_index_file, self.time_index)):
            target = make(self.directory, self.base_offset, new_suffix)
            if os.path.exists(obj.path):
                obj.rename(target)
            else:
                obj.path = target
        txn_index = files.txn_index_file(self.directory, self.base_offset, old_suffix)
        if os.path.exists(txn_index):  # aborted transactions' entries (txn_index.py)
            os.replace(txn_index, files.txn_index_file(self.directory, self.base_offset,
                                                        new_suffix))
        self._suffix = new_suffix

    def unlink_files(self):
        """Remove the segment's files now but keep it usable: what it has open stays readable
        (an open descriptor and a map outlive the name). delete() then only closes. For a
        segment pending deletion whose `.deleted` names are about to be taken again."""
        for path in (self.log.path, self.offset_index.path, self.time_index.path,
                     files.txn_index_file(self.directory, self.base_offset, self._suffix)):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
        self._unlinked = True

    def delete(self):
        """Close and remove every file of the segment."""
        self._closed = True
        self._open_files_of.forget(self)
        if self._unlinked:
            self.offset_index.close(trim=False)
            self.time_index.close(trim=False)
            self.log.close()
            return
        self.offset_index.delete()
        self.time_index.delete()
        try:
            os.remove(files.txn_index_file(self.directory, self.base_offset, self._suffix))
        except FileNotFoundError:
            pass
        self.log.delete()
