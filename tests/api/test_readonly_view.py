"""A read-only view reaches the records and log end the writer's recovery would, whatever its
indexes say, and calls corruption corruption instead of waiting on it.

Indexes are derived data that never decide what is kept (KAFKA_REFERENCE.md 1.6). A read-only
view trusted the offset index's last entry to find the log end: an entry past the end, a garbled
index or a tail torn before the last entry made the view end at the segment's base offset (0 of
60 records). A partial batch claiming 0x7fffffff bytes was taken for one being written, and
poll() waited on it forever.
"""
import os
import struct
import sys
import threading
import time

import pytest

import streamlog
from streamlog import TopicPartition

from support import append_offset_valued

TP = TopicPartition("t", 0)
RECORDS = 60


@pytest.fixture
def closed_db(tmp_path):
    """A database of 60 one-record batches in one segment, every batch indexed, closed."""
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", config={"index.interval.bytes": 0})
        producer = db.producer(linger_ms=0)
        for i in range(RECORDS):
            producer.send("t", value=b"%03d" % i).result()
    return root


def segment_file(root, suffix):
    return os.path.join(root, "t-0", "00000000000000000000" + suffix)


def read_only_values(root):
    with streamlog.open(root, readonly=True) as ro:
        end = ro.describe_topic("t").partitions[0].high_watermark
        consumer = ro.consumer(auto_offset_reset="earliest")
        consumer.assign([TP])
        got = []
        while len(got) < end:
            records = consumer.poll(timeout=5.0)
            assert records, f"stopped at {len(got)} of {end}"
            got.extend(int(r.value) for r in records)
        return end, got


def batch_starts(root):
    starts, position = [], 0
    data = open(segment_file(root, ".log"), "rb").read()
    while position < len(data):
        starts.append(position)
        position += 12 + struct.unpack_from(">i", data, position + 8)[0]
    return starts


def test_an_index_entry_past_the_log_end_hides_nothing(closed_db):
    size = os.path.getsize(segment_file(closed_db, ".log"))
    with open(segment_file(closed_db, ".index"), "ab") as f:
        f.write(struct.pack(">ii", RECORDS + 5, size + 4096))
    assert read_only_values(closed_db) == (RECORDS, list(range(RECORDS)))


def test_a_garbled_index_hides_nothing(closed_db):
    path = segment_file(closed_db, ".index")
    entries = open(path, "rb").read()
    with open(path, "wb") as f:  # the entries in reverse order: each one points elsewhere
        f.write(b"".join(entries[i:i + 8] for i in range(len(entries) - 8, -1, -8)))
    assert read_only_values(closed_db) == (RECORDS, list(range(RECORDS)))


def test_an_index_one_batch_out_of_step_with_its_log_hides_nothing(closed_db):
    # A compacted log's cleaner puts new files under a segment's names, so a read-only
    # view may map an index written for another file than the log it reads: here each
    # entry points at the batch before the one it names. The view took that for damage
    # ("record batch ends at offset 29 but the index says 30"); it now scans the segment.
    path = segment_file(closed_db, ".index")
    entries = open(path, "rb").read()
    rows = [struct.unpack_from(">ii", entries, i) for i in range(0, len(entries), 8)]
    with open(path, "wb") as f:
        f.write(b"".join(struct.pack(">ii", relative + 1, position)
                         for relative, position in rows))
    with streamlog.open(closed_db, readonly=True) as ro:
        consumer = ro.consumer()
        consumer.assign([TP])
        consumer.seek(TP, 30)   # found through the index
        assert [int(r.value) for r in consumer.poll(timeout=5.0)] == list(range(30, RECORDS))


def test_a_tail_torn_before_the_last_index_entry_ends_the_view_at_the_last_whole_batch(
        closed_db):
    starts = batch_starts(closed_db)
    with open(segment_file(closed_db, ".log"), "r+b") as f:
        f.truncate(starts[57] + 20)  # inside batch 57; the index still points at 59
    assert read_only_values(closed_db) == (57, list(range(57)))


def test_a_partial_batch_longer_than_any_batch_is_corruption_not_a_wait(closed_db):
    path = segment_file(closed_db, ".log")
    last_header = open(path, "rb").read()[batch_starts(closed_db)[-1]:][:61]
    with open(path, "ab") as f:  # a real header, but its length is 0x7fffffff
        f.write(struct.pack(">qi", RECORDS, 0x7FFFFFFF) + last_header[12:])
    # Refused wherever the view first meets it: opening, or a poll; never a poll that waits.
    with pytest.raises(streamlog.CorruptRecordError, match="longer than"):
        with streamlog.open(closed_db, readonly=True) as ro:
            consumer = ro.consumer(auto_offset_reset="earliest")
            consumer.assign([TP])
            for _ in range(100):
                consumer.poll(timeout=0.2)


def test_a_batch_below_the_proved_end_that_runs_past_the_file_is_corruption_not_a_wait(
        closed_db):
    """The view's tail scan starts at the last index entry and proves batches whole up to the
    end; a batch below that end whose length now runs past the file cannot be one a writer is
    appending. It was taken for one, and a reader polled at offset 10 forever (file fuzz, seed
    3596520554, iteration 9)."""
    path = segment_file(closed_db, ".log")
    start = batch_starts(closed_db)[10]
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # batch 10 now claims to end 100 bytes past the file
        f.seek(start + 8)
        f.write(struct.pack(">i", size - start - 12 + 100))
    with streamlog.open(closed_db, readonly=True) as ro:
        assert ro.describe_topic("t").partitions[0].high_watermark == RECORDS
        consumer = ro.consumer(auto_offset_reset="earliest")
        consumer.assign([TP])
        consumer.seek(TP, 10)
        with pytest.raises(streamlog.CorruptRecordError, match="inside a record batch") as raised:
            for _ in range(3):
                consumer.poll(timeout=0.2)
        assert raised.value.path == path


def retention_removes(root, base, new_start):
    """What the writer's retention does to segment `base` of t-0: checkpoint the new log
    start, then rename the segment's log away (removed later)."""
    from streamlog.storage import files
    from streamlog.storage.checkpoint import OffsetCheckpointFile
    starts = OffsetCheckpointFile(os.path.join(root, files.LOG_START_OFFSET_CHECKPOINT))
    starts.write({**starts.read(), TP: new_start})
    name = os.path.join(root, "t-0", files.offset_prefix(base) + ".log")
    os.rename(name, name + files.DELETED_SUFFIX)


def test_a_segment_retention_removes_between_listing_and_opening_is_skipped(tmp_path,
                                                                           monkeypatch):
    """A read-only open lists the segments, then opens each: retention may rename the oldest
    to .deleted in between. That raised KafkaStorageError ("cannot open log file"); the view
    now starts after it, as a reader that came a moment later would. Retention checkpoints the
    new log start before it renames; the view re-reads it (a first segment above the start it
    read would otherwise be a lost segment)."""
    import streamlog.storage.log_loader as log_loader
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", config={"segment.bytes": 200})
        producer = db.producer(linger_ms=0)
        for i in range(20):
            producer.send("t", value=b"%03d" % i).result()
    real_listing = log_loader.list_directory
    retained = []

    def listed_then_retained(directory, *args):
        listing = real_listing(directory, *args)
        bases = listing.bases
        if directory.endswith("t-0") and len(bases) > 1 and not retained:
            retained.append(True)   # once: the open's listing (a refresh lists again)
            retention_removes(root, bases[0], bases[1])   # after the listing
        return listing
    monkeypatch.setattr(log_loader, "list_directory", listed_then_retained)
    with streamlog.open(root, readonly=True) as ro:
        partition = ro.describe_topic("t").partitions[0]
        assert partition.log_start_offset > 0 and partition.high_watermark == 20
        consumer = ro.consumer(auto_offset_reset="earliest")
        consumer.assign([TP])
        got = []
        while len(got) < 20 - partition.log_start_offset:
            records = consumer.poll(timeout=5.0)
            assert records
            got.extend(r.offset for r in records)
        assert got == list(range(partition.log_start_offset, 20))


def test_a_segment_retention_removes_between_a_refreshs_listing_and_its_look_is_skipped(
        tmp_path, monkeypatch):
    # A caught-up view's refresh lists the writer's segments, then reads the size of the
    # one that was its last (the writer may have appended to it). Retention may rename that
    # segment away in between: a view that gave the segment's descriptor back under
    # max_open_files opens it again by name and finds nothing. That refresh raised out of
    # poll() (KafkaStorageError "cannot open log file"). It now lists again, as a read that
    # finds a file gone does.
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", config={"segment.bytes": 200})
        producer = db.producer(linger_ms=0)
        producer.send("t", value=b"000").result()
        with streamlog.open(root, readonly=True) as view:
            consumer = view.consumer(auto_offset_reset="earliest")
            consumer.assign([TP])
            assert [r.offset for r in consumer.poll(timeout=5.0)] == [0]
            for i in range(1, 20):     # segment 0, the view's last, rolls and more follow
                producer.send("t", value=b"%03d" % i).result()
            log = view._broker.partition_log(TP)
            real_listing = log._listed_segments
            retained = []

            def listed_then_retained():
                listed = real_listing()
                keep, _ = listed
                if not retained and len(keep) > 1:
                    retained.append(keep[1].base_offset)
                    # The view's descriptor of segment 0 given back under max_open_files
                    # (OpenSegments._make_room_locked), then the writer's retention.
                    oldest = keep[0]
                    with log._open_files._lock:
                        log._open_files._remove_locked(oldest)
                        oldest._release_files()
                    retention_removes(root, oldest.base_offset, keep[1].base_offset)
                return listed
            monkeypatch.setattr(log, "_listed_segments", listed_then_retained)
            got = []
            while not got or got[-1] < 19:
                records = consumer.poll(timeout=5.0)
                assert records, f"stopped after {got[-1:]}"
                got.extend(r.offset for r in records)
            assert retained and got == list(range(retained[0], 20))
            assert log.log_start_offset == retained[0] == log._bases[0]


def test_a_view_finds_by_timestamp_in_a_segment_the_writer_grew_and_rolled_since_it_looked(
        tmp_path):
    # A view read a segment's largest timestamp (its time index's last entry) once, while
    # the segment was the writer's active one. The writer appended later timestamps to it
    # and rolled: the view skipped the segment and answered the first record of the next
    # (offset 10 at 2010 for 1007). A refresh now has the timestamps of the segments that
    # may have grown read again.
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", config={"index.interval.bytes": 0})
        producer = db.producer(linger_ms=0)
        for i in range(5):
            producer.send("t", value=b"x", timestamp_ms=1000 + i).result()
        with streamlog.open(root, readonly=True) as view:
            consumer = view.consumer()
            consumer.assign([TP])
            assert consumer.offsets_for_times({TP: 1002})[TP].offset == 2
            for i in range(5, 10):
                producer.send("t", value=b"x", timestamp_ms=1000 + i).result()
            db._broker.partition_log(TP).roll()
            for i in range(10, 12):
                producer.send("t", value=b"x", timestamp_ms=2000 + i).result()
            assert consumer.offsets_for_times({TP: 1007})[TP] == (7, 1007)


def test_a_find_by_timestamp_lists_again_when_retention_removes_a_segment_under_it(
        tmp_path, monkeypatch):
    # Between a view's look at the directory and its first open of a segment, the
    # writer's DeleteRecords and retention may remove that segment. A read lists again
    # then; a find by timestamp raised KafkaStorageError ("cannot open log file"). It now
    # lists again too, and answers what the writer does.
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", config={"segment.bytes": 200})
        producer = db.producer(linger_ms=0)
        start = int(time.time() * 1000) - 100_000   # recent: only the log start retains
        for i in range(20):
            producer.send("t", value=b"%03d" % i, timestamp_ms=start + i).result()
        writer_log = db._broker.partition_log(TP)
        with streamlog.open(root, readonly=True) as view:
            log = view._broker.partition_log(TP)
            real_refresh = log.refresh
            removed = []

            def refreshed_then_retained():
                real_refresh()
                # The look of the find itself (the broker's look before it finds the files).
                if not removed and sys._getframe(1).f_code.co_name == \
                        "find_offset_by_timestamp":
                    second = writer_log.segments[1].base_offset
                    writer_log.increase_log_start_offset(second)
                    removed.append(writer_log.delete_old_segments())
            monkeypatch.setattr(log, "refresh", refreshed_then_retained)
            consumer = view.consumer()
            consumer.assign([TP])
            found = consumer.offsets_for_times({TP: start + 15})[TP]
            assert removed == [1] and found == (15, start + 15)


def test_a_topic_the_writer_is_creating_is_empty_to_a_reader_not_an_error(db_path):
    """Between the metadata record and the directories, a read-only reader saw
    UnknownTopicOrPartitionError from poll(); Kafka's consumer retries that error."""
    with streamlog.open(db_path) as db, streamlog.open(db_path, readonly=True) as ro:
        db._broker.metadata.create("fresh", 2)  # the record is written; no directory yet
        consumer = ro.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("fresh", 0), TopicPartition("fresh", 1)])
        assert consumer.poll(timeout=0.1) == []
        db._broker._sync_partitions()  # the creation finishes
        db.producer().send("fresh", value=b"first", partition=1).result()
        got = []
        for _ in range(50):
            got += [r.value for r in consumer.poll(timeout=0.1)]
            if got:
                break
        assert got == [b"first"]


def test_a_topic_the_writer_deleted_is_unknown_to_a_reader_not_a_file_error(db_path):
    """The view's next look at a deleted partition listed a directory the deletion had
    removed: FileNotFoundError from os.listdir, out of poll(), beginning_offsets(),
    end_offsets() and describe_topic(). It is UnknownTopicOrPartitionError, as the writer's
    own consumer gets (Kafka answers UNKNOWN_TOPIC_OR_PARTITION for a deleted topic). A
    poll, as Kafka's consumer, says so in the log and returns nothing."""
    with streamlog.open(db_path) as db, streamlog.open(db_path, readonly=True) as ro:
        db.create_topic("t")
        db.producer().send("t", value=b"v").result()
        consumer = ro.consumer(auto_offset_reset="earliest")
        consumer.assign([TP])
        assert [r.value for r in consumer.poll(timeout=5)] == [b"v"]
        db.delete_topic("t")
        assert consumer.poll(timeout=0.1) == []
        for call in (lambda: consumer.end_offsets([TP]),
                     lambda: consumer.beginning_offsets([TP]), lambda: ro.describe_topic("t")):
            with pytest.raises(streamlog.UnknownTopicOrPartitionError, match="t-0"):
                call()


def test_records_the_writer_deleted_inside_the_first_segment_leave_an_open_view(db_path):
    """DeleteRecords inside the first segment removes no file: a view opened before it kept
    serving the deleted records and answered 0 for EARLIEST (it read the writer's log start
    checkpoint only when retention removed a segment, and the writer checkpointed the new
    start only at its next periodic checkpoint, 60 s later). Once delete_records returns, the
    view reads below the new start as the writer does: OffsetOutOfRangeError."""
    with streamlog.open(db_path) as db, streamlog.open(db_path, readonly=True) as ro:
        db.create_topic("t")
        producer = db.producer(linger_ms=0)
        for i in range(RECORDS):
            producer.send("t", value=b"%03d" % i).result()
        caught_up = ro.consumer(auto_offset_reset="none")
        caught_up.assign([TP])
        caught_up.seek(TP, 0)
        got = []
        while len(got) < RECORDS:
            records = caught_up.poll(timeout=5.0)
            assert records, f"stopped at {len(got)} of {RECORDS}"
            got.extend(r.offset for r in records)
        assert got == list(range(RECORDS))

        assert db._broker.delete_records({TP: 25}) == {TP: 25}
        # First a read below the view's end (no refresh: nothing new to look for), then the
        # calls that refresh the view.
        behind = ro.consumer(auto_offset_reset="none")
        behind.assign([TP])
        for offset in (10, 0, 24):
            behind.seek(TP, offset)
            with pytest.raises(streamlog.OffsetOutOfRangeError):
                behind.poll(timeout=0.2)
        partition = ro.describe_topic("t").partitions[0]
        assert (partition.segments, partition.log_start_offset) == (1, 25)
        assert behind.beginning_offsets([TP]) == {TP: 25}
        behind.seek_to_beginning([TP])
        assert behind.poll(timeout=5.0)[0].offset == 25

        producer.send("t", value=b"more").result()     # the caught-up reader goes on
        assert [r.offset for r in caught_up.poll(timeout=5.0)] == [RECORDS]
        caught_up.seek(TP, 0)
        with pytest.raises(streamlog.OffsetOutOfRangeError):
            caught_up.poll(timeout=0.2)
        earliest = ro.consumer(auto_offset_reset="earliest")
        earliest.assign([TP])
        assert earliest.poll(timeout=5.0)[0].offset == 25


def test_a_view_reads_on_when_segment_files_vanish_under_it_more_than_once(tmp_path,
                                                                            monkeypatch):
    # The writer's cleaner, rewriting a small compacted log back to back, can remove the
    # segment a view is about to read again while the view looks at its directory anew
    # (tests/crash/test_compaction_readers.py): a read that finds its file gone looks
    # again, each time the file it wanted vanished, instead of raising after one try.
    from streamlog.errors import KafkaStorageError
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("t", partitions=1)
        db.producer().send("t", value=b"v", partition=0).result()
    tp = TopicPartition("t", 0)
    with streamlog.open(path, readonly=True) as view:
        log = view._broker.partition_log(tp)
        read = log._read
        vanished = []

        def files_vanish_twice(*args, **kwargs):
            if len(vanished) < 2:
                vanished.append(args[0])
                try:
                    raise FileNotFoundError("00000000000000000000.log")
                except FileNotFoundError as gone:
                    raise KafkaStorageError("a segment file vanished") from gone
            return read(*args, **kwargs)
        monkeypatch.setattr(log, "_read", files_vanish_twice)
        assert [b.base_offset for b in log.read(0).batches] == [0]
        assert vanished == [0, 0]


# --- read-only views of a compacted log while the writer's cleaner swaps segments ----------

def _compacted_topic(db):
    """A compacted topic of small segments whose keys repeat, but for the first 20 records'
    (a pass merges the segments and keeps those 20)."""
    db.create_topic("t", config={"cleanup.policy": "compact", "segment.bytes": 4096})
    append_offset_valued(db, "t", 600)


def _read_from_start(view, end):
    """(offset, value) of every record a fresh consumer of the view reads from the start,
    up to end (the writer's: a view's describe_topic would look at the directory first)."""
    consumer = view.consumer(auto_offset_reset="earliest")
    consumer.assign([TP])
    got = []
    while not got or got[-1][0] < end - 1:
        records = consumer.poll(timeout=5.0)
        assert records, f"stopped after {got[-1:]}"
        got.extend((r.offset, r.value) for r in records)
    consumer.close()
    return got


def test_a_compacted_segment_is_read_from_the_file_the_view_listed(tmp_path):
    # A view opened a compacted log's segments by name at their first read. The cleaner
    # could have put a merged segment under the first one's name since the view listed it:
    # the view read that with the old segment's bounds and failed on records that are fine
    # ("record batch offsets 5649..5699 are out of order for segment 0", the crash test's
    # failure under load). A view's segment now holds the file it listed, which stays
    # readable after the swap.
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        _compacted_topic(db)
        with streamlog.open(root, readonly=True) as view:
            for _ in range(2):
                (result,) = db.compact("t")
                assert result.stats is not None
                # The view lists the new segment 0 (and opens nothing else until a read).
                view._broker.partition_log(TP).refresh()
                append_offset_valued(db, "t", 300)
            (result,) = db.compact("t")   # merges segment 0 with segments after it
            assert result.stats is not None
            # Read as a consumer's fetch does, with no look at the directory in between.
            log = view._broker.partition_log(TP)
            last, position = -1, 0
            while position < log._next_offset:
                batches = log.read(position).batches
                assert batches and batches[0].base_offset > last
                last = batches[-1].last_offset
                position = last + 1
            got = _read_from_start(view, 1200)
    offsets = [offset for offset, _ in got]
    assert offsets == sorted(set(offsets)) and offsets[-1] == 1199
    assert all(value == b"%d" % offset for offset, value in got)


def test_a_view_lists_a_compacted_log_again_when_a_swap_begins_before_it_opens_a_file(
        tmp_path, monkeypatch):
    # Between a view's listing and its opening of the cleaned first segment, the cleaner's
    # next pass may rename that segment away (its swap's second step). The view left the
    # segment out and moved its log start past it: a reader from the start missed every
    # record the first segment held (the crash test's "MISSING 100 pinned records"). It
    # now lists again, waiting out the swap (settled_listing), and keeps the segment.
    import streamlog.storage.partition_log as partition_log
    from streamlog.storage import files
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        _compacted_topic(db)
        with streamlog.open(root, readonly=True) as view:
            log = view._broker.partition_log(TP)
            assert _read_from_start(view, 600)[0] == (0, b"0")
            (result,) = db.compact("t")   # a new file under segment 0's name
            assert result.stats is not None
            real_open = partition_log.open_readonly_segments
            swaps = []

            def next_swap_begins(directory, bases, *args, **kwargs):
                if 0 in bases and not swaps:
                    # The writer's swap steps 1 and 2 for segment 0, then step 3 a moment
                    # later (PartitionLog.replace_segments).
                    log_file = os.path.join(directory, files.offset_prefix(0) + ".log")
                    with open(log_file, "rb") as f:
                        cleaned = f.read()
                    with open(log_file + files.SWAP_SUFFIX, "wb") as f:
                        f.write(cleaned)
                    os.rename(log_file, log_file + files.DELETED_SUFFIX)
                    step_3 = threading.Timer(0.05, os.rename,
                                             (log_file + files.SWAP_SUFFIX, log_file))
                    step_3.start()
                    swaps.append(step_3)
                return real_open(directory, bases, *args, **kwargs)
            monkeypatch.setattr(partition_log, "open_readonly_segments", next_swap_begins)
            log.refresh()
            swaps[0].join()
            assert log.log_start_offset == 0 and log._bases[0] == 0
            got = _read_from_start(view, 600)
    assert got[0] == (0, b"0")
    assert all(value == b"%d" % offset for offset, value in got)


def test_a_view_lists_again_when_a_swap_renames_segments_while_it_looks_at_them(
        tmp_path, monkeypatch):
    # A refresh lists a compacted log, then asks each segment it holds whether its file was
    # replaced. A swap renaming the merged segments away between those looks (segment 0
    # after the listing, the others not before the view looked at them) left the view with
    # the cleaned segment 0 (offsets 0..599) beside the old 278 and 556 it covers: reads
    # from 0 failed ("record batch offsets 591..599 are out of order for segment 0"). The
    # view now lists again when the directory changed while it looked (_listing_held).
    import streamlog.storage.partition_log as partition_log
    from streamlog.storage import files
    from streamlog.storage.segment import LogSegment
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        _compacted_topic(db)
        (result,) = db.compact("t")
        assert result.stats is not None
        append_offset_valued(db, "t", 300)
        with streamlog.open(root, readonly=True) as view:
            log = view._broker.partition_log(TP)
            assert _read_from_start(view, 900)[0] == (0, b"0")
            steps = {name: threading.Event() for name in
                     ("listed", "first_renamed", "rest_looked_at", "swapped")}
            merged = []
            real_replace = partition_log.PartitionLog.replace_segments

            def swap_once_listed(self, replacements, truncations):
                if self.readonly or merged:
                    return real_replace(self, replacements, truncations)
                merged.extend([s.base_offset for s in old] for old, _, _ in replacements)
                steps["listed"].wait(30)
                try:
                    return real_replace(self, replacements, truncations)
                finally:
                    steps["swapped"].set()
            real_rename = LogSegment.rename_suffix

            def rename_first_then_wait(self, old, new):
                real_rename(self, old, new)
                if new == files.DELETED_SUFFIX and self.base_offset == 0 and \
                        not steps["first_renamed"].is_set():
                    steps["first_renamed"].set()
                    steps["rest_looked_at"].wait(30)
            real_listing = partition_log.settled_listing

            def listing(directory, compact):
                found = real_listing(directory, compact)
                steps["listed"].set()
                return found
            real_replaced = LogSegment.replaced_on_disk

            def looked_at(self):
                if not self.readonly:
                    return real_replaced(self)
                if self.base_offset == 0 and not steps["rest_looked_at"].is_set():
                    steps["first_renamed"].wait(30)
                answer = real_replaced(self)
                if merged and self.base_offset == merged[0][-1]:
                    steps["rest_looked_at"].set()
                return answer
            real_open = partition_log.open_readonly_segments

            def open_after_the_swap(*args, **kwargs):
                steps["swapped"].wait(30)
                return real_open(*args, **kwargs)
            monkeypatch.setattr(partition_log.PartitionLog, "replace_segments",
                                swap_once_listed)
            monkeypatch.setattr(LogSegment, "rename_suffix", rename_first_then_wait)
            monkeypatch.setattr(partition_log, "settled_listing", listing)
            monkeypatch.setattr(LogSegment, "replaced_on_disk", looked_at)
            monkeypatch.setattr(partition_log, "open_readonly_segments", open_after_the_swap)
            cleaner = threading.Thread(target=db.compact, args=("t",))
            cleaner.start()
            log.refresh()
            cleaner.join()
            monkeypatch.undo()
            assert merged[0][0] == 0 and len(merged[0]) > 1
            assert all(steps[name].is_set() for name in steps)
            # Each merged group is one segment under its first base: no member after it stays.
            assert log._bases[0] == 0 and not {base for group in merged
                                               for base in group[1:]} & set(log._bases)
            got = _read_from_start(view, 900)
    assert got[0] == (0, b"0")
    assert all(value == b"%d" % offset for offset, value in got)


def test_a_topic_the_writer_deletes_while_a_view_follows_it_is_unknown_not_a_file_error(
        tmp_path, monkeypatch):
    # A view of a compacted log the writer rolled since its last look reads the writer's
    # snapshots and .txnindex files again after listing the segments (_start_following).
    # The writer deleting the topic in between made that second listing raise a bare
    # FileNotFoundError out of the refresh; it is the unknown partition the first listing
    # answers for a deleted topic.
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", config={"cleanup.policy": "compact", "segment.bytes": 4096})
        append_offset_valued(db, "t", 100)
        with streamlog.open(root, readonly=True) as view:
            log = view._broker.partition_log(TP)
            append_offset_valued(db, "t", 300)   # the writer rolls past the view's last look
            real_listing = log._listed_segments

            def listed_then_deleted():
                listed = real_listing()
                db.delete_topic("t")
                return listed
            monkeypatch.setattr(log, "_listed_segments", listed_then_deleted)
            with pytest.raises(streamlog.UnknownTopicOrPartitionError, match="deleted by the"):
                log.refresh()
