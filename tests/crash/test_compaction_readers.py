"""System test: readers while the cleaner rewrites the log under them.

Four consumer threads of the writing process and one read-only process read a compacted
topic from its start, over and over, while the writer appends and the cleaner rewrites the
topic 20 times (db.compact). Every value names the offset it was written at, so a reader
checks each record it gets: no reader may raise, every value must be the one written at
that offset, and offsets must increase within a read (no batch torn, none returned twice).
The first PINNED records have keys never written again: compaction keeps them all, so every
whole read must return each of them (no batch missing)."""
import subprocess
import sys
import threading

import streamlog
from streamlog import TopicPartition

PASSES = 20
PINNED = 100
TP = TopicPartition("table", 0)

READ_ONLY_READER = """
import os, sys, streamlog
from streamlog import TopicPartition
tp = TopicPartition("table", 0)
db = streamlog.open(sys.argv[1], readonly=True)
pinned = int(sys.argv[3])
reads = records = 0
while not os.path.exists(sys.argv[2]):
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([tp])
    last = -1
    seen_pinned = 0
    while True:
        got = consumer.poll(timeout=0.01)
        if not got:
            break
        for r in got:
            if r.offset <= last or r.value != b"%d" % r.offset:
                print("BAD", r.offset, r.value, last, flush=True)
                sys.exit(1)
            last = r.offset
            records += 1
            seen_pinned += r.offset < pinned
    consumer.close()
    if seen_pinned != pinned:
        print("MISSING", pinned - seen_pinned, "pinned records", flush=True)
        sys.exit(1)
    if reads == 0:
        print("reading", flush=True)   # the writer starts its passes now
    reads += 1
print("OK", reads, records, flush=True)
"""


def read_loop(db, stop, errors, counts):
    try:
        while not stop.is_set():
            consumer = db.consumer(auto_offset_reset="earliest")
            consumer.assign([TP])
            last = -1
            seen_pinned = 0
            while True:
                got = consumer.poll(timeout=0.01)
                if not got:
                    break
                for r in got:
                    if r.offset <= last or r.value != b"%d" % r.offset:
                        errors.append((r.offset, r.value, last))
                        return
                    last = r.offset
                    counts[0] += 1
                    seen_pinned += r.offset < PINNED
            consumer.close()
            if seen_pinned != PINNED:
                errors.append(f"a read missed {PINNED - seen_pinned} pinned records")
                return
            counts[1] += 1
    except Exception as exc:  # a reader must never fail: recorded for the verdict
        errors.append(exc)


def append(db, producer, n, keys):
    start = db.describe_topic("table").partitions[0].log_end_offset
    for offset in range(start, start + n):
        # The value is the offset this record gets: one producer, one partition, in order.
        key = b"pinned-%d" % offset if offset < PINNED else b"key-%d" % (offset % keys)
        producer.send("table", key=key, value=b"%d" % offset, partition=0)
    producer.flush()


def test_readers_see_only_written_values_while_the_cleaner_rewrites_20_times(tmp_path):
    path = str(tmp_path / "db")
    stop_file = str(tmp_path / "stop")
    # Retention checks every 10 ms: the replaced segments' files go at once
    # (file.delete.delay.ms=0), under readers that may still hold them.
    db = streamlog.open(path, config={"log.retention.check.interval.ms": 10})
    db.create_topic("table", config={"cleanup.policy": "compact", "segment.bytes": 8192,
                                     "file.delete.delay.ms": 0})
    producer = db.producer(linger_ms=0, batch_size=2048)
    append(db, producer, 3000, keys=200)
    child = subprocess.Popen([sys.executable, "-c", READ_ONLY_READER, path, stop_file,
                              str(PINNED)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    errors, counts = [], [0, 0]
    readers = [threading.Thread(target=read_loop, args=(db, stop, errors, counts))
               for _ in range(4)]
    for reader in readers:
        reader.start()
    assert child.stdout.readline().strip() == "reading"
    passes = 0
    for _ in range(PASSES):
        append(db, producer, 300, keys=200)
        (result,) = db.compact("table")
        passes += result.stats is not None
    stop.set()
    for reader in readers:
        reader.join()
    open(stop_file, "w").close()
    out, err = child.communicate(timeout=120)
    producer.close()
    db.close()
    assert not errors, errors[:3]
    assert passes == PASSES
    assert counts[1] >= 4, counts   # every thread finished whole reads
    assert out.startswith("OK"), (out, err)
