"""The input partition of a batch read, and its packed form: the contract with the JVM reader.

A ReadTask is everything one Spark task needs to read its records: the
database path, one OffsetRange, and how to read (headers, the data-loss
rule). Python executors read it as an object (reader.read_range). The JVM
reader (java/streamlog, see jvm.py) never runs Python: Spark hands it each
task pickled, and a ReadTask pickles to a call of unpack_task whose one
argument is the packed bytes below, which the JVM finds by their magic
prefix (OffsetRangePartition.java decodes the same layout).

Packed layout, big-endian:

    magic  16 bytes  b"streamlog-task\\x00\\x02" (the last byte is the version)
    flags  int8      1: ts_low_us applies, 2: ts_high_us applies,
                     4: include headers, 8: fail on data loss, 16: read_committed
    partition int32, start int64, end int64, ts_low_us int64, ts_high_us int64
    topic  uint16 length + UTF-8
    path   int32 length + UTF-8
    aborted int32 count, count x {int64 producer id, int64 first offset,
                                  int64 marker offset}

read_committed: the range ends at or below the last stable offset (planned so),
and `aborted` lists the aborted transactions the range may hold: a
transactional batch of such a producer between its first offset and its
marker is skipped (txn_index.AbortedTxn; Kafka's read_committed fetch).
"""
import struct
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from .planning import OffsetRange
from .reader import read_range

MAGIC = b"streamlog-task\x00\x02"
_FIXED = struct.Struct(">biqqqq")
_ABORTED = struct.Struct(">qqq")
_TS_LOW, _TS_HIGH, _HEADERS, _FAIL_ON_DATA_LOSS, _READ_COMMITTED = 1, 2, 4, 8, 16


@dataclass
class ReadTask(InputPartition):
    """One Spark task of a batch read: `range` of the database at `path`."""

    path: str
    range: OffsetRange
    include_headers: bool
    fail_on_data_loss: bool
    read_committed: bool = False
    aborted: tuple = ()   # read_committed: (producer id, first offset, marker offset)

    def __reduce__(self):
        return unpack_task, (pack_task(self),)


def read_tasks(options, ranges, view):
    """The ReadTasks of planned ranges under these SourceOptions (batch and streaming alike);
    view (planning.LogView): where a read_committed task learns its aborted transactions."""
    if not ranges:
        # Spark would turn [] into one InputPartition(None), which the JVM reader cannot tell
        # from a foreign partition; an empty range reads nothing either way.
        ranges = [OffsetRange("", 0, 0, 0)]
    committed = options.isolation_level == "read_committed"
    return [ReadTask(options.path, r, options.include_headers, options.fail_on_data_loss,
                     committed,
                     tuple(view.aborted_transactions(r.topic, r.partition, r.start, r.end))
                     if committed and r.end > r.start else ())
            for r in ranges]


def read_task(task, isolation_level):
    """The RecordBatches of one task, read in a Python executor."""
    if task.range.end <= task.range.start:
        return iter(())
    return read_range(task.path, task.range, task.include_headers, isolation_level,
                      task.fail_on_data_loss)


def pack_task(task):
    r = task.range
    flags = ((_TS_LOW if r.ts_low_us is not None else 0)
             | (_TS_HIGH if r.ts_high_us is not None else 0)
             | (_HEADERS if task.include_headers else 0)
             | (_FAIL_ON_DATA_LOSS if task.fail_on_data_loss else 0)
             | (_READ_COMMITTED if task.read_committed else 0))
    topic = r.topic.encode()
    path = task.path.encode()
    return b"".join((MAGIC, _FIXED.pack(flags, r.partition, r.start, r.end, r.ts_low_us or 0,
                                        r.ts_high_us or 0),
                     struct.pack(">H", len(topic)), topic, struct.pack(">i", len(path)), path,
                     struct.pack(">i", len(task.aborted)),
                     *(_ABORTED.pack(*t) for t in task.aborted)))


def unpack_task(packed):
    if not packed.startswith(MAGIC):
        raise ValueError("not a packed streamlog read task")
    at = len(MAGIC)
    flags, partition, start, end, low, high = _FIXED.unpack_from(packed, at)
    at += _FIXED.size
    (n,) = struct.unpack_from(">H", packed, at)
    topic = packed[at + 2:at + 2 + n].decode()
    at += 2 + n
    (n,) = struct.unpack_from(">i", packed, at)
    path = packed[at + 4:at + 4 + n].decode()
    at += 4 + n
    (n,) = struct.unpack_from(">i", packed, at)
    aborted = tuple(_ABORTED.unpack_from(packed, at + 4 + i * _ABORTED.size) for i in range(n))
    r = OffsetRange(topic, partition, start, end, low if flags & _TS_LOW else None,
                    high if flags & _TS_HIGH else None)
    return ReadTask(path, r, bool(flags & _HEADERS), bool(flags & _FAIL_ON_DATA_LOSS),
                    bool(flags & _READ_COMMITTED), aborted)
