"""System test: kill -9 a process whose group member commits in a loop; reopen; check offsets.

A child process opens the database, consumes a topic as the only member of
group "g" and commits after every few records, printing each commit once
commit() returned. It takes one step (commit, print, poll) per line the
parent writes to its stdin, so it cannot run ahead of what the parent has
read and reach the end of the topic (its output pipe would otherwise hold
thousands of unread commits). It is killed with SIGKILL at a random moment
of a step, five times in a row on the same directory. After each kill the database must reopen,
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
        for _step in sys.stdin:
            c.commit()
            print("committed", c.committed([streamlog.TopicPartition("t", 0)])[
                streamlog.TopicPartition("t", 0)].offset, flush=True)
            c.poll(timeout=0.1)
""")


def step(child):
    child.stdin.write("go\n")
    child.stdin.flush()


def test_committed_offsets_survive_sigkill_and_the_next_member_resumes(tmp_path):
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("t")
        producer = db.producer()
        producer.send_batch("t", [b"%d" % i for i in range(RECORDS)]).result()
    rng = random.Random(20261122)
    previous = 0
    for _ in range(5):
        child = subprocess.Popen([sys.executable, "-c", CHILD, path], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = child.stdout.readline().split()
        assert first[:1] == ["first"], first + [child.stderr.read()]
        # A member of a reopened group resumes exactly at the committed offset.
        assert int(first[1]) == previous
        reported = previous
        for _ in range(rng.randint(1, 40)):
            step(child)
            line = child.stdout.readline().split()
            assert line[:1] == ["committed"], line
            reported = int(line[1])
        step(child)  # one more step, killed somewhere inside it
        time.sleep(rng.uniform(0, 0.005))
        child.send_signal(signal.SIGKILL)
        child.wait()
        for stream in (child.stdin, child.stdout, child.stderr):
            try:
                stream.close()
            except BrokenPipeError:  # the unread "go" of a killed child
                pass
        with streamlog.open(path) as db:
            d = db.describe_group("g")
            assert d.state == "Empty" and d.members == []
            committed = d.partitions[TP].committed
            assert reported <= committed <= RECORDS
            assert committed >= previous
            previous = committed
    assert 0 < previous < RECORDS  # at most 41 steps of 7 records a round: never the end
