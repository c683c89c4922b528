"""Writer process for the SIGKILL crash test.

Opens the log root (recovering it if the previous writer was killed), then
appends batches forever. Batch n holds records whose values are a pure
function of their offsets, so a reader can check that the log is exactly a
prefix of the sequence. It prints one line per step, so the test knows what
was under way when the kill landed:

    opened <log end offset>               after recovery, before any append
    appending <base offset>               the batch is built; log.append starts
    writing <path> <position> <size>      the pwritev of the batch's bytes starts now
    synced <next offset>                  fsynced: everything below must survive

Each line is printed after the step before it has finished, so the last line
the writer got out bounds the log exactly (see test_kill9.expected_ends).
`writing` comes from a wrapper around os.pwritev, the one call that writes
.log bytes (storage/file_records.py), so the test can watch the file grow and
kill while the batch is half written.

    kill9_writer.py ROOT [HOLD_AFTER_SYNCS]

With HOLD_AFTER_SYNCS = n >= 0, every write after the n-th `synced` line
waits, once `writing` is printed, for a line on stdin: the test is then
already watching the file when the write starts, instead of waking up a
variable while after it (long enough, on a loaded machine, for the write to
be over). The wait only delays the write; it changes nothing on disk.
"""
import os
import sys

from streamlog.storage.log_config import LogConfig
from streamlog.storage.log_directory import LogDirectory
from streamlog.storage.record_batch import build_batch
from streamlog.structs import TopicPartition

RECORDS_PER_BATCH = 200
VALUE_BYTES = 8000  # ~1.6 MB batches: one pwritev of ~0.3 ms, long enough to aim a kill into
TP = TopicPartition("crash", 0)
CONFIG = LogConfig.from_dict({"segment.bytes": 8 << 20, "index.interval.bytes": 4096,
                              "max.message.bytes": 4 << 20})


def value_for(offset):
    head = b"offset-%012d|" % offset
    return head + bytes([offset % 251]) * (VALUE_BYTES - len(head))


_pwritev = os.pwritev
_hold = False  # set once the syncs the test asked for are done


def _announced_pwritev(fd, buffers, offset):
    path = os.readlink(f"/proc/self/fd/{fd}")
    print(f"writing {path} {offset} {sum(len(b) for b in buffers)}", flush=True)
    if _hold:
        sys.stdin.readline()
    return _pwritev(fd, buffers, offset)


def main(root, hold_after_syncs=-1):
    global _hold
    os.pwritev = _announced_pwritev
    directory = LogDirectory(root)
    log = directory.open_log(TP, CONFIG)
    print(f"opened {log.log_end_offset}", flush=True)
    n = syncs = 0
    _hold = syncs >= hold_after_syncs >= 0
    while True:
        start = log.log_end_offset
        batch = build_batch([value_for(start + i) for i in range(RECORDS_PER_BATCH)],
                            timestamp=1_700_000_000_000 + start)
        print(f"appending {start}", flush=True)
        log.append(batch)
        n += 1
        if n % 2 == 0:
            print(f"synced {log.flush()}", flush=True)
            syncs += 1
            _hold = syncs >= hold_after_syncs >= 0
            directory.checkpoint()


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
