"""The frame guard (server/frame_guard.py): a request whose declared lengths cannot fit its
frame is refused before the codec reads it. The codec's native reader sizes an array from
its declared count first, and an allocation it cannot make aborts the process; the server's
fuzz test found such a frame (a flipped bit in a compact array's varint)."""
import struct

import pytest

pytest.importorskip("kio")

from support.child import run_py  # noqa: E402


def metadata_v9_frame(topic_count_varint):
    """A Metadata v9 request (flexible: header v2) whose topics array declares a count."""
    header = struct.pack(">hhih", 3, 9, 1, 1) + b"x" + b"\x00"   # key, version, id, client
    return header + topic_count_varint + b"\x01\x00\x00\x00"   # 3 bools, no tags


def uvarint(n):
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def test_an_array_claiming_billions_of_elements_is_refused_not_an_abort():
    # Run in a child: should the guard ever miss this, the codec's abort must fail this
    # test, not end the test session.
    child = run_py(f"""
        from streamlog.server.protocol import decode_request
        from streamlog.server.frame_guard import FrameLengthError
        try:
            decode_request({metadata_v9_frame(uvarint(4_560_034_096 + 1))!r})
        except FrameLengthError as exc:
            print("refused:", exc)
    """)
    assert child.returncode == 0, child.stderr
    assert "refused: an array of 4560034096 elements with 4 bytes left" in child.stdout


def test_a_null_where_the_schema_has_none_and_lengths_past_the_end_are_refused():
    from streamlog.server.frame_guard import FrameLengthError
    from streamlog.server.protocol import decode_request
    # DescribeGroups v5: its groups array has no null (a compact length of 0 is null).
    describe_groups = struct.pack(">hhih", 15, 5, 1, 1) + b"x" + b"\x00"
    with pytest.raises(FrameLengthError, match="null array"):
        decode_request(describe_groups + uvarint(0) + b"\x00\x00")
    assert decode_request(describe_groups + uvarint(1) + b"\x00\x00")[1].groups == ()
    with pytest.raises(FrameLengthError, match="ends inside a varint"):
        decode_request(struct.pack(">hhih", 3, 9, 1, 1) + b"x" + b"\x00" + b"\x80")
    header, body = decode_request(metadata_v9_frame(uvarint(1)))   # an empty array: fine
    assert body.topics == ()


def test_a_request_of_more_array_elements_than_the_bound_is_refused():
    # 250,000 partition indexes fit a 1 MB OffsetFetch frame; decoded they took 118 MB.
    from streamlog.server.frame_guard import MAX_ELEMENTS, FrameLengthError
    from streamlog.server.protocol import decode_request
    header = struct.pack(">hhih", 9, 7, 1, 1) + b"x" + b"\x00"   # OffsetFetch v7
    def offset_fetch(n):
        return (header + uvarint(2) + b"g" + uvarint(2) + uvarint(2) + b"t" + uvarint(n + 1)
                + struct.pack(">i", 0) * n + b"\x00" + b"\x00" + b"\x00")
    assert len(decode_request(offset_fetch(1000))[1].topics[0].partition_indexes) == 1000
    with pytest.raises(FrameLengthError, match="more than 200,000 array elements"):
        decode_request(offset_fetch(MAX_ELEMENTS + 1))
