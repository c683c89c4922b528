"""Transaction verification (Kafka's KIP-890 part 1, transaction.partition.verification.enable,
true by default since Kafka 3.6): a transactional Produce whose batch would open a
transaction on a partition is first checked with the transaction coordinator. Without it,
a batch to a partition never added to the transaction, or one that arrives after its
transaction was aborted, opens a transaction no coordinator will ever end, and the
partition's last stable offset is stuck for good.

Kafka's rules, each cited where a test holds the server to it:
- TransactionCoordinator.handleVerifyPartitionsInTransaction: an unknown producer id is
  INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED, a partition not in the
  transaction TRANSACTION_ABORTABLE;
- AddPartitionsToTxnManager: PRODUCER_FENCED is answered INVALID_PRODUCER_EPOCH, and
  TRANSACTION_ABORTABLE is INVALID_TXN_STATE to Produce versions up to 10;
- UnifiedLog.analyzeAndValidateProducerState: a verified request whose transaction ended
  before its append is refused (INVALID_TXN_STATE, "Record was not part of an ongoing
  transaction").
"""
import datetime

import pytest

import streamlog
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import (AddPartitionsToTxnRequest,
                                                         AddPartitionsToTxnTopic)
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.produce.v11 import request as produce_v11
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit
from kio.static.primitive import i16, i32, i32Timedelta, i64
from streamlog import TopicPartition
from streamlog.coordinator.group_coordinator import find_coordinator
from streamlog.coordinator.transaction_coordinator import find_transaction_coordinator
from streamlog.storage.partition_log import PartitionLog
from streamlog.storage.producer_state import COORDINATOR
from streamlog.storage.record_batch import build_batch

from support import config
from support.wire import call

pytest.importorskip("confluent_kafka")   # the server's extra

SECONDS = i32Timedelta.parse(datetime.timedelta(seconds=5))
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Txn:
    """A transactional producer speaking the protocol itself, one request at a time."""

    def __init__(self, sock, transactional_id="tx"):
        self.sock, self.id = sock, transactional_id
        request = InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout=i32Timedelta.parse(
                datetime.timedelta(seconds=60)), producer_id=i64(-1), producer_epoch=i16(-1))
        answer = call(sock, request)
        if answer.error_code == ErrorCode.concurrent_transactions:
            # The id's open transaction was just aborted (TransactionCoordinator
            # .handleInitProducerId); the retry gets the epoch after, as a client's does.
            answer = call(sock, request)
        assert answer.error_code == ErrorCode.none
        self.pid, self.epoch = int(answer.producer_id), int(answer.producer_epoch)
        self.seq = {}

    def add(self, *tps):
        answer = call(self.sock, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.id, v3_and_below_producer_id=i64(self.pid),
            v3_and_below_producer_epoch=i16(self.epoch), v3_and_below_topics=tuple(
                AddPartitionsToTxnTopic(name=tp.topic, partitions=(i32(tp.partition),))
                for tp in tps)))
        codes = [p.partition_error_code for t in answer.results_by_topic_v3_and_below
                 for p in t.results_by_partition]
        assert codes == [ErrorCode.none] * len(tps)

    def batch(self, tp, value=b"v", pid=None, epoch=None, transactional=True, seq=None,
              base_offset=0):
        return bytes(build_batch([value], timestamp=1, is_transactional=transactional,
                                 base_offset=base_offset,
                                 producer_id=self.pid if pid is None else pid,
                                 producer_epoch=self.epoch if epoch is None else epoch,
                                 base_sequence=self.seq.get(tp, 0) if seq is None else seq))

    def produce_many(self, records_by_tp, version=9, transactional_id="mine"):
        """One Produce of {tp: records}; the error code of each partition, in order."""
        kio = produce_v11 if version == 11 else produce_v9
        answer = call(self.sock, kio.ProduceRequest(
            transactional_id=self.id if transactional_id == "mine" else transactional_id,
            acks=i16(-1), timeout=SECONDS, topic_data=tuple(
                kio.TopicProduceData(name=tp.topic, partition_data=(
                    kio.PartitionProduceData(index=i32(tp.partition), records=records),))
                for tp, records in records_by_tp.items())))
        return [p.error_code for t in answer.responses for p in t.partition_responses]

    def produce(self, tp, value=b"v", version=9, pid=None, epoch=None):
        """The partition's error code; the sequence moves on only when it was taken."""
        code, = self.produce_many({tp: self.batch(tp, value, pid, epoch)}, version)
        if code == ErrorCode.none:
            self.seq[tp] = self.seq.get(tp, 0) + 1
        return code

    def add_offsets(self, group):
        answer = call(self.sock, AddOffsetsToTxnRequest(
            transactional_id=self.id, producer_id=i64(self.pid), producer_epoch=i16(self.epoch),
            group_id=group))
        assert answer.error_code == ErrorCode.none

    def commit_offset(self, group, tp, offset):
        """TxnOffsetCommit v3 without a member (a producer outside the group); its code."""
        kio = txn_offset_commit
        answer = call(self.sock, kio.TxnOffsetCommitRequest(
            transactional_id=self.id, group_id=group, producer_id=i64(self.pid),
            producer_epoch=i16(self.epoch), generation_id=i32(-1), member_id="",
            group_instance_id=None, topics=(kio.TxnOffsetCommitRequestTopic(
                name=tp.topic, partitions=(kio.TxnOffsetCommitRequestPartition(
                    partition_index=i32(tp.partition), committed_offset=i64(offset),
                    committed_leader_epoch=i32(-1), committed_metadata=""),)),)))
        return answer.topics[0].partitions[0].error_code

    def end(self, commit):
        answer = call(self.sock, EndTxnRequest(transactional_id=self.id, producer_id=i64(
            self.pid), producer_epoch=i16(self.epoch), committed=commit))
        assert answer.error_code == ErrorCode.none


def stable(db, tp):
    """Whether tp has no open transaction: its LSO is its high watermark."""
    log = db._broker.partition_log(tp)
    return log.last_stable_offset == log.high_watermark


def test_a_batch_to_a_partition_not_in_the_transaction_is_refused_and_writes_nothing(db, sock):
    txn = Txn(sock)
    txn.add(T0)
    assert txn.produce(T0) == ErrorCode.none
    assert txn.produce(T1) == ErrorCode.invalid_txn_state              # Produce <= 10
    assert txn.produce(T1, version=11) == ErrorCode.transaction_abortable
    assert db._broker.partition_log(T1).log_end_offset == 0
    txn.end(commit=True)
    # Before verification the stray batch opened a transaction on t-1 that the commit
    # (which marks t-0 only) never ended: t-1's LSO stayed at 0 for good.
    assert stable(db, T0) and stable(db, T1)


def test_a_late_batch_of_an_aborted_transaction_cannot_open_another(db, sock):
    # The producer's request is delayed past its own abort (a client timeout, a slow
    # network): at the same epoch and the next sequence it would pass every producer rule.
    txn = Txn(sock)
    txn.add(T0)
    assert txn.produce(T0, b"aborted") == ErrorCode.none
    txn.end(commit=False)
    assert txn.produce(T0, b"late") == ErrorCode.invalid_txn_state
    assert stable(db, T0)
    txn.add(T0)                                      # the next transaction is served
    assert txn.produce(T0, b"next") == ErrorCode.none
    txn.end(commit=True)
    assert stable(db, T0)
    assert [r.value for r in streamlog.testing.records(db, "t", "read_committed")] == [b"next"]


def test_a_producer_the_coordinator_does_not_know_or_has_fenced_is_refused(db, sock):
    txn = Txn(sock)
    txn.add(T0)
    assert txn.produce(T1, pid=txn.pid + 1000) == ErrorCode.invalid_producer_id_mapping
    newer = Txn(sock)                                # a new instance fences the first
    assert newer.pid == txn.pid and newer.epoch > txn.epoch
    # PRODUCER_FENCED from the coordinator is answered INVALID_PRODUCER_EPOCH on Produce.
    assert txn.produce(T1) == ErrorCode.invalid_producer_epoch
    assert db._broker.partition_log(T1).log_end_offset == 0
    assert stable(db, T0) and stable(db, T1)


def test_no_transactional_batch_slips_past_the_check(db, sock, monkeypatch):
    txn = Txn(sock)
    txn.add(T0)
    # KafkaApis.handleProduceRequest: transactional records without a transactional id
    # fail the whole request, TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    assert txn.produce_many({T1: txn.batch(T1)}, transactional_id=None) == \
        [ErrorCode.transactional_id_authorization_failed]
    # A transactional batch behind a plain one never reaches the log: one partition's
    # records hold one batch (ProduceRequest.validateRecords: INVALID_RECORD).
    mixed = txn.batch(T1, transactional=False, seq=0) + txn.batch(T1, seq=1)
    assert txn.produce_many({T1: mixed}) == [ErrorCode.invalid_record]
    # ReplicaManager.handleProduceAppend: two producers in one request fail all of it.
    other = Txn(sock, "other")
    assert txn.produce_many({T0: txn.batch(T0), T1: other.batch(T1)}) == \
        [ErrorCode.invalid_producer_id_mapping] * 2
    # ReplicaManager.maybeStartTransactionVerificationForPartition: a partition whose guard
    # cannot be taken answers that error, and is not appended unchecked.
    def not_leader(tp, producer_id):
        raise streamlog.errors.NotLeaderOrFollowerError(f"{tp} is led elsewhere now")
    monkeypatch.setattr(db._broker, "start_txn_verification", not_leader)
    assert txn.produce(T1) == ErrorCode.not_leader_or_follower
    monkeypatch.undo()
    assert db._broker.partition_log(T0).log_end_offset == 0
    assert db._broker.partition_log(T1).log_end_offset == 0
    assert txn.produce(T0) == ErrorCode.none
    txn.end(commit=True)
    assert stable(db, T0) and stable(db, T1)


def test_a_partition_whose_records_break_the_request_rules_is_never_verified(db, sock,
                                                                            monkeypatch):
    # Kafka's KafkaApis.handleProduceRequest runs ProduceRequest.validateRecords on each
    # partition first and hands ReplicaManager.handleProduceAppend only the partitions that
    # pass: neither its producer-id check nor the coordinator sees a refused one.
    asked = []
    coordinator = find_transaction_coordinator(db._broker)
    verify = coordinator.verify_partitions
    monkeypatch.setattr(coordinator, "verify_partitions",
                        lambda *args: asked.append(args[3]) or verify(*args))
    txn = Txn(sock)
    txn.add(T0)
    two = txn.batch(T1, seq=0) + txn.batch(T1, seq=1)
    assert txn.produce_many({T1: two}) == [ErrorCode.invalid_record]
    assert asked == []
    assert txn.pid not in db._broker.partition_log(T1).producer_state.verifications
    # The other producer's invalid partition is left out of the producer-id check.
    other = Txn(sock, "other")
    assert txn.produce_many({T0: txn.batch(T0), T1: other.batch(T1) + other.batch(T1)}) == \
        [ErrorCode.none, ErrorCode.invalid_record]
    # RequestUtils.hasTransactionalRecords reads each partition's first batch: a plain one
    # first is no transactional request, and its partition is refused as invalid.
    mixed = txn.batch(T1, transactional=False, seq=0) + txn.batch(T1, seq=1)
    assert txn.produce_many({T1: mixed}, transactional_id=None) == [ErrorCode.invalid_record]
    # A batch's base offset is the append's rule (UnifiedLog.analyzeAndValidateRecords),
    # after the verification: a partition outside the transaction answers that first.
    assert txn.produce_many({T1: txn.batch(T1, base_offset=5)}) == \
        [ErrorCode.invalid_txn_state]
    assert txn.produce_many({T0: txn.batch(T0, seq=1, base_offset=5)}) == \
        [ErrorCode.invalid_record]
    assert asked == [[T0], [T1]]     # T0's first batch; the base offset 5 one on T1
    assert db._broker.partition_log(T1).log_end_offset == 0
    txn.end(commit=True)
    assert stable(db, T0) and stable(db, T1)


def test_offsets_of_a_transaction_that_did_not_add_them_are_refused(db, sock):
    # Kafka's GroupCoordinator.handleTxnCommitOffsets verifies the group's partition of
    # __consumer_offsets with the transaction coordinator as a Produce is verified; a
    # TxnOffsetCommit before version 4 gets INVALID_TXN_STATE. Before, the offsets opened
    # a transaction there that no marker ended: pending (UNSTABLE_OFFSET_COMMIT) for good.
    txn = Txn(sock)
    txn.add(T0)
    assert txn.commit_offset("g", T0, 5) == ErrorCode.invalid_txn_state
    groups = find_coordinator(db._broker)
    offsets_tp = groups.offsets_partition("g")
    assert not groups.offset_fetch_stable("g")[1]
    txn.end(commit=True)
    assert stable(db, offsets_tp)
    txn.add(T0)
    txn.add_offsets("g")                             # as a client does: then it is taken
    assert txn.commit_offset("g", T0, 7) == ErrorCode.none
    txn.end(commit=True)
    assert stable(db, offsets_tp) and groups.offset_fetch("g")[T0].offset == 7


def test_a_guard_taken_before_a_marker_lets_no_batch_in_after_it(tmp_path):
    # Kafka's VerificationGuard: verified, then the transaction is aborted (its marker
    # appended), then the verified request's batch arrives: refused, not a new transaction.
    log = PartitionLog(str(tmp_path / "t-0"), config())

    def batch(seq):
        return build_batch([b"v"], timestamp=1, producer_id=7, producer_epoch=0,
                           base_sequence=seq, is_transactional=True)
    guard = log.start_verification(7)
    log.append(batch(0), verification=guard)           # verified: opens the transaction
    assert log.start_verification(7) is None           # open here: nothing to verify
    guard = None
    log.write_txn_marker(7, 0, 0, commit=False)
    late = log.start_verification(7)
    log.write_txn_marker(7, 0, 0, commit=False)        # another abort after the check
    with pytest.raises(streamlog.errors.InvalidTxnStateError):
        log.append(batch(1), verification=late)
    with pytest.raises(streamlog.errors.InvalidTxnStateError):
        log.append(batch(1), verification=None)        # "open" when checked, not now
    assert log.last_stable_offset == log.log_end_offset
    opened = log.append(batch(1), verification=log.start_verification(7))
    assert log.last_stable_offset == opened.first_offset   # the verified batch opened one
    log.append(build_batch([b"offsets"], timestamp=1, producer_id=9, producer_epoch=0,
                           is_transactional=True), origin=COORDINATOR)   # not verifying
    log.close()
