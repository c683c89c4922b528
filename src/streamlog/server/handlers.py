"""What the server answers to each request it serves: an adapter from Kafka's request types
to the broker's methods of the same names (broker/broker.py), and from the library's errors
to Kafka's error codes.

Every handler runs on a worker thread (network.py), so it may wait: a Fetch for its
max_wait, a Produce with acks=all for its fsync. A handler returns the response entity, or
None when the request wants none (Produce with acks=0).
"""
import contextlib
import datetime
import re
import threading
import time
import uuid
from typing import NamedTuple

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i64

from .. import errors
from ..broker.broker import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from ..broker.metadata import (INTERNAL_TOPICS, TopicInfo, check_name_free,
                               normalized_overrides, overrides_after, validate_partitions,
                               validate_topic_name)
from ..coordinator import GROUP_COORDINATOR, TRANSACTION_COORDINATOR
from ..coordinator.group_coordinator import delete_topic, find_coordinator
from ..coordinator.offsets import OFFSETS_TOPIC
from ..coordinator.transaction_coordinator import find_transaction_coordinator
from ..coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from ..storage.compression import ZSTD
from ..storage.log_config import LIST_CONFIGS
from ..storage.partition_log import UNREPLICATED_LEADER_EPOCH
from ..storage.record_batch import MAGIC, iter_batches
from ..structs import TopicPartition
from .acl_handlers import AclHandlers
from .authorized_operations import (CLUSTER_OPERATIONS, NOT_ASKED, TOPIC_OPERATIONS,
                                    authorized_operations)
from .config_catalog import CATALOG
from .config_resources import ConfigResourcesHandlers
from .configs import DEFAULT_CONFIG, broker_configs, topic_configs
from .describe_topic_partitions import DescribeTopicPartitionsHandlers
from .elect_leaders import ElectLeadersHandlers
from .error_codes import UnsupportedRequestVersionError, error_code, error_message, failure
from .group_handlers import GroupHandlers
from .log_dirs import LogDirsHandlers
from .partition_reassignments import PartitionReassignmentsHandlers
from .protocol import (ALTER_CONFIGS, API_VERSIONS, CREATE_PARTITIONS, CREATE_TOPICS,
                       DELETE_RECORDS, DELETE_TOPICS, DESCRIBE_CLUSTER, DESCRIBE_CONFIGS, FETCH,
                       INCREMENTAL_ALTER_CONFIGS, LIST_OFFSETS, METADATA, NO_THROTTLE,
                       OFFSET_FOR_LEADER_EPOCH, PRODUCE, SUPPORTED, RecordsChunks, build,
                       response_types)
from .replica_assignments import manual_assignment
from .scram_credentials import ScramCredentialsHandlers
from .txn_handlers import TxnHandlers, first_batch

NODE_ID = 0
# ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN (KIP-511).
_SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
# DescribeConfigs: Kafka's resource types of a topic and a broker (ConfigResource.Type).
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


class Connection:
    """One client connection, as its requests' handlers see it: where the client connected
    (Metadata advertises it), and whether it is still open (a request that waits -- a
    Fetch's long poll, a JoinGroup -- ends when its connection does, so no worker thread
    waits for a client that left)."""

    __slots__ = ("host", "port", "closed")

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.closed = threading.Event()


class CloseConnection(Exception):
    """The answer to a request is to close its connection (logged with this message)."""


class Placement(NamedTuple):
    """A partition's leader (-1: none alive), leader epoch, replicas, in-sync replicas and
    replicas that are down, as Metadata and DescribeTopicPartitions answer them."""

    leader: int
    leader_epoch: int
    replicas: tuple
    isr: tuple
    offline: tuple


class RequestContext(NamedTuple):
    """Who asked: the address the client connected to, its client id, its connection."""

    host: str
    port: int
    client_id: str
    connection: Connection


class Handlers:
    def __init__(self, broker, cluster_id, faults):
        self.broker = broker
        self.cluster_id = cluster_id
        self.faults = faults   # faults.Faults: errors a test injected per partition
        self._by_key = {API_VERSIONS: self.api_versions, METADATA: self.metadata,
                        PRODUCE: self.produce, FETCH: self.fetch,
                        LIST_OFFSETS: self.list_offsets,
                        OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
                        CREATE_TOPICS: self.create_topics, DELETE_TOPICS: self.delete_topics,
                        CREATE_PARTITIONS: self.create_partitions,
                        DESCRIBE_CONFIGS: self.describe_configs,
                        DELETE_RECORDS: self.delete_records,
                        DESCRIBE_CLUSTER: self.describe_cluster,
                        ALTER_CONFIGS: self.alter_configs,
                        INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs}
        self._by_key.update(GroupHandlers(broker, self.node_id, self._view).table)
        self._txn = TxnHandlers(broker)
        self._by_key.update(self._txn.table)
        self._by_key.update(AclHandlers().table)
        self._by_key.update(ElectLeadersHandlers(broker, self._view).table)
        self._by_key.update(LogDirsHandlers(broker).table)
        self._by_key.update(DescribeTopicPartitionsHandlers(broker, self._placement,
                                                            self._live_nodes).table)
        self._by_key.update(PartitionReassignmentsHandlers().table)
        self._by_key.update(ScramCredentialsHandlers().table)
        self._by_key.update(ConfigResourcesHandlers(broker, self._broker_ids).table)

    @property
    def _view(self):
        """The cluster this broker belongs to (cluster.ClusterView), or None on its own."""
        replicas = self.broker.replicas
        return None if replicas is None else replicas.view

    @property
    def node_id(self):
        view = self._view
        return NODE_ID if view is None else view.node_id

    def _brokers(self, context):
        """[(node id, host, port)] to advertise: the cluster's live brokers, or this one at
        the address the client connected to."""
        view = self._view
        return [(NODE_ID, context.host, context.port)] if view is None else view.brokers()

    def _broker_ids(self):
        """The ids of every broker of the cluster, down ones too, or this one's."""
        view = self._view
        return [NODE_ID] if view is None else view.broker_ids()

    def _live_nodes(self, context):
        return {node for node, _, _ in self._brokers(context)}

    def _placement(self, tp, live):
        """Where tp is, for an answer whose brokers are `live` (their ids): a Placement."""
        view = self._view
        state = None if view is None else view.partition_state(tp)
        if state is None:   # a database on its own, or an internal topic (not replicated)
            node = self.node_id
            return Placement(node, UNREPLICATED_LEADER_EPOCH, (node,), (node,), ())
        # A leader the answer does not list is no leader to the client, which could not
        # reach it (a broker going down between the two reads): Kafka answers no leader
        # (KRaftMetadataCache getPartitionMetadata, getAliveEndpoint), so a client never
        # holds a leader it has no address for.
        return Placement(state.leader if state.leader in live else -1, state.leader_epoch,
                         tuple(state.replicas), tuple(state.isr),
                         tuple(r for r in state.replicas if r not in live))

    def _partition_metadata(self, types, tp, live):
        """tp's entry of a Metadata answer: LEADER_NOT_AVAILABLE without a live leader."""
        place = self._placement(tp, live)
        return build(types.MetadataResponsePartition,
                     error_code=ErrorCode.leader_not_available if place.leader < 0
                     else ErrorCode.none,
                     partition_index=i32(tp.partition), leader_id=i32(place.leader),
                     leader_epoch=i32(place.leader_epoch),
                     replica_nodes=tuple(i32(r) for r in place.replicas),
                     isr_nodes=tuple(i32(r) for r in place.isr),
                     offline_replicas=tuple(i32(r) for r in place.offline))

    def _ensure_topic(self, name, allow_create):
        """The topic's info, auto-created (through the controller in a cluster) when the
        request and the database's auto.create.topics.enable both allow it (Kafka's
        KafkaApis.handleTopicMetadataRequest: allowAutoCreation)."""
        if not allow_create:
            return self._topic(name)
        validate_topic_name(name, allow_internal=True)
        view = self._view
        if name in _COORDINATOR_KEY_TYPES and name not in self.broker.topics() and \
                self.broker.config.auto_create_topics_enable and not self.broker.readonly:
            # A coordinator's topic is made as its coordinator makes it on first use (its
            # partition count from offsets.topic.num.partitions or
            # transaction.state.log.num.partitions, its compacted configs), as Kafka's
            # AutoTopicCreationManager.creatableTopic makes it, where a client's name is
            # refused.
            key_type = _COORDINATOR_KEY_TYPES[name]
            if view is not None:
                view.coordinator_partition("", key_type)
            elif key_type == GROUP_COORDINATOR:
                find_coordinator(self.broker).offsets_partition("")
            else:
                find_transaction_coordinator(self.broker).state_partition("")
        if view is not None and name not in self.broker.topics() and \
                self.broker.config.auto_create_topics_enable:
            validate_topic_name(name)
            with contextlib.suppress(errors.TopicAlreadyExistsError):
                view.create_topic(name, self.broker.config.num_partitions, None, {})
        return self.broker.ensure_topic(name)

    def _topic(self, name):
        """A topic's info, named by a client. A name Kafka's Topic.validate refuses is
        INVALID_TOPIC_EXCEPTION, not an unknown topic, with or without auto-creation, as
        Kafka's KafkaApis.getTopicMetadata, ConfigHelper.describeConfigs and
        ControllerConfigurationValidator answer."""
        validate_topic_name(name, allow_internal=True)
        return self.broker.topic(name)

    def _check_leader(self, tp, current_leader_epoch=-1):
        """In a cluster, only tp's leader serves its produce, fetch and offsets, and a
        client's current leader epoch (Fetch 9+, ListOffsets 4+; -1: none) must be the
        leader's: FENCED_LEADER_EPOCH when older, UNKNOWN_LEADER_EPOCH when newer (Kafka's
        Partition.localLogWithEpochOrThrow, KIP-320). Every broker
        has every partition's log, but only its replicas' logs are written: a broker with
        no replica of a replicated topic's partition answers NOT_LEADER_OR_FOLLOWER, as
        Kafka's ReplicaManager.getPartitionOrError does, rather than read its empty copy.
        The internal topics are each broker's own (not replicated). A database on its own
        leads every partition in epoch 0 (its Metadata says so): a newer epoch is unknown
        there."""
        replicas = self.broker.replicas
        if replicas is None:
            if int(current_leader_epoch) > UNREPLICATED_LEADER_EPOCH:
                raise errors.UnknownLeaderEpochError(
                    f"leader epoch {current_leader_epoch} of {tp} is newer than this "
                    f"database's {UNREPLICATED_LEADER_EPOCH}")
            return
        if not replicas.manages(tp):
            info = self.broker.topics().get(tp.topic)
            if info is None or info.internal or not 0 <= tp.partition < info.partitions:
                return   # the broker's own: internal, or unknown (answered as such)
        replicas.check_readable(tp, int(current_leader_epoch))

    def _check_offsets_available(self, tp, version):
        """In a cluster, a ListOffsets answer bounded by the high watermark of a leader
        that has not reached its epoch's start yet is OFFSET_NOT_AVAILABLE (v5+; older
        versions, LEADER_NOT_AVAILABLE), as Kafka's ReplicaManager.fetchOffset answers."""
        replicas = self.broker.replicas
        if replicas is None or not replicas.manages(tp):
            return
        try:
            replicas.check_offsets_available(tp)
        except errors.OffsetNotAvailableError as exc:
            if version >= 5:
                raise
            raise errors.LeaderNotAvailableError(str(exc)) from None

    def handle(self, header, body, connection):
        """The response entity to one decoded request on a Connection."""
        key, version = header.request_api_key, header.request_api_version
        if key == API_VERSIONS:
            return self.api_versions(version, body)
        context = RequestContext(connection.host, connection.port, header.client_id or "",
                                 connection)
        return self._by_key[key](version, body, context)

    # --- ApiVersions --------------------------------------------------------------

    def api_versions(self, version, body):
        """Kafka's KafkaApis.handleApiVersionsRequest: a version it does not know is
        answered at v0 with UNSUPPORTED_VERSION and ApiVersions' own range alone (KIP-511:
        the client asks again at one it can use); from v3, a client software name or
        version outside Kafka's pattern is INVALID_REQUEST with no keys
        (ApiVersionsRequest.isValid)."""
        lo, hi = SUPPORTED[API_VERSIONS]
        error, served = ErrorCode.none, sorted(SUPPORTED.items())
        if body is None or not lo <= version <= hi:
            version, error = 0, ErrorCode.unsupported_version
            served = [(API_VERSIONS, SUPPORTED[API_VERSIONS])]
        elif version >= 3 and not all(
                _SOFTWARE_NAME_VERSION.fullmatch(text)
                for text in (body.client_software_name, body.client_software_version)):
            error, served = ErrorCode.invalid_request, []
        cls, types = response_types(API_VERSIONS, version)
        return build(cls, error_code=error, throttle_time=NO_THROTTLE, api_keys=tuple(
            types.ApiVersion(api_key=i16(key), min_version=i16(low), max_version=i16(high))
            for key, (low, high) in served))

    # --- Metadata -----------------------------------------------------------------

    def metadata(self, version, body, context):
        cls, types = response_types(METADATA, version)
        known = self.broker.topics()
        if body.topics is None or (version == 0 and not body.topics):
            # (Metadata v0 asks for every topic with an empty list: Kafka's KafkaApis).
            # Internal topics are listed, marked is_internal, as Kafka lists them (clients
            # leave them out by their exclude.internal.topics).
            names = sorted(known)
            unknown_ids = []
        else:
            names, unknown_ids = _asked_topics(version, body.topics, known)
        allow_create = getattr(body, "allow_auto_topic_creation", True)
        brokers = self._brokers(context)   # one list for the brokers and the leaders named
        live = {node for node, _, _ in brokers}
        # Kafka's KafkaApis.handleTopicMetadataRequest: every topic asked by name, found or
        # not, answers its authorized operations when asked (v8+); one named by id only
        # does not (its answer is built apart, unknownTopicIdsTopicMetadata).
        topic_operations = authorized_operations(
            TOPIC_OPERATIONS, getattr(body, "include_topic_authorized_operations", False))
        topics = [build(types.MetadataResponseTopic, error_code=ErrorCode.unknown_topic_id,
                        name=None, topic_id=topic_id, is_internal=False, partitions=(),
                        topic_authorized_operations=i32(NOT_ASKED))
                  for topic_id in unknown_ids]
        for name in names:
            try:
                if name is None:   # neither a name nor an id
                    raise errors.InvalidRequestError("a topic is named by its name or its id")
                info = self._ensure_topic(name, allow_create)
            except errors.StreamlogError as exc:
                topics.append(build(types.MetadataResponseTopic, error_code=error_code(exc),
                                    name=name if name is not None or version >= 12 else "",
                                    topic_id=uuid.UUID(int=0),
                                    # Kafka answers Topic.isInternal(name), topic or none.
                                    is_internal=name in INTERNAL_TOPICS,
                                    partitions=(), topic_authorized_operations=(
                                        topic_operations if name is not None
                                        else i32(NOT_ASKED))))
                continue
            partitions = tuple(self._partition_metadata(types, TopicPartition(name, p), live)
                               for p in range(info.partitions))
            topics.append(build(types.MetadataResponseTopic, error_code=ErrorCode.none,
                                name=name, topic_id=uuid.UUID(hex=info.topic_id),
                                is_internal=info.internal, partitions=partitions,
                                topic_authorized_operations=topic_operations))
        view = self._view
        return build(cls, throttle_time=NO_THROTTLE, cluster_id=self.cluster_id,
                     controller_id=i32(NODE_ID if view is None else view.controller_id),
                     # Asked in v8-v10 only (v11 dropped it for DescribeCluster, KIP-700).
                     cluster_authorized_operations=authorized_operations(
                         CLUSTER_OPERATIONS,
                         getattr(body, "include_cluster_authorized_operations", False)),
                     brokers=tuple(build(types.MetadataResponseBroker, node_id=i32(node),
                                         host=host, port=i32(port), rack=None)
                                   for node, host, port in brokers),
                     topics=tuple(topics))

    # --- Produce ------------------------------------------------------------------

    def produce(self, version, body, context):
        cls, types = response_types(PRODUCE, version)
        if body.acks not in (0, 1, -1):
            return _each_partition_error(cls, types, body, ErrorCode.invalid_required_acks)
        records = {TopicPartition(topic.name, partition.index): partition.records
                   for topic in body.topic_data for partition in topic.partition_data}
        firsts = {tp: first_batch(data) for tp, data in records.items()}   # parsed once
        try:
            self._txn.check_transactional_id(body.transactional_id, firsts.values())
            refused = self._refused_up_front(version, records)
            # Only the partitions that passed go on to the coordinator (Kafka's
            # KafkaApis.handleProduceRequest validates before ReplicaManager verifies).
            verified = self._txn.verify_produce(version, body.transactional_id, {
                tp: first for tp, first in firsts.items() if tp not in refused})
        except errors.StreamlogError as exc:
            return _each_partition_error(cls, types, body, error_code(exc))
        waits = []
        answers = []
        for topic in body.topic_data:
            parts = []
            for partition in topic.partition_data:
                tp = TopicPartition(topic.name, partition.index)
                answer = self._produce_partition(body.acks, tp, partition.records, firsts[tp],
                                                 refused.get(tp), verified.get(tp), waits)
                answer["index"] = partition.index
                parts.append(answer)
            answers.append((topic.name, parts))
        if body.acks == 0:
            failed = [f"{name}-{a['index']}: {a['error']}" for name, parts in answers
                      for a in parts if a["error"] is not None]
            if failed:
                # No response comes to tell the producer: closing the connection makes it
                # refresh its metadata (Kafka's KafkaApis.handleProduceRequest does so).
                raise CloseConnection(f"a produce with acks=0 failed ({'; '.join(failed)})")
            return None
        deadline = time.monotonic() + body.timeout.total_seconds()   # one for the request
        for done, answer in waits:
            # The timeout bounds the wait for replicas (Kafka's DelayedProduce). A database
            # of its own has none: its acks=all waits for the fsync, part of the append
            # there, which Kafka's one-replica leader answers at once whatever the timeout,
            # not an append answered REQUEST_TIMED_OUT that a retry would write twice.
            if self.broker.replicas is None:
                done[0].wait()
            elif not done[0].wait(max(deadline - time.monotonic(), 0)):
                answer["error"] = errors.RequestTimedOutError(
                    "not replicated within the request's timeout")
            elif done[1] is not None:
                answer["error"] = done[1]
        hints = self._leader_hints(version, types, answers, context)
        return build(cls, throttle_time=NO_THROTTLE, responses=tuple(
            build(types.TopicProduceResponse, name=name, partition_responses=tuple(
                build(types.PartitionProduceResponse, index=a["index"],
                      error_code=error_code(a["error"]), base_offset=i64(a["base"]),
                      log_append_time=a["append_time"], log_start_offset=i64(a["start"]),
                      record_errors=_record_errors(types, a["error"]),
                      error_message=error_message(a["error"]),
                      **hints.get((name, a["index"]), {}))
                for a in parts)) for name, parts in answers),
            node_endpoints=tuple(hints.get("endpoints", ())))

    def _leader_hints(self, version, types, answers, context):
        """KIP-951 (Produce 10+): a partition answered NOT_LEADER_OR_FOLLOWER carries its
        current leader and epoch, and the answer the leader's endpoint, so the producer
        moves to it without a Metadata round trip (Kafka's KafkaApis.handleProduceRequest).
        {(topic, index): fields, "endpoints": [NodeEndpoint]}."""
        hints = {}
        if version < 10:
            return hints
        brokers = {node: (host, port) for node, host, port in self._brokers(context)}
        endpoints = {}
        for name, parts in answers:
            for a in parts:
                if not isinstance(a["error"], errors.NotLeaderOrFollowerError):
                    continue
                place = self._placement(TopicPartition(name, int(a["index"])), set(brokers))
                hints[(name, a["index"])] = {"current_leader": build(
                    types.LeaderIdAndEpoch, leader_id=i32(place.leader),
                    leader_epoch=i32(place.leader_epoch))}
                if place.leader >= 0:
                    host, port = brokers[place.leader]
                    endpoints[place.leader] = build(
                        types.NodeEndpoint, node_id=i32(place.leader), host=host,
                        port=i32(port), rack=None)
        hints["endpoints"] = [endpoints[node] for node in sorted(endpoints)]
        return hints

    def _refused_up_front(self, version, records):
        """{tp: error} for the partitions of a Produce refused before anything else is done
        for them: an injected fault, or records that break ProduceRequest.validateRecords
        (Kafka's KafkaApis.handleProduceRequest checks those before it hands the rest to
        ReplicaManager, whose transaction verification asks the coordinator). A partition
        the broker does not have is left to the append's UNKNOWN_TOPIC_OR_PARTITION."""
        refused = {}
        for tp, data in records.items():
            try:
                injected = self.faults.partition_error(PRODUCE, tp)
                if injected is not None:
                    raise injected
                if self.broker.has_partition(tp):
                    _check_one_batch(version, data)
            except errors.StreamlogError as exc:
                refused[tp] = exc
        return refused

    def _produce_partition(self, acks, tp, records, first, refusal, verification, waits):
        """One partition's Produce answer (error, base, append_time, start), its wait for
        acks=all added to waits. first: first_batch(records); refusal: _refused_up_front's
        error for it, or None;
        verification: what verifying its transaction gave (None for a partition without
        transactional batches: a client's transactional batch is only ever taken
        verified)."""
        answer = {"error": None, "base": -1, "append_time": None, "start": -1}
        appending = False   # refused before the append: no log start answered
        try:
            if refusal is not None:
                raise refusal
            if isinstance(verification, errors.StreamlogError):
                raise verification
            self._check_not_internal(tp.topic, "append to")
            appending = True
            if self.broker.has_partition(tp):   # else UNKNOWN_TOPIC_OR_PARTITION
                _check_base_offset(first)
            info = self.broker.produce(tp, records or b"", acks=acks, verification=verification)
            answer["base"] = info.first_offset
            if info.log_append_time >= 0:
                answer["append_time"] = datetime.datetime.fromtimestamp(
                    info.log_append_time / 1000, datetime.timezone.utc)
            answer["start"] = self.broker.partition_log(tp).log_start_offset
            if acks == -1:
                waits.append((self._durable(tp, info.last_offset + 1), answer))
        except errors.StreamlogError as exc:
            answer["error"] = exc
            if appending:
                answer["start"] = self._log_start_after_failed_append(tp, exc)
        return answer

    def _log_start_after_failed_append(self, tp, exc):
        """The log_start_offset a Produce answers for an append the log refused: Kafka's
        ReplicaManager.appendToLocalLog gives the partition's (processFailedRecord), but for
        the failures it expects of a partition that is not there to take the batch, or of a
        batch too large or damaged, which it answers with UNKNOWN_LOG_APPEND_INFO's -1."""
        if isinstance(exc, _APPEND_ERRORS_WITHOUT_LOG_START) or \
                not self.broker.has_partition(tp):
            return -1
        return self.broker.partition_log(tp).log_start_offset

    def _check_not_internal(self, topic, action):
        """Clients do not write the coordinators' topics (Kafka's ReplicaManager refuses:
        INVALID_TOPIC_EXCEPTION)."""
        info = self.broker.topics().get(topic)
        if info is not None and info.internal:
            raise errors.InvalidTopicError(f"cannot {action} internal topic {topic}")

    def _durable(self, tp, offset):
        """(event, [error]) set once tp is safe below offset (acks=all): replicated to the
        ISR in a cluster (its high watermark), fsynced on a database on its own."""
        event, result = threading.Event(), [None, None]

        def callback(error):
            result[1] = error
            event.set()
        result[0] = event
        replicas = self.broker.replicas
        if replicas is not None and replicas.manages(tp):
            replicas.when_replicated(tp, offset, callback)
        else:
            self.broker.when_durable(tp, offset, callback)
        return result

    # --- Fetch --------------------------------------------------------------------

    def fetch(self, version, body, context):
        cls, types = response_types(FETCH, version)
        if version >= 7 and int(body.session_epoch) not in (0, -1):
            # An incremental fetch (KIP-227) names a session, and this broker never hands
            # one out (session_id 0 in every answer): Kafka's FetchManager.newContext answers
            # an unknown one FETCH_SESSION_ID_NOT_FOUND, with no partitions, and the client
            # starts over with a full fetch.
            return build(cls, throttle_time=NO_THROTTLE,
                         error_code=ErrorCode.fetch_session_id_not_found, session_id=i32(0),
                         responses=())
        positions, order, epochs, partition_max = {}, [], {}, {}
        for topic in body.topics:
            for partition in topic.partitions:
                tp = TopicPartition(topic.topic, partition.partition)
                positions[tp] = partition.fetch_offset
                epochs[tp] = getattr(partition, "current_leader_epoch", -1)
                # Each partition's own limit, as Kafka's ReplicaManager.readFromLocalLog
                # reads it: a consumer asking little of one partition gets little of it. One
                # below 0 is not made 0: the read refuses it (PartitionLog.read), as Kafka's.
                partition_max[tp] = int(partition.partition_max_bytes)
                order.append(tp)
        results = {tp: injected for tp in positions
                   if (injected := self.faults.partition_error(FETCH, tp)) is not None}
        for tp in positions:
            if tp not in results:
                exc = failure(self._check_leader, tp, epochs[tp])
                if exc is not None:
                    results[tp] = exc
        known = [tp for tp in positions
                 if tp not in results and self.broker.has_partition(tp)]
        # A partition whose read failed (not its leader here, an injected error) ends the
        # long poll, as Kafka's ReplicaManager answers at once on any read error; one that
        # does not exist does not (Kafka's KafkaApis answers it beside the others' wait).
        max_wait_ms = 0 if results else int(body.max_wait.total_seconds() * 1000)
        # Kafka's KafkaApis.handleFetchRequest: the request's max_bytes capped at the broker's
        # fetch.max.bytes, min_bytes at that.
        max_bytes = min(body.max_bytes, self.broker.config.fetch_max_bytes)
        if known:
            try:
                results.update(self.broker.fetch(
                    {tp: positions[tp] for tp in known},
                    max_wait_ms=max_wait_ms,
                    # One below 0 is answered at once.
                    min_bytes=min(body.min_bytes, max_bytes), max_bytes=max_bytes,
                    partition_max_bytes={tp: partition_max[tp] for tp in known},
                    wakeup_key=context.connection,   # woken when the connection closes,
                    interrupted=context.connection.closed.is_set,   # or closed before
                    read_committed=getattr(body, "isolation_level", 0) == 1))
            except errors.StreamlogError as exc:
                results.update({tp: exc for tp in known})
        if version < 10:
            # Kafka's KafkaApis.maybeConvertFetchedData: a client of Fetch 9 or older may not
            # read zstd (KIP-110), so a partition of a topic whose compression.type is zstd
            # answers it UNSUPPORTED_COMPRESSION_TYPE, whatever the batches read hold.
            for tp in known:
                if self.broker.partition_log(tp).config.compression_codec == ZSTD:
                    results[tp] = errors.UnsupportedCompressionTypeError(
                        f"{tp} is of a topic with compression.type zstd, which a Fetch "
                        f"request of version {version} cannot read; version 10 or later can")
        by_topic = {}
        for tp in order:
            result = results.get(tp)
            if result is None or isinstance(result, Exception):
                exc = result if result is not None else \
                    errors.UnknownTopicOrPartitionError(f"{tp} does not exist")
                # Empty records, not null, as Kafka answers: librdkafka drops a whole
                # response over one null records field.
                part = build(types.PartitionData, partition_index=i32(tp.partition),
                             error_code=error_code(exc), high_watermark=i64(-1),
                             last_stable_offset=i64(-1), log_start_offset=i64(-1),
                             aborted_transactions=None, preferred_read_replica=i32(-1),
                             records=RecordsChunks([]))
            else:
                aborted = None if result.aborted_transactions is None else tuple(
                    build(types.AbortedTransaction, producer_id=i64(t.producer_id),
                          first_offset=i64(t.first_offset))
                    for t in result.aborted_transactions)
                part = build(types.PartitionData, partition_index=i32(tp.partition),
                             error_code=error_code(result.error),
                             high_watermark=i64(result.high_watermark),
                             last_stable_offset=i64(result.last_stable_offset),
                             log_start_offset=i64(result.log_start_offset),
                             aborted_transactions=aborted, preferred_read_replica=i32(-1),
                             records=RecordsChunks([b.view() for b in result.batches]))
            by_topic.setdefault(tp.topic, []).append(part)
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     session_id=i32(0), responses=tuple(
                         build(types.FetchableTopicResponse, topic=name, partitions=tuple(parts))
                         for name, parts in by_topic.items()))

    # --- ListOffsets ---------------------------------------------------------------

    def list_offsets(self, version, body, context):
        cls, types = response_types(LIST_OFFSETS, version)
        read_committed = getattr(body, "isolation_level", 0) == 1
        # Kafka's ReplicaManager.fetchOffset answers a partition named more than once
        # INVALID_REQUEST each time (ListOffsetsRequest.duplicatePartitions), and a special
        # timestamp its version does not know UNSUPPORTED_VERSION, before looking either up.
        twice = set(_named_twice((t.name, p.partition_index)
                                 for t in body.topics for p in t.partitions))
        topics = []
        for topic in body.topics:
            parts = []
            for partition in topic.partitions:
                tp = TopicPartition(topic.name, partition.partition_index)
                offset, timestamp, epoch, exc = -1, -1, -1, None
                try:
                    if (tp.topic, tp.partition) in twice:
                        raise errors.InvalidRequestError(
                            "the partition is named more than once in the request")
                    if partition.timestamp < 0 and \
                            version < _TIMESTAMP_FIRST_VERSION.get(partition.timestamp, 1 << 15):
                        raise UnsupportedRequestVersionError(
                            f"timestamp {partition.timestamp} is not served at ListOffsets "
                            f"version {version}")
                    self._check_leader(tp, getattr(partition, "current_leader_epoch", -1))
                    found = self.broker.list_offsets({tp: partition.timestamp},
                                                     read_committed)[tp]
                    if partition.timestamp != EARLIEST_TIMESTAMP and (
                            partition.timestamp == LATEST_TIMESTAMP or found is None):
                        # What the high watermark bounds (None: at or past it).
                        self._check_offsets_available(tp, version)
                    if found is not None:
                        offset, timestamp = found
                        if partition.timestamp == EARLIEST_TIMESTAMP:
                            timestamp = -1
                        epoch = self._leader_epoch(tp) \
                            if partition.timestamp == LATEST_TIMESTAMP \
                            else self._epoch_of_offset(tp, offset)
                except (errors.StreamlogError, ValueError) as exc_:
                    exc = exc_ if isinstance(exc_, errors.StreamlogError) else \
                        errors.InvalidRequestError(str(exc_))
                parts.append(build(types.ListOffsetsPartitionResponse,
                                   partition_index=partition.partition_index,
                                   error_code=error_code(exc), timestamp=i64(timestamp),
                                   offset=i64(offset), leader_epoch=i32(epoch)))
            topics.append(build(types.ListOffsetsTopicResponse, name=topic.name,
                                partitions=tuple(parts)))
        return build(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

    # --- OffsetForLeaderEpoch ---------------------------------------------------------

    def offset_for_leader_epoch(self, version, body, context):
        """Where a leader epoch ends in the leader's log (Kafka's lastOffsetForLeaderEpoch):
        a consumer asks after a leader change whether the records before its position are
        still there (KIP-320); a follower, where its log parts from the leader's (KIP-101)."""
        cls, types = response_types(OFFSET_FOR_LEADER_EPOCH, version)
        topics = []
        for topic in body.topics:
            parts = []
            for partition in topic.partitions:
                tp = TopicPartition(topic.topic, partition.partition)
                epoch, end, exc = -1, -1, None
                try:
                    epoch, end = self._epoch_end(tp, partition.leader_epoch,
                                                 getattr(partition, "current_leader_epoch", -1))
                except errors.StreamlogError as exc_:
                    exc = exc_
                parts.append(build(types.EpochEndOffset, error_code=error_code(exc),
                                   partition=partition.partition, leader_epoch=i32(epoch),
                                   end_offset=i64(end)))
            topics.append(build(types.OffsetForLeaderTopicResult, topic=topic.topic,
                                partitions=tuple(parts)))
        return build(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

    def _epoch_end(self, tp, epoch, current_epoch):
        """(epoch, end offset) of tp for an OffsetForLeaderEpoch request."""
        replicas = self.broker.replicas
        if replicas is not None and replicas.manages(tp):
            return replicas.offsets_for_leader_epoch(tp, epoch, current_epoch)
        # A cluster's partition this broker holds no replica of is NOT_LEADER_OR_FOLLOWER
        # (Kafka's ReplicaManager.lastOffsetForLeaderEpoch: HostedPartition.None of a
        # partition the metadata knows), not an answer from its copy, which nothing
        # replicates to: epoch 0 ending at its empty copy's end told a consumer validating
        # its position (KIP-320) that the records before it had been truncated.
        self._check_leader(tp, current_epoch)
        end = self.broker.partition_log(tp).log_end_offset
        # A database on its own leads its partitions in epoch 0 for ever: epoch 0 ends at
        # the log end; any other epoch is unknown here.
        return (epoch, end) if epoch == UNREPLICATED_LEADER_EPOCH else (-1, -1)

    def _epoch_of_offset(self, tp, offset):
        """The leader epoch ListOffsets answers with a found offset (the earliest, one found
        by timestamp, the max timestamp's): the epoch of the batch holding it (Kafka's
        UnifiedLog.fetchOffsetByTimestamp and FileRecords.searchForTimestamp), not the
        current one -- a consumer that seeks there validates its position against that
        epoch after a leader change (KIP-320). The latest offset gets the current epoch
        (Partition.fetchOffsetForTimestamp); nothing found, or an error, -1. A log kept
        without epochs (a database on its own, an internal topic) is epoch 0's for ever,
        as its Metadata says."""
        epoch = self.broker.partition_log(tp).epoch_for_offset(offset)
        return UNREPLICATED_LEADER_EPOCH if epoch is None else epoch

    def _leader_epoch(self, tp):
        view = self._view
        state = None if view is None else view.partition_state(tp)
        return UNREPLICATED_LEADER_EPOCH if state is None else state.leader_epoch

    # --- CreateTopics, DeleteTopics ---------------------------------------------------

    def create_topics(self, version, body, context):
        cls, types = response_types(CREATE_TOPICS, version)

        def refused(name, code, message):
            return build(types.CreatableTopicResult, name=name, topic_id=uuid.UUID(int=0),
                         error_code=code, error_message=message,
                         topic_config_error_code=ErrorCode.none, num_partitions=i32(-1),
                         replication_factor=i16(-1), configs=())
        twice = _named_twice(t.name for t in body.topics)
        results = [refused(name, ErrorCode.invalid_request, _TWICE) for name in twice]
        made = set()   # two names of one request that collide are both made (check_name_free)
        for topic in body.topics:
            if topic.name in twice:
                continue
            info, rf, exc = None, None, None
            view = self._view
            try:
                assignment = None
                if topic.assignments:
                    assignment = self._manual_assignment(topic, context)
                    partitions, replication_factor = len(assignment), len(assignment[0])
                elif view is None and topic.replication_factor not in (-1, 1):
                    results.append(refused(
                        topic.name, ErrorCode.invalid_replication_factor,
                        f"replication factor {topic.replication_factor}: this database is "
                        "one broker, one replica"))
                    continue
                else:
                    partitions = None if topic.num_partitions == -1 \
                        else int(topic.num_partitions)
                    replication_factor = int(topic.replication_factor)
                config = {c.name: c.value for c in topic.configs}
                if None in config.values():
                    raise errors.InvalidConfigurationError(
                        "null value not supported for topic configs (Kafka's rule)")
                if body.validate_only:
                    info = self._validate_new_topic(topic.name, partitions, config)
                    if view is not None and assignment is None:
                        assignment = view.placement(info.partitions, replication_factor)
                    rf = 1 if assignment is None else len(assignment[0])
                elif view is not None:
                    validate_topic_name(topic.name)
                    view.create_topic(topic.name, partitions or self.broker.config.num_partitions,
                                      replication_factor, config, assignment, made)
                    info = self.broker.topic(topic.name)
                    made.add(topic.name)
                else:
                    info = self.broker.create_topic(topic.name, partitions, config,
                                                    made_with=made)
                    made.add(topic.name)
            except errors.StreamlogError as exc_:
                info, rf, exc = None, None, exc_
            results.append(build(
                types.CreatableTopicResult, name=topic.name,
                topic_id=uuid.UUID(hex=info.topic_id) if info is not None else uuid.UUID(int=0),
                error_code=error_code(exc), error_message=error_message(exc),
                topic_config_error_code=ErrorCode.none,
                num_partitions=i32(info.partitions if info is not None else -1),
                replication_factor=i16(self._replication_factor(info) if rf is None else rf),
                configs=self._created_configs(types, info)))
        return build(cls, throttle_time=NO_THROTTLE, topics=tuple(results))

    def _created_configs(self, types, info):
        """A created topic's every config (v5+, KIP-525), by name, as DescribeConfigs
        gives them: Kafka's ReplicationControlManager.createTopic answers the effective
        configs (computeEffectiveTopicConfigs) with their sources; none for a topic not
        created."""
        if info is None or not hasattr(types, "CreatableTopicConfigs"):
            return ()
        return tuple(build(types.CreatableTopicConfigs, name=entry.name, value=entry.value,
                           read_only=False, config_source=i8(entry.source),
                           is_sensitive=False)
                     for entry in topic_configs(info, self.broker.config))

    def _manual_assignment(self, topic, context):
        """A CreateTopics topic's replica assignment, {partition: (broker ids)}, checked as
        Kafka's ReplicationControlManager.createTopic checks it: the partition count and
        replication factor it sets must be left -1 (INVALID_REQUEST)."""
        if topic.replication_factor != -1:
            raise errors.InvalidRequestError("A manual partition assignment was specified, "
                                             "but replication factor was not set to -1.")
        if topic.num_partitions != -1:
            raise errors.InvalidRequestError("A manual partition assignment was specified, "
                                             "but numPartitions was not set to -1.")
        return manual_assignment(((a.partition_index, a.broker_ids) for a in topic.assignments),
                                 self._broker_ids(), self._live_nodes(context))

    def _replication_factor(self, info):
        if info is None:
            return -1
        view = self._view
        state = None if view is None else view.partition_state(TopicPartition(info.name, 0))
        return 1 if state is None else len(state.replicas)

    def _validate_new_topic(self, name, partitions, config):
        """CreateTopics with validate_only: the checks create_topic makes, nothing written.
        Returns the TopicInfo it would make, a fresh id included: Kafka's
        ReplicationControlManager.createTopic answers a validated topic as a created one
        (id, partition count, replication factor, effective configs), only its records
        are not written."""
        validate_topic_name(name)
        count = self.broker.config.num_partitions if partitions is None else partitions
        validate_partitions(count)
        overrides = normalized_overrides(config)
        log_config = self.broker.config.topic_defaults.with_overrides(overrides)
        check_name_free(name, self.broker.topics())
        return TopicInfo(name, uuid.uuid4().hex, count, overrides, log_config, 0)

    def delete_topics(self, version, body, context):
        cls, types = response_types(DELETE_TOPICS, version)
        twice = _named_twice(body.topic_names)
        results = [build(types.DeletableTopicResult, name=name,
                         error_code=ErrorCode.invalid_request, error_message=_TWICE)
                   for name in twice]
        for name in body.topic_names:
            if name in twice:
                continue
            info = self.broker.topics().get(name)
            if self._view is not None and info is not None and not info.internal:
                # every broker's replicas, through the controller
                exc = failure(self._view.delete_topic, name)
            else:
                exc = failure(delete_topic, self.broker, name)
            results.append(build(types.DeletableTopicResult, name=name, error_code=error_code(exc),
                                 error_message=error_message(exc)))
        return build(cls, throttle_time=NO_THROTTLE, responses=tuple(results))

    # --- CreatePartitions, DescribeConfigs, DeleteRecords, DescribeCluster -------------

    def create_partitions(self, version, body, context):
        cls, types = response_types(CREATE_PARTITIONS, version)
        twice = _named_twice(t.name for t in body.topics)
        results = [build(types.CreatePartitionsTopicResult, name=name,
                         error_code=ErrorCode.invalid_request, error_message=_TWICE)
                   for name in twice]
        for topic in body.topics:
            if topic.name in twice:
                continue
            exc = None
            try:
                self._check_not_internal(topic.name, "add partitions to")
                info = self.broker.topic(topic.name)
                current = info.partitions
                if topic.count <= current:
                    raise errors.InvalidPartitionsError(
                        f"topic {topic.name!r} has {current} partitions; a count only grows")
                assignment = None
                if topic.assignments is not None:   # null: placed as the others are
                    assignment = self._added_assignment(topic, info, context)
                if not body.validate_only:
                    view = self._view
                    if view is None:
                        self.broker.create_partitions(topic.name, int(topic.count))
                    else:
                        view.create_partitions(topic.name, int(topic.count), assignment)
            except errors.StreamlogError as exc_:
                exc = exc_
            results.append(build(types.CreatePartitionsTopicResult, name=topic.name,
                                 error_code=error_code(exc),
                                 error_message=error_message(exc)))
        return build(cls, throttle_time=NO_THROTTLE, results=tuple(results))

    def _added_assignment(self, topic, info, context):
        """A CreatePartitions topic's replica assignment of the partitions it adds, one
        list each, of the topic's replication factor, as Kafka's
        ReplicationControlManager.createPartitions checks it."""
        added = int(topic.count) - info.partitions
        if len(topic.assignments) != added:
            raise errors.InvalidReplicaAssignmentError(
                f"Attempted to add {added} additional partition(s), but only "
                f"{len(topic.assignments)} assignment(s) were specified.")
        return manual_assignment(
            enumerate((a.broker_ids for a in topic.assignments), info.partitions),
            self._broker_ids(), self._live_nodes(context),
            replication_factor=self._replication_factor(info), first_partition=info.partitions)

    def describe_configs(self, version, body, context):
        cls, types = response_types(DESCRIBE_CONFIGS, version)
        results = []
        for resource in body.resources:
            configs, exc = (), None
            try:
                described, read_only = self._described_configs(resource)
                # No keys (null or empty) asks for every config: Kafka's
                # ConfigHelper.createResponseConfig.
                wanted = resource.configuration_keys or None
                configs = tuple(
                    _described_entry(types, entry, read_only, body)
                    for entry in described if wanted is None or entry.name in wanted)
            except errors.StreamlogError as exc_:
                exc = exc_
            results.append(build(types.DescribeConfigsResult, error_code=error_code(exc),
                                 error_message=error_message(exc),
                                 resource_type=resource.resource_type,
                                 resource_name=resource.resource_name, configs=configs))
        return build(cls, throttle_time=NO_THROTTLE, results=tuple(results))

    def _described_configs(self, resource):
        """([configs.ConfigEntry], read_only) of a DescribeConfigs resource, as Kafka's
        ConfigHelper.describeConfigs answers it. A broker's configs are read-only here: the
        database takes its settings when it opens (AlterConfigs serves topics only), where
        Kafka can change some of them dynamically."""
        if resource.resource_type == TOPIC_RESOURCE:
            return topic_configs(self._topic(resource.resource_name),
                                 self.broker.config), False
        if resource.resource_type != BROKER_RESOURCE:
            raise errors.InvalidRequestError("only topic and broker configs are served")
        name = resource.resource_name
        if not name:
            return [], True   # the cluster-wide dynamic defaults: none are set here
        if not re.fullmatch(r"[+-]?[0-9]+", name):   # Java's Integer.parseInt
            raise errors.InvalidRequestError(f"Broker id must be an integer, but it is: {name}")
        if int(name) != self.node_id:
            raise errors.InvalidRequestError(f"Unexpected broker id, expected {self.node_id} "
                                             f"or empty string, but received {name}")
        return broker_configs(self.broker.config), True

    def delete_records(self, version, body, context):
        cls, types = response_types(DELETE_RECORDS, version)
        # Kafka's KafkaApis.handleDeleteRecordsRequest keys the request by partition: one
        # named twice is moved to the last offset given, and answered once, under one
        # entry per topic.
        wanted = {}
        for topic in body.topics:
            for partition in topic.partitions:
                wanted[TopicPartition(topic.name, partition.partition_index)] = partition.offset
        answers = {}   # tp -> [low watermark, error]
        waits = []     # (tp, offset every live replica must have deleted below)
        replicas = self.broker.replicas
        for tp, offset in wanted.items():
            answer = answers[tp] = [-1, None]
            try:
                self._check_not_internal(tp.topic, "delete records of")
                self._check_leader(tp)
                answer[0] = self.broker.delete_records({tp: int(offset)})[tp]
                if replicas is not None:
                    # Answered once the followers' log starts are there too (Kafka's
                    # DelayedDeleteRecords), with the smallest of them. -1 asked for the
                    # high watermark, which the new log start then is.
                    target = answer[0] if offset == -1 else int(offset)
                    answer[0] = replicas.low_watermark(tp)
                    if answer[0] < target:
                        waits.append((tp, target))
            except errors.StreamlogError as exc:
                answer[1] = exc
        deadline = time.monotonic() + body.timeout.total_seconds()
        for tp, target in waits:
            try:
                answers[tp][0] = replicas.wait_low_watermark(
                    tp, target, max(deadline - time.monotonic(), 0))
            except errors.RequestTimedOutError as exc:
                answers[tp][1] = exc   # with the low watermark of the deletion
            except errors.StreamlogError as exc:
                answers[tp] = [-1, exc]
        by_topic = {}
        for tp, (low, exc) in answers.items():
            by_topic.setdefault(tp.topic, []).append(build(
                types.DeleteRecordsPartitionResult, partition_index=i32(tp.partition),
                low_watermark=i64(low), error_code=error_code(exc)))
        return build(cls, throttle_time=NO_THROTTLE, topics=tuple(
            build(types.DeleteRecordsTopicResult, name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()))

    def alter_configs(self, version, body, context):
        """AlterConfigs: the given configs become the topic's whole set of overrides (the
        others go back to their defaults), as Kafka's non-incremental API does."""
        def change(info, configs):
            given = {c.name: c.value for c in configs}
            return given, [name for name in info.overrides if name not in given]
        return self._alter(ALTER_CONFIGS, version, body, change)

    def incremental_alter_configs(self, version, body, context):
        def change(info, configs):
            overrides, remove = {}, []
            for c in configs:
                if c.config_operation == SET:
                    overrides[c.name] = c.value
                elif c.config_operation == DELETE:
                    # A config that is not set (an unknown name, too) is left as it is, no
                    # error: Kafka's ConfigurationControlManager writes no record for it and
                    # validates none.
                    if c.name in info.overrides:
                        remove.append(c.name)
                elif c.config_operation in (APPEND, SUBTRACT):
                    if c.name not in LIST_CONFIGS:
                        raise errors.InvalidConfigurationError(
                            f"{c.name} is not a list config: APPEND and SUBTRACT apply to "
                            f"{', '.join(sorted(LIST_CONFIGS))} only")
                    # Kafka's ConfigurationControlManager.getParts: the value's non-empty items.
                    items = [i for i in info.config.to_dict()[c.name].split(",") if i]
                    for item in c.value.split(","):
                        if c.config_operation == APPEND and item and item not in items:
                            items.append(item)
                        elif c.config_operation == SUBTRACT and item in items:
                            items.remove(item)
                    overrides[c.name] = ",".join(items)
                else:
                    raise errors.InvalidRequestError(
                        f"unknown config operation {c.config_operation}")
            return overrides, remove
        return self._alter(INCREMENTAL_ALTER_CONFIGS, version, body, change)

    def _alter(self, api, version, body, change):
        cls, types = response_types(api, version)
        twice = _named_twice((r.resource_type, r.resource_name) for r in body.resources)
        responses = []
        for resource in body.resources:
            exc = None
            try:
                _preprocess_alter(resource, twice)
                if resource.resource_type != TOPIC_RESOURCE:
                    raise errors.InvalidRequestError("only topic configs are served")
                if not resource.resource_name:   # ControllerConfigurationValidator's rule
                    raise errors.InvalidRequestError("Default topic resources are not allowed.")
                self._check_not_internal(resource.resource_name, "alter the configs of")
                validate_topic_name(resource.resource_name, allow_internal=True)
                info = self.broker.topics().get(resource.resource_name)
                # The configs are checked before the topic is looked up, a missing one as a
                # topic with no overrides: Kafka's ConfigurationControlManager.validateAlterConfig
                # runs its validator (INVALID_CONFIG) before its existence checker
                # (UNKNOWN_TOPIC_OR_PARTITION).
                current = info or TopicInfo(resource.resource_name, None, 0, {},
                                            self.broker.config.topic_defaults, 0)
                overrides, remove = change(current, resource.configs)
                if body.validate_only or info is None:
                    self.broker.config.topic_defaults.with_overrides(
                        overrides_after(current.overrides, overrides, remove))
                    self.broker.topic(resource.resource_name)   # unknown: refused now
                else:
                    # In a cluster the controller records it for every broker.
                    owner = self.broker if self._view is None else self._view
                    owner.alter_topic_config(resource.resource_name, overrides, remove)
            except errors.StreamlogError as exc_:
                exc = exc_
            responses.append(build(types.AlterConfigsResourceResponse,
                                   error_code=error_code(exc),
                                   error_message=error_message(exc),
                                   resource_type=resource.resource_type,
                                   resource_name=resource.resource_name))
        return build(cls, throttle_time=NO_THROTTLE, responses=tuple(responses))

    def describe_cluster(self, version, body, context):
        cls, types = response_types(DESCRIBE_CLUSTER, version)
        # Kafka's AuthHelper.computeDescribeClusterResponse: a broker answers for the
        # BROKER endpoint type only (v1+): CONTROLLER is MISMATCHED_ENDPOINT_TYPE, another
        # UNSUPPORTED_ENDPOINT_TYPE, with nothing else filled in.
        asked = getattr(body, "endpoint_type", _BROKER_ENDPOINT)
        if asked != _BROKER_ENDPOINT:
            known = asked == _CONTROLLER_ENDPOINT
            return build(cls, throttle_time=NO_THROTTLE,
                         error_code=ErrorCode.mismatched_endpoint_type if known
                         else ErrorCode.unsupported_endpoint_type,
                         error_message="The request was sent to an endpoint of type BROKER, "
                         "but we wanted an endpoint of type CONTROLLER" if known
                         else f"Unsupported endpoint type {asked}",
                         endpoint_type=i8(_BROKER_ENDPOINT), cluster_id="",
                         controller_id=i32(-1), cluster_authorized_operations=NOT_ASKED,
                         brokers=())
        view = self._view
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     error_message=None, endpoint_type=i8(_BROKER_ENDPOINT),
                     cluster_id=self.cluster_id,
                     controller_id=i32(NODE_ID if view is None else view.controller_id),
                     # Kafka's AuthHelper.computeDescribeClusterResponse.
                     cluster_authorized_operations=authorized_operations(
                         CLUSTER_OPERATIONS, body.include_cluster_authorized_operations),
                     brokers=tuple(build(types.DescribeClusterBroker, broker_id=i32(node),
                                         host=host, port=i32(port), rack=None)
                                   for node, host, port in self._brokers(context)))


def _asked_topics(version, asked, known):
    """([name], [unknown topic id]) of a Metadata request's topics, as Kafka's
    KafkaApis.handleTopicMetadataRequest reads them: each topic once; from v12 a topic may
    be named by its id (KIP-516), and once one is, the ids alone are looked up (a name
    given beside them is left out), an id no topic has answered UNKNOWN_TOPIC_ID."""
    ids = [t.topic_id for t in asked
           if version >= 12 and t.topic_id is not None and t.topic_id.int != 0]
    if not ids:
        return list(dict.fromkeys(t.name for t in asked)), []
    by_id = {uuid.UUID(hex=info.topic_id): name for name, info in known.items()}
    ids = list(dict.fromkeys(ids))
    return [by_id[i] for i in ids if i in by_id], [i for i in ids if i not in by_id]


# DescribeCluster's endpoint types (Kafka's EndpointType).
_BROKER_ENDPOINT, _CONTROLLER_ENDPOINT = 1, 2

# The coordinators' internal topics, by the FindCoordinator key type of their keys.
_COORDINATOR_KEY_TYPES = {OFFSETS_TOPIC: GROUP_COORDINATOR,
                          TRANSACTION_STATE_TOPIC: TRANSACTION_COORDINATOR}

# ListOffsets: the first version that may ask each special timestamp (Kafka's
# ReplicaManager.timestampMinSupportedVersion; -4 EARLIEST_LOCAL_TIMESTAMP and -5
# LATEST_TIERED_TIMESTAMP come after the versions served). Any other negative timestamp
# is unsupported at every version.
_TIMESTAMP_FIRST_VERSION = {EARLIEST_TIMESTAMP: 1, LATEST_TIMESTAMP: 1, MAX_TIMESTAMP: 7,
                            -4: 8, -5: 9}

# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType).
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


_TWICE = "the topic is named more than once in the request"


def _named_twice(names):
    """The names given more than once, in order. Kafka's CreateTopics, DeleteTopics and
    CreatePartitions answer each of these topics once, INVALID_REQUEST, and act on none of
    them (their responses are keyed by topic name); its (Incremental)AlterConfigs answers
    each entry of such a resource (ConfigAdminManager.preprocess)."""
    seen, twice = set(), {}
    for name in names:
        if name in seen:
            twice[name] = None
        seen.add(name)
    return list(twice)


def _preprocess_alter(resource, twice):
    """What Kafka's ConfigAdminManager.preprocess refuses in an AlterConfigs or
    IncrementalAlterConfigs resource, INVALID_REQUEST, before its controller sees it: a
    resource named more than once (each of them), a config named more than once, a null
    value (IncrementalAlterConfigs: other than for DELETE)."""
    if (resource.resource_type, resource.resource_name) in twice:
        raise errors.InvalidRequestError("Each resource must appear at most once.")
    names = [c.name for c in resource.configs]
    if len(set(names)) < len(names):
        raise errors.InvalidRequestError("Error due to duplicate config keys")
    nulls = [c.name for c in resource.configs
             if c.value is None and getattr(c, "config_operation", None) != DELETE]
    if nulls:
        raise errors.InvalidRequestError("Null value not supported for : " + ", ".join(nulls))


def _described_entry(types, entry, read_only, body):
    """A DescribeConfigs entry (a configs.ConfigEntry) as Kafka's ConfigHelper builds it:
    its synonyms when the request includes them (v1+), its documentation when it asks for
    that (v3+), its type always (v3+; build leaves out what a version lacks)."""
    info = CATALOG[entry.name]
    synonyms = tuple(build(types.DescribeConfigsSynonym, name=name, value=value,
                           source=i8(source))
                     for name, value, source in entry.synonyms) if body.include_synonyms else ()
    return build(types.DescribeConfigsResourceResult, name=entry.name, value=entry.value,
                 read_only=read_only, is_default=entry.source == DEFAULT_CONFIG,
                 config_source=i8(entry.source), is_sensitive=False, synonyms=synonyms,
                 config_type=i8(info.config_type),
                 documentation=(info.documentation
                                if getattr(body, "include_documentation", False) else None))


def _check_one_batch(version, records):
    """Kafka's ProduceRequest.validateRecords, which KafkaApis.handleProduceRequest applies
    to each partition's records before anything else is done for it (the versions served
    are all 3+): one record batch of magic 2, INVALID_RECORD otherwise, that partition
    alone; a zstd batch before Produce 7 (KIP-110: older clients cannot read it back) is
    UNSUPPORTED_COMPRESSION_TYPE. The log's append takes several batches (its in-process
    writers hand it what they built): the rules are a client request's, so they are checked
    where the request arrives. Records that do not parse are left to the append, which
    refuses them with the error of what is wrong."""
    try:
        batches = iter_batches(records or b"")
        first = next(batches, None)
        second = next(batches, None)
    except errors.CorruptRecordError:   # a length no batch has
        return
    if first is None:
        raise errors.InvalidRecordError("a Produce request carries a record batch for each "
                                        "partition it names; this partition has none")
    if not 0 <= first.magic <= MAGIC:
        # Kafka's ByteBufferLogInputStream.nextBatchSize: no magic Kafka ever wrote, so the
        # bytes are damaged (CORRUPT_MESSAGE, which producers retry), not an old format.
        raise errors.CorruptInputBatchError(f"a record batch with magic {first.magic}")
    if first.magic != MAGIC:
        raise errors.InvalidRecordError(
            f"a Produce request of version {version} carries record batches of magic {MAGIC}; "
            f"this one has magic {first.magic}")
    if version < 7 and first.compression == ZSTD:
        raise errors.UnsupportedCompressionTypeError(
            f"a zstd batch needs Produce version 7 or later; this request is version "
            f"{version}")
    if second is not None:
        raise errors.InvalidRecordError(
            "a Produce request may carry one record batch per partition; this one "
            "carries more")


def _check_base_offset(first):
    """A client's batch (first: its header, None when there is none or it does not parse,
    which the append refuses) starts at base offset 0, the log assigning offsets (Kafka's
    UnifiedLog.analyzeAndValidateRecords, part of the append, so after the transaction
    verification: INVALID_RECORD). The log's own append takes any base offset from its
    in-process writers."""
    if first is not None and first.base_offset != 0:
        raise errors.InvalidRecordError(
            f"a produced record batch starts at base offset 0 (the log assigns offsets); "
            f"this one says {first.base_offset}")


# The append failures Kafka's ReplicaManager.appendToLocalLog answers without the log start
# offset (UnknownTopicOrPartition, NotLeaderOrFollower, RecordTooLarge, RecordBatchTooLarge,
# CorruptRecord, KafkaStorage exceptions); a closed log answers as a partition not led here.
_APPEND_ERRORS_WITHOUT_LOG_START = (
    errors.UnknownTopicOrPartitionError, errors.NotLeaderOrFollowerError, errors.LogClosedError,
    errors.RecordTooLargeError, errors.CorruptInputBatchError, errors.KafkaStorageError)


def _record_errors(types, exc):
    """A Produce answer's record_errors (v8+): the records an append was refused for, by
    their index in the batch, as Kafka's ReplicaManager answers a RecordValidationException
    from its LogValidator (INVALID_TIMESTAMP, INVALID_RECORD)."""
    return tuple(build(types.BatchIndexAndErrorMessage, batch_index=i32(index),
                       batch_index_error_message=why)
                 for index, why in getattr(exc, "record_errors", ()))


def _each_partition_error(cls, types, body, code):
    """A Produce response giving `code` for every partition of the request."""
    return build(cls, throttle_time=NO_THROTTLE, responses=tuple(
        build(types.TopicProduceResponse, name=topic.name, partition_responses=tuple(
            build(types.PartitionProduceResponse, index=p.index, error_code=code,
                  base_offset=i64(-1), log_append_time=None, log_start_offset=i64(-1),
                  record_errors=(), error_message=None)
            for p in topic.partition_data)) for topic in body.topic_data))
