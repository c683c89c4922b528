"""System test: the segments a roll sealed are flushed behind it, so an unclean stop of a
log written with acks=1 re-validates only its tail.

Kafka's UnifiedLog.roll schedules flushUptoOffsetExclusive(new segment's base) on every
roll, and LogLoader recovers only from the recovery point on. Without that flush the
recovery point of an acks=1 log stayed at 0: a killed writer's next open re-validated the
whole log, and one flipped byte in its first segment cut every later segment away
(12 segments, 200 acknowledged records, log end 0 after the reopen).
"""
import os
import subprocess
import sys
import textwrap

import streamlog
from streamlog.storage.verify import verify_directory

RECORDS = 200

WRITER = textwrap.dedent("""
    import os, sys, time
    import streamlog
    from streamlog.storage.checkpoint import OffsetCheckpointFile
    root = sys.argv[1]
    db = streamlog.open(root, config={"log.flush.scheduler.interval.ms": 20,
                                      "log.flush.offset.checkpoint.interval.ms": 20})
    db.create_topic("t", partitions=1, config={"segment.bytes": 2000})
    p = db.producer(acks=1)
    for i in range(%d):
        p.send("t", value=b"v%%04d" %% i + b"x" * 40).result()
    last_base = max(int(n[:20]) for n in os.listdir(os.path.join(root, "t-0"))
                    if n.endswith(".log"))
    checkpoint = OffsetCheckpointFile(os.path.join(root, "recovery-point-offset-checkpoint"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if checkpoint.read().get(streamlog.TopicPartition("t", 0), 0) >= last_base:
            print("checkpointed past", last_base, flush=True)
            break
        time.sleep(0.02)
    else:
        print("recovery point never reached", last_base, flush=True)
    os._exit(0)   # as kill -9: no close, no clean-shutdown marker
""" % RECORDS)


def test_an_unclean_stop_revalidates_only_what_followed_the_last_roll(tmp_path):
    root = str(tmp_path / "db")
    done = subprocess.run([sys.executable, "-c", WRITER, root], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("checkpointed past"), done.stdout + done.stderr
    partition_dir = os.path.join(root, "t-0")
    logs = sorted(n for n in os.listdir(partition_dir) if n.endswith(".log"))
    assert len(logs) > 5
    # One flipped byte inside the first segment's first batch, long since sealed.
    first = os.path.join(partition_dir, logs[0])
    with open(first, "r+b") as f:
        f.seek(70)
        byte = f.read(1)[0]
        f.seek(70)
        f.write(bytes([byte ^ 0xFF]))
    tp = streamlog.TopicPartition("t", 0)
    with streamlog.open(root) as db:
        assert db.list_offsets({tp: "latest"})[tp].offset == RECORDS
        second_base = int(logs[1][:20])
        consumer = db.consumer()
        consumer.assign([tp])
        consumer.seek(tp, second_base)
        got = []
        while len(got) < RECORDS - second_base:
            got += [r.value for r in consumer.poll(timeout=1)]
        assert got == [b"v%04d" % i + b"x" * 40 for i in range(second_base, RECORDS)]
        consumer.close()
    assert os.path.exists(first)
    # The damage is below the recovery point, not hidden: verify names it.
    report = verify_directory(root)
    assert not report.ok
    assert any(logs[0] in problem for problem in map(str, report.problems)), report
