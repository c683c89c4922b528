"""PartitionLog: offsets, rolling, reads and lookups at segment boundaries, retention, flushing."""
import os
import threading

import pytest

from streamlog.errors import (CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError,
                              ReadOnlyError, RecordBatchTooLargeError, RecordTooLargeError)
from streamlog.storage import files, log_config
from streamlog.storage.partition_log import PartitionLog
from streamlog.storage.record_batch import build_batch

from support import config, make_batch, read_all, segment_files, value_of


class FakeClock:
    def __init__(self, now_ms=1_000_000):
        self.now_ms = now_ms

    def __call__(self):
        return self.now_ms


def small_log(log_dir, clock=None, **overrides):
    settings = dict(segment_bytes=2000, index_interval_bytes=150)
    settings.update(overrides)
    return PartitionLog(log_dir, config(**settings), clock_ms=clock or FakeClock())


def fill(log, batches, records=5, **kwargs):
    infos = [log.append(make_batch(i, records, **kwargs)) for i in range(batches)]
    return infos


def test_offsets_are_dense_and_monotonic_across_rolls(log_dir):
    log = small_log(log_dir)
    infos = fill(log, 60, records=5)
    assert [i.first_offset for i in infos] == list(range(0, 300, 5))
    assert len(log.segments) > 5
    rows = read_all(log)
    assert [r[0] for r in rows] == list(range(300))
    assert [r[3] for r in rows] == [value_of(b, i) for b in range(60) for i in range(5)]
    # Each segment file is named by the first offset it holds.
    for segment, nxt in zip(log.segments, log.segments[1:] + (None,), strict=True):
        first = next(segment.log.batches()).base_offset
        assert first == segment.base_offset
        assert os.path.basename(segment.path) == files.offset_prefix(first) + ".log"
        if nxt is not None:
            last = list(segment.log.batches())[-1].last_offset
            assert last + 1 == nxt.base_offset
    log.close()


def test_read_from_every_offset_starts_at_the_batch_holding_it(log_dir):
    log = small_log(log_dir)
    fill(log, 40, records=4)
    bases = {s.base_offset for s in log.segments}
    assert len(bases) > 3
    for segment in log.segments[:-1]:  # sealed segments' indexes are sparse, so most lookups scan
        batches = len(list(segment.log.batches()))
        # One entry per batch but the first would be batches - 1 entries: fewer means skipped.
        assert 1 <= segment.offset_index.entries < batches - 1, (segment, batches)
    for offset in range(160):
        fetch = log.read(offset, max_bytes=200)
        first = fetch.batches[0]
        assert first.base_offset <= offset <= first.last_offset, offset
    for base in bases:  # exactly at segment boundaries
        assert log.read(base, 1).batches[0].base_offset == base
    log.close()


def test_read_honours_max_bytes_but_returns_one_whole_batch_at_least(log_dir):
    log = small_log(log_dir, segment_bytes=10**6)
    fill(log, 10, records=3)
    size = log.segments[0].log.size // 10
    assert len(log.read(0, size * 3).batches) == 3
    assert len(log.read(0, size * 3 - 1).batches) == 2
    one = log.read(0, 1)
    assert len(one.batches) == 1 and one.batches[0].size_in_bytes == size
    log.close()


def test_read_offsets_out_of_range(log_dir):
    log = small_log(log_dir)
    fill(log, 3, records=2)
    assert log.high_watermark == log.log_end_offset == 6
    assert log.read(6, 1000).batches == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(7, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    log.close()


def test_read_stops_at_max_offset(log_dir):
    log = small_log(log_dir, segment_bytes=10**6)
    fill(log, 5, records=2)
    assert [b.base_offset for b in log.read(0, 10**6, max_offset=6).batches] == [0, 2, 4]
    assert log.read(6, 10**6, max_offset=6).batches == []
    log.close()


def test_find_offset_by_timestamp_matches_a_scan_of_every_record(log_dir):
    log = small_log(log_dir)
    # Timestamps mostly grow but jump back now and then, as producers' clocks do.
    stamps = []
    for b in range(50):
        ts = [1000 + 10 * b + (7 if i == 1 else 0) - (25 if b % 9 == 0 else 0) for i in range(4)]
        log.append(build_batch([b"v"] * 4, timestamps=ts))
        stamps.extend(ts)
    assert len(log.segments) > 2
    targets = set(range(950, 1520, 3))
    for segment in log.segments:
        first_ts = next(segment.log.batches()).base_timestamp  # the segment's first record's
        largest = segment.largest_timestamp
        targets |= {first_ts - 1, first_ts, first_ts + 1, largest, largest + 1}
        if segment is not log.active_segment:  # lookups land between sparse entries
            assert segment.time_index.entries > 1, segment
    for target in sorted(targets):
        expected = next(((o, t) for o, t in enumerate(stamps) if t >= target), None)
        assert log.find_offset_by_timestamp(target) == expected, target
    log.close()


def test_a_read_only_view_knows_its_lazy_sealed_segments_largest_timestamps(log_dir):
    """A read-only view's sealed segments are lazy: their time index is read at first use.
    largest_timestamp read the entry count before that first look, found none, and fell back
    to the file's mtime; records stamped after their write time (a producer's clock, a
    replayed stream) then hid whole segments from a timestamp lookup."""
    log = small_log(log_dir)
    future = 4_102_444_800_000   # 2100-01-01, past any file's mtime
    for b in range(50):
        log.append(build_batch([b"v"] * 4, timestamps=[future + 4 * b + i for i in range(4)]))
    writer_largest = [s.largest_timestamp for s in log.segments]
    log.close()
    assert len(writer_largest) > 2
    view = PartitionLog(log_dir, config(segment_bytes=2000, index_interval_bytes=150),
                        clean_shutdown=True, readonly=True)
    assert [s.largest_timestamp for s in view.segments] == writer_largest
    assert view.find_offset_by_timestamp(future + 5) == (5, future + 5)
    view.close()


def test_roll_on_segment_bytes_index_full_and_segment_ms(log_dir):
    clock = FakeClock()
    log = small_log(log_dir, clock, segment_bytes=10**6, segment_index_bytes=8 * 3,
                    index_interval_bytes=0, segment_ms=10**9)
    fill(log, 10, records=1)
    # index.interval.bytes=0 indexes every batch after the first; 3 entries fill the index.
    assert len(log.segments) >= 3
    log.close()

    log2 = small_log(log_dir + "b", clock, segment_bytes=10**6, segment_ms=100)
    log2.append(make_batch(0, timestamp=5000))
    log2.append(make_batch(1, timestamp=5100))  # 100 ms after the first: not more than segment.ms
    assert len(log2.segments) == 1
    log2.append(make_batch(2, timestamp=5101))  # 101 ms: rolls
    assert [s.base_offset for s in log2.segments] == [0, 20]
    log2.close()


def test_each_segment_rolls_segment_jitter_ms_early_by_its_own_draw(log_dir, monkeypatch):
    # Kafka's LogConfig.randomSegmentJitter: one draw per segment, below the smaller of
    # segment.jitter.ms and segment.ms; shouldRoll compares against segment.ms - jitter.
    draws = []

    def randrange(bound):
        draws.append(bound)
        return 40
    monkeypatch.setattr(log_config.random, "randrange", randrange)
    log = small_log(log_dir, segment_bytes=10**6, segment_ms=100, segment_jitter_ms=1000)
    assert log.active_segment.roll_jitter_ms == 40 and draws == [100]
    log.append(make_batch(0, timestamp=5000))
    log.append(make_batch(1, timestamp=5060))  # 60 ms: not more than 100 - 40
    assert len(log.segments) == 1
    log.append(make_batch(2, timestamp=5061))  # 61 ms: rolls
    assert [s.base_offset for s in log.segments] == [0, 20]
    log.close()
    monkeypatch.undo()
    jitters = {config(segment_ms=100, segment_jitter_ms=30).random_segment_jitter()
               for _ in range(300)}
    assert jitters <= set(range(30)) and len(jitters) > 1
    assert config(segment_jitter_ms=0).random_segment_jitter() == 0


def test_an_empty_segment_rolls_for_offsets_its_indexes_cannot_hold(log_dir):
    # Kafka's LogSegment.shouldRoll checks canConvertToRelativeOffset even when empty.
    log = small_log(log_dir, cleanup_policy="compact", index_interval_bytes=0)
    far = 2**31 + 10
    for offset in (far, far + 1):
        log.append(make_batch(offset - far, records=1, base_offset=offset,
                              partition_leader_epoch=0), assign_offsets=False)
    assert [s.base_offset for s in log.segments] == [far]
    assert [row[0] for row in read_all(log, far)] == [far, far + 1]
    log.close()
    reopened = small_log(log_dir, cleanup_policy="compact")
    assert reopened.log_end_offset == far + 2
    assert "cut" not in reopened.recovery_report.summary()
    assert [row[0] for row in read_all(reopened, far)] == [far, far + 1]
    reopened.close()


def test_roll_keeps_the_sealed_segments_indexes_trimmed(log_dir):
    log = small_log(log_dir)
    fill(log, 30)
    for segment in log.segments[:-1]:
        assert os.path.getsize(segment.offset_index.path) == segment.offset_index.entries * 8
        assert os.path.getsize(segment.time_index.path) == segment.time_index.entries * 12
        # the closing time-index entry carries the segment's largest timestamp
        assert segment.time_index.last_entry()[0] == segment.largest_timestamp
    active = log.active_segment
    # The active index reserves one page, not segment.index.bytes: it grows as it fills.
    assert os.path.getsize(active.offset_index.path) == 4096
    assert active.offset_index.max_entries == (10 << 20) // 8
    log.close()


def test_a_roll_creates_only_the_new_log_and_each_index_file_waits_for_its_first_entry(log_dir):
    """A roll creates one file, the new `.log`. An index file is made when its first entry needs
    room (a page reserved), or at the seal with exactly its entries: before, every roll made
    three files and reserved two pages that the next roll trimmed back."""
    log = small_log(log_dir, index_interval_bytes=1 << 20)   # no entry is ever due
    log.append(make_batch(0, 5))
    log.roll()
    new = log.active_segment
    assert os.path.exists(new.path)
    assert not os.path.exists(new.offset_index.path) and not os.path.exists(new.time_index.path)
    log.append(make_batch(1, 5))
    assert not os.path.exists(new.offset_index.path)    # an append that adds no entry
    sealed = log.segments[0]
    assert os.path.getsize(sealed.offset_index.path) == 0
    assert os.path.getsize(sealed.time_index.path) == 12   # the final time entry alone
    assert sealed.time_index.last_entry()[0] == sealed.largest_timestamp
    expected = read_all(log)
    log.close()                                          # the seal makes the active's files
    assert os.path.getsize(new.offset_index.path) == 0
    assert os.path.getsize(new.time_index.path) == 12
    again = small_log(log_dir, index_interval_bytes=1 << 20)
    assert read_all(again) == expected and again.recovery_report.rebuilt_indexes == []
    again.close()


def test_a_crash_before_a_new_segments_first_index_entry_recovers_every_record(log_dir):
    log = small_log(log_dir)
    fill(log, 12)
    log.roll()
    log.append(make_batch(99, 5))                        # in a segment with no index file yet
    assert not os.path.exists(log.active_segment.offset_index.path)
    expected = read_all(log)
    log.flush()
    # No close: as after kill -9, the next open recovers from the recovery point.
    reopened = PartitionLog(log_dir, config(segment_bytes=2000, index_interval_bytes=150),
                            recovery_point=0)
    assert read_all(reopened) == expected
    # Recovery creates no index file the segment does not need yet (the open after a crash
    # would otherwise make two files a partition); the close seals it, making both.
    active = reopened.active_segment
    assert not os.path.exists(active.offset_index.path)
    reopened.close()
    assert os.path.getsize(active.offset_index.path) == 0
    assert os.path.getsize(active.time_index.path) == 12
    log.close()


def test_appends_after_a_recovery_reach_the_time_index_at_close(log_dir):
    """Recovery rebuilds and seals the active segment; the log then appends to it. Its close
    must write the final time entry again, or the next clean open takes the segment's largest
    timestamp from before those appends and a timestamp lookup skips them (found by the kill -9
    cycles: offsets_for_times answered 106 for records from 92 on)."""
    log = small_log(log_dir, index_interval_bytes=1 << 20)
    for b in range(3):
        log.append(make_batch(b, 5, timestamp=1_000 + b))
    log.flush()
    log.close()
    recovered = PartitionLog(log_dir, config(segment_bytes=2000, index_interval_bytes=1 << 20),
                             recovery_point=0)           # unclean: rebuilt, then appended to
    for b in range(3, 6):
        recovered.append(make_batch(b, 5, timestamp=1_000 + b))
    recovered.close()
    again = PartitionLog(log_dir, config(segment_bytes=2000, index_interval_bytes=1 << 20),
                         clean_shutdown=True)
    assert again.active_segment.largest_timestamp == 1_005
    assert again.find_offset_by_timestamp(1_004)[0] == 20
    again.close()


def test_retention_ms_deletes_only_whole_expired_segments(log_dir):
    clock = FakeClock(now_ms=10_000_000)
    log = small_log(log_dir, clock, retention_ms=5000)
    for b in range(70):
        log.append(make_batch(b, records=5, timestamp=1_000_000 + b * 1000))
    segments = log.segments
    assert len(segments) > 4
    clock.now_ms = segments[2].largest_timestamp + 5001  # the first three segments are expired
    expected_start = segments[3].base_offset
    before = read_all(log)
    assert log.delete_old_segments() == 3
    assert log.log_start_offset == expected_start
    assert log.segments[0] is segments[3]
    assert read_all(log) == [r for r in before if r[0] >= expected_start]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(expected_start - 1, 1000)
    log.close()


def test_retention_stops_at_the_first_segment_that_must_stay(log_dir):
    clock = FakeClock(now_ms=10**9)
    log = small_log(log_dir, clock, retention_ms=1000)
    old, new = 1000, 10**9
    for b in range(30):  # second segment is "new", later ones old again
        log.append(make_batch(b, timestamp=new if 6 <= b < 12 else old))
    assert len(log.segments) > 3
    deleted = log.delete_old_segments()
    assert deleted >= 1
    assert log.segments[0].largest_timestamp == new  # stopped there, old ones behind it stay
    log.close()


def test_retention_bytes_never_drops_below_the_limit(log_dir):
    log = small_log(log_dir, retention_bytes=5000)
    fill(log, 80)
    total = log.size_in_bytes
    n = log.delete_old_segments()
    assert n > 0
    assert log.size_in_bytes >= 5000
    assert log.size_in_bytes - 5000 < log.segments[0].size  # one more deletion would go below
    assert sum(1 for _ in read_all(log)) == log.high_watermark - log.log_start_offset
    assert total > log.size_in_bytes
    log.close()


def test_retention_of_everything_rolls_an_empty_active_segment(log_dir):
    clock = FakeClock(now_ms=10**9)
    log = small_log(log_dir, clock, retention_ms=1)
    fill(log, 10)
    end = log.log_end_offset
    log.delete_old_segments()
    assert [s.base_offset for s in log.segments] == [end]
    assert log.log_start_offset == end == log.log_end_offset
    assert log.append(make_batch(99)).first_offset == end
    log.close()


def test_deleted_segments_linger_as_dot_deleted_until_the_delay(log_dir):
    clock = FakeClock(now_ms=10**9)
    log = small_log(log_dir, clock, retention_ms=1, file_delete_delay_ms=60_000)
    fill(log, 20)
    log.delete_old_segments()
    names = os.listdir(log_dir)
    assert any(n.endswith(".log.deleted") for n in names)
    assert log.delete_pending_files(now_ms=clock.now_ms + 59_999) == 0
    assert log.delete_pending_files(now_ms=clock.now_ms + 60_000) > 0
    assert not any(n.endswith(".deleted") for n in os.listdir(log_dir))
    log.close()


def test_log_start_offset_moves_up_and_old_segments_follow(log_dir):
    log = small_log(log_dir, retention_ms=-1)
    fill(log, 30)
    target = log.segments[2].base_offset + 1
    log.increase_log_start_offset(target)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 100)
    assert read_all(log)[0][0] == target
    assert log.delete_old_segments() == 2  # segments wholly below the start go
    assert log.log_start_offset == target
    with pytest.raises(OffsetOutOfRangeError):
        log.increase_log_start_offset(log.high_watermark + 1)
    log.close()


def test_batches_above_limits_are_refused_and_nothing_is_written(log_dir):
    log = small_log(log_dir, max_message_bytes=500)
    log.append(make_batch(0))
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        log.append(build_batch([b"x" * 600], timestamp=1))
    log2 = small_log(log_dir + "2", segment_bytes=300, max_message_bytes=10**6)
    with pytest.raises(RecordBatchTooLargeError):
        log2.append(build_batch([b"x" * 400], timestamp=1))
    # Above both limits: max.message.bytes is Kafka's first check
    # (UnifiedLog.analyzeAndValidateRecords, before append's segment size check), and its
    # MESSAGE_TOO_LARGE is what lets a producer split the batch.
    log3 = small_log(log_dir + "3", segment_bytes=300, max_message_bytes=200)
    with pytest.raises(RecordTooLargeError, match="max.message.bytes") as refused:
        log3.append(build_batch([b"x" * 400], timestamp=1))
    assert type(refused.value) is RecordTooLargeError
    assert log.log_end_offset == 10 and log2.log_end_offset == 0 == log3.log_end_offset
    log.close()
    log2.close()
    log3.close()


def test_corrupt_or_partial_input_is_refused_whole(log_dir):
    log = small_log(log_dir)
    good = bytes(make_batch(0))
    bad = bytearray(make_batch(1))
    bad[-1] ^= 0xFF
    with pytest.raises(InvalidRecordError, match="CRC"):
        log.append(good + bytes(bad))
    with pytest.raises(InvalidRecordError, match="trailing"):
        log.append(good + b"\x00" * 20)
    assert log.log_end_offset == 0 and log.active_segment.size == 0
    log.close()


def test_several_batches_in_one_append_get_consecutive_offsets(log_dir):
    log = small_log(log_dir)
    data = b"".join(bytes(make_batch(i, records=3)) for i in range(4))
    info = log.append(data)
    assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == \
        (0, 11, 4, 12)
    assert [r[0] for r in read_all(log)] == list(range(12))
    log.close()


def test_log_append_time_topic_stamps_every_record(log_dir):
    clock = FakeClock(now_ms=424242)
    log = small_log(log_dir, clock, message_timestamp_type="LogAppendTime")
    info = log.append(build_batch([b"a", b"b"], timestamps=[1, 2]))
    assert info.log_append_time == 424242
    assert [r[1] for r in read_all(log)] == [424242, 424242]
    log.close()


def test_flush_advances_the_recovery_point_and_flush_messages_forces_it(log_dir):
    log = small_log(log_dir)
    fill(log, 3)
    assert log.recovery_point == 0
    assert log.flush() == log.log_end_offset == 15
    log.close()
    log2 = small_log(log_dir + "2", flush_messages=10)
    log2.append(make_batch(0, records=5))
    assert log2.recovery_point == 0
    log2.append(make_batch(1, records=5))
    assert log2.recovery_point == 10
    log2.close()


def test_the_flushers_pass_flushes_what_a_roll_sealed_before_flush_ms(log_dir):
    # Kafka's roll schedules flushUptoOffsetExclusive(new base) (UnifiedLog.roll).
    clock = FakeClock()
    log = small_log(log_dir, clock=clock, flush_ms=3_600_000)
    fill(log, 2)
    assert len(log.segments) == 1
    assert not log.maybe_flush_on_time()      # nothing sealed, flush.ms far off
    fill(log, 40)
    assert len(log.segments) > 2
    assert log.recovery_point == 0
    assert log.maybe_flush_on_time()
    assert log.recovery_point == log.log_end_offset >= log.segments[-1].base_offset
    assert not log.maybe_flush_on_time()
    log.close()


def test_a_readonly_reader_refuses_a_sealed_segment_cut_inside_a_batch(log_dir):
    """Only the newest segment may end inside a batch (one being written): a sealed one that
    does was cut short, and reading on in the next segment would skip records unseen."""
    log = small_log(log_dir)
    fill(log, 40)
    log.close()
    first, newest = segment_files(log_dir)[0], segment_files(log_dir)[-1]
    torn = bytearray(make_batch(40, records=5))
    torn[0:8] = (200).to_bytes(8, "big")           # as the writer patches it, at the log end
    with open(newest, "ab") as f:
        f.write(torn[:-7])                          # a batch still being written: tolerated
    reader = PartitionLog(log_dir, config(segment_bytes=2000), readonly=True)
    assert [r[0] for r in read_all(reader)] == list(range(200))
    reader.close()
    with open(first, "r+b") as f:
        f.truncate(os.path.getsize(first) - 7)   # inside the sealed segment's last batch
    reader = PartitionLog(log_dir, config(segment_bytes=2000), readonly=True)
    with pytest.raises(CorruptRecordError, match="ends inside a record batch"):
        read_all(reader)
    reader.close()


def test_a_readonly_timestamp_lookup_refuses_a_sealed_segment_cut_inside_a_batch(log_dir):
    """ListOffsets by time reads the same files as a fetch: the same cut sealed segment is the
    same CorruptRecordError (it was a NameError on this path)."""
    log = small_log(log_dir)
    fill(log, 40)
    log.close()
    first = segment_files(log_dir)[0]
    with open(first, "r+b") as f:
        f.truncate(os.path.getsize(first) - 7)   # inside the sealed segment's last batch
    reader = PartitionLog(log_dir, config(segment_bytes=2000), readonly=True)
    with pytest.raises(CorruptRecordError, match="ends inside a record batch"):
        reader.find_offset_by_timestamp(1_000_010)   # the torn batch's own timestamp
    reader.close()


def test_reopen_after_close_reads_the_same(log_dir):
    log = small_log(log_dir)
    fill(log, 25)
    before = read_all(log)
    log.close()
    again = small_log(log_dir)
    assert read_all(again) == before
    assert again.append(make_batch(100)).first_offset == before[-1][0] + 1
    again.close()


def test_readonly_follower_sees_appends_and_rolls(log_dir):
    log = small_log(log_dir)
    fill(log, 5)
    reader = PartitionLog(log_dir, config(segment_bytes=2000), readonly=True)
    assert [r[0] for r in read_all(reader)] == list(range(25))
    for b in range(5, 40):
        log.append(make_batch(b, records=5))
    reader.refresh()
    assert [r[0] for r in read_all(reader)] == list(range(200))
    assert read_all(reader) == read_all(log)
    assert len(reader.segments) == len(log.segments) > 1
    with pytest.raises(ReadOnlyError):
        reader.append(make_batch(0))
    reader.close()
    log.close()


def test_concurrent_appenders_and_readers_lose_and_duplicate_nothing(log_dir):
    log = small_log(log_dir, segment_bytes=20_000)
    writers, per_writer = 6, 60
    errors = []
    done = threading.Event()

    def write(w):
        try:
            for b in range(per_writer):
                log.append(build_batch([b"w%d-b%d-r%d" % (w, b, r) for r in range(3)],
                                       timestamp=1))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def read():
        try:
            while not done.is_set():
                rows = read_all(log)
                offsets = [r[0] for r in rows]
                assert offsets == list(range(len(offsets)))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in readers + threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert errors == []
    values = [r[3] for r in read_all(log)]
    assert len(values) == len(set(values)) == writers * per_writer * 3
    for w in range(writers):  # each writer's batches appear in its own order
        mine = [v for v in values if v.startswith(b"w%d-" % w)]
        assert mine == [b"w%d-b%d-r%d" % (w, b, r) for b in range(per_writer) for r in range(3)]
    log.close()


def test_segment_files_exist_for_each_segment(log_dir):
    log = small_log(log_dir)
    fill(log, 30)
    assert len(segment_files(log_dir, ".log")) == len(log.segments)
    assert len(segment_files(log_dir, ".index")) == len(log.segments)
    assert len(segment_files(log_dir, ".timeindex")) == len(log.segments)
    log.close()


def test_reads_into_a_reused_buffer_return_the_same_records(log_dir):
    log = small_log(log_dir)
    fill(log, 40)
    buffer = bytearray()
    offset, got = 0, []
    while offset < log.high_watermark:
        for batch in log.read(offset, 700, buffer=buffer).batches:
            got.extend((o, t, k, v) for o, t, k, v, _ in batch.records())
            offset = batch.next_offset
    assert got == read_all(log)
    log.close()


def test_fetched_batches_outlive_retention_and_close(log_dir, monkeypatch):
    """Fetches are zero-copy views of mapped files: they must stay readable after the
    segment they came from is deleted and the log is closed. (Reads below 256 KiB copy
    instead, see FileRecords.view: the bound is lowered to make these small reads views.)"""
    from streamlog.storage import file_records
    monkeypatch.setattr(file_records, "_MIN_VIEW_BYTES", 0)
    clock = FakeClock(now_ms=10**9)
    log = small_log(log_dir, clock, retention_ms=1, file_delete_delay_ms=0)
    fill(log, 30)
    first = log.read(0, 10_000).batches
    expected = [r for b in first for r in b.records()]
    assert isinstance(first[0].buf, memoryview)
    log.delete_old_segments()
    log.delete_pending_files()
    assert not os.path.exists(os.path.join(log_dir, files.log_file("", 0)))
    log.close()
    assert [r for b in first for r in b.records()] == expected


def spy_index_flushes(monkeypatch):
    """The base offsets of the segments whose indexes are flushed (msynced), in order."""
    from streamlog.storage.segment import LogSegment
    flushed = []
    real = LogSegment.flush_indexes

    def recording(segment):
        flushed.append(segment.base_offset)
        return real(segment)
    monkeypatch.setattr(LogSegment, "flush_indexes", recording)
    return flushed


def test_a_flush_msyncs_the_indexes_below_the_last_segment_and_not_the_last_ones(
        log_dir, monkeypatch):
    # An acks="all" flush waits on the log's fdatasync only: the last segment's indexes are
    # rebuilt by an unclean open (log_loader step 4), so msyncing them on every flush would
    # only add two system calls to each acknowledged batch.
    log = small_log(log_dir)
    fill(log, 40)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    flushed = spy_index_flushes(monkeypatch)
    assert log.flush() == log.log_end_offset
    assert flushed == bases[:-1]
    flushed.clear()
    log.append(make_batch(99, 5))
    log.flush()
    assert flushed == []   # only the last segment changed
    log.close()


def test_a_checkpointed_recovery_point_has_durable_indexes_below_its_segment(
        log_dir, monkeypatch):
    # Recovery trusts the indexes of every segment below the one holding the checkpointed
    # recovery point. A flush that left the then-last segment's indexes unsynced, then a roll,
    # puts the recovery point at the next segment's base: the checkpoint syncs them first.
    log = small_log(log_dir)
    fill(log, 3)
    log.flush()
    first = log.segments[-1].base_offset
    log.roll()
    assert log.recovery_point == log.segments[-1].base_offset > first
    flushed = spy_index_flushes(monkeypatch)
    assert log.checkpoint_recovery_point() == log.recovery_point
    assert flushed == [first]
    flushed.clear()
    assert log.checkpoint_recovery_point() == log.recovery_point
    assert flushed == []   # once is enough
    log.close()


def test_a_flush_that_straddles_a_truncation_does_not_move_the_recovery_point_past_it(
        log_dir, monkeypatch):
    # A follower's truncation may run while a flush waits on the disk: what the flush
    # fsynced above the cut is gone, and what is appended there next is not fsynced.
    from streamlog.storage.segment import LogSegment
    log = small_log(log_dir)
    fill(log, 3)
    real = LogSegment.flush_log

    def truncating(segment):
        monkeypatch.setattr(LogSegment, "flush_log", real)
        log.truncate_to(5)
        return real(segment)
    monkeypatch.setattr(LogSegment, "flush_log", truncating)
    log.flush()
    assert log.log_end_offset == 5
    assert log.recovery_point <= 5
    log.flush()
    assert log.recovery_point == 5
    log.close()


def test_flush_to_fsyncs_only_when_the_offset_is_not_durable_yet(log_dir, monkeypatch):
    # The flusher's group commit asks for the offsets its waiters need: a round whose
    # waiters an earlier flush covered (another thread's) costs no fdatasync.
    from streamlog.storage.segment import LogSegment
    log = small_log(log_dir)
    fill(log, 3)
    synced = []
    real = LogSegment.flush_log
    monkeypatch.setattr(LogSegment, "flush_log",
                        lambda segment: (synced.append(segment.base_offset), real(segment)))
    assert log.flush_to(10) == 15
    assert synced
    synced.clear()
    assert log.flush_to(15) == 15 and log.flush_to(3) == 15
    assert synced == []
    log.append(make_batch(9, 5))
    assert log.flush_to(16) == 20
    assert synced
    log.close()


def test_a_client_batch_marked_log_append_time_is_refused_where_kafka_refuses_it(tmp_path):
    # Kafka's LogValidator.validateTimestamp: a produced batch marked LogAppendTime is
    # INVALID_TIMESTAMP on a LogAppendTime topic, whatever its time; on a CreateTime topic its
    # records read as its maxTimestamp, which is checked as a create time (the topic's
    # window) and refused only when it is NO_TIMESTAMP. The log's own writers are not
    # checked: a coordinator never marks a batch so, and a replica copies its leader's.
    from streamlog.errors import InvalidTimestampError
    from streamlog.storage.producer_state import COORDINATOR
    from streamlog.storage.record_batch import LOG_APPEND_TIME
    clock = FakeClock()

    def marked(timestamp, base_offset=0):
        return build_batch([b"v", b"w"], timestamp=timestamp, timestamp_type=LOG_APPEND_TIME,
                           base_offset=base_offset)
    appended = small_log(str(tmp_path / "appended-0"), clock,
                         message_timestamp_type="LogAppendTime")
    created = small_log(str(tmp_path / "created-0"), clock,
                        message_timestamp_before_max_ms=60_000)
    for log, timestamp in ((appended, clock.now_ms), (appended, -1), (created, -1),
                           (created, clock.now_ms - 3_600_000)):
        with pytest.raises(InvalidTimestampError):
            log.append(marked(timestamp))
    assert appended.log_end_offset == created.log_end_offset == 0
    assert created.append(marked(clock.now_ms)).last_offset == 1
    appended.append(marked(-1), origin=COORDINATOR)
    appended.append(marked(-1, base_offset=2), assign_offsets=False)
    assert appended.log_end_offset == 4
    appended.close()
    created.close()


def test_a_client_batch_marked_log_append_time_is_stored_as_create_time(log_dir):
    # Kafka's LogValidator (assignOffsetsNonCompressed, and the in-place compressed path)
    # calls setMaxTimestamp(topic's timestamp type, ...) on every batch it takes: a batch
    # marked LogAppendTime that a CreateTime topic accepts is stored marked CreateTime,
    # with its maxTimestamp kept and its CRC recomputed.
    from streamlog.storage.record_batch import CREATE_TIME, LOG_APPEND_TIME, RecordBatch
    clock = FakeClock()
    log = small_log(log_dir, clock)
    log.append(build_batch([b"v", b"w"], timestamp=clock.now_ms - 5,
                           timestamp_type=LOG_APPEND_TIME))
    stored = RecordBatch(bytes(log.read(0).batches[0].view()))
    assert (stored.timestamp_type, stored.max_timestamp) == (CREATE_TIME, clock.now_ms - 5)
    assert stored.is_valid()
    log.close()


def test_a_client_control_batch_is_invalid_record_before_its_timestamps_are_checked(tmp_path):
    # Kafka's LogValidator runs validateBatch (a client's control batch: InvalidRecordException)
    # before validateRecord (each record's timestamp: INVALID_TIMESTAMP), so a marker from a
    # client is INVALID_RECORD whatever its time.
    from streamlog.storage.record_batch import LOG_APPEND_TIME
    clock = FakeClock()
    recent = small_log(str(tmp_path / "recent-0"), clock, message_timestamp_before_max_ms=60_000)
    appended = small_log(str(tmp_path / "appended-0"), clock,
                         message_timestamp_type="LogAppendTime")
    for log, timestamp_type in ((recent, 0), (appended, LOG_APPEND_TIME)):
        marker = build_batch([b"marker"], keys=[b"control"], timestamp=clock.now_ms - 3_600_000,
                             timestamp_type=timestamp_type, is_control=True)
        with pytest.raises(InvalidRecordError, match="control batch"):
            log.append(marker)
        log.close()


def test_a_timestamp_refusal_names_only_the_bounds_the_topic_sets(tmp_path):
    # A side of the window left at its default (Long.MAX ms) bounds nothing: naming now plus
    # it would show a bound no timestamp can reach.
    from streamlog.errors import InvalidTimestampError
    clock = FakeClock()
    cases = [(dict(message_timestamp_before_max_ms=60_000), clock.now_ms - 3_600_000,
              f"at least {clock.now_ms - 60_000}"),
             (dict(message_timestamp_after_max_ms=60_000), clock.now_ms + 3_600_000,
              f"at most {clock.now_ms + 60_000}"),
             (dict(message_timestamp_before_max_ms=10, message_timestamp_after_max_ms=20),
              clock.now_ms + 30, f"within [{clock.now_ms - 10}, {clock.now_ms + 20}]")]
    for i, (window, timestamp, allowed) in enumerate(cases):
        log = small_log(str(tmp_path / f"t-{i}"), clock, **window)
        with pytest.raises(InvalidTimestampError) as refused:
            log.append(build_batch([b"v"], timestamp=timestamp))
        assert f"should be {allowed} (" in str(refused.value)
        assert refused.value.record_errors == ((0, f"timestamp {timestamp} should be {allowed}"),)
        log.close()


def test_a_read_of_a_negative_size_is_refused_where_there_is_something_to_read(log_dir):
    # Kafka's LogSegment.read: IllegalArgumentException for a size below 0; LocalLog.read
    # answers a read at the end of what is visible empty before any segment is read.
    log = small_log(log_dir)
    fill(log, 2)
    with pytest.raises(ValueError, match="-1 bytes"):
        log.read(0, -1)
    assert log.read(log.high_watermark, -1).batches == []
    log.close()
