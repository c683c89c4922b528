"""Opening a partition directory: finish or discard interrupted file operations,
check or rebuild indexes, and recover the log after an unclean stop.

Steps (writer), in order:
  1. Delete `.deleted`, `.cleaned` and `.tmp` files. Complete an interrupted
     swap: every ordinary segment inside the offset range of a `.swap`
     segment is deleted and the `.swap` files take their final names. A
     `.cleaned` file beside `.swap` ones is a cleaner's swap that never
     committed (PartitionLog.replace_segments): its `.swap` files are deleted
     too, and the old segments stay.
  2. Delete index files that have no `.log`.
  3. Make every segment, opening only the last (and, after an unclean stop,
     those step 4 recovers): the others are lazy, opened at their first use.
     An index that fails its sanity check is rebuilt, at open for the ones
     opened here, at first use for the lazy ones.
  4. Unclean stop: recover every segment from the one holding the recovery
     point to the end (re-validate each batch, rebuild its indexes; the last
     stays unsealed, its index files made only when an entry or its close
     needs them, as a new segment's are). At the
     first invalid byte the log is cut, the cut is reported, and every later
     segment is deleted (its data follows a hole, so it cannot be kept). A log
     that is not compacted is cut the same way where a recovered segment ends
     below the next one's base: a power loss kept the later file and lost the
     earlier one's unsynced tail at a batch boundary, leaving no invalid byte,
     only offsets no segment holds (RecoveryReport.missing_gap).
  5. No segment left, or the log ends below the checkpointed log start
     offset: start over with one empty segment at the log start offset.
  6. The active segment's indexes get back segment.index.bytes as their maximum (the
     file grows into it as entries come).

A read-only open (another process, the writer may be live) changes nothing:
it lists the ordinary segments (lazy) and finds the end of the last whole batch.
"""
import logging
import os
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from ..errors import CorruptRecordError, KafkaStorageError
from . import files, saved_listings
from .file_records import IncompleteBatch
from .files import list_directory
from .segment import LogSegment, open_readonly_segments

log = logging.getLogger("streamlog.storage")


@dataclass
class RecoveryReport:
    """What opening a partition found and changed; printed by `streamlog verify`."""

    directory: str
    clean_shutdown: bool
    recovered_segments: list = field(default_factory=list)  # (base_offset, RecoveryResult)
    truncated_bytes: int = 0
    truncated_at: tuple = None                              # (log file, byte position)
    truncation_reason: str = ""
    deleted_segments: list = field(default_factory=list)    # base offsets dropped after a cut
    rebuilt_indexes: list = field(default_factory=list)     # (base_offset, problem)
    removed_files: list = field(default_factory=list)       # leftovers of interrupted work
    missing_head: tuple = None  # (log start, first segment base): the offsets between are gone
    missing_tail: tuple = None  # (end found, checkpointed end) of a clean log: the tail is gone
    missing_gap: tuple = None   # (end found, next segment's base) after an unclean stop: cut there

    @property
    def noteworthy(self):
        """Whether the user should hear of this recovery (logged, and kept in the reports)."""
        return bool(self.dropped_data or self.rebuilt_indexes or self.missing_head or
                    self.missing_tail or self.missing_gap)

    @property
    def dropped_data(self):
        return self.truncated_bytes > 0 or bool(self.deleted_segments)

    def summary(self):
        parts = []
        if self.truncated_bytes:
            path, pos = self.truncated_at
            parts.append(f"cut {self.truncated_bytes} bytes from {os.path.basename(path)} at byte "
                         f"{pos} ({self.truncation_reason})")
        if self.missing_gap:
            end, base = self.missing_gap
            parts.append(f"offsets {end}..{base - 1} are missing: a segment ends at {end} but "
                         f"the next one starts at {base} (an unsynced tail lost); cut at {end}")
        if self.deleted_segments:
            parts.append(f"deleted {len(self.deleted_segments)} later segment(s) "
                         f"{self.deleted_segments}")
        if self.missing_head:
            start, base = self.missing_head
            parts.append(f"offsets {start}..{base - 1} are missing: the log start offset "
                         f"checkpoint says {start} but the first segment starts at {base}")
        if self.missing_tail:
            end, point = self.missing_tail
            parts.append(f"offsets {end}..{point - 1} are missing: the log was closed cleanly "
                         f"at {point} but now ends at {end}")
        if self.rebuilt_indexes:
            parts.append(f"rebuilt indexes of {len(self.rebuilt_indexes)} segment(s)")
        if self.recovered_segments:
            parts.append(f"re-validated {len(self.recovered_segments)} segment(s)")
        return f"{self.directory}: " + ("; ".join(parts) if parts else "nothing to recover")


class LoadedLog(NamedTuple):
    segments: list
    next_offset: int
    recovery_point: int
    log_start_offset: int
    report: RecoveryReport
    other_names: frozenset = frozenset()  # the directory's non-segment files at open
    snapshot_offsets: tuple = ()  # the producer-state snapshots the directory holds
    txn_index_bases: tuple = ()   # the segments with a .txnindex


def load_log(directory, config, *, recovery_point=0, log_start_offset=None, clean_shutdown=False,
             readonly=False, now_ms=None, open_files=None, listing=None, saved_end=None):
    """Open (and recover) the log in directory.

    log_start_offset: the checkpointed log start, None when the checkpoint has no entry.
    Retention checkpoints the new log start before it removes a segment, so a first segment
    above a checkpointed start is a segment lost behind the log's back: the log start stays
    where it was and the offsets in between read as missing (RecoveryReport.missing_head),
    never as deleted by retention. Unknown, it is the first segment's base, as in Kafka.

    Only what recovery must read is opened: the segments from the recovery point on after
    an unclean stop, the last one after a clean stop -- not even that one where the clean
    close saved the log's end and its file is unchanged (listing, saved_end: the saved
    listing and end, saved_listings.py). The others are lazy (KIP-263): their files are
    opened, and their indexes checked, at their first use.
    """
    if readonly:
        return _load_readonly(directory, config, log_start_offset, now_ms, open_files)
    report = RecoveryReport(directory, clean_shutdown)
    # One listing serves steps 1 and 2 unless they change the directory (rare): opening
    # thousands of partitions is mostly these listings.
    saved = listing is not None   # a clean close's, the directory unchanged since
    if listing is None:
        try:
            listing = list_directory(directory)
        except FileNotFoundError:
            os.makedirs(directory, exist_ok=True)
            listing = files.list_segments([])
    if _remove(directory, listing.leftovers, report):
        listing = list_directory(directory)
    if _complete_swaps(directory, listing.swap_bases, config, report, now_ms):
        listing = list_directory(directory)
    bases = listing.bases
    _remove(directory, listing.orphan_indexes, report)
    # A clean close saved where the log ends, and its last segment's file is as the close
    # left it: that segment is lazy too (saved_listings.py). The checkpoint must agree (a
    # clean close flushed the log to its end).
    known_end = None
    if saved and clean_shutdown and bases:
        known_end = saved_listings.end_if_unchanged(directory, bases[-1], saved_end)
        if known_end is not None and known_end != recovery_point:
            known_end = None

    segments = []
    try:
        # Step 3 checks the last segment's indexes unless step 4 recovers it (rebuilding
        # them); the lazy ones check theirs at first use.
        recover_from = None if clean_shutdown else _segment_holding(bases, recovery_point)
        for i, base in enumerate(bases):
            last = i == len(bases) - 1
            recovered = recover_from is not None and base >= recover_from
            lazy = not (recovered or (last and known_end is None))
            segment = LogSegment(directory, base, config, now_ms=now_ms, open_files=open_files,
                                 lazy=lazy, recovering=recovered, active=last)
            segments.append(segment)
            if recovered or lazy:
                continue
            problem = segment.index_problem()
            if problem:
                report.rebuilt_indexes.append((base, problem))
                result = segment.recover()
                if result.truncated_bytes or result.reason:
                    # Bytes below the recovery point were fsynced: this is damage, not a
                    # torn write. Keep later segments (their data is valid) and say so.
                    _note_truncation(report, segment, result)

        next_offset = known_end
        if clean_shutdown and segments and known_end is None:
            try:
                next_offset = _next_offset(segments)
            except (IncompleteBatch, CorruptRecordError) as exc:
                log.warning("%s: marked clean but %s; recovering", directory, exc)
                report.clean_shutdown = clean_shutdown = False
            if saved and next_offset is not None and next_offset != recovery_point:
                # A clean close flushed the log to its end, so the checkpoint names the end
                # the saved listing must reach. It does not (a segment it lacks): list.
                log.warning("%s: the saved listing ends at offset %d, the checkpoint at %d; "
                            "listing the directory", directory, next_offset, recovery_point)
                for segment in segments:
                    segment.close()
                return load_log(directory, config, recovery_point=recovery_point,
                                log_start_offset=log_start_offset,
                                clean_shutdown=clean_shutdown, now_ms=now_ms,
                                open_files=open_files)
        if clean_shutdown and next_offset is not None and next_offset < recovery_point:
            # A clean close flushed the log to the checkpointed point, so its tail was
            # removed since (damage, a cut at a batch boundary). Opened as unclean: the
            # transaction index and producer state must not keep what it held.
            report.missing_tail = (next_offset, recovery_point)
            report.clean_shutdown = clean_shutdown = False
        if not clean_shutdown and segments:
            next_offset = _recover_from(segments, recovery_point, report)
        if not segments or next_offset < (log_start_offset or 0):
            log_start_offset = log_start_offset or 0
            for segment in segments:
                report.deleted_segments.append(segment.base_offset)
                segment.delete()
            segments = [LogSegment(directory, log_start_offset, config, now_ms=now_ms,
                                   open_files=open_files, new=True)]
            next_offset = log_start_offset
        if known_end is None:
            segments[-1].resize_indexes(config.segment_index_bytes)
    except BaseException:
        for segment in segments:
            segment.close()
        raise

    log_start_offset = _log_start(log_start_offset, segments, report)
    recovery_point = next_offset if clean_shutdown else min(recovery_point, next_offset)
    if report.noteworthy:
        log.warning("recovery: %s", report.summary())
    return LoadedLog(segments, next_offset, recovery_point, log_start_offset, report,
                     frozenset(listing.other_names), tuple(listing.snapshot_offsets),
                     tuple(listing.txn_index_bases))


def _log_start(checkpointed, segments, report):
    first_base = segments[0].base_offset
    if checkpointed is None:
        return first_base
    if checkpointed < first_base:
        report.missing_head = (checkpointed, first_base)
    return checkpointed


def _next_offset(segments):
    for segment in reversed(segments):
        if segment.size:
            return segment.read_next_offset()
    return segments[-1].base_offset


def _segment_holding(bases, offset):
    """Base offset of the segment that holds `offset` (the first one when it is below all)."""
    holding = bases[0] if bases else None
    for base in bases:
        if base <= offset:
            holding = base
    return holding


def _note_truncation(report, segment, result):
    report.truncated_bytes += result.truncated_bytes
    report.truncated_at = (segment.path, result.valid_bytes)
    report.truncation_reason = result.reason


def _recover_from(segments, recovery_point, report):
    """Step 4; returns the log's next offset and deletes what follows a cut."""
    holding = _segment_holding([s.base_offset for s in segments], recovery_point)
    start = next(i for i, s in enumerate(segments) if s.base_offset == holding)
    next_offset = segments[start].base_offset
    for i in range(start, len(segments)):
        segment = segments[i]
        result = segment.recover(seal=i + 1 < len(segments))   # the last stays active
        report.recovered_segments.append((segment.base_offset, result))
        next_offset = result.next_offset if result.batches else max(next_offset,
                                                                     segment.base_offset)
        if result.truncated_bytes or result.reason:
            _note_truncation(report, segment, result)
            _delete_after(segments, i, report)
            break
        if i + 1 == len(segments):
            break
        following = segments[i + 1].base_offset
        if following < next_offset:
            raise KafkaStorageError(
                f"segment {segments[i + 1].path} starts at offset {following}, "
                f"inside the previous segment (which ends at {next_offset - 1})")
        if following > next_offset and segment.dense:
            # Only the cleaner leaves offsets out (segment invariant 1), so the next segment's
            # first batch skips offsets, which a batch inside a segment may not (recover()
            # cuts there): a power loss kept that later file and lost this one's unsynced
            # tail whole, at a batch boundary (a roll does not fsync it; Kafka's
            # UnifiedLog.roll only schedules the flush). Kafka's LogLoader.recoverLog drops
            # everything after the first loss in the unflushed range. It does not look for
            # this loss (LocalLog.read steps over the hole), but here reads hold a log that
            # is not compacted dense: kept, the later segments would read as damage for
            # good, and a replica would never fetch the hole again (its log end is past it).
            # What is deleted lies above the recovery point: never fsynced by a flush.
            report.missing_gap = (next_offset, following)
            _delete_after(segments, i, report)
            break
    return next_offset


def _delete_after(segments, i, report):
    """Step 4's deletion of every segment after segments[i], whose data follows a loss."""
    for later in segments[i + 1:]:
        report.deleted_segments.append(later.base_offset)
        later.delete()
    del segments[i + 1:]


# Read-only views of a compacted log: how many 1 ms looks a listing takes at a writer's swap.
SWAP_WAITS = 500


def settled_listing(directory, compact):
    """Read-only: list_directory, waiting out a writer's cleaner swap (`.swap` files listed:
    a few renames long, see PartitionLog.replace_segments), during which a listing could
    miss a cleaned range. None when a swap is still there after SWAP_WAITS looks: a writer
    that stopped in the middle of one, which its next writable open finishes."""
    for _ in range(SWAP_WAITS if compact else 1):
        listing = list_directory(directory)
        if not listing.swap_bases or not compact:
            return listing
        time.sleep(0.001)
    return None


def segment_bases(directory):
    """Sorted base offsets of the ordinary segments in a directory."""
    return list_directory(directory).bases


def _remove(directory, names, report):
    """Steps 1 and 2's deletions (names list_segments picked); True if it removed any."""
    for name in names:
        os.unlink(os.path.join(directory, name))
        report.removed_files.append(name)
    return bool(names)


def _complete_swaps(directory, swap_bases, config, report, now_ms):
    """Step 1's swaps; True if there were any."""
    if not swap_bases:
        return False
    swapped = []
    for base in swap_bases:
        segment = LogSegment(directory, base, config, suffix=files.SWAP_SUFFIX, now_ms=now_ms)
        segment.recover()  # a .swap was complete when renamed, but its indexes may not be
        swapped.append(segment)
    ranges = [(s.base_offset, _safe_next_offset(s)) for s in swapped]
    for base in segment_bases(directory):
        if any(low <= base < high for low, high in ranges):
            for suffix in files.SEGMENT_FILE_SUFFIXES:
                path = os.path.join(directory, files.offset_prefix(base) + suffix)
                if os.path.exists(path):
                    os.unlink(path)
                    report.removed_files.append(os.path.basename(path))
    for segment in swapped:
        segment.rename_suffix(files.SWAP_SUFFIX, "")
        segment.close()
    return True


def _safe_next_offset(segment):
    try:
        return segment.read_next_offset()
    except (IncompleteBatch, CorruptRecordError):
        return segment.base_offset


def _load_readonly(directory, config, log_start_offset, now_ms, open_files):
    report = RecoveryReport(directory, clean_shutdown=False)
    if not os.path.isdir(directory):
        raise KafkaStorageError(f"partition directory {directory} does not exist")
    listing = settled_listing(directory, config.compact)
    if listing is None:
        raise KafkaStorageError(
            f"{directory} holds a log cleaner's swap that did not finish (its .swap files); "
            "open the database for writing once to finish it, then read it again")
    segments = open_readonly_segments(directory, listing.bases, config, now_ms, open_files)
    if not segments:
        raise KafkaStorageError(f"partition directory {directory} holds no segment")
    next_offset = _next_offset(segments)
    log_start_offset = _log_start(log_start_offset, segments, report)
    return LoadedLog(segments, next_offset, next_offset, log_start_offset, report,
                     frozenset(listing.other_names), tuple(listing.snapshot_offsets),
                     tuple(listing.txn_index_bases))
