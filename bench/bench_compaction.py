"""Log compaction: one cleaning pass over a large log, against a raw copy and sqlite3.

    python bench/bench_compaction.py [--quick] [--repeats N] [--json FILE]

The log: one partition of 10 M records (about 1 GB) over 100 k distinct keys, values of
80 bytes, in 1,000-record batches, 128 MiB segments. Each repeat cleans a fresh copy of it
in a child process (db.compact: the offset map over the whole log, every segment copied),
so the child's peak RSS is the pass's memory.

1. Cleaner throughput (bytes of log cleaned per second) as a ratio to a raw sequential copy
   of the same segment files (1 MiB reads and writes, fsynced at the end, as the cleaner
   fsyncs what it writes): target >= 0.3x.
2. The same dedupe in sqlite3: every record INSERT OR REPLACE'd into a table keyed by the
   record key, in one transaction: target: the cleaner >= 2x faster.
3. Memory of the pass: the cleaning process's peak RSS minus its RSS before the pass
   (the interpreter, numpy and the open database: about 70 MiB, printed too): target
   <= log.cleaner.dedupe.buffer.size (128 MiB) + 64 MiB.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

import streamlog  # noqa: E402

TOPIC = "table"
VALUE = b"v" * 80
BATCH = 1_000
DEDUPE_BUFFER = 128 << 20

# Memory from /proc/self/status: VmHWM is this process's own peak RSS (getrusage's
# ru_maxrss would also count what the parent held when it forked the child).
CLEAN_CHILD = """
import json, sys, time, streamlog

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

db = streamlog.open(sys.argv[1], config={"log.cleaner.dedupe.buffer.size": %d})
before = status("VmRSS")
start = time.perf_counter()
(result,) = db.compact("table")
elapsed = time.perf_counter() - start
peak = status("VmHWM")
db.close()
s = result.stats
print(json.dumps(dict(elapsed=elapsed, bytes_read=s.bytes_read, bytes_written=s.bytes_written,
                      records_read=s.records_read, records_kept=s.records_kept,
                      peak_kib=peak, before_kib=before)))
""" % DEDUPE_BUFFER


def key_indexes(records, keys):
    return np.random.default_rng(2026).integers(0, keys, records)


def build(root, records, keys):
    """The log to clean; returns its segment files' total bytes."""
    with streamlog.open(root) as db:
        db.create_topic(TOPIC, config={"cleanup.policy": "compact",
                                       "segment.bytes": 128 << 20})
        producer = db.producer(linger_ms=0, batch_size=1 << 20)
        indexes = key_indexes(records, keys)
        for start in range(0, records, BATCH):
            chunk = indexes[start:start + BATCH]
            producer.send_batch(TOPIC, [VALUE] * len(chunk),
                                keys=[b"key-%08d" % k for k in chunk.tolist()], partition=0)
        producer.close()
        size = db.describe_topic(TOPIC).partitions[0].size_bytes
    return size


def log_files(root):
    directory = os.path.join(root, f"{TOPIC}-0")
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.endswith(".log"))


def raw_copy(files, target):
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    with open(target, "wb") as out:
        for path in files:
            with open(path, "rb") as f:
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    out.write(view[:n])
        out.flush()
        os.fsync(out.fileno())


def sqlite_dedupe(path, records, keys):
    indexes = key_indexes(records, keys)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE latest (key BLOB PRIMARY KEY, offset INTEGER, value BLOB)")
    with conn:
        conn.executemany("INSERT OR REPLACE INTO latest VALUES (?, ?, ?)",
                         ((b"key-%08d" % k, i, VALUE) for i, k in enumerate(indexes.tolist())))
    distinct = conn.execute("SELECT count(*) FROM latest").fetchone()[0]
    conn.close()
    return distinct


def clean_copy(template, root):
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(template, root)
    out = subprocess.run([sys.executable, "-c", CLEAN_CHILD, root], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    args = harness.parse_args(__doc__.splitlines()[0])
    harness.check_native()
    records, keys = (100_000, 1_000) if args.quick else (10_000_000, 100_000)
    results = harness.Results("bench_compaction")
    results.header()
    with tempfile.TemporaryDirectory(prefix="bench-compaction-") as tmp:
        template = os.path.join(tmp, "template")
        size = build(template, records, keys)
        print(f"log: {records:,} records over {keys:,} keys, {size / 1e6:,.0f} MB", flush=True)
        best_clean, best_copy, best_sqlite = float("inf"), float("inf"), float("inf")
        peak = added = 0
        for _ in range(args.repeats):
            run = clean_copy(template, os.path.join(tmp, "cleaned"))
            assert run["bytes_read"] >= size and run["records_kept"] == keys, run
            best_clean = min(best_clean, run["elapsed"])
            peak = max(peak, run["peak_kib"] * 1024)
            added = max(added, (run["peak_kib"] - run["before_kib"]) * 1024)
            copy_target = os.path.join(tmp, "copy.bin")
            start = time.perf_counter()
            raw_copy(log_files(template), copy_target)
            best_copy = min(best_copy, time.perf_counter() - start)
            os.remove(copy_target)
            db_path = os.path.join(tmp, "dedupe.sqlite")
            start = time.perf_counter()
            distinct = sqlite_dedupe(db_path, records, keys)
            best_sqlite = min(best_sqlite, time.perf_counter() - start)
            assert distinct == keys
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(db_path + suffix):
                    os.remove(db_path + suffix)
        results.add("cleaning pass, MB/s of log (vs raw copy of the segments)",
                    size / best_clean / 1e6, "MB/s", ratio=best_copy / best_clean, target=0.3,
                    baseline=f"copy {size / best_copy / 1e6:,.0f} MB/s")
        results.add("dedupe of every record (vs sqlite3 INSERT OR REPLACE)",
                    records / best_clean, "rec/s", ratio=best_sqlite / best_clean, target=2.0,
                    baseline=f"sqlite3 {records / best_sqlite:,.0f} rec/s")
        print(f"peak RSS of the cleaning process: {peak / (1 << 20):,.0f} MiB "
              f"({(peak - added) / (1 << 20):,.0f} MiB before the pass)")
        results.add_absolute("memory of the pass (peak RSS - RSS before), MiB",
                             added / (1 << 20), "MiB", target=(DEDUPE_BUFFER >> 20) + 64,
                             higher_is_better=False)
    return harness.finish(results, args)


if __name__ == "__main__":
    sys.exit(main())
