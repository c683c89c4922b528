"""The two child programs of tests/crash/test_kill9_cycles.py: a writer that dies by SIGKILL and
a reader that reports what a reopened database holds.

    kill9_cycles_child.py write ROOT SEED STATE
    kill9_cycles_child.py read ROOT SEED close|kill

The writer opens ROOT (recovering it from the previous kill), takes a random step sequence drawn
from SEED, and kills itself with SIGKILL at a random point. STATE is JSON, {topic: [generation,
partitions]}, partitions 0 for a topic that does not exist now; a topic the writer creates gets
generation + 1, so its values never match those of an earlier incarnation of the same name. It
checks nothing: it prints, flushed, each fact the moment it holds, so the parent knows exactly
what was acknowledged when the kill came (values in hex):

    opened                                   the database is open (again, after `closed`)
    closed                                   db.close() returned
    config TOPIC KEY VALUE                   alter_topic_config returned
    deleted TOPIC                            delete_topic returned
    created TOPIC GENERATION PARTITIONS      create_topic returned
    sending TOPIC GENERATION PARTITION VALUE before send(): the record may reach the log from now on
    acked TOPIC GENERATION PARTITION OFFSET VALUE   its future's result() returned (acks="all")
    kill WHERE                               the SIGKILL follows

The reader opens ROOT read-write (so it runs recovery), prints every topic, partition and record,
then checks a few seeks and timestamp lookups drawn from SEED, and ends with a clean close or with
SIGKILL as told (the next writer then recovers a crashed directory again, or opens a clean one):

    topic TOPIC PARTITIONS
    partition TOPIC PARTITION LOG_START HIGH_WATERMARK LOG_END
    record TOPIC PARTITION OFFSET TIMESTAMP VALUE
    seek TOPIC PARTITION OFFSET FIRST_OFFSET_RETURNED VALUE      (FIRST -1: nothing came)
    time TOPIC PARTITION TIMESTAMP OFFSET_FOUND                  (-1: none found)
    done
"""
import json
import os
import random
import signal
import sys

import streamlog
from streamlog import TopicPartition

TOPICS = ("a", "b")

# segment.index.bytes from 12 (one offset entry, one time entry: an index full after a batch or
# two) to 1 MiB; the small ones are smaller than the batches already in the segment need.
INDEX_BYTES = (12, 64, 1024, 1024, 4096, 4096, 65536, 1 << 20)
SEGMENT_BYTES = (1024, 2048, 4096, 16384, 65536, 1 << 20)
SEGMENT_MS = (5, 50, 1000, 604_800_000)
# A batch must fit the smallest segment.bytes: Kafka refuses one larger than the segment.
BATCH_SIZE = 700
FILLER = 300  # a value is its name plus up to this many bytes, so batches differ in size


def say(*words):
    print(*words, flush=True)


def random_config(rng):
    config = {}
    if rng.random() < 0.7:
        config["segment.index.bytes"] = rng.choice(INDEX_BYTES)
    if rng.random() < 0.7:
        config["index.interval.bytes"] = rng.choice((0, 0, 1, 100, rng.randint(0, 8192), 8192))
    if rng.random() < 0.6:
        config["segment.bytes"] = rng.choice(SEGMENT_BYTES)
    if rng.random() < 0.2:
        config["segment.ms"] = rng.choice(SEGMENT_MS)
    return config


class Writer:
    def __init__(self, root, seed, state):
        self.root = root
        self.rng = random.Random(seed)
        self.state = state
        self.serial = 0
        self.db = None
        self.producer = None

    def open(self):
        self.db = streamlog.open(self.root)
        self.producer = self.db.producer(acks="all", linger_ms=0, batch_size=BATCH_SIZE)
        say("opened")

    def maybe_die(self, where, chance):
        if self.rng.random() < chance:
            say("kill", where)
            os.kill(os.getpid(), signal.SIGKILL)

    def live_topics(self):
        return [t for t in TOPICS if self.state[t][1] > 0]

    def create(self, topic, previous_partitions=0):
        generation = self.state[topic][0] + 1
        partitions = self.rng.choice([n for n in range(1, 5) if n != previous_partitions])
        self.db.create_topic(topic, partitions=partitions, config=random_config(self.rng))
        self.state[topic] = [generation, partitions]
        say("created", topic, generation, partitions)

    def recreate(self, topic):
        previous_partitions = self.state[topic][1]
        self.db.delete_topic(topic)
        self.state[topic][1] = 0
        say("deleted", topic)
        self.maybe_die("after-delete", 0.15)
        self.create(topic, previous_partitions)

    def alter(self, topic):
        for key, value in random_config(self.rng).items():
            self.db.alter_topic_config(topic, {key: value})
            say("config", topic, key, value)
            self.maybe_die("after-config", 0.05)

    def value(self, topic, generation, partition):
        self.serial += 1
        name = b"%s-gen%d-p%d-%06d-" % (topic.encode(), generation, partition, self.serial)
        return name + self.rng.randbytes(self.rng.randint(0, FILLER))

    def produce(self, topic):
        generation, partitions = self.state[topic]
        records = self.rng.randint(1, 60)
        # Several futures outstanding lets records share batches, and a kill with some of them
        # unacknowledged leaves records on disk the parent must recognise as sent.
        window = self.rng.choice((1, 1, 2, 5, 20))
        pending = []
        for _ in range(records):
            partition = self.rng.randrange(partitions)
            value = self.value(topic, generation, partition)
            say("sending", topic, generation, partition, value.hex())
            pending.append((partition, value, self.producer.send(topic, value=value,
                                                                 partition=partition)))
            if len(pending) >= window:
                self.settle(topic, generation, pending, self.rng.randint(1, len(pending)))
            self.maybe_die("between-sends", 0.01)
        self.settle(topic, generation, pending, len(pending))

    def settle(self, topic, generation, pending, count):
        for _ in range(count):
            partition, value, future = pending.pop(0)
            offset = future.result(timeout=60).offset
            say("acked", topic, generation, partition, offset, value.hex())
            self.maybe_die("between-acks", 0.01)

    def run(self):
        self.open()
        for topic in TOPICS:
            if self.state[topic][1] == 0:
                self.create(topic)
                self.maybe_die("after-create", 0.1)
        for _ in range(self.rng.randint(2, 10)):
            topic = self.rng.choice(self.live_topics())
            step = self.rng.choices(("produce", "alter", "recreate", "reopen"),
                                    weights=(6, 2, 1, 1))[0]
            if step == "produce":
                self.produce(topic)
            elif step == "alter":
                self.alter(topic)
            elif step == "recreate":
                self.recreate(topic)
                self.maybe_die("after-recreate", 0.2)
            else:
                self.db.close()
                say("closed")
                self.open()
                self.maybe_die("after-reopen", 0.1)
        say("kill", "end")
        os.kill(os.getpid(), signal.SIGKILL)


def read(root, seed, end):
    rng = random.Random(seed)
    db = streamlog.open(root)
    consumer = db.consumer(auto_offset_reset="earliest")
    for topic in db.topics():
        description = db.describe_topic(topic)
        say("topic", topic, len(description.partitions))
        for info in description.partitions:
            tp = TopicPartition(topic, info.partition)
            say("partition", topic, info.partition, info.log_start_offset, info.high_watermark,
                info.log_end_offset)
            consumer.assign([tp])
            consumer.seek(tp, info.log_start_offset)
            rows = []
            while len(rows) < info.high_watermark - info.log_start_offset:
                records = consumer.poll(timeout=2.0)
                if not records:
                    break  # the parent sees the records missing
                rows.extend((r.offset, r.timestamp, r.value) for r in records)
            for offset, timestamp, value in rows:
                say("record", topic, info.partition, offset, timestamp, value.hex())
            # Reads from an offset go through the offset index; lookups by time through the
            # time index: both may be small, full, or rebuilt by recovery.
            for _ in range(min(5, len(rows))):
                offset = rng.randrange(info.log_start_offset, info.high_watermark)
                consumer.seek(tp, offset)
                got = consumer.poll(timeout=2.0, max_records=1)
                say("seek", topic, info.partition, offset, got[0].offset if got else -1,
                    got[0].value.hex() if got else "-")
            for _ in range(min(3, len(rows))):
                timestamp = rng.choice(rows)[1]
                found = consumer.offsets_for_times({tp: timestamp})[tp]
                say("time", topic, info.partition, timestamp, -1 if found is None else found.offset)
    say("done")
    if end == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    consumer.close()
    db.close()


if __name__ == "__main__":
    mode, root, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "write":
        Writer(root, seed, json.loads(sys.argv[4])).run()
    else:
        read(root, seed, sys.argv[4])
