"""Zig-zag varints: hand-computed vectors from the protobuf/Kafka encoding rule."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlog.storage.varint import (MalformedRecord, decode_varint, decode_varlong,
                                      encode_varint, encode_varlong)

VARINT_VECTORS = [
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001"),
    (300, "d804"), (2**31 - 1, "feffffff0f"), (-2**31, "ffffffff0f"),
]
VARLONG_VECTORS = [(0, "00"), (-1, "01"), (2**40, "808080808040"),
                   (2**63 - 1, "feffffffffffffffff01"), (-2**63, "ffffffffffffffffff01")]


@pytest.mark.parametrize("value,hexbytes", VARINT_VECTORS)
def test_varint_vectors(value, hexbytes):
    raw = bytes.fromhex(hexbytes)
    assert encode_varint(value) == raw
    assert decode_varint(raw, 0, len(raw)) == (value, len(raw))


@pytest.mark.parametrize("value,hexbytes", VARLONG_VECTORS)
def test_varlong_vectors(value, hexbytes):
    raw = bytes.fromhex(hexbytes)
    assert encode_varlong(value) == raw
    assert decode_varlong(raw, 0, len(raw)) == (value, len(raw))


def test_varint_longer_than_five_bytes_is_malformed():
    raw = bytes.fromhex("8080808080") + b"\x01"
    with pytest.raises(MalformedRecord, match="varint"):
        decode_varint(raw, 0, len(raw))


def test_truncated_varint_is_malformed():
    with pytest.raises(MalformedRecord, match="past the end"):
        decode_varint(b"\x80\x80", 0, 2)


@given(st.integers(-2**63, 2**63 - 1))
def test_varlong_roundtrip(value):
    raw = encode_varlong(value)
    assert decode_varlong(raw, 0, len(raw)) == (value, len(raw))
