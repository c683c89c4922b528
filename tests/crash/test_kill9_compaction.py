"""System test: kill -9 a process in the middle of a cleaning pass, at 50 random moments.

A database with a compacted topic of several segments is made once. Each of 50 runs copies
it, starts a child that opens the copy, prints "ready" and runs one forced pass
(db.compact), and kills it after a random delay drawn over twice the pass's measured length:
before the pass, while it reads and writes `.cleaned` segments, and in the swap. Each copy
is then reopened (a crash recovery: no clean-shutdown marker) and must read exactly as the
log did before the pass or exactly as after it (offsets, keys and values), and `streamlog
verify` must pass. Which of the two each run left is counted: both must occur."""
import os
import random
import shutil
import subprocess
import sys
import time

import streamlog
from streamlog import TopicPartition
from streamlog.storage.verify import verify_directory

KILLS = 50
TP = TopicPartition("table", 0)
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 16384}

CHILD = """
import sys, time, streamlog
db = streamlog.open(sys.argv[1])
print("ready", flush=True)
start = time.monotonic()
db.compact("table")
print("done %f" % (time.monotonic() - start), flush=True)
time.sleep(60)
"""


def rows(path):
    db = streamlog.open(path)
    try:
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TP])
        out = []
        while True:
            got = consumer.poll(timeout=0.05)
            if not got:
                break
            out += [(r.offset, r.key, r.value) for r in got]
        consumer.close()
        return out, db.describe_topic("table").partitions[0].log_end_offset
    finally:
        db.close()


def make_template(path):
    db = streamlog.open(path)
    db.create_topic("table", config=TOPIC_CONFIG)
    producer = db.producer(linger_ms=5, acks="all")
    rng = random.Random(7)
    for i in range(12_000):
        producer.send("table", key=b"key-%d" % rng.randrange(300), value=b"value-%d" % i,
                      partition=0)
    producer.send("table", key=b"key-1", value=None, partition=0)
    producer.close()
    db.close()


def run_child(path):
    return subprocess.Popen([sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_kill_anywhere_in_a_pass_reopens_as_before_or_after_it(tmp_path):
    template = str(tmp_path / "template")
    make_template(template)
    before = rows(template)
    # The pass run to its end once: what "after" reads, and how long a pass takes here.
    finished = str(tmp_path / "finished")
    shutil.copytree(template, finished)
    child = run_child(finished)
    assert child.stdout.readline().strip() == "ready"
    line = child.stdout.readline().split()
    child.kill()
    child.wait()
    assert line and line[0] == "done", child.stderr.read()
    pass_s = float(line[1])
    after = rows(finished)
    assert after != before and after[1] == before[1]
    rng = random.Random(2026)
    outcomes = {"before": 0, "after": 0}
    for run in range(KILLS):
        path = str(tmp_path / f"run{run}")
        shutil.copytree(template, path)
        child = run_child(path)
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        time.sleep(rng.uniform(0, pass_s * 2))
        child.kill()
        child.wait()
        seen = rows(path)
        assert seen in (before, after), f"run {run}: the log reads as neither"
        outcomes["before" if seen == before else "after"] += 1
        report = verify_directory(path)
        assert report.ok, [str(p) for p in report.problems]
        leftovers = [n for n in os.listdir(os.path.join(path, "table-0"))
                     if n.endswith((".cleaned", ".swap"))]
        assert not leftovers
        shutil.rmtree(path)
    assert outcomes["before"] and outcomes["after"], outcomes
