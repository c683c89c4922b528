"""A log root: the partition logs under one directory, its checkpoint files and
its clean-shutdown marker.

Lifecycle of the marker (why a crash is always noticed):
  open (writer):  marker present -> this open is clean; the marker is removed
                  and the removal fsynced before any log is written.
  close:          every log flushed and sealed -> checkpoints written ->
                  marker created and fsynced.
So a stop anywhere between the two leaves no marker, and the next open
recovers every partition from its checkpointed recovery point.

Thread-safety: opening, creating and deleting logs hold `_lock`; each
PartitionLog is thread-safe on its own.
"""
import logging
import os
import shutil
import threading
import uuid

from ..errors import KafkaStorageError, UnknownTopicOrPartitionError
from ..structs import TopicPartition
from . import files
from .checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from .durable import fsync_dir, write_atomically
from .partition_log import PartitionLog, wall_clock_ms

log = logging.getLogger("streamlog.storage")

_DELETE_DIR_SUFFIX = "-delete"


class LogDirectory:
    def __init__(self, root, readonly=False, clock_ms=wall_clock_ms):
        self.root = os.path.abspath(root)
        self.readonly = readonly
        self.clock_ms = clock_ms
        self._lock = threading.Lock()
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
        if not readonly:
            if self.clean_shutdown:
                os.unlink(marker)
                fsync_dir(self.root)
            self._remove_deleted_dirs()
        self._recovery_points = self._read_checkpoint(self._recovery_file)
        self._log_starts = self._read_checkpoint(self._start_file)

    def _read_checkpoint(self, checkpoint):
        try:
            return checkpoint.read()
        except CorruptCheckpointError as exc:
            # Offsets unknown: recover every partition from its first segment.
            log.warning("%s; recovering every partition in full", exc)
            self.clean_shutdown = False
            return {}

    def _remove_deleted_dirs(self):
        for name in os.listdir(self.root):
            if name.endswith(_DELETE_DIR_SUFFIX):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    def partition_dir(self, tp):
        return os.path.join(self.root, files.partition_dir_name(tp.topic, tp.partition))

    def partitions_on_disk(self):
        """Every TopicPartition that has a directory under the root."""
        out = []
        for name in os.listdir(self.root):
            parsed = files.parse_partition_dir_name(name)
            if parsed and os.path.isdir(os.path.join(self.root, name)):
                out.append(TopicPartition(*parsed))
        return sorted(out)

    def open_log(self, tp, config):
        """The log of tp, opened (and recovered if needed) on first use; created if absent."""
        with self._lock:
            existing = self.logs.get(tp)
            if existing is not None:
                return existing
            directory = self.partition_dir(tp)
            if self.readonly and not os.path.isdir(directory):
                raise UnknownTopicOrPartitionError(f"partition {tp} does not exist in {self.root}")
            partition_log = PartitionLog(
                directory, config, recovery_point=self._recovery_points.get(tp, 0),
                log_start_offset=self._log_starts.get(tp, 0),
                clean_shutdown=self.clean_shutdown, readonly=self.readonly,
                clock_ms=self.clock_ms)
            self.logs[tp] = partition_log
            if partition_log.recovery_report.dropped_data or \
                    partition_log.recovery_report.rebuilt_indexes:
                self.reports.append(partition_log.recovery_report)
            return partition_log

    def get(self, tp):
        partition_log = self.logs.get(tp)
        if partition_log is None:
            raise UnknownTopicOrPartitionError(f"partition {tp} is not open")
        return partition_log

    def delete_log(self, tp):
        """Close tp's log and remove its directory (renamed first, so a crash cannot half-keep it)."""
        with self._lock:
            partition_log = self.logs.pop(tp, None)
            if partition_log is not None:
                partition_log.close(flush=False)
            directory = self.partition_dir(tp)
            if not os.path.isdir(directory):
                return
            doomed = f"{directory}.{uuid.uuid4().hex}{_DELETE_DIR_SUFFIX}"
            os.rename(directory, doomed)
            fsync_dir(self.root)
            shutil.rmtree(doomed, ignore_errors=True)
            self._recovery_points.pop(tp, None)
            self._log_starts.pop(tp, None)

    def checkpoint(self):
        """Write the recovery points and log start offsets of the open logs."""
        if self.readonly:
            return
        with self._lock:
            logs = dict(self.logs)
        self._recovery_points.update({tp: pl.recovery_point for tp, pl in logs.items()})
        self._log_starts.update({tp: pl.log_start_offset for tp, pl in logs.items()})
        self._recovery_file.write(self._recovery_points)
        self._start_file.write(self._log_starts)

    def flush_all(self):
        for partition_log in list(self.logs.values()):
            partition_log.flush()

    def close(self):
        """Flush and seal every log, write the checkpoints, then mark the stop clean."""
        with self._lock:
            logs = list(self.logs.values())
        for partition_log in logs:
            partition_log.close(flush=not self.readonly)
        if self.readonly:
            return
        self.checkpoint()
        write_atomically(os.path.join(self.root, files.CLEAN_SHUTDOWN_MARKER), b"")

