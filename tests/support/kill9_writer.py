"""Writer process for the SIGKILL crash test.

Opens the log root (recovering it if the previous writer was killed), then
appends batches forever. Batch n holds records whose values are a pure
function of their offsets, so a reader can check that the log is exactly a
prefix of the sequence. Every few batches it fsyncs and prints
`synced <next offset>`; everything below that offset must survive the kill.
"""
import sys

from streamlog.storage.log_config import LogConfig
from streamlog.storage.log_directory import LogDirectory
from streamlog.storage.record_batch import build_batch
from streamlog.structs import TopicPartition

RECORDS_PER_BATCH = 200
VALUE_BYTES = 8000  # ~1.6 MB batches: kills often land inside the write itself
TP = TopicPartition("crash", 0)
CONFIG = LogConfig.from_dict({"segment.bytes": 8 << 20, "index.interval.bytes": 4096,
                              "max.message.bytes": 4 << 20})


def value_for(offset):
    head = b"offset-%012d|" % offset
    return head + bytes([offset % 251]) * (VALUE_BYTES - len(head))


def main(root):
    directory = LogDirectory(root)
    log = directory.open_log(TP, CONFIG)
    print(f"opened {log.log_end_offset}", flush=True)
    n = 0
    while True:
        start = log.log_end_offset
        values = [value_for(start + i) for i in range(RECORDS_PER_BATCH)]
        log.append(build_batch(values, timestamp=1_700_000_000_000 + start))
        n += 1
        if n % 2 == 0:
            print(f"synced {log.flush()}", flush=True)
            directory.checkpoint()


if __name__ == "__main__":
    main(sys.argv[1])
