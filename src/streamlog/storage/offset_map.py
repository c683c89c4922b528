"""The log cleaner's offset map: key -> offset of the key's last record, in fixed memory.

Kafka's SkimpyOffsetMap (KAFKA_REFERENCE.md §4): an open-addressing table whose
slots hold a 16-byte hash of a key and an 8-byte offset, 24 bytes a slot, so
`memory // 24` slots, filled to at most `load_factor` of them. Two keys with
the same 16-byte hash are taken as one key, as Kafka takes two equal MD5s: the
odds for a million keys are about 1 in 10^26. The hash is xxHash's XXH3-128
(the project's chosen dependency), not MD5: as strong for this purpose, and
ten times faster.

The table is one numpy array of slots x 3 uint64: the two hash halves and the
offset + 1 (0: an empty slot), side by side so that a probe touches one cache line,
and all zero at first so that a large map costs memory only where keys land. It
is probed linearly from the slot the low half names. The native paths
(native/sl_cleaner.h) probe the same array the same way.
`put` refuses a new key once the map holds `max_entries`, and the pass then
stops its dirty range there, as Kafka's does when its map is full; a key it
already holds is always updated. Kafka's buildOffsetMapForSegment stops at the
first keyed record once the map is full, held key or not: a pass here may reach
further before a new key stops it, which cleans as correctly and leaves less to
the next pass.

Not thread-safe: one cleaning pass owns one map.
"""
import numpy as np
import xxhash

SLOT_BYTES = 24
DEFAULT_LOAD_FACTOR = 0.9
_HIGH, _LOW, _OFFSET = 0, 1, 2   # columns; the offset column holds offset + 1, 0 = empty
_MASK64 = (1 << 64) - 1


def key_hash(key):
    """(high, low) 64-bit halves of the key's 16-byte hash."""
    value = xxhash.xxh3_128_intdigest(key)
    return value >> 64, value & _MASK64


class OffsetMap:
    def __init__(self, memory_bytes, load_factor=DEFAULT_LOAD_FACTOR):
        if not 0 < load_factor <= 1:
            raise ValueError(f"load factor {load_factor} is not in (0, 1]")
        self.slots = int(memory_bytes) // SLOT_BYTES
        if self.slots < 1:
            raise ValueError(f"{memory_bytes} bytes hold no {SLOT_BYTES}-byte slot")
        self.max_entries = max(1, int(self.slots * load_factor))
        # numpy backs a large zeroed array with huge pages where the kernel allows (keys land
        # at random slots: with 4 KiB pages most probes would also miss the TLB).
        self.table = np.zeros((self.slots, 3), np.uint64)
        self.size = 0
        self.latest_offset = -1   # the largest offset put (Kafka's latestOffset)
        self.native_view = None   # the C struct over the table (streamlog.native), once made

    @property
    def full(self):
        return self.size >= self.max_entries

    @property
    def utilization(self):
        return self.size / self.slots

    def _slot(self, high, low):
        """The slot holding (high, low), or the empty slot where it would go; -1 when the
        table has neither (every slot taken by other keys: load factor 1)."""
        slots = self.slots
        table = self.table
        i = low % slots
        for _ in range(slots):
            # int(): a uint64 compared with a Python int must not go through float64.
            row = table[i]
            if not row[_OFFSET] or (int(row[_LOW]) == low and int(row[_HIGH]) == high):
                return i
            i += 1
            if i == slots:
                i = 0
        return -1

    def put(self, key, offset):
        """Record offset as key's latest; False (and nothing changed) if the key is new and
        the map is full."""
        high, low = key_hash(key)
        i = self._slot(high, low)
        if i < 0:
            return False
        table = self.table
        if not table[i, _OFFSET]:
            if self.size >= self.max_entries:
                return False
            table[i, _HIGH], table[i, _LOW] = high, low
            self.size += 1
        table[i, _OFFSET] = offset + 1
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def get(self, key):
        """The offset recorded for key, or -1."""
        high, low = key_hash(key)
        i = self._slot(high, low)
        return -1 if i < 0 else int(self.table[i, _OFFSET]) - 1

    def update_latest(self, offset):
        """The pass covered the log up to offset (a batch's or a segment's end) though no
        key was put there."""
        if offset > self.latest_offset:
            self.latest_offset = offset

    def clear(self):
        self.table.fill(0)
        self.size = 0
        self.latest_offset = -1
