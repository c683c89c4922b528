"""Many partitions: open time, held descriptors and maps, create_topic, spread produce, rolls.

    python bench/bench_scale.py [--quick] [--repeats N] [--json FILE]

1. Open a database of P partitions x S segments (P = 100, 1,000, 10,000; S = 1, 20): after a
   clean close, after a kill -9 (a child builds the database, flushes and kills itself), and
   read-only. Printed: seconds, and the descriptors and maps of the database's files the open
   leaves held, against max.open.files (the bound of storage/open_files.py). Baseline: listing
   the same directories (os.scandir of every partition directory), the floor for any open that
   looks at each partition.
2. create_topic of 10,000 partitions, against creating the same 10,000 directories with one
   empty file each (os.makedirs + open/close).
3. Produce 100-byte records round-robin over 10,000 partitions (one send each, then flush) as a
   ratio to the same number of records to one partition (target >= 0.5x).
4. A roll (an append to a full segment opens the next): p50 and p99 of PartitionLog.roll(),
   against one raw os.open(O_CREAT) + close of a new file (target p50 <= 0.3 ms).

--quick runs 100 / 1,000 partitions only, in well under a minute.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

import streamlog  # noqa: E402
from streamlog.storage.log_config import LogConfig  # noqa: E402
from streamlog.storage.partition_log import PartitionLog  # noqa: E402
from streamlog.storage.record_batch import build_batch  # noqa: E402

TS = 1_700_000_000_000
VALUE = b"v" * 100
TOPIC_PARTITIONS = 1_000   # partitions per topic: a 10,000-partition database has 10 topics

BUILD = r"""
import os, signal, sys
import streamlog
from streamlog.storage.record_batch import build_batch
root, partitions, segments, per_topic = sys.argv[1], *map(int, sys.argv[2:5])
db = streamlog.open(root, config={"segment.bytes": 1 << 20, "retention.ms": -1})
topics = max(1, partitions // per_topic)
for t in range(topics):
    db.create_topic(f"t{t}", partitions=min(per_topic, partitions))
batch = build_batch([b"v" * 100] * 10, timestamp=1_700_000_000_000)
broker = db._broker
for t in range(topics):
    for p in range(min(per_topic, partitions)):
        log = broker.partition_log(streamlog.TopicPartition(f"t{t}", p))
        for s in range(segments):
            if s:
                log.roll()
            log.append(batch)
broker.logs.flush_all()
broker.logs.checkpoint()
print("built", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def held(root):
    """(descriptors, maps) of this process that point at files under root."""
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += os.readlink(f"/proc/self/fd/{fd}").startswith(root)
        except OSError:
            pass
    with open("/proc/self/maps") as f:
        maps = sum(1 for line in f if root in line)
    return fds, maps


def build(root, partitions, segments):
    shutil.rmtree(root, ignore_errors=True)
    child = subprocess.run([sys.executable, "-c", BUILD, root, str(partitions), str(segments),
                            str(TOPIC_PARTITIONS)], capture_output=True, text=True)
    if child.returncode != -signal.SIGKILL or "built" not in child.stdout:
        raise SystemExit(f"building {partitions}x{segments} failed: {child.stderr[-2000:]}")


def list_dirs(root):
    for entry in os.scandir(root):
        if entry.is_dir():
            for _ in os.scandir(entry.path):
                pass


def timed_open(root, **kwargs):
    start = time.perf_counter()
    db = streamlog.open(root, **kwargs)
    seconds = time.perf_counter() - start
    fds, maps = held(root)
    bound = db._broker.logs.open_files.max_open_files
    db.close()
    return seconds, fds, maps, bound


def bench_open(results, tmp, partitions, segments):
    root = os.path.join(tmp, f"open-{partitions}x{segments}")
    build(root, partitions, segments)
    start = time.perf_counter()
    list_dirs(root)
    listing = time.perf_counter() - start
    label = f"{partitions:,} partitions x {segments} segment(s)"
    crash, fds, maps, bound = timed_open(root)       # the first open after the kill recovers
    report(results, f"open after kill -9, {label}", crash, listing, fds, maps, bound)
    clean, fds, maps, bound = timed_open(root)
    report(results, f"open after clean close, {label}", clean, listing, fds, maps, bound)
    if partitions == 10_000:
        results.add_absolute("clean open of 10,000 partitions", clean * 1000, "ms", 1000,
                             higher_is_better=False)
    ro, fds, maps, bound = timed_open(root, readonly=True)
    report(results, f"read-only open, {label}", ro, listing, fds, maps, bound)
    shutil.rmtree(root, ignore_errors=True)


def report(results, label, seconds, listing, fds, maps, bound):
    results.add(label, seconds * 1000, "ms", ratio=listing / seconds,
                baseline="listing the directories")
    results.add_absolute(f"  descriptors held ({maps} maps; bound {bound})", fds, "fds", bound,
                         higher_is_better=False)


def bench_create(results, tmp, partitions, repeats):
    root = os.path.join(tmp, "create")
    raw = os.path.join(tmp, "raw-dirs")

    def reset():
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(raw, ignore_errors=True)

    def ours():
        with streamlog.open(root) as db:
            db.create_topic("t", partitions=partitions)

    def theirs():
        for p in range(partitions):
            d = os.path.join(raw, f"t-{p}")
            os.makedirs(d)
            os.close(os.open(os.path.join(d, "00000000000000000000.log"),
                             os.O_CREAT | os.O_WRONLY, 0o644))

    t_ours, t_raw = harness.best_of(repeats, (reset, ours), (reset, theirs))
    reset()
    results.add(f"create_topic of {partitions:,} partitions", t_ours * 1000, "ms",
                ratio=t_raw / t_ours, baseline="makedirs + one empty file each")


def bench_spread(results, tmp, partitions, records, repeats):
    root = os.path.join(tmp, "spread")
    shutil.rmtree(root, ignore_errors=True)
    with streamlog.open(root) as db:
        db.create_topic("many", partitions=partitions)
        db.create_topic("one", partitions=1)
        producer = db.producer(acks=1)

        def spread():
            for i in range(records):
                producer.send("many", value=VALUE, partition=i % partitions)
            producer.flush()

        def single():
            for _ in range(records):
                producer.send("one", value=VALUE, partition=0)
            producer.flush()

        t_spread, t_single = harness.best_of(repeats, spread, single)
        bound = db._broker.logs.open_files.max_open_files
    shutil.rmtree(root, ignore_errors=True)
    results.add(f"produce round-robin over {partitions:,} partitions (max.open.files {bound})",
                records / t_spread, "rec/s", ratio=t_single / t_spread,
                target=0.5, baseline="the same records to one partition")


def bench_roll(results, tmp, rolls):
    directory = os.path.join(tmp, "roll", "t-0")
    log = PartitionLog(directory, LogConfig.from_dict({"segment.bytes": 1 << 30}))
    batch = build_batch([VALUE] * 10, timestamp=TS)
    times = []
    for _ in range(rolls):
        log.append(batch)
        start = time.perf_counter()
        log.roll()
        times.append(time.perf_counter() - start)
    log.close()
    raw_dir = os.path.join(tmp, "roll", "raw")
    os.makedirs(raw_dir)
    raw = []
    for i in range(rolls):
        start = time.perf_counter()
        os.close(os.open(os.path.join(raw_dir, f"{i:020d}.log"), os.O_CREAT | os.O_RDWR, 0o644))
        raw.append(time.perf_counter() - start)
    shutil.rmtree(os.path.join(tmp, "roll"), ignore_errors=True)
    times.sort()
    raw.sort()
    p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
    results.add(f"roll p50 ({rolls:,} rolls)", p50 * 1e6, "us",
                ratio=raw[len(raw) // 2] / p50, baseline="one file creation")
    results.add_absolute("roll p50", p50 * 1000, "ms", 0.3, higher_is_better=False)
    results.add_absolute("roll p99", p99 * 1000, "ms", 5.0, higher_is_better=False)


def main():
    args = harness.parse_args(__doc__.splitlines()[0])
    harness.check_native()
    results = harness.Results("bench_scale")
    results.header()
    sizes = [(100, 1), (100, 20), (1_000, 1)] if args.quick else \
        [(100, 1), (100, 20), (1_000, 1), (1_000, 20), (10_000, 1), (10_000, 20)]
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for partitions, segments in sizes:
            bench_open(results, tmp, partitions, segments)
        bench_create(results, tmp, 1_000 if args.quick else 10_000, args.repeats)
        bench_spread(results, tmp, 1_000 if args.quick else 10_000,
                     20_000 if args.quick else 200_000, args.repeats)
        bench_roll(results, tmp, 500 if args.quick else 5_000)
    return harness.finish(results, args)


if __name__ == "__main__":
    sys.exit(main())
