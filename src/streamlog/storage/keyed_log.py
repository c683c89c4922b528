"""Keyed state logs: partitions whose records are changes to a small table.

The library keeps its own state the way Kafka does -- the topic registry,
committed offsets, group metadata -- as records in a log where the last value
of a key wins and a null value (a tombstone) deletes the key. Replaying the
log rebuilds the table; compaction can later drop superseded records without
changing what a replay yields. This module owns both halves: encoding a set
of changes as one batch, and replaying a log from an offset.

Changes written inside a transaction (transactional batches: transactional
offset commits in `__consumer_offsets`) take effect at their producer's
COMMIT marker and never at an ABORT: a replay given a `pending` dict holds
them there, by producer id, until the marker. The record written last wins,
as compaction keeps only it: a change that takes effect -- one written
outside a transaction, or one a COMMIT marker applies -- drops the changes
of its key that open transactions hold from older records (supersede), so a
transaction whose record is older, committing after, does not bring back
its value. Kafka's OffsetMetadataManager.replayEndTransactionMarker so
materializes a pending offset only when its record offset is above the
committed one's ("we always keep the most recent committed offset"), and
replay drops pending offsets at a tombstone.
"""
from .record_batch import CONTROL_COMMIT, build_batch


def encode_changes(changes, timestamp_ms, producer_id=-1, producer_epoch=-1):
    """[(key bytes, value bytes | None)] -> one encoded batch (appended atomically); with a
    producer id, a transactional batch of that producer's open transaction."""
    keys = [k for k, _ in changes]
    values = [v for _, v in changes]
    if producer_id < 0:
        return build_batch(values, keys=keys, timestamp=timestamp_ms)
    return build_batch(values, keys=keys, timestamp=timestamp_ms, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=0, is_transactional=True)


def replay(partition_log, start_offset, apply, chunk_bytes=1 << 20, pending=None,
           to_log_end=False):
    """Call apply(key, value, timestamp_ms) for each record from start_offset to the high
    watermark; returns the offset to resume from next time. pending: {producer id:
    [(key, value, timestamp_ms, record offset)]} of transactions still open, kept across
    calls (hold, end_transaction); without it, transactional records apply at once like
    any other. to_log_end: up to the log end instead (a cluster's coordinator loading a
    partition it was just elected to lead: its high watermark catches up only as the
    followers fetch, as Kafka's coordinators load to the log end)."""
    offset = max(start_offset, partition_log.log_start_offset)
    while offset < (partition_log.log_end_offset if to_log_end
                    else partition_log.high_watermark):
        fetch = partition_log.read(offset, chunk_bytes, below_high_watermark=not to_log_end)
        if not fetch.batches:
            break
        for batch in fetch.batches:
            if batch.is_control:
                if pending is not None and batch.last_offset >= offset:
                    end_transaction(pending, batch.producer_id,
                                    batch.control_type() == CONTROL_COMMIT, apply)
                offset = batch.next_offset
                continue
            rows, _ = batch.tuples(min_offset=offset)
            if pending is not None and batch.is_transactional:
                hold(pending, batch.producer_id,
                     [(key, value, timestamp, record_offset)
                      for record_offset, timestamp, key, value in rows])
            else:
                for record_offset, timestamp, key, value in rows:
                    if pending:
                        supersede(pending, key, record_offset)
                    apply(key, value, timestamp)
            offset = batch.next_offset
    return offset


def hold(pending, producer_id, changes):
    """Keep changes [(key, value, timestamp_ms, record offset)] written in producer_id's
    open transaction until its marker (end_transaction)."""
    pending.setdefault(producer_id, []).extend(changes)


def end_transaction(pending, producer_id, commit, apply):
    """producer_id's marker: at a COMMIT, apply(key, value, timestamp_ms) each change it
    holds, in record order; at an ABORT, drop them. Each change applied supersedes the
    older records of its key in the other open transactions (module doc)."""
    held = pending.pop(producer_id, ())
    if commit:
        for key, value, timestamp, record_offset in held:
            supersede(pending, key, record_offset)
            apply(key, value, timestamp)


def supersede(pending, key, record_offset):
    """A change to key from the record at record_offset took effect: drop the changes to
    key that open transactions in pending hold from older records. Their marker must not
    bring back a value that compaction, keeping the later record, would remove (Kafka's
    replayEndTransactionMarker: recordOffset > existing.recordOffset, else skipped)."""
    key = bytes(key)
    for held in pending.values():
        held[:] = [entry for entry in held
                   if entry[3] > record_offset or bytes(entry[0]) != key]
