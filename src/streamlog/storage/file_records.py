"""The `.log` file of a segment: append whole batches, read byte ranges, walk batches.

Invariants:
  1. `size` is raised only after the bytes below it are written, so a reader
     that bounds itself by `size` never sees a batch being written.
  2. In the writer process `size` always ends on a batch boundary: an append
     that fails half way is cut back before the error is raised.
  3. The writer process serves fetches of 256 KiB or more from a read-only
     memory map of the file (view(): no copy; mapping.py: no descriptor
     held), remapped when the file has grown past it, and smaller ones by
     copy. Its files are truncated only by recovery at open, before any
     reader exists, so a mapped page never vanishes under a reader (a lazy
     segment's first-use check rebuilds indexes and never cuts the log), or by
     cut_to() (a replica's divergent tail), which replaces a file that was ever
     mapped by a copy of the part kept instead of shortening it.
     A read-only process may
     see a file that another writer's recovery truncates, where touching a
     mapped page past the new end is a SIGBUS: it reads with pread, which just
     returns short. Scans (headers, batches) use pread in both.

Descriptor: open() takes it and release() gives it back, keeping `size`;
the segment does both for the root's bound on open files (open_files.py),
never while the file is in use.

Thread-safety: append / truncate_to / close are serialised by the segment's
owner; reads need no lock.
"""
import contextlib
import errno
import os

from ..errors import CorruptRecordError, KafkaStorageError
from .durable import fsync_dir
from .files import TMP_SUFFIX
from .mapping import map_readonly
from .open_files import storage_error
from .record_batch import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, RecordBatch, iter_batches

_LENGTH_FIELD_END = LOG_OVERHEAD
_SCAN_CHUNK_BYTES = 1 << 20
_HEADER_CHUNK_BYTES = 64 << 10
# pwritev takes at most IOV_MAX (1024 on Linux) buffers per call.
_IOV_MAX = 1024
# view() maps the file anew only once it has grown this much past the mapping.
_REMAP_GROWTH = 1 << 20
# view() copies reads smaller than this instead of mapping (see there).
_MIN_VIEW_BYTES = 256 << 10


def _identity(st):
    """(device, inode) of a stat result: which file, whatever its name."""
    return st.st_dev, st.st_ino


class IncompleteBatch(Exception):
    """The bytes end inside a batch: a torn write (writer) or a batch still being written."""

    def __init__(self, position, available, needed):
        super().__init__(f"incomplete batch at byte {position}: {available} of {needed} bytes")
        self.position = position
        self.available = available
        self.needed = needed


class FileRecords:
    def __init__(self, path, readonly=False, lazy=False):
        """lazy: only stat the file for its size (a writer's file may not exist yet: open()
        creates it); open() takes the descriptor."""
        self.path = path
        self.readonly = readonly
        self._fd = None
        self._closed = False
        self._map = None  # read-only mapping for view(); replaced as the file grows
        self._mapped = False  # a view may be alive (invariant 3: no ftruncate under it)
        # The size at this object's last fdatasync (None: none yet, or the file was cut
        # since): a flush with nothing appended since has nothing to wait for.
        self._synced_size = None
        # Read-only: (device, inode) of the file the first open() found. A compacted log's
        # cleaner puts a new file under the same name, so a descriptor given back and taken
        # again (open_files.py) must be of the file this view sized and scanned, or fail.
        self.identity = None
        if lazy:
            try:
                self.size = os.stat(path).st_size
            except FileNotFoundError as exc:
                if readonly:
                    raise storage_error(exc, f"cannot open log file {path}") from exc
                self.size = 0  # open() creates it
            except OSError as exc:
                raise storage_error(exc, f"cannot open log file {path}") from exc
        else:
            self.open()
            try:
                self.size = os.fstat(self._fd).st_size
            except OSError as exc:
                self.release()
                raise storage_error(exc, f"cannot open log file {path}") from exc

    def open(self):
        """Take a descriptor for the file unless one is held (see release)."""
        if self._fd is not None:
            return
        if self._closed:
            raise KafkaStorageError(f"{self.path} was closed")
        flags = os.O_RDONLY if self.readonly else os.O_RDWR | os.O_CREAT
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            raise storage_error(exc, f"cannot open log file {self.path}") from exc
        if self.readonly:
            self._bind(fd)
        self._fd = fd

    def _bind(self, fd):
        """Read-only: tie this object to the file fd is of (see identity), or refuse fd."""
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise storage_error(exc, f"cannot open log file {self.path}") from exc
        found = _identity(st)
        if self.identity is None:
            self.identity = found
            self.size = st.st_size   # of this file: a lazy object's stat may be of another
        elif found != self.identity:
            os.close(fd)
            # Not found, as far as this view goes: its file left the name (read-only views
            # look again on a vanished file, PartitionLog.read).
            gone = FileNotFoundError(errno.ENOENT, "the file was replaced", self.path)
            raise KafkaStorageError(f"log file {self.path} was replaced since this view "
                                    f"opened it") from gone

    def replaced(self):
        """Read-only: whether the name no longer holds the file this object is bound to
        (another file took it, or none); False before the first open."""
        if self.identity is None:
            return False
        try:
            return _identity(os.stat(self.path)) != self.identity
        except FileNotFoundError:
            return True

    def release(self):
        """Give back the descriptor and the map; `size` stays, and open() takes them again.
        Views handed out keep their mapping alive."""
        self._map = None
        fd, self._fd = self._fd, None
        if fd is not None:
            # Forgotten before closed: a racing read then fails on None, never on a number
            # the kernel may already have given to another file.
            os.close(fd)

    # --- writing -----------------------------------------------------------

    def append(self, pieces):
        """Write the byte pieces back to back at the end; return the start position."""
        position = self.size
        total = 0
        try:
            for i in range(0, len(pieces), _IOV_MAX):
                chunk = pieces[i:i + _IOV_MAX]
                want = sum(len(p) for p in chunk)
                done = os.pwritev(self._fd, chunk, position + total)
                while done < want:  # short write: finish it piece by piece
                    flat = b"".join(chunk)
                    done += os.pwrite(self._fd, memoryview(flat)[done:], position + total + done)
                total += want
        except OSError as exc:
            # Invariant 2: cut the partial append back before reporting it.
            try:
                os.ftruncate(self._fd, position)
            except OSError:
                pass
            hint = " (disk full)" if exc.errno == errno.ENOSPC else ""
            raise KafkaStorageError(f"cannot append to {self.path}{hint}: {exc}") from exc
        self.size = position + total
        return position

    def flush(self):
        """fdatasync the file, unless nothing was appended since this object last did (a
        roll's snapshot and every flush sync each segment above the recovery point, which
        only a flush moves: without this, a log never flushed would sync them all again at
        every roll)."""
        size = self.size   # before: an append during the fdatasync may not be covered
        if size == self._synced_size:
            return
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise KafkaStorageError(f"cannot fsync {self.path}: {exc}") from exc
        self._synced_size = size

    def truncate_to(self, size):
        """Cut the file to `size` bytes; returns how many bytes were removed.

        Only for recovery, before any view of the file is handed out (invariant 3).
        """
        if size > self.size or size < 0:
            raise KafkaStorageError(f"cannot truncate {self.path} to {size} (size {self.size})")
        removed = self.size - size
        if removed:
            self._map = None
            os.ftruncate(self._fd, size)
            self.size = size
            self._synced_size = None   # the cut itself is not on the disk yet
        return removed

    def cut_to(self, size):
        """Cut the file to `size` bytes while readers may hold views of it (a replica's
        divergent tail); returns how many bytes were removed. A file never mapped is
        shortened in place; one that was is replaced by a copy of its first `size` bytes,
        so a view of the old file stays readable (invariant 3). A crash leaves the old file
        or the new one whole (the copy is synced before it takes the name)."""
        if not self._mapped:
            self.open()
            return self.truncate_to(size)
        if size > self.size or size < 0:
            raise KafkaStorageError(f"cannot truncate {self.path} to {size} (size {self.size})")
        self.open()
        tmp = self.path + TMP_SUFFIX
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                copied = 0
                while copied < size:
                    chunk = os.pread(self._fd, min(_SCAN_CHUNK_BYTES, size - copied), copied)
                    if not chunk:
                        raise OSError(errno.EIO, f"{self.path} ended at byte {copied}")
                    os.pwrite(fd, chunk, copied)
                    copied += len(chunk)
                os.fsync(fd)
                os.replace(tmp, self.path)
                fsync_dir(os.path.dirname(self.path))   # the shorter file is the one a crash keeps
            except BaseException:
                os.close(fd)
                raise
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise storage_error(exc, f"cannot truncate {self.path}") from exc
        old, self._fd = self._fd, fd
        self._map = None
        self._mapped = False
        os.close(old)
        removed, self.size = self.size - size, size
        self._synced_size = size   # the copy was fsynced before it took the name
        return removed

    def refresh_size(self):
        """Re-read the file length (a read-only process following a live writer)."""
        self.size = os.fstat(self._fd).st_size
        return self.size

    def close(self):
        # Views handed out keep the mapping alive (it outlives the descriptor);
        # dropping our reference lets the last view unmap it.
        self.release()
        self._closed = True

    def rename(self, new_path):
        os.replace(self.path, new_path)
        self.path = new_path

    def delete(self):
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    @property
    def closed(self):
        return self._closed

    # --- reading -----------------------------------------------------------

    def read(self, position, size, buffer=None):
        """Up to `size` bytes from `position`, never past `self.size`.

        Returns bytes, or with `buffer` (a bytearray, grown if needed) a
        memoryview of the bytes read into it: a reader that reuses one buffer
        does not fault in fresh memory for every read.
        """
        size = min(size, self.size - position)
        if size <= 0:
            return b""
        try:
            if buffer is None:
                return os.pread(self._fd, size, position)
            if len(buffer) < size:
                buffer.extend(bytes(size - len(buffer)))
            view = memoryview(buffer)[:size]
            got = os.preadv(self._fd, [view], position)
            return view[:got]
        except OSError as exc:
            raise KafkaStorageError(f"cannot read {self.path}: {exc}") from exc
        except TypeError:  # fd is None: closed under us
            raise KafkaStorageError(f"{self.path} was closed") from None

    def view(self, position, size):
        """Up to `size` bytes from `position` as a zero-copy view of the mapped file.

        Writer process only (invariant 3). The view stays valid after the file
        is closed or deleted.
        """
        size = min(size, self.size - position)
        if size <= 0:
            return b""
        if size < _MIN_VIEW_BYTES:
            # A view keeps its whole map alive, after the segment released its files too: a
            # consumer buffering small fetches of thousands of partitions would hold a map of
            # each. Small reads copy; a view's map costs at most one per _MIN_VIEW_BYTES held.
            return self.read(position, size)
        mapped = self._map
        if mapped is None or len(mapped) < position + size:
            if mapped is not None and self.size - len(mapped) < _REMAP_GROWTH:
                # The file grew a little since it was mapped (a reader at the tail): a copy of
                # the new bytes costs less than a new mapping (~90 us on the project machine).
                return self.read(position, size)
            try:
                mapped = self._map = map_readonly(self._fd, self.size)
                self._mapped = True
            except OSError as exc:
                raise storage_error(exc, f"cannot map {self.path}") from exc
            except (ValueError, TypeError) as exc:
                raise KafkaStorageError(f"cannot map {self.path}: {exc}") from exc
        return mapped[position:position + size]

    def headers(self, start=0, end=None):
        """Yield a header-only RecordBatch for each batch in [start, end).

        Only the 61-byte headers are guaranteed to be in each view's buffer.
        Raises IncompleteBatch when the range ends inside a batch and
        CorruptRecordError on an impossible batch length.
        """
        end = self.size if end is None else min(end, self.size)
        pos = start
        buf, buf_start = b"", start
        while pos < end:
            off = pos - buf_start
            if len(buf) - off < RECORD_BATCH_OVERHEAD:
                buf, buf_start, off = self.read(pos, min(_HEADER_CHUNK_BYTES, end - pos)), pos, 0
                if len(buf) < RECORD_BATCH_OVERHEAD:
                    raise IncompleteBatch(pos, len(buf), RECORD_BATCH_OVERHEAD)
            batch = RecordBatch(buf, off, self.path, pos)
            batch.check_header()
            if pos + batch.size_in_bytes > end:
                raise IncompleteBatch(pos, end - pos, batch.size_in_bytes)
            yield batch
            pos += batch.size_in_bytes

    def batches(self, start=0, end=None, buffer=None):
        """Yield each whole batch in [start, end) (its bytes in the view's buffer).

        buffer: a bytearray reused for every chunk read (see read()); a batch yielded is
        then valid only until the next one is asked for. Raises IncompleteBatch at a
        partial tail, as headers() does.
        """
        end = self.size if end is None else min(end, self.size)
        if buffer is not None and len(buffer) < _SCAN_CHUNK_BYTES:
            # Grown once, before any batch is a view into it: a bytearray with live views
            # cannot be resized.
            buffer.extend(bytes(_SCAN_CHUNK_BYTES - len(buffer)))
        pos = start
        while pos < end:
            buf = self.read(pos, min(_SCAN_CHUNK_BYTES, end - pos), buffer)
            consumed = 0
            for batch in iter_batches(buf, 0, len(buf), self.path, pos):
                yield batch
                consumed = batch.position + batch.size_in_bytes
            if consumed == 0:
                # The first batch is larger than the chunk, or the data ends inside it.
                if len(buf) < _LENGTH_FIELD_END:
                    raise IncompleteBatch(pos, len(buf), RECORD_BATCH_OVERHEAD)
                needed = int.from_bytes(buf[8:12], "big", signed=True) + LOG_OVERHEAD
                if needed < RECORD_BATCH_OVERHEAD:
                    raise CorruptRecordError(f"record batch size {needed} is below the "
                                             f"{RECORD_BATCH_OVERHEAD}-byte header",
                                             self.path, pos)
                if pos + needed > end:
                    raise IncompleteBatch(pos, end - pos, needed)
                buf = self.read(pos, needed)
                batch = RecordBatch(buf, 0, self.path, pos)
                yield batch
                consumed = needed
            pos += consumed
