"""murmur2 against Kafka's own test vectors (clients UtilsTest.testMurmur2) and partitions."""
import pytest

from streamlog.client.murmur2 import murmur2, murmur2_py, partition_for_key, to_positive

# key -> murmur2, from Kafka's UtilsTest, plus values cross-checked on the JVM.
VECTORS = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
    "": 275646681,
    "key": -1079937367,
    "kafka": -798503068,
}
# key -> partition for 3, 6 and 12 partitions (toPositive(murmur2) % n)
PARTITIONS = {
    "21": (0, 0, 0), "foobar": (0, 0, 6), "a-little-bit-long-string": (2, 2, 8),
    "a-little-bit-longer-string": (2, 5, 11),
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": (2, 5, 5), "abc": (0, 3, 3),
}


@pytest.mark.parametrize("key,expected", VECTORS.items())
def test_murmur2_matches_kafka(key, expected):
    assert murmur2(key.encode()) == expected
    assert murmur2_py(key.encode()) == expected


@pytest.mark.parametrize("key,expected", PARTITIONS.items())
def test_partition_for_key_matches_kafka(key, expected):
    assert tuple(partition_for_key(key.encode(), n) for n in (3, 6, 12)) == expected


def test_to_positive_clears_the_sign_bit_rather_than_negating():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-2**31) == 0
    assert to_positive(5) == 5


def test_reference_and_native_agree_on_random_keys():
    import random

    import numpy as np

    from streamlog import native
    from streamlog.client.murmur2 import murmur2_py, partitions_for_keys
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))) for _ in range(500)]
    for key in keys:
        assert murmur2(key) == murmur2_py(key)
    blob = b"".join(keys)
    lens = np.array([len(k) for k in keys] + [-1], dtype=np.int32)
    parts = partitions_for_keys(blob, lens, 7)
    assert parts.tolist() == [partition_for_key(k, 7) for k in keys] + [-1]
    if not native.AVAILABLE:
        pytest.skip("native module not loaded: only the reference was checked")
