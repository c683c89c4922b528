"""The offset index (`.index`): sparse map from offset to byte position in the segment's log.

Entry (8 bytes, big-endian): relative offset int32 (offset - base_offset),
physical position int32. An entry (o, p) means: the batch starting at byte p
has last offset o; batches before p end below o. A lookup therefore returns a
position from which the caller scans forward. The first batch of a segment is
never indexed, so a real entry never has position 0 (which lets a read-only
snapshot tell entries from the zero-filled tail).
"""
import numpy as np

from ..errors import KafkaStorageError
from .sparse_index import SparseIndex

_INT32_MAX = 2**31 - 1


class OffsetIndex(SparseIndex):
    DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
    KEY = "relative_offset"
    _last_cache = None  # (entries, last relative offset): appends skip re-reading the map

    def _entry_plausible(self, arr):
        return arr["position"] > 0

    def append(self, offset, position):
        """Index `offset` (the last offset of the batch at `position`)."""
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise KafkaStorageError(
                f"offset {offset} does not fit the index of segment {self.base_offset}")
        if self.entries and relative <= self._last_relative():
            raise KafkaStorageError(
                f"offset {offset} is not above the last entry of {self.path}")
        self._append_row((relative, position))
        self._last_cache = (self.entries, relative)

    def _last_relative(self):
        cache = self._last_cache
        if cache is not None and cache[0] == self.entries:
            return cache[1]
        return self.entry(self.entries - 1)[0]

    def lookup(self, target_offset):
        """(offset, position) of the largest entry <= target_offset, else (base_offset, 0)."""
        slot = self._largest_lower_bound(target_offset - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        relative, position = self.entry(slot)
        return self.base_offset + relative, position

    def last_entry(self):
        """(offset, position) of the last entry, or (base_offset, 0) when empty."""
        row = self._last_row()
        if row is None:
            return self.base_offset, 0
        return self.base_offset + row[0], row[1]

    def truncate_to(self, offset):
        """Remove every entry whose offset is >= offset."""
        self.truncate_to_entries(self._largest_lower_bound(offset - self.base_offset,
                                                           strict=True) + 1)

    def sanity_problem(self, log_size):
        """None when the entries can be right for a log of log_size bytes, else why not."""
        if self.length % self.entry_size:
            return f"{self.path} has a length that is not a multiple of {self.entry_size}"
        used = self._used()
        if len(used):
            rel = used["relative_offset"].astype(np.int64)
            pos = used["position"].astype(np.int64)
            if rel[0] < 0 or (len(rel) > 1 and not np.all(np.diff(rel) > 0)):
                return f"{self.path} has offsets out of order"
            if pos[0] <= 0 or (len(pos) > 1 and not np.all(np.diff(pos) > 0)):
                return f"{self.path} has positions out of order"
            if pos[-1] >= log_size:
                return f"{self.path} points past the end of its log ({pos[-1]} >= {log_size})"
        return None
