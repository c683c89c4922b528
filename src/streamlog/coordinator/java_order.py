"""The two Java orders that Kafka's assignment results depend on, reproduced.

Kafka's assignors are Java, and a few of their results depend on Java's
orders rather than on anything in the group:

* member ids are sorted with ``String.compareTo``, which compares UTF-16 code
  units. Python compares code points; the two differ only for strings with
  characters above U+FFFF, but an id is an arbitrary string, so
  `java_string_key` sorts the way Java does.
* in three places the sticky assignor visits members or partitions in the
  iteration order of a ``java.util.HashMap`` / ``HashSet``: which of several
  members that each own too many partitions keeps the larger quota, which
  of two equally old previous owners is remembered, and which partition of a
  reverse move is moved back. That order is bucket order, the bucket being
  ``(h ^ (h >>> 16)) & (capacity - 1)`` of the key's ``hashCode()``, then
  insertion order inside a bucket. `hashmap_order` and `HashSetOrder`
  replay it, so a plan is the one Kafka would compute for the same group.
  The alternative, visiting members sorted by id, is just as valid an
  assignment but differs from Kafka's (Kafka's own tests pin the hash order:
  e.g. "consumer2" is visited before "consumer1").

`java_string_hash` is also the coordinators' partition rule (offsets.partition_for).

Not reproduced: the order inside a bucket that Java turned into a red-black
tree (nine or more colliding keys in a table of 64+ buckets), which puts the
tree's root first; a group would need nine member ids in one bucket.
"""

import sys
from operator import mul

__all__ = ["java_string_key", "java_string_hash", "topic_partition_hash", "hashmap_order",
           "HashSetOrder"]

_INT_MASK = 0xFFFFFFFF
_DEFAULT_CAPACITY = 16          # java.util.HashMap's default table size
_TREEIFY_THRESHOLD = 8          # a bin longer than this asks to become a tree...
_MIN_TREEIFY_CAPACITY = 64      # ...but a smaller table doubles instead


def java_string_key(text):
    """A sort key that orders strings as Java's String.compareTo does (by UTF-16 code unit)."""
    # Big-endian UTF-16 bytes compare lexicographically exactly as the code units do.
    return text.encode("utf-16-be", "surrogatepass")


_POWERS = [1]   # 31**k mod 2**32 for k = 0, 1, ...; grown on demand by _powers_of_31
_NATIVE_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def _powers_of_31(n):
    """[31**0, 31**1, ...] mod 2**32, at least n of them."""
    global _POWERS
    powers = _POWERS
    if len(powers) < n:
        # Built aside, then rebound in one step: a thread reading the old list meanwhile
        # never sees one half-grown.
        target = max(n, 2 * len(powers))   # doubling: a long id grows it a few times at most
        powers = list(powers)
        while len(powers) < target:
            powers.append(powers[-1] * 31 & _INT_MASK)
        _POWERS = powers
    return powers


def java_string_hash(text):
    """String.hashCode() as an unsigned 32-bit value: s[0]*31^(n-1) + ... + s[n-1] over
    the UTF-16 code units (a character above U+FFFF is two, its surrogates)."""
    if text.isascii():
        units = text.encode("ascii")[::-1]
    else:
        units = memoryview(text.encode(_NATIVE_UTF16, "surrogatepass")).cast("H")[::-1]
    # The sum as one dot product of the units, last first, with the powers (map stops at
    # the shorter), reduced mod 2**32 once: the loop runs in C rather than as Horner's rule
    # step by step in Python (a coordinator hashes every id it holds at a failover).
    return sum(map(mul, units, _powers_of_31(len(units)))) & _INT_MASK


def topic_partition_hash(tp):
    """org.apache.kafka.common.TopicPartition.hashCode() as an unsigned 32-bit value."""
    return (31 * (31 + tp.partition) + java_string_hash(tp.topic)) & _INT_MASK


def _spread(h):
    return h ^ (h >> 16)


def _grown_capacity(capacity, size, bin_length):
    """The table size after a put made `size` entries and a bin of `bin_length` (HashMap.putVal).

    At most two doublings per put, in Java's sequence: the long bin's, then the load factor's.
    """
    if bin_length > _TREEIFY_THRESHOLD and capacity < _MIN_TREEIFY_CAPACITY:
        capacity *= 2  # treeifyBin on a small table resizes instead
    if size > capacity * 3 // 4:  # load factor 0.75
        capacity *= 2
    return capacity


def _bin_lengths(hashes, capacity):
    lengths = {}
    for h in hashes:
        b = h & (capacity - 1)
        lengths[b] = lengths.get(b, 0) + 1
    return lengths


def hashmap_order(keys, hash_of):
    """`keys` in the order a HashMap filled with them (put in the given order) iterates them."""
    keys = list(keys)
    capacity = _DEFAULT_CAPACITY
    hashes = []
    lengths = {}
    for size, key in enumerate(keys, 1):
        h = _spread(hash_of(key))
        hashes.append(h)
        b = h & (capacity - 1)
        lengths[b] = lengths.get(b, 0) + 1
        grown = _grown_capacity(capacity, size, lengths[b])
        if grown != capacity:  # a resize splits every bin; recount
            capacity = grown
            lengths = _bin_lengths(hashes, capacity)
    mask = capacity - 1
    # A resize keeps the relative order of the entries that stay in one bin.
    return [keys[i] for i in sorted(range(len(keys)), key=lambda i: (hashes[i] & mask, i))]


class HashSetOrder:
    """A set that knows which element a java.util.HashSet of the same history iterates first.

    Elements are kept in insertion order (a re-added element goes last, as in
    a Java bin); the table grows as Java's does and never shrinks.
    """

    __slots__ = ("_elements", "_capacity", "_hash_of", "_lengths")

    def __init__(self, hash_of):
        self._elements = {}           # element -> spread hash, in insertion order
        self._capacity = _DEFAULT_CAPACITY
        self._hash_of = hash_of
        self._lengths = {}

    def add(self, element):
        if element in self._elements:
            return
        h = _spread(self._hash_of(element))
        self._elements[element] = h
        b = h & (self._capacity - 1)
        self._lengths[b] = self._lengths.get(b, 0) + 1
        grown = _grown_capacity(self._capacity, len(self._elements), self._lengths[b])
        if grown != self._capacity:
            self._capacity = grown
            self._lengths = _bin_lengths(self._elements.values(), grown)

    def remove(self, element):
        h = self._elements.pop(element)
        self._lengths[h & (self._capacity - 1)] -= 1

    def first(self):
        """The element Java's iterator().next() would return."""
        mask = self._capacity - 1
        best = None
        for element, h in self._elements.items():  # insertion order breaks ties in a bin
            if best is None or (h & mask) < best[0]:
                best = (h & mask, element)
        return best[1]

    def __len__(self):
        return len(self._elements)

    def __contains__(self, element):
        return element in self._elements
