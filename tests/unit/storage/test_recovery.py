"""Opening a partition after an unclean stop: torn tails, corrupt bytes, broken indexes,
leftover temporary files."""
import os
import shutil
import time

import pytest

from streamlog.errors import CorruptRecordError
from streamlog.storage import files
from streamlog.storage.checkpoint import OffsetCheckpointFile
from streamlog.storage.log_directory import LogDirectory
from streamlog.storage.partition_log import PartitionLog
from streamlog.structs import TopicPartition

from support import config, make_batch, read_all, segment_files, value_of
from support.power_loss import PowerLoss

CFG = dict(segment_bytes=3000, index_interval_bytes=200)


def filled_log(log_dir, batches=80, records=4, **overrides):
    """An open log with `batches` batches of `records` records; (log, its rows)."""
    log = PartitionLog(log_dir, config(**dict(CFG, **overrides)))
    for b in range(batches):
        log.append(make_batch(b, records))
    return log, read_all(log)


def write_log(log_dir, batches=80, records=4, **overrides):
    log, rows = filled_log(log_dir, batches, records, **overrides)
    log.close()
    return rows


def reopen(log_dir, recovery_point=0, clean=False, **overrides):
    return PartitionLog(log_dir, config(**dict(CFG, **overrides)), recovery_point=recovery_point,
                        clean_shutdown=clean)


def last_batch_span(path):
    from streamlog.storage.file_records import FileRecords
    fr = FileRecords(path, readonly=True)
    last = list(fr.batches())[-1]
    fr.close()
    return last.file_position, last.size_in_bytes, last.base_offset


def test_truncating_the_last_batch_at_every_byte_recovers_to_the_previous_batch(tmp_path):
    original = str(tmp_path / "orig")
    rows = write_log(original, batches=6)
    active = segment_files(original)[-1]
    start, size, base = last_batch_span(active)
    expected = [r for r in rows if r[0] < base]
    for cut in range(start, start + size):
        work = str(tmp_path / f"cut{cut}")
        shutil.copytree(original, work)
        os.truncate(os.path.join(work, os.path.basename(active)), cut)
        log = reopen(work)
        assert log.log_end_offset == base, cut
        assert read_all(log) == expected, cut
        assert log.recovery_report.truncated_bytes == cut - start
        log.append(make_batch(99))  # and the log takes new appends at the cut
        assert log.log_end_offset == base + 10
        log.close()
        shutil.rmtree(work)


def test_a_torn_batch_in_the_middle_cuts_there_and_drops_later_segments(tmp_path):
    log_dir = str(tmp_path / "t-0")
    rows = write_log(log_dir)
    logs = segment_files(log_dir)
    assert len(logs) >= 3
    victim = logs[1]
    start, size, base = last_batch_span(victim)
    with open(victim, "r+b") as f:  # damage the last batch of a middle segment
        f.seek(start + size - 3)
        f.write(b"\xff\xff\xff")
    log = reopen(log_dir, recovery_point=0)
    report = log.recovery_report
    assert report.truncated_bytes == size and report.truncated_at == (victim, start)
    assert "CRC" in report.truncation_reason
    assert len(report.deleted_segments) == len(logs) - 2
    assert read_all(log) == [r for r in rows if r[0] < base]
    assert len(segment_files(log_dir)) == 2
    log.close()


def test_recovery_starts_at_the_segment_holding_the_recovery_point(tmp_path):
    log_dir = str(tmp_path / "t-0")
    write_log(log_dir)
    bases = [int(os.path.basename(p)[:20]) for p in segment_files(log_dir)]
    log = reopen(log_dir, recovery_point=bases[2] + 1)
    assert [b for b, _ in log.recovery_report.recovered_segments] == bases[2:]
    log.close()
    clean = reopen(log_dir, clean=True)
    assert clean.recovery_report.recovered_segments == []
    clean.close()


def flip_and_read_everything(log_dir, path, position, rows):
    with open(path, "r+b") as f:
        f.seek(position)
        original = f.read(1)
        f.seek(position)
        f.write(bytes([original[0] ^ 0x10]))
    try:
        log = reopen(log_dir, clean=True)  # sealed segment: before the recovery point
        try:
            got = read_all(log, start=0)
        except CorruptRecordError as exc:
            assert exc.path is not None and os.path.basename(path) in str(exc)
            return "detected"
        finally:
            log.close(flush=False)
        assert got == rows, f"byte {position} flipped: wrong records returned"
        return "harmless"
    finally:
        with open(path, "r+b") as f:
            f.seek(position)
            f.write(original)


def test_a_flipped_byte_in_a_sealed_segment_is_never_returned_as_records(tmp_path):
    """Flip every byte of a sealed segment in turn: each flip raises CorruptRecordError
    naming the file, or (partitionLeaderEpoch, outside the CRC and unused by readers)
    leaves every record exactly as written."""
    log_dir = str(tmp_path / "t-0")
    rows = write_log(log_dir, batches=12, records=3, segment_bytes=800)
    sealed = segment_files(log_dir)[0]
    size = os.path.getsize(sealed)
    assert len(segment_files(log_dir)) > 1 and size > 300
    verdicts = [flip_and_read_everything(log_dir, sealed, p, rows) for p in range(size)]
    harmless = [p for p, v in zip(range(size), verdicts, strict=True) if v == "harmless"]
    from streamlog.storage.file_records import FileRecords
    fr = FileRecords(sealed, readonly=True)
    epochs = {b.file_position + off for b in fr.batches() for off in range(12, 16)}
    fr.close()
    assert set(harmless) <= epochs
    assert verdicts.count("detected") >= size - len(epochs)


def test_a_flipped_byte_reports_file_and_position(tmp_path):
    log_dir = str(tmp_path / "t-0")
    write_log(log_dir, batches=12, records=3, segment_bytes=800)
    sealed = segment_files(log_dir)[0]
    with open(sealed, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    log = reopen(log_dir, clean=True)
    with pytest.raises(CorruptRecordError) as info:
        read_all(log, start=0)
    assert info.value.path == sealed and info.value.position is not None
    assert info.value.position <= 100
    log.close(flush=False)


@pytest.mark.parametrize("damage", ["missing", "garbage", "short"])
def test_broken_indexes_are_rebuilt(tmp_path, damage):
    log_dir = str(tmp_path / "t-0")
    rows = write_log(log_dir)
    index = segment_files(log_dir, ".index")[1]
    timeindex = segment_files(log_dir, ".timeindex")[1]
    entries = os.path.getsize(index) // 8
    assert entries > 1
    if damage == "missing":
        os.unlink(index)
        os.unlink(timeindex)
    elif damage == "garbage":
        with open(index, "r+b") as f:
            f.write(b"\x7f" * 16)
    else:
        os.truncate(index, os.path.getsize(index) - 3)
    log = reopen(log_dir, clean=True)
    # A sealed segment is lazy after a clean stop: its indexes are checked, and rebuilt, at
    # its first use rather than at open.
    assert log.recovery_report.rebuilt_indexes == []
    assert read_all(log) == rows
    assert log.segments[1].offset_index.entries == entries
    for offset in range(0, len(rows), 3):
        assert log.read(offset, 100).batches[0].last_offset >= offset
    log.close()


def test_leftover_files_of_interrupted_work_are_removed(tmp_path):
    log_dir = str(tmp_path / "t-0")
    rows = write_log(log_dir, batches=10)
    for name in ["00000000000000000999.log.deleted", "00000000000000000000.log.cleaned",
                 "00000000000000000777.index", "00000000000000000777.timeindex"]:
        open(os.path.join(log_dir, name), "wb").close()
    log = reopen(log_dir, clean=True)
    removed = set(log.recovery_report.removed_files)
    assert {"00000000000000000999.log.deleted", "00000000000000000000.log.cleaned",
            "00000000000000000777.index"} <= removed
    assert read_all(log) == rows
    log.close()


def test_an_interrupted_swap_is_completed(tmp_path):
    """A .swap segment replaces the ordinary segments inside its offset range."""
    log_dir = str(tmp_path / "t-0")
    write_log(log_dir)
    bases = [int(os.path.basename(p)[:20]) for p in segment_files(log_dir)]
    # Build the replacement for the first two segments: their records with fresh values.
    donor = str(tmp_path / "donor")
    log = PartitionLog(donor, config(segment_bytes=10**6))
    while log.log_end_offset < bases[2]:
        log.append(make_batch(1000 + log.log_end_offset, records=1))
    log.close()
    for suffix in (".log", ".index", ".timeindex"):
        src = os.path.join(donor, files.offset_prefix(0) + suffix)
        shutil.copy(src, os.path.join(log_dir, files.offset_prefix(0) + suffix + ".swap"))
    log = reopen(log_dir, clean=True)
    assert [s.base_offset for s in log.segments][:2] == [0, bases[2]]
    assert read_all(log)[0][3].startswith(b"b001000")
    assert not any(n.endswith(".swap") for n in os.listdir(log_dir))
    log.close()


def test_log_directory_marks_clean_stops_and_recovers_unclean_ones(tmp_path):
    root = str(tmp_path / "root")
    tp = TopicPartition("t", 0)
    d = LogDirectory(root)
    log = d.open_log(tp, config(**CFG))
    for b in range(20):
        log.append(make_batch(b))
    d.close()
    assert os.path.exists(os.path.join(root, files.CLEAN_SHUTDOWN_MARKER))
    with open(os.path.join(root, files.RECOVERY_POINT_CHECKPOINT)) as f:
        assert f.read().splitlines() == ["0", "1", "t 0 200"]

    d = LogDirectory(root)
    assert d.clean_shutdown and not os.path.exists(
        os.path.join(root, files.CLEAN_SHUTDOWN_MARKER))
    log = d.open_log(tp, config(**CFG))
    assert log.recovery_report.recovered_segments == []
    for b in range(20, 30):
        log.append(make_batch(b))
    # No close: the process "dies". The next open must recover from the checkpoint (200).
    d2 = LogDirectory(root)
    assert not d2.clean_shutdown
    log2 = d2.open_log(tp, config(**CFG))
    recovered = [b for b, _ in log2.recovery_report.recovered_segments]
    assert recovered and recovered[0] <= 200
    assert log2.log_end_offset == 300
    d2.close()
    log.close(flush=False)


def test_corrupt_checkpoint_falls_back_to_full_recovery(tmp_path):
    root = str(tmp_path / "root")
    tp = TopicPartition("t", 0)
    d = LogDirectory(root)
    d.open_log(tp, config(**CFG)).append(make_batch(0))
    d.close()
    with open(os.path.join(root, files.RECOVERY_POINT_CHECKPOINT), "w") as f:
        f.write("garbage\n")
    d = LogDirectory(root)
    assert not d.clean_shutdown
    log = d.open_log(tp, config(**CFG))
    assert log.recovery_report.recovered_segments  # recovered from the first segment
    assert log.log_end_offset == 10
    d.close()


def test_deleting_a_partition_removes_it_and_its_checkpoint_entries(tmp_path):
    root = str(tmp_path / "root")
    d = LogDirectory(root)
    for p in range(2):
        d.open_log(TopicPartition("t", p), config(**CFG)).append(make_batch(p))
    d.delete_log(TopicPartition("t", 0))
    assert d.partitions_on_disk() == [TopicPartition("t", 1)]
    d.close()
    with open(os.path.join(root, files.LOG_START_OFFSET_CHECKPOINT)) as f:
        assert "t 0" not in f.read()


def test_a_crashed_writers_torn_tail_is_cut_and_reported(tmp_path):
    """The state a kill leaves: preallocated (untrimmed) active index, torn last batch."""
    live = str(tmp_path / "live")
    log, rows = filled_log(live)
    crashed = str(tmp_path / "crashed")
    shutil.copytree(live, crashed)  # a snapshot of an open log: nothing trimmed or sealed
    log.close()
    active = segment_files(crashed)[-1]
    start, size, base = last_batch_span(active)
    os.truncate(active, start + size // 2)
    reopened = reopen(crashed, recovery_point=0)
    report = reopened.recovery_report
    assert report.truncated_bytes == size // 2 and report.truncated_at == (active, start)
    assert report.rebuilt_indexes == []  # recovered in step 4, not counted as a damaged index
    assert read_all(reopened) == [r for r in rows if r[0] < base]
    reopened.close()


def test_damage_below_the_recovery_point_is_found_by_the_read_and_later_segments_kept(tmp_path):
    """After a clean stop nothing below the recovery point is re-read at open (Kafka does not
    either): the sealed segment, lazy, has its missing index rebuilt at first use, and the
    damaged batch is a CorruptRecordError for the read that reaches it."""
    log_dir = str(tmp_path / "t-0")
    rows = write_log(log_dir)
    first_log, second_log = segment_files(log_dir)[:2]
    os.unlink(segment_files(log_dir, ".index")[0])  # forces a rebuild of segment 0
    start, size, base = last_batch_span(first_log)
    with open(first_log, "r+b") as f:
        f.seek(start + 70)
        f.write(b"\x00\x01\x02")
    log = reopen(log_dir, clean=True)
    assert not log.recovery_report.dropped_data
    with pytest.raises(CorruptRecordError) as raised:
        read_all(log)
    assert raised.value.path == first_log
    assert log.read(0, start).batches[-1].last_offset == base - 1   # all before it read
    assert os.path.getsize(first_log) == start + size   # nothing cut
    second_base = int(os.path.basename(second_log)[:20])
    kept = [r[0] for r in read_all(log, start=second_base)]
    assert kept == [r[0] for r in rows if r[0] >= second_base]
    log.close()


def test_index_pages_of_the_last_segment_lost_with_a_stop_are_rebuilt(tmp_path):
    # A flush leaves the last segment's indexes to the page cache (partition_log invariant
    # 3). A power loss may then keep the log's fsynced bytes and lose those index pages:
    # here, zeros where the entries were. The unclean open rebuilds the segment holding
    # the recovery point, so every offset is found again.
    log_dir = str(tmp_path / "t-0")
    log, rows = filled_log(log_dir)
    recovery_point = log.flush()
    assert recovery_point == log.log_end_offset
    log.close(flush=False, seal=False)
    index, timeindex = (segment_files(log_dir, ext)[-1] for ext in (".index", ".timeindex"))
    assert os.path.getsize(index) > 0
    for path in (index, timeindex):
        with open(path, "r+b") as f:
            f.write(bytes(os.path.getsize(path)))
    log = reopen(log_dir, recovery_point=recovery_point)
    assert read_all(log) == rows
    for offset in range(0, len(rows), 7):
        assert log.read(offset, 100).batches[0].last_offset >= offset
    assert log.segments[-1].offset_index.entries > 0
    log.close()


def test_checkpoints_and_retention_of_another_log_never_wait_on_each_other(tmp_path):
    # Retention holds its log's lock while it writes the new log start (under the
    # directory's files lock); a checkpoint holds the directory's locks while it asks each
    # log for its recovery point (under that log's lock). Taken in opposite orders, the two
    # would wait on each other for good.
    import threading
    from streamlog.storage.log_config import LogConfig
    from streamlog.storage.record_batch import build_batch
    root = LogDirectory(str(tmp_path), max_open_files=-1)
    cfg = LogConfig.from_dict({"segment.bytes": 1000, "retention.bytes": 1500})
    logs = [root.open_log(TopicPartition("t", p), cfg) for p in range(2)]
    deleted = [0]

    def retention():
        for _ in range(400):
            logs[1].append(build_batch([b"x" * 300], timestamp=1000))
            deleted[0] += logs[1].delete_old_segments()
            logs[1].flush()

    def checkpoints():
        for _ in range(400):
            root.checkpoint()
    threads = [threading.Thread(target=f, daemon=True) for f in (retention, checkpoints)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)   # only bounds how long a deadlocked build takes to fail
    assert not any(t.is_alive() for t in threads), "retention and checkpoints deadlocked"
    assert deleted[0] > 0
    root.close()


# --- the recovery-point checkpoint never stays above what the log holds durably ------------

TP = TopicPartition("t", 0)


def checkpointed_point(root):
    return OffsetCheckpointFile(os.path.join(root, files.RECOVERY_POINT_CHECKPOINT)).read()[TP]


def checkpointed_root(root, batches=60):
    """A root whose one log holds `batches` batches of 4, flushed and checkpointed."""
    directory = LogDirectory(root, max_open_files=-1)
    log = directory.open_log(TP, config(**CFG))
    for b in range(batches):
        log.append(make_batch(b, 4))
    log.flush()
    directory.checkpoint()
    assert checkpointed_point(root) == log.log_end_offset
    return directory, log


def test_a_truncation_lowers_the_checkpointed_recovery_point_before_anything_follows(
        tmp_path, monkeypatch):
    # A follower cuts its divergent tail below the checkpointed point, then appends its
    # leader's batches (other sizes) without a flush, and the power goes. Had the point
    # stayed above the cut, the open would trust the segments below it: the one that was
    # cut and written again, whose rebuilt indexes were never msynced, gives batches from
    # wrong positions. Kafka's LogManager.truncateTo checkpoints the recovery points too.
    root = str(tmp_path / "root")
    os.makedirs(root)
    power = PowerLoss(monkeypatch, root)
    directory, log = checkpointed_root(root)
    cut = log.segments[1].base_offset + 10
    end = log.truncate_to(cut)
    assert checkpointed_point(root) == end <= cut
    b = 1000
    while log.log_end_offset < 280:
        log.append(make_batch(b, 4, value_size=20))
        b += 1
    rows = read_all(log)
    power.lose(keep_logs=True)
    reopened = LogDirectory(root, max_open_files=-1).open_log(TP, config(**CFG))
    assert read_all(reopened) == rows
    for offset in range(reopened.log_end_offset):
        batch = reopened.read(offset, 100).batches[0]
        assert batch.base_offset <= offset <= batch.last_offset


def test_an_unclean_open_that_cuts_below_the_checkpoint_lowers_it(tmp_path):
    root = str(tmp_path / "root")
    directory, log = checkpointed_root(root)
    point = log.log_end_offset
    log.close(flush=False, seal=False)   # a stop without the clean-shutdown marker
    last = segment_files(os.path.join(root, "t-0"))[-1]
    with open(last, "r+b") as f:   # a byte of the last segment's first batch goes bad
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0xFF]))
    reopened = LogDirectory(root, max_open_files=-1)
    log = reopened.open_log(TP, config(**CFG))
    assert log.log_end_offset < point
    assert checkpointed_point(root) == log.log_end_offset
    reopened.close()


def test_a_failed_index_msync_checkpoints_the_point_below_the_unsynced_indexes(
        tmp_path, monkeypatch):
    from streamlog.storage.segment import LogSegment
    root = str(tmp_path / "root")
    directory, log = checkpointed_root(root)
    for b in range(60, 70):
        log.append(make_batch(b, 4))
    log.flush()                   # leaves the last segment's indexes unsynced
    synced = log.segments[-1].base_offset
    log.roll()                    # ... and now that segment is below the recovery point

    def failing(segment):
        raise OSError(5, "msync failed")
    monkeypatch.setattr(LogSegment, "flush_indexes", failing)
    directory.checkpoint()        # no error: the other logs' points still go in
    assert checkpointed_point(root) == synced
    monkeypatch.undo()
    directory.checkpoint()
    assert checkpointed_point(root) == log.recovery_point
    directory.close()


def test_a_new_partitions_first_flush_makes_its_names_durable(tmp_path, monkeypatch):
    # fdatasync makes a file's bytes durable, not its name: a power loss may keep the
    # bytes of a new segment and lose the entries naming it (the segment in its directory,
    # the directory in the root). An acknowledged flush must not depend on them.
    from streamlog.storage import log_directory, partition_log
    synced = []
    for module in (log_directory, partition_log):
        def recording(path, real=module.fsync_dir):
            synced.append(os.path.abspath(path))
            real(path)
        monkeypatch.setattr(module, "fsync_dir", recording)
    root = str(tmp_path / "root")
    directory = LogDirectory(root, max_open_files=-1)
    first = directory.open_log(TP, config(**CFG))
    second = directory.open_log(TopicPartition("t", 1), config(**CFG))
    for log in (first, second):
        log.append(make_batch(0, 4))
    synced.clear()
    first.flush()
    assert synced == [first.directory, os.path.abspath(root)]
    synced.clear()
    second.flush()     # its name was made durable with the first's: the root once for both
    assert synced == [second.directory]
    first.append(make_batch(1, 4))
    synced.clear()
    first.flush()
    assert synced == []
    directory.close()


# --- a producer snapshot never reaches the disk before the batches it describes ------------

def idempotent(batch_no, sequence, records=5):
    # Now's timestamps: the open would expire a producer whose last batch is from 1970.
    return make_batch(batch_no, records, timestamp=int(time.time() * 1000), producer_id=7,
                      producer_epoch=0, base_sequence=sequence)


COMPACTED = dict(CFG, cleanup_policy="compact")


def power_loss_log(tmp_path, monkeypatch, settings):
    """(root, PowerLoss, LogDirectory, log) of a fresh root whose files a power loss puts
    back to their last sync, its one log opened with `settings`."""
    root = str(tmp_path / "root")
    os.makedirs(root)
    power = PowerLoss(monkeypatch, root)
    directory = LogDirectory(root, max_open_files=-1)
    return root, power, directory, directory.open_log(TP, config(**settings))


def test_a_roll_snapshot_is_never_durable_before_the_batches_it_holds(tmp_path, monkeypatch):
    # An acks="all" batch B is appended, not yet fsynced; two rolls follow (the second's
    # directory fsync makes the new segment names durable) and the power goes. B's bytes
    # are lost, a later (empty) segment survives past the hole. Had the snapshot taken at
    # the first roll been durable while B was not, the open would trust it: the producer's
    # retry of B would be answered as a duplicate at offsets no segment holds. The log is
    # compacted: one that is not is cut at such a hole by the loader (the test of an
    # unsynced roll below), which deletes the snapshot above the cut too, but a compacted
    # log's gaps are its cleaner's, so the later segment stays past the hole.
    root, power, directory, log = power_loss_log(tmp_path, monkeypatch, COMPACTED)
    for k in range(3):
        log.append(idempotent(k, 5 * k))
    log.flush()
    directory.checkpoint()
    b = log.append(idempotent(3, 15))
    log.roll()
    log.append(make_batch(4, 1))         # another writer's acks=1 record
    log.roll()
    power.lose()
    reopened = LogDirectory(root, max_open_files=-1).open_log(TP, config(**COMPACTED))
    retry = reopened.append(idempotent(3, 15))
    # Whether B survived (a duplicate) or not (written again), the offsets the retry is
    # answered with hold B's records.
    assert retry.first_offset >= b.first_offset
    batch = reopened.read(retry.first_offset, 1 << 16).batches[0]
    assert (batch.base_offset, batch.last_offset) == (retry.first_offset, retry.last_offset)
    assert [r[3] for r in batch.records()] == [value_of(3, i) for i in range(5)]


def test_a_clean_log_whose_tail_was_cut_opens_as_unclean_and_keeps_no_stale_txn_entry(
        tmp_path):
    # After a clean close the last batch (an ABORT marker) is cut off at a batch boundary.
    # Opened as clean, the .txnindex entry of the removed marker stayed: the transaction was
    # open again (LSO stuck at its start) and its marker could never be written again.
    root = str(tmp_path / "root")
    now = int(time.time() * 1000)
    directory = LogDirectory(root, max_open_files=-1)
    log = directory.open_log(TP, config(**CFG))
    log.append(make_batch(0, 1, timestamp=now))
    data = log.append(make_batch(1, 2, timestamp=now, producer_id=9, producer_epoch=0,
                                 base_sequence=0, is_transactional=True))
    size_before_marker = log.active_segment.size
    marker = log.write_txn_marker(9, 0, 0, commit=False, timestamp_ms=now)
    directory.close()
    os.truncate(segment_files(os.path.join(root, "t-0"))[-1], size_before_marker)

    reopened = LogDirectory(root, max_open_files=-1).open_log(TP, config(**CFG))
    report = reopened.recovery_report
    assert reopened.log_end_offset == marker.first_offset
    assert report.missing_tail == (marker.first_offset, marker.first_offset + 1)
    assert "are missing" in report.summary()
    assert reopened.txn_indexes.entries() == []
    assert reopened.last_stable_offset == data.first_offset   # open again, as the log says
    again = reopened.write_txn_marker(9, 0, 0, commit=False, timestamp_ms=now)
    assert again.first_offset == marker.first_offset
    assert reopened.last_stable_offset == reopened.log_end_offset
    assert [e.first_offset for e in reopened.txn_indexes.entries()] == [data.first_offset]


def test_a_rolls_snapshot_syncs_only_what_is_not_synced_yet(tmp_path, monkeypatch):
    # The roll above fsyncs the log files the recovery point does not cover, and only a
    # flush moves that point: with acks=1 traffic (no flush), every roll used to sync every
    # segment since the last flush again, so roll k cost k fsyncs under the append lock.
    log = PartitionLog(str(tmp_path / "t-0"), config(segment_bytes=600))
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd))[1])
    per_roll, seq = [], 0
    while len(log.segments) < 40:
        before, segments = len(syncs), len(log.segments)
        log.append(idempotent(seq, seq, records=3))
        seq += 3
        if len(log.segments) > segments:
            per_roll.append(len(syncs) - before)
    assert log.recovery_point == 0            # nothing flushed
    assert max(per_roll[5:]) <= max(per_roll[:5]) == 1
    log.close()


# --- a segment cut short at a batch boundary before a later one: the loss leaves a gap -----

def base_of(path):
    return int(os.path.basename(path)[:20])


def cut_last_batch(path):
    """Shorten a segment file to just before its last batch (what a power loss leaves of an
    unsynced tail: no invalid byte); returns that batch's base offset."""
    start, _, base = last_batch_span(path)
    os.truncate(path, start)
    return base


def test_a_segment_cut_short_before_a_later_one_cuts_the_unflushed_log_at_the_gap(tmp_path):
    # The middle segment lost its last batch whole; the later segments survived. Recovery
    # found no invalid byte and kept them: the log ran past offsets no segment holds, a
    # read there raised for good and appends went on after the hole. Kafka's
    # LogLoader.recoverLog drops everything after the first loss in the unflushed range.
    log_dir = str(tmp_path / "t-0")
    rows = write_log(log_dir)
    logs = segment_files(log_dir)
    assert len(logs) >= 4
    bases = [base_of(p) for p in logs]
    cut = cut_last_batch(logs[1])
    log = reopen(log_dir, recovery_point=bases[1] - 1)   # segment 0 holds it: all recovered
    report = log.recovery_report
    assert log.log_end_offset == cut
    assert report.missing_gap == (cut, bases[2])
    assert report.deleted_segments == bases[2:] and report.truncated_bytes == 0
    assert report.noteworthy and f"offsets {cut}..{bases[2] - 1} are missing" in report.summary()
    assert segment_files(log_dir) == logs[:2]
    assert read_all(log) == [r for r in rows if r[0] < cut]
    assert log.append(make_batch(99)).first_offset == cut   # the log goes on at the cut
    assert log.recovery_point <= cut
    log.close()


def test_a_gap_at_or_below_the_recovery_point_deletes_nothing(tmp_path):
    # Everything below the recovery point was fsynced: a segment there found short is
    # damage the read reports, never a reason to delete the later segments.
    log_dir = str(tmp_path / "t-0")
    rows = write_log(log_dir)
    logs = segment_files(log_dir)
    bases = [base_of(p) for p in logs]
    cut = cut_last_batch(logs[0])
    log = reopen(log_dir, recovery_point=bases[1])   # recovery starts at segment 1
    report = log.recovery_report
    assert report.missing_gap is None and report.deleted_segments == []
    assert segment_files(log_dir) == logs and log.log_end_offset == rows[-1][0] + 1
    with pytest.raises(CorruptRecordError, match=f"offsets {cut}..{bases[1] - 1} .* missing"):
        read_all(log)
    assert read_all(log, bases[1]) == [r for r in rows if r[0] >= bases[1]]
    log.close()


def test_a_compacted_logs_gap_between_segments_is_kept(tmp_path):
    # The cleaner leaves gaps between a compacted log's segments: no loss to be told apart.
    log_dir = str(tmp_path / "t-0")
    rows = write_log(log_dir, cleanup_policy="compact")
    logs = segment_files(log_dir)
    cut = cut_last_batch(logs[1])
    log = reopen(log_dir, recovery_point=0, cleanup_policy="compact")
    assert log.recovery_report.missing_gap is None
    assert log.recovery_report.deleted_segments == []
    assert segment_files(log_dir) == logs
    assert read_all(log) == [r for r in rows if not cut <= r[0] < base_of(logs[2])]
    log.close()


def test_a_power_loss_after_an_unsynced_roll_leaves_no_hole(tmp_path, monkeypatch):
    # acks=1 appends, then a roll: the roll does not fsync the old segment's tail (Kafka's
    # UnifiedLog.roll only schedules that flush), so a power loss can take the tail and keep
    # the new segment's file (here empty: never synced). The open used to end the log at
    # that segment's base, past offsets no segment held.
    root, power, directory, log = power_loss_log(tmp_path, monkeypatch, CFG)
    for b in range(3):
        log.append(make_batch(b, 4))
    synced = log.flush()
    directory.checkpoint()
    rows = read_all(log)
    for b in range(3, 6):
        log.append(make_batch(b, 4))
    log.roll()
    new_base = log.active_segment.base_offset
    log.append(make_batch(6, 4))
    power.lose()

    reopened = LogDirectory(root, max_open_files=-1)
    log = reopened.open_log(TP, config(**CFG))
    assert log.log_end_offset == synced and read_all(log) == rows
    assert log.recovery_report.missing_gap == (synced, new_base)
    assert log.recovery_report in reopened.reports
    assert log.append(make_batch(7, 4)).first_offset == synced
    reopened.close()
