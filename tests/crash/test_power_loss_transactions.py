"""System test: the power goes at each of the first SYNCS syncs of a transactional writer.

kill -9 keeps the page cache, so the kill tests cannot tell whether a transaction's
fsyncs come in the order its recovery needs. Here writer process N runs transactions
until its N-th sync (an fsync, fdatasync or index flush, counted once it is ready),
where support.power_loss.die_at_sync kills it before the sync is made; this process
then puts every segment file back to its bytes as of its last sync (put_back), as a
power loss that drops the page cache would. Every writer runs the same transactions,
so the SYNCS writers cut each sync of the first three once: a commit over two
partitions, an abort, a commit over one. All of them live in one database, so each
writer also opens what the cuts before it left.

The order TRANSACTIONS.md gives, each durable before the next is written:
the Ongoing record (a partition never holds data of a transaction its coordinator
does not know), the data, PrepareCommit (the decision), the markers, CompleteCommit.
If any of them came late, some cut point below leaves one of: a partition whose open
transaction nobody will end (last stable offset stuck below the high watermark), a
transaction seen in part, a committed one reported and lost, an aborted one seen, or
offsets committed without their transaction's records.

Every CHECK_EVERY cuts, and at the end, this process reopens the database, takes the
transactional id over (fencing the dead writer and aborting what it left open) and
checks all of that with a read_committed consumer (KAFKA_REFERENCE.md §6)."""
import os
from collections import Counter

import streamlog
from streamlog import TopicPartition
from support.power_loss import run_cut_writer

SYNCS = 36      # a transaction here makes about 12; the setup is not counted
CHECK_EVERY = 9
RECORDS = 3
TPS = [TopicPartition("t", 0), TopicPartition("t", 1)]
INPUT = TopicPartition("in", 0)
CONFIG = {"transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2,
          "segment.bytes": 8192}

# Transaction i of run r: RECORDS records to both partitions, to 0 or to 1 (i % 3), the
# group's offset of INPUT set to r * 1000 + i + 1 with them; the second of every four
# aborted ("A r i" printed once abort_transaction() returned), the others committed
# ("C r i" once commit_transaction() returned).
WRITER = """
import os, sys
import streamlog
from support.power_loss import die_at_sync
root, cut, durable, run = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
db = streamlog.open(root, config=%r)
for topic in ("t", "in"):
    if topic not in db.topics():
        db.create_topic(topic, partitions=2 if topic == "t" else 1)
p = db.producer(transactional_id="tx", linger_ms=0)
p.init_transactions()
os.sync()
die = die_at_sync(root, cut, durable)
for i in range(1000):
    p.begin_transaction()
    for part in ([0, 1], [0], [1])[i %% 3]:
        for k in range(%d):
            p.send("t", value=b"r%%d-t%%d-p%%d-%%d" %% (run, i, part, k), partition=part)
    p.send_offsets_to_transaction({streamlog.TopicPartition("in", 0): run * 1000 + i + 1}, "g")
    if i %% 4 == 1:
        p.abort_transaction()
        print("A", run, i, flush=True)
    else:
        p.commit_transaction()
        print("C", run, i, flush=True)
die()
""" % (CONFIG, RECORDS)


def cut_one(root, run, cut):
    """One writer, cut at its cut-th sync; its segment files put back. Returns the
    transactions it reported committed, and those it reported aborted."""
    fields = run_cut_writer(WRITER, root, cut, run)
    done = {(f[0], int(f[1]), int(f[2])) for f in fields if len(f) == 3}
    return {t[1:] for t in done if t[0] == "C"}, {t[1:] for t in done if t[0] == "A"}


def read_all(db, isolation):
    consumer = db.consumer(isolation_level=isolation, auto_offset_reset="earliest")
    consumer.assign(TPS)
    values = []
    while records := consumer.poll(timeout=0.2):
        values.extend(r.value.decode() for r in records)
    consumer.close()
    return values


def check(root, committed, aborted):
    with streamlog.open(root, config=CONFIG) as db:
        p = db.producer(transactional_id="tx")
        p.init_transactions()          # fences the dead writer, aborts what it left open
        for tp in TPS:
            log = db._broker.partition_log(tp)
            assert log.last_stable_offset == log.high_watermark, \
                (tp, log.last_stable_offset, log.high_watermark, log.producer_state.ongoing)
        uncommitted = read_all(db, "read_uncommitted")
        assert len(uncommitted) == len(set(uncommitted)), "a record written twice"
        records, parts = Counter(), {}
        for value in read_all(db, "read_committed"):
            run, txn, part, _k = value.split("-")
            key = (int(run[1:]), int(txn[1:]))
            records[key] += 1
            parts.setdefault(key, set()).add(part)
        consumer = db.consumer(group_id="g")
        offset = consumer.committed([INPUT])[INPUT]
        consumer.close()
        p.close()
    assert all(records[t] == RECORDS * len(parts[t]) for t in records), \
        "a transaction seen in part"
    assert not [t for t in records if t[1] % 4 == 1], "an aborted transaction seen"
    assert not set(records) & aborted
    assert committed <= set(records), f"reported committed, not seen: {committed - set(records)}"
    # The group's offset is the one the last visible transaction committed with it: never
    # one of a transaction that did not commit, never an earlier one.
    last = max(records, default=None)
    expected = None if last is None else last[0] * 1000 + last[1] + 1
    committed_offset = None if offset is None else getattr(offset, "offset", offset)
    assert committed_offset == expected, (committed_offset, last)
    return records


def test_a_power_loss_at_each_sync_of_a_transactional_writers_first_transactions(tmp_path):
    root = os.path.abspath(str(tmp_path / "db"))
    committed, aborted = set(), set()
    for run in range(SYNCS):
        done, undone = cut_one(root, run, cut=run + 1)
        committed |= done
        aborted |= undone
        if (run + 1) % CHECK_EVERY == 0:
            records = check(root, committed, aborted)
    assert len(committed) >= SYNCS // 12   # the writers got work done between the cuts
    assert aborted                          # ... and the cuts reached an abort
    assert len(records) >= len(committed)
