"""Memory maps of a file that hold no file descriptor: read-only ones for the log's
zero-copy reads, read-write shared ones for the indexes.

Python's mmap.mmap keeps a duplicate of the descriptor it maps for as long as
the map lives, and a fetch's zero-copy views keep their map alive after the
segment released its files: a consumer holding batches of a thousand
partitions would hold a thousand descriptors the bound on open files
(open_files.py) cannot see. A map made with libc's mmap(2) holds none (the
kernel keeps the file referenced by the mapping itself), so the views cost
address space only.

map_readonly(fd, size) returns a memoryview over such a map, unmapped when
the last view of it goes (cffi's ffi.gc); SharedMap(fd, size) is the same
for writing, with flush(). An index's map then costs no descriptor
either, so a writable segment holds one (its log's) whatever it maps
(MAPS_HOLD_NO_DESCRIPTOR). libc is reached through cffi's ABI mode (no
compiler needed, so the pure-Python install has it too); where that fails,
Python's mmap is used, descriptor and all, and MAPS_HOLD_NO_DESCRIPTOR is
False.
"""
import mmap
import sys

try:
    import cffi

    _ffi = cffi.FFI()
    _ffi.cdef("""
        void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);
        int munmap(void *addr, size_t length);
        int msync(void *addr, size_t length, int flags);
    """)
    _libc = _ffi.dlopen(None)
    _MAP_FAILED = _ffi.cast("void *", -1)
except Exception:  # no libffi, no libc symbols: Python's mmap below
    _libc = None

MAPS_HOLD_NO_DESCRIPTOR = _libc is not None
_MS_SYNC = 0x10 if sys.platform == "darwin" else 4  # <sys/mman.h>


def map_readonly(fd, size):
    """A read-only memoryview of the file's first `size` bytes (size > 0); OSError on failure."""
    if _libc is None:
        return memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ))
    return memoryview(_ffi.buffer(_libc_map(fd, size, mmap.PROT_READ), size)).toreadonly()


def _libc_map(fd, size, prot):
    """A MAP_SHARED map as cffi data that unmaps itself when the last reference goes."""
    address = _libc.mmap(_ffi.NULL, size, prot, mmap.MAP_SHARED, fd, 0)
    if address == _MAP_FAILED:
        err = _ffi.errno
        raise OSError(err, f"mmap of {size} bytes failed")
    # ffi.buffer keeps the owner alive, and every memoryview (and slice) keeps the buffer.
    return _ffi.gc(address, lambda a, size=size: _libc.munmap(a, size))


class SharedMap:
    """A read-write MAP_SHARED map of a file's first `size` bytes (size > 0).

    `view` is a writable memoryview of it. Dropping the SharedMap and every view
    unmaps it; close() only lets go of this object's own references (the views
    handed out stay valid until they go too)."""

    def __init__(self, fd, size):
        self.size = size
        if _libc is None:
            self._mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
            self._address = None
            self.view = memoryview(self._mm)
        else:
            self._mm = None
            self._address = _libc_map(fd, size, mmap.PROT_READ | mmap.PROT_WRITE)
            self.view = memoryview(_ffi.buffer(self._address, size))

    def flush(self):
        """msync: the map's dirty pages reach the file's storage; OSError on failure."""
        if self._mm is not None:
            self._mm.flush()
        elif _libc.msync(self._address, self.size, _MS_SYNC) != 0:
            err = _ffi.errno
            raise OSError(err, f"msync of {self.size} bytes failed")

    def close(self):
        self.view = self._mm = self._address = None
