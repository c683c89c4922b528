"""The storage engine on its own: a partition log on disk, written, read back, verified.

    python examples/storage_engine.py [DIRECTORY]

Appends a few thousand records in batches (small segments, so the log rolls),
reads them back from an offset and by timestamp, closes, reopens, applies a
retention limit, and runs the same check as `streamlog verify`.
"""
import sys
import tempfile
import time

from streamlog.storage.log_config import LogConfig
from streamlog.storage.log_directory import LogDirectory
from streamlog.storage.record_batch import build_batch
from streamlog.storage.verify import verify_directory
from streamlog.structs import TopicPartition


def main(root):
    tp = TopicPartition("events", 0)
    config = LogConfig.from_dict({"segment.bytes": 64 * 1024, "retention.bytes": 100 * 1024})
    now_ms = int(time.time() * 1000)

    logs = LogDirectory(root)
    log = logs.open_log(tp, config)
    for n in range(50):
        values = [b'{"event": %d, "batch": %d}' % (n * 100 + i, n) for i in range(100)]
        keys = [b"user-%d" % (i % 7) for i in range(100)]
        info = log.append(build_batch(values, keys=keys, timestamp=now_ms + n * 1000))
    print(f"appended offsets 0..{info.last_offset} into {len(log.segments)} segments")

    fetch = log.read(1234, max_bytes=4096)
    offset, ts, key, value = next(t for t in fetch.batches[0].tuples()[0] if t[0] == 1234)
    print(f"offset 1234: key={key.decode()} value={value.decode()}")
    found = log.find_offset_by_timestamp(now_ms + 20_500)
    print(f"first record at or after t0+20.5s: offset {found[0]}")
    logs.close()

    logs = LogDirectory(root)  # a clean reopen: nothing to recover
    log = logs.open_log(tp, config)
    deleted = log.delete_old_segments()
    print(f"retention.bytes removed {deleted} old segment(s); log now starts at "
          f"{log.log_start_offset} and ends at {log.log_end_offset}")
    logs.close()

    report = verify_directory(root)
    print(f"verify: {'OK' if report.ok else report.problems} — {report.records} records in "
          f"{report.segments} segments")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            main(d)
