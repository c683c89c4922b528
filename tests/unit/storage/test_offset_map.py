"""storage.offset_map: the cleaner's fixed-memory key -> last offset table (Kafka's
SkimpyOffsetMap, KAFKA_REFERENCE.md §4), against a dict."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlog.storage import offset_map as om
from streamlog.storage.offset_map import SLOT_BYTES, OffsetMap

keys = st.binary(min_size=0, max_size=12)


@given(st.lists(st.tuples(keys, st.integers(0, 2**62)), max_size=200),
       st.integers(1, 64))
def test_behaves_as_a_dict_until_full(puts, slots):
    m = OffsetMap(slots * SLOT_BYTES, load_factor=0.9)
    model = {}
    for key, offset in puts:
        accepted = m.put(key, offset)
        if key in model or len(model) < m.max_entries:
            assert accepted
            model[key] = offset
        else:
            assert not accepted   # full: a new key is refused, nothing changes
        assert m.size == len(model)
    for key, offset in model.items():
        assert m.get(key) == offset
    assert m.latest_offset == max((o for k, o in puts if k in model), default=-1)
    for key, _ in puts:
        if key not in model:
            assert m.get(key) == -1


def test_probing_wraps_and_finds_every_key(monkeypatch):
    # Every key hashed to the last slot: each put and get walks the table and wraps.
    monkeypatch.setattr(om, "key_hash", lambda key: (7, 9 + 10 * len(key)))
    m = OffsetMap(10 * SLOT_BYTES, load_factor=1.0)
    for n in range(10):
        assert m.put(b"k" * n, 100 + n)
    assert m.full and m.utilization == 1.0
    assert [m.get(b"k" * n) for n in range(10)] == [100 + n for n in range(10)]
    assert not m.put(b"a-new-key!!", 1)   # another hash, no room
    assert m.put(b"k" * 3, 5) and m.get(b"k" * 3) == 5   # an update is never refused


def test_hash_halves_above_2_63_compare_exactly(monkeypatch):
    # Two keys whose halves differ only in low bits above 2**53 (float64 would merge them).
    big = 2**64 - 2
    monkeypatch.setattr(om, "key_hash", lambda key: (big, big - len(key)))
    m = OffsetMap(4 * SLOT_BYTES)
    m.put(b"a", 1)
    m.put(b"bb", 2)
    assert (m.get(b"a"), m.get(b"bb"), m.size) == (1, 2, 2)


def test_sizes_and_clear():
    m = OffsetMap(1000 * SLOT_BYTES)
    assert (m.slots, m.max_entries) == (1000, 900)   # Kafka's load factor 0.9
    m.put(b"k", 5)
    m.update_latest(40)
    assert m.latest_offset == 40
    m.clear()
    assert (m.size, m.latest_offset, m.get(b"k")) == (0, -1, -1)
    with pytest.raises(ValueError):
        OffsetMap(SLOT_BYTES - 1)
