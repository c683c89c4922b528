"""The Kafka wire-protocol server (streamlog.server) with Kafka's own clients, unchanged:
kafka-python, confluent-kafka (librdkafka) and aiokafka produce to it and fetch from it, and
what they write is the database's own log, read in process too. The first slice of the
server: ApiVersions, Metadata, Produce, Fetch, ListOffsets, InitProducerId."""
import asyncio
import socket
import struct
import threading

import pytest

import streamlog
from streamlog.client.murmur2 import murmur2_py, to_positive
from streamlog.testing import records

from support.wire import request

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
aiokafka = pytest.importorskip("aiokafka")


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    database.create_topic("t", partitions=3)
    yield database
    database.close()


def in_process(db):
    """(partition, offset, key, value, headers) of everything in topic t, read in process."""
    return sorted((r.partition, r.offset, r.key, r.value, list(r.headers))
                  for r in records(db, "t"))


def java_partition(key, partitions=3):
    """Kafka's default partitioner for a keyed record (Utils.toPositive(murmur2(key)) % n)."""
    return to_positive(murmur2_py(key)) % partitions


def test_kafka_python_produces_and_consumes(db, server):
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap_servers, acks="all",
                                   compression_type="gzip")
    sent = [producer.send("t", key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)])
            for i in range(30)]
    producer.flush()
    metadata = [f.get(timeout=10) for f in sent]
    producer.close()
    # Keys land where Kafka's Java-compatible partitioner puts them, at the offsets the log gave.
    assert [m.partition for m in metadata] == [java_partition(b"k%d" % i) for i in range(30)]
    rows = in_process(db)
    assert sorted((p, o, k, v) for p, o, k, v, _ in rows) == sorted(
        (m.partition, m.offset, b"k%d" % i, b"v%d" % i) for i, m in enumerate(metadata))
    consumer = kafka.KafkaConsumer(bootstrap_servers=server.bootstrap_servers,
                                   auto_offset_reset="earliest", consumer_timeout_ms=3000)
    consumer.assign([kafka.TopicPartition("t", p) for p in range(3)])
    got = sorted((m.partition, m.offset, m.key, m.value, [(k, v) for k, v in m.headers])
                 for m in consumer)
    consumer.close()
    assert got == rows


def test_confluent_kafka_produces_and_consumes(db, server):
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers,
                                         "acks": "all", "compression.type": "lz4",
                                         "partitioner": "murmur2_random"})
    delivered = []
    for i in range(30):
        producer.produce("t", key=b"k%d" % i, value=b"c%d" % i,
                         on_delivery=lambda err, msg: delivered.append((err, msg.partition())))
    assert producer.flush(30) == 0
    assert [err for err, _ in delivered] == [None] * 30
    assert sorted(p for _, p in delivered) == sorted(java_partition(b"k%d" % i)
                                                     for i in range(30))
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                         "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("t", p, 0) for p in range(3)])
    got = []
    while len(got) < 30:
        message = consumer.poll(10)
        assert message is not None and message.error() is None, message and message.error()
        got.append((message.partition(), message.offset(), message.key(), message.value(),
                    message.headers() or []))
    low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition("t", 0),
                                               timeout=10)
    consumer.close()
    assert sorted(got) == in_process(db)
    assert (low, high) == (0, sum(1 for p, *_ in got if p == 0))


def test_aiokafka_produces_and_consumes(db, server):
    async def run():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=server.bootstrap_servers)
        await producer.start()
        for i in range(20):
            await producer.send_and_wait("t", key=b"a%d" % i, value=b"x%d" % i)
        await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=server.bootstrap_servers,
                                             auto_offset_reset="earliest", group_id=None)
        await consumer.start()
        consumer.assign([aiokafka.TopicPartition("t", p) for p in range(3)])
        got = []
        while len(got) < 20:
            batches = await consumer.getmany(timeout_ms=5000)
            assert batches
            got += [(m.partition, m.offset, m.key, m.value) for ms in batches.values()
                    for m in ms]
        await consumer.stop()
        return got
    got = asyncio.run(run())
    assert sorted(got) == [(p, o, k, v) for p, o, k, v, _ in in_process(db)]


def test_a_long_poll_returns_when_a_record_arrives(db, server):
    consumer = kafka.KafkaConsumer(bootstrap_servers=server.bootstrap_servers,
                                   fetch_max_wait_ms=10_000, consumer_timeout_ms=20_000)
    consumer.assign([kafka.TopicPartition("t", 0)])
    consumer.seek_to_end()
    consumer.poll(timeout_ms=100)
    threading.Timer(0.3, lambda: db.producer().send("t", b"late", partition=0)).start()
    message = next(consumer)
    consumer.close()
    assert message.value == b"late"


def test_an_api_versions_request_of_an_unknown_version_gets_v0_with_its_own_versions(server):
    # KIP-511: api key 18, version 99, correlation 7, client id "x", then a v2 header's tags.
    # Kafka's ApiVersionsRequest.getErrorResponse lists ApiVersions' own range alone.
    frame = struct.pack(">hhih", 18, 99, 7, 1) + b"x" + b"\x00"
    with socket.create_connection((server.host, server.port)) as sock:
        answer = request(sock, frame)
    correlation, error, count = struct.unpack_from(">ihi", answer, 0)
    assert (correlation, error) == (7, 35)   # UNSUPPORTED_VERSION, in response header v0
    served = {struct.unpack_from(">hhh", answer, 10 + 6 * i)[0] for i in range(count)}
    assert served == {18}


def test_a_malformed_frame_closes_only_its_connection(db, server):
    with socket.create_connection((server.host, server.port)) as bad:
        bad.sendall(struct.pack(">i", 12) + b"\x00\x03\x00\x63garbage!")
        bad.settimeout(10)
        assert bad.recv(10) == b""   # closed
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap_servers)
    producer.send("t", b"after", partition=1).get(timeout=10)
    producer.close()
    assert [r[3] for r in in_process(db)] == [b"after"]


def test_servers_start_and_stop_without_leaving_threads_or_sockets(db):
    before = set(threading.enumerate())
    for _ in range(20):
        with db.serve() as server:
            with socket.create_connection((server.host, server.port)):
                pass
    leftover = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert leftover == []
    with pytest.raises(streamlog.errors.StreamlogError, match="cannot listen"):
        with db.serve() as first:
            db.serve(port=first.port)


def test_admin_clients_create_and_delete_topics(db, server):
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.admin import KafkaAdminClient, NewTopic as KafkaNewTopic
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    admin.create_topics([KafkaNewTopic("table", 4, 1,
                                       topic_configs={"cleanup.policy": "compact"})])
    with pytest.raises(kafka.errors.TopicAlreadyExistsError):
        admin.create_topics([KafkaNewTopic("table", 4, 1)])
    described = db.describe_topic("table")
    assert len(described.partitions) == 4 and described.overrides == {"cleanup.policy": "compact"}
    admin.delete_topics(["table"])
    admin.close()
    assert "table" not in db.topics()
    confluent = AdminClient({"bootstrap.servers": server.bootstrap_servers})
    for future in confluent.create_topics([NewTopic("events", 2, 1)]).values():
        assert future.result(10) is None
    for future in confluent.create_topics([NewTopic("wide", 2, 3)]).values():
        with pytest.raises(confluent_kafka.KafkaException, match="INVALID_REPLICATION_FACTOR"):
            future.result(10)
    for future in confluent.delete_topics(["events"]).values():
        assert future.result(10) is None
    assert db.topics() == ["t"]


def test_admin_partitions_configs_records_and_cluster(db, server):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions
    db.alter_topic_config("t", {"retention.ms": 60_000})
    producer = db.producer()
    for _ in range(10):
        producer.send("t", b"x", partition=0)
    producer.flush()
    admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
    for future in admin.create_partitions([NewPartitions("t", 5)]).values():
        assert future.result(10) is None
    assert len(db.describe_topic("t").partitions) == 5
    for future in admin.create_partitions([NewPartitions("t", 2)]).values():
        with pytest.raises(confluent_kafka.KafkaException, match="INVALID_PARTITIONS"):
            future.result(10)
    (future,) = admin.describe_configs([ConfigResource("topic", "t")]).values()
    configs = future.result(10)
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].source == confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].value == str(1 << 30)
    assert configs["segment.bytes"].source == confluent_kafka.admin.ConfigSource.DEFAULT_CONFIG.value
    (future,) = admin.delete_records([confluent_kafka.TopicPartition("t", 0, 4)]).values()
    assert future.result(10).low_watermark == 4
    assert db.describe_topic("t").partitions[0].log_start_offset == 4
    cluster = admin.describe_cluster().result(10)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, server.host, server.port)]


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")  # it is what is tested
def test_admin_clients_alter_topic_configs(db, server):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    db.alter_topic_config("t", {"retention.ms": 1000, "segment.bytes": 100_000})
    admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
    incremental = ConfigResource("topic", "t", incremental_configs=[
        ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    for future in admin.incremental_alter_configs([incremental]).values():
        assert future.result(10) is None
    assert db.describe_topic("t").overrides == {"retention.ms": 5000,
                                                "cleanup.policy": "compact,delete"}
    # AlterConfigs (not incremental): the given configs become the whole set of overrides.
    whole = ConfigResource("topic", "t", set_config={"retention.ms": "7000"})
    for future in admin.alter_configs([whole]).values():
        assert future.result(10) is None
    assert db.describe_topic("t").overrides == {"retention.ms": 7000}
    bad = ConfigResource("topic", "t", set_config={"retention.ms": "soon"})
    for future in admin.alter_configs([bad]).values():
        with pytest.raises(confluent_kafka.KafkaException, match="INVALID_CONFIG"):
            future.result(10)


def test_a_topics_compression_type_recompresses_what_a_client_sends(db, server):
    # Kafka's topic config compression.type: a batch in another codec is stored in the
    # topic's (LogValidator with BrokerCompressionType.targetCompression); consumers decode it.
    from kafka.admin import KafkaAdminClient, NewTopic as KafkaNewTopic
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    admin.create_topics([KafkaNewTopic("z", 1, 1, topic_configs={"compression.type": "zstd"})])
    admin.close()
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap_servers, acks="all",
                                   compression_type="gzip", linger_ms=20)
    for i in range(40):
        producer.send("z", key=b"k%d" % i, value=b"zz%d" % i * 30)
    producer.flush()
    producer.close()
    log = db._broker.partition_log(streamlog.TopicPartition("z", 0))
    codecs = {batch.compression for batch in log.read(0, 1 << 20).batches}
    assert codecs == {4}    # zstd's id in the batch attributes, not gzip's 1
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                         "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("z", 0, 0)])
    got = []
    while len(got) < 40:
        message = consumer.poll(10)
        assert message is not None and message.error() is None, message and message.error()
        got.append((message.key(), message.value()))
    consumer.close()
    assert got == [(b"k%d" % i, b"zz%d" % i * 30) for i in range(40)]


def test_a_produced_timestamp_outside_the_topics_window_is_invalid_timestamp(db, server):
    # KIP-937 (Kafka 3.6): message.timestamp.before.max.ms / after.max.ms are topic configs
    # that CreateTopics and IncrementalAlterConfigs take; the leader refuses a CreateTime
    # batch holding a record outside the window with INVALID_TIMESTAMP (LogValidator
    # .validateTimestamp), which the producer does not retry.
    import time

    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    from confluent_kafka.admin import NewTopic
    admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
    for future in admin.create_topics([NewTopic("recent", 1, 1, config={
            "message.timestamp.before.max.ms": "60000"})]).values():
        assert future.result(10) is None
    change = ConfigResource("topic", "recent", incremental_configs=[
        ConfigEntry("message.timestamp.after.max.ms", "60000",
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([change]).values():
        assert future.result(10) is None
    assert db.describe_topic("recent").overrides == {
        "message.timestamp.before.max.ms": 60000, "message.timestamp.after.max.ms": 60000}
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers,
                                         "linger.ms": 0})
    delivered = []
    now = int(time.time() * 1000)
    for timestamp in (now - 3_600_000, now + 3_600_000, now):
        producer.produce("recent", b"v", partition=0, timestamp=timestamp,
                         on_delivery=lambda err, msg: delivered.append(err and err.name()))
        producer.flush(10)   # a request each
    assert delivered == ["INVALID_TIMESTAMP", "INVALID_TIMESTAMP", None]
    assert db.describe_topic("recent").partitions[0].log_end_offset == 1


def test_kafka_python_fails_the_record_at_fault_with_the_brokers_reason(db, server):
    # Produce v8+ record_errors (KIP-467, Kafka's ReplicaManager from LogValidator's
    # RecordValidationException): kafka-python fails the record named with that record's
    # message, and the others of its batch with a generic "part of a batch" error, as the
    # Java producer does. (librdkafka shows the error code's text for every record.)
    import time
    db.create_topic("recent", config={"message.timestamp.before.max.ms": 60000})
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap_servers, linger_ms=500,
                                   retries=0)
    now = int(time.time() * 1000)
    sent = [producer.send("recent", b"v", partition=0, timestamp_ms=timestamp)
            for timestamp in (now, now - 3_600_000)]   # one batch
    producer.flush(10)
    producer.close()
    good, bad = (future.exception for future in sent)
    assert isinstance(bad, kafka.errors.InvalidTimestampError)
    assert f"timestamp {now - 3_600_000} should be at least" in str(bad)
    assert not isinstance(good, kafka.errors.InvalidTimestampError) and "batch" in str(good)
    assert db.describe_topic("recent").partitions[0].log_end_offset == 0


def test_an_api_not_served_is_answered_unsupported_version_on_a_connection_that_stays(server):
    # SaslHandshake v0 (api 17): not served (no SASL). Header v1: key, version, correlation,
    # client id; the v0 body is the mechanism, the v0 response error_code, then mechanisms.
    with socket.create_connection((server.host, server.port)) as sock:
        answer = request(sock, struct.pack(">hhih", 17, 0, 41, 1) + b"x" + struct.pack(">h", 5)
                         + b"PLAIN")
        correlation, error, mechanisms = struct.unpack_from(">ihi", answer, 0)
        assert (correlation, error, mechanisms) == (41, 35, 0)   # UNSUPPORTED_VERSION, none
        versions = request(sock, struct.pack(">hhih", 18, 0, 42, 1) + b"x")   # still open
        assert struct.unpack_from(">ih", versions, 0) == (42, 0)
