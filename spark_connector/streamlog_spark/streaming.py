"""The streaming reader: offsets, admission control, availableNow, partition discovery.

Owns the micro-batch source. An offset is Kafka's JSON shape
{topic: {"partition": next_offset}} (string keys: Spark round-trips offsets
through json, which turns int keys into strings anyway); it is what Spark
writes to the checkpoint's offsets/<batch> file, so a restarted query resumes
at exactly the end of its last planned batch.

Admission control (latestOffset(start, limit)):
  * maxOffsetsPerTrigger: at most that many offsets per batch, spread over
    the partitions in proportion to their backlog (every partition with a
    backlog gets at least one offset while the budget allows, so a small
    partition is not starved behind large ones);
  * minOffsetsPerTrigger: no batch until that many offsets are waiting, or
    maxTriggerDelay has passed since the last batch; the first trigger of a
    query (new or restarted) is never held back (Spark's lastTriggerMillis
    starts at 0);
  * trigger(availableNow=True): prepareForTriggerAvailableNow fixes the
    target (the log ends at that moment); batches respect maxOffsetsPerTrigger
    and stop at the target. minOffsetsPerTrigger does not apply (waiting for
    more data would contradict "process what is available and stop").

New partitions and new topics matching subscribePattern are picked up at the
next latestOffset, starting at their earliest offset (as Kafka's source
does). Data loss is reported (failOnDataLoss: an error, else a warning) as
Spark's KafkaOffsetReader.getOffsetRangesFromResolvedOffsets reports it: a
partition that disappeared, a new one whose log no longer starts at 0, and a
log end below where the query stands (a topic deleted and made again, a
directory restored from an older copy), after which the query goes on from
that log end. The driver-side methods run in one long-lived Python process, so
state kept on self (the availableNow target, the last trigger time) lasts for
the query; read() runs in executors on a pickled copy and keeps no state.
"""
import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxRows,
                                              SupportsTriggerAvailableNow)

from .errors import report_data_loss
from .planning import LogView, check_start, plan_ranges, resolve, split_ranges, topic_partitions
from .tasks import read_task, read_tasks


def to_json(offsets):
    """{(topic, partition): offset} -> {topic: {"partition": offset}} (Kafka's JSON shape)."""
    out = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(offsets):
    return {(topic, int(p)): int(o) for topic, parts in (offsets or {}).items()
            for p, o in parts.items()}


def prorate(backlog, budget):
    """Split `budget` offsets over partitions in proportion to backlog {tp: n > 0}.

    Returns {tp: take}, take <= backlog, sum == min(budget, sum of backlog).
    Each partition first gets the floor of its share; what is left goes one
    offset each to partitions that got none (largest backlog first), then to
    the largest fractional shares.
    """
    total = sum(backlog.values())
    if total <= budget:
        return dict(backlog)
    order = sorted(backlog, key=lambda tp: (-backlog[tp], tp))
    take = {tp: backlog[tp] * budget // total for tp in order}
    left = budget - sum(take.values())
    for tp in order:
        if left == 0:
            break
        if take[tp] == 0:
            take[tp] = 1
            left -= 1
    by_fraction = sorted(order, key=lambda tp: (-((backlog[tp] * budget) % total), tp))
    while left > 0:
        for tp in by_fraction:
            if left == 0:
                break
            if take[tp] < backlog[tp]:
                take[tp] += 1
                left -= 1
    return take


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over a streamlog database (see the module docstring)."""

    def __init__(self, options, clock=time.monotonic):
        self.options = options
        self._view = None
        self._target = None          # availableNow: the log ends to stop at
        self._last_batch_at = None   # clock() of the last admitted trigger (maxTriggerDelay)
        self._clock = clock

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_view"] = None  # an open database does not travel to executors
        return state

    @property
    def view(self):
        if self._view is None:
            self._view = LogView(self.options.path, self.options.isolation_level)
        return self._view

    # --- offsets -----------------------------------------------------------------------

    def _latest(self):
        tps = topic_partitions(self.view, self.options.subscription)
        return self.view.end(tps)

    def initialOffset(self):
        o = self.options
        tps = topic_partitions(self.view, o.subscription)
        starts = resolve(self.view, o.starting, tps, "start", o.timestamp_strategy)
        return to_json(check_start(self.view, starts, o.fail_on_data_loss))

    def getDefaultReadLimit(self):
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self):
        self._target = self._latest()

    def reportLatestOffset(self):
        return to_json(self._latest())

    def _from(self, start, latest):
        """Start offsets for every partition to read: the checkpointed ones, new ones at
        their earliest offset, each lower than the log end moved down to it. Data loss
        reported (see the module doc)."""
        fail = self.options.fail_on_data_loss
        for tp in sorted(tp for tp in start if tp not in latest):
            report_data_loss(f"{tp[0]}-{tp[1]} is gone", tp, fail)
        new = sorted(tp for tp in latest if tp not in start)
        out = self.view.beginning(new)
        for tp in new:
            if out[tp] != 0:
                report_data_loss(f"Added partition {tp[0]}-{tp[1]} starts from {out[tp]} "
                                 "instead of 0", tp, fail)
        for tp in sorted(tp for tp in latest if tp in start):
            out[tp] = start[tp]
            if latest[tp] < start[tp]:
                report_data_loss(f"Partition {tp[0]}-{tp[1]}'s offset was changed from "
                                 f"{start[tp]} to {latest[tp]}", tp, fail)
                out[tp] = latest[tp]   # the next batch goes on from the log end
        return out

    def latestOffset(self, start, limit):
        start = from_json(start)
        latest = self._target if self._target is not None else self._latest()
        begin = self._from(start, latest)
        backlog = {tp: latest[tp] - begin[tp] for tp in latest if latest[tp] > begin[tp]}
        o = self.options
        if o.min_offsets_per_trigger and self._target is None and self._held_back(backlog):
            return to_json(start) if start else to_json(begin)
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        take = backlog if budget is None else prorate(backlog, budget)
        end = dict(begin)
        for tp, n in take.items():
            end[tp] = begin[tp] + n
        return to_json(end)

    def _held_back(self, backlog):
        """minOffsetsPerTrigger (Spark's KafkaMicroBatchStream.delayBatch): a trigger is
        held back while fewer offsets wait and maxTriggerDelay has not passed since the
        last one admitted; the first is admitted at once."""
        now = self._clock()
        o = self.options
        if self._last_batch_at is not None and \
                (now - self._last_batch_at) * 1000 < o.max_trigger_delay_ms and \
                sum(backlog.values()) < o.min_offsets_per_trigger:
            return True
        self._last_batch_at = now
        return False

    # --- planning and reading ------------------------------------------------------------

    def partitions(self, start, end):
        start, end = from_json(start), from_json(end)
        missing = [tp for tp in end if tp not in start]
        start.update(self.view.beginning(missing))
        ranges = plan_ranges(start, end)
        return read_tasks(self.options, split_ranges(ranges, self.options.min_partitions),
                          self.view)

    def read(self, task):
        return read_task(task, self.options.isolation_level)

    def stop(self):
        if self._view is not None:
            self._view.close()
            self._view = None
