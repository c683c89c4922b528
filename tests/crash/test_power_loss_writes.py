"""System test: the power goes at each of the first SYNCS syncs of an acks="all" writer.

DESIGN.md §2: acknowledged data that was fsynced is never lost. The writer sends records
one at a time with acks="all" to two partitions whose segments hold a few batches each,
so its syncs include rolls (the old segment's tail, the producer snapshot, the indexes,
the new segment's name), not only appends. Writer N is cut at its N-th sync
(support.power_loss.die_at_sync, before the sync is made) and its segment files are put
back to their bytes as of their last sync; all of them write to one database, so each
also opens what the cuts before it left.

Every CHECK_EVERY cuts, and at the end: every record acknowledged is read back at the
offset it was acknowledged with; no record is there twice; the log reads from its start
to its end; a new record goes at the end; and, once closed, `verify` finds no damage."""
import os

import streamlog
from streamlog import TopicPartition
from streamlog.storage.verify import verify_directory
from support.power_loss import run_cut_writer

SYNCS = 40
CHECK_EVERY = 10
TPS = [TopicPartition("w", 0), TopicPartition("w", 1)]

# Record i of run r goes to partition i % 2; "A r i partition offset" is printed once its
# send was acknowledged.
WRITER = """
import os, sys
import streamlog
from support.power_loss import die_at_sync
root, cut, durable, run = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
db = streamlog.open(root)
if "w" not in db.topics():
    db.create_topic("w", partitions=2, config={"segment.bytes": 1024})
p = db.producer(acks="all", linger_ms=0)
os.sync()
die = die_at_sync(root, cut, durable)
for i in range(100000):
    md = p.send("w", value=b"r%d-%d-" % (run, i) + b"x" * 100, partition=i % 2).result()
    print("A", run, i, md.partition, md.offset, flush=True)
die()
"""


def cut_one(root, run, cut):
    """{(partition, offset): value} of the records the writer had acknowledged."""
    return {(int(f[3]), int(f[4])): b"r%d-%d-" % (int(f[1]), int(f[2])) + b"x" * 100
            for f in run_cut_writer(WRITER, root, cut, run) if len(f) == 5 and f[0] == "A"}


def check(root, acknowledged):
    with streamlog.open(root) as db:
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign(TPS)
        held = {}
        while records := consumer.poll(timeout=0.2):
            held.update(((r.partition, r.offset), r.value) for r in records)
        consumer.close()
        lost = {k: v for k, v in acknowledged.items() if held.get(k) != v}
        assert not lost, f"acknowledged, not read back there: {sorted(lost)[:5]}"
        assert len(set(held.values())) == len(held), "a record is there twice"
        for tp in TPS:
            end = db._broker.partition_log(tp).log_end_offset
            assert max((o for p, o in held if p == tp.partition), default=-1) == end - 1
            value = b"after-%d" % len(acknowledged)
            producer = db.producer(acks="all")
            assert producer.send("w", value=value, partition=tp.partition).result().offset == end
            producer.close()
            acknowledged[(tp.partition, end)] = value
    report = verify_directory(root)
    assert not report.problems, report.problems


def test_a_power_loss_at_each_sync_of_an_acks_all_writer_loses_no_acknowledged_record(
        tmp_path):
    root = os.path.abspath(str(tmp_path / "db"))
    acknowledged = {}
    for run in range(SYNCS):
        acknowledged.update(cut_one(root, run, cut=run + 1))
        if (run + 1) % CHECK_EVERY == 0:
            check(root, acknowledged)
    assert len(acknowledged) >= SYNCS   # the writers got work done between the cuts
