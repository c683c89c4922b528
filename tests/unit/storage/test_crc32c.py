"""CRC-32C: the published check value, chaining, agreement of all three implementations,
and the CPU instruction really in use where the CPU has it."""
import platform

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


def cpu_flags():
    """The CPU feature flags Linux reports in /proc/cpuinfo (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@needs_native
@pytest.mark.skipif(platform.machine() != "x86_64" or "sse4_2" not in cpu_flags(),
                    reason="not an x86-64 CPU with SSE4.2 (the crc32 instruction)")
def test_native_uses_the_crc32_instruction_where_the_cpu_has_it():
    # The table path gives the same answers, so only this flag shows a lost hardware path
    # (e.g. CPU detection broken by a build change): every append and read would slow down
    # unnoticed (an appended batch is checksummed twice).
    assert native.crc32c_hw_enabled()
