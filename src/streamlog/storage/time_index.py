"""The time index (`.timeindex`): sparse map from timestamp to offset.

Entry (12 bytes, big-endian): timestamp int64, relative offset int32. An
entry (t, o) means: the largest timestamp among the records up to offset o is
t, and o is the batch where that maximum was first reached. Entries are
appended only when the timestamp strictly grows, so the file is monotonic
even when record timestamps are not. One slot is kept free for the entry the
segment writes when it stops being active (is_full counts it).
"""
import numpy as np

from ..errors import KafkaStorageError
from .sparse_index import SparseIndex

_INT32_MAX = 2**31 - 1


class TimeIndex(SparseIndex):
    DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
    KEY = "timestamp"

    def _entry_plausible(self, arr):
        # Zero fill is (0, 0); a real entry at relative offset 0 has a timestamp > 0
        # in practice, and a dropped plausible entry only makes lookups scan more.
        return (arr["timestamp"] != 0) | (arr["relative_offset"] != 0)

    def is_full(self):
        return self.entries >= self.max_entries - 1

    _last_cache = None  # (entries, (timestamp, offset)): appends skip re-reading the map

    def last_entry(self):
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        cache = self._last_cache
        if cache is not None and cache[0] == self.entries:
            return cache[1]
        row = self._last_row()
        if row is None:
            return -1, self.base_offset
        return row[0], self.base_offset + row[1]

    def maybe_append(self, timestamp, offset, skip_full_check=False):
        """Append (timestamp, offset) if timestamp is above the last entry's."""
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise KafkaStorageError(
                f"offset {offset} does not fit the time index of segment {self.base_offset}")
        last_ts, last_offset = self.last_entry()
        if self.entries and offset < last_offset:
            raise KafkaStorageError(
                f"time index {self.path}: offset {offset} is below the last entry's {last_offset}")
        if timestamp <= last_ts:
            return False
        if not skip_full_check and self.is_full():
            raise KafkaStorageError(f"time index {self.path} is full")
        # The final entry of a segment being sealed (skip_full_check) reserves just itself.
        self._append_row((timestamp, relative), exact=skip_full_check)
        self._last_cache = (self.entries, (timestamp, offset))
        return True

    def lookup(self, target_timestamp):
        """(timestamp, offset) of the largest entry with timestamp < target, else (-1, base).

        Strictly less: every record up to the returned offset is then older
        than the target, so scanning from that offset's batch cannot miss one.
        """
        slot = self._largest_lower_bound(target_timestamp, strict=True)
        if slot < 0:
            return -1, self.base_offset
        ts, relative = self.entry(slot)
        return ts, self.base_offset + relative

    def truncate_to(self, offset):
        """Remove every entry whose offset is >= offset."""
        with self._lock:
            if not self._open:
                self._open_locked()
            rel = self._arr["relative_offset"][:self.entries]
            keep = int(np.searchsorted(rel, offset - self.base_offset, side="left"))
            del rel
        self.truncate_to_entries(keep)

    def sanity_problem(self, last_offset):
        """None when the entries can be right for a segment ending at last_offset."""
        if self.length % self.entry_size:
            return f"{self.path} has a length that is not a multiple of {self.entry_size}"
        used = self._used()
        if len(used):
            ts = used["timestamp"].astype(np.int64)
            rel = used["relative_offset"].astype(np.int64)
            if len(ts) > 1 and (not np.all(np.diff(ts) > 0) or not np.all(np.diff(rel) >= 0)):
                return f"{self.path} has entries out of order"
            if rel[0] < 0 or self.base_offset + rel[-1] > last_offset:
                return f"{self.path} points past the end of its segment"
        return None
