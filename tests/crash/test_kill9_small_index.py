"""kill -9 with an index smaller than its segment needs: every acknowledged record survives.

An index never decides what data is kept (KAFKA_REFERENCE.md 1.6: indexes are rebuilt from the
log; a segment's batches are what recovery validates). Recovery rebuilt the index of the active
segment at the configured size, found it full, took that for corruption ("segment holds more
batches than its index") and cut the log there: 881 of 1,010 acknowledged records were lost.
Now a full index only stops indexing: lookups past its last entry scan further.
"""
import pytest

import streamlog
from streamlog import TopicPartition

from support.child import run_py

SHRINK_THEN_DIE = """
    import os, signal, sys, streamlog
    db = streamlog.open(sys.argv[1])
    db.create_topic("t", config={"index.interval.bytes": int(sys.argv[2])})
    producer = db.producer(acks="all", linger_ms=0)
    for i in range(1000):
        producer.send("t", value=b"%06d" % i).result()       # a batch each
    db.alter_topic_config("t", {"segment.index.bytes": 1024})  # room for 128 entries
    for i in range(1000, 1010):
        producer.send("t", value=b"%06d" % i).result()
    print("acked", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("interval", [0, 50])
def test_an_index_shrunk_below_its_segment_cuts_nothing_after_kill_9(tmp_path, interval):
    root = str(tmp_path / "db")
    child = run_py(SHRINK_THEN_DIE, root, str(interval))
    assert child.returncode == -9 and child.stdout == "acked\n", child.stderr
    with streamlog.open(root) as db:
        assert db.describe_topic("t").partitions[0].high_watermark == 1010
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("t", 0)])
        got = []
        while len(got) < 1010:
            records = consumer.poll(timeout=5.0)
            assert records, f"stopped after {len(got)} records"
            got.extend((r.offset, r.value) for r in records)
        assert got == [(i, b"%06d" % i) for i in range(1010)]
        # Reads from offsets past the index's last entry find their record by scanning.
        consumer.seek(TopicPartition("t", 0), 1005)
        assert [r.value for r in consumer.poll(timeout=5.0)][:1] == [b"001005"]
        db.producer(acks="all").send("t", value=b"after").result()  # appends roll on
