"""System test: kill -9 a process whose group member commits in a loop; reopen; check offsets.

A child process opens the database, consumes a topic as the only member of
group "g" and commits after every few records, printing each commit once
commit() returned. It is killed with SIGKILL at a random moment, five times
in a row on the same directory. After each kill the database must reopen,
the group must be Empty with its offsets, the committed offset must be at
least the last one the child reported (a commit that returned was written
to the log before returning, so it survives the death of the process), and
the next child's first record must be exactly at the committed offset.
"""
import random
import signal
import subprocess
import sys
import textwrap
import time

import streamlog
from streamlog import TopicPartition

RECORDS = 3_000
TP = TopicPartition("t", 0)

CHILD = textwrap.dedent("""
    import sys, streamlog
    with streamlog.open(sys.argv[1]) as db:
        c = db.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                        max_poll_records=7)
        c.subscribe(["t"])
        while True:
            records = c.poll(timeout=0.1)
            if records:
                print("first", records[0].offset, flush=True)
                break
        while True:
            c.commit()
            print("committed", c.committed([streamlog.TopicPartition("t", 0)])[
                streamlog.TopicPartition("t", 0)].offset, flush=True)
            c.poll(timeout=0.1)
""")


def test_committed_offsets_survive_sigkill_and_the_next_member_resumes(tmp_path):
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("t")
        producer = db.producer()
        producer.send_batch("t", [b"%d" % i for i in range(RECORDS)]).result()
    rng = random.Random(20261122)
    previous = 0
    for _ in range(5):
        child = subprocess.Popen([sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        first = child.stdout.readline().split()
        assert first[:1] == ["first"], first + [child.stderr.read()]
        # A member of a reopened group resumes exactly at the committed offset.
        assert int(first[1]) == previous
        reported = previous
        for _ in range(rng.randint(1, 40)):
            line = child.stdout.readline().split()
            assert line[:1] == ["committed"], line
            reported = int(line[1])
        time.sleep(rng.uniform(0, 0.005))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        child.stderr.close()
        with streamlog.open(path) as db:
            d = db.describe_group("g")
            assert d.state == "Empty" and d.members == []
            committed = d.partitions[TP].committed
            assert reported <= committed <= RECORDS
            assert committed >= previous
            previous = committed
    assert previous > 0
