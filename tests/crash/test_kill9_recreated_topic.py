"""kill -9 after a topic is deleted and created again: every acknowledged record survives.

The checkpoint files are keyed by topic and partition, as Kafka's are. A deleted partition's
offsets must leave them at once (Kafka's LogManager rewrites both checkpoints when it deletes
a log): a new partition of the same name has no history, and recovery after a crash trusts the
checkpointed log start offset (KAFKA_REFERENCE.md 1.6, step 5: a log ending below it is
emptied).
"""
import os

import pytest

import streamlog
from streamlog.storage import files

from support import wait_until
from support.child import run_py

SEND_ACKED_THEN_DIE = """
    import os, signal, sys, streamlog
    db = streamlog.open(sys.argv[1])
    if sys.argv[2] == "recreate":
        db.delete_topic("t")
    db.create_topic("t")
    producer = db.producer(acks="all")
    for i in range(20):
        producer.send("t", value=b"new-%d" % i).result()
    print("acked", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def move_log_start_by_retention(root):
    """Topic t whose log start retention moved past 0, checkpointed by a clean close."""
    config = {"log.retention.check.interval.ms": 20}
    with streamlog.open(root, config=config) as db:
        db.create_topic("t", config={"segment.bytes": 1000, "retention.bytes": 1000})
        producer = db.producer(acks="all")
        for i in range(300):
            producer.send("t", value=b"old-%03d" % i).result()
        assert wait_until(lambda: db.describe_topic("t").partitions[0].log_start_offset > 200)
    # What the close checkpointed: retention (every 20 ms) may move the start again between a
    # describe_topic and the close.
    with open(os.path.join(root, files.LOG_START_OFFSET_CHECKPOINT), encoding="utf-8") as f:
        return next(int(line.split()[2]) for line in f if line.startswith("t 0 "))


def values_after_reopen(root):
    with streamlog.open(root) as db:
        partition = db.describe_topic("t").partitions[0]
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([streamlog.TopicPartition("t", 0)])
        got = []
        while len(got) < partition.high_watermark - partition.log_start_offset:
            records = consumer.poll(timeout=5.0)
            assert records, "the records below the high watermark did not come"
            got.extend((r.offset, r.value) for r in records)
        return partition.log_start_offset, got


@pytest.mark.parametrize("new_end_vs_stale_start", ["below", "above"])
def test_a_recreated_topic_keeps_what_was_acknowledged_after_kill_9(tmp_path,
                                                                      new_end_vs_stale_start):
    root = str(tmp_path / "db")
    stale_start = move_log_start_by_retention(root)
    assert stale_start > 20  # the new topic's 20 records end below the stale start
    if new_end_vs_stale_start == "above":
        # Had the stale start been below the new end, the records under it would vanish.
        checkpoint = os.path.join(root, files.LOG_START_OFFSET_CHECKPOINT)
        with open(checkpoint) as f:
            text = f.read()
        with open(checkpoint, "w") as f:
            f.write(text.replace(f"t 0 {stale_start}", "t 0 7"))
    child = run_py(SEND_ACKED_THEN_DIE, root, "recreate")
    assert child.returncode == -9 and child.stdout == "acked\n", child.stderr
    start, got = values_after_reopen(root)
    assert start == 0
    assert got == [(i, b"new-%d" % i) for i in range(20)]


def test_a_stale_checkpoint_entry_never_applies_to_a_new_directory(tmp_path):
    """A deletion cut off between removing the directory and rewriting the checkpoints leaves
    the old offsets in the file: the next partition made under that name ignores them."""
    root = str(tmp_path / "db")
    stale_start = move_log_start_by_retention(root)
    with streamlog.open(root) as db:
        logs = db._broker.logs
        real_forget = logs._forget_locked
        logs._forget_locked = lambda tps: False  # the rewrite never happens
        db.delete_topic("t")
        logs._forget_locked = real_forget
    with open(os.path.join(root, files.LOG_START_OFFSET_CHECKPOINT)) as f:
        assert f"t 0 {stale_start}" in f.read()  # the stale entry is on disk
    child = run_py(SEND_ACKED_THEN_DIE, root, "create")
    assert child.returncode == -9 and child.stdout == "acked\n", child.stderr
    start, got = values_after_reopen(root)
    assert start == 0
    assert got == [(i, b"new-%d" % i) for i in range(20)]
