"""Offsets inside a log that no segment holds are CorruptRecordError, never skipped.

A log that is not compacted is dense: appends give consecutive offsets and segments roll at the
log end. A hole between two segments is therefore damage -- a sealed segment removed, or cut by
a recovery below the recovery point, which keeps the later segments. A read reaching the hole
used to go on in the next segment, and a consumer skipped the hole's records without a word.
"""
import os

import pytest

from streamlog.errors import CorruptRecordError, InvalidRecordError
from streamlog.storage import files
from streamlog.storage.partition_log import PartitionLog

from support import config, make_batch, read_all, segment_files

SETTINGS = dict(segment_bytes=2000, index_interval_bytes=150)


def written_log(log_dir, **overrides):
    """Three or more segments of 5-record batches, closed cleanly; returns the bases."""
    log = PartitionLog(log_dir, config(**SETTINGS, **overrides))
    for i in range(40):
        log.append(make_batch(i, 5))
    bases = [s.base_offset for s in log.segments]
    log.close()
    assert len(bases) >= 3
    return bases


def remove_segment(log_dir, base):
    for make in (files.log_file, files.offset_index_file, files.time_index_file):
        os.unlink(make(log_dir, base))


@pytest.mark.parametrize("readonly", [False, True])
def test_a_removed_middle_segment_is_an_error_not_a_skip(log_dir, readonly):
    bases = written_log(log_dir)
    remove_segment(log_dir, bases[1])
    log = PartitionLog(log_dir, config(**SETTINGS), clean_shutdown=True, readonly=readonly)
    assert log.read(bases[1] - 1).batches[-1].last_offset == bases[1] - 1  # up to the hole
    with pytest.raises(CorruptRecordError, match=f"offsets {bases[1]}..{bases[2] - 1} .* "
                                                 "missing") as raised:
        read_all(log)
    assert raised.value.path == files.log_file(log_dir, bases[0])
    assert [r[0] for r in read_all(log, bases[2])][0] == bases[2]   # seeking past it reads on
    log.close()


def test_a_sealed_segment_cut_short_after_a_clean_stop_reads_as_an_error(log_dir):
    """The open after a clean stop does not read sealed segments (they are lazy): the first
    read of the cut one finds its index pointing past the log end, rebuilds the index, and
    meets the batch cut in half: CorruptRecordError, never a skip to the next segment."""
    bases = written_log(log_dir)
    first = segment_files(log_dir)[0]
    with open(first, "r+b") as f:
        f.truncate(os.path.getsize(first) // 2 + 3)   # inside a batch, before index entries
    log = PartitionLog(log_dir, config(**SETTINGS), clean_shutdown=True)
    assert not log.recovery_report.dropped_data
    assert [s.base_offset for s in log.segments] == bases
    with pytest.raises(CorruptRecordError, match="inside a record batch") as raised:
        read_all(log)
    assert raised.value.path == first
    assert read_all(log, bases[1])[0][0] == bases[1]   # the later segments are intact
    log.close()


def test_a_compacted_log_may_have_holes_between_segments(log_dir):
    bases = written_log(log_dir, cleanup_policy="compact")
    remove_segment(log_dir, bases[1])
    log = PartitionLog(log_dir, config(**SETTINGS, cleanup_policy="compact"),
                       clean_shutdown=True)
    offsets = [r[0] for r in read_all(log)]
    assert offsets == list(range(bases[1])) + list(range(bases[2], log.log_end_offset))
    log.close()


class RecordingCheckpoint:
    """A log start checkpoint that records each write and whether the watched segment file
    still existed when it was written."""

    def __init__(self, value, watched=None):
        self.value, self.watched, self.writes = value, watched, []

    def read(self):
        return self.value

    def write(self, offset):
        self.writes.append((offset, self.watched is not None and os.path.exists(self.watched)))
        self.value = offset


@pytest.mark.parametrize("readonly", [False, True])
def test_a_removed_first_segment_under_a_checkpointed_start_is_an_error(log_dir, readonly):
    """Kafka's loader takes the first segment's base as the log start whatever the checkpoint
    says, so a lost first segment reads as retention. Here retention checkpoints the new start
    before removing a segment, so a first segment above the checkpointed start is a loss: the
    start stays, and reading the offsets in between is CorruptRecordError, not a quiet skip."""
    bases = written_log(log_dir)
    remove_segment(log_dir, bases[0])
    log = PartitionLog(log_dir, config(**SETTINGS), clean_shutdown=True, readonly=readonly,
                       log_start_offset=0, log_start_checkpoint=RecordingCheckpoint(0))
    assert log.log_start_offset == 0
    assert log.recovery_report.missing_head == (0, bases[1])
    with pytest.raises(CorruptRecordError, match=f"offsets 0..{bases[1] - 1} .* missing") as raised:
        read_all(log)
    assert raised.value.path == log_dir
    assert read_all(log, bases[1])[0][0] == bases[1]   # seeking past the hole reads on
    if not readonly:
        log.increase_log_start_offset(bases[1])        # accepting the loss
        assert read_all(log)[0][0] == bases[1]
    log.close()


def test_without_a_checkpointed_start_the_first_segment_starts_the_log(log_dir):
    bases = written_log(log_dir)
    remove_segment(log_dir, bases[0])
    log = PartitionLog(log_dir, config(**SETTINGS), clean_shutdown=True, log_start_offset=None)
    assert log.log_start_offset == bases[1] and log.recovery_report.missing_head is None
    assert read_all(log)[0][0] == bases[1]
    log.close()


def test_retention_checkpoints_the_new_start_before_it_removes_a_segment(log_dir):
    bases = written_log(log_dir)
    checkpoint = RecordingCheckpoint(0, files.log_file(log_dir, bases[0]))
    log = PartitionLog(log_dir, config(**SETTINGS, retention_ms=-1), clean_shutdown=True,
                       log_start_offset=0, log_start_checkpoint=checkpoint)
    log.increase_log_start_offset(bases[2])
    assert log.delete_old_segments() == 2
    # Written by the DeleteRecords, then by retention, with the first segment's file still
    # in place.
    assert checkpoint.writes == [(bases[2], True)] * 2
    # A stop right after the rename (no close; the next open removes the .deleted files):
    # the start it finds in the checkpoint is the one it needs, no hole.
    reopened = PartitionLog(log_dir, config(**SETTINGS), log_start_offset=checkpoint.value)
    assert not os.path.exists(files.log_file(log_dir, bases[0]))
    assert reopened.recovery_report.missing_head is None
    assert read_all(reopened)[0][0] == bases[2]
    reopened.close()
    log.close()


def test_a_read_only_view_follows_the_start_the_writer_checkpointed(log_dir):
    """The view read the checkpoint before the writer's retention removed the first segment:
    the writer had checkpointed the new start first, and the view re-reads it."""
    bases = written_log(log_dir)
    checkpoint = RecordingCheckpoint(bases[1])   # what the writer wrote before removing
    remove_segment(log_dir, bases[0])
    view = PartitionLog(log_dir, config(**SETTINGS), readonly=True, log_start_offset=0,
                        log_start_checkpoint=checkpoint)
    assert view.log_start_offset == bases[1] and view.recovery_report.missing_head is None
    assert read_all(view)[0][0] == bases[1]
    view.close()


def test_a_log_directory_checkpoints_retention_before_the_segments_go(tmp_path):
    """Through LogDirectory: the start is in the root's checkpoint file on disk as soon as
    retention has run (no close), and a later open of the root finds no hole."""
    from streamlog.storage.log_directory import LogDirectory
    from streamlog.structs import TopicPartition
    root, tp = str(tmp_path / "root"), TopicPartition("topic", 0)
    directory = LogDirectory(root)
    log = directory.open_log(tp, config(**SETTINGS, retention_ms=-1))
    for i in range(40):
        log.append(make_batch(i, 5))
    bases = [s.base_offset for s in log.segments]
    log.increase_log_start_offset(bases[1])
    assert log.delete_old_segments() == 1
    with open(os.path.join(root, files.LOG_START_OFFSET_CHECKPOINT)) as f:
        assert f.read().splitlines() == ["0", "1", f"topic 0 {bases[1]}"]
    again = LogDirectory(root)   # the process "died": no close
    reopened = again.open_log(tp, config(**SETTINGS, retention_ms=-1))
    assert reopened.log_start_offset == bases[1] and reopened.recovery_report.missing_head is None
    assert read_all(reopened)[0][0] == bases[1]
    again.close()
    log.close(flush=False)


def test_a_view_reads_the_log_start_checkpoint_again_only_when_it_changed(tmp_path,
                                                                          monkeypatch):
    """A view looks at the writer's log start checkpoint at each refresh and read below its
    end (DeleteRecords moves the start with no segment leaving): a stat, and a read of the
    file (which lists every partition) only when it was replaced since, or so recently that
    its stat may not tell the next replacement apart (LogDirectory._current_log_starts)."""
    from streamlog.errors import OffsetOutOfRangeError
    from streamlog.storage import log_directory
    from streamlog.storage.checkpoint import OffsetCheckpointFile
    from streamlog.structs import TopicPartition
    root, tp = str(tmp_path / "root"), TopicPartition("topic", 0)
    writer = log_directory.LogDirectory(root)
    log = writer.open_log(tp, config(**SETTINGS))
    for i in range(40):
        log.append(make_batch(i, 5))
    writer.checkpoint()
    path = os.path.join(root, files.LOG_START_OFFSET_CHECKPOINT)
    reads = []
    real_read = OffsetCheckpointFile.read

    def counted(self):
        reads.extend([self.path] if self.path == path else [])
        return real_read(self)
    monkeypatch.setattr(OffsetCheckpointFile, "read", counted)
    monkeypatch.setattr(log_directory, "_RACY_NS", 0, raising=False)   # no write is "just now"
    view = log_directory.LogDirectory(root, readonly=True).open_log(tp, config(**SETTINGS))
    reads.clear()
    for _ in range(5):
        view.refresh()
        assert read_all(view)[0][0] == 0
    assert len(reads) == 1            # read once, then a stat at each look
    log.increase_log_start_offset(7)  # inside the first segment: no file goes
    with pytest.raises(OffsetOutOfRangeError):
        view.read(0)
    assert view.log_start_offset == 7 and view.read(7).batches[0].base_offset == 5
    assert len(reads) == 2
    monkeypatch.setattr(log_directory, "_RACY_NS", 1 << 62, raising=False)   # every write is "just now"
    log.increase_log_start_offset(8)
    for _ in range(3):
        view.refresh()
    assert view.log_start_offset == 8 and len(reads) == 5   # not trusted while racy
    monkeypatch.setattr(log_directory, "_RACY_NS", 0, raising=False)
    for _ in range(3):
        view.refresh()
    assert len(reads) == 6
    log.close()


def batch_positions(path):
    """(position, base offset) of every batch of a segment file."""
    data, out, position = open(path, "rb").read(), [], 0
    while position + 12 <= len(data):
        out.append((position, int.from_bytes(data[position:position + 8], "big")))
        position += 12 + int.from_bytes(data[position + 8:position + 12], "big")
    return out


def flip_last_base_offset(log_dir, delta):
    """Move the active segment's last batch's baseOffset (outside the CRC) up by delta."""
    path = segment_files(log_dir)[-1]
    position, base = batch_positions(path)[-1]
    with open(path, "r+b") as f:
        f.seek(position)
        f.write((base + delta).to_bytes(8, "big"))
    return path, base


@pytest.mark.parametrize("readonly", [False, True])
def test_a_base_offset_flipped_upward_is_an_error_not_records_at_new_offsets(log_dir,
                                                                           readonly):
    """baseOffset is outside the batch CRC. A flip that moved it up kept the batch valid, and
    its records read back at offsets never written, the log end with them (file fuzz, seed
    52327143, iteration 8). A log that is not compacted is dense, so the gap is the damage."""
    written_log(log_dir)
    path, base = flip_last_base_offset(log_dir, 13568)
    log = PartitionLog(log_dir, config(**SETTINGS), clean_shutdown=True, readonly=readonly)
    with pytest.raises(CorruptRecordError, match=f"out of order .* after offset {base - 1}") \
            as raised:
        read_all(log)
    assert raised.value.path == path
    log.close()


def test_recovery_cuts_the_log_at_a_base_offset_that_skips(log_dir):
    written_log(log_dir)
    _, base = flip_last_base_offset(log_dir, 1)
    log = PartitionLog(log_dir, config(**SETTINGS), clean_shutdown=False)
    assert log.log_end_offset == base and log.recovery_report.dropped_data
    assert [r[0] for r in read_all(log)] == list(range(base))
    log.close()


def test_a_compacted_log_may_skip_offsets_inside_a_segment(log_dir):
    log = PartitionLog(log_dir, config(**SETTINGS, cleanup_policy="compact"))
    log.append(make_batch(0, 5))
    log.append(make_batch(1, 5, base_offset=9), assign_offsets=False)
    log.close()
    log = PartitionLog(log_dir, config(**SETTINGS, cleanup_policy="compact"))
    assert [r[0] for r in read_all(log)] == [0, 1, 2, 3, 4, 9, 10, 11, 12, 13]
    log.close()


def test_an_append_that_would_skip_offsets_is_refused_unless_compacted(log_dir):
    log = PartitionLog(log_dir, config(**SETTINGS))
    log.append(make_batch(0, 5))
    with pytest.raises(InvalidRecordError, match="5..8 of .* empty"):
        log.append(make_batch(1, 5, base_offset=9), assign_offsets=False)
    log.append(make_batch(1, 5, base_offset=5), assign_offsets=False)
    assert log.log_end_offset == 10
    log.close()
