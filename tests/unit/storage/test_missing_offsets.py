"""Offsets inside a log that no segment holds are CorruptRecordError, never skipped.

A log that is not compacted is dense: appends give consecutive offsets and segments roll at the
log end. A hole between two segments is therefore damage -- a sealed segment removed, or cut by
a recovery below the recovery point, which keeps the later segments. A read reaching the hole
used to go on in the next segment, and a consumer skipped the hole's records without a word.
"""
import os

import pytest

from streamlog.errors import CorruptRecordError
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


def test_a_segment_cut_below_the_recovery_point_leaves_a_hole_that_reads_as_an_error(log_dir):
    bases = written_log(log_dir)
    first = segment_files(log_dir)[0]
    with open(first, "r+b") as f:
        f.truncate(os.path.getsize(first) // 2 + 3)   # inside a batch, before index entries
    # The index now points past the log end: the open recovers that segment and keeps the
    # later ones, whose data is valid.
    log = PartitionLog(log_dir, config(**SETTINGS), clean_shutdown=True)
    assert log.recovery_report.truncated_bytes
    assert [s.base_offset for s in log.segments] == bases
    with pytest.raises(CorruptRecordError, match="missing"):
        read_all(log)
    log.close()


def test_a_compacted_log_may_have_holes_between_segments(log_dir):
    bases = written_log(log_dir, cleanup_policy="compact")
    remove_segment(log_dir, bases[1])
    log = PartitionLog(log_dir, config(**SETTINGS, cleanup_policy="compact"),
                       clean_shutdown=True)
    offsets = [r[0] for r in read_all(log)]
    assert offsets == list(range(bases[1])) + list(range(bases[2], log.log_end_offset))
    log.close()
