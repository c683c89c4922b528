"""Transactions over the wire: Kafka's clients' transactional producers against the
server's InitProducerId / AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit / EndTxn,
and read_committed consumers that never see aborted records (KAFKA_REFERENCE.md §6; Kafka's
KIP-98 semantics: a consume-transform-produce loop's outputs and its input offsets commit
or abort together, and a new instance of a transactional id fences the old one)."""
import asyncio

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.testing import records

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    database.create_topic("in", partitions=2)
    database.create_topic("out", partitions=2)
    yield database
    database.close()


def ck_producer(server, transactional_id):
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers,
                                         "transactional.id": transactional_id})
    producer.init_transactions(10)
    return producer


def read_committed_values(server, topic, expected_count, group="reader"):
    """Every value a read_committed confluent-kafka consumer gets, polled until it has
    expected_count of them and then once more until the end (nothing extra may come)."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": server.bootstrap_servers, "group.id": group,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.subscribe([topic])
    values, eof = [], set()
    try:
        while len(values) < expected_count or len(eof) < 2:
            message = consumer.poll(10)
            assert message is not None, f"stalled with {values}"
            if message.error():
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF
                eof.add(message.partition())
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return sorted(values)


def test_confluent_kafka_commits_and_aborts_and_read_committed_sees_only_commits(db, server):
    producer = ck_producer(server, "ck-txn")
    producer.begin_transaction()
    for i in range(10):
        producer.produce("out", key=b"k%d" % i, value=b"committed-%d" % i)
    producer.commit_transaction(10)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("out", key=b"k%d" % i, value=b"aborted-%d" % i)
    producer.flush(10)     # the aborted records are in the log...
    producer.abort_transaction(10)
    producer.begin_transaction()
    producer.produce("out", key=b"k0", value=b"after")
    producer.commit_transaction(10)
    # ...and a read_committed consumer skips them: the wire's aborted transactions list.
    assert read_committed_values(server, "out", 11) == sorted(
        [b"committed-%d" % i for i in range(10)] + [b"after"])
    # The in-process read_committed consumer agrees; read_uncommitted sees all 21 records.
    def read(isolation):
        return sorted(r.value for r in records(db, "out", isolation))
    assert read("read_committed") == read_committed_values(server, "out", 11, group="again")
    assert len(read("read_uncommitted")) == 21
    producer.flush(10)


def test_consume_transform_produce_commits_offsets_with_the_outputs(db, server):
    feed = db.producer()
    for i in range(20):
        feed.send("in", key=b"k%d" % i, value=b"%d" % i)
    feed.flush()
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": server.bootstrap_servers, "group.id": "etl",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed"})
    consumer.subscribe(["in"])
    producer = ck_producer(server, "etl-1")
    seen = 0
    try:
        while seen < 20:
            messages = consumer.consume(100, 5)
            if not messages:
                continue
            producer.begin_transaction()
            for message in messages:
                assert message.error() is None
                producer.produce("out", key=message.key(), value=b"x" + message.value())
            seen += len(messages)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                10)
            producer.commit_transaction(10)
    finally:
        consumer.close()
    # The group's offsets moved with the transaction (through __consumer_offsets, as the
    # in-process consumers read them).
    committed = {tp.partition: lag.committed for tp, lag in
                 db.describe_group("etl").partitions.items()}
    assert committed == {p.partition: p.high_watermark for p in db.describe_topic("in").partitions}
    assert read_committed_values(server, "out", 20) == sorted(b"x%d" % i for i in range(20))


def test_a_new_instance_fences_the_old_and_aborts_its_open_transaction(db, server):
    old = ck_producer(server, "shared-id")
    old.begin_transaction()
    old.produce("out", key=b"k", value=b"zombie")
    old.flush(10)
    new = ck_producer(server, "shared-id")    # InitProducerId bumps the epoch: old is fenced
    new.begin_transaction()
    new.produce("out", key=b"k", value=b"live")
    new.commit_transaction(10)
    with pytest.raises(confluent_kafka.KafkaException) as fenced:
        old.commit_transaction(10)
    assert fenced.value.args[0].fatal(), fenced.value
    assert read_committed_values(server, "out", 1) == [b"live"]


def test_kafka_python_transactional_producer(db, server):
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap_servers,
                                   transactional_id="kp-txn")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", key=b"a", value=b"kp-committed")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("out", key=b"a", value=b"kp-aborted")
    producer.flush()
    producer.abort_transaction()
    producer.close()
    assert read_committed_values(server, "out", 1) == [b"kp-committed"]


def test_aiokafka_transactional_producer(db, server):
    async def run():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=server.bootstrap_servers,
                                             transactional_id="aio-txn")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("out", key=b"b", value=b"aio-committed")
            await producer.begin_transaction()
            await producer.send_and_wait("out", key=b"b", value=b"aio-aborted")
            await producer.abort_transaction()
        finally:
            await producer.stop()
    asyncio.run(run())
    assert read_committed_values(server, "out", 1) == [b"aio-committed"]


def test_offset_fetch_require_stable_waits_out_an_open_transactions_offsets(db, server):
    # KIP-447: OffsetFetch v7 with require_stable answers UNSTABLE_OFFSET_COMMIT for an
    # offset pending in an open transaction (a read_committed consumer retries until the
    # transaction ends), and the committed offset once it has.
    import socket

    from kio.schema.errors import ErrorCode
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
    from kio.static.primitive import i32

    from streamlog import OffsetAndMetadata

    from support.wire import call
    consumer = db.consumer(group_id="stable")
    producer = db.producer(transactional_id="holder")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", b"x", partition=0)
    producer.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(7)},
                                         consumer.group_metadata())

    def fetch(require_stable):
        with socket.create_connection((server.host, server.port)) as sock:
            answer = call(sock, OffsetFetchRequest(
                group_id="stable", require_stable=require_stable,
                topics=(OffsetFetchRequestTopic(name="in", partition_indexes=(i32(0),)),)))
        (partition,) = answer.topics[0].partitions
        return partition.error_code, int(partition.committed_offset)
    assert fetch(True) == (ErrorCode.unstable_offset_commit, -1)
    assert fetch(False) == (ErrorCode.none, -1)      # read_uncommitted: not committed yet
    producer.commit_transaction()
    assert fetch(True) == (ErrorCode.none, 7)
    producer.close()
    consumer.close()
