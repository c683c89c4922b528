"""Which compacted log the cleaner takes next, and what part of it (Kafka's
LogCleanerManager, KAFKA_REFERENCE.md §4).

For one log, from its checkpointed first dirty offset (cleaner-offset-checkpoint):
  first dirty        the checkpoint, or the log start when it has none or it lies
                     outside [log start, log end] (a log truncated or restarted)
  first uncleanable  min(the LSO, the active segment's base, the base of the first
                     dirty sealed segment holding a record newer than
                     now - min.compaction.lag.ms), taken down to the base of the
                     segment holding it: the segment with the LSO is left whole, so
                     neither an open transaction's batches nor what follows them are
                     touched (Kafka's calculateCleanableBytes)
  dirty ratio        bytes of the segments holding [first dirty, first uncleanable)
                     over those and the bytes of the segments below first dirty
A log qualifies, with something cleanable, when its ratio is above
min.cleanable.dirty.ratio, or when the first batch of a dirty sealed segment, any
of them, is older than max.compaction.lag.ms (it must be cleaned now: Kafka's
maxCompactionDelay); of those, the dirtiest goes first.

Pure functions over the logs' public state; the broker's cleaner thread owns the
checkpoint and the schedule.
"""
import bisect
from typing import NamedTuple


class LogToClean(NamedTuple):
    """One compacted log's sections, as the cleaner sees them now."""

    log: object
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool

    @property
    def dirty_ratio(self):
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def qualifies(self):
        return self.cleanable_bytes > 0 and (
            self.needs_compaction_now or
            self.dirty_ratio > self.log.config.min_cleanable_dirty_ratio)


def first_dirty_offset(partition_log, checkpointed):
    """Where this log's dirty section starts (the checkpoint, unless it cannot be right)."""
    start = partition_log.log_start_offset
    if checkpointed is None or not start <= checkpointed <= partition_log.log_end_offset:
        return start
    return checkpointed


def log_to_clean(partition_log, checkpointed, now_ms):
    """The log's sections (LogToClean) from its checkpointed first dirty offset."""
    config = partition_log.config
    segments = partition_log.segments
    first_dirty = first_dirty_offset(partition_log, checkpointed)
    active = segments[-1]
    first_uncleanable = min(partition_log.last_stable_offset, active.base_offset)
    sealed = segments[:-1]
    dirty = [s for i, s in enumerate(sealed) if segments[i + 1].base_offset > first_dirty]
    lag_ms = config.min_compaction_lag_ms
    if lag_ms > 0:
        for segment in dirty:
            if segment.largest_timestamp > now_ms - lag_ms:
                first_uncleanable = min(first_uncleanable, segment.base_offset)
                break
    bases = [segment.base_offset for segment in segments]
    first_uncleanable = bases[max(bisect.bisect_right(bases, first_uncleanable) - 1, 0)]
    first_uncleanable = max(first_uncleanable, first_dirty)
    # As Kafka counts them: the segment holding first dirty counts on both sides.
    clean_bytes = cleanable_bytes = 0
    for i, segment in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else \
            partition_log.log_end_offset
        if segment.base_offset < first_dirty:
            clean_bytes += segment.size
        if end > first_dirty and segment.base_offset < first_uncleanable and \
                first_dirty < first_uncleanable:
            cleanable_bytes += segment.size
    needs_now = False
    max_lag_ms = config.max_compaction_lag_ms
    if cleanable_bytes and 0 < max_lag_ms < now_ms:
        for segment in dirty:
            first_ts = segment.rolling_based_timestamp()
            if first_ts is not None and 0 < first_ts < now_ms - max_lag_ms:
                needs_now = True
                break
    return LogToClean(partition_log, first_dirty, first_uncleanable, clean_bytes,
                      cleanable_bytes, needs_now)


def filthiest(candidates):
    """The qualifying LogToClean with the highest dirty ratio, or None."""
    qualifying = [c for c in candidates if c.qualifies]
    return max(qualifying, key=lambda c: c.dirty_ratio, default=None)
