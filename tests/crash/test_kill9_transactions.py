"""System test: kill -9 a transactional writer at 100 random moments, reopen, check.

One database lives through 100 writer processes. Each opens it (recovering what the
last one left: a transaction open, a PrepareCommit without its markers, a torn batch),
calls init_transactions() -- which fences the dead writer and aborts its open
transaction -- and runs transactions of 2 x RECORDS records over two partitions,
committing three in four and aborting every fourth, until it is killed at a random
moment (the kill lands in sends, in commit_transaction's fsyncs and marker writes, in
aborts). It prints "C run txn" once commit_transaction() returned.

Every CHECK_EVERY kills, and at the end, this process reopens the database, takes the
transactional id over (so the last writer's open transaction is aborted), and a
read_committed consumer must see: each transaction whole or not at all, every one
reported committed, none that was aborted on purpose, nothing at or above the last
stable offset; and the restarted id must be at a newer epoch than any writer before
(KAFKA_REFERENCE.md §6.2: the bump is what fences zombies)."""
import random
import subprocess
import sys
import time
from collections import Counter

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.coordinator.transaction_coordinator import find_transaction_coordinator

KILLS = 100
CHECK_EVERY = 25
RECORDS = 5
TPS = [TopicPartition("t", 0), TopicPartition("t", 1)]
CONFIG = {"transaction.state.log.num.partitions": 2, "segment.bytes": 8192}

WRITER = """
import sys, streamlog
run = int(sys.argv[2])
db = streamlog.open(sys.argv[1], config=%r)
if "t" not in db.topics():
    db.create_topic("t", partitions=2)
p = db.producer(transactional_id="tx", linger_ms=0)
p.init_transactions()
print("ready", flush=True)
i = 0
while True:
    p.begin_transaction()
    for part in (0, 1):
        for k in range(%d):
            p.send("t", value=b"r%%d-t%%d-p%%d-%%d" %% (run, i, part, k), partition=part)
    if i %% 4 == 3:
        p.abort_transaction()
    else:
        p.commit_transaction()
        print("C", run, i, flush=True)
    i += 1
""" % (CONFIG, RECORDS)


def kill_one(root, run, rng):
    child = subprocess.Popen([sys.executable, "-c", WRITER, root, str(run)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    assert line == "ready\n", line + child.stderr.read()
    time.sleep(rng.uniform(0, 0.15))
    child.kill()
    out, err = child.communicate()
    assert child.returncode == -9, err
    # Only whole lines: the kill may cut the last print short ("C 12" without its txn).
    fields = [line.split() for line in out.split("\n")[:-1]]
    return {(int(f[1]), int(f[2])) for f in fields if len(f) == 3 and f[0] == "C"}


def check(root, committed, epochs):
    with streamlog.open(root, config=CONFIG) as db:
        coordinator = find_transaction_coordinator(db._broker)
        before = coordinator.describe("tx")
        p = db.producer(transactional_id="tx")
        p.init_transactions()          # aborts the killed writer's open transaction
        after = coordinator.describe("tx")
        assert (after.producer_id, after.producer_epoch) > (before.producer_id,
                                                            before.producer_epoch)
        assert (after.producer_id, after.producer_epoch) not in epochs
        epochs.add((after.producer_id, after.producer_epoch))
        for tp in TPS:
            log = db._broker.partition_log(tp)
            assert log.last_stable_offset == log.high_watermark, (tp, log.producer_state.ongoing)
        consumer = db.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
        consumer.assign(TPS)
        counts = Counter()
        while records := consumer.poll(timeout=0.2):
            for r in records:
                run, txn, _part, _k = r.value.decode().split("-")
                counts[(int(run[1:]), int(txn[1:]))] += 1
        consumer.close()
        p.close()
    assert set(counts.values()) <= {2 * RECORDS}, "a transaction seen in part"
    assert not [t for t in counts if t[1] % 4 == 3], "an aborted transaction seen"
    assert committed <= set(counts), f"reported committed, not seen: {committed - set(counts)}"
    return counts


@pytest.mark.slow
def test_kill_9_a_transactional_writer_at_100_random_moments(tmp_path):
    root = str(tmp_path / "db")
    rng = random.Random(20261125)
    committed, epochs = set(), set()
    for run in range(KILLS):
        committed |= kill_one(root, run, rng)
        if (run + 1) % CHECK_EVERY == 0:
            counts = check(root, committed, epochs)
    assert len(committed) > KILLS  # the writers got work done between the kills
    assert len(counts) >= len(committed)
