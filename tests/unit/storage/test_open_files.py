"""The bound on open files (storage/open_files.py): segments release their descriptors and maps
when pushed out of the root's bound, reopen them at their next use, and never lose state."""
import os
import threading

import pytest

from streamlog.errors import KafkaStorageError
from streamlog.storage import open_files
from streamlog.storage.open_files import OpenSegments, storage_error
from streamlog.storage.partition_log import PartitionLog

from support import config, make_batch, read_all

SETTINGS = dict(segment_bytes=2000, index_interval_bytes=150)


def descriptors_under(directory):
    """How many of this process's descriptors point into directory."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(directory):
                count += 1
        except OSError:
            pass
    return count


def maps_under(directory):
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if directory in line)


def test_a_bound_holds_across_many_logs_and_every_record_reads_back(tmp_path):
    bound = OpenSegments(12)
    logs = [PartitionLog(str(tmp_path / f"t-{p}"), config(**SETTINGS), open_files=bound)
            for p in range(20)]
    for i in range(30):
        for log in logs:
            log.append(make_batch(i, 5))
    assert all(len(log.segments) >= 3 for log in logs)
    assert bound.held <= 12 and bound.evictions > 0
    assert descriptors_under(str(tmp_path)) <= 12
    assert maps_under(str(tmp_path)) <= bound.max_maps
    for log in logs:
        assert [r[0] for r in read_all(log)] == list(range(150))
    assert descriptors_under(str(tmp_path)) <= 12
    for log in logs:
        log.close()
    assert descriptors_under(str(tmp_path)) == 0 and bound.held == 0


def test_an_evicted_active_segment_appends_and_recovers_as_if_it_never_closed(tmp_path):
    bound = OpenSegments(1)   # one segment at a time
    a = PartitionLog(str(tmp_path / "a-0"), config(**SETTINGS), open_files=bound)
    b = PartitionLog(str(tmp_path / "b-0"), config(**SETTINGS), open_files=bound)
    for i in range(8):       # alternate: each append pushes the other log's active segment out
        a.append(make_batch(i, 5))
        b.append(make_batch(100 + i, 5))
    assert bound.evictions >= 14
    assert [r[3] for r in read_all(a)] == [r[3] for r in read_all(a)]
    index_entries = a.active_segment.offset_index.entries
    assert index_entries > 0   # the index kept its entries through the releases
    a.flush()
    # A "crash": the next open recovers from the recovery point and finds the same log.
    again = PartitionLog(str(tmp_path / "a-0"), config(**SETTINGS), recovery_point=0)
    assert read_all(again) == read_all(a)
    assert again.active_segment.offset_index.entries == index_entries
    for log in (a, b, again):
        log.close()


def test_a_clean_open_opens_only_the_last_segment(tmp_path):
    directory = str(tmp_path / "t-0")
    log = PartitionLog(directory, config(**SETTINGS))
    for i in range(40):
        log.append(make_batch(i, 5))
    segments = len(log.segments)
    log.close()
    bound = OpenSegments()
    reopened = PartitionLog(directory, config(**SETTINGS), clean_shutdown=True, open_files=bound)
    assert segments >= 4 and bound.stats()["segments_open"] == 1
    # The last segment's log only: its indexes were read for the check and the tail, not
    # mapped, as nothing has appended yet.
    assert descriptors_under(directory) == 1 and maps_under(directory) == 0
    reopened.append(make_batch(40, 5))   # the unmapped indexes take appends
    assert len(read_all(reopened)) == 205
    assert bound.stats()["segments_open"] == segments
    reopened.close()


def test_a_pinned_segment_is_never_released_under_its_user(tmp_path):
    """Readers pin; eviction skips pinned segments, so threads reading many logs under a bound
    of one segment all read every record."""
    bound = OpenSegments(1)
    logs = []
    for p in range(6):
        log = PartitionLog(str(tmp_path / f"t-{p}"), config(**SETTINGS), open_files=bound)
        for i in range(20):
            log.append(make_batch(i, 5))
        logs.append(log)
    errors = []

    def reader(log):
        try:
            for _ in range(20):
                assert len(read_all(log)) == 100
        except Exception as exc:  # reported below
            errors.append(exc)
    threads = [threading.Thread(target=reader, args=(log,)) for log in logs for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for log in logs:
        log.close()


def test_running_out_of_descriptors_is_a_typed_error_naming_the_limit_and_the_fix():
    import errno
    error = storage_error(OSError(errno.EMFILE, "Too many open files"), "cannot open log file x")
    assert isinstance(error, KafkaStorageError)
    message = str(error)
    assert message.startswith("cannot open log file x: [Errno 24] Too many open files")
    assert "RLIMIT_NOFILE" in message and "max.open.files" in message
    assert "ulimit -n" in message
    other = storage_error(OSError(errno.EIO, "I/O error"), "cannot read y")
    assert str(other) == "cannot read y: [Errno 5] I/O error"


def test_the_default_bound_is_half_the_soft_limit_within_its_range(monkeypatch):
    monkeypatch.setattr(open_files.resource, "getrlimit", lambda which: (1024, 4096))
    assert open_files.default_max_open_files() == 512
    monkeypatch.setattr(open_files.resource, "getrlimit", lambda which: (40, 4096))
    assert open_files.default_max_open_files() == 32
    monkeypatch.setattr(open_files.resource, "getrlimit", lambda which: (10**6, 10**6))
    assert open_files.default_max_open_files() == 16_000
    # The maps the default allows stay under Linux's default vm.max_map_count (65,530).
    assert OpenSegments(16_000).max_maps <= 48_000


@pytest.mark.skipif(not open_files.MAPS_HOLD_NO_DESCRIPTOR, reason="maps through Python's mmap")
def test_a_writable_segment_holds_one_descriptor_whatever_it_maps(tmp_path):
    """The bound counts one descriptor per open segment: the index maps (made through libc,
    storage/mapping.py) hold none, where Python's mmap would keep a duplicate of each."""
    directory = str(tmp_path / "t-0")
    bound = OpenSegments()
    log = PartitionLog(directory, config(**SETTINGS), open_files=bound)
    for i in range(6):
        log.append(make_batch(i, 5))   # past index_interval_bytes: both indexes mapped
    assert log.active_segment.offset_index.entries > 0
    assert maps_under(directory) >= 2
    assert descriptors_under(directory) == 1 == bound.stats()["descriptors"]
    log.close()


def test_a_bound_below_one_is_refused():
    with pytest.raises(ValueError, match="max.open.files"):
        OpenSegments(0)


def test_a_clean_open_looks_at_no_sealed_segment_until_it_is_used(tmp_path, monkeypatch):
    """A sealed segment is made from the directory listing alone (no stat, no file object),
    so opening 200,000 of them costs what listing them costs; its first use makes the rest."""
    from streamlog.storage import file_records
    directory = str(tmp_path / "t-0")
    log = PartitionLog(directory, config(**SETTINGS))
    for i in range(40):
        log.append(make_batch(i, 5))
    expected = read_all(log)
    segments = len(log.segments)
    log.close()
    made = []
    real_init = file_records.FileRecords.__init__

    def counting_init(self, path, *args, **kwargs):
        made.append(path)
        real_init(self, path, *args, **kwargs)

    monkeypatch.setattr(file_records.FileRecords, "__init__", counting_init)
    reopened = PartitionLog(directory, config(**SETTINGS), clean_shutdown=True)
    assert segments >= 4 and made == [reopened.active_segment.path]
    assert read_all(reopened) == expected     # every sealed segment made at its first read
    assert len(made) == segments
    reopened.close()


def test_threads_making_lazy_segments_at_once_share_one_set_of_files(tmp_path):
    """Many readers touch the same lazy segments first at the same time: each segment makes
    its file objects once (no descriptor is left behind by a losing twin)."""
    directory = str(tmp_path / "t-0")
    log = PartitionLog(directory, config(**SETTINGS))
    for i in range(40):
        log.append(make_batch(i, 5))
    expected = read_all(log)
    log.close()
    bound = OpenSegments()
    reopened = PartitionLog(directory, config(**SETTINGS), clean_shutdown=True, open_files=bound)
    results, errors = [], []
    start = threading.Barrier(8)

    def reader():
        try:
            start.wait()
            results.append(read_all(reopened))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == [expected] * 8
    assert descriptors_under(directory) == bound.stats()["descriptors"] == len(reopened.segments)
    reopened.close()
    assert descriptors_under(directory) == 0


def test_a_round_robin_over_a_few_more_logs_than_the_bound_rarely_evicts(tmp_path):
    """A strict LRU evicts at every append of such a loop: the oldest segment is always the
    next one due. The victim is the least recently used of a random draw instead, so nearly
    every segment stays open (open_files.py, "Which segment goes")."""
    bound = OpenSegments(200)
    logs = [PartitionLog(str(tmp_path / f"t-{p}"), config(segment_bytes=1 << 20), open_files=bound)
            for p in range(202)]
    for log in logs:
        log.append(make_batch(0, 1))
    before = bound.evictions
    for i in range(1, 6):
        for log in logs:
            log.append(make_batch(i, 1))
    assert bound.evictions - before < 5 * len(logs) // 4   # a strict LRU: 1,010
    assert bound.held <= 200 and descriptors_under(str(tmp_path)) <= 200
    for log in logs:
        assert [r[0] for r in read_all(log)] == list(range(6))
        log.close()


def test_a_segment_in_steady_use_is_not_the_one_pushed_out(tmp_path):
    bound = OpenSegments(20)
    hot = PartitionLog(str(tmp_path / "hot-0"), config(segment_bytes=1 << 20), open_files=bound)
    cold = [PartitionLog(str(tmp_path / f"cold-{p}"), config(segment_bytes=1 << 20),
                         open_files=bound) for p in range(60)]
    hot.append(make_batch(0, 1))
    segment = hot.active_segment
    for i in range(5):
        for log in cold:    # 60 logs under a bound of 20: evictions at most appends
            log.append(make_batch(i, 1))
            assert segment in bound._open   # still open after each cold log's append
            hot.append(make_batch(i, 1))
    assert bound.evictions > 100
    for log in [hot, *cold]:
        log.close()


def test_a_read_only_file_taken_again_must_be_the_file_it_was(tmp_path):
    # A read-only view gives a descriptor back under the bound and takes it again by name;
    # a compacted log's cleaner may have put another file under that name meanwhile. That
    # file was read with the sizes and offsets of the first (records "out of order", or
    # skipped); reopening now fails as a vanished file, which the view looks again for.
    from streamlog.storage.file_records import FileRecords
    path = str(tmp_path / "00000000000000000000.log")
    with open(path, "wb") as f:
        f.write(b"a" * 100)
    records = FileRecords(path, readonly=True, lazy=True)
    with open(path + ".new", "wb") as f:
        f.write(b"b" * 40)
    os.replace(path + ".new", path)   # between the lazy object's stat and its first open
    records.open()
    assert records.size == 40 and records.read(0, 40) == b"b" * 40
    records.release()
    with open(path + ".new", "wb") as f:
        f.write(b"c" * 40)
    os.replace(path + ".new", path)
    with pytest.raises(KafkaStorageError, match="was replaced") as raised:
        records.open()
    assert isinstance(raised.value.__cause__, FileNotFoundError)
    records.close()
