"""System test: a cleaning pass after a swap whose renames failed past its commit point.

A swap's `.cleaned` files are renamed `.swap` and the directory fsynced (the commit point);
then the replaced segments are renamed `.deleted` and the `.swap` files take their final
names (PartitionLog.replace_segments). If that last rename fails (an I/O error), the
`.swap` files stay. A forced pass (db.compact) then wrote its own `.cleaned` files beside
them, and a crash before its commit left a directory the loader reads as a swap that never
committed (log_loader step 1): it removed the committed `.swap` files with the `.cleaned`
ones, while the segments they replaced were already `.deleted`, so removed as well. Every
record of the first segments was gone. A pass is now refused while a swap is unfinished;
the next open finishes it."""
import os
import subprocess
import sys

import streamlog
from streamlog import TopicPartition

import support

TP = TopicPartition("t", 0)

CHILD = """
import errno, os, sys, streamlog
from streamlog.storage import files, partition_log, segment
sys.path.insert(0, sys.argv[2])   # the tests' folder
from support import append_offset_valued

db = streamlog.open(sys.argv[1])
db.create_topic("t", config={"cleanup.policy": "compact", "segment.bytes": 4096})
append_offset_valued(db, "t", 600)
real_rename = segment.LogSegment.rename_suffix
def step_3_fails(self, old, new):
    if old == files.SWAP_SUFFIX and new == "":
        raise OSError(errno.EIO, "injected: the swap's last rename fails")
    return real_rename(self, old, new)
segment.LogSegment.rename_suffix = step_3_fails
try:
    db.compact("t")
except Exception as exc:
    print("first pass:", type(exc).__name__, flush=True)
segment.LogSegment.rename_suffix = real_rename
append_offset_valued(db, "t", 300)
# A crash once the next pass has written its .cleaned files, before its swap commits.
partition_log.PartitionLog.replace_segments = lambda *args, **kwargs: os._exit(9)
try:
    db.compact("t")
    print("second pass: ran", flush=True)
except Exception as exc:
    print("second pass:", type(exc).__name__, exc, flush=True)
os._exit(9)
"""


def test_a_pass_after_a_swap_left_unfinished_is_refused_and_the_next_open_finishes_it(
        tmp_path):
    path = str(tmp_path / "db")
    tests = os.path.dirname(os.path.dirname(support.__file__))
    child = subprocess.run([sys.executable, "-c", CHILD, path, tests], capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == 9, child.stderr
    assert "first pass: KafkaStorageError" in child.stdout, child.stdout
    assert "second pass: KafkaStorageError" in child.stdout, child.stdout
    assert "still has its temporary .swap name" in child.stdout
    with streamlog.open(path) as db:
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TP])
        latest = {}
        while True:
            records = consumer.poll(timeout=1.0)
            if not records:
                break
            for r in records:
                assert r.value == b"%d" % r.offset
                latest[r.key] = r.offset
    # Compaction keeps each key's last record: the 20 keys written once and the 20
    # keys written over and over, at their last offsets (880..899).
    assert latest == {**{b"first-%d" % i: i for i in range(20)},
                      **{b"k%d" % (i % 20): i for i in range(880, 900)}}
