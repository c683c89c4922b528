"""Conformance: Kafka's three Python clients, unchanged, against the server, on what an
application does with Kafka: produce (keys on Kafka's murmur2 partitions, headers, every
compression codec, acks 0 / 1 / all), consume with assign and with subscribe, commit /
committed / seek / offsets_for_times, and kcat where it is installed.

The expected values are Kafka's: the Java-compatible partitioner puts a keyed record on
Utils.toPositive(murmur2(key)) % partitions (KAFKA_REFERENCE.md, DefaultPartitioner);
offsets_for_times answers the first offset whose timestamp is >= the one asked
(ListOffsets, KIP-79); committed() answers what the group last committed.
"""
import asyncio
import shutil
import subprocess

import pytest

import streamlog
from streamlog.client.murmur2 import murmur2_py, to_positive
from streamlog.testing import records

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

PARTITIONS = 3
N = 24
CODECS = ["gzip", "snappy", "lz4", "zstd"]
ACKS = {"gzip": 0, "snappy": 1, "lz4": "all", "zstd": 1}   # every acks level, across codecs


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    database.create_topic("t", partitions=PARTITIONS)
    yield database
    database.close()


def java_partition(key):
    return to_positive(murmur2_py(key)) % PARTITIONS


def sent_rows(prefix):
    return [(b"%s-k%d" % (prefix, i), b"%s-v%d" % (prefix, i), [("n", b"%d" % i)])
            for i in range(N)]


def assert_landed(db, prefix):
    """Every record of sent_rows(prefix) is in the log once, on Kafka's partition for its
    key, with its headers."""
    wanted = sorted((java_partition(k), k, v, h) for k, v, h in sent_rows(prefix))
    streamlog.testing.wait_for_records(db, "t", N)
    got = sorted((r.partition, r.key, r.value, list(r.headers)) for r in records(db, "t"))
    assert got == wanted


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_produce(db, server, codec):
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers,
                                         "compression.type": codec, "acks": ACKS[codec],
                                         "partitioner": "murmur2_random", "linger.ms": 5})
    errors = []
    for key, value, headers in sent_rows(b"ck"):
        producer.produce("t", key=key, value=value, headers=headers,
                         on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0 and errors == [None] * N
    assert_landed(db, b"ck")


@pytest.mark.parametrize("codec", [c for c in CODECS if c != "snappy"])
def test_kafka_python_produce(db, server, codec):
    # (kafka-python compresses snappy with python-snappy only, not installed here)
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap_servers,
                                   compression_type=codec, acks=ACKS[codec], linger_ms=5)
    futures = [producer.send("t", key=k, value=v, headers=h) for k, v, h in sent_rows(b"kp")]
    producer.flush()
    for future in futures:
        future.get(timeout=10)
    producer.close()
    assert_landed(db, b"kp")


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_produce(db, server, codec):
    async def run():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=server.bootstrap_servers,
                                             compression_type=codec, acks=ACKS[codec],
                                             enable_idempotence=False, linger_ms=5)
        await producer.start()
        try:
            sent = [await producer.send("t", key=k, value=v, headers=h)
                    for k, v, h in sent_rows(b"aio")]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
    asyncio.run(run())
    assert_landed(db, b"aio")


def batch_producers(db):
    """{(producer id, epoch)} of every batch in topic t, and per partition the batches'
    (base sequence, record count) in offset order."""
    tps = [streamlog.TopicPartition("t", p) for p in range(PARTITIONS)]
    fetched = db._broker.fetch({tp: 0 for tp in tps}, max_bytes=64 << 20)
    producers = {(b.producer_id, b.producer_epoch) for tp in tps for b in fetched[tp].batches}
    return producers, {tp.partition: [(b.base_sequence, b.records_count)
                                      for b in fetched[tp].batches] for tp in tps}


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_idempotent_producers_get_a_producer_id_and_number_their_batches(db, server, client):
    # KAFKA_REFERENCE.md §5: an idempotent producer's batches carry the producer id the
    # broker's InitProducerId gave and per-partition sequences from 0.
    rows = sent_rows(client.encode())
    if client == "confluent-kafka":
        producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers,
                                             "enable.idempotence": True,
                                             "partitioner": "murmur2_random"})
        for key, value, headers in rows:
            producer.produce("t", key=key, value=value, headers=headers)
        assert producer.flush(30) == 0
    elif client == "kafka-python":
        producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap_servers,
                                       enable_idempotence=True)
        for future in [producer.send("t", key=k, value=v, headers=h) for k, v, h in rows]:
            future.get(timeout=10)
        producer.close()
    else:
        async def run():
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=server.bootstrap_servers,
                                                 enable_idempotence=True)
            await producer.start()
            try:
                for key, value, headers in rows:
                    await producer.send_and_wait("t", key=key, value=value, headers=headers)
            finally:
                await producer.stop()
        asyncio.run(run())
    assert_landed(db, client.encode())
    producers, sequences = batch_producers(db)
    (producer_id, epoch), = producers          # one producer, one id for every batch
    assert producer_id >= 0 and epoch >= 0
    for partition, batches in sequences.items():   # from 0, each batch after the last
        expected = 0
        for base, count in batches:
            assert base == expected, (partition, batches)
            expected += count


def fill(db):
    """N keyed records with timestamps 1000, 2000, ... through the in-process producer;
    {partition: [(offset, timestamp)]}."""
    producer = db.producer()
    where = {}
    for i, (key, value, _) in enumerate(sent_rows(b"db")):
        meta = producer.send("t", key=key, value=value, timestamp_ms=1000 * (i + 1)).result()
        where.setdefault(meta.partition, []).append((meta.offset, 1000 * (i + 1)))
    return where


def first_at_or_after(where, partition, timestamp):
    return next(o for o, ts in where[partition] if ts >= timestamp)


def test_confluent_kafka_consumer_api(db, server):
    where = fill(db)
    tps = [confluent_kafka.TopicPartition("t", p) for p in range(PARTITIONS)]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                         "group.id": "ck-api", "enable.auto.commit": False,
                                         "auto.offset.reset": "earliest"})
    try:
        middle = where[0][len(where[0]) // 2][1]
        found = consumer.offsets_for_times(
            [confluent_kafka.TopicPartition("t", 0, middle)], timeout=10)
        assert found[0].offset == first_at_or_after(where, 0, middle)
        consumer.assign([confluent_kafka.TopicPartition("t", 0, found[0].offset)])
        message = consumer.poll(10)
        assert message.offset() == found[0].offset and message.timestamp()[1] == middle
        consumer.seek(confluent_kafka.TopicPartition("t", 0, 0))
        assert consumer.poll(10).offset() == 0
        consumer.commit(offsets=[confluent_kafka.TopicPartition("t", 0, 2)],
                        asynchronous=False)
        assert [tp.offset for tp in consumer.committed(tps, timeout=10)] == [2, -1001, -1001]
    finally:
        consumer.close()
    assert db.describe_group("ck-api").partitions[streamlog.TopicPartition("t", 0)] \
        .committed == 2


def test_kafka_python_consumer_api(db, server):
    where = fill(db)
    tp0 = kafka.TopicPartition("t", 0)
    consumer = kafka.KafkaConsumer(bootstrap_servers=server.bootstrap_servers,
                                   group_id="kp-api", enable_auto_commit=False,
                                   auto_offset_reset="earliest", consumer_timeout_ms=5000)
    try:
        middle = where[0][len(where[0]) // 2][1]
        found = consumer.offsets_for_times({tp0: middle})[tp0]
        assert (found.offset, found.timestamp) == (first_at_or_after(where, 0, middle), middle)
        consumer.assign([tp0])
        consumer.seek(tp0, found.offset)
        assert next(consumer).offset == found.offset
        consumer.seek_to_beginning(tp0)
        assert next(consumer).offset == 0
        consumer.commit({tp0: kafka.OffsetAndMetadata(3, "", -1)})
        assert consumer.committed(tp0) == 3
        assert consumer.end_offsets([tp0])[tp0] == len(where[0])
    finally:
        consumer.close()


def test_aiokafka_consumer_api(db, server):
    where = fill(db)
    tp0 = aiokafka.TopicPartition("t", 0)

    async def run():
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=server.bootstrap_servers,
                                             group_id="aio-api", enable_auto_commit=False,
                                             auto_offset_reset="earliest")
        await consumer.start()
        try:
            middle = where[0][len(where[0]) // 2][1]
            found = (await consumer.offsets_for_times({tp0: middle}))[tp0]
            consumer.assign([tp0])
            consumer.seek(tp0, found.offset)
            first = await consumer.getone()
            await consumer.seek_to_beginning(tp0)
            again = await consumer.getone()
            await consumer.commit({tp0: 4})
            committed = await consumer.committed(tp0)
            end = (await consumer.end_offsets([tp0]))[tp0]
        finally:
            await consumer.stop()
        return middle, found, first, again, committed, end
    middle, found, first, again, committed, end = asyncio.run(run())
    assert (found.offset, found.timestamp) == (first_at_or_after(where, 0, middle), middle)
    assert (first.offset, first.timestamp) == (found.offset, middle)
    assert again.offset == 0 and committed == 4 and end == len(where[0])


def test_subscribe_consumes_everything_in_each_client(db, server):
    fill(db)

    def confluent():
        consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                             "group.id": "s-ck", "auto.offset.reset": "earliest"})
        consumer.subscribe(["t"])
        got = []
        while len(got) < N:
            message = consumer.poll(10)
            assert message is not None and message.error() is None
            got.append(message.value())
        consumer.close()
        return got

    def kafka_python():
        consumer = kafka.KafkaConsumer("t", bootstrap_servers=server.bootstrap_servers,
                                       group_id="s-kp", auto_offset_reset="earliest",
                                       consumer_timeout_ms=5000)
        got = [m.value for m in consumer]
        consumer.close()
        return got

    async def aio():
        consumer = aiokafka.AIOKafkaConsumer("t", bootstrap_servers=server.bootstrap_servers,
                                             group_id="s-aio", auto_offset_reset="earliest")
        await consumer.start()
        got = []
        try:
            while len(got) < N:
                batches = await consumer.getmany(timeout_ms=10_000)
                assert batches
                got += [m.value for ms in batches.values() for m in ms]
            await consumer.commit()
            committed = await consumer.committed(aiokafka.TopicPartition("t", 0))
        finally:
            await consumer.stop()
        return got, committed

    values = sorted(v for _, v, _ in sent_rows(b"db"))
    assert sorted(confluent()) == values
    assert sorted(kafka_python()) == values
    got, committed = asyncio.run(aio())
    assert sorted(got) == values
    assert committed == db.describe_topic("t").partitions[0].high_watermark


KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (Debian package kcat)")
def test_kcat_lists_produces_and_consumes(db, server):
    def kcat(*args, stdin=None):
        result = subprocess.run([KCAT, "-b", server.bootstrap_servers, *args], input=stdin,
                                capture_output=True, timeout=60)
        assert result.returncode == 0, result.stderr.decode()
        return result.stdout.decode()
    listing = kcat("-L", "-t", "t")
    assert 'topic "t" with 3 partitions' in listing
    kcat("-P", "-t", "t", "-K", ":", "-z", "zstd",
         stdin=b"".join(b"%s:%s\n" % (k, v) for k, v, _ in sent_rows(b"kc")))
    rows = sorted((r.partition, r.key, r.value) for r in records(db, "t"))
    # kcat's default partitioner is librdkafka's consistent_random (CRC32 of the key):
    # every record lands once, keyed as sent.
    assert sorted((k, v) for _, k, v in rows) == sorted((k, v) for k, v, _ in sent_rows(b"kc"))
    out = kcat("-C", "-t", "t", "-e", "-f", "%k=%s\\n")
    assert sorted(out.split()) == sorted(f"{k.decode()}={v.decode()}"
                                         for k, v, _ in sent_rows(b"kc"))


def test_a_committed_leader_epoch_is_kept_and_answered(db, server, tmp_path):
    # Kafka's clients commit the leader epoch of the last record they consumed with its
    # offset (OffsetCommit v6+, KIP-320) and read it back with the offset (OffsetFetch
    # v5+) to validate a position taken from the group. The epoch was dropped: OffsetFetch
    # answered -1. It is now kept with the offset (across a reopen: tests/api/test_groups.py).
    tp = streamlog.TopicPartition("t", 0)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                         "group.id": "epochs", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition("t", 0, 2, leader_epoch=5)],
                        asynchronous=False)
        (found,) = consumer.committed([confluent_kafka.TopicPartition("t", 0)], timeout=10)
        assert (found.offset, found.leader_epoch) == (2, 5)
    finally:
        consumer.close()
    reader = kafka.KafkaConsumer(bootstrap_servers=server.bootstrap_servers,
                                 group_id="epochs-kp", enable_auto_commit=False)
    try:
        tp0 = kafka.TopicPartition("t", 0)
        reader.commit({tp0: kafka.OffsetAndMetadata(3, "note", 7)})
        assert reader.committed(tp0, metadata=True) == kafka.OffsetAndMetadata(3, "note", 7)
    finally:
        reader.close()
    assert db.consumer(group_id="epochs").committed([tp]) == {
        tp: streamlog.OffsetAndMetadata(2, "", 5)}
