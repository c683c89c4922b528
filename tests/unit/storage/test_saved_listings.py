"""The listings a clean close saves in the clean-shutdown marker (storage/saved_listings.py):
a clean open takes them instead of listing each partition directory, but only for a directory
whose mtime is still the saved one; a changed directory, a damaged marker or an unclean stop
means listing it, and no record is ever missed."""
import logging
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from streamlog.storage import files, saved_listings
from streamlog.storage.log_directory import LogDirectory
from streamlog.storage.partition_log import PartitionLog
from streamlog.storage.verify import verify_directory
from streamlog.structs import TopicPartition

from support import config, make_batch, read_all

CFG = dict(segment_bytes=1000, index_interval_bytes=200)
TP = TopicPartition("t", 0)


def build(root, batches=12, partitions=1):
    directory = LogDirectory(root)
    for p in range(partitions):
        log = directory.open_log(TopicPartition("t", p), config(**CFG))
        for b in range(batches):
            log.append(make_batch(b))
    directory.close()


def marker(root):
    return os.path.join(root, files.CLEAN_SHUTDOWN_MARKER)


def saved(root):
    with open(marker(root), "rb") as f:
        return saved_listings.decode(f.read(), "test")


class CountingListdir:
    """os.listdir, counting the partition directories it lists."""

    def __init__(self, monkeypatch):
        self.partition_dirs = []
        real = os.listdir

        def listdir(path="."):
            if files.parse_partition_dir_name(os.path.basename(str(path))):
                self.partition_dirs.append(os.path.basename(str(path)))
            return real(path)
        monkeypatch.setattr(os, "listdir", listdir)


def test_a_clean_close_saves_each_directorys_listing_and_the_open_lists_none(tmp_path,
                                                                            monkeypatch):
    root = str(tmp_path / "root")
    build(root, partitions=3)
    listings = saved(root)
    assert sorted(listings) == ["t-0", "t-1", "t-2"]
    for name, (mtime_ns, listing, end) in listings.items():
        assert mtime_ns == os.stat(os.path.join(root, name)).st_mtime_ns
        assert listing == files.list_segments(os.listdir(os.path.join(root, name)))
        assert len(listing.bases) >= 3
        last = os.stat(files.log_file(os.path.join(root, name), listing.bases[-1]))
        assert end == (last.st_size, last.st_mtime_ns, 120)
    counted = CountingListdir(monkeypatch)
    directory = LogDirectory(root)
    logs = [directory.open_log(TopicPartition("t", p), config(**CFG)) for p in range(3)]
    assert counted.partition_dirs == []
    assert all(len(read_all(log)) == 120 for log in logs)
    directory.close()
    # Unchanged since the open: the close keeps what the open took, without listing them.
    assert counted.partition_dirs == [] and saved(root) == listings


def test_a_segment_added_behind_the_librarys_back_after_the_close_is_read(tmp_path):
    """A stale listing would miss the new segment and its records; its directory's mtime
    changed, so the open lists it."""
    root = str(tmp_path / "root")
    build(root)
    bases_at_close = saved(root)["t-0"][1].bases
    # Another program appends (and so rolls) through the log files directly.
    log = PartitionLog(os.path.join(root, "t-0"), config(**CFG), clean_shutdown=True)
    for b in range(12, 30):
        log.append(make_batch(b))
    log.close()
    directory = LogDirectory(root)
    assert directory.clean_shutdown
    reopened = directory.open_log(TP, config(**CFG))
    assert len(reopened.segments) > len(bases_at_close)
    assert [r[0] for r in read_all(reopened)] == list(range(300))
    directory.close()


def test_a_directory_changed_since_the_close_is_listed(tmp_path, monkeypatch):
    root = str(tmp_path / "root")
    build(root, partitions=2)
    with open(os.path.join(root, "t-1", "notes.txt"), "w") as f:
        f.write("a user's file")
    counted = CountingListdir(monkeypatch)
    directory = LogDirectory(root)
    logs = [directory.open_log(TopicPartition("t", p), config(**CFG)) for p in range(2)]
    assert counted.partition_dirs == ["t-1"]
    assert "notes.txt" in logs[1].other_files_at_open
    assert os.path.exists(os.path.join(root, "t-1", "notes.txt"))   # kept, never removed
    directory.close()


def test_a_damaged_marker_still_means_a_clean_stop_and_every_directory_is_listed(
        tmp_path, monkeypatch, caplog):
    root = str(tmp_path / "root")
    build(root, partitions=2)
    data = bytearray(open(marker(root), "rb").read())
    data[len(data) // 2] ^= 0x40
    with open(marker(root), "wb") as f:
        f.write(data)
    counted = CountingListdir(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="streamlog.storage"):
        directory = LogDirectory(root)
    assert "cannot be read" in caplog.text and directory.clean_shutdown
    logs = [directory.open_log(TopicPartition("t", p), config(**CFG)) for p in range(2)]
    assert sorted(counted.partition_dirs) == ["t-0", "t-1"]
    assert all(len(read_all(log)) == 120 for log in logs)
    directory.close()


def test_an_empty_marker_from_a_close_that_saved_nothing_lists_every_directory(tmp_path,
                                                                              monkeypatch):
    root = str(tmp_path / "root")
    build(root)
    open(marker(root), "wb").close()
    counted = CountingListdir(monkeypatch)
    directory = LogDirectory(root)
    assert len(read_all(directory.open_log(TP, config(**CFG)))) == 120
    assert counted.partition_dirs == ["t-0"]
    directory.close()


def test_a_directory_with_a_whole_second_mtime_is_not_saved(tmp_path):
    """A filesystem that keeps whole seconds could give a later change the same mtime."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / (files.offset_prefix(0) + ".log")).write_bytes(b"")
    assert saved_listings.take(str(directory), 0) is not None
    os.utime(directory, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    assert saved_listings.take(str(directory), 0) is None


def test_a_directory_with_leftovers_is_not_saved(tmp_path):
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / (files.offset_prefix(0) + ".log")).write_bytes(b"")
    (directory / (files.offset_prefix(0) + ".log" + files.CLEANED_SUFFIX)).write_bytes(b"")
    assert saved_listings.take(str(directory), 0) is None


def test_the_close_waits_until_the_clock_has_passed_every_saved_mtime(monkeypatch):
    """Else a change right after the close, within the clock's tick, keeps the saved mtime."""
    listing = files.list_segments([files.offset_prefix(0) + ".log"])
    now = 1_700_000_000_123_456_789
    monkeypatch.setattr(saved_listings.time, "clock_gettime_ns", lambda clock: now)
    monkeypatch.setattr(saved_listings, "_RACY_WAIT_S", 0.01)
    kept = saved_listings.settle({"old": (now - 1, listing, None),
                                  "racy": (now, listing, None),
                                  "racy file": (now - 1, listing, (10, now, 5)),
                                  "ahead": (now + 10**9, listing, None)})
    assert list(kept) == ["old"]   # never passed: not saved, listed at the next open
    ticks = iter(range(now - 2, now + 100))
    monkeypatch.setattr(saved_listings.time, "clock_gettime_ns", lambda clock: next(ticks))
    assert list(saved_listings.settle({"racy": (now - 5, listing, (10, now, 5))})) == \
        ["racy"]   # waited for the file's mtime too


def test_an_unclean_stop_ignores_what_an_earlier_close_saved(tmp_path):
    root = str(tmp_path / "root")
    build(root)
    directory = LogDirectory(root)
    log = directory.open_log(TP, config(**CFG))
    for b in range(12, 30):
        log.append(make_batch(b))   # rolls: new segments the saved listing lacks
    log.flush()
    directory.checkpoint()
    # No close: the process "dies" with the marker already removed by the open.
    assert not os.path.exists(marker(root))
    again = LogDirectory(root)
    assert not again.clean_shutdown
    assert [r[0] for r in read_all(again.open_log(TP, config(**CFG)))] == list(range(300))
    again.close()


names = st.lists(st.one_of(
    st.integers(0, 10**6).map(lambda b: files.offset_prefix(b) + ".log"),
    st.integers(0, 10**6).map(lambda b: files.offset_prefix(b) + ".index"),
    st.integers(0, 10**6).map(lambda b: files.offset_prefix(b) + ".txnindex"),
    st.integers(0, 10**6).map(lambda b: files.offset_prefix(b) + ".snapshot"),
    st.sampled_from(["partition.metadata", "topic.json", "leader-epoch-checkpoint", "x"])),
    max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=12),
                       st.tuples(st.integers(1, 2**63 - 1), names, st.none() | st.tuples(
                           st.integers(0, 2**40), st.integers(1, 2**63 - 1),
                           st.integers(0, 2**62))), max_size=5))
def test_listings_round_trip_through_the_marker(entries):
    listings = {name: (mtime, files.list_segments(listing), end)
                for name, (mtime, listing, end) in entries.items()}
    listings = {name: saved for name, saved in listings.items()
                if not saved[1].leftovers and not saved[1].swap_bases}
    assert saved_listings.decode(saved_listings.encode(listings), "test") == listings


def test_a_saved_listing_short_of_the_checkpointed_end_is_not_trusted(tmp_path, caplog):
    """The checkpoint of a clean close names each log's end: a saved listing whose segments
    stop short of it (one it lacks, however that came about) is replaced by a listing."""
    root = str(tmp_path / "root")
    build(root, batches=30)
    listings = saved(root)
    mtime_ns, listing, _ = listings["t-0"]
    forged = listing._replace(bases=listing.bases[:-1])   # the newest segment left out
    with open(marker(root), "wb") as f:
        f.write(saved_listings.encode({"t-0": (mtime_ns, forged, None)}))
    with caplog.at_level(logging.WARNING, logger="streamlog.storage"):
        directory = LogDirectory(root)
        log = directory.open_log(TP, config(**CFG))
    assert "the saved listing ends at offset" in caplog.text
    assert [r[0] for r in read_all(log)] == list(range(300))
    assert log.segments[-1].base_offset == listing.bases[-1]
    directory.close()


def test_a_clean_open_leaves_the_last_segment_unopened_and_appends_to_it_after(tmp_path):
    """The saved end gives the log end: the last segment is made at its first use, which
    loads its indexes and timestamps as an open would have (the indexes then check)."""
    root = str(tmp_path / "root")
    build(root)
    directory = LogDirectory(root)
    bigger = config(segment_bytes=1 << 20, index_interval_bytes=1 << 20)   # appends stay in it
    log = directory.open_log(TP, bigger)
    assert log.log_end_offset == 120
    last = log.segments[-1]
    assert "_state_made" not in vars(last)   # nothing of it opened
    for b in range(12, 30):
        log.append(make_batch(b))
    assert log.segments[-1] is last
    assert [r[0] for r in read_all(log)] == list(range(300))
    assert last.largest_timestamp == 1_000_000 + 29
    directory.close()
    report = verify_directory(root)
    assert report.problems == [], report.problems
    again = LogDirectory(root)
    assert [r[0] for r in read_all(again.open_log(TP, config(**CFG)))] == list(range(300))
    again.close()


def test_a_last_segment_appended_to_behind_the_librarys_back_is_read_to_its_end(tmp_path):
    """Appending to the last segment adds no file, so the directory's mtime and its saved
    listing stand; the file's size and mtime differ from the saved end, so the open reads
    the log's end from the file (the saved one would hide, and then overwrite, the batch)."""
    root = str(tmp_path / "root")
    build(root)
    mtime_ns, listing, end = saved(root)["t-0"]
    log = PartitionLog(os.path.join(root, "t-0"),
                       config(segment_bytes=1 << 20, index_interval_bytes=1 << 20),
                       clean_shutdown=True)
    log.append(make_batch(12))
    log.close()
    assert os.stat(os.path.join(root, "t-0")).st_mtime_ns == mtime_ns   # listing taken
    directory = LogDirectory(root)
    reopened = directory.open_log(TP, config(**CFG))
    assert reopened.log_end_offset == 130 and reopened.segments[-1].base_offset == \
        listing.bases[-1]
    assert [r[0] for r in read_all(reopened)] == list(range(130))
    directory.close()


def test_an_open_and_close_that_use_no_log_open_no_segment_file(tmp_path, monkeypatch):
    """Open and close cost a stat per log: the close flushes and seals nothing a lazy
    segment holds (the previous close fsynced and sealed it)."""
    root = str(tmp_path / "root")
    build(root, partitions=3)
    opened = []
    real_open = os.open

    def counting_open(path, *args, **kwargs):
        opened.append(os.path.basename(str(path)))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", counting_open)
    directory = LogDirectory(root)
    logs = [directory.open_log(TopicPartition("t", p), config(**CFG)) for p in range(3)]
    assert [log.log_end_offset for log in logs] == [120, 120, 120]
    directory.close()
    assert [name for name in opened if name.endswith((".log", ".index", ".timeindex"))] == []
