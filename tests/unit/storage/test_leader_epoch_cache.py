"""LeaderEpochCache: Kafka's leader-epoch-checkpoint format and the rules of its
LeaderEpochFileCache (assign, end offset for an epoch, the epoch of an offset, truncation
from either end)."""
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from streamlog.storage.leader_epoch_cache import (LEADER_EPOCH_CHECKPOINT, UNDEFINED_EPOCH,
                                                  LeaderEpochCache)


def cache_with(tmp_path, entries):
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def test_the_file_is_kafkas_text_format(tmp_path):
    cache_with(tmp_path, [(0, 0), (2, 15), (5, 40)])
    with open(tmp_path / LEADER_EPOCH_CHECKPOINT, "rb") as f:
        assert f.read() == b"0\n3\n0 0\n2 15\n5 40\n"
    assert LeaderEpochCache(str(tmp_path)).entries == [(0, 0), (2, 15), (5, 40)]


def test_a_missing_file_is_an_empty_cache_that_asks_for_a_rebuild(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    assert cache.entries == [] and not cache.loaded
    assert cache.latest_epoch == UNDEFINED_EPOCH
    assert not os.path.exists(tmp_path / LEADER_EPOCH_CHECKPOINT)  # nothing written yet


def test_a_damaged_file_is_not_trusted(tmp_path):
    for text in (b"0\n2\n1 0\n", b"1\n1\n1 0\n", b"0\n2\n3 10\n2 20\n", b"garbage"):
        (tmp_path / LEADER_EPOCH_CHECKPOINT).write_bytes(text)
        cache = LeaderEpochCache(str(tmp_path))
        assert cache.entries == [] and not cache.loaded, text


def test_assign_ignores_negative_epochs_and_a_later_start_of_the_latest_epoch(tmp_path):
    cache = cache_with(tmp_path, [(1, 10)])
    assert not cache.assign(-1, 20)
    assert not cache.assign(1, 15)
    assert cache.entries == [(1, 10)]


def test_assign_drops_entries_it_contradicts(tmp_path):
    # Kafka's maybeTruncateNonMonotonicEntries: an entry with an epoch >= the new one, or a
    # start offset >= the new one, goes before the new entry is added.
    cache = cache_with(tmp_path, [(1, 10), (3, 20), (4, 30)])
    assert cache.assign(3, 15)
    assert cache.entries == [(1, 10), (3, 15)]
    assert cache.assign(5, 12)
    assert cache.entries == [(1, 10), (5, 12)]
    assert LeaderEpochCache(str(tmp_path)).entries == [(1, 10), (5, 12)]


def test_end_offset_for_epoch_answers_as_kafka_does(tmp_path):
    cache = cache_with(tmp_path, [(1, 5), (3, 10), (5, 20)])
    log_end = 30
    assert cache.end_offset_for(5, log_end) == (5, 30)    # the latest epoch ends at the LEO
    assert cache.end_offset_for(3, log_end) == (3, 20)    # a known epoch: the next one's start
    assert cache.end_offset_for(4, log_end) == (3, 20)    # unknown in between: floor epoch
    assert cache.end_offset_for(2, log_end) == (1, 10)
    assert cache.end_offset_for(0, log_end) == (0, 5)     # older than all: asked epoch, first start
    assert cache.end_offset_for(6, log_end) == (-1, -1)   # newer than all
    assert cache.end_offset_for(-1, log_end) == (-1, -1)
    assert LeaderEpochCache(str(tmp_path), entries=[]).end_offset_for(1, 9) == (-1, -1)


def test_epoch_for_offset_is_the_entry_covering_it(tmp_path):
    # Kafka's LeaderEpochFileCache.epochForOffset: the epoch whose start is the latest at or
    # below the offset; none below the first entry.
    cache = cache_with(tmp_path, [(1, 5), (3, 10), (5, 20)])
    assert [cache.epoch_for_offset(o) for o in (4, 5, 9, 10, 19, 20, 99)] == \
        [UNDEFINED_EPOCH, 1, 1, 3, 3, 5, 5]
    assert LeaderEpochCache(str(tmp_path), entries=[]).epoch_for_offset(0) == UNDEFINED_EPOCH


def test_truncate_from_end_forgets_epochs_that_began_at_or_after_the_cut(tmp_path):
    cache = cache_with(tmp_path, [(1, 5), (3, 10), (5, 20)])
    cache.truncate_from_end(21)
    assert cache.entries == [(1, 5), (3, 10), (5, 20)]
    cache.truncate_from_end(10)
    assert cache.entries == [(1, 5)]
    assert LeaderEpochCache(str(tmp_path)).entries == [(1, 5)]


def test_truncate_from_start_keeps_the_epoch_holding_the_new_start(tmp_path):
    cache = cache_with(tmp_path, [(1, 5), (3, 10), (5, 20)])
    cache.truncate_from_start(4)
    assert cache.entries == [(1, 5), (3, 10), (5, 20)]
    cache.truncate_from_start(12)
    assert cache.entries == [(3, 12), (5, 20)]
    cache.truncate_from_start(20)
    assert cache.entries == [(5, 20)]
    assert LeaderEpochCache(str(tmp_path)).entries == [(5, 20)]


class _Batch:
    def __init__(self, epoch, base):
        self.partition_leader_epoch = epoch
        self.base_offset = base


def test_rebuild_takes_each_epochs_first_batch(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    cache.rebuild([_Batch(-1, 0), _Batch(0, 3), _Batch(0, 4), _Batch(2, 9), _Batch(2, 12),
                   _Batch(4, 20)])
    assert cache.entries == [(0, 3), (2, 9), (4, 20)] and cache.loaded
    assert LeaderEpochCache(str(tmp_path)).entries == [(0, 3), (2, 9), (4, 20)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("atf"), st.integers(-1, 8), st.integers(0, 60)),
                max_size=30))
def test_entries_stay_ascending_in_both_columns_and_survive_a_reopen(tmp_path_factory, ops):
    directory = str(tmp_path_factory.mktemp("epochs"))
    cache = LeaderEpochCache(directory)
    for op, epoch, offset in ops:
        if op == "a":
            cache.assign(epoch, offset)
            if epoch >= 0:
                assert cache.latest_epoch == epoch or cache.start_offset_of(epoch) is not None
        elif op == "t":
            cache.truncate_from_end(offset)
            assert all(start < offset for _, start in cache.entries)
        else:
            cache.truncate_from_start(offset)
        entries = cache.entries
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(entries, entries[1:], strict=False))
    if os.path.exists(os.path.join(directory, LEADER_EPOCH_CHECKPOINT)):
        assert LeaderEpochCache(directory).entries == cache.entries
