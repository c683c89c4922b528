"""The bound on open files: which segments hold descriptors and maps, and how many.

Each log root owns one OpenSegments (log_directory.LogDirectory makes it,
sized by the database's `max.open.files`); every LogSegment of the root's
partitions goes through it. It does not close or open files itself: the
segment does, when asked. A database of any number of partitions and
segments then runs under any descriptor limit, as LevelDB's table cache
does.

How a segment is used (LogSegment.pinned):
  pin    -> the segment's files are opened if they were not (this may push
            a long-unused unpinned segment out: its files are released, its
            state kept), and it cannot be pushed out;
  unpin  -> it can be again.
So a reader or appender never sees a file released under it, and a segment
that is not in use costs no descriptor and no map once pushed out.

Accounting: an open segment holds one descriptor, its log's, and up to
three maps (the log's read map and one per index), none of which holds a
descriptor (mapping.py). A read-only one holds one descriptor and no index
map (its indexes are snapshots in memory). Where maps must come from
Python's mmap, which keeps a duplicate of the descriptor it maps, a writable
segment counts three (LogSegment.file_cost). The bound counts descriptors;
the maps of open segments follow from it (three per segment at most), plus
the log maps that fetched views keep alive until they are dropped. Pinned
segments may exceed it for as long as they are pinned: a bound never fails
an operation.

Which segment goes (Redis's approximated LRU): the least recently used of
_SAMPLES segments drawn at random, or of all of them while they are few.
Rejected: a strict LRU. Its worst case is the common one here: a producer
writing round-robin over a few more partitions than the bound finds, at every
append, that the segment it needs is the one the last append pushed out (the
oldest is always the next due), so every append closes one file and opens
another, which added 7-8 us to a 14 us append. With the victim drawn at random
among the older ones, 10,002 partitions written round-robin under a bound of
10,000 evicted 21-29 times a round instead of 10,002; a segment in steady use
stays open all the same (it is the oldest of a draw almost never).

Thread-safety: every method holds `_lock`; a segment's files are opened
and released under it, so the bound and the members never disagree.
"""
import errno
import os
import random
import resource
import threading

from ..errors import KafkaStorageError
from .mapping import MAPS_HOLD_NO_DESCRIPTOR

UNBOUNDED = -1
# Descriptors the default bound leaves to everything else in the process (sockets, the
# user's files, Python's own): half the soft limit, capped where the maps the segments
# may hold (three per open segment, see max_maps) stay well under Linux's vm.max_map_count
# (65,530), with room for the process's own and for views still alive.
_DEFAULT_CAP = 16_000
# An open segment maps its log (for reads) and each of its two indexes at most.
MAPS_PER_SEGMENT = 3
_DEFAULT_FLOOR = 32
# Segments drawn when one must go; up to twice as many open ones are all looked at.
_SAMPLES = 8

# What to do about running out, in every error that says so (here and the broker's).
OUT_OF_FILES_FIX = ("lower the database's max.open.files (what its segments may hold), or "
                    "raise the limit (ulimit -n)")

_OUT_OF = {errno.EMFILE: "the process's open file limit (RLIMIT_NOFILE)",
           errno.ENFILE: "the system's open file limit",
           errno.ENOMEM: "memory for mappings (vm.max_map_count or RAM)"}


def max_open_files_problem(value):
    """Why value cannot be max.open.files, or None (the rule, for configs and OpenSegments)."""
    if value != UNBOUNDED and value < 1:
        return f"max.open.files must be -1 (unbounded) or at least 1, not {value}"
    return None


def default_max_open_files():
    """Half of the soft RLIMIT_NOFILE, between 32 and 16,000."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _DEFAULT_CAP
    return max(_DEFAULT_FLOOR, min(soft // 2, _DEFAULT_CAP))


def held_descriptors():
    """How many descriptors this process holds now (Linux: /proc/self/fd), or None."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def storage_error(exc, what):
    """A KafkaStorageError for an OSError met while `what`; running out of descriptors or
    maps names the limit and the fix instead of a bare errno."""
    limit = _OUT_OF.get(exc.errno)
    if limit is None:
        return KafkaStorageError(f"{what}: {exc}")
    held = held_descriptors()   # None when even listing them needs a descriptor
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    holding = f"it holds {held} descriptors, " if held is not None else ""
    return KafkaStorageError(
        f"{what}: {exc}. The process ran out of {limit} ({holding}soft limit {soft}): "
        f"{OUT_OF_FILES_FIX}")


class OpenSegments:
    """The segments whose files are open, holding at most `max_open_files` descriptors
    among the unpinned ones (UNBOUNDED: no limit); an approximated LRU."""

    def __init__(self, max_open_files=UNBOUNDED, descriptors_elsewhere=0):
        """descriptors_elsewhere: what the owner holds for as long as the bound lives (the
        database's LOCK file), counted against the bound with the segments'."""
        problem = max_open_files_problem(max_open_files)
        if problem:
            raise ValueError(problem)
        self.max_open_files = max_open_files
        # The maps the open segments may hold: one descriptor counted per segment (or three
        # where each index map holds one, see LogSegment.file_cost), three maps each.
        self.max_maps = UNBOUNDED if max_open_files == UNBOUNDED else \
            max_open_files * (MAPS_PER_SEGMENT if MAPS_HOLD_NO_DESCRIPTOR else 1)
        self._lock = threading.Lock()
        # segment -> [descriptors it holds, its last use, its slot in _members]
        self._open = {}
        self._members = []      # the open segments, to draw from
        self._uses = 0          # the clock of last uses: one tick a pin
        self._random = None     # made at the first draw (seeding costs 3 us; segments of
                                # an unbounded log each make one of these)
        self.held = descriptors_elsewhere  # + the descriptors of the segments in _open
        self.evictions = 0

    def pin(self, segment):
        """Open segment's files if they are not, and keep them open until unpin."""
        with self._lock:
            segment._pins += 1
            self._uses += 1
            entry = self._open.get(segment)
            if entry is not None:
                entry[1] = self._uses
                return
            try:
                # Room first: opening at the limit is what fails with EMFILE.
                self._make_room_locked(segment.file_cost)
                segment._open_files()
            except BaseException:
                segment._pins -= 1
                raise
            self._open[segment] = [segment.file_cost, self._uses, len(self._members)]
            self._members.append(segment)
            self.held += segment.file_cost

    def unpin(self, segment):
        with self._lock:
            segment._pins -= 1

    def forget(self, segment):
        """segment closed its files itself (close, delete): stop counting them."""
        with self._lock:
            self._remove_locked(segment)

    def _remove_locked(self, segment):
        entry = self._open.pop(segment, None)
        if entry is None:
            return
        last = self._members.pop()
        if last is not segment:   # the last member takes the leaver's slot
            slot = entry[2]
            self._members[slot] = last
            self._open[last][2] = slot
        self.held -= entry[0]

    def _victim_locked(self):
        """The least recently used unpinned segment of a random draw (or of all while they
        are few), or None when every one is pinned."""
        members = self._members
        if len(members) <= 2 * _SAMPLES:
            candidates = members
        else:
            if self._random is None:
                self._random = random.Random(0)   # the same draws every run: tests, benches
            draw = self._random.randrange
            candidates = [members[draw(len(members))] for _ in range(_SAMPLES)]
        victim = self._least_recent_unpinned(candidates)
        if victim is None and candidates is not members:
            victim = self._least_recent_unpinned(members)   # the draw found only pinned ones
        return victim

    def _least_recent_unpinned(self, segments):
        victim, oldest = None, None
        for segment in segments:
            if segment._pins:
                continue   # in use
            use = self._open[segment][1]
            if oldest is None or use < oldest:
                victim, oldest = segment, use
        return victim

    def _make_room_locked(self, needed):
        if self.max_open_files == UNBOUNDED:
            return
        while self.held + needed > self.max_open_files:
            victim = self._victim_locked()
            if victim is None:
                return   # all pinned: over the bound until they are unpinned
            self._remove_locked(victim)
            self.evictions += 1
            victim._release_files()

    def stats(self):
        with self._lock:
            return {"segments_open": len(self._open), "descriptors": self.held,
                    "max_open_files": self.max_open_files, "max_maps": self.max_maps,
                    "evictions": self.evictions}
