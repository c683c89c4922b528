"""A check of every length a request frame declares, before the codec reads the frame.

kio's native reader sizes an array from its declared count before reading the elements, so
a frame claiming billions of elements (one flipped bit in a compact array's varint) makes it
allocate tens of gigabytes, and the allocation failure aborts the process: no exception to
catch. This walk reads the same schema (kio's own field descriptions) in Python and refuses
a frame in which any array, string or bytes field claims more than the bytes left in the
frame (each element takes at least one byte), so the codec only ever sees counts it can
hold, and a request of more than MAX_ELEMENTS array elements in all. It reads lengths and
skips contents: a few microseconds a request.
"""
import dataclasses
import struct

from kio.serial._introspect import (EntityField, EntityTupleField, PrimitiveField,
                                    classify_field, get_field_tag, get_schema_field_type,
                                    is_optional)

_FIXED = {"int8": 1, "bool": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2,
          "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8,
          "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16}
_LENGTH_PREFIXED = ("string", "bytes", "records")


# The most array elements one request may hold, over all its arrays. The codec builds an
# object of some 500 bytes per element, so a 1 MB frame of 250,000 partition indexes took
# 118 MB and seconds of one thread; this bounds a request at about 100 MB of objects. No
# client's request comes near it (a Produce's records are one bytes field per partition).
MAX_ELEMENTS = 200_000


class FrameLengthError(ValueError):
    """A length in the frame claims more bytes than the frame has left."""


def check_frame(header_cls, body_cls, frame):
    """Raise FrameLengthError if a length in the header or body of frame is impossible
    (more than the bytes left, or null where the schema has no null); other malformations
    are left to the codec, which raises for them."""
    budget = [MAX_ELEMENTS]
    position = _walk(header_cls, frame, 0, budget, header=True)
    _walk(body_cls, frame, position, budget)


# What each field is, per entity class: (step, kafka type or entity class, nullable).
_SCALAR, _ENTITY, _SCALARS, _ENTITIES, _CLIENT_ID = range(5)
_PLANS = {}


def _plan(cls, header):
    plan = _PLANS.get((cls, header))
    if plan is not None:
        return plan
    plan = []
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None:
            continue   # tagged fields are in the tagged section, after the others
        kind = classify_field(field)
        if header and field.name == "client_id":   # always a legacy string (Kafka's rule)
            plan.append((_CLIENT_ID, "string", False))
        elif isinstance(kind, PrimitiveField):
            plan.append((_SCALAR, get_schema_field_type(field), False))
        elif isinstance(kind, EntityField):
            plan.append((_ENTITY, kind.type_, is_optional(field)))
        elif isinstance(kind, EntityTupleField):
            plan.append((_ENTITIES, kind.type_, is_optional(field)))
        else:
            plan.append((_SCALARS, get_schema_field_type(field), is_optional(field)))
    _PLANS[(cls, header)] = plan
    return plan


def _walk(cls, buf, pos, budget, header=False):
    flexible = cls.__flexible__
    for step, kind, nullable in _plan(cls, header):
        if step == _SCALAR:
            pos = _skip_value(buf, pos, kind, flexible)
        elif step == _ENTITIES:
            count, pos = _array_length(buf, pos, flexible, nullable, budget)
            for _ in range(count):
                pos = _walk(kind, buf, pos, budget)
        elif step == _SCALARS:
            count, pos = _array_length(buf, pos, flexible, nullable, budget)
            for _ in range(count):
                pos = _skip_value(buf, pos, kind, flexible)
        elif step == _ENTITY:
            if nullable:
                (marker,) = _unpack(">b", buf, pos)
                pos += 1
                if marker < 0:
                    continue
            pos = _walk(kind, buf, pos, budget)
        else:
            pos = _skip_sized(buf, pos, "string", False)
    if flexible:
        pos = _skip_tagged(buf, pos)
    return pos


def _skip_value(buf, pos, kafka_type, flexible):
    size = _FIXED.get(kafka_type)
    if size is not None:
        return _advance(buf, pos, size)
    if kafka_type in _LENGTH_PREFIXED:
        return _skip_sized(buf, pos, kafka_type, flexible)
    raise FrameLengthError(f"unknown field type {kafka_type!r}")


def _skip_sized(buf, pos, kafka_type, flexible):
    if flexible:
        length, pos = _uvarint(buf, pos)
        length -= 1            # 0 is null
    elif kafka_type == "string":
        (length,) = _unpack(">h", buf, pos)
        pos += 2
    else:
        (length,) = _unpack(">i", buf, pos)
        pos += 4
    return pos if length < 0 else _advance(buf, pos, length)


def _array_length(buf, pos, flexible, nullable, budget):
    if flexible:
        count, pos = _uvarint(buf, pos)
        count -= 1
    else:
        (count,) = _unpack(">i", buf, pos)
        pos += 4
    if count < 0 and not nullable:
        raise FrameLengthError("a null array where the schema has no null")
    if count > len(buf) - pos:
        raise FrameLengthError(f"an array of {count} elements with {len(buf) - pos} bytes left")
    budget[0] -= max(count, 0)
    if budget[0] < 0:
        raise FrameLengthError(f"more than {MAX_ELEMENTS:,} array elements in one request")
    return max(count, 0), pos


def _skip_tagged(buf, pos):
    count, pos = _uvarint(buf, pos)
    if count > len(buf) - pos:
        raise FrameLengthError(f"{count} tagged fields with {len(buf) - pos} bytes left")
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos = _advance(buf, pos, size)
    return pos


def _advance(buf, pos, size):
    if size > len(buf) - pos:
        raise FrameLengthError(f"a {size}-byte field with {len(buf) - pos} bytes left")
    return pos + size


def _unpack(fmt, buf, pos):
    try:
        return struct.unpack_from(fmt, buf, pos)
    except struct.error:
        raise FrameLengthError("the frame ends inside a field") from None


def _uvarint(buf, pos):
    value = shift = 0
    for i in range(5):
        if pos + i >= len(buf):
            raise FrameLengthError("the frame ends inside a varint")
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise FrameLengthError("a varint longer than 5 bytes")
