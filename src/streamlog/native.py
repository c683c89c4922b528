"""The one module that touches the compiled code: `streamlog._native` (cffi) and
`streamlog._per_record` (the CPython extension for per-record work).

It loads them (unless STREAMLOG_NO_NATIVE=1 asks for the pure-Python paths),
converts Python buffers to C pointers, and turns C return codes into typed
exceptions. Everything above it calls these functions, never `lib` directly,
so the Python fallbacks can share one interface with them.

AVAILABLE tells whether the native paths are in use; UNAVAILABLE_REASON says
why not.
"""
import marshal
import os
import threading

import numpy as np

from .errors import CorruptRecordError, StreamlogError, TimerClosedError

AVAILABLE = False
UNAVAILABLE_REASON = None
ffi = lib = _per_record = None

if os.environ.get("STREAMLOG_NO_NATIVE", "") not in ("", "0"):
    UNAVAILABLE_REASON = "disabled by STREAMLOG_NO_NATIVE"
else:
    try:
        from ._native import ffi, lib  # noqa: F811
        from . import _per_record  # noqa: F811

        AVAILABLE = True
    except ImportError as exc:  # an install without a compiler: Python paths still work
        UNAVAILABLE_REASON = f"streamlog._native could not be imported: {exc}"


def require():
    """Raise unless the native module is loaded (for callers with no Python fallback)."""
    if not AVAILABLE:
        raise StreamlogError(f"the native module is not available ({UNAVAILABLE_REASON}); "
                             "reinstall streamlog with a C compiler present")


# --- CRC32C --------------------------------------------------------------


def crc32c(data, crc=0):
    """CRC-32C of a bytes-like object, continuing from crc (0 to start)."""
    buf = ffi.from_buffer(data)
    return lib.sl_crc32c(crc, buf, len(buf))


def crc32c_table(data, crc=0):
    """CRC-32C through the native table path even where the CPU instruction exists."""
    buf = ffi.from_buffer(data)
    return lib.sl_crc32c_sw(crc, buf, len(buf))


def crc32c_hw_enabled():
    return bool(lib.sl_crc32c_hw_enabled())


# --- record codec --------------------------------------------------------

_DECODE_ERRORS = {
    -2: "record runs past the end of the batch",
    -3: "varint longer than its maximum size",
    -4: "record fields do not add up to the record length",
    -5: "negative length in a record",
    -6: "bytes left after the last record of the batch",
    -7: "invalid arguments",
}


def records_bound(n, keys_bytes, values_bytes, headers_bytes):
    return lib.sl_records_bound(n, keys_bytes, values_bytes, headers_bytes)


def _i32(arr):
    return ffi.NULL if arr is None else ffi.from_buffer("int32_t[]", arr)


def records_encode_into(out, out_pos, n, base_timestamp, timestamps, keys, key_lens, values,
                        value_lens, headers, header_lens):
    """Encode n records into the writable buffer `out` at out_pos; return bytes written.

    keys/values/headers are the non-null items back to back (bytes-like);
    *_lens are int32 buffers (array('i') or numpy) with -1 for null, or None
    (all null; for headers: none). timestamps: int64 buffer or None.
    """
    dst = ffi.from_buffer(out)
    cap = len(dst) - out_pos
    ts = ffi.NULL if timestamps is None else ffi.from_buffer("int64_t[]", timestamps)
    written = lib.sl_records_encode(
        dst + out_pos, cap, n, base_timestamp, ts,
        ffi.from_buffer(keys) if keys is not None else ffi.NULL, _i32(key_lens),
        ffi.from_buffer(values) if values is not None else ffi.NULL, _i32(value_lens),
        ffi.from_buffer(headers) if headers is not None else ffi.NULL, _i32(header_lens))
    if written < 0:
        # Inputs are built by the library itself, so this is a programming error.
        raise ValueError(f"sl_records_encode failed with code {written}")
    return written


def records_decode(buf, pos, length, n, path=None, file_position=None):
    """Decode n records from buf[pos:pos+length].

    Returns (offset_deltas, timestamp_deltas, key_pos, key_lens, value_pos,
    value_lens, header_pos, header_lens, header_counts) as numpy arrays, with
    positions relative to buf (not to pos). Raises CorruptRecordError.
    """
    ints = np.empty((8, n), dtype=np.int32)
    ts = np.empty(n, dtype=np.int64)
    src = ffi.from_buffer(buf)
    err_pos = ffi.new("size_t *")
    p = [ffi.from_buffer("int32_t[]", ints[i]) for i in range(8)]
    rc = lib.sl_records_decode(src + pos, length, n, p[0], ffi.from_buffer("int64_t[]", ts),
                               p[1], p[2], p[3], p[4], p[5], p[6], p[7], err_pos)
    if rc != 0:
        at = None if file_position is None else file_position + err_pos[0]
        raise CorruptRecordError(f"malformed record: {_DECODE_ERRORS.get(rc, rc)}", path, at)
    if pos:
        # Present positions relative to buf; null fields keep position 0 unused.
        ints[1] += pos
        ints[3] += pos
        ints[5] += pos
    return ints[0], ts, ints[1], ints[2], ints[3], ints[4], ints[5], ints[6], ints[7]


_local = threading.local()


def _scratch(size):
    """A per-thread buffer of at least `size` bytes for marshal streams.

    marshal.loads copies everything out, so the buffer is free again as soon
    as it returns; reusing it saves zero-filling and faulting in fresh memory
    for every batch (which cost as much as the decoding itself).
    """
    buf = getattr(_local, "buf", None)
    if buf is None or len(buf) < size:
        buf = _local.buf = bytearray(max(size, 1 << 16))
    return buf


def records_to_tuples(buf, pos, length, n, base_offset, base_timestamp, fixed_timestamp=None,
                      path=None, file_position=None, topic=None, partition=0, timestamp_type=0,
                      min_offset=None, record_type=None):
    """Decode n records of buf[pos:pos+length] into a list of tuples.

    Short form: (offset, timestamp, key, value). With `topic` (a str), the
    record form: record_type(topic, partition, offset, timestamp,
    timestamp_type, key, value, headers), headers a tuple of (str, bytes)
    pairs; record_type is a tuple subclass, or None for plain tuples.
    Records below min_offset are skipped. Returns (tuples,
    records_with_headers). One C call (native/py_per_record.c) makes every
    object, untracked by the cyclic GC. Raises CorruptRecordError as
    records_decode does.
    """
    view = memoryview(buf)[pos:pos + length] if pos or length != len(buf) else buf
    try:
        return _per_record.records_to_list(
            view, n, base_offset, base_timestamp, fixed_timestamp,
            -(2**63) if min_offset is None else min_offset, topic, partition, timestamp_type,
            record_type)
    except ValueError as exc:
        if len(exc.args) != 2:  # not a decode error: (code, position)
            raise
        code, at = exc.args
        where = None if file_position is None else file_position + at
        raise CorruptRecordError(f"malformed record: {_DECODE_ERRORS.get(code, code)}", path,
                                 where) from None


def slices_to_list(src, pos, lens):
    """[bytes or None, ...] of the (pos, len) slices of src, every object made in C.

    The slices are written in marshal's list-of-bytes format and read back
    with marshal.loads: one call instead of one Python-level slice per item.
    """
    n = len(lens)
    c_lens = ffi.from_buffer("int32_t[]", lens)
    cap = lib.sl_marshal_bound(c_lens, n)
    out = _scratch(cap)
    written = lib.sl_marshal_slices(ffi.from_buffer(src), ffi.from_buffer("int32_t[]", pos),
                                    c_lens, n, ffi.from_buffer(out), cap)
    if written < 0:
        raise ValueError(f"sl_marshal_slices failed with code {written}")
    return marshal.loads(memoryview(out)[:written])


def gather(src, pos, lens):
    """Copy the (pos, len) slices of src back to back: (uint8 array, int32 offsets[n+1])."""
    return gather_many([(src, pos, lens)])


def gather_many(pieces):
    """gather() over several (src, pos, lens) pieces into one buffer, in order.

    Columns of several batches become one column with one copy of each value
    (gathering per batch and concatenating copied everything twice).
    """
    n = sum(len(lens) for _, _, lens in pieces)
    total = sum(int(np.maximum(lens, 0).sum()) for _, _, lens in pieces)
    dst = np.empty(total, dtype=np.uint8)
    offsets = np.zeros(n + 1, dtype=np.int32)
    c_dst = ffi.from_buffer("uint8_t[]", dst)
    c_offsets = ffi.from_buffer("int32_t[]", offsets)
    base = at = 0
    for src, pos, lens in pieces:
        k = len(lens)
        written = lib.sl_gather(ffi.from_buffer(src), ffi.from_buffer("int32_t[]", pos),
                                ffi.from_buffer("int32_t[]", lens), k, c_dst + base,
                                c_offsets + at)
        if base:
            offsets[at:at + k + 1] += base  # sl_gather numbers each piece from 0
        base += written
        at += k
    return dst, offsets


# --- murmur2 (partitioner) ----------------------------------------------


def murmur2(data):
    """Kafka's signed 32-bit murmur2 of a bytes-like key."""
    if type(data) is bytes:  # cffi passes bytes as a pointer directly: half the cost
        return lib.sl_murmur2(data, len(data))
    buf = ffi.from_buffer(data)
    return lib.sl_murmur2(buf, len(buf))


# (key, partitions) -> the default partitioner's partition: the C function itself, for
# the producer's per-record path (a cffi crossing here cost ~280 ns a record, 18% of send()).
key_partition = None if _per_record is None else _per_record.key_partition


def murmur2_partitions(keys, lens, num_partitions):
    """int32 numpy array of the partition of each key (-1 for a null key, lens[i] < 0)."""
    n = len(lens)
    out = np.empty(n, dtype=np.int32)
    rc = lib.sl_murmur2_partitions(ffi.from_buffer(keys), ffi.from_buffer("int32_t[]", lens), n,
                                   num_partitions, ffi.from_buffer("int32_t[]", out))
    if rc != 0:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return out


# --- log cleaner (native/sl_cleaner.h) -------------------------------------
#
# The native paths hash keys with XXH3-128 as the Python map does: the function itself,
# which the xxhash package's extension exports, handed to the C code by address. Where it
# cannot be found the cleaner runs its Python paths (CLEANER_UNAVAILABLE_REASON says why).

CLEANER_AVAILABLE = False
CLEANER_UNAVAILABLE_REASON = UNAVAILABLE_REASON
_xxhash_handle = None


def _install_cleaner_hash():
    global CLEANER_AVAILABLE, CLEANER_UNAVAILABLE_REASON, _xxhash_handle
    try:
        import cffi
        import xxhash._xxhash as xxhash_extension
        hash_ffi = cffi.FFI()
        hash_ffi.cdef("typedef struct { uint64_t low64; uint64_t high64; } XXH128_hash_t;"
                      "XXH128_hash_t XXH3_128bits(const void *data, size_t len);")
        _xxhash_handle = hash_ffi.dlopen(xxhash_extension.__file__)
        address = int(hash_ffi.cast("uintptr_t", hash_ffi.addressof(_xxhash_handle,
                                                                    "XXH3_128bits")))
        lib.sl_cleaner_set_hash(address)
        CLEANER_AVAILABLE = bool(lib.sl_cleaner_has_hash())
    except (ImportError, OSError, AttributeError, cffi.FFIError) as exc:
        CLEANER_UNAVAILABLE_REASON = f"XXH3_128bits not found in the xxhash package: {exc}"


if AVAILABLE:
    _install_cleaner_hash()


class _MapView:
    """An OffsetMap's table as the C struct sees it (size and latest offset copied in
    before each call and back after it)."""

    __slots__ = ("struct", "_keep")

    def __init__(self, offset_map):
        self._keep = offset_map.table
        self.struct = ffi.new("sl_offset_map *", {
            "table": ffi.from_buffer("uint64_t[]", offset_map.table),
            "slots": offset_map.slots, "max_entries": offset_map.max_entries})


def _map_struct(offset_map):
    view = offset_map.native_view
    if view is None:
        view = offset_map.native_view = _MapView(offset_map)
    struct = view.struct
    struct.size = offset_map.size
    struct.latest_offset = offset_map.latest_offset
    return struct


def _cleaner_error(rc, path):
    if rc == -8:
        return MemoryError("the log cleaner could not allocate its working buffers")
    return CorruptRecordError(f"malformed record: {_DECODE_ERRORS.get(rc, rc)}", path)


def map_put_section(offset_map, buf, pos, length, n, base_offset, start_offset, path=None):
    """Put the keyed records of a records section into offset_map (sl_map_put_section);
    returns (records put, whether the map filled)."""
    struct = _map_struct(offset_map)
    put = ffi.new("int64_t *")
    full = ffi.new("int *")
    rc = lib.sl_map_put_section(struct, ffi.from_buffer(buf) + pos, length, n, base_offset,
                                start_offset, put, full)
    offset_map.size, offset_map.latest_offset = struct.size, struct.latest_offset
    if rc != 0:
        raise _cleaner_error(rc, path)
    return put[0], bool(full[0])


def map_get(offset_map, key):
    return lib.sl_map_get(_map_struct(offset_map), key, len(key))


def clean_section(offset_map, buf, pos, length, n, base_offset, base_timestamp, latest_offset,
                  keep_tombstones, horizon_base=None, path=None):
    """The records of a section the cleaner keeps (sl_clean_section): (bytes, kept, last
    offset delta, max timestamp, tombstones kept, keyless dropped, rebased). horizon_base:
    the delete horizon to give the batch if it keeps a tombstone (None: none to give)."""
    struct = _map_struct(offset_map)
    keep = ffi.new("uint8_t[]", max(n, 1))
    cap = length + 16 * n
    # A reused buffer: a fresh one would be zeroed for every batch, and most of what a pass
    # reads is dropped (the result is copied out at its real length).
    out = _scratch(cap)
    res = ffi.new("sl_clean_result *")
    rc = lib.sl_clean_section(struct, ffi.from_buffer(buf) + pos, length, n, base_offset,
                              base_timestamp, latest_offset, int(keep_tombstones),
                              int(horizon_base is not None),
                              0 if horizon_base is None else horizon_base, keep,
                              ffi.from_buffer(out), len(out), res)
    if rc != 0:
        raise _cleaner_error(rc, path)
    return (bytes(memoryview(out)[:res.out_len]), res.kept, res.last_offset_delta,
            res.max_timestamp, res.tombstones_kept, res.keyless, bool(res.rebased))


# --- timing wheel --------------------------------------------------------
# (bindings for native/sl_timer.h are added below by the timing-wheel module)
# Imported here rather than at the top so this section stays self-contained.

_WHEEL_ERRORS = {
    -1: (ValueError, "invalid argument for the timing wheel (tick_ms in [1, 2^32], "
                     "wheel_size in [2, 65536], start_ms >= 0, counts >= 0)"),
    -2: (MemoryError, "out of memory while growing the timing wheel"),
    -3: (MemoryError, "the timing wheel cannot hold more than 2^32 - 2 entries; "
                      "cancel or fire tasks before adding more"),
}
# Fired tasks are fetched in batches of this many per FFI crossing: large
# enough to amortise the call, small enough to stay in L1/L2.
_WHEEL_BATCH = 4096


def _int64_array(values, name):
    arr = np.ascontiguousarray(values, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional")
    return arr


def _out_int64(arr, name):
    if arr is None:
        return ffi.NULL, None
    if not (isinstance(arr, np.ndarray) and arr.dtype == np.int64 and arr.ndim == 1
            and arr.flags.c_contiguous and arr.flags.writeable):
        raise ValueError(f"{name} must be a writable contiguous 1-D numpy int64 array")
    return ffi.from_buffer("int64_t[]", arr), len(arr)


class TaskIdWheel:
    """One native hierarchical timing wheel (native/timing_wheel.c) of int64 task ids.

    The wheel never reads a clock: the caller moves it with advance(now_ms)
    and gets back the ids (and stale handles) of the tasks that came due.
    Deadlines are rounded up to tick_ms, so a task is handed out by the first
    advance whose now_ms reaches its deadline rounded up: never early, at most
    tick_ms - 1 ms late. Not thread-safe: one thread at a time (SystemTimer in
    streamlog.timer adds the lock and the thread). The C memory is freed by
    close() or when the object is collected.

    Bulk callers pass numpy int64 arrays (add_many, cancel_many, advance into
    caller buffers) and pay one FFI crossing per batch.
    """

    __slots__ = ("_ptr", "_buf", "tick_ms", "wheel_size", "__weakref__")

    batch = _WHEEL_BATCH  # advance_handles returns at most this many per call

    def __init__(self, tick_ms=1, wheel_size=20, start_ms=0):
        require()
        out = ffi.new("sl_wheel **")
        rc = lib.sl_wheel_create(out, tick_ms, wheel_size, start_ms)
        if rc:
            exc, message = _WHEEL_ERRORS.get(rc, (StreamlogError, f"error {rc}"))
            raise exc(f"{message}: got tick_ms={tick_ms}, wheel_size={wheel_size}, "
                      f"start_ms={start_ms}")
        self._ptr = ffi.gc(out[0], lib.sl_wheel_destroy)
        self._buf = ffi.new("int64_t[]", _WHEEL_BATCH)
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size

    def _fail(self, rc):
        if self._ptr == ffi.NULL:
            raise TimerClosedError("the timing wheel is closed; create a new one")
        exc, message = _WHEEL_ERRORS.get(rc, (StreamlogError, f"timing wheel error {rc}"))
        raise exc(message)

    def add(self, delay_ms, task_id=0):
        """Add a task due delay_ms after the wheel's clock; return its handle (> 0)."""
        handle = lib.sl_wheel_add(self._ptr, delay_ms, task_id)
        if handle < 0:
            self._fail(handle)
        return handle

    def add_at(self, deadline_ms, task_id=0):
        """Add a task due at deadline_ms on the wheel's clock; return its handle."""
        handle = lib.sl_wheel_add_at(self._ptr, deadline_ms, task_id)
        if handle < 0:
            self._fail(handle)
        return handle

    def add_many(self, delays_ms, task_ids=None):
        """Add len(delays_ms) tasks in one call (all or nothing); return their handles.

        task_ids: int64 ids, or None for ids 0..n-1. Returns a numpy int64 array.
        """
        delays = _int64_array(delays_ms, "delays_ms")
        ids = ffi.NULL
        if task_ids is not None:
            ids_arr = _int64_array(task_ids, "task_ids")
            if len(ids_arr) != len(delays):
                raise ValueError("delays_ms and task_ids differ in length")
            ids = ffi.from_buffer("int64_t[]", ids_arr)
        handles = np.empty(len(delays), dtype=np.int64)
        rc = lib.sl_wheel_add_many(self._ptr, ffi.from_buffer("int64_t[]", delays), ids,
                                   len(delays), ffi.from_buffer("int64_t[]", handles))
        if rc < 0:
            self._fail(rc)
        return handles

    def cancel(self, handle):
        """Cancel in O(1); True if the task was pending. Stale handles give False."""
        return lib.sl_wheel_cancel(self._ptr, handle) == 1

    def cancel_many(self, handles):
        """Cancel every handle of an int64 array; return how many were pending."""
        arr = _int64_array(handles, "handles")
        rc = lib.sl_wheel_cancel_many(self._ptr, ffi.from_buffer("int64_t[]", arr), len(arr))
        if rc < 0:
            self._fail(rc)
        return rc

    def advance(self, now_ms, out_ids=None, out_handles=None):
        """Move the clock to now_ms and take due tasks off into the caller's buffers.

        out_ids / out_handles: writable numpy int64 arrays (either may be None,
        not both). At most min(len) tasks are taken, in expiration order; call
        again with the same now_ms while the return value equals that length.
        Returns the number taken.
        """
        ids, ids_len = _out_int64(out_ids, "out_ids")
        handles, handles_len = _out_int64(out_handles, "out_handles")
        if ids_len is None and handles_len is None:
            raise ValueError("advance needs out_ids or out_handles")
        cap = min(n for n in (ids_len, handles_len) if n is not None)
        n = lib.sl_wheel_advance(self._ptr, now_ms, ids, handles, cap)
        if n < 0:
            self._fail(n)
        return n

    def advance_handles(self, now_ms):
        """Move the clock to now_ms; return (as a list) the handles of up to 4096 due tasks."""
        n = lib.sl_wheel_advance(self._ptr, now_ms, ffi.NULL, self._buf, _WHEEL_BATCH)
        if n <= 0:
            if n < 0:
                self._fail(n)
            return []
        return ffi.unpack(self._buf, n)

    def next_expiration(self):
        """Earliest time advance has work (<= the earliest pending expiration), or None."""
        t = lib.sl_wheel_next_expiration(self._ptr)
        return None if t < 0 else t

    def expiration(self, handle):
        """The pending task's deadline rounded up to tick_ms, or None if not pending."""
        t = lib.sl_wheel_expiration(self._ptr, handle)
        return None if t < 0 else t

    def __len__(self):
        return lib.sl_wheel_size(self._ptr)

    @property
    def now_ms(self):
        """The wheel's clock: the latest now_ms given to advance (or start_ms)."""
        return lib.sl_wheel_now(self._ptr)

    @property
    def current_ms(self):
        """The first wheel's current time: now_ms rounded down to tick_ms."""
        return lib.sl_wheel_current_ms(self._ptr)

    @property
    def levels(self):
        """Number of wheels: 1 + the overflow wheels created so far."""
        return lib.sl_wheel_levels(self._ptr)

    @property
    def closed(self):
        return self._ptr == ffi.NULL

    def check(self):
        """0 when every invariant of timing_wheel.c holds, else the first broken one's number."""
        return lib.sl_wheel_check(self._ptr)

    def close(self):
        """Free the C wheel now (pending tasks are dropped). Idempotent."""
        if self._ptr != ffi.NULL:
            ffi.release(self._ptr)
            self._ptr = ffi.NULL
