"""kill -9 right after delete_records returns: the deleted records stay deleted.

DeleteRecords inside the first segment removes no file; the new log start lived only in memory
until the next periodic checkpoint (log.flush.offset.checkpoint.interval.ms, 60 s), so a writer
killed before it came back with the records below it readable again, to itself and to every
read-only view. The start is now in log-start-offset-checkpoint, fsynced, before the call
returns (as retention's is before it removes a segment).
"""
import streamlog
from streamlog import TopicPartition

from support.child import run_py

TP = TopicPartition("t", 0)

DELETE_THEN_DIE = """
    import os, signal, sys, streamlog
    db = streamlog.open(sys.argv[1])
    db.create_topic("t", partitions=2)
    producer = db.producer(acks="all")
    for i in range(60):
        for p in (0, 1):
            producer.send("t", value=b"%03d" % i, partition=p).result()
    tps = [streamlog.TopicPartition("t", p) for p in (0, 1)]
    starts = db._broker.delete_records({tps[0]: 25, tps[1]: -1})
    print(starts[tps[0]], starts[tps[1]], flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def offsets_read(db, tp):
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([tp])
    got = []
    while True:
        records = consumer.poll(timeout=0.2)
        if not records:
            return got
        got.extend(r.offset for r in records)


def test_records_deleted_before_a_kill_9_stay_deleted(tmp_path):
    root = str(tmp_path / "db")
    child = run_py(DELETE_THEN_DIE, root)
    assert child.returncode == -9 and child.stdout == "25 60\n", child.stderr
    tp1 = TopicPartition("t", 1)
    # A view of the crashed directory, then the writer's recovery: both start where the
    # DeleteRecords left each partition, inside its only segment.
    for readonly in (True, False):
        with streamlog.open(root, readonly=readonly) as db:
            partitions = db.describe_topic("t").partitions
            assert [(p.segments, p.log_start_offset, p.high_watermark) for p in partitions] \
                == [(1, 25, 60), (1, 60, 60)]
            assert offsets_read(db, TP) == list(range(25, 60))
            assert offsets_read(db, tp1) == []
