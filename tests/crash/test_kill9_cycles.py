"""System test: many kill -9 cycles on one database, with topics deleted and re-created, configs
changed between runs and clean reopens in between; every acknowledged record survives byte for
byte.

This file owns the crash loop over the operations the other kill -9 tests take one at a time
(test_kill9: torn tails of one log; test_kill9_recreated_topic: one re-create;
test_kill9_small_index: one index shrunk below its segment). The rule it checks is Kafka's log
recovery (KAFKA_REFERENCE.md 1.6): recovery validates the batches of the log and rebuilds the
indexes from them; an index is derived data and never decides what data is kept, whatever size
or interval it was configured with, now or in an earlier run. A record acknowledged with
acks="all" was fsynced before its future completed (docs/API.md), and kill -9 loses nothing the
process had written anyway (the page cache outlives the process): so every acknowledged record
must be found after the kill at its acknowledged offset with its exact bytes.

Each cycle runs two child processes (tests/support/kill9_cycles_child.py). The writer opens the
database (recovering it), takes a seeded random step sequence (produce, alter segment.index.bytes
/ index.interval.bytes / segment.bytes / segment.ms, delete and re-create a topic with another
partition count, close and reopen) and kills itself at a random point, printing every
acknowledgement and every topic it deleted or created the moment the call returned. The reader
then opens the database read-write (recovery again), prints everything it holds, and either
closes it cleanly or is killed too, so writers start from both crashed and clean directories.
This process keeps the model and checks the reader's report against it:

- the topics and partition counts are those of the current incarnations;
- each partition holds, from offset 0, densely: what earlier readers saw (recovery is
  deterministic and the log only grows), then a prefix of what the last writer sent to it, in
  send order, at least up to its last acknowledgement; so no record of a deleted incarnation,
  and records past the last ack only if the writer had sent them;
- high watermark = log end offset = records read; seeks and timestamp lookups land right;
- `streamlog verify` finds the directory sound (every index entry says what the log says).

STREAMLOG_CRASH_SEED picks the seed (fixed by default, `random` draws one; printed, and named
in every failure), STREAMLOG_CRASH_CYCLES
the number of cycles.
"""
import json
import os
import random
import subprocess
import sys
from collections import defaultdict

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.storage.verify import verify_directory

from support import kill9_cycles_child as child
from support import seeds
from support.child import run_py

# Measured on the 2-core VM: ~0.5 s a cycle (two interpreter starts, ~30 acked fsynced sends, two
# recoveries, one verify): 50 cycles took 23-27 s idle, 38 s beside a load of 4. The log grows
# with the cycles and each reader reads all of it: 250 cycles took 184 s.
DEFAULT_CYCLES = 50


class Partition:
    def __init__(self):
        self.known = []      # values at offsets 0.. that a reader has seen: they must stay
        self.sent = []       # values the last writer sent here, in send order
        self.acked = {}      # offset -> value the last writer had acknowledged


class Topic:
    def __init__(self, generation, partitions):
        self.generation = generation
        self.partitions = [Partition() for _ in range(partitions)]


class Model:
    def __init__(self):
        self.generations = {t: 0 for t in child.TOPICS}
        self.topics = {}  # name -> Topic, for the topics that exist
        self.stats = defaultdict(int)

    def state(self):
        return json.dumps({t: [self.generations[t], len(self.topics[t].partitions)
                               if t in self.topics else 0] for t in child.TOPICS})

    def apply_writer(self, lines, where):
        for topic in self.topics.values():
            for partition in topic.partitions:
                partition.sent, partition.acked = [], {}
        for words in lines:
            kind = words[0]
            self.stats[kind] += 1
            if kind == "created":
                name, generation, partitions = words[1], int(words[2]), int(words[3])
                assert generation == self.generations[name] + 1, where
                self.generations[name] = generation
                self.topics[name] = Topic(generation, partitions)
            elif kind == "deleted":
                del self.topics[words[1]]
            elif kind in ("sending", "acked"):
                name, generation, p = words[1], int(words[2]), int(words[3])
                topic = self.topics[name]
                assert generation == topic.generation, f"{where}: {words}"
                partition = topic.partitions[p]
                if kind == "sending":
                    partition.sent.append(bytes.fromhex(words[4]))
                else:
                    partition.acked[int(words[4])] = bytes.fromhex(words[5])

    def check_reader(self, report, where):
        """Check a reader's report against the model; then what it saw becomes known."""
        got_topics = {name: int(n) for name, n in report["topic"]}
        expected_topics = {name: len(t.partitions) for name, t in self.topics.items()}
        assert got_topics == expected_topics, \
            f"{where}: topics and partition counts {got_topics}, expected {expected_topics}"
        for name, topic in self.topics.items():
            for p, partition in enumerate(topic.partitions):
                self.check_partition(name, topic.generation, p, partition, report,
                                     f"{where}, {name}-{p} (generation {topic.generation})")

    def check_partition(self, name, generation, p, partition, report, where):
        start, hw, leo = report["partition"][(name, p)]
        rows = report["record"][(name, p)]
        offsets = [offset for offset, _ts, _value in rows]
        values = [value for _offset, _ts, value in rows]
        assert start == 0, f"{where}: log start {start}: nothing here deletes records"
        assert offsets == list(range(len(rows))), f"{where}: offsets not dense from 0: {offsets}"
        assert hw == leo == len(rows), f"{where}: HW {hw}, LEO {leo}, {len(rows)} records read"
        prefix = b"%s-gen%d-p%d-" % (name.encode(), generation, p)
        strangers = [(o, v[:40]) for o, v in enumerate(values) if not v.startswith(prefix)]
        assert not strangers, f"{where}: records of another incarnation or partition: {strangers}"
        for offset, value in sorted(partition.acked.items()):
            assert offset < len(values), \
                f"{where}: acknowledged offset {offset} lost, the log ends at {len(values)}"
            assert values[offset] == value, \
                f"{where}: offset {offset} holds {values[offset][:40]}, acknowledged " \
                f"{value[:40]}"
        known = len(partition.known)
        assert values[:known] == partition.known, \
            f"{where}: the {known} records an earlier reader saw changed"
        new = values[known:]
        assert new == partition.sent[:len(new)], \
            f"{where}: records past the {known} known ones are not the next ones the writer " \
            f"sent: got {[v[:40] for v in new[:5]]}, sent {[v[:40] for v in partition.sent[:5]]}"
        for offset, first, value in report["seek"][(name, p)]:
            assert (first, value) == (offset, values[offset]), \
                f"{where}: seek to {offset} returned offset {first}"
        timestamps = [ts for _offset, ts, _value in rows]
        if timestamps == sorted(timestamps):  # else "first at or after" depends on index entries
            for timestamp, found in report["time"][(name, p)]:
                expected = next(o for o, ts in enumerate(timestamps) if ts >= timestamp)
                assert found == expected, \
                    f"{where}: offsets_for_times({timestamp}) = {found}, expected {expected}"
        self.stats["records kept past their ack"] += len(values) - max(
            [known] + [o + 1 for o in partition.acked])
        partition.known = values


def run_child(*args):
    proc = subprocess.run([sys.executable, child.__file__, *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    return proc, [line.split() for line in proc.stdout.splitlines()]


def parse_reader(lines):
    report = {"topic": [], "partition": {}, "record": defaultdict(list),
              "seek": defaultdict(list), "time": defaultdict(list)}
    for words in lines:
        kind = words[0]
        if kind == "topic":
            report["topic"].append((words[1], words[2]))
        elif kind == "partition":
            report["partition"][(words[1], int(words[2]))] = tuple(map(int, words[3:6]))
        elif kind == "record":
            report["record"][(words[1], int(words[2]))].append(
                (int(words[3]), int(words[4]), bytes.fromhex(words[5])))
        elif kind == "seek":
            value = None if words[5] == "-" else bytes.fromhex(words[5])
            report["seek"][(words[1], int(words[2]))].append((int(words[3]), int(words[4]),
                                                              value))
        elif kind == "time":
            report["time"][(words[1], int(words[2]))].append((int(words[3]), int(words[4])))
    return report


def crash_seed():
    return seeds.master_seed("STREAMLOG_CRASH_SEED")


@pytest.mark.slow
def test_acknowledged_records_survive_kill_9_cycles_of_recreates_config_changes_and_reopens(
        tmp_path):
    seed = crash_seed()
    cycles = int(os.environ.get("STREAMLOG_CRASH_CYCLES") or DEFAULT_CYCLES)
    root = str(tmp_path / "db")
    model = Model()
    rng = random.Random(seed)
    for cycle in range(cycles):
        where = f"STREAMLOG_CRASH_SEED={seed} cycle {cycle}"
        proc, lines = run_child("write", root, rng.randrange(1 << 32), model.state())
        assert proc.returncode == -9 and lines and lines[-1][0] == "kill", \
            f"{where}: the writer did not die by its SIGKILL (rc {proc.returncode}): " \
            f"{proc.stderr[-3000:]}"
        model.stats[f"killed {lines[-1][1]}"] += 1
        model.apply_writer(lines, where)
        where += f" (writer killed {lines[-1][1]}, {len(lines)} lines)"
        end = rng.choice(("close", "kill"))
        proc, lines = run_child("read", root, rng.randrange(1 << 32), end)
        assert lines and lines[-1] == ["done"] and proc.returncode == (-9 if end == "kill" else 0), \
            f"{where}: the reader failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
        model.check_reader(parse_reader(lines), where)
        report = verify_directory(root)
        assert report.ok, f"{where}: verify after the reader: {[str(p) for p in report.problems]}"
    stats = dict(sorted(model.stats.items()))
    print(f"{cycles} cycles, {cycles} writers killed: {stats}")
    assert model.stats["acked"] > 0 and model.stats["deleted"] > 0


SMALL_INDEX_REOPENS_THEN_KILL = """
    import os, signal, sys, streamlog
    sent = 0
    for cycle in range(5):
        db = streamlog.open(sys.argv[1])
        if cycle == 0:
            db.create_topic("t", config={"segment.index.bytes": 4096, "index.interval.bytes": 0})
        producer = db.producer(acks="all", linger_ms=0)
        for _ in range(60):
            producer.send("t", value=b"%06d" % sent).result()
            sent += 1
        db.close()
    db = streamlog.open(sys.argv[1])
    producer = db.producer(acks="all", linger_ms=0)
    for _ in range(100):
        producer.send("t", value=b"%06d" % sent).result()
        sent += 1
    print("acked", sent, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_small_index_across_clean_reopens_keeps_every_record_after_kill_9(tmp_path):
    """Each clean close trims the index to its entries and each open maps it again at 4096
    bytes: the scenario in which older code was reported to lose 59 of these 400 records."""
    root = str(tmp_path / "db")
    proc = run_py(SMALL_INDEX_REOPENS_THEN_KILL, root)
    assert proc.returncode == -9 and proc.stdout == "acked 400\n", proc.stderr
    with streamlog.open(root) as db:
        assert db.describe_topic("t").partitions[0].high_watermark == 400
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("t", 0)])
        got = []
        while len(got) < 400:
            records = consumer.poll(timeout=5.0)
            assert records, f"stopped after {len(got)} records"
            got.extend((r.offset, r.value) for r in records)
        assert got == [(i, b"%06d" % i) for i in range(400)]

