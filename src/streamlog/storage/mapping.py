"""Read-only memory maps of a file that hold no file descriptor.

Python's mmap.mmap keeps a duplicate of the descriptor it maps for as long as
the map lives, and a fetch's zero-copy views keep their map alive after the
segment released its files: a consumer holding batches of a thousand
partitions would hold a thousand descriptors the bound on open files
(open_files.py) cannot see. A map made with libc's mmap(2) holds none (the
kernel keeps the file referenced by the mapping itself), so the views cost
address space only.

map_readonly(fd, size) returns a memoryview over such a map, unmapped when
the last view of it goes (cffi's ffi.gc). libc is reached through cffi's ABI
mode (no compiler needed, so the pure-Python install has it too); where that
fails, Python's mmap is used, descriptor and all.
"""
import mmap

try:
    import cffi

    _ffi = cffi.FFI()
    _ffi.cdef("""
        void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);
        int munmap(void *addr, size_t length);
    """)
    _libc = _ffi.dlopen(None)
    _MAP_FAILED = _ffi.cast("void *", -1)
except Exception:  # no libffi, no libc symbols: Python's mmap below
    _libc = None


def map_readonly(fd, size):
    """A read-only memoryview of the file's first `size` bytes (size > 0); OSError on failure."""
    if _libc is None:
        return memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ))
    address = _libc.mmap(_ffi.NULL, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address == _MAP_FAILED:
        err = _ffi.errno
        raise OSError(err, f"mmap of {size} bytes failed")
    owned = _ffi.gc(address, lambda a, size=size: _libc.munmap(a, size))
    # The buffer keeps `owned` alive, and every memoryview (and slice) keeps the buffer.
    return memoryview(_ffi.buffer(owned, size)).toreadonly()
