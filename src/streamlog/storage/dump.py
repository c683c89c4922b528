"""Human-readable listings of segment files (`streamlog dump`), in the spirit of kafka-dump-log.

Each function yields text lines so the CLI (or a test) decides where they go.
"""
import os

from . import compression, files
from .file_records import FileRecords, IncompleteBatch
from .offset_index import OffsetIndex
from .producer_state import decode_snapshot
from .record_batch import CONTROL_ABORT, CONTROL_COMMIT, TIMESTAMP_TYPE_NAMES
from .time_index import TimeIndex
from .txn_index import decode_entries
from ..errors import CorruptRecordError

_MARKERS = {CONTROL_ABORT: "ABORT", CONTROL_COMMIT: "COMMIT"}


def dump_file(path, print_records=False, max_value_bytes=60):
    """Lines describing a .log, .index, .timeindex, .txnindex or .snapshot file."""
    name = os.path.basename(path)
    parsed = files.parse_segment_file_name(name)
    if parsed is None:
        raise ValueError(f"{path} is not a segment file (expected <20-digit offset>.log/.index/"
                         ".timeindex/.txnindex/.snapshot)")
    base, suffix, _ = parsed
    yield f"Dumping {path}"
    if suffix == files.LOG_SUFFIX:
        yield from _dump_log(path, print_records, max_value_bytes)
    elif suffix == files.INDEX_SUFFIX:
        index = OffsetIndex(path, base, 0, readonly=True)
        for slot in range(index.entries):
            relative, position = index.entry(slot)
            yield f"offset: {base + relative} position: {position}"
    elif suffix == files.TIME_INDEX_SUFFIX:
        index = TimeIndex(path, base, 0, readonly=True)
        for slot in range(index.entries):
            timestamp, relative = index.entry(slot)
            yield f"timestamp: {timestamp} offset: {base + relative}"
    elif suffix == files.TXN_INDEX_SUFFIX:
        with open(path, "rb") as f:
            for txn in decode_entries(f.read(), path):
                yield (f"version: 0 producerId: {txn.producer_id} firstOffset: "
                       f"{txn.first_offset} lastOffset: {txn.last_offset} "
                       f"lastStableOffset: {txn.last_stable_offset}")
    elif suffix == files.SNAPSHOT_SUFFIX:
        with open(path, "rb") as f:
            for e in decode_snapshot(f.read(), path):
                last = e.batches[-1] if e.batches else None
                yield (f"producerId: {e.producer_id} producerEpoch: {e.epoch} "
                       f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: "
                       f"{e.txn_first_offset if e.txn_first_offset >= 0 else 'None'} "
                       f"lastTimestamp: {e.last_timestamp} "
                       + ("firstSequence: -1 lastSequence: -1 lastOffset: -1 offsetDelta: 0"
                          if last is None else
                          f"firstSequence: {last.first_seq} lastSequence: {last.last_seq} "
                          f"lastOffset: {last.last_offset} offsetDelta: {last.offset_delta}"))
    else:
        raise ValueError(f"cannot dump {suffix} files")


def _show(value, limit):
    if value is None:
        return "null"
    text = value[:limit].decode("utf-8", errors="backslashreplace")
    return text + ("..." if len(value) > limit else "")


def _dump_log(path, print_records, limit):
    log = FileRecords(path, readonly=True)
    try:
        for batch in log.batches():
            valid = batch.is_valid()
            horizon = batch.delete_horizon_ms if batch.has_delete_horizon else "none"
            yield (f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
                   f"count: {batch.records_count} baseSequence: {batch.base_sequence} "
                   f"lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
                   f"producerEpoch: {batch.producer_epoch} "
                   f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
                   f"isTransactional: {str(batch.is_transactional).lower()} "
                   f"isControl: {str(batch.is_control).lower()} deleteHorizonMs: {horizon} "
                   f"position: {batch.file_position} "
                   f"{TIMESTAMP_TYPE_NAMES[batch.timestamp_type]}: {batch.max_timestamp} "
                   f"size: {batch.size_in_bytes} magic: {batch.magic} "
                   f"compresscodec: {compression.NAMES.get(batch.compression, batch.compression)} "
                   f"crc: {batch.crc} isvalid: {str(valid).lower()}")
            if print_records and valid and batch.is_control:
                marker = _MARKERS.get(batch.control_type(), "UNKNOWN")
                coordinator_epoch = batch.coordinator_epoch() if marker != "UNKNOWN" else -1
                yield (f"| offset: {batch.base_offset} "
                       f"{TIMESTAMP_TYPE_NAMES[batch.timestamp_type]}: {batch.max_timestamp} "
                       f"endTxnMarker: {marker} coordinatorEpoch: {coordinator_epoch}")
            elif print_records and valid:
                recs = batch.records()
                for offset, ts, key, value, headers in recs:
                    yield (f"| offset: {offset} {TIMESTAMP_TYPE_NAMES[batch.timestamp_type]}: "
                           f"{ts} keySize: {-1 if key is None else len(key)} "
                           f"valueSize: {-1 if value is None else len(value)} "
                           f"headerKeys: [{','.join(k for k, _ in headers)}] "
                           f"key: {_show(key, limit)} payload: {_show(value, limit)}")
    except IncompleteBatch as exc:
        yield f"Found {exc.available} trailing bytes at position {exc.position}: a partial batch"
        if exc.position == 0:  # a live writer's partial batch follows whole ones
            raise CorruptRecordError("not a segment file: no record batch at its start", path,
                                     0) from None
    except CorruptRecordError as exc:
        yield f"Stopped at position {exc.position}: {exc.reason}"
        raise
    finally:
        log.close()
