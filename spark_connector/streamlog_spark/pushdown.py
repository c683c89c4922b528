"""Filter pushdown: which of Spark's pushed filters the batch reader takes, and what they mean.

Owns the translation of `pyspark.sql.datasource` filters on `partition`,
`offset` and `timestamp` into a Restriction: a set of partitions, an offset
interval and a timestamp interval. Spark removes every filter a source
accepts from its plan and never re-checks it, so a filter is accepted only
when it is applied exactly: partitions and offsets by planning smaller
ranges (planning.OffsetRange), timestamps by a row mask in the reader
(timestamps are not ordered within a partition, so no offset range can stand
for them; offsets_for_times only trims the start, which is exact because
every earlier record is older than the bound).

Pushdown is opt-in (option filterPushdown=true plus Spark's
spark.sql.python.filterPushdown.enabled): PySpark 4.3.0 reuses the planned
read of a DataFrame across later queries on the same DataFrame, so a filter
pushed for one query leaks into the next (docs/SPARK.md, the reuse test).
"""
import datetime
from dataclasses import dataclass

from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull,
                                    LessThan, LessThanOrEqual)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_COLUMNS = ("partition", "offset", "timestamp")


@dataclass
class Restriction:
    """What the accepted filters leave: None means unrestricted. Intervals are [low, high)."""

    partitions: frozenset = None
    offset_low: int = None
    offset_high: int = None
    ts_low_us: int = None
    ts_high_us: int = None

    def allows_partition(self, partition):
        return self.partitions is None or partition in self.partitions

    def clamp(self, start, end):
        """[start, end) narrowed to the offset interval."""
        if self.offset_low is not None:
            start = max(start, self.offset_low)
        if self.offset_high is not None:
            end = min(end, self.offset_high)
        return start, end


def _micros(value):
    """A timezone-aware datetime -> microseconds since the epoch; None if not exact."""
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        return None  # a naive value's zone is ambiguous: let Spark evaluate the filter
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _lower(current, bound):
    return bound if current is None else max(current, bound)


def _upper(current, bound):
    return bound if current is None else min(current, bound)


def translate(filters):
    """(Restriction, [filters not taken]) -- the returned ones are the objects given."""
    r = Restriction()
    rejected = []
    for f in filters:
        attribute = getattr(f, "attribute", None)
        column = attribute[0] if attribute and len(attribute) == 1 else None
        if column not in _COLUMNS:
            rejected.append(f)
            continue
        if isinstance(f, IsNotNull):
            continue  # these columns are never null: the filter holds for every row
        if column == "partition":
            if isinstance(f, EqualTo) and _int(f.value) is not None:
                wanted = frozenset([f.value])
            elif isinstance(f, In) and all(_int(v) is not None for v in f.value):
                wanted = frozenset(f.value)
            else:
                rejected.append(f)
                continue
            r.partitions = wanted if r.partitions is None else r.partitions & wanted
            continue
        value = _int(f.value) if column == "offset" else _micros(getattr(f, "value", None))
        if value is None or not isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual,
                                               LessThan, LessThanOrEqual)):
            rejected.append(f)
            continue
        # Integer bounds (offsets, microseconds) make every comparison a half-open interval.
        low = {EqualTo: value, GreaterThan: value + 1, GreaterThanOrEqual: value}.get(type(f))
        high = {EqualTo: value + 1, LessThan: value, LessThanOrEqual: value + 1}.get(type(f))
        if column == "offset":
            if low is not None:
                r.offset_low = _lower(r.offset_low, low)
            if high is not None:
                r.offset_high = _upper(r.offset_high, high)
        else:
            if low is not None:
                r.ts_low_us = _lower(r.ts_low_us, low)
            if high is not None:
                r.ts_high_us = _upper(r.ts_high_us, high)
    return r, rejected
