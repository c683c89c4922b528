"""What the offset and time indexes share: a reserved (allocated) file of fixed-size
big-endian entries, memory-mapped and viewed as a numpy structured array.

Invariants:
  1. Entries are strictly increasing in their key; lookups binary-search the
     first `entries` rows with numpy.searchsorted.
  2. The index holds at most max_entries (segment.index.bytes / entry size);
     the file holds only what is reserved: a new file starts at one page and
     doubles (up to the maximum) when an append needs room, and every byte of
     it is allocated with posix_fallocate before the map may touch it. A page
     of a sparse file touched through a map on a full file system kills the
     process with SIGBUS; an allocation refused up front is a KafkaStorageError
     ("disk full") before any log byte is written (LogSegment.append reserves
     first). The index of a segment made just now has no file until its first
     entry needs room, or until the segment is sealed (start_new): then it is
     made with exactly its entries, so a roll creates one file, not three. An
     existing file is reserved the same way when it is opened for writing,
     and is assumed to be exactly full of valid entries, because the log trims
     every index to its used size on roll and on close. After an unclean stop
     the loader rebuilds indexes instead of trusting them.
  3. The writer maps the file read-write and keeps no descriptor (nor does
     the map, see mapping.SharedMap; resizing opens the file for the time it
     takes), and maps it only while the index is used (release, then open on
     next use).
     A read-only process never maps an index: the writer may trim or rebuild
     the file under it, and touching a mapped page past the new end of file
     kills the process with SIGBUS.
     It loads a snapshot of the valid prefix instead (reading stops at the
     first entry that breaks the ordering: the zero-filled reserved tail).
  4. A stale or short snapshot is harmless: a lookup then returns an earlier
     position and the caller scans forward from there.

Thread-safety: lookups may run on any thread; mutation (append, truncate,
resize, close) is serialised by the owning segment's append lock. The mapping
is swapped under `_lock` so a lookup never sees a closed map.
"""
import errno
import os
import threading

import numpy as np

from ..errors import KafkaStorageError
from .durable import read_whole
from .mapping import SharedMap
from .open_files import storage_error

_SNAPSHOT_CHUNK_ENTRIES = 8192
# A new index file reserves one page; each growth doubles it. Reserving the whole
# segment.index.bytes (10 MiB) up front would cost 20 MiB of disk per partition.
_FIRST_RESERVATION_BYTES = 4096
# The first file of an index start_new() made: a file left at its name by an earlier segment
# of the same base (long deleted) holds nothing of this one.
_CREATE_NEW = os.O_RDWR | os.O_CREAT | os.O_TRUNC


class SparseIndex:
    """Base class; subclasses set DTYPE and define the ordering key."""

    DTYPE = None  # numpy structured dtype with big-endian fields, packed
    KEY = None    # name of the field entries are ordered by
    _EMPTY = None  # one read-only empty array per subclass (see _empty)

    @classmethod
    def _empty(cls):
        """The array of an index with nothing mapped: shared, since a database of many
        segments makes two indexes for each and maps few of them."""
        empty = cls.__dict__.get("_EMPTY")
        if empty is None:
            empty = np.zeros(0, dtype=cls.DTYPE)
            empty.flags.writeable = False
            cls._EMPTY = empty
        return empty

    def __init__(self, path, base_offset, max_index_size, readonly=False, lazy=False):
        """lazy: open nothing yet; open() does, on the segment's first use of the index."""
        self.path = path
        self.base_offset = base_offset
        self.readonly = readonly
        self.entry_size = self.DTYPE.itemsize
        self.max_index_size = max_index_size
        self._lock = threading.Lock()
        self._mm = None
        self._open = False    # writer: mapped (a map of length 0 is no map at all)
        self._arr = self._empty()
        self.entries = 0
        self.max_entries = 0
        self.length = 0
        self.created = False
        self._loaded = False  # whether entries / length are known (first open done)
        # False only for an index start_new() made: its file is created when the first
        # entry needs room, or empty when the segment is sealed (trim_to_valid_size).
        self._on_disk = True
        self._dirty = False   # entries written since the last flush
        self.capacity = 0
        # The entries as load_unmapped read them, while the file is not mapped and they have
        # not changed: checks and tail lookups use them instead of mapping the file.
        self._read = None
        if not lazy:
            self.open()

    def open(self):
        """Map the file (writer) or load its snapshot (read-only) unless already done.
        Every use of the entries does this first, so a released index maps itself again
        when it is next needed (a segment's appends that add no entry never map it)."""
        if not self._open:
            with self._lock:
                if not self._open:
                    self._open_locked()

    def _open_locked(self):
        """open() under _lock. The writer's first open reads the file's length (assumed full
        of entries, see invariant 2); a later one, after release(), maps the length it
        already knows (the reserved tail included)."""
        if self.readonly:
            if not self._loaded:
                self._arr = self._load_snapshot()
                self.max_entries = self.entries
                self._loaded = True
            self._open = True
            return
        if not self._on_disk:
            self._open = True   # nothing to map: the entries are none, the file is not made
            return
        fd = None
        try:
            if not self._loaded:
                # A missing file of a non-empty segment is a reason to rebuild (see the loader).
                self.created = not os.path.exists(self.path)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            length = self.length
            if not self._loaded:
                length = os.fstat(fd).st_size
                if self.created:
                    length = min(self._round(_FIRST_RESERVATION_BYTES),
                                 self._round(self.max_index_size))
                self._reserve(fd, length)
            self._map(fd, length)
        except OSError as exc:
            raise storage_error(exc, f"cannot open index file {self.path}") from exc
        finally:
            if fd is not None:
                os.close(fd)  # the map holds the file (mmap keeps a descriptor of its own)
        self._open = True
        if not self._loaded:
            self.entries = 0 if self.created else length // self.entry_size
            self.max_entries = max(self._round(self.max_index_size) // self.entry_size,
                                   self.entries)
            self._loaded = True

    def load_unmapped(self):
        """Writer, first use: learn the entries by reading the file, and leave it unmapped
        as release() would. True when the entries are known (read now or before), False
        when the file is missing (open() then creates it and says so) or this is read-only
        (open() loads the snapshot).

        The open of a log after a clean stop checks its active segment's indexes and reads
        their last entries: one read each, where mapping would reserve, map and later unmap
        thousands of files the log may never append to."""
        if self.readonly or self._loaded:
            return self._loaded and not self.readonly
        with self._lock:
            try:
                raw = read_whole(self.path)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise storage_error(exc, f"cannot read index file {self.path}") from exc
            whole = len(raw) // self.entry_size
            self._read = np.frombuffer(raw, dtype=self.DTYPE, count=whole)
            self.length = len(raw)
            self.capacity = self.entries = whole
            self.max_entries = max(self._round(self.max_index_size) // self.entry_size, whole)
            self._loaded = True
        return True

    def start_new(self):
        """Writer: the index of a segment made just now, with no entries and no file yet.
        A roll then creates one file (the log) instead of three, and a segment sealed
        before its first entry never reserves a page it trims back."""
        with self._lock:
            self._loaded = True
            self._on_disk = False
            self.entries = self.length = self.capacity = 0
            self.max_entries = self._round(self.max_index_size) // self.entry_size

    def forget_snapshot(self):
        """Read-only: load the file again at the next use (the writer adds entries to its
        active segment's index, and the final time-index entry when it seals one)."""
        if self.readonly:
            with self._lock:
                self._loaded = False
                self._open = False

    def release(self):
        """Give back the map, keeping what is known of the entries and the reserved length;
        the next use maps them again. The writer's dirty pages stay in the page cache (flush
        syncs them all the same). A read-only snapshot is memory: it stays."""
        if self.readonly:
            return
        with self._lock:
            self._unmap()
            self._open = False

    # --- mapping ---------------------------------------------------------

    def _round(self, size):
        return max(size, 0) // self.entry_size * self.entry_size

    def _reserve(self, fd, length):
        """Allocate the file's first `length` bytes for real (extending it), or raise."""
        if length <= 0:
            return
        try:
            os.posix_fallocate(fd, 0, length)
        except OSError as exc:
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
            raise KafkaStorageError(
                f"cannot reserve {length} bytes for index file {self.path}"
                f"{' (disk full)' if full else ''}: {exc}") from exc

    def _map(self, fd, length):
        self._read = None   # the map is the entries from now on
        self.length = length
        self.capacity = length // self.entry_size  # entries the map has room for
        if length == 0:
            self._mm = None
            self._arr = self._empty()
        else:
            self._mm = SharedMap(fd, length)
            # A torn file may end inside an entry: view the whole entries only (the sanity
            # check then reports the odd length and the loader rebuilds the index).
            self._arr = np.frombuffer(self._mm.view, dtype=self.DTYPE, count=self.capacity)

    def _unmap(self):
        self._arr = self._empty()
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def _load_snapshot(self):
        """Read the valid prefix of the file without mapping it (invariant 3)."""
        try:
            with open(self.path, "rb") as f:
                chunks = []
                last_key = None
                while True:
                    raw = f.read(_SNAPSHOT_CHUNK_ENTRIES * self.entry_size)
                    whole = len(raw) // self.entry_size
                    if whole == 0:
                        break
                    arr = np.frombuffer(raw, dtype=self.DTYPE, count=whole)
                    valid = self._valid_prefix(arr, last_key)
                    chunks.append(arr[:valid])
                    if valid < whole or whole < _SNAPSHOT_CHUNK_ENTRIES:
                        break
                    last_key = arr[self.KEY][valid - 1]
        except FileNotFoundError:
            chunks = []
        arr = np.concatenate(chunks) if chunks else np.zeros(0, dtype=self.DTYPE)
        self.entries = len(arr)
        self.length = len(arr) * self.entry_size
        return arr

    def _valid_prefix(self, arr, last_key):
        """How many leading entries keep the key strictly increasing (and are not zero fill)."""
        keys = arr[self.KEY].astype(np.int64)
        if len(keys) == 0:
            return 0
        ok = np.empty(len(keys), dtype=bool)
        ok[0] = True if last_key is None else keys[0] > last_key
        ok[1:] = keys[1:] > keys[:-1]
        ok &= self._entry_plausible(arr)
        bad = np.flatnonzero(~ok)
        return int(bad[0]) if len(bad) else len(keys)

    def _entry_plausible(self, arr):
        """Subclass hook: a boolean mask of entries that can be real (not zero fill)."""
        return np.ones(len(arr), dtype=bool)

    # --- state -------------------------------------------------------------

    @property
    def size_in_bytes(self):
        return self.entries * self.entry_size

    def is_full(self):
        return self.entries >= self.max_entries

    def _used(self):
        """The valid entries as a numpy view (a snapshot of the count at call time)."""
        read = self._read
        if read is not None:
            return read[:self.entries]
        self.open()
        return self._arr[:self.entries]

    def _append_row(self, row, exact=False):
        if self.readonly:
            raise KafkaStorageError(f"index {self.path} is open read-only")
        if self.entries >= self.max_entries:
            raise KafkaStorageError(
                f"index {self.path} is full ({self.entries} entries); the segment should "
                "have rolled")
        if self.entries >= self.capacity:
            self.reserve(1, exact)
        self.open()
        self._arr[self.entries] = row
        self.entries += 1
        self._dirty = True

    def reserve(self, more_entries, exact=False):
        """Make room for `more_entries` appends (as far as max_entries allows) before
        anything that depends on them is written; KafkaStorageError if the disk refuses.
        exact: reserve just that (the last entries of a segment being sealed), not a page."""
        if self.readonly:
            return
        if not self._loaded:
            self.open()
        wanted = min(self.entries + more_entries, self.max_entries)
        if wanted <= self.capacity:
            return
        length = wanted * self.entry_size if exact else \
            max(self.length * 2, _FIRST_RESERVATION_BYTES, wanted * self.entry_size)
        self._remap(min(self._round(length),
                        self.max_entries * self.entry_size))

    def truncate_to_entries(self, n):
        """Keep the first n entries; zero the rest so no stale entry survives a crash."""
        if not self._loaded:
            self.open()   # the entries on file count: a first open after this would read them
        n = max(0, min(n, self.entries))
        if n < self.entries:
            self.open()
            self._arr[n:self.entries] = 0
            self._dirty = True
        self.entries = n

    def reset(self):
        """Drop every entry and take back the configured maximum (before a rebuild)."""
        self.truncate_to_entries(0)
        self.resize(self.max_index_size)

    def resize(self, new_size):
        """Set the maximum size (rounded to entries, never below the entries held); the
        file shrinks to it at once if longer and otherwise grows as appends need room."""
        if self.readonly:
            return
        if not self._loaded:
            self.open()
        self.max_index_size = new_size
        self.max_entries = max(self._round(new_size) // self.entry_size, self.entries)
        if self.length > self.max_entries * self.entry_size:
            self._remap(self.max_entries * self.entry_size)

    def trim_to_valid_size(self):
        """Cut the file to the entries held (on roll and close); the maximum is kept. An
        index start_new() made gets its (empty) file now: a sealed segment has both."""
        if self.readonly:
            return
        if not self._on_disk:
            self._create_empty()
            return
        if self.length == self.entries * self.entry_size:
            return
        if self._open:
            self._remap(self.entries * self.entry_size)
            return
        try:
            os.truncate(self.path, self.entries * self.entry_size)
        except OSError as exc:
            raise storage_error(exc, f"cannot trim index {self.path}") from exc
        self.length = self.entries * self.entry_size
        self.capacity = self.entries

    def _remap(self, new_length):
        """Give the file new_length bytes, all reserved, and map them; keeps the entries.

        No msync before the unmap: dirty pages of a shared map stay in the page cache and
        reach the file like any write (durability is the flusher's fsync, not this).
        """
        with self._lock:
            try:
                fd = os.open(self.path, os.O_RDWR if self._on_disk else _CREATE_NEW, 0o644)
            except OSError as exc:
                raise storage_error(exc, f"cannot resize index {self.path}") from exc
            self._on_disk = True
            try:
                self._unmap()
                try:
                    if new_length < self.length:
                        os.ftruncate(fd, new_length)
                    else:
                        self._reserve(fd, new_length)
                except OSError as exc:
                    self._map(fd, self.length)
                    raise storage_error(exc, f"cannot resize index {self.path}") from exc
                except KafkaStorageError:
                    self._map(fd, self.length)
                    raise
                self._map(fd, new_length)
                self._open = True
            finally:
                os.close(fd)

    def _create_empty(self):
        """The file of an index with no entries that start_new() made (see trim_to_valid_size)."""
        try:
            os.close(os.open(self.path, _CREATE_NEW, 0o644))
        except OSError as exc:
            raise storage_error(exc, f"cannot create index {self.path}") from exc
        self._on_disk = True

    def flush(self):
        """Make the entries durable: msync of the map (it covers pages an earlier map of
        the file dirtied too), or an fsync of the file when it is not mapped now. Nothing
        when no entry changed since the last flush: an msync costs a system call even
        then, and a log that flushes often (acks="all", small transactions) pays it each
        time."""
        if self._mm is not None and self._dirty:
            self._mm.flush()
        elif self._dirty and not self.readonly:
            try:
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise storage_error(exc, f"cannot fsync index {self.path}") from exc
        self._dirty = False

    def close(self, trim=True):
        """Trim (unless told not to), flush and release the file."""
        if not self._loaded or self.readonly:
            self._open = False
            return
        if trim:
            self.trim_to_valid_size()
        self.flush()
        with self._lock:
            self._unmap()
            self._open = False

    def delete(self):
        self.close(trim=False)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def rename(self, new_path):
        os.replace(self.path, new_path)
        self.path = new_path

    # --- search ------------------------------------------------------------

    def _largest_lower_bound(self, key, strict=False):
        """Slot of the largest entry with KEY <= key (< key if strict), or -1."""
        with self._lock:
            if not self._open:
                self._open_locked()
            keys = self._arr[self.KEY][:self.entries]
            slot = int(np.searchsorted(keys, key, side="left" if strict else "right")) - 1
            del keys  # drop the view of the map before the lock is released
        return slot

    def _last_row(self):
        """The last entry as a tuple of Python ints, or None when there is none. A lazy
        index knows its entry count only once the file has been looked at: this looks."""
        if not self._loaded:
            self.open()
        return self.entry(self.entries - 1) if self.entries else None

    def entry(self, slot):
        """Entry `slot` as a tuple of Python ints."""
        read = self._read
        if read is not None:
            return tuple(int(v) for v in read[slot])
        with self._lock:
            if not self._open:
                self._open_locked()
            return tuple(int(self._arr[name][slot]) for name in self.DTYPE.names)
