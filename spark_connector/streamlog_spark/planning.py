"""Offset-range planning: options and the log's current state -> Spark input partitions.

Owns the translation of a Subscription and OffsetSpecs into concrete offsets
({(topic, partition): offset}), the data-loss rule (failOnDataLoss) applied to
them, the OffsetRange input partition (one Spark task: one topic-partition,
one half-open offset range), and the minPartitions split. Runs on the driver
(Spark's planner processes and the streaming source runner), against a
database opened read-only, so it never takes the writer's lock.

Offsets follow Kafka's vocabulary: a range [start, end) reads records with
start <= offset < end; `end` is a next_offset (the log end offset for
"latest"). Compacted logs and control batches leave gaps inside a range;
they are skipped by the reader, not counted here.
"""
import math
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

import streamlog
from streamlog import TopicPartition

from .errors import DataLossError
from .options import EARLIEST, LATEST, OptionError


@dataclass
class OffsetRange(InputPartition):
    """One Spark task: records start <= offset < end of one topic-partition.

    ts_low_us / ts_high_us: a pushed-down timestamp filter, applied exactly by
    the reader (low inclusive, high exclusive, microseconds since the epoch).
    """

    topic: str
    partition: int
    start: int
    end: int
    ts_low_us: int = None
    ts_high_us: int = None

    @property
    def size(self):
        return self.end - self.start


class LogView:
    """Read-only metadata of one database, for planning: topics, partitions, offsets.

    Opens the directory read-only on first use (no lock: the writer may be
    running in another process) and is not picklable state: readers drop it
    before they are shipped (see source.py).
    """

    def __init__(self, path, isolation_level="read_uncommitted"):
        self.path = path
        self.isolation_level = isolation_level
        self._db = None
        self._consumer = None

    def _open(self):
        if self._db is None:
            self._db = streamlog.open(self.path, readonly=True)
            # read_committed: the latest offsets are the last stable ones, as Kafka's source
            # plans them (an open transaction's records are not planned).
            self._consumer = self._db.consumer(isolation_level=self.isolation_level)
        return self._db

    def close(self):
        if self._db is not None:
            self._db.close()
            self._db = self._consumer = None

    def topics(self):
        return self._open().topics()

    def partition_count(self, topic):
        try:
            return len(self._open().describe_topic(topic).partitions)
        except streamlog.UnknownTopicOrPartitionError:
            return None

    def beginning(self, tps):
        self._open()
        found = self._consumer.beginning_offsets([TopicPartition(*tp) for tp in tps])
        return {(tp.topic, tp.partition): o for tp, o in found.items()}

    def end(self, tps):
        self._open()
        found = self._consumer.end_offsets([TopicPartition(*tp) for tp in tps])
        return {(tp.topic, tp.partition): o for tp, o in found.items()}

    def aborted_transactions(self, topic, partition, start, end):
        """[(producer id, first offset, marker offset)] of the aborted transactions whose
        batches [start, end) may hold: what a read_committed reader skips (the JVM reader
        gets them in its task, as Kafka's fetch response carries them)."""
        partition_log = self._open()._broker.partition_log(TopicPartition(topic, partition))
        return [(t.producer_id, t.first_offset, t.last_offset)
                for t in partition_log.aborted_transactions(start, end)]

    def offsets_for_times(self, timestamps):
        """{tp: ms} -> {tp: first offset whose timestamp >= ms, or None}."""
        self._open()
        found = self._consumer.offsets_for_times({TopicPartition(*tp): ts
                                                  for tp, ts in timestamps.items()})
        return {(tp.topic, tp.partition): (None if v is None else v.offset)
                for tp, v in found.items()}


def topic_partitions(view, subscription):
    """Every (topic, partition) the subscription covers now, sorted.

    As with Kafka's source, a subscribed topic that does not exist (yet)
    contributes nothing; an assigned partition that does not exist is an error.
    """
    if subscription.assigned:
        for topic, partition in subscription.assigned:
            count = view.partition_count(topic)
            if count is None or not 0 <= partition < count:
                raise streamlog.UnknownTopicOrPartitionError(
                    f"option 'assign' names {topic}-{partition}, which does not exist in "
                    f"{view.path}" + ("" if count is None else
                                      f" (topic {topic!r} has partitions 0..{count - 1})"))
        return sorted(subscription.assigned)
    topics = [t for t in view.topics() if subscription.matches(t)]
    out = []
    for topic in topics:
        count = view.partition_count(topic)
        out.extend((topic, p) for p in range(count or 0))
    return sorted(out)


def _require_all(given, tps, option):
    if set(given) != set(tps):
        fmt = lambda s: "{" + ", ".join(f"{t}-{p}" for t, p in sorted(s)) + "}"  # noqa: E731
        raise OptionError(f"If {option} contains specific offsets, you must specify all "
                          f"TopicPartitions.\nUse -1 for latest, -2 for earliest.\n"
                          f"Specified: {fmt(given)} Assigned: {fmt(tps)}")


def resolve(view, spec, tps, role, timestamp_strategy="error"):
    """Concrete offsets {(topic, partition): offset} of an OffsetSpec for these partitions.

    role "start" or "end" only changes what a timestamp with no matching
    record means: for a start, the strategy decides (error, or the latest
    offset); for an end, the latest offset (as Spark does).
    """
    if not tps:
        return {}
    if spec.kind == "earliest":
        return view.beginning(tps)
    if spec.kind == "latest":
        return view.end(tps)
    if spec.kind == "offsets":
        option = "startingOffsets" if role == "start" else "endingOffsets"
        _require_all(spec.offsets, tps, option)
        first, last = view.beginning(tps), view.end(tps)
        return {tp: first[tp] if spec.offsets[tp] == EARLIEST else
                last[tp] if spec.offsets[tp] == LATEST else spec.offsets[tp] for tp in tps}
    if spec.kind == "timestamps":
        option = "startingOffsetsByTimestamp" if role == "start" else "endingOffsetsByTimestamp"
        _require_all(spec.offsets, tps, option)
        wanted = {tp: spec.offsets[tp] for tp in tps}
    else:
        wanted = {tp: spec.timestamp for tp in tps}
    bad = {tp: ts for tp, ts in wanted.items() if ts < 0}
    if bad:
        raise OptionError(f"timestamps must be >= 0 ms, got {bad}")
    found = view.offsets_for_times(wanted)
    missing = [tp for tp, o in found.items() if o is None]
    if missing:
        if role == "start" and timestamp_strategy == "error":
            topic, partition = missing[0]
            raise OptionError(f"No offset matched from request of topic-partition "
                              f"{topic}-{partition} and timestamp {wanted[missing[0]]}.")
        last = view.end(missing)
        found.update({tp: last[tp] for tp in missing})
    return found


def check_start(view, starts, fail_on_data_loss, ends=None):
    """Apply the data-loss rule to start offsets: below the log start means lost records.

    With failOnDataLoss (the default) that is an error; without, reading
    moves up to the log start. ends (batch): a start past its end is also
    data loss (the log was truncated or the option named offsets it never had).
    """
    tps = list(starts)
    first = view.beginning(tps)
    out = {}
    for tp in tps:
        start = starts[tp]
        if start < first[tp]:
            if fail_on_data_loss:
                raise DataLossError.for_range(tp, start, first[tp])
            start = first[tp]
        if ends is not None and start > ends[tp]:
            if fail_on_data_loss:
                raise DataLossError(
                    f"the starting offset {start} of {tp[0]}-{tp[1]} is beyond its ending "
                    f"offset {ends[tp]}", tp)
            start = ends[tp]
        out[tp] = start
    return out


def plan_ranges(starts, ends):
    """OffsetRanges with records to read, in (topic, partition) order."""
    return [OffsetRange(tp[0], tp[1], starts[tp], ends[tp])
            for tp in sorted(ends) if tp in starts and ends[tp] > starts[tp]]


def split_ranges(ranges, min_partitions):
    """Split ranges so that there are at least min_partitions of them (when there are enough
    records), each topic-partition into pieces in proportion to its size.

    Spark's Kafka source treats minPartitions as "about N"; here the count is
    at least N (ceil of each share), never a piece of zero records, and
    pieces of one topic-partition differ in size by at most one offset.
    """
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    if total == 0:
        return list(ranges)
    out = []
    for r in ranges:
        pieces = min(r.size, max(1, math.ceil(r.size * min_partitions / total)))
        bounds = [r.start + (r.size * i) // pieces for i in range(pieces + 1)]
        out.extend(OffsetRange(r.topic, r.partition, a, b, r.ts_low_us, r.ts_high_us)
                   for a, b in zip(bounds, bounds[1:], strict=False))
    return out
