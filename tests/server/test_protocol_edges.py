"""Requests at the edges of Kafka's rules, sent raw (kio entities): what Kafka's broker
answers, this server answers. Each test names the rule it holds the server to."""
import dataclasses
import datetime
import socket
import threading
import time
import uuid

import pytest

import streamlog
from kio.schema.create_topics.v7.request import (CreatableTopic, CreatableTopicConfig,
                                                 CreateTopicsRequest)
from kio.schema.delete_records.v2.request import (DeleteRecordsPartition, DeleteRecordsRequest,
                                                  DeleteRecordsTopic)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v0.request import MetadataRequest as MetadataV0
from kio.schema.offset_for_leader_epoch.v4.request import (OffsetForLeaderEpochRequest,
                                                           OffsetForLeaderPartition,
                                                           OffsetForLeaderTopic)
from kio.schema.produce.v9.request import (PartitionProduceData, ProduceRequest,
                                           TopicProduceData)
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64
from streamlog.storage import record_batch

from support import wait_until
from support.wire import ANSWER_BOUND_S, NEVER_S, call, call_without_long_poll, encode, list_offsets

pytest.importorskip("confluent_kafka")

SECONDS = i32Timedelta.parse(datetime.timedelta(seconds=5))


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    database.create_topic("t", partitions=1)
    consumer = database.consumer(group_id="g")   # makes __consumer_offsets exist
    consumer.commit({streamlog.TopicPartition("t", 0): streamlog.OffsetAndMetadata(0)})
    consumer.close()
    yield database
    database.close()


def produce(topic, acks=1, batch=None):
    if batch is None:
        batch = bytes(record_batch.build_batch([b"forged"], timestamp=1))
    return ProduceRequest(transactional_id=None, acks=i16(acks), timeout=SECONDS, topic_data=(
        TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=i32(0), records=batch),)),))


def test_clients_cannot_write_or_trim_the_coordinators_internal_topics(db, sock):
    # Kafka's ReplicaManager: "Cannot append to internal topic", "Cannot delete records of
    # internal topic" (INVALID_TOPIC_EXCEPTION).
    before = db._broker.partition_log(streamlog.TopicPartition("__consumer_offsets", 0)) \
        .log_end_offset
    answer = call(sock, produce("__consumer_offsets"))
    assert answer.responses[0].partition_responses[0].error_code == \
        ErrorCode.invalid_topic_exception
    answer = call(sock, DeleteRecordsRequest(timeout=SECONDS, topics=(DeleteRecordsTopic(
        name="__consumer_offsets", partitions=(
            DeleteRecordsPartition(partition_index=i32(0), offset=i64(-1)),)),)))
    assert answer.topics[0].partitions[0].error_code == ErrorCode.invalid_topic_exception
    assert db._broker.partition_log(streamlog.TopicPartition("__consumer_offsets", 0)) \
        .log_end_offset == before


def test_acks_outside_kafkas_three_values_are_refused(db, sock):
    answer = call(sock, produce("t", acks=2))
    assert answer.responses[0].partition_responses[0].error_code == \
        ErrorCode.invalid_required_acks
    assert db.describe_topic("t").partitions[0].high_watermark == 0


def test_metadata_v0_with_no_topics_lists_every_topic(db, sock):
    # MetadataRequest.json: in version 0, an empty array means all topics; Kafka lists its
    # internal topics too (is_internal from version 1; clients filter them out).
    from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1
    answer = call(sock, MetadataV0(topics=()))
    assert [t.name for t in answer.topics] == ["__consumer_offsets", "t"]
    answer = call(sock, MetadataV1(topics=None))
    assert [(t.name, t.is_internal) for t in answer.topics] == [("__consumer_offsets", True),
                                                                ("t", False)]


def test_a_topic_name_kafka_refuses_is_an_invalid_topic_not_an_unknown_one(db, sock):
    # Topic.validate before the topic is looked up: KafkaApis.getTopicMetadata (with or
    # without auto-creation), ConfigHelper.describeConfigs and
    # ControllerConfigurationValidator (Incremental/AlterConfigs) answer
    # INVALID_TOPIC_EXCEPTION; a legal name no topic has stays UNKNOWN_TOPIC_OR_PARTITION.
    from kio.schema.describe_configs.v4.request import (DescribeConfigsRequest,
                                                        DescribeConfigsResource)
    from kio.schema.incremental_alter_configs.v1.request import (
        AlterableConfig, AlterConfigsResource, IncrementalAlterConfigsRequest)
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    names = ("bad name", "missing")
    invalid, unknown = ErrorCode.invalid_topic_exception, ErrorCode.unknown_topic_or_partition
    for auto_create in (False, True):
        answer = call(sock, MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=name)
                         for name in names),
            allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False))
        assert [(t.name, t.error_code) for t in answer.topics] == [("bad name", invalid),
                                                                   ("missing", unknown)]
    # A missing internal topic is marked internal all the same (KafkaApis.getTopicMetadata:
    # Topic.isInternal(topic)); it was answered is_internal=False.
    answer = call(sock, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="__transaction_state"),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert [(t.name, t.error_code, t.is_internal) for t in answer.topics] == \
        [("__transaction_state", unknown, True)]
    answer = call(sock, DescribeConfigsRequest(resources=tuple(
        DescribeConfigsResource(resource_type=i8(2), resource_name=name,
                                configuration_keys=None) for name in names),
        include_synonyms=False, include_documentation=False))
    assert [r.error_code for r in answer.results] == [invalid, unknown]
    answer = call(sock, IncrementalAlterConfigsRequest(validate_only=False, resources=tuple(
        AlterConfigsResource(resource_type=i8(2), resource_name=name, configs=(
            AlterableConfig(name="retention.ms", config_operation=i8(0), value="1000"),))
        for name in names)))
    assert [r.error_code for r in answer.responses] == [invalid, unknown]


def test_metadata_auto_creation_makes_a_coordinators_topic_as_its_coordinator_would(tmp_path):
    # Kafka's AutoTopicCreationManager.creatableTopic makes a missing __consumer_offsets or
    # __transaction_state with offsets.topic.num.partitions /
    # transaction.state.log.num.partitions and the coordinator's configs; it was answered
    # INVALID_TOPIC_EXCEPTION. Without auto.create.topics.enable it stays unknown.
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    names = ("__consumer_offsets", "__transaction_state")

    def ask(sock):
        return call(sock, MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=name)
                         for name in names),
            allow_auto_topic_creation=True, include_topic_authorized_operations=False)).topics

    config = {"offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 2}
    with streamlog.open(str(tmp_path / "off"), config=config) as off, off.serve() as server, \
            socket.create_connection((server.host, server.port)) as sock:
        assert [(t.name, t.error_code, t.is_internal) for t in ask(sock)] == [
            (name, ErrorCode.unknown_topic_or_partition, True) for name in names]
    with streamlog.open(str(tmp_path / "on"), config={**config, "auto.create.topics.enable": True}) \
            as on, on.serve() as server, \
            socket.create_connection((server.host, server.port)) as sock:
        assert [(t.name, t.error_code, t.is_internal, len(t.partitions)) for t in ask(sock)] == [
            ("__consumer_offsets", ErrorCode.none, True, 3),
            ("__transaction_state", ErrorCode.none, True, 2)]
        for name in names:
            assert on._broker.topic(name).config.compact
        # the coordinators use the topics made
        on.create_topic("t")
        consumer = on.consumer(group_id="g")
        consumer.commit({streamlog.TopicPartition("t", 0): streamlog.OffsetAndMetadata(1)})
        consumer.close()
        reader = on.consumer(group_id="g")
        assert reader.committed([streamlog.TopicPartition("t", 0)]) == \
            {streamlog.TopicPartition("t", 0): streamlog.OffsetAndMetadata(1)}
        reader.close()


def test_metadata_v12_looks_topics_up_by_id(db, sock):
    # KIP-516, Kafka's KafkaApis.handleTopicMetadataRequest: once a v12 request names a
    # topic by id, the ids alone are looked up (the names beside them left out), an
    # unknown id first, UNKNOWN_TOPIC_ID with a null name; each topic is answered once. A
    # topic named by id was INVALID_REQUEST, a name given twice answered twice.
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    topic_id = db.describe_topic("t").topic_id
    missing = uuid.uuid4()

    def ask(*topics):
        return [(t.name, t.topic_id, t.error_code, len(t.partitions)) for t in call(
            sock, MetadataRequest(topics=tuple(
                MetadataRequestTopic(topic_id=i or uuid.UUID(int=0), name=n) for n, i in topics),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False)).topics]
    found = ("t", uuid.UUID(hex=topic_id), ErrorCode.none, 1)
    assert ask((None, uuid.UUID(hex=topic_id)), (None, missing), ("gone", None),
               (None, uuid.UUID(hex=topic_id))) == [
        (None, missing, ErrorCode.unknown_topic_id, 0), found]
    assert ask(("t", None), ("t", None)) == [found]


def test_delete_records_of_a_partition_named_twice_moves_it_to_the_last_offset_once(db, sock):
    # Kafka's KafkaApis.handleDeleteRecordsRequest keys the request by partition (the last
    # offset given wins) and answers each partition once, one entry per topic. Both were
    # applied here, the larger deleting records Kafka keeps, and answered twice.
    with db.producer() as producer:
        for _ in range(5):
            producer.send("t", b"v").result()
    answer = call(sock, DeleteRecordsRequest(timeout=SECONDS, topics=tuple(
        DeleteRecordsTopic(name="t", partitions=(
            DeleteRecordsPartition(partition_index=i32(0), offset=i64(offset)),))
        for offset in (4, 2))))
    assert [(t.name, [(p.partition_index, p.error_code, p.low_watermark) for p in t.partitions])
            for t in answer.topics] == [("t", [(0, ErrorCode.none, 2)])]
    assert db.describe_topic("t").partitions[0].log_start_offset == 2


def test_describe_cluster_answers_only_for_the_broker_endpoint_type(sock):
    # Kafka's AuthHelper.computeDescribeClusterResponse on a broker (v1+): endpoint type
    # CONTROLLER (2) is MISMATCHED_ENDPOINT_TYPE, one EndpointType does not know (0:
    # UNKNOWN, 7) UNSUPPORTED_ENDPOINT_TYPE, with no brokers. Every type was answered as
    # BROKER.
    from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
    answers = [call(sock, DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                 endpoint_type=i8(asked)))
               for asked in (1, 2, 0, 7)]
    assert [(a.error_code, len(a.brokers)) for a in answers] == [
        (ErrorCode.none, 1), (ErrorCode.mismatched_endpoint_type, 0),
        (ErrorCode.unsupported_endpoint_type, 0), (ErrorCode.unsupported_endpoint_type, 0)]
    assert answers[3].error_message == "Unsupported endpoint type 7"


def test_list_offsets_refuses_duplicates_and_timestamps_its_version_does_not_know(db, sock):
    # Kafka's ReplicaManager.fetchOffset: a partition named twice is INVALID_REQUEST each
    # time (ListOffsetsRequest.duplicatePartitions); a negative timestamp below the version
    # timestampMinSupportedVersion gives it (-3 from 7, -4 from 8, -5 from 9, no other) is
    # UNSUPPORTED_VERSION; both with offset and timestamp -1, before any lookup. They were
    # answered twice, with the max timestamp at any version, and INVALID_REQUEST.
    import importlib
    with db.producer() as producer:
        producer.send("t", b"v", timestamp_ms=1000).result()

    def ask(version, *timestamps):
        schema = importlib.import_module(f"kio.schema.list_offsets.v{version}.request")
        epoch = {"current_leader_epoch": i32(-1)} if version >= 4 else {}
        answer = call(sock, schema.ListOffsetsRequest(
            replica_id=BrokerId(-1), isolation_level=i8(0), topics=(schema.ListOffsetsTopic(
                name="t", partitions=tuple(schema.ListOffsetsPartition(
                    partition_index=i32(0), timestamp=i64(ts), **epoch)
                    for ts in timestamps)),)))
        return [(p.error_code, p.offset, p.timestamp) for p in answer.topics[0].partitions]
    unsupported = (ErrorCode.unsupported_version, -1, -1)
    assert ask(7, -1, -2) == [(ErrorCode.invalid_request, -1, -1)] * 2
    assert [ask(7, ts) for ts in (-3, -4, -5, -7)] == [[(ErrorCode.none, 0, 1000)]] + \
        [[unsupported]] * 3
    assert ask(6, -3) == ask(2, -3) == [unsupported]
    assert ask(2, -1) == [(ErrorCode.none, 1, -1)]


def test_two_colliding_names_of_one_request_are_both_created(db, sock):
    # ReplicationControlManager.createTopics checks a request's names against the topics
    # committed before it (validateNewTopicNames: topicsWithCollisionChars, updated only as
    # the records are replayed), so 'x.1' and 'x_1' of one request are both made (their
    # partition directories x.1-0 and x_1-0 differ); a later request naming a twin of
    # either is refused. The second was refused as colliding with the first.
    def create(*names):
        return [(t.name, t.error_code) for t in call(sock, CreateTopicsRequest(
            timeout=SECONDS, validate_only=False, topics=tuple(
                CreatableTopic(name=name, num_partitions=i32(1), replication_factor=i16(1),
                               assignments=(), configs=()) for name in names))).topics]
    assert create("x.1", "x_1") == [("x.1", ErrorCode.none), ("x_1", ErrorCode.none)]
    assert create("x.1", "x_1", "_t") == [("x.1", ErrorCode.topic_already_exists),
                                          ("x_1", ErrorCode.topic_already_exists),
                                          ("_t", ErrorCode.none)]
    assert create("x_1.", "x.1_", ".t") == [("x_1.", ErrorCode.none), ("x.1_", ErrorCode.none),
                                            (".t", ErrorCode.invalid_topic_exception)]
    with db.producer() as producer:
        for name in ("x.1", "x_1"):
            producer.send(name, b"v").result()
    assert [db.describe_topic(name).partitions[0].high_watermark
            for name in ("x.1", "x_1")] == [1, 1]
    with pytest.raises(streamlog.InvalidTopicError, match="collides"):
        db.create_topic("x.1.")


def test_validate_only_answers_the_topic_it_would_create(db, sock):
    # Kafka's ReplicationControlManager.createTopic fills a validated topic's result as a
    # created one's (a fresh topic id, the partition count and replication factor it
    # computed, the effective configs) and createTopics then drops its records only. It
    # was answered -1, -1, a zero id and no configs.
    answer = call(sock, CreateTopicsRequest(timeout=SECONDS, validate_only=True, topics=(
        CreatableTopic(name="v", num_partitions=i32(-1), replication_factor=i16(-1),
                       assignments=(), configs=(
            CreatableTopicConfig(name="retention.ms", value="1000"),)),)))
    (topic,) = answer.topics
    assert (topic.error_code, topic.num_partitions, topic.replication_factor) == \
        (ErrorCode.none, db._broker.config.num_partitions, 1)
    assert topic.topic_id != uuid.UUID(int=0)
    configs = {c.name: (c.value, c.config_source) for c in topic.configs}
    assert configs["retention.ms"] == ("1000", 1)          # DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"] == ("delete", 5)      # DEFAULT_CONFIG
    assert [c.name for c in topic.configs] == sorted(configs)
    assert "v" not in db.topics()


def test_validate_only_refuses_a_name_that_collides_as_the_creation_would(db, sock):
    # Kafka's controller runs CreateTopics with validate_only through the same checks
    # (ReplicationControlManager.createTopics, validateNewTopicNames) and writes nothing:
    # a name colliding with a topic's ('.' and '_' alike) is INVALID_TOPIC_EXCEPTION there
    # too, an existing one TOPIC_ALREADY_EXISTS.
    answer = call(sock, CreateTopicsRequest(timeout=SECONDS, validate_only=True, topics=tuple(
        CreatableTopic(name=name, num_partitions=i32(1), replication_factor=i16(1),
                       assignments=(), configs=()) for name in ("t", "t.x", "_t", "u"))))
    db.create_topic("t_x", partitions=1)
    again = call(sock, CreateTopicsRequest(timeout=SECONDS, validate_only=True, topics=(
        CreatableTopic(name="t.x", num_partitions=i32(1), replication_factor=i16(1),
                       assignments=(), configs=()),)))
    assert [(t.name, t.error_code) for t in answer.topics + again.topics] == [
        ("t", ErrorCode.topic_already_exists), ("t.x", ErrorCode.none), ("_t", ErrorCode.none),
        ("u", ErrorCode.none), ("t.x", ErrorCode.invalid_topic_exception)]
    assert db.topics() == ["t", "t_x"]


def test_a_null_topic_config_value_fails_that_topic_only(db, sock):
    # Kafka's CreateTopics: "Null value not supported for topic configs" (INVALID_CONFIG),
    # per topic; the other topics are created.
    answer = call(sock, CreateTopicsRequest(timeout=SECONDS, topics=(
        CreatableTopic(name="fine", num_partitions=i32(1), replication_factor=i16(1),
                       assignments=(), configs=()),
        CreatableTopic(name="nulled", num_partitions=i32(1), replication_factor=i16(1),
                       assignments=(), configs=(
                           CreatableTopicConfig(name="cleanup.policy", value=None),)))))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("fine", ErrorCode.none), ("nulled", ErrorCode.invalid_config)]
    assert "fine" in db.topics() and "nulled" not in db.topics()


def test_a_long_poll_ends_with_its_connection_even_before_it_starts_waiting(db, server):
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    # The fetch is held (an injected delay) until after its connection closed: it must
    # not then wait its whole max_wait (NEVER_S) on a worker that close() joins.
    server.faults.delay("Fetch", 0.3, count=1)
    fetch = FetchRequest(max_wait=i32Timedelta.parse(datetime.timedelta(seconds=NEVER_S)),
                         min_bytes=i32(1), topics=(FetchTopic(topic="t", partitions=(
                             FetchPartition(partition=i32(0), fetch_offset=i64(0),
                                            partition_max_bytes=i32(1 << 20)),)),),
                         forgotten_topics_data=())
    with socket.create_connection((server.host, server.port)) as s:
        s.sendall(len(encode(fetch)).to_bytes(4, "big") + encode(fetch))
        wait_until(lambda: server.faults.pending() == 0,
                   "the request is in the server, held by the delay")
    closed = threading.Event()
    threading.Thread(target=lambda: (server.close(), closed.set()), daemon=True).start()
    # A bound far below the max_wait, far above any close(): only a failing test reaches it.
    assert closed.wait(ANSWER_BOUND_S), "close() waited on the closed connection's long poll"




def test_member_metadata_that_is_not_the_consumer_protocol_passes_through(db, sock):
    # Kafka's coordinator never reads JoinGroup metadata: bytes that do not decode as
    # ConsumerProtocolSubscription reach the leader as they were sent.
    from kio.schema.join_group.v3.request import JoinGroupRequest, JoinGroupRequestProtocol
    answer = call(sock, JoinGroupRequest(
        group_id="odd", session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=SECONDS, member_id="",
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\x00\x07garbage"),)))
    assert answer.error_code == ErrorCode.none
    assert [bytes(m.metadata) for m in answer.members] == [b"\x00\x07garbage"]


def test_offset_commit_refuses_per_partition_and_commits_the_rest(db, sock):
    # Kafka's OffsetCommit: OFFSET_METADATA_TOO_LARGE or UNKNOWN_TOPIC_OR_PARTITION for the
    # partitions concerned; the other offsets of the request are committed.
    from kio.schema.offset_commit.v8.request import (OffsetCommitRequest,
                                                     OffsetCommitRequestPartition,
                                                     OffsetCommitRequestTopic)

    def offset(partition, value, metadata=""):
        return OffsetCommitRequestPartition(partition_index=i32(partition),
                                            committed_offset=i64(value),
                                            committed_leader_epoch=i32(-1),
                                            committed_metadata=metadata)
    db.create_topic("two", partitions=2)
    answer = call(sock, OffsetCommitRequest(
        group_id="h", generation_id_or_member_epoch=i32(-1), member_id="",
        group_instance_id=None, topics=(OffsetCommitRequestTopic(name="two", partitions=(
            offset(0, 5), offset(1, 6, "m" * 5000), offset(7, 1))),)))
    assert [p.error_code for p in answer.topics[0].partitions] == [
        ErrorCode.none, ErrorCode.offset_metadata_too_large,
        ErrorCode.unknown_topic_or_partition]
    committed = {tp.partition: lag.committed
                 for tp, lag in db.describe_group("h").partitions.items()}
    assert committed == {0: 5}


def test_offset_for_leader_epoch_on_a_database_of_its_own(db, sock):
    # One broker leads every partition in epoch 0 for ever (its Metadata says so): epoch 0
    # ends at the log end; a newer current epoch is UNKNOWN_LEADER_EPOCH; a newer epoch
    # asked is unknown (-1, -1), as Kafka's leader epoch cache answers one.
    producer = db.producer()
    producer.send("t", b"a", partition=0)
    producer.send("t", b"b", partition=0)
    producer.flush()
    answer = call(sock, OffsetForLeaderEpochRequest(replica_id=BrokerId(-1), topics=(
        OffsetForLeaderTopic(topic="t", partitions=tuple(
            OffsetForLeaderPartition(partition=i32(p), current_leader_epoch=i32(current),
                                     leader_epoch=i32(epoch))
            for p, current, epoch in [(0, 0, 0), (0, -1, 0), (0, 1, 0), (0, 0, 3), (5, 0, 0)])),)))
    assert [(p.error_code, p.leader_epoch, p.end_offset) for p in answer.topics[0].partitions] == [
        (ErrorCode.none, 0, 2), (ErrorCode.none, 0, 2), (ErrorCode.unknown_leader_epoch, -1, -1),
        (ErrorCode.none, -1, -1), (ErrorCode.unknown_topic_or_partition, -1, -1)]


def test_fetch_and_list_offsets_check_the_current_leader_epoch_on_a_database_of_its_own(
        db, sock):
    # Partition.localLogWithEpochOrThrow (KIP-320) for Fetch 9+ and ListOffsets 4+, as for
    # OffsetForLeaderEpoch above: epoch 0 is this database's (its Metadata says so), -1 names
    # none, a newer one is UNKNOWN_LEADER_EPOCH.
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    def fetch(epoch):
        answer = call(sock, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(0),
            topics=(FetchTopic(topic="t", partitions=(
                FetchPartition(partition=i32(0), current_leader_epoch=i32(epoch),
                               fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)),)),),
            forgotten_topics_data=()))
        return answer.responses[0].partitions[0].error_code
    assert [fetch(epoch) for epoch in (0, -1, 1, 7)] == [
        ErrorCode.none, ErrorCode.none, ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_leader_epoch]
    assert [list_offsets(sock, "t", 0, -1, current_leader_epoch=epoch).error_code
            for epoch in (0, -1, 1)] == [
        ErrorCode.none, ErrorCode.none, ErrorCode.unknown_leader_epoch]


def test_a_partition_that_fails_its_fetch_gets_empty_records_never_null(db, sock):
    # Kafka's ReplicaManager answers a partition's read error with MemoryRecords.EMPTY;
    # librdkafka refuses a null records field ("invalid MessageSetSize -1") and drops the
    # whole response.
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    answer = call(sock, FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(0),
        topics=(FetchTopic(topic="t", partitions=(
            FetchPartition(partition=i32(0), fetch_offset=i64(0),
                           partition_max_bytes=i32(1 << 20)),
            FetchPartition(partition=i32(9), fetch_offset=i64(0),
                           partition_max_bytes=i32(1 << 20)))),),
        forgotten_topics_data=()))
    parts = answer.responses[0].partitions
    assert [(p.error_code, p.records) for p in parts] == [
        (ErrorCode.none, b""), (ErrorCode.unknown_topic_or_partition, b"")]


def test_a_partition_whose_fetch_fails_answers_its_offsets_as_minus_one(db, sock):
    # Kafka's ReplicaManager.readFromLog answers every failed read through
    # createLogReadResult(e): high watermark and log start offset -1, and no last stable
    # offset, which KafkaApis.handleFetchRequest answers -1 (INVALID_LAST_STABLE_OFFSET).
    # An offset out of range is one (handleOffsetOutOfRangeError keeps the offsets only for
    # an offset moved to tiered storage), as is a read refused for its size (LogSegment.read:
    # IllegalArgumentException, UNKNOWN_SERVER_ERROR), or a partition not here. A partition
    # read beside them keeps its own.
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    db.create_topic("beside")
    producer = db.producer()
    for value in (b"a", b"b", b"c"):
        producer.send("t", value, partition=0)
        producer.send("beside", value, partition=0)
    producer.flush()
    db._broker.delete_records({streamlog.TopicPartition("t", 0): 1})

    def fetch(partition=0, offset=1, max_bytes=1 << 20):
        answer = call(sock, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(0),
            topics=(FetchTopic(topic="beside", partitions=(
                FetchPartition(partition=i32(0), fetch_offset=i64(2),
                               partition_max_bytes=i32(1 << 20)),)),
                    FetchTopic(topic="t", partitions=(
                        FetchPartition(partition=i32(partition), fetch_offset=i64(offset),
                                       partition_max_bytes=i32(max_bytes)),))),
            forgotten_topics_data=()))
        read, failed = (topic.partitions[0] for topic in answer.responses)
        assert (read.error_code, read.high_watermark, read.last_stable_offset,
                read.log_start_offset, len(read.records) > 0) == (ErrorCode.none, 3, 3, 0, True)
        return (failed.error_code, failed.high_watermark, failed.last_stable_offset,
                failed.log_start_offset, len(failed.records) > 0)

    assert fetch(offset=1) == (ErrorCode.none, 3, 3, 1, True)
    assert fetch(offset=4) == (ErrorCode.offset_out_of_range, -1, -1, -1, False)
    assert fetch(offset=0) == (ErrorCode.offset_out_of_range, -1, -1, -1, False)
    assert fetch(max_bytes=-1) == (ErrorCode.unknown_server_error, -1, -1, -1, False)
    assert fetch(partition=5) == (ErrorCode.unknown_topic_or_partition, -1, -1, -1, False)

def test_a_zstd_topic_is_unsupported_compression_type_to_a_fetch_before_version_10(db, sock):
    # KafkaApis.maybeConvertFetchedData: a topic whose compression.type is zstd answers a
    # Fetch of version 9 or older UNSUPPORTED_COMPRESSION_TYPE (KIP-110: such a client may
    # not decode zstd), by the topic's config, whatever its batches hold; Fetch 10 reads it.
    from kio.schema.fetch.v9.request import FetchPartition as FetchPartition9
    from kio.schema.fetch.v9.request import FetchRequest as FetchRequest9
    from kio.schema.fetch.v9.request import FetchTopic as FetchTopic9
    from kio.schema.fetch.v10.request import FetchPartition as FetchPartition10
    from kio.schema.fetch.v10.request import FetchRequest as FetchRequest10
    from kio.schema.fetch.v10.request import FetchTopic as FetchTopic10
    db.create_topic("z", config={"compression.type": "zstd"})
    db.producer().send("z", b"v", partition=0).result(timeout=10)
    db.producer().send("t", b"v", partition=0).result(timeout=10)

    def fetch(request, topic, partition):
        answer = call(sock, request(
            replica_id=BrokerId(-1), max_wait=i32Timedelta.parse(datetime.timedelta(0)),
            min_bytes=i32(0), max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0),
            session_epoch=i32(-1), forgotten_topics_data=(), topics=tuple(
                topic(topic=name, partitions=(partition(
                    partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                    log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),))
                for name in ("z", "t"))))
        return [(r.topic, r.partitions[0].error_code, len(r.partitions[0].records or b"") > 0)
                for r in answer.responses]

    assert fetch(FetchRequest9, FetchTopic9, FetchPartition9) == [
        ("z", ErrorCode.unsupported_compression_type, False), ("t", ErrorCode.none, True)]
    assert fetch(FetchRequest10, FetchTopic10, FetchPartition10) == [
        ("z", ErrorCode.none, True), ("t", ErrorCode.none, True)]


def test_a_batch_damaged_on_its_way_is_corrupt_message_which_producers_retry(db, sock):
    # Kafka's UnifiedLog.analyzeAndValidateRecords: a batch whose CRC does not match is a
    # CorruptRecordException (CORRUPT_MESSAGE, retriable: the producer sends it again);
    # INVALID_RECORD would fail the send for good. An old format is the sender's error
    # (ProduceRequest.validateRecords: magic 0 or 1 is INVALID_RECORD); a magic no Kafka
    # ever wrote is damage again (ByteBufferLogInputStream.nextBatchSize: CORRUPT_MESSAGE).
    damaged = bytearray(record_batch.build_batch([b"x"], timestamp=1))
    damaged[-1] ^= 1
    answer = call(sock, produce("t", batch=bytes(damaged)))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
    for magic, code in ((1, ErrorCode.invalid_record), (0, ErrorCode.invalid_record),
                        (3, ErrorCode.corrupt_message), (0xFF, ErrorCode.corrupt_message)):
        odd_magic = bytearray(record_batch.build_batch([b"x"], timestamp=1))
        odd_magic[16] = magic
        answer = call(sock, produce("t", batch=bytes(odd_magic)))
        assert answer.responses[0].partition_responses[0].error_code == code, magic
    assert db.describe_topic("t").partitions[0].high_watermark == 0


def test_delete_records_of_a_topic_without_the_delete_policy_is_a_policy_violation(db, sock):
    # Kafka's Partition.deleteRecordsOnLeader: records are deleted only where cleanup.policy
    # holds "delete" (POLICY_VIOLATION otherwise, the records kept); compact,delete allows it.
    db.create_topic("keyed", partitions=1, config={"cleanup.policy": "compact"})
    db.create_topic("both", partitions=1, config={"cleanup.policy": "compact,delete"})
    producer = db.producer()
    for topic in ("keyed", "both"):
        for key in (b"a", b"b", b"c"):
            producer.send(topic, b"v", key=key)
    producer.flush()
    answer = call(sock, DeleteRecordsRequest(timeout=SECONDS, topics=tuple(
        DeleteRecordsTopic(name=topic, partitions=(
            DeleteRecordsPartition(partition_index=i32(0), offset=i64(2)),))
        for topic in ("keyed", "both"))))
    assert [(t.name, t.partitions[0].error_code, t.partitions[0].low_watermark)
            for t in answer.topics] == [("keyed", ErrorCode.policy_violation, -1),
                                        ("both", ErrorCode.none, 2)]
    assert db.describe_topic("keyed").partitions[0].log_start_offset == 0


def test_a_fetch_with_a_partition_that_fails_answers_at_once_without_its_long_poll(db, server,
                                                                                  sock):
    # Kafka's ReplicaManager.fetchMessages answers at once when reading any partition gave
    # an error (errorReadingData): a consumer whose partition's leader moved learns of it
    # now, not after max_wait, even while its other partitions have nothing new.
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    db.create_topic("two", partitions=2)
    server.faults.error("Fetch", "NOT_LEADER_OR_FOLLOWER", topic="two", partition=1)
    # max_wait is NEVER_S: an answer at all is one that did not wait it out.
    answer = call_without_long_poll(sock, FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(seconds=NEVER_S)), min_bytes=i32(1),
        topics=(FetchTopic(topic="two", partitions=tuple(
            FetchPartition(partition=i32(p), fetch_offset=i64(0),
                           partition_max_bytes=i32(1 << 20)) for p in (0, 1))),),
        forgotten_topics_data=()))
    assert [p.error_code for p in answer.responses[0].partitions] == [
        ErrorCode.none, ErrorCode.not_leader_or_follower]


def test_a_topic_named_twice_in_an_admin_request_is_refused_once_and_left_alone(db, sock):
    # Kafka's ControllerApis.createTopics / deleteTopics and KafkaApis'
    # handleCreatePartitionsRequest: a name given more than once gets one INVALID_REQUEST
    # result and nothing is done to it; the other names are served. (The responses are
    # keyed by name: librdkafka refuses a whole answer naming a topic twice.)
    from kio.schema.create_partitions.v3.request import (CreatePartitionsRequest,
                                                         CreatePartitionsTopic)
    from kio.schema.delete_topics.v5.request import DeleteTopicsRequest

    def creatable(name, partitions):
        return CreatableTopic(name=name, num_partitions=i32(partitions),
                              replication_factor=i16(1), assignments=(), configs=())
    answer = call(sock, CreateTopicsRequest(timeout=SECONDS, validate_only=False, topics=(
        creatable("twice", 1), creatable("once", 1), creatable("twice", 2))))
    assert sorted((t.name, t.error_code) for t in answer.topics) == [
        ("once", ErrorCode.none), ("twice", ErrorCode.invalid_request)]
    assert "twice" not in db.topics() and "once" in db.topics()

    answer = call(sock, CreatePartitionsRequest(timeout=SECONDS, validate_only=False, topics=(
        CreatePartitionsTopic(name="t", count=i32(2), assignments=None),
        CreatePartitionsTopic(name="once", count=i32(2), assignments=None),
        CreatePartitionsTopic(name="t", count=i32(3), assignments=None))))
    assert sorted((r.name, r.error_code) for r in answer.results) == [
        ("once", ErrorCode.none), ("t", ErrorCode.invalid_request)]
    assert len(db.describe_topic("t").partitions) == 1

    answer = call(sock, DeleteTopicsRequest(timeout=SECONDS, topic_names=("t", "once", "t")))
    assert sorted((r.name, r.error_code) for r in answer.responses) == [
        ("once", ErrorCode.none), ("t", ErrorCode.invalid_request)]
    assert "t" in db.topics() and "once" not in db.topics()


def test_a_failed_produce_with_acks_0_closes_its_connection(db, server):
    # Kafka's KafkaApis.handleProduceRequest: acks=0 gets no response, so a produce that
    # failed closes the connection instead: the producer sees the broker go away and
    # refreshes its metadata. A produce that succeeded keeps the connection.
    from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1
    with socket.create_connection((server.host, server.port)) as s:
        s.sendall(len(encode(produce("t", acks=0))).to_bytes(4, "big") +
                  encode(produce("t", acks=0)))
        assert call(s, MetadataV1(topics=None), correlation_id=2).topics   # still served
        s.settimeout(10)
        s.sendall(len(encode(produce("nope", acks=0))).to_bytes(4, "big") +
                  encode(produce("nope", acks=0)))
        assert s.recv(1) == b"", "the connection stayed open after a failed acks=0 produce"
    assert db.describe_topic("t").partitions[0].high_watermark == 1


def test_a_produced_batch_whose_offset_range_and_record_count_disagree_is_invalid(db, sock):
    # Kafka's LogValidator.validateBatch: a client's batch must span exactly as many offsets
    # as it holds records (INVALID_RECORD otherwise); only the cleaner leaves gaps. Taken,
    # one record would use up five offsets of a log that is not compacted.
    import struct

    from streamlog.storage.crc32c_py import crc32c
    forged = bytearray(record_batch.build_batch([b"x"], timestamp=1))
    struct.pack_into(">i", forged, record_batch.LAST_OFFSET_DELTA_OFFSET, 4)
    struct.pack_into(">I", forged, record_batch.CRC_OFFSET,
                     crc32c(bytes(forged[record_batch.ATTRIBUTES_OFFSET:])))
    answer = call(sock, produce("t", batch=bytes(forged)))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.invalid_record
    assert db.describe_topic("t").partitions[0].log_end_offset == 0


def test_a_produce_with_two_batches_or_a_nonzero_base_offset_for_a_partition_is_invalid(db,
                                                                                          sock):
    # Kafka's ProduceRequest.validateRecords (v3+, applied per partition by KafkaApis
    # handleProduceRequest): "exactly one record batch per partition"; UnifiedLog
    # .analyzeAndValidateRecords: a client's magic-2 batch has baseOffset 0. Both are
    # INVALID_RECORD for that partition alone; nothing is appended.
    def batch(value, base_offset=0):
        return bytes(record_batch.build_batch([value], timestamp=1, base_offset=base_offset))
    for records in (batch(b"a") + batch(b"b"), batch(b"c", base_offset=5)):
        answer = call(sock, produce("t", batch=records))
        assert answer.responses[0].partition_responses[0].error_code == \
            ErrorCode.invalid_record
    assert db.describe_topic("t").partitions[0].log_end_offset == 0
    answer = call(sock, produce("t", batch=batch(b"d")))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert db.describe_topic("t").partitions[0].log_end_offset == 1


def test_a_fetch_reads_each_partition_within_its_own_partition_max_bytes(db, sock):
    # Kafka's ReplicaManager.readFromLocalLog: each partition is read within its own
    # partition_max_bytes and what is left of the request's max_bytes; the first partition
    # with records returns one whole batch even above both. DelayedFetch.tryComplete
    # counts no more of a partition towards min_bytes than its partition_max_bytes.
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    db.create_topic("two", partitions=2)
    producer = db.producer()
    for _ in range(5):
        for p in (0, 1):
            producer.send("two", b"v" * 1000, partition=p)
            producer.flush()   # a batch each
    one = db._broker.partition_log(streamlog.TopicPartition("two", 0)).size_in_bytes // 5

    def fetch(limits, max_bytes=1 << 20, min_bytes=0, max_wait_s=0):
        answer = call(sock, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(seconds=max_wait_s)),
            min_bytes=i32(min_bytes), max_bytes=i32(max_bytes),
            topics=(FetchTopic(topic="two", partitions=tuple(
                FetchPartition(partition=i32(p), fetch_offset=i64(0),
                               partition_max_bytes=i32(limit))
                for p, limit in enumerate(limits))),),
            forgotten_topics_data=()))
        return [len(list(record_batch.iter_batches(bytes(p.records))))
                for p in answer.responses[0].partitions]
    assert fetch([one + 10, 1 << 20]) == [1, 5]
    assert fetch([1 << 20, one + 10]) == [5, 1]
    assert fetch([10, 1 << 20]) == [1, 5]          # the first non-empty: one batch anyway
    assert fetch([10, 10]) == [1, 0]
    assert fetch([1 << 20, 1 << 20], max_bytes=3 * one + 10) == [3, 0]
    started = time.monotonic()
    assert fetch([100], min_bytes=3 * one, max_wait_s=1) == [1]
    assert time.monotonic() - started >= 0.9, "bytes above partition_max_bytes ended the wait"


def test_the_brokers_fetch_max_bytes_caps_what_a_fetch_asks_for(tmp_path):
    # Kafka's KafkaApis.handleFetchRequest: fetchMaxBytes = min(request max_bytes, the
    # broker's fetch.max.bytes), and min_bytes is capped at that: a fetch asking 1 MiB of a
    # broker set to 1024 bytes gets the first batch (one whole batch even above the limit)
    # and nothing more, and its 1 MiB min_bytes does not keep it waiting.
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    with streamlog.open(str(tmp_path / "db"), config={"fetch.max.bytes": 1024}) as db, \
            db.serve() as server, \
            socket.create_connection((server.host, server.port)) as sock:
        db.create_topic("two", partitions=2)
        producer = db.producer()
        for _ in range(3):
            for p in (0, 1):
                producer.send("two", b"v" * 600, partition=p)
                producer.flush()   # a batch each, each below 1024 bytes
        answer = call_without_long_poll(sock, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(seconds=NEVER_S)),
            min_bytes=i32(1 << 20), max_bytes=i32(1 << 20),
            topics=(FetchTopic(topic="two", partitions=tuple(
                FetchPartition(partition=i32(p), fetch_offset=i64(0),
                               partition_max_bytes=i32(1 << 20)) for p in (0, 1))),),
            forgotten_topics_data=()))
        assert [(p.error_code, len(list(record_batch.iter_batches(bytes(p.records)))))
                for p in answer.responses[0].partitions] == [(ErrorCode.none, 1),
                                                             (ErrorCode.none, 0)]


def test_a_negative_partition_max_bytes_fails_that_partitions_read_when_it_has_records(db,
                                                                                       sock):
    # Kafka's ReplicaManager.readFromLog reads min(partition_max_bytes, what is left of
    # max_bytes); LogSegment.read refuses a size below 0 (IllegalArgumentException), which
    # readFromLog answers for that partition alone as any failed read: UNKNOWN_SERVER_ERROR,
    # no records, and at once (a failed read ends the long poll). At the end of what is
    # visible LocalLog.read returns before any segment is read: empty, no error.
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    db.create_topic("two", partitions=2)
    producer = db.producer()
    for p in (0, 1):
        producer.send("two", b"v", partition=p)
    producer.flush()

    def fetch(offset, limit, max_wait_s=0):
        answer = call_without_long_poll(sock, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(seconds=max_wait_s)),
            min_bytes=i32(1 << 20), max_bytes=i32(1 << 20),
            topics=(FetchTopic(topic="two", partitions=(
                FetchPartition(partition=i32(0), fetch_offset=i64(offset),
                               partition_max_bytes=i32(limit)),
                FetchPartition(partition=i32(1), fetch_offset=i64(0),
                               partition_max_bytes=i32(1 << 20)))),),
            forgotten_topics_data=()))
        return [(p.error_code, len(list(record_batch.iter_batches(bytes(p.records)))))
                for p in answer.responses[0].partitions]
    # max_wait is NEVER_S: an answer at all is one where the failed read ended the long poll.
    assert fetch(0, -1, max_wait_s=NEVER_S) == [(ErrorCode.unknown_server_error, 0),
                                                (ErrorCode.none, 1)]
    assert fetch(1, -1) == [(ErrorCode.none, 0), (ErrorCode.none, 1)]


def test_only_a_negative_read_size_becomes_a_partitions_error(db, monkeypatch):
    # The read of a negative size is the one a fetch answers as that partition's failure
    # (above); a ValueError from anywhere else in the read path is a fault, raised, not
    # turned into UNKNOWN_SERVER_ERROR.
    from streamlog.storage.partition_log import PartitionLog
    tp = streamlog.TopicPartition("t", 0)
    producer = db.producer()
    producer.send("t", b"v", partition=0)
    producer.flush()
    assert db._broker.fetch({tp: 0}, partition_max_bytes=-1)[tp].error is not None

    def broken(*args, **kwargs):
        raise ValueError("a fault in the read path")
    monkeypatch.setattr(PartitionLog, "read", broken)
    with pytest.raises(ValueError, match="a fault in the read path"):
        db._broker.fetch({tp: 0})


def test_a_negative_max_bytes_fails_the_first_partition_and_leaves_0_for_the_others(db, sock):
    # Kafka's ReplicaManager.readFromLog starts limitBytes at the request's max_bytes and sets
    # it to max(0, limitBytes - what was read) after each partition: the first partition is
    # read with the negative size, which LogSegment.read refuses when there are records
    # (UNKNOWN_SERVER_ERROR), and the next one with 0, which still gives the first batch
    # (minOneMessage). KafkaApis.handleFetchRequest caps min_bytes at max_bytes, so such a
    # fetch, and one whose min_bytes is above its max_bytes, is answered without waiting.
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    db.create_topic("two", partitions=2)
    producer = db.producer()
    for p in (0, 1):
        producer.send("two", b"v", partition=p)
    producer.flush()

    def fetch(offsets, max_bytes, min_bytes=1, max_wait_s=0):
        answer = call(sock, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(seconds=max_wait_s)),
            min_bytes=i32(min_bytes), max_bytes=i32(max_bytes),
            topics=(FetchTopic(topic="two", partitions=tuple(
                FetchPartition(partition=i32(p), fetch_offset=i64(offset),
                               partition_max_bytes=i32(1 << 20))
                for p, offset in enumerate(offsets))),),
            forgotten_topics_data=()))
        return [(p.error_code, len(list(record_batch.iter_batches(bytes(p.records)))))
                for p in answer.responses[0].partitions]
    assert fetch([0, 0], -1) == [(ErrorCode.unknown_server_error, 0), (ErrorCode.none, 1)]
    assert fetch([1, 0], -1) == [(ErrorCode.none, 0), (ErrorCode.none, 1)]
    # A wait of 10 minutes would outlast the socket's timeout: the answers come at once.
    sock.settimeout(60)
    assert fetch([1, 1], -1, max_wait_s=600) == [(ErrorCode.none, 0), (ErrorCode.none, 0)]
    assert fetch([0, 1], 10, min_bytes=1 << 20, max_wait_s=600) == \
        [(ErrorCode.none, 1), (ErrorCode.none, 0)]


def test_a_database_of_its_own_stamps_produced_batches_with_the_epoch_its_metadata_names(
        db, sock):
    # Kafka's leader stamps its leader epoch on every batch it appends (LogValidator sets
    # partitionLeaderEpoch), whatever the client's batch said: a consumer commits the epoch
    # of what it read and validates its position with it (KIP-320). A database on its own
    # names epoch 0 in Metadata; a batch sent with 5, and the in-process producer's, read
    # back as epoch 0's.
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
    answer = call(sock, produce("t", batch=bytes(record_batch.build_batch(
        [b"a"], timestamp=int(time.time() * 1000), partition_leader_epoch=5))))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    producer = db.producer()
    producer.send("t", b"b", partition=0)
    producer.flush()
    metadata = call(sock, MetadataRequest(topics=(MetadataRequestTopic(name="t"),),
                                          allow_auto_topic_creation=False,
                                          include_cluster_authorized_operations=False,
                                          include_topic_authorized_operations=False))
    fetched = call(sock, FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(0),
        max_bytes=i32(1 << 20),
        topics=(FetchTopic(topic="t", partitions=(
            FetchPartition(partition=i32(0), fetch_offset=i64(0),
                           partition_max_bytes=i32(1 << 20)),)),), forgotten_topics_data=()))
    epochs = [b.partition_leader_epoch for b in record_batch.iter_batches(
        bytes(fetched.responses[0].partitions[0].records))]
    assert epochs == [metadata.topics[0].partitions[0].leader_epoch] * 2 == [0, 0]


def test_list_offsets_on_a_database_of_its_own_answers_epoch_0_or_minus_1_for_nothing(db,
                                                                                     sock):
    # Metadata names epoch 0 for every partition of a database on its own: a found offset
    # is epoch 0's; a timestamp after every record finds nothing, answered offset -1 and
    # leader epoch -1 (Kafka's ReplicaManager.fetchOffset: buildErrorResponse's defaults).
    producer = db.producer()
    producer.send("t", b"a", partition=0, timestamp_ms=1000)
    producer.flush()
    answers = [(part.offset, part.leader_epoch)
               for part in (list_offsets(sock, "t", 0, timestamp)
                            for timestamp in (-2, -1, -3, 1000, 1001))]
    assert answers == [(0, 0), (1, 0), (0, 0), (0, 0), (-1, -1)]


def test_a_produced_batch_marked_log_append_time_is_invalid_timestamp(db, sock):
    # Kafka's LogValidator.validateTimestamp: the append time is the broker's to give. A
    # client's batch marked LogAppendTime is INVALID_TIMESTAMP on a LogAppendTime topic, and
    # on a CreateTime topic when it gives its records no time (maxTimestamp -1); nothing is
    # appended. On a CreateTime topic with a time it passes as that time.
    db.create_topic("appended", config={"message.timestamp.type": "LogAppendTime"})
    now = int(time.time() * 1000)
    codes = []
    for topic, timestamp in (("appended", now), ("appended", -1), ("t", -1), ("t", now)):
        batch = bytes(record_batch.build_batch([b"v"], timestamp=timestamp,
                                               timestamp_type=record_batch.LOG_APPEND_TIME))
        codes.append(call(sock, produce(topic, batch=batch)).responses[0]
                     .partition_responses[0].error_code)
    assert codes == [ErrorCode.invalid_timestamp] * 3 + [ErrorCode.none]
    assert db.describe_topic("appended").partitions[0].log_end_offset == 0
    assert db.describe_topic("t").partitions[0].log_end_offset == 1


def test_a_refused_produce_names_the_records_at_fault_in_record_errors(db, sock):
    # Produce v8+ (KIP-467): Kafka's LogValidator lists every record it refuses a batch for
    # (RecordValidationException), and ReplicaManager answers them as record_errors (the
    # record's index in the batch, and why) beside the error_message: records out of the
    # topic's timestamp window and a batch marked LogAppendTime (INVALID_TIMESTAMP), records
    # without a key on a compacted topic (INVALID_RECORD).
    db.create_topic("recent", config={"message.timestamp.before.max.ms": 60_000})
    db.create_topic("appended", config={"message.timestamp.type": "LogAppendTime"})
    db.create_topic("compacted", config={"cleanup.policy": "compact"})
    db.create_topic("both", config={"cleanup.policy": "compact",
                                    "message.timestamp.before.max.ms": 60_000})
    now = int(time.time() * 1000)
    old = now - 3_600_000
    cases = [
        ("recent", record_batch.build_batch([b"a", b"b", b"c", b"d"],
                                            timestamps=[now, old, now, old - 1]),
         ErrorCode.invalid_timestamp, {1: str(old), 3: str(old - 1)}),
        ("appended", record_batch.build_batch([b"a", b"b"], timestamp=now,
                                              timestamp_type=record_batch.LOG_APPEND_TIME),
         ErrorCode.invalid_timestamp, {0: "LogAppendTime", 1: "LogAppendTime"}),
        ("compacted", record_batch.build_batch([b"a", b"b", b"c"], keys=[b"k", None, None],
                                               timestamp=now),
         ErrorCode.invalid_record, {1: "key", 2: "key"}),
        # Every record's first error (validateRecord: the key, then the timestamp); one
        # timestamp among them makes the batch's INVALID_TIMESTAMP (processRecordErrors).
        ("both", record_batch.build_batch([b"a", b"b", b"c"], keys=[None, b"k", None],
                                          timestamps=[old, old, now]),
         ErrorCode.invalid_timestamp, {0: "key", 1: str(old), 2: "key"})]
    for topic, batch, code, named in cases:
        answer = call(sock, produce(topic, batch=bytes(batch))).responses[0] \
            .partition_responses[0]
        assert answer.error_code == code
        assert [e.batch_index for e in answer.record_errors] == list(named)
        for error in answer.record_errors:
            assert named[error.batch_index] in error.batch_index_error_message
        assert answer.error_message
        assert db.describe_topic(topic).partitions[0].log_end_offset == 0
    answer = call(sock, produce("recent", batch=bytes(record_batch.build_batch(
        [b"ok"], timestamp=now)))).responses[0].partition_responses[0]
    assert (answer.error_code, answer.record_errors, answer.error_message) == \
        (ErrorCode.none, (), None)


def test_a_refused_append_answers_the_log_start_offset_where_kafka_answers_it(db, sock):
    # Kafka's ReplicaManager.appendToLocalLog answers a failed append with the partition's log
    # start offset (processFailedRecord: record validation, a control batch from a client, a
    # sequence out of order, a base offset other than 0 in UnifiedLog.analyzeAndValidateRecords),
    # but UNKNOWN_LOG_APPEND_INFO's -1 for the failures it expects (RecordTooLarge,
    # CorruptRecord, ...); what KafkaApis refuses before the append (ProduceRequest
    # .validateRecords: no batch, magic other than 2) answers PartitionResponse(error): -1.
    db.create_topic("small", config={"max.message.bytes": 100})
    producer = db.producer()
    for value in (b"a", b"b"):
        producer.send("t", value, partition=0)
    producer.flush()
    db._broker.delete_records({streamlog.TopicPartition("t", 0): 1})
    now = int(time.time() * 1000)
    damaged = bytearray(record_batch.build_batch([b"x"], timestamp=now))
    damaged[-1] ^= 1
    old_magic = bytearray(record_batch.build_batch([b"x"], timestamp=now))
    old_magic[16] = 1
    first = record_batch.build_batch([b"x"], timestamp=now, producer_id=7, producer_epoch=0,
                                     base_sequence=0)
    assert call(sock, produce("t", batch=bytes(first))).responses[0] \
        .partition_responses[0].error_code == ErrorCode.none
    cases = [
        ("t", record_batch.build_batch([b"x"], timestamp=-1,
                                       timestamp_type=record_batch.LOG_APPEND_TIME),
         ErrorCode.invalid_timestamp, 1),
        ("t", record_batch.build_batch([b"marker"], keys=[b"control"], timestamp=now,
                                       is_control=True),
         ErrorCode.invalid_record, 1),
        ("t", record_batch.build_batch([b"x"], timestamp=now, producer_id=7, producer_epoch=0,
                                       base_sequence=5),
         ErrorCode.out_of_order_sequence_number, 1),
        ("t", record_batch.build_batch([b"x"], timestamp=now, base_offset=5),
         ErrorCode.invalid_record, 1),
        ("t", damaged, ErrorCode.corrupt_message, -1),
        ("t", old_magic, ErrorCode.invalid_record, -1),
        ("t", b"", ErrorCode.invalid_record, -1),
        ("small", record_batch.build_batch([b"x" * 200], timestamp=now),
         ErrorCode.message_too_large, -1)]
    answers = []
    for topic, batch, _, _ in cases:
        answer = call(sock, produce(topic, batch=bytes(batch))).responses[0] \
            .partition_responses[0]
        answers.append((answer.error_code, answer.log_start_offset))
    assert answers == [(code, start) for _, _, code, start in cases]


def test_a_batch_with_a_producer_id_and_a_negative_sequence_is_an_invalid_record(db, sock):
    # Kafka's LogValidator.validateBatch (a client's append): a batch that carries a producer
    # id but a base sequence below 0 is refused, INVALID_RECORD, answered with the log start
    # offset (ReplicaManager.appendToLocalLog's processFailedRecord). Without a producer id
    # the sequence is not read (RecordBatch.hasProducerId), so such a batch is taken.
    now = int(time.time() * 1000)
    answers = []
    for producer_id, sequence in ((7, -1), (8, -5), (9, -2 ** 31)):
        batch = record_batch.build_batch([b"x"], timestamp=now, producer_id=producer_id,
                                         producer_epoch=0, base_sequence=sequence)
        answer = call(sock, produce("t", batch=bytes(batch))).responses[0] \
            .partition_responses[0]
        answers.append((answer.error_code, answer.log_start_offset))
    assert answers == [(ErrorCode.invalid_record, 0)] * 3
    assert db.describe_topic("t").partitions[0].log_end_offset == 0
    unstamped = record_batch.build_batch([b"x"], timestamp=now, base_sequence=-5)
    answer = call(sock, produce("t", batch=bytes(unstamped))).responses[0] \
        .partition_responses[0]
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
    # The producer refused above starts cleanly at sequence 0.
    first = record_batch.build_batch([b"y"], timestamp=now, producer_id=7, producer_epoch=0,
                                     base_sequence=0)
    answer = call(sock, produce("t", batch=bytes(first))).responses[0].partition_responses[0]
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 1)


def test_a_zstd_batch_before_produce_7_is_unsupported_compression_type(db, sock):
    # Kafka's ProduceRequest.validateRecords (KIP-110): zstd came with Produce 7 (and Fetch
    # 10), so a broker never holds zstd batches that older clients would be fed;
    # UNSUPPORTED_COMPRESSION_TYPE for that partition before it.
    from kio.schema.produce.v3 import request as v3
    from kio.schema.produce.v7 import request as v7
    from streamlog.storage import compression
    pytest.importorskip("zstandard")
    batch = bytes(record_batch.build_batch([b"z"], timestamp=1,
                                           compression_type=compression.ZSTD))
    codes = []
    for schema in (v3, v7):
        answer = call(sock, schema.ProduceRequest(
            transactional_id=None, acks=i16(1), timeout=SECONDS, topic_data=(
                schema.TopicProduceData(name="t", partition_data=(
                    schema.PartitionProduceData(index=i32(0), records=batch),)),)))
        codes.append(answer.responses[0].partition_responses[0].error_code)
    assert codes == [ErrorCode.unsupported_compression_type, ErrorCode.none]
    assert db.describe_topic("t").partitions[0].log_end_offset == 1


def test_a_group_between_generations_is_described_without_its_old_protocol_or_assignments(
        db, sock):
    # Kafka's GroupMetadataManager.describeGroups: only a Stable group's protocol and its
    # members' metadata and assignments (ClassicGroupMember.describeNoMetadata otherwise).
    # SyncGroup v5 names the protocol type and name, which must be the group's
    # (validateSyncGroup: INCONSISTENT_GROUP_PROTOCOL).
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
    joined = call(sock, JoinGroupRequest(
        group_id="between", session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=SECONDS,
        member_id="", group_instance_id="i-1", protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\x00\x07odd"),)))
    assert joined.error_code == ErrorCode.none

    def describe():
        (group,) = call(sock, DescribeGroupsRequest(groups=("between",),
                                                    include_authorized_operations=False)).groups
        return group.group_state, group.protocol_data, \
            [(bytes(m.member_metadata), bytes(m.member_assignment)) for m in group.members]
    assert describe() == ("CompletingRebalance", "", [(b"", b"")])

    def sync(protocol_name):
        return call(sock, SyncGroupRequest(
            group_id="between", generation_id=joined.generation_id, member_id=joined.member_id,
            group_instance_id="i-1", protocol_type="consumer", protocol_name=protocol_name,
            assignments=(SyncGroupRequestAssignment(member_id=joined.member_id,
                                                    assignment=b"\x00\x09given"),)))
    assert sync("roundrobin").error_code == ErrorCode.inconsistent_group_protocol
    assert sync("range").error_code == ErrorCode.none
    assert describe() == ("Stable", "range", [(b"\x00\x07odd", b"\x00\x09given")])


def test_api_versions_3_checks_the_client_software_name_and_version(sock):
    # Kafka's KafkaApis.handleApiVersionsRequest: from v3 a client software name or version
    # outside ApiVersionsRequest's pattern is INVALID_REQUEST with no keys.
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    for name, version, valid in (("librdkafka", "2.6.0", True), ("apache-kafka-java", "3.9.0",
                                 True), ("my client", "1.0", False), ("-bad", "1.0", False),
                                 ("ok", "1.0 beta", False), ("", "", False)):
        answer = call(sock, ApiVersionsRequest(client_software_name=name,
                                               client_software_version=version))
        assert (answer.error_code == ErrorCode.none) is valid, (name, version)
        assert (len(answer.api_keys) > 10) is valid


def test_an_incremental_fetch_of_a_session_never_handed_out_is_fetch_session_id_not_found(
        db, sock):
    # KIP-227: this broker answers every fetch with session_id 0, so an incremental fetch
    # (epoch > 0) names no session it knows: Kafka's FetchManager.newContext answers
    # FETCH_SESSION_ID_NOT_FOUND with no partitions, and the client fetches in full again.
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    def fetch(session_id, epoch):
        return call(sock, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(0),
            session_id=i32(session_id), session_epoch=i32(epoch),
            topics=(FetchTopic(topic="t", partitions=(FetchPartition(
                partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)),)),),
            forgotten_topics_data=()))
    answer = fetch(1234, 5)
    assert (answer.error_code, int(answer.session_id), answer.responses) == \
        (ErrorCode.fetch_session_id_not_found, 0, ())
    for session_id, epoch in ((0, 0), (0, -1), (1234, 0)):   # full fetches
        answer = fetch(session_id, epoch)
        assert answer.error_code == ErrorCode.none
        assert [p.error_code for p in answer.responses[0].partitions] == [ErrorCode.none]


def test_acks_all_with_a_timeout_of_0_on_a_database_of_its_own_is_answered_once_durable(
        db, sock):
    # Kafka's one-replica leader moves its high watermark with the append, and DelayedProduce
    # is tried before it is parked: NONE whatever the timeout. Here acks=all also waits for
    # the fsync, part of the append on a database of its own; answered REQUEST_TIMED_OUT,
    # the batch (already appended) was written twice by a producer's retry.
    body = produce("t", acks=-1)
    answer = call(sock, dataclasses.replace(
        body, timeout=i32Timedelta.parse(datetime.timedelta(0))))
    part = answer.responses[0].partition_responses[0]
    assert (part.error_code, int(part.base_offset)) == (ErrorCode.none, 0)
    assert db.describe_topic("t").partitions[0].high_watermark == 1


def test_a_client_id_that_is_not_utf_8_is_read_with_replacement_characters(sock):
    # Kafka decodes protocol strings with new String(bytes, UTF_8) (Readable.readString),
    # which replaces malformed bytes: a C client's Latin-1 client.id is served, and the
    # connection stays. Refused by the decoder, the request closed the connection.
    import struct

    from kio.index import load_response_schema
    from kio.serial import entity_reader
    from support.wire import request
    client_id = "caf\u00e9".encode("latin-1")
    for correlation in (5, 6):   # Metadata v1, all topics, twice on one connection
        frame = request(sock, struct.pack(">hhih", 3, 1, correlation, len(client_id)) +
                        client_id + struct.pack(">i", -1))
        response_cls = load_response_schema(3, 1)
        header, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
        answer, _ = entity_reader(response_cls)(frame[offset:], 0)
        assert header.correlation_id == correlation
        assert "t" in [topic.name for topic in answer.topics]
