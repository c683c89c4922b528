"""storage.log_cleaner on one PartitionLog: the record, tombstone, batch and transaction rules
of Kafka's cleaner (KAFKA_REFERENCE.md §4), the sections of a log, segment grouping, and the
swap that recovery finishes or discards."""
import os
import shutil

import pytest

from streamlog.errors import InvalidRecordError
from streamlog.storage import files
from streamlog.storage.cleaner_manager import filthiest, log_to_clean
from streamlog.storage.log_cleaner import CleaningAborted, clean_log
from streamlog.storage.partition_log import PartitionLog
from streamlog.storage.record_batch import build_batch, iter_batches

from support import clean_pass, config, keyed_rows, last_values

DAY_MS = 86_400_000


class Clock:
    def __init__(self, now_ms=1_700_000_000_000):
        self.now_ms = now_ms

    def __call__(self):
        return self.now_ms


def compacted(log_dir, clock=None, **overrides):
    settings = dict(cleanup_policy="compact", segment_bytes=1200, index_interval_bytes=100)
    settings.update(overrides)
    return PartitionLog(str(log_dir), config(**settings), clock_ms=clock or Clock())


def write(log, pairs, **kwargs):
    """Append one batch of (key, value) pairs; returns [(offset, key, value)]."""
    timestamp = kwargs.pop("timestamp", log.clock_ms())
    info = log.append(build_batch([v for _, v in pairs], keys=[k for k, _ in pairs],
                                  timestamp=timestamp, **kwargs))
    return [(info.first_offset + i, k, v) for i, (k, v) in enumerate(pairs)]


def write_many(log, n, keys=7, per_batch=3, prefix=b"v"):
    writes = []
    for i in range(0, n, per_batch):
        pairs = [(b"k%d" % ((i + j) % keys), prefix + b"%d" % (i + j))
                 for j in range(min(per_batch, n - i))]
        writes += write(log, pairs)
    return writes


def all_batches(log):
    out = []
    for segment in log.segments:
        out += list(segment.log.batches())
    return out


def test_each_key_keeps_its_last_value_at_its_original_offset(tmp_path):
    log = compacted(tmp_path / "p")
    writes = write_many(log, 200)
    assert len(log.segments) > 4
    end = clean_pass(log)
    assert end == 200
    expected = sorted((off, key, value) for key, (off, value) in last_values(writes).items())
    assert keyed_rows(log) == expected
    assert log.log_end_offset == 200 and log.log_start_offset == 0
    log.close()
    reopened = compacted(tmp_path / "p")
    assert keyed_rows(reopened) == expected
    reopened.close()


def test_the_active_segment_and_the_head_are_never_cleaned(tmp_path):
    log = compacted(tmp_path / "p")
    writes = write_many(log, 120)
    head_start = log.active_segment.base_offset
    assert 0 < head_start < 120
    clean_pass(log, roll=False)
    rows = keyed_rows(log)
    # Everything in the active segment reads as written, superseded values included.
    assert [r for r in rows if r[0] >= head_start] == [w for w in writes if w[0] >= head_start]
    # Below it, each key keeps at most one value, never an older one than the head's.
    below = [r for r in rows if r[0] < head_start]
    assert len({k for _, k, _ in below}) == len(below)
    log.close()


def test_a_tombstone_gets_a_horizon_and_goes_once_delete_retention_ms_has_passed(tmp_path):
    clock = Clock()
    log = compacted(tmp_path / "p", clock, delete_retention_ms=DAY_MS)
    write_many(log, 30, keys=3)
    (tomb,) = write(log, [(b"k1", None)])
    first = clean_pass(log)
    assert (tomb[0], b"k1", None) in keyed_rows(log)
    holding = [b for b in all_batches(log) if b.base_offset <= tomb[0] <= b.last_offset]
    assert holding[0].has_delete_horizon
    assert holding[0].delete_horizon_ms == clock.now_ms + DAY_MS
    # Timestamps survive the horizon's rewrite of the base timestamp.
    assert [ts for off, ts, *_ in holding[0].records() if off == tomb[0]] == [clock.now_ms]
    clock.now_ms += DAY_MS - 1
    write(log, [(b"other", b"w")])   # something dirty, so a pass runs
    first = clean_pass(log, first)
    assert (tomb[0], b"k1", None) in keyed_rows(log)   # within the horizon
    clock.now_ms += 1
    write(log, [(b"other", b"x")])
    clean_pass(log, first)
    assert all(key != b"k1" for _, key, _ in keyed_rows(log))
    log.close()


def test_a_later_value_after_a_tombstone_is_kept(tmp_path):
    log = compacted(tmp_path / "p")
    write(log, [(b"a", b"1")])
    write(log, [(b"a", None)])
    (last,) = write(log, [(b"a", b"2")])
    clean_pass(log)
    assert keyed_rows(log) == [last]
    log.close()


def test_records_without_a_key_are_refused_by_a_compacted_log(tmp_path):
    log = compacted(tmp_path / "p")
    with pytest.raises(InvalidRecordError, match="without a key"):
        log.append(build_batch([b"v"], keys=[None], timestamp=1))
    log.close()


def test_a_full_offset_map_ends_the_pass_early_and_the_next_goes_on(tmp_path):
    log = compacted(tmp_path / "p", segment_bytes=100_000)
    writes = []
    for i in range(40):
        writes += write(log, [(b"key%03d" % (i * 10 + j), b"v") for j in range(10)])
    for i in range(40):
        writes += write(log, [(b"key%03d" % (i * 10 + j), b"w") for j in range(10)])
    log.roll()
    # 24-byte slots at a load factor of 0.9: room for 270 keys of the 400.
    first = clean_pass(log, max_map_bytes=24 * 300, roll=False)
    assert 0 < first < 800
    rows = keyed_rows(log)
    assert [r for r in rows if r[0] >= first] == [w for w in writes if w[0] >= first]
    passes = 1
    while first < 800:
        first = clean_pass(log, first, max_map_bytes=24 * 300, roll=False)
        passes += 1
    assert passes >= 2
    expected = sorted((off, key, value) for key, (off, value) in last_values(writes).items())
    assert keyed_rows(log) == expected
    log.close()


def test_segments_are_merged_up_to_segment_bytes(tmp_path):
    log = compacted(tmp_path / "p", segment_bytes=600)
    write_many(log, 300, keys=4)
    before = len(log.segments)
    assert before > 10
    first = clean_pass(log)
    # Groups are sized by their sources (as Kafka's): the second pass merges what the
    # first made small.
    write(log, [(b"k0", b"new")])
    clean_pass(log, first)
    after = len(log.segments)
    assert after < before / 3
    for segment in log.segments:
        assert segment.size <= 600
    log.close()


def test_min_compaction_lag_ms_holds_recent_segments_back(tmp_path):
    clock = Clock()
    log = compacted(tmp_path / "p", clock, min_compaction_lag_ms=60_000)
    old = write_many(log, 60, keys=3)
    clock.now_ms += 30_000
    log.roll()
    recent = write_many(log, 60, keys=3, prefix=b"r")
    clock.now_ms += 45_000   # old records are 75 s old, recent ones 45 s
    clean_pass(log)
    rows = keyed_rows(log)
    assert [r for r in rows if r[0] >= recent[0][0]] == recent
    assert [r for r in rows if r[0] < recent[0][0]] == sorted(
        (off, key, value) for key, (off, value) in last_values(old).items())
    log.close()


def test_the_dirtiest_log_is_chosen_and_ratio_decides(tmp_path):
    a = compacted(tmp_path / "a", min_cleanable_dirty_ratio=0.5)
    b = compacted(tmp_path / "b", min_cleanable_dirty_ratio=0.5)
    write_many(a, 100)
    write_many(b, 100)
    first_a = clean_pass(a)
    write_many(a, 10)
    a.roll()
    b.roll()
    now = a.clock_ms()
    measured_a, measured_b = log_to_clean(a, first_a, now), log_to_clean(b, None, now)
    assert measured_b.dirty_ratio == 1.0
    assert 0 < measured_a.dirty_ratio < 1.0
    assert filthiest([measured_a, measured_b]) is measured_b
    assert not log_to_clean(a, a.log_end_offset, now).qualifies
    a.close()
    b.close()


def test_max_compaction_lag_ms_makes_a_log_due_whatever_its_ratio(tmp_path):
    clock = Clock()
    log = compacted(tmp_path / "p", clock, min_cleanable_dirty_ratio=0.99,
                    max_compaction_lag_ms=60_000)
    write_many(log, 100)
    first = clean_pass(log)
    write_many(log, 3)
    log.roll()
    measured = log_to_clean(log, first, clock.now_ms)
    assert not measured.qualifies
    clock.now_ms += 60_001
    measured = log_to_clean(log, first, clock.now_ms)
    assert measured.needs_compaction_now and measured.qualifies
    log.close()


# --- transactions ---------------------------------------------------------------------


def txn_write(log, pid, pairs, seq, epoch=0):
    info = log.append(build_batch([v for _, v in pairs], keys=[k for k, _ in pairs],
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  is_transactional=True, timestamp=log.clock_ms()))
    return [(info.first_offset + i, k, v) for i, (k, v) in enumerate(pairs)]


def marker(log, pid, commit, epoch=0):
    return log.write_txn_marker(pid, epoch, 0, commit).first_offset


def test_aborted_data_goes_whatever_its_keys_and_its_marker_follows_later(tmp_path):
    clock = Clock()
    log = compacted(tmp_path / "p", clock, delete_retention_ms=1000)
    kept = write(log, [(b"a", b"1"), (b"b", b"1")])
    aborted = txn_write(log, 7, [(b"c", b"aborted"), (b"d", b"aborted")], 0)
    abort_at = marker(log, 7, commit=False)
    committed = txn_write(log, 7, [(b"e", b"committed")], 2)
    commit_at = marker(log, 7, commit=True)
    write(log, [(b"z", b"last")])
    assert log.aborted_transactions(0, log.log_end_offset)
    first = clean_pass(log)
    offsets = [off for off, *_ in keyed_rows(log)]
    assert not set(o for o, *_ in aborted) & set(offsets)
    assert {o for o, *_ in kept + committed} <= set(offsets)
    batches = {b.base_offset: b for b in all_batches(log)}
    # The pass saw the aborted data: the marker and its txn index entry stay this time.
    assert abort_at in batches and batches[abort_at].records_count == 1
    assert [t.last_offset for t in log.aborted_transactions(0, log.log_end_offset)] == [abort_at]
    # The commit marker stays while its transaction's data does.
    assert batches[commit_at].records_count == 1
    # A second pass sees no aborted data: the abort marker becomes a tombstone-like record
    # with a horizon, then goes; its entry leaves the txn index.
    write(log, [(b"y", b"1")])
    first = clean_pass(log, first)
    batches = {b.base_offset: b for b in all_batches(log)}
    assert batches[abort_at].has_delete_horizon
    clock.now_ms += 1000
    write(log, [(b"x", b"1")])
    clean_pass(log, first)
    batches = {b.base_offset: b for b in all_batches(log)}
    assert abort_at not in batches
    assert log.aborted_transactions(0, log.log_end_offset) == []
    assert batches[commit_at].records_count == 1
    log.close()


def test_nothing_at_or_after_the_last_stable_offset_is_cleaned(tmp_path):
    log = compacted(tmp_path / "p")
    write_many(log, 50, keys=2)
    open_txn = txn_write(log, 9, [(b"k0", b"in-flight")], 0)
    after = write_many(log, 50, keys=2, prefix=b"after")
    log.roll()
    assert log.last_stable_offset == open_txn[0][0]
    clean_pass(log, roll=False)
    rows = keyed_rows(log)
    assert [r for r in rows if r[0] >= open_txn[0][0]] == open_txn + after
    log.close()


def test_the_segment_holding_the_lso_is_left_whole(tmp_path):
    # Kafka's LogCleanerManager.calculateCleanableBytes takes the first uncleanable offset
    # down to the base of the segment holding it: nothing of that segment is cleaned, below
    # the LSO (a superseded a=1) or above it (an aborted transaction a read_uncommitted
    # reader there still sees). Cleaned up to the LSO itself, the pass removed both, and
    # gave the open transaction's tombstone a delete horizon before its commit.
    log = compacted(tmp_path / "p", segment_bytes=100_000)
    write(log, [(b"a", b"1")])
    write(log, [(b"a", b"2")])
    open_txn = txn_write(log, 9, [(b"t", None)], 0)
    txn_write(log, 7, [(b"k7", b"x")], 0)
    marker(log, 7, commit=False)
    write(log, [(b"b", b"1")])
    log.roll()
    assert log.last_stable_offset == open_txn[0][0] == 2
    measured = log_to_clean(log, None, log.clock_ms())
    assert (measured.first_uncleanable, measured.cleanable_bytes) == (0, 0)
    before = keyed_rows(log)
    clean_pass(log, roll=False)
    assert keyed_rows(log) == before
    assert all(b.delete_horizon_ms is None for b in all_batches(log))
    log.close()


def test_max_compaction_lag_ms_looks_at_every_dirty_sealed_segment(tmp_path):
    # Kafka's maxCompactionDelay: the earliest first-batch timestamp over every dirty sealed
    # segment, those past min.compaction.lag.ms's reach too, makes the log due whatever its
    # dirty ratio (when something is cleanable).
    minute = 60_000
    clock = Clock()
    now = clock()
    log = compacted(tmp_path / "p", clock, segment_bytes=100_000,
                    min_cleanable_dirty_ratio=0.99, min_compaction_lag_ms=10 * minute,
                    max_compaction_lag_ms=60 * minute)
    for i in range(40):
        write(log, [(b"s0-%d" % i, b"x" * 50)], timestamp=now - 40 * minute)
    log.roll()
    first_dirty = clean_pass(log, roll=False)
    write(log, [(b"a", b"1")], timestamp=now - 30 * minute)   # cleanable, not overdue
    write(log, [(b"a", b"2")], timestamp=now - 20 * minute)
    log.roll()
    write(log, [(b"b", b"1")], timestamp=now - 62 * minute)   # overdue first batch, in a
    write(log, [(b"b", b"2")], timestamp=now - 5 * minute)    # segment min lag holds back
    log.roll()
    write(log, [(b"c", b"1")])
    measured = log_to_clean(log, first_dirty, now)
    assert measured.dirty_ratio < 0.99 and measured.cleanable_bytes > 0
    assert measured.needs_compaction_now and measured.qualifies
    log.close()


def test_an_active_producers_last_batch_stays_as_an_empty_batch(tmp_path):
    log = compacted(tmp_path / "p")
    info = log.append(build_batch([b"old"], keys=[b"k"], producer_id=5, producer_epoch=0,
                                  timestamp=log.clock_ms(),
                                  base_sequence=0))
    write(log, [(b"k", b"new")])
    clean_pass(log)
    batches = [b for b in all_batches(log) if b.base_offset == info.first_offset]
    assert len(batches) == 1 and batches[0].records_count == 0
    assert (batches[0].producer_id, batches[0].base_sequence) == (5, 0)
    assert keyed_rows(log) == [(1, b"k", b"new")]
    log.close()
    # The producer state rebuilt from the log still knows the sequence: a retry of the
    # next batch is in order.
    reopened = compacted(tmp_path / "p")
    reopened.append(build_batch([b"next"], keys=[b"k"], producer_id=5, producer_epoch=0,
                                timestamp=log.clock_ms(),
                                base_sequence=1))
    reopened.close()


def test_a_batch_keeps_its_last_offset_and_so_its_producers_last_sequence(tmp_path):
    # Kafka's MemoryRecords.buildRetainedRecordsInto overrides the filtered batch's last
    # offset with the original's, "so the last sequence number from the batch remains":
    # producer 5's batch [a, b] (sequences 0-1) losing b keeps last offset 1, and a state
    # rebuilt from the log (no snapshot) takes a retry of 0-1 as a duplicate and 2 next.
    # Shrunk to a's offset, the rebuilt state said sequence 0: both were refused
    # OutOfOrderSequenceError.
    log = compacted(tmp_path / "p")
    log.append(build_batch([b"1", b"1"], keys=[b"a", b"b"], producer_id=5, producer_epoch=0,
                           base_sequence=0, timestamp=log.clock_ms()))
    write(log, [(b"b", b"2")])
    write(log, [(b"z", b"x")])
    clean_pass(log)
    (batch,) = [b for b in all_batches(log) if b.base_offset == 0]
    assert (batch.records_count, batch.last_offset) == (1, 1)
    log.close()
    for name in os.listdir(tmp_path / "p"):
        if name.endswith(files.SNAPSHOT_SUFFIX):   # unreadable: the state comes from the log
            with open(tmp_path / "p" / name, "wb") as f:
                f.write(b"garbage")
    reopened = compacted(tmp_path / "p")
    retry = reopened.append(build_batch([b"1", b"1"], keys=[b"a", b"b"], producer_id=5,
                                        producer_epoch=0, base_sequence=0,
                                        timestamp=log.clock_ms()))
    assert (retry.first_offset, retry.last_offset) == (0, 1)   # the original's offsets
    reopened.append(build_batch([b"3"], keys=[b"c"], producer_id=5, producer_epoch=0,
                                base_sequence=2, timestamp=log.clock_ms()))
    reopened.close()


def test_a_truncation_lowers_the_cleaner_checkpoint_to_the_active_segments_base(tmp_path):
    # Kafka's LogManager.truncateTo (maybeTruncateCleanerCheckpointToActiveSegmentBaseOffset):
    # left at 3 above a cut at 1, the leader's a=new written back at 1 counted as cleaned,
    # and the a=old it supersedes stayed through every later pass.
    from streamlog.storage.log_directory import LogDirectory
    from streamlog.structs import TopicPartition
    tp = TopicPartition("t", 0)
    logs = LogDirectory(str(tmp_path / "root"), clock_ms=Clock())
    log = logs.open_log(tp, config(cleanup_policy="compact", segment_bytes=100_000))
    for key in (b"a", b"b", b"c"):
        write(log, [(key, b"old")])
    logs.write_cleaner_checkpoint(tp, clean_pass(log))
    write(log, [(b"x", b"1")])
    assert logs.cleaner_checkpoint(tp) == 3
    log.start_replication(1)
    log.truncate_to(1)
    assert logs.cleaner_checkpoint(tp) == log.active_segment.base_offset == 0
    log.append(build_batch([b"new"], keys=[b"a"], timestamp=log.clock_ms(), base_offset=1),
               assign_offsets=False)
    log.set_high_watermark(2)
    clean_pass(log, logs.cleaner_checkpoint(tp))
    assert [v for _, k, v in keyed_rows(log) if k == b"a"] == [b"new"]
    logs.close()
    reopened = LogDirectory(str(tmp_path / "root"), clock_ms=Clock())
    assert reopened.cleaner_checkpoint(tp) == 0   # written to the file at the cut
    reopened.close()


# --- the swap, and what recovery makes of a crash in it ------------------------------------


def contents(log):
    return keyed_rows(log), log.log_end_offset


def clean_with(log, before_swap):
    """A pass over log during which before_swap() runs just before its swap (another
    thread's change to the log meanwhile); the pass's result."""
    measured = log_to_clean(log, None, log.clock_ms())
    swap = log.replace_segments

    def meanwhile(replacements, truncations):
        before_swap()
        return swap(replacements, truncations)
    log.replace_segments = meanwhile
    return clean_log(log, measured.first_dirty, measured.first_uncleanable, log.clock_ms(),
                     1 << 20)


def test_a_pass_that_lost_its_segment_to_retention_changes_nothing(tmp_path):
    log = compacted(tmp_path / "p")
    write_many(log, 100)
    log.roll()
    before = contents(log)

    def retention():
        log.increase_log_start_offset(log.segments[1].base_offset)
        assert log.delete_old_segments() == 1
    assert clean_with(log, retention) is None
    assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
    assert keyed_rows(log) == [r for r in before[0] if r[0] >= log.log_start_offset]
    log.close()


def test_a_truncation_during_a_pass_is_not_undone_by_its_swap(tmp_path):
    # A follower truncates its divergent tail, above the high watermark, while the cleaner
    # copies a sealed segment holding part of it (a pass stops at the high watermark, but
    # copies whole segments). The cut segment stays in the log, cut in place; swapping its
    # copy in would bring the cut records back under the next appends' offsets.
    log = compacted(tmp_path / "p")
    write_many(log, 200)
    log.roll()
    last_sealed = log.segments[-2]
    log.start_replication(last_sealed.base_offset + 3)
    cut = log.high_watermark + 3
    assert last_sealed.base_offset < cut < log.segments[-1].base_offset
    # The replica fetcher's thread cuts the log while the pass copies.
    assert clean_with(log, lambda: log.truncate_to(cut)) is None
    assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
    end = log.log_end_offset
    assert end <= cut
    log.append(build_batch([b"new"], keys=[b"kx"], timestamp=log.clock_ms(), base_offset=end),
               assign_offsets=False)   # the leader's record at the new end
    offsets = [o for b in all_batches(log) for o in range(b.base_offset, b.last_offset + 1)]
    assert offsets == sorted(set(offsets)) and offsets[-1] == end
    log.close()


def test_a_pass_whose_segment_retention_removes_while_it_is_copied_changes_nothing(
        tmp_path, monkeypatch):
    # Retention of a compact,delete log runs beside the cleaner: it may rename a segment
    # away after the pass read it and before the cleaned copy takes its modification time.
    log = compacted(tmp_path / "p")
    write_many(log, 100)
    log.roll()
    before = contents(log)
    measured = log_to_clean(log, None, log.clock_ms())
    import types
    import streamlog.storage.log_cleaner as log_cleaner_module
    first = log.segments[0]

    def retention_meanwhile(path, *args, **kwargs):
        # The cleaner's own os.stat (the cleaned copy takes its source's mtime).
        if path == first.path and log.log_start_offset < log.segments[1].base_offset:
            log.increase_log_start_offset(log.segments[1].base_offset)
            assert log.delete_old_segments() == 1
        return os.stat(path, *args, **kwargs)
    cleaner_os = types.SimpleNamespace(**{name: getattr(os, name) for name in dir(os)
                                          if not name.startswith("__")})
    cleaner_os.stat = retention_meanwhile
    monkeypatch.setattr(log_cleaner_module, "os", cleaner_os)
    clean_log(log, measured.first_dirty, measured.first_uncleanable, log.clock_ms(), 1 << 20)
    assert log.log_start_offset == log.segments[0].base_offset > 0   # retention did run
    assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
    # The groups retention left alone may be swapped in cleaned; nothing else changed: every
    # row kept is one that was there, and each key's last value is still there.
    after = keyed_rows(log)
    remaining = [r for r in before[0] if r[0] >= log.log_start_offset]
    assert set(after) <= set(remaining)
    assert last_values(after) == last_values(remaining)
    log.close()


class Crash(Exception):
    pass


def crash_during_swap(log, after_renames):
    """Run a pass whose swap stops (as a crash would) after `after_renames` file renames."""
    renames = [0]
    real_replace = os.replace
    real_rename = os.rename

    def counting(real):
        def rename(src, dst, *args, **kwargs):
            if renames[0] >= after_renames:
                raise Crash()
            renames[0] += 1
            return real(src, dst, *args, **kwargs)
        return rename
    os.replace, os.rename = counting(real_replace), counting(real_rename)
    try:
        clean_pass(log)
        return False
    except Crash:
        return True
    finally:
        os.replace, os.rename = real_replace, real_rename


@pytest.mark.parametrize("after_renames", range(0, 40, 3))
def test_a_crash_anywhere_in_the_swap_reopens_as_the_old_log_or_the_new(tmp_path, after_renames):
    d = tmp_path / "p"
    log = compacted(d)
    write_many(log, 150, keys=5)
    log.roll()
    before = contents(log)
    shutil.copytree(d, tmp_path / "twin")
    twin = compacted(tmp_path / "twin")
    clean_pass(twin)
    after = contents(twin)
    twin.close()
    crashed = crash_during_swap(log, after_renames)
    # The crash leaves the directory as it is (no close): reopen it as after a kill.
    copy = tmp_path / "copy"
    shutil.copytree(d, copy)
    reopened = compacted(copy)
    assert contents(reopened) in (before, after)
    if not crashed:
        assert contents(reopened) == after
    assert not [n for n in os.listdir(copy) if n.endswith((".cleaned", ".swap", ".deleted"))]
    reopened.close()
    log.close(flush=False, seal=False)


def test_the_loader_discards_swap_files_beside_cleaned_ones(tmp_path):
    d = tmp_path / "p"
    log = compacted(d)
    write_many(log, 100)
    log.roll()
    before = contents(log)
    log.close()
    base = files.offset_prefix(0)
    open(os.path.join(d, base + ".log.swap"), "wb").write(b"not a log")
    open(os.path.join(d, files.offset_prefix(50) + ".log.cleaned"), "wb").write(b"half")
    open(os.path.join(d, files.offset_prefix(70) + ".index.swap"), "wb").write(b"")
    reopened = compacted(d)
    assert contents(reopened) == before
    assert not [n for n in os.listdir(d) if n.endswith((".cleaned", ".swap"))]
    reopened.close()


def test_batches_of_a_cleaned_log_verify_offsets_increase_with_gaps(tmp_path):
    log = compacted(tmp_path / "p")
    write_many(log, 100, keys=3)
    clean_pass(log)
    previous = -1
    for segment in log.segments:
        for batch in iter_batches(open(segment.path, "rb").read()):
            batch.ensure_valid()
            assert batch.base_offset > previous
            previous = batch.last_offset
    log.close()


def test_a_commit_marker_stays_while_its_transactions_batch_does_even_emptied(tmp_path):
    log = compacted(tmp_path / "p")
    write_many(log, 10)
    log.append(build_batch([b"x"], keys=[b"k0"], producer_id=3, producer_epoch=1,
                           timestamp=log.clock_ms(),
                           base_sequence=0, is_transactional=True))
    at = log.write_txn_marker(3, 1, 0, True).first_offset
    write_many(log, 10)
    clean_pass(log)
    batches = {b.base_offset: b for b in all_batches(log)}
    assert batches[10].records_count == 0      # superseded, kept as the producer's last batch
    assert batches[at].records_count == 1
    log.close()


def test_a_pass_asked_to_stop_changes_nothing(tmp_path):
    log = compacted(tmp_path / "p")
    write_many(log, 200)
    log.roll()
    before = contents(log)
    measured = log_to_clean(log, None, log.clock_ms())
    asked = []

    def stop():   # let the map be built, then stop while groups are copied
        asked.append(True)
        return len(asked) > len(log.segments) + 1
    with pytest.raises(CleaningAborted):
        clean_log(log, measured.first_dirty, measured.first_uncleanable, log.clock_ms(),
                  1 << 20, stop=stop)
    assert contents(log) == before
    assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
    log.close()


def test_an_aborted_transaction_below_the_log_start_never_claims_later_committed_data(tmp_path):
    # Its data and ABORT marker lie in a segment below the log start, which the pass skips;
    # the producer's next, committed transaction must keep its value (and the key its
    # history until then).
    log = compacted(tmp_path / "p")
    txn_write(log, 7, [(b"c", b"aborted")], 0)
    marker(log, 7, commit=False)
    log.roll()
    first_kept = log.active_segment.base_offset
    write(log, [(b"a", b"old")])
    committed = txn_write(log, 7, [(b"a", b"committed")], 1)
    marker(log, 7, commit=True)
    write(log, [(b"z", b"1")])
    log.increase_log_start_offset(first_kept)   # retention has not run yet
    clean_pass(log)
    assert committed[0] in keyed_rows(log)
    log.close()
