"""The executor side of a read: one OffsetRange -> pyarrow.RecordBatches.

Owns the hot path. An executor opens the database read-only (no lock; the
writer may be appending in another process), positions a consumer at the
range's start and takes whole decoded batches as columns
(Consumer.poll_batch -> RecordColumns -> to_arrow), so a record never becomes
a Python object unless headers were asked for. Each RecordBatch has exactly
the Arrow schema Spark derives from the source's schema (timestamp[us,
tz=UTC], every field nullable); Spark checks the first one against it.

Also applies what the planner could not: the data-loss rule when retention
removed part of the range after planning, and a pushed-down timestamp filter
(a row mask; see pushdown.py).
"""
import time

import numpy as np

import streamlog
from streamlog import TopicPartition

from .errors import DataLossError

# Bytes per fetch of one partition: large enough that a fetch returns tens of thousands of
# records (per-call overhead vanishes), small enough to keep memory per task modest.
# (Measured on the project machine: 1 MiB and 4 MiB read at 3.4-3.5M records/s into Arrow,
# 16 MiB at 2.8M: larger chunks touch more fresh memory.)
FETCH_BYTES = 4 << 20
# Empty fetches in a row (10 ms apart) below a log end the reader can see before it gives up.
_MAX_EMPTY_POLLS = 200


def read_range(path, r, include_headers, isolation_level, fail_on_data_loss):
    """Yield RecordBatches of r's records (r: planning.OffsetRange), in offset order."""
    tp = TopicPartition(r.topic, r.partition)
    with streamlog.open(path, readonly=True) as db:
        consumer = db.consumer(auto_offset_reset="none", isolation_level=isolation_level,
                               max_partition_fetch_bytes=FETCH_BYTES,
                               fetch_max_bytes=FETCH_BYTES, fetch_max_wait_ms=0)
        try:
            consumer.assign([tp])
        except streamlog.UnknownTopicOrPartitionError:
            if fail_on_data_loss:
                raise DataLossError(f"{r.topic}-{r.partition} no longer exists", tp) from None
            return
        position = r.start
        first = consumer.beginning_offsets([tp])[tp]
        if position < first:
            if fail_on_data_loss:
                raise DataLossError.for_range((r.topic, r.partition), position, first)
            position = first
        consumer.seek(tp, position)
        empty_polls = 0
        while position < r.end:
            try:
                chunks = consumer.poll_batch(timeout=0, max_records=r.end - position,
                                             include_headers=include_headers)
            except streamlog.OffsetOutOfRangeError:
                # Retention removed records between planning (or the last fetch) and now.
                first = consumer.beginning_offsets([tp])[tp]
                if fail_on_data_loss or first <= position:
                    raise DataLossError.for_range((r.topic, r.partition), position,
                                                  first) from None
                position = first
                consumer.seek(tp, position)
                continue
            for chunk in chunks:
                batch = chunk.to_arrow(include_headers)
                if len(chunk) and chunk.offsets[-1] >= r.end:
                    # max_records stops the fetch at r.end records, not at offset r.end: a
                    # range ending in a compaction gap or before a control batch gets more.
                    batch = batch.slice(0, int(np.searchsorted(chunk.offsets, r.end)))
                if r.ts_low_us is not None or r.ts_high_us is not None:
                    batch = _filter_timestamps(batch, r.ts_low_us, r.ts_high_us)
                if batch.num_rows:
                    yield batch
            moved = consumer.position(tp)
            if moved == position and not chunks:
                # Nothing at the position: the range reaches past what the log holds (it was
                # truncated), or the append is not visible to this read-only open yet.
                end = consumer.end_offsets([tp])[tp]
                if end <= position:
                    if fail_on_data_loss and end < r.end:
                        raise DataLossError(
                            f"{r.topic}-{r.partition} ends at offset {end}, before the planned "
                            f"end {r.end}", tp)
                    return
                empty_polls += 1
                if empty_polls > _MAX_EMPTY_POLLS:
                    raise RuntimeError(
                        f"{r.topic}-{r.partition}: the log end is {end} but no record at or "
                        f"after offset {position} could be fetched; run `streamlog verify "
                        f"{path}`")
                time.sleep(0.01)
            else:
                empty_polls = 0
            position = moved


def _filter_timestamps(batch, low_us, high_us):
    import pyarrow.compute as pc

    micros = batch.column("timestamp").cast("int64")
    mask = None
    if low_us is not None:
        mask = pc.greater_equal(micros, low_us)
    if high_us is not None:
        upper = pc.less(micros, high_us)
        mask = upper if mask is None else pc.and_(mask, upper)
    return batch.filter(mask)
