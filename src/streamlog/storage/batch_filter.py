"""Rewrite one record batch keeping only chosen records: the log cleaner's per-batch step.

Kafka's MemoryRecords.filterTo for one v2 batch (KAFKA_REFERENCE.md §4): the
kept records keep their offsets and their order, so the new batch has the same
base offset, last offset delta, producer id, epoch, base sequence, partition
leader epoch and attributes (compression included); its record count and max
timestamp (over the kept records, unless the batch is LogAppendTime) are those
of what is left, and its CRC is new. The last offset stays the original batch's
(Kafka's MemoryRecords.buildRetainedRecordsInto, overrideLastOffset): with it
the producer's last sequence, which a producer state rebuilt from the log reads
from the batch, and which the producer's next batch must follow.

A kept record's bytes are copied as they are (their offset and timestamp
deltas stay right: the base offset and timestamp do not move), except when
the batch gets a delete horizon: Kafka v2 then stores the horizon in the
baseTimestamp field (attribute bit 6), so each record's timestamp delta is
re-encoded against it and the record's length prefix with it.
"""
from . import compression
from .record_batch import (CONTROL_FLAG, DELETE_HORIZON_FLAG, LOG_APPEND_TIME, NO_TIMESTAMP,
                           RECORDS_OFFSET, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_FLAG, seal)
from .varint import decode_varint, decode_varlong, encode_varint, encode_varlong


def record_spans(buf, pos, length, count):
    """[(start, end, timestamp delta, offset delta)] of each record in buf[pos:pos+length]."""
    spans = []
    end_of_section = pos + length
    for _ in range(count):
        size, body = decode_varint(buf, pos, end_of_section)
        end = body + size
        # attributes (int8), then timestampDelta (varlong), offsetDelta (varint)
        ts_delta, at = decode_varlong(buf, body + 1, end)
        offset_delta, _ = decode_varint(buf, at, end)
        spans.append((pos, end, ts_delta, offset_delta))
        pos = end
    return spans


def filter_batch(batch, keep, delete_horizon_ms=None):
    """The bytes of `batch` (a valid RecordBatch) with only the records whose entry in
    `keep` (one bool per record, in order) is true; None when none is kept.
    delete_horizon_ms: give the batch this delete horizon (the first pass that keeps a
    tombstone sets it; a batch that has one keeps it)."""
    buf, pos, length, _ = batch._records_section()
    spans = record_spans(buf, pos, length, batch.records_count)
    if len(keep) != len(spans):
        raise ValueError(f"{len(keep)} keep flags for {len(spans)} records")
    kept = [s for s, k in zip(spans, keep, strict=True) if k]
    if not kept:
        return None
    if len(kept) == len(spans) and (delete_horizon_ms is None or batch.has_delete_horizon):
        return bytes(batch.view())   # nothing removed, no horizon to set: the batch as it is
    # A record's time is the batch's baseTimestamp field plus its delta, whether that field
    # holds the first timestamp or (delete horizon bit set) the horizon, as in Kafka.
    old_base = batch.base_timestamp
    if delete_horizon_ms is None and batch.has_delete_horizon:
        delete_horizon_ms = old_base   # a horizon once set stays
    new_base = old_base if delete_horizon_ms is None else delete_horizon_ms
    section = bytearray()
    view = memoryview(buf)
    max_ts = -1
    for start, end, ts_delta, _offset_delta in kept:
        timestamp = old_base + ts_delta
        max_ts = max(max_ts, timestamp)
        if new_base == old_base:
            section += view[start:end]
            continue
        size, body = decode_varint(buf, start, end)
        _, after_ts = decode_varlong(buf, body + 1, end)
        rest = bytes(view[body:body + 1]) + encode_varlong(timestamp - new_base) + \
            bytes(view[after_ts:end])
        section += encode_varint(len(rest)) + rest
    return sealed_batch(batch, section, len(kept), max_ts, delete_horizon_ms)


def sealed_batch(batch, section, count, max_timestamp, delete_horizon_ms):
    """The bytes of a batch holding `section` (count records, uncompressed, whose timestamp
    deltas are relative to the delete horizon when one is given, else to batch's base
    timestamp) with batch's header fields, its last offset included: filter_batch's last
    step, and the native filter's (streamlog.native.clean_section)."""
    attributes = batch.attributes
    base_timestamp = batch.base_timestamp
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG
        base_timestamp = delete_horizon_ms
    if batch.timestamp_type == LOG_APPEND_TIME:
        max_timestamp = batch.max_timestamp
    cid = batch.compression
    records = bytes(section) if cid == compression.NONE else compression.compress(cid, section)
    out = bytearray(RECORDS_OFFSET) + records
    seal(out, 0, base_offset=batch.base_offset, attributes=attributes,
         last_offset_delta=batch.last_offset_delta, base_timestamp=base_timestamp,
         max_timestamp=max_timestamp, producer_id=batch.producer_id,
         producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
         records_count=count, partition_leader_epoch=batch.partition_leader_epoch)
    return bytes(out)


def empty_batch(batch):
    """The header of `batch` alone, holding no record (Kafka's RETAIN_EMPTY): its offsets,
    producer id, epoch and sequence stay known (an active producer's last batch; the
    batch that ends a cleaned range). As Kafka writes one: no compression, no first
    timestamp, the max timestamp kept, the timestamp type and the transactional and
    control flags kept."""
    out = bytearray(RECORDS_OFFSET)
    seal(out, 0, base_offset=batch.base_offset,
         attributes=batch.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG | CONTROL_FLAG),
         last_offset_delta=batch.last_offset_delta, base_timestamp=NO_TIMESTAMP,
         max_timestamp=batch.max_timestamp, producer_id=batch.producer_id,
         producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
         records_count=0, partition_leader_epoch=batch.partition_leader_epoch)
    return bytes(out)
