"""Pure-Python reference of the records-section codec (native/sl_records.c).

Same inputs, same outputs, same errors as the native functions wrapped in
streamlog.native, record by record in plain Python: the native path is tested
against this one, and this one is what runs when the extension is absent or
STREAMLOG_NO_NATIVE=1 is set.
"""
from functools import partial

import numpy as np

from ..errors import CorruptRecordError
from .crc32c_py import crc32c  # noqa: F401  (the reference set: see storage.codec)
from .varint import MalformedRecord, decode_varint, decode_varlong, encode_varint, encode_varlong

_MAX_RECORD_OVERHEAD = 1 + 10 + 5 * 4


def records_bound(n, keys_bytes, values_bytes, headers_bytes):
    return n * (_MAX_RECORD_OVERHEAD + 1) + keys_bytes + values_bytes + headers_bytes


def _slices(blob, lens, n):
    """The n items of a column: bytes, or None where the length is -1."""
    if lens is None:
        return [None] * n
    out = []
    pos = 0
    view = memoryview(blob) if blob is not None else None
    for length in lens:
        if length < 0:
            out.append(None)
        else:
            out.append(bytes(view[pos:pos + length]))
            pos += length
    return out


def encode_records(n, base_timestamp, timestamps, keys, key_lens, values, value_lens, headers,
                   header_lens):
    """Bytes of n records; arguments as in streamlog.native.records_encode_into."""
    key_items = _slices(keys, key_lens, n)
    value_items = _slices(values, value_lens, n)
    header_items = _slices(headers, header_lens, n) if header_lens is not None else [b"\x00"] * n
    out = bytearray()
    for i in range(n):
        ts_delta = (timestamps[i] - base_timestamp) if timestamps is not None else 0
        body = bytearray(b"\x00")  # attributes
        body += encode_varlong(ts_delta)
        body += encode_varint(i)
        for item in (key_items[i], value_items[i]):
            if item is None:
                body += encode_varint(-1)
            else:
                body += encode_varint(len(item))
                body += item
        body += header_items[i]
        out += encode_varint(len(body))
        out += body
    return bytes(out)


def records_encode_into(out, out_pos, n, base_timestamp, timestamps, keys, key_lens, values,
                        value_lens, headers, header_lens):
    data = encode_records(n, base_timestamp, timestamps, keys, key_lens, values, value_lens,
                          headers, header_lens)
    if out_pos + len(data) > len(out):
        raise ValueError("output buffer too small")
    out[out_pos:out_pos + len(data)] = data
    return len(data)


def records_decode(buf, pos, length, n, path=None, file_position=None):
    """Same result as streamlog.native.records_decode, decoded in Python."""
    ints = np.empty((8, n), dtype=np.int32)
    ts = np.empty(n, dtype=np.int64)
    view = memoryview(buf).cast("B")
    end_all = pos + length
    p = pos
    try:
        for i in range(n):
            rec_len, p = decode_varint(view, p, end_all)
            if rec_len < 0:
                raise MalformedRecord("negative length in a record")
            if end_all - p < rec_len:
                raise MalformedRecord("record runs past the end of the batch")
            end = p + rec_len
            rec_start = p
            if p >= end:
                raise MalformedRecord("record fields do not add up to the record length")
            p += 1  # attributes
            ts[i], p = decode_varlong(view, p, end)
            ints[0, i], p = decode_varint(view, p, end)
            for slot in (1, 3):  # key, then value
                flen, p = decode_varint(view, p, end)
                if flen < -1:
                    raise MalformedRecord("negative length in a record")
                if flen > 0 and end - p < flen:
                    raise MalformedRecord("record fields do not add up to the record length")
                ints[slot, i] = p if flen >= 0 else 0
                ints[slot + 1, i] = flen
                p += max(flen, 0)
            hstart = p
            count, p = decode_varint(view, p, end)
            if count < 0:
                raise MalformedRecord("negative length in a record")
            for _ in range(count):
                klen, p = decode_varint(view, p, end)
                if klen < 0:
                    raise MalformedRecord("negative length in a record")
                if end - p < klen:
                    raise MalformedRecord("record fields do not add up to the record length")
                p += klen
                vlen, p = decode_varint(view, p, end)
                if vlen < -1:
                    raise MalformedRecord("negative length in a record")
                if vlen > 0:
                    if end - p < vlen:
                        raise MalformedRecord(
                            "record fields do not add up to the record length")
                    p += vlen
            ints[5, i] = hstart
            ints[6, i] = p - hstart
            ints[7, i] = count
            if p != rec_start + rec_len:
                raise MalformedRecord("record fields do not add up to the record length")
        if p != end_all:
            raise MalformedRecord("bytes left after the last record of the batch")
    except MalformedRecord as exc:
        at = None if file_position is None else file_position + (p - pos)
        raise CorruptRecordError(f"malformed record: {exc}", path, at) from None
    return ints[0], ts, ints[1], ints[2], ints[3], ints[4], ints[5], ints[6], ints[7]


def gather(src, pos, lens):
    return gather_many([(src, pos, lens)])


def gather_many(pieces):
    parts = []
    for src, pos, lens in pieces:
        view = memoryview(src).cast("B")
        parts.extend(bytes(view[p:p + length])
                     for p, length in zip(pos.tolist(), lens.tolist(), strict=True) if length > 0)
    all_lens = np.concatenate([lens for _, _, lens in pieces]) if pieces else \
        np.zeros(0, np.int32)
    offsets = np.zeros(len(all_lens) + 1, dtype=np.int32)
    np.cumsum(np.maximum(all_lens, 0), out=offsets[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8).copy(), offsets


def slices_to_list(src, pos, lens):
    buf = src if isinstance(src, bytes) else bytes(src)
    return [buf[p:p + n] if n >= 0 else None
            for p, n in zip(pos.tolist(), lens.tolist(), strict=True)]


def decode_headers(buf, pos, end):
    """[(key str, value bytes or None), ...] of one record's headers section."""
    view = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    try:
        count, pos = decode_varint(view, pos, end)
        out = []
        for _ in range(count):
            klen, pos = decode_varint(view, pos, end)
            key = bytes(view[pos:pos + klen]).decode("utf-8", errors="replace")
            pos += klen
            vlen, pos = decode_varint(view, pos, end)
            if vlen < 0:
                value = None
            else:
                value = bytes(view[pos:pos + vlen])
                pos += vlen
            out.append((key, value))
    except MalformedRecord as exc:  # already framed-checked by the decoder; be safe anyway
        raise CorruptRecordError(f"malformed record headers: {exc}") from None
    return out


def records_to_tuples(buf, pos, length, n, base_offset, base_timestamp, fixed_timestamp=None,
                      path=None, file_position=None, topic=None, partition=0, timestamp_type=0,
                      min_offset=None, record_type=None):
    """Same result as streamlog.native.records_to_tuples, through the column decoder."""
    cols = records_decode(buf, pos, length, n, path, file_position)
    offset_deltas, ts_deltas, key_pos, key_lens, value_pos, value_lens, header_pos, \
        header_lens, counts = cols
    offsets = (offset_deltas.astype("int64") + base_offset).tolist()
    if fixed_timestamp is None:
        stamps = (ts_deltas + base_timestamp).tolist()
    else:
        stamps = [fixed_timestamp] * n
    keys = slices_to_list(buf, key_pos, key_lens)
    values = slices_to_list(buf, value_pos, value_lens)
    keep = [i for i, off in enumerate(offsets) if min_offset is None or off >= min_offset]
    with_headers = int(sum(1 for i in keep if counts[i] > 0))
    if topic is None:
        return [(offsets[i], stamps[i], keys[i], values[i]) for i in keep], with_headers

    def headers(i):
        if not counts[i]:
            return ()
        start = int(header_pos[i])
        return tuple(decode_headers(buf, start, start + int(header_lens[i])))
    make = tuple if record_type is None else partial(tuple.__new__, record_type)
    return [make((topic, partition, offsets[i], stamps[i], timestamp_type, keys[i], values[i],
                  headers(i))) for i in keep], with_headers
