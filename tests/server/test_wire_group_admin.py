"""Group administration and the finer points of the group protocol over the wire:
DescribeGroups, ListGroups, DeleteGroups and OffsetDelete through the admin clients (a group
holding members of both kinds), the MEMBER_ID_REQUIRED round trip of JoinGroup v4 on, and a
wire leader's assignment user data reaching the member it is for."""
import datetime
import socket
import subprocess
import threading

import pytest

import streamlog
from kio.schema.join_group.v3.request import JoinGroupRequest as JoinV3
from kio.schema.join_group.v3.request import JoinGroupRequestProtocol as ProtocolV3
from kio.schema.join_group.v5.request import JoinGroupRequest as JoinV5
from kio.schema.join_group.v5.request import JoinGroupRequestProtocol as ProtocolV5
from kio.schema.offset_delete.v0.request import (OffsetDeleteRequest,
                                                  OffsetDeleteRequestPartition,
                                                  OffsetDeleteRequestTopic)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta
from streamlog import TopicPartition
from streamlog.coordinator.assignors import Subscription
from streamlog.server.consumer_protocol import encode_subscription

from support import wait_until
from support.clients import kafka_python_group_consumer
from support.console import streamlog_command
from support.wire import call

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
admin_module = pytest.importorskip("confluent_kafka.admin")


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    database.create_topic("t", partitions=4)
    yield database
    database.close()


def _ms(ms):
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def test_a_wire_members_metadata_reaches_the_leader_as_it_was_sent(db, server):
    # Kafka's coordinator keeps member metadata as opaque bytes (ClassicGroupMember
    # .supportedProtocols) and hands those to the leader: the rack id (KIP-881, read by
    # rack-aware assignors) and the subscription's version arrive as sent. Re-encoded,
    # they came as v3 without the rack.
    sent = encode_subscription(Subscription(["t"], user_data=b"ud"), version=3)
    sent = sent[:-2] + b"\x00\x06rack-a"   # v3 ends with rack_id, a nullable string
    with_v1 = encode_subscription(Subscription(["t"]), version=1)
    with socket.create_connection((server.host, server.port)) as sock:
        for group, metadata in (("rack", sent), ("v1", with_v1)):
            def join(member_id, group=group, metadata=metadata):
                return call(sock, JoinV5(group_id=group, session_timeout=_ms(10_000),
                                         rebalance_timeout=_ms(10_000), member_id=member_id,
                                         group_instance_id=None, protocol_type="consumer",
                                         protocols=(ProtocolV5(name="range",
                                                               metadata=metadata),)))
            answer = join(join("").member_id)
            assert answer.error_code == ErrorCode.none
            assert [bytes(m.metadata) for m in answer.members] == [metadata]


def test_a_wire_leaders_assignment_reaches_its_member_as_it_was_sent(db, server):
    # Kafka's coordinator stores the leader's assignment bytes and hands them on unchanged
    # (GroupMetadataManager: member.setAssignment; ClassicGroupMember.describe): a v0
    # assignment with its topics in the leader's order comes back so, in SyncGroup and in
    # DescribeGroups. Re-encoded, it came back as v3, topics sorted.
    import struct

    from kio.schema.describe_groups.v4.request import DescribeGroupsRequest
    from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment

    def topic(name, partitions):
        return struct.pack(">h", len(name)) + name.encode() + \
            struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    db.create_topic("a", partitions=1)
    sent = struct.pack(">hi", 0, 2) + topic("t", [3, 1]) + topic("a", [0]) + \
        struct.pack(">i", 2) + b"ud"
    with socket.create_connection((server.host, server.port)) as sock:
        def join(member_id):
            return call(sock, JoinV5(group_id="as-sent", session_timeout=_ms(10_000),
                                     rebalance_timeout=_ms(10_000), member_id=member_id,
                                     group_instance_id=None, protocol_type="consumer",
                                     protocols=(ProtocolV5(name="range", metadata=(
                                         encode_subscription(Subscription(["t", "a"])))),)))
        joined = join(join("").member_id)
        synced = call(sock, SyncGroupRequest(
            group_id="as-sent", generation_id=joined.generation_id,
            member_id=joined.member_id, group_instance_id=None,
            assignments=(SyncGroupRequestAssignment(member_id=joined.member_id,
                                                    assignment=sent),)))
        assert (synced.error_code, bytes(synced.assignment)) == (ErrorCode.none, sent)
        described = call(sock, DescribeGroupsRequest(groups=("as-sent",),
                                                      include_authorized_operations=False))
        (member,) = described.groups[0].members
        assert bytes(member.member_assignment) == sent
    assert sorted(db.describe_group("as-sent").members[0].assignment) == [
        TopicPartition("a", 0), TopicPartition("t", 1), TopicPartition("t", 3)]


def test_join_group_v5_hands_out_a_member_id_first_and_v3_joins_at_once(db, server):
    # KIP-394 (Kafka's GroupCoordinator, JoinGroup v4 on): a new dynamic member is answered
    # MEMBER_ID_REQUIRED with its id, and becomes a member when it joins with that id.
    metadata = encode_subscription(Subscription(["t"]))
    with socket.create_connection((server.host, server.port)) as sock:
        def join_v5(member_id):
            return call(sock, JoinV5(group_id="raw", session_timeout=_ms(10_000),
                                     rebalance_timeout=_ms(10_000), member_id=member_id,
                                     group_instance_id=None, protocol_type="consumer",
                                     protocols=(ProtocolV5(name="range", metadata=metadata),)))
        first = join_v5("")
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        assert db.describe_group("raw").members == []
        second = join_v5(first.member_id)
        assert second.error_code == ErrorCode.none
        assert second.member_id == second.leader == first.member_id
        # Before v4 the id comes in the first answer (the same group: it rebalances).
        old = call(sock, JoinV3(group_id="old", session_timeout=_ms(10_000),
                                rebalance_timeout=_ms(10_000), member_id="",
                                protocol_type="consumer",
                                protocols=(ProtocolV3(name="range", metadata=metadata),)))
        assert old.error_code == ErrorCode.none and old.member_id == old.leader


def test_admin_clients_describe_list_and_delete_a_group_of_both_kinds(db, server):
    from confluent_kafka import ConsumerGroupState
    wire = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                     "group.id": "mixed", "client.id": "wire-member",
                                     "partition.assignment.strategy": "range"})
    wire.subscribe(["t"])
    local = db.consumer(group_id="mixed", client_id="local-member",
                        partition_assignment_strategy=["range"])
    local.subscribe(["t"])
    stop = threading.Event()
    polling = threading.Thread(target=lambda: [local.poll(0.1) for _ in iter(stop.is_set, True)])
    polling.start()
    try:
        def both_assigned():
            wire.poll(0.1)
            group = db.describe_group("mixed")
            return group.state == "Stable" and len(group.members) == 2 and \
                all(m.assignment for m in group.members)
        wait_until(both_assigned, "both members to be assigned")
        # `streamlog groups describe` in another process reads the group's record: both
        # kinds of member, with their assignments.
        described = subprocess.run([streamlog_command(), "groups", "describe", "mixed",
                                    "--path", str(db.path)], capture_output=True, text=True,
                                   timeout=60)
        assert described.returncode == 0, described.stderr
        assert "wire-member" in described.stdout and "local-member" in described.stdout
        admin = admin_module.AdminClient({"bootstrap.servers": server.bootstrap_servers})
        listed = admin.list_consumer_groups().result(10)
        assert [(g.group_id, g.state) for g in listed.valid] == \
            [("mixed", ConsumerGroupState.STABLE)]
        described = admin.describe_consumer_groups(["mixed", "nobody"])
        mixed = described["mixed"].result(10)
        assert mixed.state == ConsumerGroupState.STABLE
        assert mixed.partition_assignor == "range"
        by_client = {m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
                     for m in mixed.members}
        # range over 4 partitions: the member ids' order decides who gets which half.
        assert sorted(by_client) == ["local-member", "wire-member"]
        assert sorted(p for ps in by_client.values() for p in ps) == [0, 1, 2, 3]
        assert all(len(ps) == 2 for ps in by_client.values())
        assert described["nobody"].result(10).state == ConsumerGroupState.DEAD
        # A group with members is not deleted (NON_EMPTY_GROUP)...
        with pytest.raises(confluent_kafka.KafkaException, match="NON_EMPTY_GROUP"):
            admin.delete_consumer_groups(["mixed"])["mixed"].result(10)
        # ...and kafka-python's admin sees the same group.
        kp = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        try:
            listed = kp.list_groups()
            assert [g["group_id"] for g in listed] == ["mixed"], listed
            kp_group = kp.describe_groups(["mixed"])["mixed"]
            assert sorted(m["client_id"] for m in kp_group["members"]) == ["local-member",
                                                                             "wire-member"]
        finally:
            kp.close()
    finally:
        stop.set()
        polling.join()
        local.commit()
        local.close()
        wire.close()
    # Once both left, the group is Empty and deleting it drops it and its offsets.
    admin.delete_consumer_groups(["mixed"])["mixed"].result(10)
    assert "mixed" not in [g.group_id for g in db.list_groups()]
    with pytest.raises(confluent_kafka.KafkaException, match="GROUP_ID_NOT_FOUND"):
        admin.delete_consumer_groups(["mixed"])["mixed"].result(10)


def test_kafka_python_removes_a_static_member_by_its_instance_id(db, server):
    # An admin's LeaveGroup names a static member by its group.instance.id alone (member id
    # "": kafka-python's remove_group_members, Java's removeMembersFromConsumerGroup), and
    # Kafka's classicGroupLeaveToClassicGroup removes the member holding it; an instance id
    # no member holds is UNKNOWN_MEMBER_ID.
    metadata = encode_subscription(Subscription(["t"]))
    with socket.create_connection((server.host, server.port)) as sock:
        joined = call(sock, JoinV5(group_id="static", session_timeout=_ms(10_000),
                                   rebalance_timeout=_ms(10_000), member_id="",
                                   group_instance_id="app-1", protocol_type="consumer",
                                   protocols=(ProtocolV5(name="range", metadata=metadata),)))
    assert joined.error_code == ErrorCode.none
    admin = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        removed = admin.remove_group_members("static", [
            kafka.admin.MemberToRemove(group_instance_id="app-1"),
            kafka.admin.MemberToRemove(group_instance_id="app-9")])
    finally:
        admin.close()
    assert removed == {"app-1": kafka.errors.NoError,
                       "app-9": kafka.errors.UnknownMemberIdError}
    assert db.describe_group("static").members == []


def test_kafka_python_deleting_a_topic_deletes_the_groups_offsets_of_it(tmp_path):
    # Kafka's OffsetMetadataManager.onPartitionsDeleted: DeleteTopics deletes every group's
    # offsets of the topic, here too when no group was used since the database opened.
    path = str(tmp_path / "reopened")
    with streamlog.open(path) as database:
        database.create_topic("t", partitions=2)
        consumer = database.consumer(group_id="g")
        consumer.commit({TopicPartition("t", 1): 4})
        consumer.close()
    with streamlog.open(path) as database, database.serve() as server:
        admin = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        try:
            admin.delete_topics(["t"])
            assert admin.list_group_offsets({"g": None}) == {"g": {}}
        finally:
            admin.close()


def test_kafka_python_deletes_a_groups_offsets_but_not_those_of_a_subscribed_topic(db,
                                                                                  server):
    # Kafka's OffsetDelete (KafkaAdminClient.delete_group_offsets; confluent-kafka's and
    # aiokafka's admin clients have no such call): OffsetMetadataManager.deleteOffsets
    # keeps the offsets of a topic a member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC) and
    # deletes the others; KafkaApis answers an unknown partition UNKNOWN_TOPIC_OR_PARTITION.
    db.create_topic("u", partitions=1)
    t0, t1, u0 = (kafka.TopicPartition("t", 0), kafka.TopicPartition("t", 1),
                  kafka.TopicPartition("u", 0))
    db.alter_group_offsets("g", {TopicPartition("t", 0): 0, TopicPartition("t", 1): 0,
                                 TopicPartition("u", 0): 0})
    admin = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    member = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                       "group.id": "g"})
    try:
        answer = admin.delete_group_offsets("g", [t0, kafka.TopicPartition("t", 9)])
        assert answer == {t0: kafka.errors.NoError,
                          kafka.TopicPartition("t", 9): kafka.errors.UnknownTopicOrPartitionError}
        assert set(admin.list_group_offsets("g")["g"]) == {t1, u0}
        member.subscribe(["t"])
        wait_until(lambda: (member.poll(0.1), member.assignment())[1], "an assignment")
        answer = admin.delete_group_offsets("g", [t1, u0])
        assert answer == {t1: kafka.errors.GroupSubscribedToTopicError, u0: kafka.errors.NoError}
        assert set(admin.list_group_offsets("g")["g"]) == {t1}
        with pytest.raises(kafka.errors.GroupIdNotFoundError):
            admin.delete_group_offsets("nobody", [t0])
    finally:
        member.close()
        admin.close()


def offset_delete(sock, group_id, topics):
    """An OffsetDelete of group_id's offsets of [(topic, [partition])], answered."""
    return call(sock, OffsetDeleteRequest(group_id=group_id, topics=tuple(
        OffsetDeleteRequestTopic(name=name, partitions=tuple(
            OffsetDeleteRequestPartition(partition_index=i32(p)) for p in partitions))
        for name, partitions in topics)))


def answered(response):
    """[(topic, [(partition, error code)])] of an OffsetDelete answer, in its order."""
    return [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in response.topics]


def test_offset_delete_answers_group_errors_alone_and_unknown_partitions_first(db, sock):
    # Kafka's KafkaApis.handleOffsetDeleteRequest and OffsetDeleteResponse.Builder.merge: a
    # group-level error is the whole answer (no topics); otherwise the partitions found
    # unknown come first, then the coordinator's answers.
    for group_id, code in (("nobody", ErrorCode.group_id_not_found),
                           ("", ErrorCode.invalid_group_id)):
        response = offset_delete(sock, group_id, [("t", [0])])
        assert (response.error_code, response.topics) == (code, ())
    db.alter_group_offsets("g", {TopicPartition("t", 0): 0, TopicPartition("t", 1): 0})
    response = offset_delete(sock, "g", [("t", [0, 9]), ("nope", [0])])
    assert response.error_code == ErrorCode.none
    assert answered(response) == [("t", [(9, ErrorCode.unknown_topic_or_partition),
                                         (0, ErrorCode.none)]),
                                  ("nope", [(0, ErrorCode.unknown_topic_or_partition)])]
    assert set(db.describe_group("g").partitions) == {TopicPartition("t", 1)}
    # ClassicGroup.validateOffsetDelete: members of a protocol type other than "consumer"
    # make the group NON_EMPTY_GROUP.
    joined = call(sock, JoinV3(group_id="connect", session_timeout=_ms(10_000),
                               rebalance_timeout=_ms(10_000), member_id="",
                               protocol_type="connect",
                               protocols=(ProtocolV3(name="default", metadata=b"\x00"),)))
    assert joined.error_code == ErrorCode.none
    response = offset_delete(sock, "connect", [("t", [0])])
    assert (response.error_code, response.topics) == (ErrorCode.non_empty_group, ())


def test_offset_delete_answers_a_partition_listed_twice_twice(db, sock):
    # Kafka's request and response collections (ImplicitLinkedHashMultiCollection) keep
    # duplicates: OffsetMetadataManager.deleteOffsets answers every request topic entry and
    # every partition in it, and KafkaApis.handleOffsetDeleteRequest sends that answer as
    # it is when no partition was unknown (OffsetDeleteResponse.Builder.merge); with an
    # unknown one, the coordinator's partitions join the builder's entry of their topic.
    none, unknown = ErrorCode.none, ErrorCode.unknown_topic_or_partition
    db.alter_group_offsets("g", {TopicPartition("t", p): 0 for p in range(4)})
    response = offset_delete(sock, "g", [("t", [0, 0]), ("t", [1, 0])])
    assert response.error_code == none
    assert answered(response) == [("t", [(0, none), (0, none)]),
                                  ("t", [(1, none), (0, none)])]
    response = offset_delete(sock, "g", [("t", [2, 9]), ("t", [3, 2])])
    assert answered(response) == [("t", [(9, unknown), (2, none), (3, none), (2, none)])]
    assert db.describe_group("g").partitions == {}


def test_offset_delete_answers_an_unknown_topic_listed_with_no_partitions(db, sock):
    # Kafka's KafkaApis.handleOffsetDeleteRequest hands a topic missing from the metadata
    # cache to OffsetDeleteResponse.Builder.addPartitions, which makes the topic's entry
    # even for an empty partition list; Builder.merge then adds the coordinator's answers
    # after it. A known topic with no partitions goes nowhere (not to the coordinator,
    # which only gets topics with partitions left).
    none, unknown = ErrorCode.none, ErrorCode.unknown_topic_or_partition
    db.alter_group_offsets("g", {TopicPartition("t", 0): 0, TopicPartition("t", 1): 0})
    response = offset_delete(sock, "g", [("t", [0]), ("nope", []), ("t", [])])
    assert response.error_code == none
    assert answered(response) == [("nope", []), ("t", [(0, none)])]
    response = offset_delete(sock, "g", [("nope", []), ("nope", [3]), ("gone", [])])
    assert answered(response) == [("nope", [(3, unknown)]), ("gone", [])]
    assert set(db.describe_group("g").partitions) == {TopicPartition("t", 1)}
    response = offset_delete(sock, "g", [("t", [])])
    assert (response.error_code, answered(response)) == (none, [])


class TaggingAssignor:
    """A kafka-python assignor that gives every member all partitions of its half and user
    data naming the member (a user assignor's use of ConsumerProtocolAssignment.user_data)."""

    name = "tagging"
    version = 0
    received = {}

    @classmethod
    def supported_protocols(cls):
        from kafka.coordinator.assignors.abstract import RebalanceProtocol
        return [RebalanceProtocol.EAGER]

    @classmethod
    def assign(cls, cluster, members):
        from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment
        ids = sorted(m.member_id for m in members)
        # The leader's first assignment may come before its metadata lists the topic.
        partitions = sorted(cluster.partitions_for_topic("t") or range(4))
        return {member_id: ConsumerProtocolAssignment(
            0, [("t", partitions[i::len(ids)])], b"for:" + member_id.encode())
            for i, member_id in enumerate(ids)}

    @classmethod
    def metadata(cls, topics):
        from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
        return ConsumerProtocolSubscription(0, list(topics), b"")

    @classmethod
    def on_assignment(cls, assignment, generation):
        cls.received[bytes(assignment.user_data or b"")] = generation

    @classmethod
    def on_generation_assignment(cls, assignment, generation=None):
        cls.on_assignment(assignment, generation)


def test_a_wire_leaders_assignment_user_data_reaches_its_member(db, server):
    TaggingAssignor.received.clear()
    consumers = [kafka_python_group_consumer("t", 4, bootstrap_servers=server.bootstrap_servers,
                                             group_id="tagged",
                                             partition_assignment_strategy=[TaggingAssignor])
                 for _ in range(2)]
    stop = threading.Event()

    def run(consumer):   # each member polls on its own thread, as an application's would
        while not stop.is_set():
            consumer.poll(timeout_ms=100)
    threads = [threading.Thread(target=run, args=(c,)) for c in consumers]
    for thread in threads:
        thread.start()
    try:
        def both_tagged():
            try:
                group = db.describe_group("tagged")
            except streamlog.errors.GroupIdNotFoundError:
                return False   # no member has joined yet
            # Each member's user data of the group's current generation: the leader's
            # SyncGroup answers every member at once (Kafka's GroupCoordinator
            # setAndPropagateAssignment), but each client takes its answer in on its own
            # thread, and under the eager protocol a member owns its previous
            # generation's partitions until it does; a tag from an earlier generation
            # says nothing of what the member owns now.
            return group.state == "Stable" and len(group.members) == 2 and all(
                TaggingAssignor.received.get(b"for:" + m.member_id.encode()) ==
                group.generation for m in group.members)
        wait_until(both_tagged, "each member to receive the user data made for it")
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        owned = sorted(tp for c in consumers for tp in c.assignment())
        for consumer in consumers:
            consumer.close()
    assert owned == [TopicPartition("t", p) for p in range(4)]
