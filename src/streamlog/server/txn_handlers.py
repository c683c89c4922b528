"""The producer id and transaction APIs on the wire: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn, and the admin APIs that look at them or end
a hanging transaction (DescribeProducers, DescribeTransactions, ListTransactions,
WriteTxnMarkers), as calls to the database's transaction
coordinator and group coordinator (the same transactional ids, epochs and markers the
in-process producers use: a transactional id used over the wire fences an in-process
producer of the same id, and the other way round).

The versions served stop below those of KIP-890 part 2 (EndTxn 5, AddPartitionsToTxn 4,
AddOffsetsToTxn 4, TxnOffsetCommit 4), whose epoch bump per transaction this coordinator
does not do: clients fall back to the versions below. KIP-890 part 1, which needs no
client change, is done: a transactional Produce whose batch would open a transaction on a
partition is first verified with the coordinator (`verify_produce`), as Kafka 3.6 on
does by default, so a late or stray batch cannot open a transaction no coordinator will
end (its partition's LSO would be stuck for good).
A fenced producer is answered PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH at the versions
that predate that code (KIP-588), as Kafka's KafkaApis does.
"""
import datetime
import struct

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta, i64

from .. import errors
from ..broker.metadata import validate_topic_name
from ..coordinator import GROUP_COORDINATOR, TRANSACTION_COORDINATOR
from ..coordinator.group_coordinator import find_coordinator
from ..coordinator.offsets import OFFSETS_TOPIC
from ..coordinator.transaction_coordinator import find_transaction_coordinator
from ..storage.record_batch import iter_batches
from ..structs import OffsetAndMetadata, TopicPartition
from .error_codes import error_code, failure
from .protocol import NO_THROTTLE, build, response_types

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 22, 24, 25, 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
WRITE_TXN_MARKERS = 27
# How long an admin's marker waits for the in-sync replicas (Kafka's request.timeout.ms).
MARKER_TIMEOUT_S = 30.0
# The first version of each API whose clients know PRODUCER_FENCED (KIP-588).
_FENCED_FROM = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2,
                END_TXN: 2, TXN_OFFSET_COMMIT: 3}


def _code(exc, api_key, version):
    code = error_code(exc)
    if code == ErrorCode.producer_fenced and version < _FENCED_FROM[api_key]:
        return ErrorCode.invalid_producer_epoch
    return code


def first_batch(records):
    """The header of the first batch of a Produce partition's records, or None (none there,
    or records that do not parse: the append refuses those)."""
    try:
        return next(iter_batches(records or b""), None)
    except (errors.StreamlogError, struct.error, ValueError):
        return None


def _is_transactional(batch):
    return batch is not None and batch.is_transactional


def _produce_error(exc, version):
    """A failed verification as the error Kafka answers the Produce with (ReplicaManager
    and AddPartitionsToTxnManager): a fence as INVALID_PRODUCER_EPOCH, which producers
    handle there; TRANSACTION_ABORTABLE as INVALID_TXN_STATE to clients older than Produce
    11; what may pass with a retry as NOT_ENOUGH_REPLICAS, which every client retries
    without a metadata refresh."""
    if isinstance(exc, errors.ProducerFencedError):
        return errors.InvalidProducerEpochError(str(exc))
    if isinstance(exc, errors.TransactionAbortableError) and version <= 10:
        return errors.InvalidTxnStateError(f"partition was not added to the transaction: {exc}")
    if isinstance(exc, (errors.ConcurrentTransactionsError, errors.NotCoordinatorError,
                        errors.CoordinatorNotAvailableError,
                        errors.CoordinatorLoadInProgressError)) or \
            getattr(exc, "retriable", False):
        return errors.NotEnoughReplicasError(
            f"unable to verify that the partition was added to the transaction: {exc}")
    return exc


def _offsets_error(exc):
    """A failed verification as TxnOffsetCommit answers it (AddPartitionsToTxnManager, then
    GroupMetadataManager.maybeConvertOffsetCommitError): a fence as INVALID_PRODUCER_EPOCH;
    a partition not in the transaction as INVALID_TXN_STATE (the versions served predate
    TRANSACTION_ABORTABLE); a coordinator it could not reach (a cut link here) as
    COORDINATOR_LOAD_IN_PROGRESS, which clients retry."""
    if isinstance(exc, errors.ProducerFencedError):
        return errors.InvalidProducerEpochError(str(exc))
    if isinstance(exc, errors.TransactionAbortableError):
        return errors.InvalidTxnStateError(
            f"the offsets' partition was not added to the transaction ({exc}): call "
            "AddOffsetsToTxn first")
    if error_code(exc) == ErrorCode.unknown_server_error and getattr(exc, "retriable", False):
        return errors.CoordinatorLoadInProgressError(str(exc))
    return exc


class TxnHandlers:
    def __init__(self, broker):
        self.broker = broker

    @property
    def table(self):
        return {INIT_PRODUCER_ID: self.init_producer_id,
                ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
                ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn, END_TXN: self.end_txn,
                TXN_OFFSET_COMMIT: self.txn_offset_commit,
                DESCRIBE_PRODUCERS: self.describe_producers,
                DESCRIBE_TRANSACTIONS: self.describe_transactions,
                LIST_TRANSACTIONS: self.list_transactions,
                WRITE_TXN_MARKERS: self.write_txn_markers}

    @property
    def transactions(self):
        return find_transaction_coordinator(self.broker)

    def _coordinating(self, key, key_type=TRANSACTION_COORDINATOR):
        """The transaction coordinator, after checking that this broker coordinates key (a
        transactional id; a group id with GROUP_COORDINATOR) in its cluster: NOT_COORDINATOR
        otherwise, and the client asks FindCoordinator again (COORDINATOR_LOAD_IN_PROGRESS
        while this broker loads the key's partition after its election)."""
        view = None if self.broker.replicas is None else self.broker.replicas.view
        if view is not None:
            view.check_coordinating(key, key_type)
        return self.transactions

    def _coordinator_of(self, transactional_id):
        """The transaction coordinator of transactional_id, wherever it is in the cluster."""
        view = None if self.broker.replicas is None else self.broker.replicas.view
        if view is None:
            return self.transactions
        return view.transaction_coordinator(transactional_id)

    def check_transactional_id(self, transactional_id, firsts):
        """Refuse a whole Produce whose partitions' first batches (first_batch of each, as
        sent) hold a transactional one when it names no transactional id: Kafka's
        KafkaApis.handleProduceRequest, before it looks at any partition, looks at each
        partition's first batch (RequestUtils.hasTransactionalRecords) and answers
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
        if transactional_id is None and any(_is_transactional(b) for b in firsts):
            raise errors.TransactionalIdAuthorizationError(
                "transactional records need the request's transactional id")

    def verify_produce(self, version, transactional_id, firsts_by_tp):
        """{tp: what Produce passes its append as `verification` (a guard, or None when the
        transaction is open on tp already), or the error to answer for tp} for the
        partitions of firsts_by_tp ({tp: first_batch of its records}) whose batch is
        transactional (Kafka's ReplicaManager.handleProduceAppend with transaction
        verification). firsts_by_tp holds only the partitions that passed the request's
        checks (one batch each), as
        Kafka's handleProduceRequest passes on only those: a refused partition is never
        verified. Raises what refuses the whole request, before anything is appended:
        batches of two producers (ReplicaManager: InvalidPidMappingException)."""
        batches = {tp: b for tp, b in firsts_by_tp.items() if _is_transactional(b)}
        if not batches:
            return {}
        producers = {(b.producer_id, b.producer_epoch) for b in batches.values()}
        if len(producers) > 1:
            raise errors.InvalidProducerIdMappingError(
                "transactional records of one request carry more than one producer id")
        (producer_id, epoch), = producers
        return self._verify(transactional_id, producer_id, epoch, batches,
                            lambda exc: _produce_error(exc, version))

    def _verify(self, transactional_id, producer_id, epoch, partitions, refusal):
        """{tp: the guard its append carries (None: a transaction of the producer is open on
        tp already), or why tp may not be appended to}: each partition's guard taken first,
        then the coordinator asked about the partitions that need one (Kafka's
        maybeStartTransactionVerificationForPartitions). A guard that cannot be taken (an
        unknown partition, one not led here) is answered as it is; the coordinator's
        refusals go through refusal(exc), each API's translation."""
        out, needed = {}, {}
        for tp in partitions:
            try:
                guard = self.broker.start_txn_verification(tp, producer_id)
            except errors.StreamlogError as exc:
                out[tp] = exc
                continue
            if guard is None:
                out[tp] = None
            else:
                needed[tp] = guard
        if needed:
            try:
                found = self._coordinator_of(transactional_id).verify_partitions(
                    transactional_id, producer_id, epoch, list(needed))
            except errors.StreamlogError as exc:
                found = dict.fromkeys(needed, exc)
            for tp, guard in needed.items():
                out[tp] = guard if found[tp] is None else refusal(found[tp])
        return out

    def _call(self, method, transactional_id, *args):
        """The coordinator's `method` for transactional_id, where it is coordinated here."""
        return getattr(self._coordinating(transactional_id), method)(transactional_id, *args)

    def _txn_offset_commit(self, transactional_id, group_id, producer_id, epoch, *args):
        self._coordinating(group_id, GROUP_COORDINATOR)
        groups = find_coordinator(self.broker)
        verification = self._verify_offsets(transactional_id, groups.offsets_partition(group_id),
                                            producer_id, epoch)
        return groups.txn_offset_commit(group_id, producer_id, epoch, *args,
                                        verification=verification)

    def _verify_offsets(self, transactional_id, tp, producer_id, epoch):
        """The guard for a TxnOffsetCommit's batch on the group's partition tp, once the
        coordinator says tp is in the transaction (Kafka's GroupCoordinator.
        handleTxnCommitOffsets verifies it as a Produce's): without AddOffsetsToTxn first,
        the offsets would open a transaction no marker ends, pending for good."""
        verification = self._verify(transactional_id, producer_id, epoch, [tp],
                                    _offsets_error)[tp]
        if isinstance(verification, errors.StreamlogError):
            raise verification
        return verification

    def init_producer_id(self, version, body, context):
        cls, _ = response_types(INIT_PRODUCER_ID, version)
        producer_id, epoch, exc = -1, -1, None
        try:
            expected = self._expected_producer(body)
            if body.transactional_id is None:
                # Kafka's handleInitProducerId: without a transactional id, a new producer
                # id whatever the client holds.
                producer_id, epoch = self.broker.init_producer_id()
            else:
                producer_id, epoch = self._coordinating(body.transactional_id).init_producer_id(
                    body.transactional_id,
                    int(body.transaction_timeout.total_seconds() * 1000), expected)
        except errors.StreamlogError as exc_:
            exc = exc_
        return build(cls, throttle_time=NO_THROTTLE,
                     error_code=_code(exc, INIT_PRODUCER_ID, version),
                     producer_id=i64(producer_id), producer_epoch=i16(epoch))

    @staticmethod
    def _expected_producer(body):
        """The (producer id, epoch) the client holds, named from version 3 on (KIP-360),
        or None: both -1, or neither, else INVALID_REQUEST (Kafka's KafkaApis
        handleInitProducerIdRequest)."""
        producer_id = int(getattr(body, "producer_id", -1))
        epoch = int(getattr(body, "producer_epoch", -1))
        if producer_id == -1 and epoch == -1:
            return None
        if producer_id == -1 or epoch == -1:
            raise errors.InvalidRequestError(
                f"InitProducerId names producer id {producer_id} with epoch {epoch}: both "
                "or neither must be -1")
        return producer_id, epoch

    def add_partitions_to_txn(self, version, body, context):
        cls, types = response_types(ADD_PARTITIONS_TO_TXN, version)
        topics = body.v3_and_below_topics
        partitions = [TopicPartition(t.name, int(p)) for t in topics for p in t.partitions]
        unknown = {tp for tp in partitions if not self.broker.has_partition(tp)}
        if unknown:
            # Kafka adds none when any is unknown: those answer their error, the rest
            # OPERATION_NOT_ATTEMPTED.
            codes = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                     else ErrorCode.operation_not_attempted for tp in partitions}
        else:
            exc = failure(self._call, "add_partitions", body.v3_and_below_transactional_id,
                          int(body.v3_and_below_producer_id),
                          int(body.v3_and_below_producer_epoch), partitions)
            code = _code(exc, ADD_PARTITIONS_TO_TXN, version)
            codes = {tp: code for tp in partitions}
        return build(cls, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=tuple(
            build(types.AddPartitionsToTxnTopicResult, name=t.name, results_by_partition=tuple(
                build(types.AddPartitionsToTxnPartitionResult, partition_index=i32(p),
                      partition_error_code=codes[TopicPartition(t.name, int(p))])
                for p in t.partitions)) for t in topics))

    def add_offsets_to_txn(self, version, body, context):
        cls, _ = response_types(ADD_OFFSETS_TO_TXN, version)
        exc = failure(self._call, "add_offsets", body.transactional_id, int(body.producer_id),
                      int(body.producer_epoch), body.group_id)
        return build(cls, throttle_time=NO_THROTTLE,
                     error_code=_code(exc, ADD_OFFSETS_TO_TXN, version))

    def txn_offset_commit(self, version, body, context):
        cls, types = response_types(TXN_OFFSET_COMMIT, version)
        offsets = {TopicPartition(t.name, int(p.partition_index)):
                   OffsetAndMetadata(int(p.committed_offset), p.committed_metadata or "",
                                     int(getattr(p, "committed_leader_epoch", -1)))
                   for t in body.topics for p in t.partitions}
        exc = failure(self._txn_offset_commit, body.transactional_id, body.group_id,
                      int(body.producer_id), int(body.producer_epoch),
                      getattr(body, "member_id", ""), int(getattr(body, "generation_id", -1)),
                      getattr(body, "group_instance_id", None), offsets,
                      bad_values=True)   # the coordinator's checks of each offset
        code = _code(exc, TXN_OFFSET_COMMIT, version)
        return build(cls, throttle_time=NO_THROTTLE, topics=tuple(
            build(types.TxnOffsetCommitResponseTopic, name=t.name, partitions=tuple(
                build(types.TxnOffsetCommitResponsePartition,
                      partition_index=p.partition_index, error_code=code)
                for p in t.partitions)) for t in body.topics))

    def end_txn(self, version, body, context):
        cls, _ = response_types(END_TXN, version)
        exc = failure(self._call, "end_txn", body.transactional_id,
                      int(body.producer_id), int(body.producer_epoch), bool(body.committed),
                      True)   # answered once the decision is durable, as Kafka answers it
        return build(cls, throttle_time=NO_THROTTLE, error_code=_code(exc, END_TXN, version))

    # --- the transaction admin APIs (KIP-664: what `kafka-transactions.sh` asks) -----------

    def describe_producers(self, version, body, context):
        """Each partition's producers as its log keeps them (Kafka's KafkaApis.
        handleDescribeProducersRequest and Partition.activeProducerState): any replica
        answers; a broker holding none answers NOT_LEADER_OR_FOLLOWER."""
        cls, types = response_types(DESCRIBE_PRODUCERS, version)
        topics = []
        for topic in body.topics:
            parts = []
            for index in topic.partition_indexes:
                producers, exc = [], None
                try:
                    validate_topic_name(topic.name, allow_internal=True)
                    producers = self._hosted_log(TopicPartition(topic.name, int(index))) \
                        .active_producers()
                except errors.StreamlogError as exc_:
                    exc = exc_
                parts.append(build(
                    types.PartitionResponse, partition_index=index, error_code=error_code(exc),
                    error_message=None if exc is None else str(exc),
                    active_producers=tuple(build(
                        types.ProducerState, producer_id=i64(pid), producer_epoch=i32(epoch),
                        last_sequence=i32(seq), last_timestamp=i64(timestamp),
                        coordinator_epoch=i32(coordinator_epoch),
                        current_txn_start_offset=i64(first))
                        for pid, epoch, seq, timestamp, coordinator_epoch, first in producers)))
            topics.append(build(types.TopicResponse, name=topic.name, partitions=tuple(parts)))
        return build(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

    def _hosted_log(self, tp):
        """tp's log where this broker holds a replica of it."""
        replicas = self.broker.replicas
        log = self.broker.partition_log(tp)   # UNKNOWN_TOPIC_OR_PARTITION when it is none
        if replicas is not None and not replicas.manages(tp):
            raise errors.NotLeaderOrFollowerError(f"broker {replicas.node_id} holds no replica "
                                                  f"of {tp}")
        return log

    def describe_transactions(self, version, body, context):
        """Each transactional id's state, from its coordinator (Kafka's
        handleDescribeTransactions): NOT_COORDINATOR where another broker coordinates it,
        TRANSACTIONAL_ID_NOT_FOUND for an id it does not know."""
        cls, types = response_types(DESCRIBE_TRANSACTIONS, version)
        states = []
        for transactional_id in body.transactional_ids:
            meta, exc = None, None
            try:
                meta = self._coordinating(transactional_id).describe_transaction(
                    transactional_id)
            except errors.StreamlogError as exc_:
                exc = exc_
            by_topic = {}
            for tp in sorted(meta.partitions) if meta is not None else ():
                by_topic.setdefault(tp.topic, []).append(i32(tp.partition))
            states.append(build(
                types.TransactionState, error_code=error_code(exc),
                transactional_id=transactional_id,
                transaction_state="" if meta is None else meta.state.wire_name,
                transaction_timeout=_millis(0 if meta is None else meta.timeout_ms),
                transaction_start_time=_instant(-1 if meta is None else meta.start_ms),
                producer_id=i64(-1 if meta is None else meta.producer_id),
                producer_epoch=i16(-1 if meta is None else meta.producer_epoch),
                topics=tuple(build(types.TopicData, topic=topic, partitions=tuple(parts))
                             for topic, parts in by_topic.items())))
        return build(cls, throttle_time=NO_THROTTLE, transaction_states=tuple(states))

    def list_transactions(self, version, body, context):
        """The transactional ids this broker coordinates, filtered by state, producer id,
        (version 1 on) how long the transaction has been open and (version 2 on, KIP-1152)
        an RE2/J pattern the id matches (Kafka's listTransactionStates); state names it does
        not know come back in unknown_state_filters."""
        cls, types = response_types(LIST_TRANSACTIONS, version)
        listed, unknown, exc = [], [], None
        try:
            listed, unknown = self.transactions.list_transactions(
                [int(p) for p in body.producer_id_filters], list(body.state_filters),
                int(getattr(body, "duration_filter", -1)),
                getattr(body, "transactional_id_pattern", None))
        except errors.StreamlogError as exc_:
            exc = exc_
        return build(cls, throttle_time=NO_THROTTLE, error_code=error_code(exc),
                     unknown_state_filters=tuple(unknown),
                     transaction_states=tuple(build(
                         types.TransactionState, transactional_id=meta.transactional_id,
                         producer_id=i64(meta.producer_id),
                         transaction_state=meta.state.wire_name) for meta in listed))

    def write_txn_markers(self, version, body, context):
        """WriteTxnMarkers, as an admin sends it to abort a hanging transaction (Kafka's
        `kafka-transactions.sh abort`, kafka-python's KafkaAdminClient.abort_transaction;
        this database's coordinators write their own markers in process). Each marker is
        appended on its partition's leader under the rules of any marker (an older producer
        epoch or coordinator epoch is refused: KafkaApis.handleWriteTxnMarkersRequest,
        ProducerAppendInfo.appendEndTxnMarker) and answered once durable, as Kafka appends
        markers with acks=all."""
        cls, types = response_types(WRITE_TXN_MARKERS, version)
        results = []
        for marker in body.markers:
            topics = []
            for topic in marker.topics:
                parts = tuple(build(
                    types.WritableTxnMarkerPartitionResult, partition_index=index,
                    error_code=error_code(failure(
                        self._write_marker, TopicPartition(topic.name, int(index)), marker)))
                    for index in topic.partition_indexes)
                topics.append(build(types.WritableTxnMarkerTopicResult, name=topic.name,
                                    partitions=parts))
            results.append(build(types.WritableTxnMarkerResult, producer_id=marker.producer_id,
                                 topics=tuple(topics)))
        return build(cls, markers=tuple(results))

    def _write_marker(self, tp, marker):
        producer_id, commit = int(marker.producer_id), bool(marker.transaction_result)
        info = self.broker.write_txn_markers_here(
            [(tp, producer_id, int(marker.producer_epoch), int(marker.coordinator_epoch),
              commit)])[tp]
        replicas = self.broker.replicas
        if replicas is not None and replicas.manages(tp):
            replicas.wait_replicated(tp, info.last_offset + 1, MARKER_TIMEOUT_S)
        else:
            self.broker.partition_log(tp).flush()
        if tp.topic == OFFSETS_TOPIC:
            # The group's offsets pending in that transaction apply now, or are dropped.
            find_coordinator(self.broker).complete_transaction(tp, producer_id, commit)


def _millis(ms):
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def _instant(ms):
    """A wire timestamp (datetime_i64) of ms since the epoch; -1 stays -1."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
