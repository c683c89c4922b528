"""Kafka RecordBatch v2 (magic 2): header layout, validation, building and decoding.

Byte layout (big-endian; docs/FORMAT.md has the full table, checked against
the constants here by a test):

    0  baseOffset int64        | 27 baseTimestamp int64  | 53 baseSequence int32
    8  batchLength int32       | 35 maxTimestamp int64   | 57 recordsCount int32
    12 partitionLeaderEpoch i32| 43 producerId int64     | 61 records...
    16 magic int8 (2)          | 51 producerEpoch int16  |
    17 crc uint32 (CRC-32C of bytes 21..end)             |
    21 attributes int16        | 23 lastOffsetDelta int32|

Invariants:
  1. A batch's size is 12 + batchLength and at least 61 bytes.
  2. The CRC covers attributes to the end, so baseOffset and
     partitionLeaderEpoch can be patched (offset assignment on append)
     without recomputing it.
  3. Records are decoded only from a batch whose CRC was checked; corrupt
     bytes raise CorruptRecordError with file and position and are never
     returned as records.
  4. Record timestamps are baseTimestamp + delta, except under
     LogAppendTime, where every record's timestamp is the batch's
     maxTimestamp.
"""
import struct
from array import array

import numpy as np

from ..errors import CorruptRecordError, InvalidRecordError
from . import codec, compression
from .records_py import decode_headers
from .varint import MalformedRecord, decode_varint, decode_varlong, encode_varint

HEADER = struct.Struct(">qiibIhiqqqhii")

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

LOG_OVERHEAD = 12  # baseOffset + batchLength: the part not counted by batchLength
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET
MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
TIMESTAMP_TYPE_NAMES = {CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime"}

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# Control record key: version int16 + type int16; end-transaction marker value:
# version int16 + coordinatorEpoch int32.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")

_INT32_MAX = 2**31 - 1
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


class RecordBatch:
    """A view of one batch inside a buffer (bytes, bytearray or memoryview).

    Header fields are parsed once at construction; records are decoded only
    on demand by records(). `path` and `file_position` (the batch's byte
    position in that file) travel with the view so every error names them.
    """

    __slots__ = ("buf", "position", "base_offset", "batch_length", "partition_leader_epoch",
                 "magic", "crc", "attributes", "last_offset_delta", "base_timestamp",
                 "max_timestamp", "producer_id", "producer_epoch", "base_sequence",
                 "records_count", "path", "file_position")

    def __init__(self, buf, position=0, path=None, file_position=None):
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
         self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp,
         self.producer_id, self.producer_epoch, self.base_sequence,
         self.records_count) = HEADER.unpack_from(buf, position)
        self.buf = buf
        self.position = position
        self.path = path
        self.file_position = file_position

    # --- derived header values ---------------------------------------------

    @property
    def size_in_bytes(self):
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self):
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self):
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self):
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self):
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self):
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def delete_horizon_ms(self):
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def last_sequence(self):
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & _INT32_MAX

    def view(self):
        """memoryview of the whole batch's bytes."""
        return memoryview(self.buf)[self.position:self.position + self.size_in_bytes]

    def __repr__(self):
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.records_count}, size={self.size_in_bytes})")

    # --- validation ------------------------------------------------------

    def _where(self, delta=0):
        return None if self.file_position is None else self.file_position + delta

    def check_header(self):
        """Raise CorruptRecordError unless the header is self-consistent (no CRC check)."""
        if self.magic != MAGIC:
            raise CorruptRecordError(f"record batch has magic {self.magic}, expected {MAGIC}",
                                     self.path, self._where(MAGIC_OFFSET))
        if self.size_in_bytes < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch size {self.size_in_bytes} is below the "
                f"{RECORD_BATCH_OVERHEAD}-byte header", self.path, self._where(LENGTH_OFFSET))
        if self.last_offset_delta < 0 or self.records_count < 0:
            raise CorruptRecordError("record batch has a negative record count or offset delta",
                                     self.path, self._where())
        if self.records_count > self.last_offset_delta + 1:
            raise CorruptRecordError(
                f"record batch claims {self.records_count} records in "
                f"{self.last_offset_delta + 1} offsets", self.path, self._where())

    def compute_checksum(self):
        start = self.position + ATTRIBUTES_OFFSET
        return codec.crc32c(memoryview(self.buf)[start:self.position + self.size_in_bytes])

    def is_valid(self):
        try:
            self.check_header()
        except CorruptRecordError:
            return False
        return self.crc == self.compute_checksum()

    def ensure_valid(self):
        """Raise CorruptRecordError (naming file and position) unless header and CRC check out."""
        self.check_header()
        actual = self.compute_checksum()
        if actual != self.crc:
            raise CorruptRecordError(
                f"record batch at offset {self.base_offset} fails its CRC (stored "
                f"{self.crc:#010x}, computed {actual:#010x})", self.path, self._where())

    # --- records -------------------------------------------------------------

    def _records_section(self):
        """(buffer, position, length, file position or None) of the decompressed records."""
        start = self.position + RECORDS_OFFSET
        end = self.position + self.size_in_bytes
        cid = self.compression
        if cid == compression.NONE:
            return self.buf, start, end - start, self._where(RECORDS_OFFSET)
        try:
            buf = compression.decompress(cid, memoryview(self.buf)[start:end])
        except compression.CodecError as exc:
            raise CorruptRecordError(
                f"record batch at offset {self.base_offset} does not decompress "
                f"({compression.NAMES.get(cid, cid)}: {exc})", self.path, self._where()) from None
        return buf, 0, len(buf), None

    def records(self, verify=True):
        """Decode every record of the batch into a Records view (CRC checked first)."""
        if verify:
            self.ensure_valid()
        buf, pos, length, file_pos = self._records_section()
        cols = codec.records_decode(buf, pos, length, self.records_count, self.path, file_pos)
        return Records(self, buf, cols)

    def tuples(self, verify=True, topic=None, partition=0, min_offset=None, record_type=None):
        """([(offset, timestamp, key, value), ...], records_with_headers), CRC checked first.

        The fast path to per-record Python objects: one native pass builds
        them all (see streamlog.native.records_to_tuples). With `topic`, the
        tuples are whole records, of record_type (a tuple subclass) when
        given: (topic, partition, offset, timestamp, timestamp_type, key,
        value, headers), headers a tuple of (str, bytes) pairs. Records below
        min_offset are left out.
        """
        if verify:
            self.ensure_valid()
        buf, pos, length, file_pos = self._records_section()
        fixed = self.max_timestamp if self.timestamp_type == LOG_APPEND_TIME else None
        return codec.records_to_tuples(buf, pos, length, self.records_count, self.base_offset,
                                       self.base_timestamp, fixed, self.path, file_pos, topic,
                                       partition, self.timestamp_type, min_offset, record_type)

    def control_type(self, verify=True):
        """CONTROL_ABORT / CONTROL_COMMIT / other type id of a control batch's record;
        -1 for a control batch the log cleaner emptied (its transaction is gone).
        verify=False: the caller checked the CRC already (an append's validation)."""
        if self.records_count == 0:
            return -1
        if verify:
            self.ensure_valid()
        return self._control_type(self._control_record(with_value=False)[0])

    def end_txn_marker(self, verify=True):
        """(control type, coordinator epoch) of a control batch, in one read of its record:
        the epoch a COMMIT/ABORT marker's value carries (the producer state fences a marker
        of an older coordinator with it), -1 for other control types; (-1, -1) for a control
        batch the log cleaner emptied."""
        if self.records_count == 0:
            return -1, -1
        if verify:
            self.ensure_valid()
        key, value = self._control_record(with_value=True)
        control_type = self._control_type(key)
        if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
            return control_type, -1
        if value is None or len(value) < _END_TXN_VALUE.size:
            raise CorruptRecordError("transaction marker without a valid value", self.path,
                                     self._where())
        return control_type, _END_TXN_VALUE.unpack_from(value)[1]

    def coordinator_epoch(self):
        """The coordinator epoch an end-transaction marker's value carries."""
        return self.end_txn_marker()[1]

    def _control_type(self, key):
        if key is None or len(key) < 4:
            raise CorruptRecordError("control record without a valid key", self.path,
                                     self._where())
        return _CONTROL_KEY.unpack_from(key)[1]

    def _control_record(self, with_value):
        """(key, value) of a control batch's first record (value None unless with_value)."""
        if self.compression != compression.NONE:
            records = self.records(verify=False)
            return records.key(0), records.values()[0] if with_value else None
        # Markers are written uncompressed (Kafka's too): read the first record in place
        # instead of decoding the batch, which costs ten times more (the producer state
        # reads it at every marker's append).
        buf, pos = self.buf, self.position + RECORDS_OFFSET
        end = self.position + self.size_in_bytes
        try:
            _, pos = decode_varint(buf, pos, end)       # the record's length
            pos += 1                                    # its attributes
            _, pos = decode_varlong(buf, pos, end)      # timestamp delta
            _, pos = decode_varint(buf, pos, end)       # offset delta
            key, pos = self._field(buf, pos, end, "key")
            value = None
            if with_value:
                value, pos = self._field(buf, pos, end, "value")
        except MalformedRecord as exc:
            raise CorruptRecordError(f"control record: {exc}", self.path, self._where()) from None
        return key, value

    def _field(self, buf, pos, end, name):
        """A record's length-prefixed key or value at pos: (bytes or None, the next pos)."""
        length, pos = decode_varint(buf, pos, end)
        if length < 0:
            return None, pos
        if pos + length > end:
            raise CorruptRecordError(f"control record {name} runs past the end of the batch",
                                     self.path, self._where())
        return bytes(buf[pos:pos + length]), pos + length


class Records:
    """The decoded records of one batch, held as columns over the batch buffer.

    offsets / timestamps are numpy int64 arrays; keys, values and headers are
    materialised into Python objects only when asked for, so columnar readers
    never pay for per-record objects.
    """

    __slots__ = ("batch", "buf", "offset_deltas", "timestamp_deltas", "key_pos", "key_lens",
                 "value_pos", "value_lens", "header_pos", "header_lens", "header_counts")

    def __init__(self, batch, buf, cols):
        self.batch = batch
        self.buf = buf
        (self.offset_deltas, self.timestamp_deltas, self.key_pos, self.key_lens, self.value_pos,
         self.value_lens, self.header_pos, self.header_lens, self.header_counts) = cols

    def __len__(self):
        return len(self.offset_deltas)

    @property
    def offsets(self):
        return self.offset_deltas.astype(np.int64) + self.batch.base_offset

    @property
    def timestamps(self):
        if self.batch.timestamp_type == LOG_APPEND_TIME:
            return np.full(len(self), self.batch.max_timestamp, dtype=np.int64)
        return self.timestamp_deltas + self.batch.base_timestamp

    def keys(self):
        return codec.slices_to_list(self.buf, self.key_pos, self.key_lens)

    def values(self):
        return codec.slices_to_list(self.buf, self.value_pos, self.value_lens)

    def key(self, i):
        n = int(self.key_lens[i])
        return None if n < 0 else bytes(memoryview(self.buf)[self.key_pos[i]:self.key_pos[i] + n])

    def headers(self):
        """Per record a list of (key str, value bytes or None); [] for no headers."""
        out = []
        for p, n, count in zip(self.header_pos.tolist(), self.header_lens.tolist(),
                               self.header_counts.tolist(), strict=True):
            out.append(decode_headers(self.buf, p, p + n) if count else [])
        return out

    def gather_keys(self):
        """(uint8 data, int32 offsets[n+1]) of the keys back to back, Arrow layout."""
        return codec.gather(self.buf, self.key_pos, self.key_lens)

    def gather_values(self):
        return codec.gather(self.buf, self.value_pos, self.value_lens)

    def __iter__(self):
        """(offset, timestamp, key, value, headers) per record."""
        return zip(self.offsets.tolist(), self.timestamps.tolist(), self.keys(), self.values(),
                   self.headers(), strict=True)


# --- headers -------------------------------------------------------------


def encode_headers(headers):
    """The headers section of one record: headerCount varint + entries."""
    out = bytearray(encode_varint(len(headers)))
    for key, value in headers:
        if isinstance(key, str):
            key = key.encode("utf-8")
        elif not isinstance(key, (bytes, bytearray)):
            raise InvalidRecordError(f"header key must be str, not {type(key).__name__}")
        out += encode_varint(len(key))
        out += key
        if value is None:
            out += encode_varint(-1)
        else:
            if isinstance(value, str):
                value = value.encode("utf-8")
            out += encode_varint(len(value))
            out += value
    return bytes(out)


# --- building ------------------------------------------------------------


def _column(items):
    """(blob, int32 lengths with -1 for None) of a column of bytes-like items.

    The common all-bytes case costs one join and one C-level map (np.fromiter
    is about twice as fast as array('i', ...) here); None items take the
    slower path.
    """
    try:
        blob = b"".join(items)
    except TypeError:
        lens = np.fromiter((-1 if x is None else len(x) for x in items), np.int32, len(items))
        return b"".join([x for x in items if x is not None]), lens
    return blob, np.fromiter(map(len, items), np.int32, len(items))


def build_batch(values, keys=None, headers=None, timestamps=None, *, timestamp=None,
                base_offset=0, compression_type=compression.NONE, compression_level=None,
                timestamp_type=CREATE_TIME,
                producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH,
                base_sequence=NO_SEQUENCE, is_transactional=False, is_control=False,
                partition_leader_epoch=NO_PARTITION_LEADER_EPOCH, buffer=None):
    """Encode one batch and return it as a bytearray (so offsets can be patched in place).

    values: list of bytes-like or None (tombstones). keys: same, or None for
    all-null keys. headers: per record a list of (str, bytes|None), or None.
    timestamps: per-record ints, or None with `timestamp` used for every record.
    compression_level: the codec's level (None: Kafka's default for it).

    buffer: a bytearray to encode into instead of a new one (grown if too
    small); the result is then a memoryview of its prefix, valid until the
    buffer is reused. Reusing one buffer per writer thread, as Kafka's producer
    pools its batch buffers, avoids touching fresh memory for every batch,
    which costs more than the encoding itself for large batches.
    """
    n = len(values)
    if n == 0:
        raise InvalidRecordError("a record batch needs at least one record")
    if n > _INT32_MAX:
        raise InvalidRecordError("too many records for one batch")
    if timestamps is None:
        if timestamp is None:
            raise InvalidRecordError("build_batch needs timestamps or a timestamp")
        base_ts = max_ts = timestamp
        ts_arr = None
    else:
        if len(timestamps) != n:
            raise InvalidRecordError("timestamps and values differ in length")
        base_ts = timestamps[0]
        max_ts = max(timestamps)  # on the caller's sequence: no int objects made from an array
        ts_arr = array("q", timestamps)
    value_blob, value_lens = _column(values)
    if keys is None:
        key_blob = key_lens = None
    else:
        if len(keys) != n:
            raise InvalidRecordError("keys and values differ in length")
        key_blob, key_lens = _column(keys)
    if headers is None or not any(headers):
        header_blob = header_lens = None
    else:
        if len(headers) != n:
            raise InvalidRecordError("headers and values differ in length")
        sections = [encode_headers(h) if h else b"\x00" for h in headers]
        header_blob, header_lens = b"".join(sections), array("i", map(len, sections))

    bound = codec.records_bound(n, len(key_blob) if key_blob is not None else 0, len(value_blob),
                                len(header_blob) if header_blob is not None else 0)
    if buffer is None:
        out = bytearray(RECORDS_OFFSET + bound)
    else:
        if len(buffer) < RECORDS_OFFSET + bound:
            buffer.extend(bytes(RECORDS_OFFSET + bound - len(buffer)))
        out = buffer
    written = codec.records_encode_into(out, RECORDS_OFFSET, n, base_ts, ts_arr, key_blob,
                                        key_lens, value_blob, value_lens, header_blob,
                                        header_lens)
    size = RECORDS_OFFSET + written
    if compression_type != compression.NONE:
        compressed = compression.compress(compression_type,
                                          memoryview(out)[RECORDS_OFFSET:size], compression_level)
        size = RECORDS_OFFSET + len(compressed)
        if len(out) < size:
            out.extend(bytes(size - len(out)))
        out[RECORDS_OFFSET:size] = compressed
    if buffer is None:
        del out[size:]
    attributes = compression_type & COMPRESSION_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    seal(out, 0, base_offset=base_offset, attributes=attributes, last_offset_delta=n - 1,
         base_timestamp=base_ts, max_timestamp=max_ts, producer_id=producer_id,
         producer_epoch=producer_epoch, base_sequence=base_sequence, records_count=n,
         partition_leader_epoch=partition_leader_epoch, size=size)
    return out if buffer is None else memoryview(out)[:size]


def seal(buf, position, *, base_offset, attributes, last_offset_delta, base_timestamp,
         max_timestamp, producer_id, producer_epoch, base_sequence, records_count,
         partition_leader_epoch=NO_PARTITION_LEADER_EPOCH, size=None):
    """Write the 61-byte header of the batch at buf[position:] and its CRC.

    The batch's records must already follow the header; `size` (default: to
    the end of buf) is the whole batch size.
    """
    if size is None:
        size = len(buf) - position
    HEADER.pack_into(buf, position, base_offset, size - LOG_OVERHEAD, partition_leader_epoch,
                     MAGIC, 0, attributes, last_offset_delta, base_timestamp, max_timestamp,
                     producer_id, producer_epoch, base_sequence, records_count)
    _recrc(buf, position, size)


def build_control_batch(control_type, *, producer_id, producer_epoch, coordinator_epoch,
                        timestamp, base_offset=0):
    """An end-transaction marker: one control record, transactional, uncompressed."""
    return build_batch([_END_TXN_VALUE.pack(0, coordinator_epoch)],
                       keys=[_CONTROL_KEY.pack(0, control_type)], timestamp=timestamp,
                       base_offset=base_offset, producer_id=producer_id,
                       producer_epoch=producer_epoch, is_transactional=True, is_control=True)


def recompressed(batch, cid, records=None, level=None):
    """A copy of `batch` (a RecordBatch) with its records section in codec `cid`: the
    same records, header fields and flags, a new length and CRC (Kafka's LogValidator
    recompressing a produced batch to its topic's compression.type). The records are
    decoded first, so a section that does not hold records_count records is
    CorruptRecordError rather than copied; `records`, the batch's records a caller has
    decoded already (batch.records()), spares decompressing and decoding them again; `level`
    is the codec's level (None: its default, compression.compress)."""
    if records is None:
        buf, pos, length, file_pos = batch._records_section()
        codec.records_decode(buf, pos, length, batch.records_count, batch.path, file_pos)
        section = memoryview(buf)[pos:pos + length]
    elif batch.compression == compression.NONE:   # the records are read in place
        start = batch.position + RECORDS_OFFSET
        section = memoryview(batch.buf)[start:batch.position + batch.size_in_bytes]
    else:   # the records were read from the decompressed section, whole
        section = memoryview(records.buf)
    if cid != compression.NONE:
        section = compression.compress(cid, section, level)
    out = bytearray(RECORDS_OFFSET + len(section))
    out[:RECORDS_OFFSET] = batch.view()[:RECORDS_OFFSET]
    out[RECORDS_OFFSET:] = section
    seal(out, 0, base_offset=batch.base_offset,
         attributes=(batch.attributes & ~COMPRESSION_MASK) | cid,
         last_offset_delta=batch.last_offset_delta, base_timestamp=batch.base_timestamp,
         max_timestamp=batch.max_timestamp, producer_id=batch.producer_id,
         producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
         records_count=batch.records_count, partition_leader_epoch=batch.partition_leader_epoch)
    return out


def set_base_offset(buf, position, base_offset):
    """Patch the baseOffset of the batch at buf[position:] (not covered by the CRC)."""
    _I64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_max_timestamp(buf, position, timestamp_type, max_timestamp):
    """Give the batch at buf[position:] timestamp_type and maxTimestamp = max_timestamp;
    re-CRC (Kafka's DefaultRecordBatch.setMaxTimestamp). Marked LogAppendTime, its records
    read as max_timestamp; marked CreateTime, as its baseTimestamp plus their deltas."""
    batch = RecordBatch(buf, position)
    attributes = batch.attributes & ~TIMESTAMP_TYPE_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    _I64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    struct.pack_into(">h", buf, position + ATTRIBUTES_OFFSET, attributes)
    _recrc(buf, position, batch.size_in_bytes)


_PRODUCER = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence: adjacent


def set_producer(buf, position, producer_id, producer_epoch, base_sequence):
    """Stamp the batch at buf[position:] with an idempotent producer's id, epoch and first
    sequence (a batch encoded before its sequence was known); re-CRC."""
    size = RecordBatch(buf, position).size_in_bytes
    _PRODUCER.pack_into(buf, position + PRODUCER_ID_OFFSET, producer_id, producer_epoch,
                        base_sequence)
    _recrc(buf, position, size)


def _recrc(buf, position, size):
    crc = codec.crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET:position + size])
    _U32.pack_into(buf, position + CRC_OFFSET, crc)


def iter_batches(buf, start=0, end=None, path=None, file_position=None):
    """Yield each whole batch in buf[start:end]; stop at a trailing partial batch.

    file_position is the file position of buf[start]. Only the length fields
    are looked at here; callers decide whether a partial tail is corruption
    (a sealed file) or a batch still being written (a live tail).
    """
    if end is None:
        end = len(buf)
    pos = start
    while end - pos >= RECORD_BATCH_OVERHEAD:
        batch = RecordBatch(buf, pos, path,
                            None if file_position is None else file_position + pos - start)
        size = batch.size_in_bytes
        if size < RECORD_BATCH_OVERHEAD:
            batch.check_header()  # raises: a length this small is never valid
        if pos + size > end:
            return
        yield batch
        pos += size
