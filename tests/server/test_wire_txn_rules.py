"""Kafka's rules for TxnOffsetCommit's member checks and for InitProducerId carrying the
client's producer id and epoch, checked with raw requests (real clients do not let a test
shape these): what each request is answered, code for code, against Kafka's source
(paths relative to the apache/kafka repository)."""
import datetime

import pytest
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.offset_commit.v8.request import (OffsetCommitRequest,
                                                 OffsetCommitRequestPartition,
                                                 OffsetCommitRequestTopic)
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.txn_offset_commit.v3.request import (TxnOffsetCommitRequest,
                                                     TxnOffsetCommitRequestPartition,
                                                     TxnOffsetCommitRequestTopic)
from kio.static.primitive import i16, i32, i32Timedelta, i64

import streamlog
from streamlog.coordinator.transaction import TxnState
from streamlog.coordinator.transaction_coordinator import find_transaction_coordinator

from support.wire import call

SECONDS_30 = i32Timedelta.parse(datetime.timedelta(seconds=30))
TXN_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    database.create_topic("t", partitions=1)
    yield database
    database.close()


def init_producer_id(sock, producer_id=-1, epoch=-1, transactional_id="tx"):
    answer = call(sock, InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=TXN_TIMEOUT,
        producer_id=i64(producer_id), producer_epoch=i16(epoch)))
    return answer.error_code, int(answer.producer_id), int(answer.producer_epoch)


# --- TxnOffsetCommit: the group's member checks --------------------------------------------

def join(sock, instance_id=None):
    """A member joins group g alone: (member id, generation); the group is then
    CompletingRebalance until sync()."""
    def request(member_id):
        return call(sock, JoinGroupRequest(
            group_id="g", session_timeout=SECONDS_30, rebalance_timeout=SECONDS_30,
            member_id=member_id, group_instance_id=instance_id, protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),)))
    answer = request("")
    if answer.error_code == ErrorCode.member_id_required:   # a dynamic member (KIP-394)
        answer = request(answer.member_id)
    assert answer.error_code == ErrorCode.none
    return answer.member_id, int(answer.generation_id)


def sync(sock, member_id, generation, instance_id=None):
    answer = call(sock, SyncGroupRequest(
        group_id="g", generation_id=i32(generation), member_id=member_id,
        group_instance_id=instance_id,
        assignments=(SyncGroupRequestAssignment(member_id=member_id, assignment=b""),)))
    assert answer.error_code == ErrorCode.none


@pytest.fixture
def producer(sock):
    """A transactional producer whose transaction holds group g's offsets partition."""
    code, pid, epoch = init_producer_id(sock)
    assert code == ErrorCode.none
    answer = call(sock, AddOffsetsToTxnRequest(transactional_id="tx", producer_id=i64(pid),
                                               producer_epoch=i16(epoch), group_id="g"))
    assert answer.error_code == ErrorCode.none
    return pid, epoch


def txn_commit(sock, producer, generation, member_id, instance_id=None):
    pid, epoch = producer
    answer = call(sock, TxnOffsetCommitRequest(
        transactional_id="tx", group_id="g", producer_id=i64(pid), producer_epoch=i16(epoch),
        generation_id=i32(generation), member_id=member_id, group_instance_id=instance_id,
        topics=(TxnOffsetCommitRequestTopic(name="t", partitions=(
            TxnOffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(5),
                                            committed_leader_epoch=i32(-1),
                                            committed_metadata=""),)),)))
    return answer.topics[0].partitions[0].error_code


def commit(sock, generation, member_id, instance_id=None):
    answer = call(sock, OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=i32(generation), member_id=member_id,
        group_instance_id=instance_id, topics=(OffsetCommitRequestTopic(name="t", partitions=(
            OffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(5),
                                         committed_leader_epoch=i32(-1),
                                         committed_metadata=""),)),)))
    return answer.topics[0].partitions[0].error_code


def test_a_members_transactional_commit_is_not_refused_while_the_group_completes_a_rebalance(
        db, sock, producer):
    # ClassicGroup.java:855 (validateOffsetCommit): REBALANCE_IN_PROGRESS only
    # `if (!isTransactional && isInState(COMPLETING_REBALANCE))`; GroupCoordinator.scala:1018
    # (the older coordinator's validateOffsetCommit) checks no state for TxnOffsetCommit.
    member_id, generation = join(sock)
    assert db.describe_group("g").state == "CompletingRebalance"
    assert txn_commit(sock, producer, generation, member_id) == ErrorCode.none
    assert commit(sock, generation, member_id) == ErrorCode.rebalance_in_progress


def test_a_generation_for_a_group_that_does_not_exist_is_group_id_not_found_from_v9(db, sock):
    # group-coordinator/.../OffsetMetadataManager.java:310-327 (validateOffsetCommit): no
    # such group and a generation >= 0 is GROUP_ID_NOT_FOUND from OffsetCommit 9 on,
    # ILLEGAL_GENERATION before it (kept for older clients).
    from kio.schema.offset_commit.v9 import request as v9
    assert commit(sock, 3, "m") == ErrorCode.illegal_generation           # version 8
    answer = call(sock, v9.OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=i32(3), member_id="m",
        group_instance_id=None, topics=(v9.OffsetCommitRequestTopic(name="t", partitions=(
            v9.OffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(5),
                                            committed_leader_epoch=i32(-1),
                                            committed_metadata=""),)),)))
    assert answer.topics[0].partitions[0].error_code == ErrorCode.group_id_not_found


def test_generation_minus_one_with_a_members_id_is_an_illegal_generation(db, sock, producer):
    # ClassicGroup.java:841-847: a request naming a member id (or an instance id) is checked
    # as a member's (validateMember), then `generationId != this.generationId` answers
    # ILLEGAL_GENERATION; an unknown member id is UNKNOWN_MEMBER_ID first. Only a request
    # naming no member (TxnOffsetCommit before v3) may commit transactionally to a group
    # with members (ClassicGroup.java:847-853).
    member_id, generation = join(sock)
    sync(sock, member_id, generation)
    assert txn_commit(sock, producer, -1, member_id) == ErrorCode.illegal_generation
    assert commit(sock, -1, member_id) == ErrorCode.illegal_generation
    assert txn_commit(sock, producer, -1, "nobody") == ErrorCode.unknown_member_id
    assert commit(sock, -1, "nobody") == ErrorCode.unknown_member_id
    assert txn_commit(sock, producer, -1, "") == ErrorCode.none
    assert commit(sock, -1, "") == ErrorCode.unknown_member_id


def test_an_instance_id_the_group_does_not_know_is_an_unknown_member(db, sock, producer):
    # ClassicGroup.java:797-799 (validateMember): `existingMemberId == null` ->
    # UNKNOWN_MEMBER_ID, even for a current member id and generation; an instance id that
    # maps to another member id -> FENCED_INSTANCE_ID (ClassicGroup.java:800-805).
    member_id, generation = join(sock, instance_id="app-1")
    sync(sock, member_id, generation, instance_id="app-1")
    assert txn_commit(sock, producer, generation, member_id, "app-9") == \
        ErrorCode.unknown_member_id
    assert commit(sock, generation, member_id, "app-9") == ErrorCode.unknown_member_id
    assert txn_commit(sock, producer, -1, "", "app-9") == ErrorCode.unknown_member_id
    assert txn_commit(sock, producer, generation, "other", "app-1") == \
        ErrorCode.fenced_instance_id
    assert commit(sock, generation, "other", "app-1") == ErrorCode.fenced_instance_id
    assert txn_commit(sock, producer, -1, "", "app-1") == ErrorCode.fenced_instance_id
    assert txn_commit(sock, producer, generation, member_id, "app-1") == ErrorCode.none
    assert commit(sock, generation, member_id, "app-1") == ErrorCode.none


# --- InitProducerId naming the producer id and epoch the client holds (KIP-360) -------------

def test_a_bump_naming_the_epoch_it_holds_answers_its_retry_without_bumping_again(db, sock):
    # TransactionMetadata.scala:283-294 (prepareIncrementProducerEpoch): the expected epoch
    # is the current one -> bumped, and the current one becomes lastProducerEpoch; the
    # expected epoch is lastProducerEpoch -> "a retry of a successful call, so just return
    # the current epoch without bumping"; any other -> PRODUCER_FENCED (line 295-298).
    code, pid, epoch = init_producer_id(sock)
    assert (code, epoch) == (ErrorCode.none, 0)
    assert init_producer_id(sock, pid, 0) == (ErrorCode.none, pid, 1)
    assert init_producer_id(sock, pid, 0) == (ErrorCode.none, pid, 1)   # the lost answer
    assert init_producer_id(sock, pid, 1) == (ErrorCode.none, pid, 2)
    assert init_producer_id(sock, pid, 0) == (ErrorCode.producer_fenced, -1, -1)
    assert init_producer_id(sock, pid, 50) == (ErrorCode.producer_fenced, -1, -1)
    # A new instance (nothing named) bumps with lastProducerEpoch -1 (line 277-279): the
    # epoch before it is fenced, not taken for a retry.
    assert init_producer_id(sock) == (ErrorCode.none, pid, 3)
    assert init_producer_id(sock, pid, 2) == (ErrorCode.producer_fenced, -1, -1)


def test_a_producer_id_that_is_not_the_transactional_ids_is_fenced(db, sock):
    # TransactionCoordinator.scala:216-228 (isValidProducerId): another producer id than
    # the transactional id's is PRODUCER_FENCED, INVALID_PRODUCER_EPOCH before version 4
    # (KafkaApis.handleInitProducerIdRequest); an id not known yet takes any.
    code, pid, _ = init_producer_id(sock, 77, 3, transactional_id="new")
    assert code == ErrorCode.none and pid != 77
    assert init_producer_id(sock, pid + 1000, 0, transactional_id="new") == \
        (ErrorCode.producer_fenced, -1, -1)
    from kio.schema.init_producer_id.v3.request import InitProducerIdRequest as V3
    answer = call(sock, V3(transactional_id="new", transaction_timeout=TXN_TIMEOUT,
                           producer_id=i64(pid + 1000), producer_epoch=i16(0)))
    assert answer.error_code == ErrorCode.invalid_producer_epoch


def test_a_half_named_producer_is_an_invalid_request_and_an_idempotent_one_gets_a_new_id(
        db, sock):
    # KafkaApis.handleInitProducerIdRequest: a producer id without an epoch, or the other
    # way round, is INVALID_REQUEST; without a transactional id the coordinator "blindly
    # accepts" and hands out a new producer id, epoch 0 (TransactionCoordinator.scala:116).
    assert init_producer_id(sock, 5, -1)[0] == ErrorCode.invalid_request
    assert init_producer_id(sock, -1, 5)[0] == ErrorCode.invalid_request
    code, pid, epoch = init_producer_id(sock, transactional_id=None)
    code, new_pid, epoch = init_producer_id(sock, pid, epoch, transactional_id=None)
    assert (code, epoch) == (ErrorCode.none, 0) and new_pid != pid


def open_transaction(sock):
    """A transaction holding group g's offsets partition, left open: (pid, epoch)."""
    code, pid, epoch = init_producer_id(sock)
    answer = call(sock, AddOffsetsToTxnRequest(transactional_id="tx", producer_id=i64(pid),
                                               producer_epoch=i16(epoch), group_id="g"))
    assert (code, answer.error_code) == (ErrorCode.none, ErrorCode.none)
    return pid, epoch


def test_a_bump_naming_its_epoch_while_its_transaction_is_open_fences_it(db, sock):
    # TransactionCoordinator.handleInitProducerId, case Ongoing: the transaction is aborted
    # with a bumped epoch (prepareFenceProducerEpoch: lastProducerEpoch -1) and the answer
    # is CONCURRENT_TRANSACTIONS; at the retry the client's epoch is neither the current
    # nor the last one: PRODUCER_FENCED.
    pid, epoch = open_transaction(sock)
    assert init_producer_id(sock, pid, epoch) == (ErrorCode.concurrent_transactions, -1, -1)
    meta = find_transaction_coordinator(db._broker).describe("tx")
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    assert init_producer_id(sock, pid, epoch) == (ErrorCode.producer_fenced, -1, -1)


def test_a_new_instance_during_an_open_transaction_gets_its_epoch_at_the_retry(db, sock):
    # handleInitProducerId, case Ongoing: the fence's epoch is "never returned to the user"
    # (prepareInitProducerIdTransit); the answer is CONCURRENT_TRANSACTIONS, and the retry
    # finds CompleteAbort and bumps a second time (prepareIncrementProducerEpoch).
    pid, epoch = open_transaction(sock)
    assert init_producer_id(sock) == (ErrorCode.concurrent_transactions, -1, -1)
    meta = find_transaction_coordinator(db._broker).describe("tx")
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    assert init_producer_id(sock) == (ErrorCode.none, pid, epoch + 2)


def committed_while_markers_fail(db, sock, monkeypatch):
    """An open transaction committed over the wire while no marker can be written (until
    monkeypatch.undo()): EndTxn is answered NONE and the transaction is left PrepareCommit
    (see the second test below). (pid, epoch, the coordinator)."""
    pid, epoch = open_transaction(sock)
    coordinator = find_transaction_coordinator(db._broker)

    def no_replicas(markers):
        raise streamlog.errors.NotEnoughReplicasError("too few in-sync replicas for a marker")
    monkeypatch.setattr(db._broker, "write_txn_markers", no_replicas)
    answer = call(sock, EndTxnRequest(transactional_id="tx", producer_id=i64(pid),
                                      producer_epoch=i16(epoch), committed=True))
    assert answer.error_code == ErrorCode.none
    assert coordinator.describe("tx").state == TxnState.PREPARE_COMMIT
    return pid, epoch, coordinator


def test_a_new_instance_while_a_commit_is_completing_is_told_to_retry(db, sock, monkeypatch):
    # TransactionCoordinator.prepareInitProducerIdTransit, case PrepareCommit/PrepareAbort:
    # CONCURRENT_TRANSACTIONS while the markers are pending, which every client retries
    # (aiokafka's InitPIDHandler fails for good on a code it does not know); the retry
    # after the markers landed bumps the epoch.
    pid, epoch, coordinator = committed_while_markers_fail(db, sock, monkeypatch)
    assert init_producer_id(sock) == (ErrorCode.concurrent_transactions, -1, -1)
    monkeypatch.undo()
    assert init_producer_id(sock) == (ErrorCode.concurrent_transactions, -1, -1)
    meta = coordinator.describe("tx")
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_COMMIT, epoch)
    assert init_producer_id(sock) == (ErrorCode.none, pid, epoch + 1)


def test_an_end_whose_markers_cannot_be_written_yet_is_answered_once_decided(db, sock,
                                                                              monkeypatch):
    # TransactionCoordinator.endTransaction answers EndTxn as soon as PrepareCommit is
    # written and leaves the markers to its marker channel, which retries them: a client
    # takes any other answer for an end that failed (the Java producer's EndTxnHandler
    # raises a fatal error on one it does not know). Until the markers land, the id's next
    # request answers CONCURRENT_TRANSACTIONS, which clients retry; once they can be
    # written, that retry finishes them and goes on.
    pid, epoch, coordinator = committed_while_markers_fail(db, sock, monkeypatch)

    def add_offsets():
        return call(sock, AddOffsetsToTxnRequest(transactional_id="tx", producer_id=i64(pid),
                                                 producer_epoch=i16(epoch),
                                                 group_id="g")).error_code
    assert add_offsets() == ErrorCode.concurrent_transactions
    monkeypatch.undo()
    assert add_offsets() == ErrorCode.none       # the markers, then the next transaction
    meta = coordinator.describe("tx")
    assert (meta.state, meta.producer_epoch) == (TxnState.ONGOING, epoch)
