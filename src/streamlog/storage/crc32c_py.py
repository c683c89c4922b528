"""Pure-Python CRC-32C (Castagnoli), the reference for the native checksum.

Table-driven, one byte per step: slow (tens of MB/s) but obviously right;
used when the native module is absent or disabled (STREAMLOG_NO_NATIVE=1) and
to cross-check it in the tests.
"""

_POLY = 0x82F63B78


def _make_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _make_table()


def crc32c(data, crc=0):
    """CRC-32C of a bytes-like object, continuing from crc (0 to start), like zlib.crc32."""
    table = _TABLE
    c = crc ^ 0xFFFFFFFF
    for b in memoryview(data).cast("B"):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
