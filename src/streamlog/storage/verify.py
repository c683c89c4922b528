"""Offline verification of a log root (`streamlog verify`, `streamlog dump --verify`).

Reads every segment of every partition read-only and checks, without
changing anything: batch headers and CRCs, record framing (every record is
decoded), offsets increasing within and across segments, no offsets missing
(below the first segment, against the log start offset checkpoint, or between
segments or batches of a topic whose topic.json says it is not compacted; a
compacted log's gaps and empty batches are its cleaner's), that the checkpoint
files parse (the cleaner's too, whose offsets must lie within their logs), that
every offset-index and time-index entry says what the log says, and that every
.txnindex entry names an ABORT marker of its producer in its segment. A live writer
may be appending: a partial batch at the very end of a partition is reported
as a note, not a problem.
"""
import os
from dataclasses import dataclass, field

from ..errors import CorruptRecordError, StreamlogError
from ..structs import TopicPartition
from . import files, partition_metadata
from .checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from .file_records import FileRecords, IncompleteBatch
from .log_config import LogConfig
from .log_loader import segment_bases
from .offset_index import OffsetIndex
from .record_batch import CONTROL_ABORT
from .time_index import TimeIndex
from .txn_index import decode_entries


@dataclass
class Finding:
    path: str
    position: object  # byte position in the file, or None
    message: str

    def __str__(self):
        where = f" at byte {self.position}" if self.position is not None else ""
        return f"{self.path}{where}: {self.message}"


@dataclass
class VerifyReport:
    root: str
    partitions: int = 0
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @property
    def ok(self):
        return not self.problems


def total_log_bytes(root):
    total = 0
    for directory in partition_directories(root):
        for base in segment_bases(directory):
            total += os.path.getsize(files.log_file(directory, base))
    return total


def partition_directories(root):
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isdir(path) and files.parse_partition_dir_name(name):
            out.append(path)
    return out


def verify_directory(root, progress=None):
    """Check every partition under root; progress(done_bytes, total_bytes, path) is called per batch."""
    report = VerifyReport(os.path.abspath(root))
    total = total_log_bytes(root)
    done = [0]

    def advance(nbytes, path):
        done[0] += nbytes
        if progress is not None:
            progress(done[0], total, path)

    checkpoints = {}
    for name in (files.RECOVERY_POINT_CHECKPOINT, files.LOG_START_OFFSET_CHECKPOINT,
                 files.CLEANER_OFFSET_CHECKPOINT):
        try:
            checkpoints[name] = OffsetCheckpointFile(os.path.join(root, name)).read()
        except CorruptCheckpointError as exc:
            report.problems.append(Finding(os.path.join(root, name), None, str(exc)))
    log_starts = checkpoints.get(files.LOG_START_OFFSET_CHECKPOINT, {})
    for directory in partition_directories(root):
        if not segment_bases(directory) and not os.path.exists(
                os.path.join(directory, files.PARTITION_METADATA_FILE)):
            # Every partition the library makes has a segment: this is somebody's folder.
            report.notes.append(f"{directory} is named like a partition but holds no segment "
                                "and no partition.metadata: not a partition, not checked")
            continue
        report.partitions += 1
        parsed = files.parse_partition_dir_name(os.path.basename(directory))
        tp = TopicPartition(*parsed) if parsed else None
        last = verify_partition(directory, report, advance, log_starts.get(tp))
        first_dirty = checkpoints.get(files.CLEANER_OFFSET_CHECKPOINT, {}).get(tp)
        if first_dirty is not None and last is not None and first_dirty > last + 1:
            report.notes.append(
                f"{directory}: the cleaner checkpoint says {first_dirty}, past the log end "
                f"{last + 1}; the log cleaner starts over from the log start (nothing is lost)")
    if progress is not None:
        progress(total, total, "")
    return report


def verify_partition(directory, report, advance=lambda n, p: None, log_start=None):
    """log_start: the checkpointed log start of the partition, None if unknown. Returns the
    last offset the partition holds (None when it holds none)."""
    bases = segment_bases(directory)
    if bases and log_start is not None and log_start < bases[0]:
        # Retention checkpoints the new start before it removes a segment (log_directory).
        report.problems.append(Finding(
            directory, None, f"offsets {log_start}..{bases[0] - 1} are missing: the log start "
                             f"offset checkpoint says {log_start}, the first segment starts at "
                             f"{bases[0]}"))
    dense = _is_dense(directory, report)
    previous_last = None
    for i, base in enumerate(bases):
        is_last = i == len(bases) - 1
        report.segments += 1
        if dense and previous_last is not None and base > previous_last + 1:
            report.problems.append(Finding(
                files.log_file(directory, base), None,
                f"offsets {previous_last + 1}..{base - 1} are missing: the segment before "
                f"ends at {previous_last}"))
        previous_last = _verify_segment(directory, base, previous_last, is_last, report, advance,
                                        dense)
    return previous_last


def _is_dense(directory, report):
    """True when topic.json sets a cleanup.policy without compaction: only compaction leaves
    holes. topic.json holds the topic's own overrides; a topic that sets none follows the
    database's default, which no file records and may be compact, so it is not judged."""
    try:
        doc = partition_metadata.read_topic_config(directory)
    except partition_metadata.CorruptPartitionMetadataError as exc:
        report.problems.append(Finding(os.path.join(directory, files.TOPIC_CONFIG_FILE), None,
                                       str(exc)))
        return False
    if doc is None or "cleanup.policy" not in doc["config"]:
        return False
    try:
        return not LogConfig.from_dict({"cleanup.policy": doc["config"]["cleanup.policy"]}).compact
    except StreamlogError:
        return False   # a policy the library would refuse: not ours to judge here


def _verify_segment(directory, base, previous_last, is_last, report, advance, dense):
    path = files.log_file(directory, base)
    log = FileRecords(path, readonly=True)
    batch_ends = {}      # last offset -> (position, running max timestamp)
    markers = {}         # offset of a transaction marker -> (producer id, control type)
    max_ts = -1
    try:
        try:
            for batch in log.batches():
                pos = batch.file_position
                try:
                    recs = batch.records()  # header + CRC + every record decoded
                except CorruptRecordError as exc:
                    report.problems.append(Finding(path, exc.position or pos, exc.reason))
                    return previous_last
                if batch.base_offset < base:
                    report.problems.append(Finding(path, pos, f"batch offset {batch.base_offset} "
                                                              f"is below the segment's {base}"))
                expected = base if previous_last is None else max(base, previous_last + 1)
                if previous_last is not None and batch.base_offset <= previous_last:
                    report.problems.append(Finding(
                        path, pos, f"batch offset {batch.base_offset} does not follow "
                                   f"{previous_last}"))
                elif dense and batch.base_offset > expected:
                    report.problems.append(Finding(
                        path, pos, f"offsets {expected}..{batch.base_offset - 1} are missing: "
                                   f"the batch at byte {pos} starts at {batch.base_offset}"))
                if len(recs) and (recs.offsets[0] < batch.base_offset or
                                  recs.offsets[-1] > batch.last_offset):
                    report.problems.append(Finding(path, pos, "record offsets outside their batch"))
                if batch.is_control and len(recs):
                    markers[batch.base_offset] = (batch.producer_id, batch.control_type())
                previous_last = batch.last_offset
                max_ts = max(max_ts, batch.max_timestamp)
                batch_ends[batch.last_offset] = (pos, max_ts)
                report.batches += 1
                report.records += len(recs)
                report.bytes += batch.size_in_bytes
                advance(batch.size_in_bytes, path)
        except IncompleteBatch as exc:
            finding = Finding(path, exc.position,
                              f"ends inside a batch ({exc.available} of {exc.needed} bytes)")
            if is_last:
                finding.message += "; a live writer may be appending, or the last write was torn"
                report.notes.append(finding)
            else:
                report.problems.append(finding)
            advance(exc.available, path)
        except CorruptRecordError as exc:
            report.problems.append(Finding(path, exc.position, exc.reason))
            return previous_last
        _verify_indexes(directory, base, batch_ends, is_last, report)
        _verify_txn_index(directory, base, markers, previous_last, is_last, report)
    finally:
        log.close()
    return previous_last


def _verify_txn_index(directory, base, markers, last_offset, is_last, report):
    path = files.txn_index_file(directory, base)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return
    try:
        entries = decode_entries(data, path)
    except CorruptRecordError as exc:
        report.problems.append(Finding(path, exc.position, exc.reason))
        return
    for slot, txn in enumerate(entries):
        if is_last and (last_offset is None or txn.last_offset > last_offset):
            # The writer makes an entry durable before it appends the marker.
            report.notes.append(Finding(path, slot * 34, f"entry for the marker at "
                                        f"{txn.last_offset}, which is not written yet"))
            continue
        if markers.get(txn.last_offset) != (txn.producer_id, CONTROL_ABORT) \
                or txn.first_offset > txn.last_offset:
            report.problems.append(Finding(
                path, slot * 34, f"entry (producer {txn.producer_id}, offsets "
                                 f"{txn.first_offset}..{txn.last_offset}) does not end at an "
                                 "ABORT marker of that producer"))


def _verify_indexes(directory, base, batch_ends, is_last, report):
    index_path = files.offset_index_file(directory, base)
    time_path = files.time_index_file(directory, base)
    for path in (index_path, time_path):
        if not os.path.exists(path):
            # A live writer's active segment makes its index files at its first entry (or
            # its seal); any other segment with batches has them.
            if batch_ends and not is_last:
                report.problems.append(Finding(path, None, "index file is missing"))
            return
    offsets = OffsetIndex(index_path, base, 0, readonly=True)
    for slot in range(offsets.entries):
        relative, position = offsets.entry(slot)
        found = batch_ends.get(base + relative)
        if found is None or found[0] != position:
            report.problems.append(Finding(
                index_path, slot * 8,
                f"entry (offset {base + relative}, position {position}) does not point at the "
                "batch ending at that offset"))
    times = TimeIndex(time_path, base, 0, readonly=True)
    for slot in range(times.entries):
        timestamp, relative = times.entry(slot)
        found = batch_ends.get(base + relative)
        if found is None or found[1] != timestamp:
            report.problems.append(Finding(
                time_path, slot * 12,
                f"entry (timestamp {timestamp}, offset {base + relative}) disagrees with the log"))
    for index, path in ((offsets, index_path), (times, time_path)):
        in_file = os.path.getsize(path) // index.entry_size
        if not is_last and in_file != index.entries:
            # A sealed index is trimmed to its entries, so every slot must be a real entry.
            report.problems.append(Finding(
                path, index.entries * index.entry_size,
                f"{in_file - index.entries} entries from slot {index.entries} on are out of "
                "order or zero"))
