"""Thousands of partitions under RLIMIT_NOFILE = 256: the bound on open files holds.

Before the bound, every segment kept its log and index files open from open to close (5
descriptors a partition, ~1.6 more per sealed segment): creating 200 partitions under a limit
of 1,024 failed with EMFILE, and every later open of the database died with a bare OSError.
Now the segments of a database share one bound on open files (storage/open_files.py, sized by
max.open.files, by default half the soft limit): a child process with a soft and hard limit of
256 creates the partitions, appends until each has at least 5 segments, closes, reopens
cleanly, appends again and is killed with SIGKILL; another child reopens after the crash, reads
every record back through one consumer assigned every partition, deletes the topics and
reopens. At checkpoints each child counts /proc/self/fd and the maps of the database's files in
/proc/self/maps: the descriptors streamlog adds never exceed max.open.files (but for the few a
directory fsync or an atomic write holds for an instant: TRANSIENT_FDS), nor its maps the
bound's max_maps (an open segment holds one descriptor and three maps at most).

STREAMLOG_SCALE_PARTITIONS sets the partition count (default 10,000, in 4 topics).
"""
import json
import os

import pytest

from support.child import run_py

LIMIT = 256
TOPICS = 4
ROUNDS = 5   # each send is a batch of its own and segment.bytes fits one: a segment each
# Descriptors held for an instant outside the bound, which counts segments' files only: the
# flusher's directory fsync (each roll's flush, as Kafka flushes behind a roll) and an atomic
# write's temporary file (a producer snapshot at a roll, a checkpoint), one thread each.
# Measured: a peak of bound + 1 in 1 run of 3 on the 2-core VM beside a busy loop.
TRANSIENT_FDS = 2

COMMON = """
import json, os, resource, signal, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
import streamlog
from streamlog import TopicPartition

ROOT, PARTITIONS, TOPICS, ROUNDS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
PER_TOPIC = PARTITIONS // TOPICS
TPS = [TopicPartition(f"t{t}", p) for t in range(TOPICS) for p in range(PER_TOPIC)]
peaks = {"fds": 0, "maps": 0}


def count_fds():
    return len(os.listdir("/proc/self/fd"))


def count_maps():
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if ROOT in line)   # maps of the database's files


BASE = {"fds": count_fds(), "maps": count_maps()}


def checkpoint(db=None):
    peaks["fds"] = max(peaks["fds"], count_fds() - BASE["fds"])
    peaks["maps"] = max(peaks["maps"], count_maps() - BASE["maps"])


def value(round_no, tp):
    return b"%s-%d-r%d" % (tp.topic.encode(), tp.partition, round_no) + b"." * 60


def produce_round(db, round_no, acks):
    producer = db.producer(acks=acks, linger_ms=0)
    futures = [producer.send(tp.topic, value=value(round_no, tp), partition=tp.partition)
               for tp in TPS]
    producer.flush()
    for f in futures:
        f.result()
    checkpoint(db)


def read_all(db, rounds):
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign(TPS)
    want = len(TPS) * rounds
    got = {}
    idle = 0
    while sum(len(v) for v in got.values()) < want and idle < 50:
        records = consumer.poll(timeout=0.2)
        idle = 0 if records else idle + 1
        for r in records:
            got.setdefault(TopicPartition(r.topic, r.partition), []).append(r.value)
        checkpoint(db)
    consumer.close()
    wrong = [tp for tp in TPS if got.get(tp) != [value(n, tp) for n in range(rounds)]]
    return sum(len(v) for v in got.values()), [str(tp) for tp in wrong[:5]]


def report(**extra):
    print("RESULT " + json.dumps(dict(peaks, base=BASE, **extra)), flush=True)
"""

BUILD_THEN_DIE = COMMON + """
db = streamlog.open(ROOT, config={"segment.bytes": 200, "retention.ms": -1})
bound = db._broker.logs.open_files.max_open_files
max_maps = db._broker.logs.open_files.max_maps
for t in range(TOPICS):
    db.create_topic(f"t{t}", partitions=PER_TOPIC)
    checkpoint(db)
for n in range(ROUNDS):
    produce_round(db, n, acks=1)
segments = sum(p.segments for t in range(TOPICS) for p in db.describe_topic(f"t{t}").partitions)
db.close()
checkpoint()
db = streamlog.open(ROOT)          # clean
checkpoint(db)
read, wrong = read_all(db, ROUNDS)
produce_round(db, ROUNDS, acks="all")
report(bound=bound, max_maps=max_maps, segments=segments, read=read, wrong=wrong)
os.kill(os.getpid(), signal.SIGKILL)
"""

RECOVER_READ_DELETE = COMMON + """
db = streamlog.open(ROOT)          # after kill -9: recovery
bound = db._broker.logs.open_files.max_open_files
max_maps = db._broker.logs.open_files.max_maps
checkpoint(db)
read, wrong = read_all(db, ROUNDS + 1)
for t in range(TOPICS):
    db.delete_topic(f"t{t}")
db.close()
db = streamlog.open(ROOT)
left = [n for n in os.listdir(ROOT) if n.startswith("t")]
topics = db.topics()
db.close()
checkpoint()
report(bound=bound, max_maps=max_maps, read=read, wrong=wrong, left=left[:5], topics=topics)
"""


def result_of(child):
    lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"no result (exit {child.returncode}): {child.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.slow
def test_ten_thousand_partitions_under_a_limit_of_256_descriptors(tmp_path):
    partitions = int(os.environ.get("STREAMLOG_SCALE_PARTITIONS", 10_000))
    root = str(tmp_path / "db")
    args = (root, str(partitions), str(TOPICS), str(ROUNDS))

    built = run_py(BUILD_THEN_DIE, *args, timeout=900)
    first = result_of(built)
    assert built.returncode == -9, built.stderr[-3000:]
    bound = first["bound"]
    assert bound == LIMIT // 2   # the default: half the soft limit
    assert first["segments"] >= ROUNDS * partitions
    assert first["read"] == ROUNDS * partitions and first["wrong"] == []
    assert first["fds"] <= bound + TRANSIENT_FDS, first
    assert first["maps"] <= first["max_maps"] <= 3 * bound, first

    checked = run_py(RECOVER_READ_DELETE, *args, timeout=900)
    second = result_of(checked)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert second["read"] == (ROUNDS + 1) * partitions and second["wrong"] == []
    assert second["topics"] == [] and second["left"] == []
    assert second["fds"] <= bound + TRANSIENT_FDS, second
    assert second["maps"] <= second["max_maps"] <= 3 * bound, second
