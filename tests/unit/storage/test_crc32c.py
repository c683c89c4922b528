"""CRC-32C: the published check value, chaining, and agreement of all three implementations."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlog import native
from streamlog.storage import crc32c_py
from support import bitwise_crc32c

CHECK_INPUT = b"123456789"
CHECK_VALUE = 0xE3069283  # the CRC-32C "check" value of the standard catalogue

needs_native = pytest.mark.skipif(not native.AVAILABLE, reason=str(native.UNAVAILABLE_REASON))


def test_python_crc_matches_check_value():
    assert crc32c_py.crc32c(CHECK_INPUT) == CHECK_VALUE
    assert bitwise_crc32c(CHECK_INPUT) == CHECK_VALUE


@needs_native
def test_native_crc_matches_check_value_on_both_paths():
    assert native.crc32c(CHECK_INPUT) == CHECK_VALUE
    assert native.crc32c_table(CHECK_INPUT) == CHECK_VALUE


def test_empty_input_is_zero():
    assert crc32c_py.crc32c(b"") == 0


def test_chaining_equals_one_pass():
    data = bytes(range(256)) * 3
    assert crc32c_py.crc32c(data[100:], crc32c_py.crc32c(data[:100])) == crc32c_py.crc32c(data)


@needs_native
@given(st.binary(max_size=2000), st.integers(0, 2000))
def test_native_paths_agree_with_python(data, split):
    split = min(split, len(data))
    expected = crc32c_py.crc32c(data)
    assert native.crc32c(data) == expected
    assert native.crc32c_table(data) == expected
    assert native.crc32c(data[split:], native.crc32c(data[:split])) == expected


@needs_native
def test_native_handles_unaligned_and_long_buffers():
    data = bytes((i * 7 + 3) & 0xFF for i in range(100_003))
    for start in range(9):
        view = memoryview(data)[start:]
        assert native.crc32c(view) == native.crc32c_table(view)
        assert native.crc32c(view[:61]) == bitwise_crc32c(bytes(view[:61]))
    assert native.crc32c(data) == crc32c_py.crc32c(data)


@needs_native
@pytest.mark.parametrize("length", [3 * 256 - 1, 3 * 256, 3 * 256 + 7, 3 * 8192 - 1, 3 * 8192,
                                   3 * 8192 + 9, 2 * 3 * 8192 + 3 * 256 + 5])
def test_interleaved_hardware_blocks_agree_with_the_table(length):
    data = bytes((i * 131 + 17) & 0xFF for i in range(length + 8))
    for start in (0, 3):  # aligned and unaligned starts
        view = memoryview(data)[start:start + length]
        assert native.crc32c(view) == native.crc32c_table(view)
    assert native.crc32c(data[:length]) == crc32c_py.crc32c(data[:length])
