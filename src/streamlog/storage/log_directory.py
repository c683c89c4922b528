"""A log root: the partition logs under one directory, its checkpoint files and
its clean-shutdown marker.

What it removes (nothing else under the root is ever deleted):
  - a partition directory the caller asks it to delete (delete_log): renamed
    to `<topic>-<partition>.<uuid>-delete` first, so a crash cannot
    half-keep it, then removed;
  - at a writable open, directories with such a `-delete` name: only a
    deletion makes one.
A partition directory the caller asks it to set aside (set_aside_logs) is renamed
`<topic>-<partition>.<uuid>-stray` and kept whole.
Each partition directory holds `partition.metadata` (the topic id it belongs
to): the caller's proof that a directory it does not want is a leftover of a
topic it deleted, and not somebody's folder.

Lifecycle of the marker (why a crash is always noticed):
  open (writer):  marker present -> this open is clean; the marker is removed
                  and the removal fsynced before any log is written.
  close:          every log flushed and sealed -> checkpoints written ->
                  marker created and fsynced.
So a stop anywhere between the two leaves no marker, and the next open
recovers every partition from its checkpointed recovery point. The marker
holds the partition directories' listings and their logs' ends as the close
left them (saved_listings.py), which a clean open takes instead of listing each
directory again and reading each log's end.

Log start offsets: a log's retention writes its new log start into the
checkpoint before it removes a segment (_RootEntry), so at the next
open a first segment above the checkpointed start is known to be lost, not
deleted (log_loader.load_log); DeleteRecords writes it before it returns, so
the records it deleted stay deleted after a crash. Read-only views look at the
file at each refresh and read it again when its stat changed.

Recovery points: a checkpoint writes each log's checkpoint_recovery_point();
a log cut below its entry (a follower's truncation, or an unclean open that cut
a bad batch) lowers the entry at once, before anything is appended after the
cut. New names: a partition directory made here is fsynced into the root by
the first flush of its log (one root fsync for all made since the last).

Thread-safety: opening, creating and deleting logs hold `_lock`; each
PartitionLog is thread-safe on its own. Writes of the checkpoint files hold
`_files_lock`, taken last (under `_lock` or a log's own lock, never before).
"""
import logging
import os
import stat
import threading
import time
import uuid

from ..errors import InconsistentTopicIdError, KafkaStorageError, UnknownTopicOrPartitionError
from ..structs import TopicPartition
from . import files, partition_metadata, saved_listings
from .checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from .durable import fsync_dir, read_whole, write_atomically
from .open_files import OpenSegments, default_max_open_files
from .partition_log import PartitionLog, wall_clock_ms
from .producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS

log = logging.getLogger("streamlog.storage")

# A checkpoint file whose mtime is this close to now may be replaced again within the same
# clock tick, under the same size and a reused inode: read again rather than trusted.
_RACY_NS = 50_000_000


class LogDirectory:
    def __init__(self, root, readonly=False, clock_ms=wall_clock_ms, max_open_files=None,
                 descriptors_elsewhere=0,
                 producer_id_expiration_ms=DEFAULT_PRODUCER_ID_EXPIRATION_MS):
        """max_open_files: the bound on the descriptors the segments hold (open_files.py);
        None derives it from RLIMIT_NOFILE, -1 is unbounded. descriptors_elsewhere: what the
        owner holds besides (its lock file), counted against the same bound.
        producer_id_expiration_ms: given to every log (PartitionLog)."""
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.root = os.path.abspath(root)
        self.open_files = OpenSegments(default_max_open_files() if max_open_files is None
                                       else max_open_files, descriptors_elsewhere)
        self.readonly = readonly
        self.clock_ms = clock_ms
        self._lock = threading.Lock()
        self._files_lock = threading.Lock()
        self._names_lock = threading.Lock()
        self._new_names = False   # a partition directory made since the root's last fsync
        self.logs = {}
        self.reports = []
        if not readonly:
            os.makedirs(self.root, exist_ok=True)
        elif not os.path.isdir(self.root):
            raise KafkaStorageError(f"log directory {self.root} does not exist")
        self._recovery_file = OffsetCheckpointFile(
            os.path.join(self.root, files.RECOVERY_POINT_CHECKPOINT))
        self._start_file = OffsetCheckpointFile(
            os.path.join(self.root, files.LOG_START_OFFSET_CHECKPOINT))
        marker = os.path.join(self.root, files.CLEAN_SHUTDOWN_MARKER)
        self.clean_shutdown = os.path.exists(marker)
        # Directory name -> (mtime_ns, SegmentListing, end) the last close saved; each is taken
        # (popped) by the first open of its log, and only while the directory is unchanged.
        self._saved_listings = {}
        # The saved listings the opens took: still true at the close where the mtime is still
        # the saved one (that mtime was settled, so any later change has another).
        self._taken_listings = {}
        if not readonly:
            if self.clean_shutdown:
                self._saved_listings = self._read_saved_listings(marker)
                os.unlink(marker)
                fsync_dir(self.root)
            self._remove_deleted_dirs()
        self._recovery_points = self._read_checkpoint(self._recovery_file)
        self._log_starts = self._read_checkpoint(self._start_file)
        self._log_starts_seen = None   # read-only: (stat key, offsets) (_current_log_starts)
        self._cleaner_file = OffsetCheckpointFile(
            os.path.join(self.root, files.CLEANER_OFFSET_CHECKPOINT))
        try:
            self._cleaner_offsets = self._cleaner_file.read()
        except CorruptCheckpointError as exc:
            # Only where compaction goes on is lost: the next passes start from each log's
            # start, which re-cleans what was clean (no record is lost or kept wrongly).
            log.warning("%s; the cleaner starts over from each log's start", exc)
            self._cleaner_offsets = {}

    @staticmethod
    def _read_saved_listings(marker):
        try:
            data = read_whole(marker)
        except OSError as exc:
            log.warning("%s cannot be read (%s); every partition directory is listed",
                        marker, exc)
            return {}
        return saved_listings.decode(data, marker)

    def _read_checkpoint(self, checkpoint):
        try:
            return checkpoint.read()
        except CorruptCheckpointError as exc:
            # Offsets unknown: recover every partition from its first segment.
            log.warning("%s; recovering every partition in full", exc)
            self.clean_shutdown = False
            return {}

    def _remove_deleted_dirs(self):
        """Finish deletions a stop interrupted; a failure is logged, never fatal."""
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if files.is_delete_dir_name(name) and os.path.isdir(path):
                _remove_partition_files(path)

    def partition_dir(self, tp):
        return os.path.join(self.root, files.partition_dir_name(tp.topic, tp.partition))

    def partitions_on_disk(self, but=frozenset()):
        """Every TopicPartition that has a directory under the root, except those in `but`
        (the caller's known partitions: their names are not parsed, 10,000 of them at an
        open)."""
        known = {files.partition_dir_name(tp.topic, tp.partition) for tp in but}
        out = []
        with os.scandir(self.root) as entries:   # is_dir() from the listing: no stat each
            for entry in entries:
                if entry.name in known:
                    continue
                parsed = files.parse_partition_dir_name(entry.name)
                if parsed and entry.is_dir():
                    out.append(TopicPartition(*parsed))
        return sorted(out)

    def topic_id_on_disk(self, tp, expected=None):
        """The topic id in tp's partition.metadata; None when it has none (or it is damaged).
        expected: the id the caller expects (a shortcut, see partition_metadata.read)."""
        try:
            return partition_metadata.read(self.partition_dir(tp), expected)
        except partition_metadata.CorruptPartitionMetadataError as exc:
            log.warning("%s", exc)
            return None

    def open_log(self, tp, config, topic_id=None):
        """The log of tp, opened (and recovered if needed) on first use; created if absent.

        topic_id: the id of the topic tp belongs to (None for the library's own
        metadata log). A directory whose partition.metadata names another id is
        not this topic's: InconsistentTopicIdError, and nothing is touched.
        """
        with self._lock:
            existing = self.logs.get(tp)
            if existing is not None:
                return existing
            directory = self.partition_dir(tp)
            saved = self._saved_listings.pop(os.path.basename(directory), None)
            try:
                status = os.stat(directory)
                exists = stat.S_ISDIR(status.st_mode)
            except OSError:   # as os.path.isdir answers
                status, exists = None, False
            if self.readonly and not exists:
                raise UnknownTopicOrPartitionError(f"partition {tp} does not exist in {self.root}")
            if not exists and not self.readonly and self._forget_locked([tp]):
                # A new directory has no history: offsets checkpointed for a partition of the
                # same name (a deleted topic's, whose checkpoint rewrite a stop cut off) must
                # not apply to it, now or after a crash.
                self._write_checkpoints_locked()
            if topic_id is not None and self._check_topic_id(tp, directory, topic_id, exists):
                saved = None   # it wrote partition.metadata: the saved listing lacks it
            listing, saved_end = saved_listings.listing_if_unchanged(saved, status)
            if listing is not None:
                self._taken_listings[os.path.basename(directory)] = saved
            entry = _RootEntry(self, tp)
            partition_log = PartitionLog(
                directory, config, recovery_point=self._recovery_points.get(tp, 0),
                log_start_offset=self._log_starts.get(tp),
                clean_shutdown=self.clean_shutdown, readonly=self.readonly,
                clock_ms=self.clock_ms, log_start_checkpoint=entry, root_entry=entry,
                open_files=self.open_files,
                producer_id_expiration_ms=self.producer_id_expiration_ms, listing=listing,
                saved_end=saved_end)
            self.logs[tp] = partition_log
            if not exists and not self.readonly:
                with self._names_lock:   # after the directory exists: see _sync_new_names
                    self._new_names = True
            if not self.readonly:
                # An unclean open that cut the log below its checkpointed point (a torn or
                # corrupt batch there) must not leave that point for the next open to trust.
                self._lower_recovery_point(tp, partition_log.recovery_point)
            if partition_log.recovery_report.noteworthy:
                self.reports.append(partition_log.recovery_report)
            return partition_log

    def _check_topic_id(self, tp, directory, topic_id, exists):
        on_disk = self.topic_id_on_disk(tp, topic_id) if exists else None
        if on_disk is not None and on_disk != topic_id:
            raise InconsistentTopicIdError(
                f"{directory} belongs to topic id {partition_metadata.kafka_uuid(on_disk)}, not "
                f"to {tp.topic!r} (id {partition_metadata.kafka_uuid(topic_id)}); nothing was "
                "changed: move the directory away to open the topic")
        if on_disk is None and not self.readonly:
            os.makedirs(directory, exist_ok=True)
            partition_metadata.write(directory, topic_id)
            return True   # the directory changed
        return False

    def get(self, tp):
        partition_log = self.logs.get(tp)
        if partition_log is None:
            raise UnknownTopicOrPartitionError(f"partition {tp} is not open")
        return partition_log

    def delete_logs(self, tps):
        """Close and remove the logs of tps, then rewrite the checkpoints without them.

        A directory that cannot be removed does not stop the others: the first such
        failure is raised (KafkaStorageError) once the checkpoints are rewritten.
        """
        self._take_out_logs(tps, files.DELETE_DIR_SUFFIX)

    def set_aside_logs(self, tps):
        """Close the logs of tps (flushed) and rename each directory
        `<topic>-<partition>.<id>-stray`, keeping every file in it, then rewrite the
        checkpoints without them: for partitions the owner may no longer keep but cannot
        prove deleted. Kafka's LogManager.asyncDelete moves a stray log aside the same way
        ("Move aside stray partitions, don't delete them"). Failures as delete_logs'."""
        self._take_out_logs(tps, files.STRAY_DIR_SUFFIX)

    def _take_out_logs(self, tps, kind):
        failures = []
        keep = kind == files.STRAY_DIR_SUFFIX
        with self._lock:
            # Every log closed before any directory goes: removing one takes descriptors,
            # which a process at its limit has only once the logs gave theirs back.
            for tp in tps:
                partition_log = self.logs.pop(tp, None)
                if partition_log is not None:
                    try:
                        partition_log.close(flush=keep, seal=keep)
                    except KafkaStorageError as exc:
                        failures.append(exc)   # its files are set aside all the same
            for tp in tps:
                try:
                    self._rename_dir_locked(tp, kind)
                except KafkaStorageError as exc:
                    failures.append(exc)
            if self._forget_locked(tps):
                self._write_checkpoints_locked()
        if failures:
            raise failures[0]

    def delete_log(self, tp):
        self.delete_logs([tp])

    def _forget_locked(self, tps):
        """Drop tps' checkpoint entries; True if there were any."""
        found = False
        for tp in tps:
            found |= self._recovery_points.pop(tp, None) is not None
            found |= self._log_starts.pop(tp, None) is not None
            found |= self._cleaner_offsets.pop(tp, None) is not None
        return found

    def _rename_dir_locked(self, tp, kind):
        """Rename tp's directory to its `-delete` name (kind), then remove it (renamed first,
        so a crash cannot half-keep it); or to its `-stray` name, and keep it."""
        directory = self.partition_dir(tp)
        if not os.path.isdir(directory):
            return
        renamed = os.path.join(self.root, files.delete_dir_name(
            tp.topic, tp.partition, uuid.uuid4().hex, kind))
        try:
            os.rename(directory, renamed)
            fsync_dir(self.root)
        except OSError as exc:
            what = "set aside" if kind == files.STRAY_DIR_SUFFIX else "delete"
            raise KafkaStorageError(f"cannot {what} {directory}: {exc}") from exc
        if kind == files.STRAY_DIR_SUFFIX:
            log.warning("%s is set aside as %s, every file in it kept", directory, renamed)
        else:
            _remove_partition_files(renamed)

    def checkpoint(self):
        """Write the recovery points and log start offsets of the open logs."""
        if self.readonly:
            return
        # Under the lock from the snapshot of the logs to the write: a checkpoint that took
        # its snapshot before a deletion and wrote after it would bring the deleted
        # partition's offsets back, for a later partition of the same name to inherit.
        with self._lock:
            self._write_checkpoints_locked()

    def _write_checkpoints_locked(self):
        # Before _files_lock: checkpoint_recovery_point takes the log's lock, and a log's
        # retention holds that lock while it waits for _files_lock (_write_log_start).
        recovery_points = {tp: pl.checkpoint_recovery_point() for tp, pl in self.logs.items()}
        with self._files_lock:
            # A truncation since a point was taken lowered the log's recovery point below it
            # (and may be waiting for this lock to lower the entry): the lower one is written.
            self._recovery_points.update(
                {tp: min(point, self.logs[tp].recovery_point)
                 for tp, point in recovery_points.items()})
            self._log_starts.update({tp: pl.log_start_offset for tp, pl in self.logs.items()})
            self._recovery_file.write(self._recovery_points)
            self._start_file.write(self._log_starts)
            if self._cleaner_offsets or os.path.exists(self._cleaner_file.path):
                self._cleaner_file.write(self._cleaner_offsets)

    def _sync_new_names(self):
        """fsync the root when a partition directory was made in it since the last time:
        once for all of them, at the first flush of one, rather than once at each creation
        (a topic of thousands of partitions is made in one call)."""
        with self._names_lock:
            if self._new_names:
                fsync_dir(self.root)
                self._new_names = False

    def _lower_recovery_point(self, tp, offset):
        """Write tp's recovery point as offset now, when the file holds a higher one."""
        self._lower_entry(self._recovery_points, self._recovery_file, tp, offset)

    def _lower_cleaner_checkpoint(self, tp, offset):
        """Write tp's first dirty offset as offset now, when the file holds a higher one."""
        self._lower_entry(self._cleaner_offsets, self._cleaner_file, tp, offset)

    def _lower_entry(self, entries, checkpoint, tp, offset):
        """Lower tp's entry of a checkpoint file to offset, and write the file, when the
        entry is there and higher (a partition without one keeps none)."""
        with self._files_lock:
            if entries.get(tp, -1) > offset:
                entries[tp] = offset
                checkpoint.write(entries)

    def cleaner_checkpoint(self, tp):
        """The first dirty offset the cleaner checkpointed for tp, or None."""
        return self._cleaner_offsets.get(tp)

    def write_cleaner_checkpoint(self, tp, offset):
        """Record where tp's next cleaning pass starts (cleaner-offset-checkpoint)."""
        if self.readonly:
            raise KafkaStorageError(f"{self.root} is open read-only")
        with self._lock, self._files_lock:
            if tp not in self.logs:
                return   # deleted meanwhile: its entry must not come back
            self._cleaner_offsets[tp] = offset
            self._cleaner_file.write(self._cleaner_offsets)

    def _write_log_start(self, tp, offset):
        with self._files_lock:
            self._log_starts[tp] = max(offset, self._log_starts.get(tp, offset))
            self._start_file.write(self._log_starts)

    def _read_log_start(self, tp):
        return self._current_log_starts().get(tp)

    def _current_log_starts(self):
        """Read-only: {tp: log start} as the writer's checkpoint holds it now. Every refresh
        of a view's log looks (PartitionLog._writer_log_start), so the file is read again only
        when its stat changed: the writer replaces it whole (a new inode, mtime, often size).
        A file changed within _RACY_NS of the look is not trusted to stay told apart by its
        stat (mtimes move in clock ticks, a freed inode comes back): it is read again next
        time too, as git treats a racily clean index entry."""
        try:
            status = os.stat(self._start_file.path)
        except OSError:
            return {}   # none yet (read() says the same), or unreadable: no start known
        key = (status.st_ino, status.st_mtime_ns, status.st_size)
        seen = self._log_starts_seen
        if seen is not None and seen[0] == key:
            return seen[1]
        try:
            offsets = self._start_file.read()   # replaced since the stat: a later stat differs
        except CorruptCheckpointError:
            return {}
        racy = abs(time.time_ns() - status.st_mtime_ns) < _RACY_NS
        self._log_starts_seen = None if racy else (key, offsets)
        return offsets

    def flush_all(self):
        for partition_log in list(self.logs.values()):
            partition_log.flush()

    def close(self, mark_clean=True):
        """Flush and seal every log, write the checkpoints, then mark the stop clean.

        mark_clean=False leaves the marker off: for a caller that opened only some logs of
        a root the last stop left unclean, whose other logs still need their recovery."""
        with self._lock:
            logs = list(self.logs.values())
        failures = []
        for partition_log in logs:
            try:
                partition_log.close(flush=not self.readonly)
            except KafkaStorageError as exc:
                failures.append(exc)  # close the others: each holds files and maps
        if failures:
            raise failures[0]  # no clean-shutdown marker: the next open recovers
        if not self.readonly:
            self.checkpoint()
            if mark_clean:
                write_atomically(os.path.join(self.root, files.CLEAN_SHUTDOWN_MARKER),
                                 saved_listings.encode(self._listings_to_save(logs)))
        # Let go of the closed logs now: the owner is typically part of a reference cycle
        # (a broker and its threads), and hundreds of thousands of objects left hanging
        # from one would wait for, and slow, a full collection somewhere later.
        with self._lock:
            self.logs = {}

    def _listings_to_save(self, logs):
        listings = {}
        for partition_log in logs:
            name = os.path.basename(partition_log.directory)
            try:
                taken = saved_listings.take(partition_log.directory,
                                            partition_log.log_end_offset,
                                            self._taken_listings.get(name))
            except OSError:
                continue   # listed at the next open instead
            if taken is not None:
                listings[name] = taken
        return saved_listings.settle(listings)


def _remove_partition_files(doomed):
    """Remove a partition directory renamed for deletion: the files the library made in it,
    then the directory once it is empty. Anything else (a user's file or folder put there)
    is kept with the directory, and a warning names it: the library removes only what it
    made. A failure is logged, never raised: a directory already renamed for deletion that
    cannot be removed now is tried again by the next writable open."""
    try:
        names = os.listdir(doomed)
    except OSError as exc:
        log.warning("could not list %s: %s; the next open retries", doomed, exc)
        return
    foreign = {name for name in names if not files.is_partition_file_name(name)}
    failed = False
    for name in names:
        if name in foreign:
            continue
        try:
            os.unlink(os.path.join(doomed, name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove %s: %s; the next open retries",
                        os.path.join(doomed, name), exc)
            failed = True
    if foreign:
        log.warning("kept %s, the directory of a deleted partition: it holds what the "
                    "library did not make (%s); remove it yourself once its contents are "
                    "safe elsewhere", doomed, ", ".join(sorted(foreign)[:5]))
    if foreign or failed:
        return
    try:
        os.rmdir(doomed)
    except OSError as exc:
        log.warning("could not remove %s: %s; the next open retries", doomed, exc)


class _RootEntry:
    """One partition's place in the root, for its log (see the module doc): its entries in
    the log start checkpoint (read, write), the recovery point checkpoint and the cleaner's
    (each lowered when the log is cut below it), and its directory's name, made durable by
    its first flush."""

    __slots__ = ("_directory", "_tp")

    def __init__(self, directory, tp):
        self._directory = directory
        self._tp = tp

    def read(self):
        """The entry as the file holds it now (a read-only view follows the writer with it)."""
        return self._directory._read_log_start(self._tp)

    def write(self, offset):
        if self._directory.readonly:
            raise KafkaStorageError(f"{self._directory.root} is open read-only")
        self._directory._write_log_start(self._tp, offset)

    def lower_recovery_point(self, offset):
        self._directory._lower_recovery_point(self._tp, offset)

    def lower_cleaner_checkpoint(self, offset):
        self._directory._lower_cleaner_checkpoint(self._tp, offset)

    def sync_name(self):
        self._directory._sync_new_names()
