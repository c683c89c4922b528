"""Consumer groups over the wire: Kafka's clients join, sync, heartbeat, leave and commit
through the server, in the same groups and offsets as the in-process consumers."""
import asyncio
import threading

import pytest

import streamlog

from support import wait_until
from support.clients import kafka_python_group_consumer

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
aiokafka = pytest.importorskip("aiokafka")

PARTITIONS = 4


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    database.create_topic("t", partitions=PARTITIONS)
    producer = database.producer()
    for i in range(40):
        producer.send("t", key=b"k%d" % i, value=b"v%d" % i)
    producer.flush()
    yield database
    database.close()


def committed_in_process(db, group):
    return {tp.partition: lag.committed for tp, lag in db.describe_group(group).partitions.items()}


def end_offsets(db):
    return {p.partition: p.high_watermark for p in db.describe_topic("t").partitions}


def test_kafka_python_subscribes_and_commits(db, server):
    consumer = kafka.KafkaConsumer("t", bootstrap_servers=server.bootstrap_servers,
                                   group_id="kp", client_id="billing-7",
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   consumer_timeout_ms=5000)
    values = sorted(m.value for m in consumer)
    consumer.commit()
    members = db.describe_group("kp").members   # the member as the database sees it
    consumer.close()
    assert values == sorted(b"v%d" % i for i in range(40))
    assert committed_in_process(db, "kp") == end_offsets(db)
    assert [m.client_id for m in members] == ["billing-7"]


def test_confluent_kafka_subscribes_and_commits(db, server):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                         "group.id": "ck", "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    consumer.subscribe(["t"])
    values = []
    while len(values) < 40:
        message = consumer.poll(10)
        assert message is not None and message.error() is None, message and message.error()
        values.append(message.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([confluent_kafka.TopicPartition("t", p)
                                    for p in range(PARTITIONS)], timeout=10)
    consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(40))
    assert {tp.partition: tp.offset for tp in committed} == end_offsets(db)
    assert committed_in_process(db, "ck") == end_offsets(db)


def test_aiokafka_subscribes_and_commits(db, server):
    async def run():
        consumer = aiokafka.AIOKafkaConsumer("t", bootstrap_servers=server.bootstrap_servers,
                                             group_id="ak", auto_offset_reset="earliest",
                                             enable_auto_commit=False)
        await consumer.start()
        values = []
        while len(values) < 40:
            batches = await consumer.getmany(timeout_ms=5000)
            assert batches
            values += [m.value for ms in batches.values() for m in ms]
        await consumer.commit()
        await consumer.stop()
        return values
    assert sorted(asyncio.run(run())) == sorted(b"v%d" % i for i in range(40))
    assert committed_in_process(db, "ak") == end_offsets(db)


def kafka_python_member(server, i, ctl):
    consumer = kafka_python_group_consumer("t", PARTITIONS,
                                           bootstrap_servers=server.bootstrap_servers,
                                           group_id="three", auto_offset_reset="earliest",
                                           enable_auto_commit=False, max_poll_records=5)
    try:
        while not ctl.stop.is_set():
            polled = consumer.poll(timeout_ms=200)
            ctl.saw(i, [r.value for records in polled.values() for r in records],
                    consumer.assignment())
            if consumer.assignment():
                try:
                    consumer.commit()
                except (kafka.errors.CommitFailedError, kafka.errors.RebalanceInProgressError):
                    pass   # the group rebalanced under the commit: read again, at least once
            if ctl.leaves(i, polled):
                break
    finally:
        consumer.close()


def confluent_member(server, i, ctl):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                         "group.id": "three", "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    consumer.subscribe(["t"])
    try:
        while not ctl.stop.is_set():
            messages = [m for m in consumer.consume(5, 0.2) if m.error() is None]
            ctl.saw(i, [m.value() for m in messages], consumer.assignment())
            if messages:
                try:
                    consumer.commit(asynchronous=False)
                except confluent_kafka.KafkaException:
                    pass   # the group rebalanced under the commit: read again, at least once
            if ctl.leaves(i, messages):
                break
    finally:
        consumer.close()


def aiokafka_member(server, i, ctl):
    async def run():
        consumer = aiokafka.AIOKafkaConsumer("t", bootstrap_servers=server.bootstrap_servers,
                                             group_id="three", auto_offset_reset="earliest",
                                             enable_auto_commit=False)
        await consumer.start()
        try:
            while not ctl.stop.is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=5)
                ctl.saw(i, [m.value for ms in batches.values() for m in ms],
                        consumer.assignment())
                if batches:
                    try:
                        await consumer.commit()
                    except (aiokafka.errors.CommitFailedError,
                            aiokafka.errors.RebalanceInProgressError,
                            aiokafka.errors.IllegalStateError):
                        pass   # the group rebalanced under the commit: at least once
                if ctl.leaves(i, batches):
                    break
        finally:
            await consumer.stop()
    asyncio.run(run())   # each member on its own thread and event loop


class GroupControl:
    """What the members of one test share: what they read, who is assigned, when to stop."""

    def __init__(self):
        self.seen, self.assigned = [], [False] * 3
        self.stop, self.leave = threading.Event(), threading.Event()
        self.lock = threading.Lock()

    def saw(self, i, values, assignment):
        with self.lock:
            self.seen.extend(values)
        self.assigned[i] = bool(assignment)

    def leaves(self, i, polled):
        """The first member leaves once it has read some of the later records."""
        return i == 0 and self.leave.is_set() and bool(polled)


@pytest.mark.parametrize("member", [kafka_python_member, confluent_member, aiokafka_member],
                         ids=["kafka-python", "confluent-kafka", "aiokafka"])
def test_a_group_of_three_rebalances_as_one_leaves_and_loses_no_record(db, server, member):
    ctl = GroupControl()
    threads = [threading.Thread(target=member, args=(server, i, ctl)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: all(ctl.assigned) and
                   len(db.describe_group("three").members) == 3, "all three members assigned")
        ctl.leave.set()
        producer = db.producer()
        for i in range(40, 80):
            producer.send("t", key=b"k%d" % i, value=b"v%d" % i)
        producer.flush()
        threads[0].join(60)
        assert not threads[0].is_alive()
        wait_until(lambda: committed_in_process(db, "three") == end_offsets(db),
                   "the two left to commit everything")
    finally:
        ctl.stop.set()
        for t in threads:
            t.join(60)
    assert set(ctl.seen) == {b"v%d" % i for i in range(80)}   # at least once: none lost


def test_one_group_of_wire_and_in_process_members(db, server):
    wire = kafka_python_group_consumer("t", PARTITIONS,
                                       bootstrap_servers=server.bootstrap_servers,
                                       group_id="mixed", auto_offset_reset="earliest",
                                       enable_auto_commit=False)
    wire.poll(timeout_ms=2000)   # joins: the group is this member alone
    local = db.consumer(group_id="mixed", auto_offset_reset="earliest",
                        enable_auto_commit=False)
    local.subscribe(["t"])

    def both_assigned():
        wire.poll(timeout_ms=100)
        local.poll(timeout=0.1)
        group = db.describe_group("mixed")
        # Each member holds what the group's current generation gave it. Under the eager
        # protocol a member keeps its previous generation's partitions until it takes its
        # SyncGroup answer in (Kafka's ConsumerCoordinator.onJoinComplete), which the wire
        # member may do a poll after the in-process one: until then it still holds all
        # four partitions of the generation it had alone.
        held = sorted(sorted(tp.partition for tp in c.assignment()) for c in (wire, local))
        given = sorted(sorted(tp.partition for tp in m.assignment) for m in group.members)
        return group.state == "Stable" and wire.assignment() and local.assignment() and \
            held == given
    wait_until(both_assigned, "the wire and in-process members sharing the partitions")
    wire_parts = {tp.partition for tp in wire.assignment()}
    local_parts = {tp.partition for tp in local.assignment()}
    assert wire_parts.isdisjoint(local_parts)
    assert wire_parts | local_parts == set(range(PARTITIONS))
    members = db.describe_group("mixed").members
    assert len(members) == 2
    local.close()
    wire.close()

