"""Atomic replacement of checkpoint files: the order of writes, fsyncs and the rename, what a
failure at each step leaves, and that a leftover `.tmp` is never read."""
import os

import pytest

from streamlog.errors import KafkaStorageError
from streamlog.storage import durable, files
from streamlog.storage.checkpoint import OffsetCheckpointFile
from streamlog.storage.log_directory import LogDirectory
from streamlog.structs import TopicPartition

from support import config, make_batch

TP = TopicPartition("t", 0)


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


@pytest.fixture
def journal(monkeypatch):
    """Record os.fsync / os.replace calls (with what was on disk at that moment) in order."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("names file descriptors through /proc/self/fd (Linux)")
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        events.append(("fsync", path, None if os.path.isdir(path) else read(path)))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", src, dst, read(src), read(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_write_atomically_writes_fsyncs_renames_then_fsyncs_the_directory(tmp_path, journal):
    path = str(tmp_path / "ckpt")
    tmp = path + files.TMP_SUFFIX
    durable.write_atomically(path, b"old\n")
    journal.clear()
    durable.write_atomically(path, b"new contents\n")
    assert journal == [
        ("fsync", tmp, b"new contents\n"),  # the temp file is complete when it is fsynced...
        ("replace", tmp, path, b"new contents\n", b"old\n"),  # ...and only then renamed over
        ("fsync", str(tmp_path), None),  # and the rename is made durable
    ]
    assert read(path) == b"new contents\n" and not os.path.exists(tmp)


def test_checkpoint_files_are_written_through_write_atomically(tmp_path, journal):
    path = str(tmp_path / files.RECOVERY_POINT_CHECKPOINT)
    OffsetCheckpointFile(path).write({TP: 5})
    assert [e[:2] for e in journal] == [("fsync", path + files.TMP_SUFFIX),
                                        ("replace", path + files.TMP_SUFFIX),
                                        ("fsync", str(tmp_path))]


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_failed_step_leaves_the_old_file_whole(tmp_path, monkeypatch, failing):
    path = str(tmp_path / "ckpt")
    durable.write_atomically(path, b"old\n")

    def fail(*_args):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(KafkaStorageError, match="cannot write"):
        durable.write_atomically(path, b"new\n")
    assert read(path) == b"old\n"


def test_a_leftover_tmp_is_ignored_on_read_and_replaced_by_the_next_write(tmp_path):
    path = str(tmp_path / "ckpt")
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TP: 5})
    for leftover in (b"0\n1\nt 0 9", b"0\n3\nt 0 1", b"\x00\x00garbage"):  # torn newer writes
        with open(path + files.TMP_SUFFIX, "wb") as f:
            f.write(leftover)
        assert checkpoint.read() == {TP: 5}
    checkpoint.write({TP: 7})
    assert checkpoint.read() == {TP: 7} and not os.path.exists(path + files.TMP_SUFFIX)


def test_a_log_directory_recovers_from_the_checkpoints_not_their_leftover_tmps(tmp_path):
    root = str(tmp_path / "root")
    cfg = config(segment_bytes=3000, index_interval_bytes=200)
    directory = LogDirectory(root)
    log = directory.open_log(TP, cfg)
    for b in range(20):
        log.append(make_batch(b))
    log.flush()
    directory.checkpoint()  # recovery point 200 on disk
    for b in range(20, 30):
        log.append(make_batch(b))
    log.flush()
    # The process dies while replacing both checkpoints: each .tmp holds a newer, unrenamed copy.
    for name, offset in ((files.RECOVERY_POINT_CHECKPOINT, 300),
                         (files.LOG_START_OFFSET_CHECKPOINT, 150)):
        with open(os.path.join(root, name + files.TMP_SUFFIX), "w") as f:
            f.write(f"0\n1\nt 0 {offset}\n")
    log.close(flush=False)

    directory = LogDirectory(root)
    assert not directory.clean_shutdown
    log = directory.open_log(TP, cfg)
    recovered = [base for base, _ in log.recovery_report.recovered_segments]
    holding_200 = max(s.base_offset for s in log.segments if s.base_offset <= 200)
    assert recovered and recovered[0] == holding_200  # from 200, not the .tmp's 300
    assert log.log_start_offset == 0  # not the .tmp's 150
    assert log.log_end_offset == 300
    log.flush()
    directory.checkpoint()
    for name in (files.RECOVERY_POINT_CHECKPOINT, files.LOG_START_OFFSET_CHECKPOINT):
        assert not os.path.exists(os.path.join(root, name + files.TMP_SUFFIX))
    assert OffsetCheckpointFile(os.path.join(root, files.RECOVERY_POINT_CHECKPOINT)).read() == \
        {TP: 300}
    directory.close()
