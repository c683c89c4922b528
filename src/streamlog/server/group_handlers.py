"""The consumer group APIs on the wire: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit and OffsetFetch, as calls to the database's group coordinator (the
same groups and offsets the in-process consumers use: a group may mix both kinds of member).

The coordinator answers a join or sync that must wait for the other members later (a
Pending); a wire member's request waits for it here, on its worker thread, up to the
rebalance timeout. The metadata and assignments of "consumer" groups are converted between
Kafka's consumer protocol bytes and the coordinator's forms (consumer_protocol.py); other
protocol types pass through as bytes.
"""
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from .. import errors
from ..coordinator.group_coordinator import find_coordinator
from ..structs import OffsetAndMetadata, TopicPartition
from .consumer_protocol import (PROTOCOL_TYPE, decode_assignment, decode_subscription,
                                encode_assignment, encode_subscription)
from .protocol import NO_THROTTLE, build, response_types

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
GROUP_ERRORS = [
    (errors.RebalanceInProgressError, ErrorCode.rebalance_in_progress),
    (errors.IllegalGenerationError, ErrorCode.illegal_generation),
    (errors.UnknownMemberIdError, ErrorCode.unknown_member_id),
    (errors.InconsistentGroupProtocolError, ErrorCode.inconsistent_group_protocol),
    (errors.FencedInstanceIdError, ErrorCode.fenced_instance_id),
    (errors.InvalidSessionTimeoutError, ErrorCode.invalid_session_timeout),
    (errors.InvalidGroupIdError, ErrorCode.invalid_group_id),
    (errors.GroupIdNotFoundError, ErrorCode.group_id_not_found),
    (errors.NonEmptyGroupError, ErrorCode.non_empty_group),
    (errors.OffsetMetadataTooLargeError, ErrorCode.offset_metadata_too_large),
    (errors.CommitFailedError, ErrorCode.illegal_generation),
]
# How long past its rebalance timeout a join or sync waits before answering
# REBALANCE_IN_PROGRESS (the coordinator's own timeout fires first).
_WAIT_SLACK_S = 5.0


class GroupHandlers:
    def __init__(self, broker, node, error_code):
        self.broker = broker
        self._node = node              # NODE_ID of this server
        self._error_code = error_code  # handlers.error_code
        self._coordinator = None
        self._rebalance_timeouts = {}  # group -> longest rebalance timeout (ms) of its joins

    @property
    def table(self):
        return {FIND_COORDINATOR: self.find_coordinator, JOIN_GROUP: self.join_group,
                SYNC_GROUP: self.sync_group, HEARTBEAT: self.heartbeat,
                LEAVE_GROUP: self.leave_group, OFFSET_COMMIT: self.offset_commit,
                OFFSET_FETCH: self.offset_fetch}

    @property
    def coordinator(self):
        if self._coordinator is None:
            self._coordinator = find_coordinator(self.broker)
        return self._coordinator

    def code(self, exc):
        if exc is None:
            return ErrorCode.none
        for cls, code in GROUP_ERRORS:
            if isinstance(exc, cls):
                return code
        return self._error_code(exc)

    # --- FindCoordinator -------------------------------------------------------------

    def find_coordinator(self, version, body, context):
        cls, types = response_types(FIND_COORDINATOR, version)
        host, port = context.host, context.port
        if version >= 4:
            return build(cls, throttle_time=NO_THROTTLE, coordinators=tuple(
                build(types.Coordinator, key=key, node_id=i32(self._node), host=host,
                      port=i32(port), error_code=ErrorCode.none, error_message=None)
                for key in body.coordinator_keys))
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     error_message=None, node_id=i32(self._node), host=host, port=i32(port))

    # --- JoinGroup, SyncGroup ------------------------------------------------------------

    def join_group(self, version, body, context):
        cls, types = response_types(JOIN_GROUP, version)
        consumer = body.protocol_type == PROTOCOL_TYPE
        instance = getattr(body, "group_instance_id", None)
        rebalance_ms = int(getattr(body, "rebalance_timeout", body.session_timeout)
                           .total_seconds() * 1000)
        try:
            protocols = [(p.name, decode_subscription(p.metadata, instance) if consumer
                          else bytes(p.metadata)) for p in body.protocols]
            pending = self.coordinator.join_group(
                body.group_id, body.member_id, instance, context.client_id,
                int(body.session_timeout.total_seconds() * 1000), rebalance_ms,
                body.protocol_type, protocols, _ignore)
            answer = self._wait(pending, rebalance_ms)
        except errors.StreamlogError as exc:
            return build(cls, throttle_time=NO_THROTTLE, error_code=self.code(exc),
                         generation_id=i32(-1), protocol_type=None, protocol_name=None,
                         leader="", skip_assignment=False, member_id=body.member_id or "",
                         members=())
        # The longest rebalance timeout a member of the group gave bounds its syncs' wait
        # (one entry per group, however many members come and go).
        self._rebalance_timeouts[body.group_id] = max(
            rebalance_ms, self._rebalance_timeouts.get(body.group_id, 0))
        members = tuple(build(types.JoinGroupResponseMember, member_id=member_id,
                              group_instance_id=member_instance,
                              metadata=encode_subscription(metadata) if consumer and
                              not isinstance(metadata, bytes) else bytes(metadata))
                        for member_id, member_instance, metadata in answer.members)
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     generation_id=i32(answer.generation), protocol_type=body.protocol_type,
                     protocol_name=answer.protocol, leader=answer.leader,
                     skip_assignment=answer.skip_assignment, member_id=answer.member_id,
                     members=members)

    def sync_group(self, version, body, context):
        cls, _ = response_types(SYNC_GROUP, version)
        consumer = getattr(body, "protocol_type", PROTOCOL_TYPE) in (PROTOCOL_TYPE, None)
        instance = getattr(body, "group_instance_id", None)
        try:
            assignments = {a.member_id: decode_assignment(a.assignment) if consumer
                           else bytes(a.assignment) for a in body.assignments} or None
            pending = self.coordinator.sync_group(body.group_id, body.member_id,
                                                  int(body.generation_id), instance,
                                                  assignments)
            timeout = self._rebalance_timeouts.get(body.group_id, 60_000)
            assignment = self._wait(pending, timeout)
            blob = encode_assignment(assignment) if consumer and \
                not isinstance(assignment, bytes) else bytes(assignment or b"")
            error = ErrorCode.none
        except errors.StreamlogError as exc:
            blob, error = b"", self.code(exc)
        return build(cls, throttle_time=NO_THROTTLE, error_code=error,
                     protocol_type=getattr(body, "protocol_type", None),
                     protocol_name=getattr(body, "protocol_name", None), assignment=blob)

    def _wait(self, pending, timeout_ms):
        if not pending.wait(timeout_ms / 1000 + _WAIT_SLACK_S):
            raise errors.RebalanceInProgressError("the group did not settle in time; join again")
        return pending.result()

    # --- Heartbeat, LeaveGroup --------------------------------------------------------

    def heartbeat(self, version, body, context):
        cls, _ = response_types(HEARTBEAT, version)
        exc = None
        try:
            self.coordinator.heartbeat(body.group_id, body.member_id, int(body.generation_id),
                                       getattr(body, "group_instance_id", None))
        except errors.StreamlogError as exc_:
            exc = exc_
        return build(cls, throttle_time=NO_THROTTLE, error_code=self.code(exc))

    def leave_group(self, version, body, context):
        cls, types = response_types(LEAVE_GROUP, version)
        if version >= 3:
            leaving = [(m.member_id, m.group_instance_id) for m in body.members]
        else:
            leaving = [(body.member_id, None)]
        results, first = [], None
        for member_id, instance in leaving:
            exc = None
            try:
                self.coordinator.leave_group(body.group_id, member_id, instance)
            except errors.StreamlogError as exc_:
                exc = exc_
                first = first or exc
            results.append(build(types.MemberResponse, member_id=member_id,
                                 group_instance_id=instance, error_code=self.code(exc))
                           if version >= 3 else None)
        return build(cls, throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.none if version >= 3 else self.code(first),
                     members=tuple(r for r in results if r is not None))

    # --- OffsetCommit, OffsetFetch ------------------------------------------------------

    def offset_commit(self, version, body, context):
        cls, types = response_types(OFFSET_COMMIT, version)
        offsets = {}
        for topic in body.topics:
            for p in topic.partitions:
                offsets[TopicPartition(topic.name, int(p.partition_index))] = OffsetAndMetadata(
                    int(p.committed_offset), p.committed_metadata or "")
        generation = getattr(body, "generation_id_or_member_epoch",
                             getattr(body, "generation_id", -1))
        exc = None
        try:
            self.coordinator.offset_commit(body.group_id, body.member_id or "",
                                           int(generation),
                                           getattr(body, "group_instance_id", None), offsets)
        except errors.StreamlogError as exc_:
            exc = exc_
        code = self.code(exc)
        return build(cls, throttle_time=NO_THROTTLE, topics=tuple(
            build(types.OffsetCommitResponseTopic, name=topic.name, partitions=tuple(
                build(types.OffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=code) for p in topic.partitions)) for topic in body.topics))

    def offset_fetch(self, version, body, context):
        cls, types = response_types(OFFSET_FETCH, version)
        wanted = None if body.topics is None else [
            TopicPartition(t.name, int(p)) for t in body.topics for p in t.partition_indexes]
        exc, committed = None, {}
        try:
            committed = self.coordinator.offset_fetch(body.group_id, wanted)
        except errors.StreamlogError as exc_:
            exc = exc_
        by_topic = {}
        for tp in (wanted if wanted is not None else sorted(committed)):
            found = committed.get(tp)
            by_topic.setdefault(tp.topic, []).append(build(
                types.OffsetFetchResponsePartition, partition_index=i32(tp.partition),
                committed_offset=i64(found.offset if found is not None else -1),
                committed_leader_epoch=i32(getattr(found, "leader_epoch", -1)
                                           if found is not None else -1),
                metadata=(found.metadata if found is not None else "") or "",
                error_code=ErrorCode.none))
        return build(cls, throttle_time=NO_THROTTLE, error_code=self.code(exc),
                     topics=tuple(build(types.OffsetFetchResponseTopic, name=name,
                                        partitions=tuple(parts))
                                  for name, parts in by_topic.items()))


def _ignore(_event, _member_id):
    """A wire member learns of rebalances from its heartbeats' errors, as Kafka's do."""
