"""System test: kill -9 a process in the middle of a cleaning pass, at 50 moments.

A database with a compacted topic of several segments is made once. Each run copies it,
starts a child that opens the copy, prints "ready" and runs one forced pass (db.compact),
and the child dies by SIGKILL: in 25 runs the parent kills it after a random delay drawn
over twice the pass's measured length (before the pass, while it reads and writes
`.cleaned` segments, in the swap, after it); in 25 runs the child kills itself at its
n-th file rename of the pass, n spread over all of them (the swap's three renames per file,
then the checkpoint's), so the swap's every stage is hit whatever the machine's speed.
Each copy is then reopened (a crash recovery: no clean-shutdown marker) and must read
exactly as the log did before the pass or exactly as after it (offsets, keys and values),
and `streamlog verify` must pass."""
import os
import random
import shutil
import subprocess
import sys
import time

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.storage.verify import verify_directory

KILLS = 50
TP = TopicPartition("table", 0)
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 16384}

CHILD = """
import os, signal, sys, time, streamlog
kill_at = int(sys.argv[2])   # the rename of the pass at which to die; -1: none
renames = [0]

def counted(real):
    def rename(*args, **kwargs):
        if renames[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        renames[0] += 1
        return real(*args, **kwargs)
    return rename

os.rename, os.replace = counted(os.rename), counted(os.replace)
db = streamlog.open(sys.argv[1])
print("ready", flush=True)
renames[0] = 0   # only the pass's renames count
start = time.monotonic()
db.compact("table")
print("done %f %d" % (time.monotonic() - start, renames[0]), flush=True)
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


def run_child(path, kill_at=-1):
    return subprocess.Popen([sys.executable, "-c", CHILD, path, str(kill_at)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
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
    pass_s, renames = float(line[1]), int(line[2])
    assert renames > 10   # the swap renames every file of every group, then the checkpoint
    after = rows(finished)
    assert after != before and after[1] == before[1]
    rng = random.Random(2026)
    kills = [("delay", rng.uniform(0, pass_s * 2)) for _ in range(KILLS // 2)]
    kills += [("rename", round(i * (renames - 1) / (KILLS // 2 - 1))) for i in range(KILLS // 2)]
    outcomes = {"before": 0, "after": 0}
    for run, (how, when) in enumerate(kills):
        path = str(tmp_path / f"run{run}")
        shutil.copytree(template, path)
        child = run_child(path, when if how == "rename" else -1)
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        if how == "delay":
            time.sleep(when)
            child.kill()
        child.wait()
        assert child.returncode == -9, (how, when, child.stderr.read())
        seen = rows(path)
        assert seen in (before, after), f"run {run} ({how} {when}): the log reads as neither"
        outcomes["before" if seen == before else "after"] += 1
        report = verify_directory(path)
        assert report.ok, [str(p) for p in report.problems]
        leftovers = [n for n in os.listdir(os.path.join(path, "table-0"))
                     if n.endswith((".cleaned", ".swap"))]
        assert not leftovers
        shutil.rmtree(path)
    # The first rename kill lands before the swap's commit, the last one after the swap.
    assert outcomes["before"] and outcomes["after"], outcomes
