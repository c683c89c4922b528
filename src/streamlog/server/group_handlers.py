"""The consumer group APIs on the wire: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups, ListGroups and
DeleteGroups, as calls
to the database's group coordinator (the same groups and offsets the in-process consumers
use: a group may mix both kinds of member).

The coordinator answers a join or sync that must wait for the other members later (a
Pending); a wire member's request waits for it here, on its worker thread, up to the
rebalance timeout. The metadata and assignments of "consumer" groups are converted between
Kafka's consumer protocol bytes and the coordinator's forms (consumer_protocol.py); other
protocol types pass through as bytes.
"""
import time

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from .. import errors
from ..coordinator import GROUP_COORDINATOR
from ..coordinator.group_coordinator import find_coordinator
from ..structs import OffsetAndMetadata, TopicPartition
from .authorized_operations import GROUP_OPERATIONS, NOT_ASKED, authorized_operations
from .consumer_protocol import (PROTOCOL_TYPE, decode_assignment, decode_subscription,
                                encode_assignment, encode_subscription)
from .error_codes import error_code, error_message, failure
from .protocol import NO_THROTTLE, build, response_types

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
# How long past its rebalance timeout a join or sync waits before answering
# REBALANCE_IN_PROGRESS (the coordinator's own timeout fires first).
_WAIT_SLACK_S = 5.0
# How often a waiting join or sync looks whether its client went away.
_CONNECTION_CHECK_S = 0.1


class GroupHandlers:
    def __init__(self, broker, node, view=None):
        self.broker = broker
        self._node = node              # this broker's node id
        self._view = view              # its cluster (cluster.ClusterView), None on its own
        self._coordinator = None
        self._rebalance_timeouts = {}  # group -> longest rebalance timeout (ms) of its joins

    @property
    def table(self):
        return {FIND_COORDINATOR: self.find_coordinator, JOIN_GROUP: self.join_group,
                SYNC_GROUP: self.sync_group, HEARTBEAT: self.heartbeat,
                LEAVE_GROUP: self.leave_group, OFFSET_COMMIT: self.offset_commit,
                OFFSET_FETCH: self.offset_fetch, OFFSET_DELETE: self.offset_delete,
                DESCRIBE_GROUPS: self.describe_groups, LIST_GROUPS: self.list_groups,
                DELETE_GROUPS: self.delete_groups}

    @property
    def coordinator(self):
        if self._coordinator is None:
            self._coordinator = find_coordinator(self.broker)
        return self._coordinator

    # --- FindCoordinator -------------------------------------------------------------

    def _coordinator_of(self, key, key_type, context):
        """(node id, host, port) of the broker coordinating key (key_type 0: a group, 1: a
        transactional id): this one on its own; in a cluster the leader of the key's
        partition of the internal topic (cluster.Cluster.coordinator_for)."""
        if self._view is None:
            return self._node, context.host, context.port
        node = self._view.coordinator_for(key, key_type)
        for broker in self._view.brokers():
            if broker[0] == node:
                return broker
        raise errors.CoordinatorNotAvailableError(f"broker {node} coordinates {key!r} and "
                                                  "is not reachable")

    def _check_coordinator(self, group_id):
        """NOT_COORDINATOR for a group another broker of the cluster coordinates (its client
        then asks FindCoordinator again), COORDINATOR_LOAD_IN_PROGRESS while this one loads
        it, as Kafka's GroupCoordinator answers."""
        if self._view is not None:
            self._view.check_coordinating(group_id, GROUP_COORDINATOR)

    def find_coordinator(self, version, body, context):
        cls, types = response_types(FIND_COORDINATOR, version)
        key_type = int(getattr(body, "key_type", GROUP_COORDINATOR))
        if version >= 4:
            return build(cls, throttle_time=NO_THROTTLE, coordinators=tuple(
                build(types.Coordinator, key=key, **self._coordinator_fields(key, key_type,
                                                                             context))
                for key in body.coordinator_keys))
        return build(cls, throttle_time=NO_THROTTLE,
                     **self._coordinator_fields(body.key, key_type, context))

    def _coordinator_fields(self, key, key_type, context):
        try:
            node, host, port = self._coordinator_of(key, key_type, context)
        except errors.StreamlogError as exc:
            return dict(node_id=i32(-1), host="", port=i32(-1), error_code=error_code(exc),
                        error_message=error_message(exc))
        return dict(node_id=i32(node), host=host, port=i32(port), error_code=ErrorCode.none,
                    error_message=None)

    # --- JoinGroup, SyncGroup ------------------------------------------------------------

    def join_group(self, version, body, context):
        cls, types = response_types(JOIN_GROUP, version)
        consumer = body.protocol_type == PROTOCOL_TYPE
        instance = getattr(body, "group_instance_id", None)
        rebalance_ms = int(getattr(body, "rebalance_timeout", body.session_timeout)
                           .total_seconds() * 1000)
        try:
            protocols = [(p.name, _subscription(p.metadata, instance) if consumer
                          else bytes(p.metadata)) for p in body.protocols]
            self._check_coordinator(body.group_id)
            pending = self.coordinator.join_group(
                body.group_id, body.member_id, instance, context.client_id,
                int(body.session_timeout.total_seconds() * 1000), rebalance_ms,
                body.protocol_type, protocols, _ignore,
                # JoinGroup v4 on: a new dynamic member joins twice, the second time with
                # the id the first answer gave (KIP-394)
                require_known_member_id=version >= 4,
                skip_assignment_known=version >= 9)
            answer = self._wait(pending, rebalance_ms, context)
        except errors.StreamlogError as exc:
            return build(cls, throttle_time=NO_THROTTLE, error_code=error_code(exc),
                         generation_id=i32(-1), protocol_type=None,
                         protocol_name=None if version >= 7 else "",   # nullable from v7
                         leader="", skip_assignment=False,
                         member_id=getattr(exc, "member_id", None) or body.member_id or "",
                         members=())
        # The longest rebalance timeout a member of the group gave bounds its syncs' wait
        # (one entry per group, however many members come and go).
        self._rebalance_timeouts[body.group_id] = max(
            rebalance_ms, self._rebalance_timeouts.get(body.group_id, 0))
        members = tuple(build(types.JoinGroupResponseMember, member_id=member_id,
                              group_instance_id=member_instance,
                              metadata=_wire_bytes(metadata, encode_subscription))
                        for member_id, member_instance, metadata in answer.members)
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     generation_id=i32(answer.generation), protocol_type=body.protocol_type,
                     protocol_name=answer.protocol, leader=answer.leader,
                     skip_assignment=answer.skip_assignment, member_id=answer.member_id,
                     members=members)

    def sync_group(self, version, body, context):
        cls, _ = response_types(SYNC_GROUP, version)
        # SyncGroup 5 on names the protocol type; before, the group's members did.
        protocol_type = getattr(body, "protocol_type", None) or \
            self.coordinator.protocol_type(body.group_id)
        instance = getattr(body, "group_instance_id", None)
        try:
            assignments = {a.member_id: _assignment(a.assignment)
                           if protocol_type == PROTOCOL_TYPE else bytes(a.assignment)
                           for a in body.assignments} or None
            try:
                self._check_coordinator(body.group_id)
            except errors.CoordinatorLoadInProgressError:
                # The rebalance under way was lost with the old coordinator: the members
                # join again. Kafka answers this, not LOAD_IN_PROGRESS, which older
                # clients do not expect from SyncGroup.
                raise errors.RebalanceInProgressError(
                    f"the coordinator of group {body.group_id!r} is loading it; join "
                    "again") from None
            pending = self.coordinator.sync_group(
                body.group_id, body.member_id, int(body.generation_id), instance, assignments,
                protocol_type=getattr(body, "protocol_type", None),
                protocol_name=getattr(body, "protocol_name", None))
            timeout = self._rebalance_timeouts.get(body.group_id, 60_000)
            assignment = self._wait(pending, timeout, context)
            blob = _wire_bytes(assignment, encode_assignment)
            error = ErrorCode.none
        except errors.StreamlogError as exc:
            blob, error = b"", error_code(exc)
        return build(cls, throttle_time=NO_THROTTLE, error_code=error,
                     protocol_type=getattr(body, "protocol_type", None),
                     protocol_name=getattr(body, "protocol_name", None), assignment=blob)

    def _wait(self, pending, timeout_ms, context):
        """The Pending's answer, waiting up to timeout_ms (and a slack) while the request's
        connection stays open."""
        deadline = time.monotonic() + timeout_ms / 1000 + _WAIT_SLACK_S
        while not pending.wait(_CONNECTION_CHECK_S):
            if context.connection.closed.is_set() or time.monotonic() > deadline:
                raise errors.RebalanceInProgressError(
                    "the group did not settle in time; join again")
        return pending.result()

    # --- Heartbeat, LeaveGroup --------------------------------------------------------

    def heartbeat(self, version, body, context):
        cls, _ = response_types(HEARTBEAT, version)
        exc = failure(self._check_coordinator, body.group_id)
        if isinstance(exc, errors.CoordinatorLoadInProgressError):
            # Kafka answers a heartbeat blindly while it loads the group: its members
            # must not give up their partitions for it.
            return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none)
        exc = exc or failure(
            self.coordinator.heartbeat, body.group_id, body.member_id,
            int(body.generation_id), getattr(body, "group_instance_id", None))
        return build(cls, throttle_time=NO_THROTTLE, error_code=error_code(exc))

    def leave_group(self, version, body, context):
        cls, types = response_types(LEAVE_GROUP, version)
        if version >= 3:
            leaving = [(m.member_id, m.group_instance_id) for m in body.members]
        else:
            leaving = [(body.member_id, None)]
        results, first = [], None
        for member_id, instance in leaving:
            exc = failure(self._check_coordinator, body.group_id) or \
                failure(self.coordinator.leave_group, body.group_id, member_id, instance)
            first = first or exc
            results.append(build(types.MemberResponse, member_id=member_id,
                                 group_instance_id=instance, error_code=error_code(exc))
                           if version >= 3 else None)
        return build(cls, throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.none if version >= 3 else error_code(first),
                     members=tuple(r for r in results if r is not None))

    # --- OffsetCommit, OffsetFetch ------------------------------------------------------

    def offset_commit(self, version, body, context):
        cls, types = response_types(OFFSET_COMMIT, version)
        offsets = {}
        for topic in body.topics:
            for p in topic.partitions:
                offsets[TopicPartition(topic.name, int(p.partition_index))] = OffsetAndMetadata(
                    int(p.committed_offset), p.committed_metadata or "",
                    int(getattr(p, "committed_leader_epoch", -1)))
        generation = getattr(body, "generation_id_or_member_epoch",
                             getattr(body, "generation_id", -1))
        # Kafka answers per partition: a refused offset (metadata too large, an unknown
        # partition) fails alone, and the others are committed.
        wrong = failure(self._check_coordinator, body.group_id)
        problems = {tp: wrong for tp in offsets} if wrong is not None else \
            self.coordinator.offset_problems(offsets)
        valid = {tp: om for tp, om in offsets.items() if tp not in problems}
        exc = failure(self.coordinator.offset_commit, body.group_id, body.member_id or "",
                      int(generation), getattr(body, "group_instance_id", None), valid) \
            if valid or not offsets else None
        if isinstance(exc, errors.NoSuchGroupGenerationError) and version >= 9:
            # Kafka's OffsetMetadataManager.validateOffsetCommit, from version 9 on.
            exc = errors.GroupIdNotFoundError(str(exc))
        return build(cls, throttle_time=NO_THROTTLE, topics=tuple(
            build(types.OffsetCommitResponseTopic, name=topic.name, partitions=tuple(
                build(types.OffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=error_code(problems.get(
                          TopicPartition(topic.name, int(p.partition_index)), exc)))
                for p in topic.partitions)) for topic in body.topics))

    def offset_fetch(self, version, body, context):
        cls, types = response_types(OFFSET_FETCH, version)
        wanted = None if body.topics is None else [
            TopicPartition(t.name, int(p)) for t in body.topics for p in t.partition_indexes]
        exc, committed, unstable = None, {}, set()
        try:
            self._check_coordinator(body.group_id)
            # KIP-447: with require_stable, an offset pending in an open transaction is not
            # answered yet; the client retries until the transaction ends.
            committed, unstable = self.coordinator.offset_fetch_stable(
                body.group_id, wanted, bool(getattr(body, "require_stable", False)))
        except errors.StreamlogError as exc_:
            exc = exc_
        by_topic = {}
        listed = wanted if wanted is not None else sorted(set(committed) | unstable)
        for tp in listed:
            found = None if tp in unstable else committed.get(tp)
            by_topic.setdefault(tp.topic, []).append(build(
                types.OffsetFetchResponsePartition, partition_index=i32(tp.partition),
                committed_offset=i64(found.offset if found is not None else -1),
                committed_leader_epoch=i32(found.leader_epoch if found is not None else -1),
                metadata=(found.metadata if found is not None else "") or "",
                error_code=ErrorCode.unstable_offset_commit if tp in unstable
                else ErrorCode.none))
        return build(cls, throttle_time=NO_THROTTLE, error_code=error_code(exc),
                     topics=tuple(build(types.OffsetFetchResponseTopic, name=name,
                                        partitions=tuple(parts))
                                  for name, parts in by_topic.items()))

    def offset_delete(self, version, body, context):
        """Kafka's KafkaApis.handleOffsetDeleteRequest: a group-level refusal (unknown group,
        members of another protocol type) is the answer's top-level error and nothing else;
        otherwise each partition's own (UNKNOWN_TOPIC_OR_PARTITION, GROUP_SUBSCRIBED_TO_TOPIC,
        or none: its offset is gone), for each time the request lists it, and an unknown
        topic's entry even when it lists no partition."""
        cls, types = response_types(OFFSET_DELETE, version)
        asked = [TopicPartition(t.name, int(p.partition_index))
                 for t in body.topics for p in t.partitions]
        try:
            self._check_coordinator(body.group_id)
            results = self.coordinator.delete_offsets(body.group_id, asked)
        except errors.StreamlogError as exc:
            return build(cls, error_code=error_code(exc), throttle_time=NO_THROTTLE, topics=())
        # Kafka's answer is built in two parts. The partitions KafkaApis finds unknown go
        # to an OffsetDeleteResponse.Builder, one entry per topic name; every request topic
        # entry with partitions left goes to the coordinator, whose answer
        # (OffsetMetadataManager.deleteOffsets) has an entry per request entry and an
        # answer per partition listed, twice for one listed twice: the generated
        # collections are ImplicitLinkedHashMultiCollections, which keep duplicates.
        # Builder.merge: with nothing unknown, the coordinator's answer as it is;
        # otherwise its partitions join the builder's entry of their topic name. A topic
        # the broker does not know gets its builder entry even with no partition listed.
        unknown, coordinated = {}, []
        for topic in body.topics:
            if not topic.partitions and topic.name not in self.broker.topics():
                unknown.setdefault(topic.name, [])
            known = []
            for partition in topic.partitions:
                result = results[TopicPartition(topic.name, int(partition.partition_index))]
                answer = build(types.OffsetDeleteResponsePartition,
                               partition_index=partition.partition_index,
                               error_code=error_code(result))
                if isinstance(result, errors.UnknownTopicOrPartitionError):
                    unknown.setdefault(topic.name, []).append(answer)
                else:
                    known.append(answer)
            if known:
                coordinated.append((topic.name, known))
        if unknown:
            for name, answers in coordinated:
                unknown.setdefault(name, []).extend(answers)
            coordinated = list(unknown.items())
        return build(cls, error_code=ErrorCode.none, throttle_time=NO_THROTTLE,
                     topics=tuple(build(types.OffsetDeleteResponseTopic, name=name,
                                        partitions=tuple(parts))
                                  for name, parts in coordinated))

    # --- DescribeGroups, ListGroups, DeleteGroups -----------------------------------------

    def describe_groups(self, version, body, context):
        cls, types = response_types(DESCRIBE_GROUPS, version)
        # Kafka's KafkaApis.handleDescribeGroupsRequest: v3+ asks; each group described
        # without an error answers them (an unknown group's Dead too), a failed one not.
        asked = getattr(body, "include_authorized_operations", False)
        operations = authorized_operations(GROUP_OPERATIONS, asked)
        described = []
        for group_id in body.groups:
            try:
                group = self.coordinator.describe_group(group_id)
            except errors.GroupIdNotFoundError:
                # Kafka before DescribeGroups v6: an unknown group is described as Dead.
                described.append(_described(types, group_id, "Dead", ErrorCode.none,
                                            operations=operations))
                continue
            except errors.StreamlogError as exc:
                described.append(_described(types, group_id, "", error_code(exc)))
                continue
            # Kafka's describeGroups: the protocol and the members' metadata and
            # assignments only of a Stable group; a rebalancing one's would be the last
            # generation's (ClassicGroupMember.describeNoMetadata).
            stable = group.state == "Stable"
            members = tuple(build(
                types.DescribedGroupMember, member_id=m.member_id,
                group_instance_id=m.group_instance_id, client_id=m.client_id or "",
                client_host="/" + context.host,
                member_metadata=_wire_bytes(m.metadata, encode_subscription) if stable else b"",
                member_assignment=_wire_bytes(m.assignment, encode_assignment) if stable else b"")
                for m in group.members)
            described.append(_described(types, group_id, group.state, ErrorCode.none,
                                        group.protocol_type, group.protocol if stable else None,
                                        members, operations))
        return build(cls, throttle_time=NO_THROTTLE, groups=tuple(described))

    def list_groups(self, version, body, context):
        cls, types = response_types(LIST_GROUPS, version)
        states = {s.lower() for s in getattr(body, "states_filter", ()) or ()}
        kinds = {t.lower() for t in getattr(body, "types_filter", ()) or ()}
        try:
            listed = [g for g in self.coordinator.list_groups()
                      if (not states or g.state.lower() in states)
                      and (not kinds or "classic" in kinds)]
            error = ErrorCode.none
        except errors.StreamlogError as exc:
            listed, error = [], error_code(exc)
        return build(cls, throttle_time=NO_THROTTLE, error_code=error, groups=tuple(
            build(types.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type or "",
                  group_state=g.state, group_type="classic") for g in listed))

    def delete_groups(self, version, body, context):
        cls, types = response_types(DELETE_GROUPS, version)
        results = []
        for group_id in body.groups_names:
            exc = failure(self.coordinator.delete_group, group_id)
            results.append(build(types.DeletableGroupResult, group_id=group_id,
                                 error_code=error_code(exc)))
        return build(cls, throttle_time=NO_THROTTLE, results=tuple(results))


def _described(types, group_id, state, error, protocol_type=None, protocol=None, members=(),
               operations=None):
    return build(types.DescribedGroup, error_code=error, group_id=group_id, group_state=state,
                 protocol_type=protocol_type or "", protocol_data=protocol or "",
                 members=members, authorized_operations=operations if operations is not None
                 else i32(NOT_ASKED))


def _subscription(blob, instance):
    """A consumer member's Subscription; bytes that are not the consumer protocol stay
    bytes (Kafka passes member metadata through unread), for a wire leader to read."""
    try:
        return decode_subscription(blob, instance)
    except Exception:   # kio's errors for bytes that do not decode
        return bytes(blob)


def _assignment(blob):
    """As _subscription, for a leader's assignment of one member."""
    try:
        return decode_assignment(blob)
    except Exception:
        return bytes(blob)


def _wire_bytes(value, encode):
    """A member's JoinGroup metadata or SyncGroup assignment as the wire carries it: the
    bytes a wire client sent, as it sent them (a WireSubscription's or a wire leader's
    Assignment's `blob`); an in-process member's form as consumer protocol bytes (encode);
    other protocols' bytes as they came."""
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    blob = getattr(value, "blob", None)
    return blob if blob is not None else encode(value)


def _ignore(_event, _member_id):
    """A wire member learns of rebalances from its heartbeats' errors, as Kafka's do."""
