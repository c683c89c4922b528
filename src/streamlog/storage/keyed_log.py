"""Keyed state logs: partitions whose records are changes to a small table.

The library keeps its own state the way Kafka does -- the topic registry,
committed offsets, group metadata -- as records in a log where the last value
of a key wins and a null value (a tombstone) deletes the key. Replaying the
log rebuilds the table; compaction can later drop superseded records without
changing what a replay yields. This module owns both halves: encoding a set
of changes as one batch, and replaying a log from an offset.
"""
from .record_batch import build_batch


def encode_changes(changes, timestamp_ms):
    """[(key bytes, value bytes | None)] -> one encoded batch (appended atomically)."""
    keys = [k for k, _ in changes]
    values = [v for _, v in changes]
    return build_batch(values, keys=keys, timestamp=timestamp_ms)


def replay(partition_log, start_offset, apply, chunk_bytes=1 << 20):
    """Call apply(key, value, timestamp_ms) for each record from start_offset to the high
    watermark; returns the offset to resume from next time."""
    offset = max(start_offset, partition_log.log_start_offset)
    while offset < partition_log.high_watermark:
        fetch = partition_log.read(offset, chunk_bytes)
        if not fetch.batches:
            break
        for batch in fetch.batches:
            if batch.is_control:
                offset = batch.next_offset
                continue
            rows, _ = batch.tuples(min_offset=offset)
            for _offset, timestamp, key, value in rows:
                apply(key, value, timestamp)
            offset = batch.next_offset
    return offset
