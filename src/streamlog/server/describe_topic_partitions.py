"""DescribeTopicPartitions (key 75) on the wire: the topics' partitions, paged (KIP-966's
admin API; kafka-python's `describe_topic_partitions`, Kafka's own admin client's
describeTopics from 3.8 on), answered as Kafka's DescribeTopicPartitionsRequestHandler and
KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse answer it.

The topics asked (none: every topic, internal ones included) are taken once each, in name
order, from the cursor's topic on; the first one's partitions from the cursor's partition
on. Partitions are listed until `response_partition_limit` (at most
MAX_PARTITIONS_PER_RESPONSE, at least 1) is reached; then `next_cursor` names the first one
left out, which the client sends back for the next page. A topic asked by name that does
not exist is answered UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for a name no
topic can have) and takes no room; asked for every topic, no such entry is possible.

A cursor whose topic the list does not name, or whose partition is negative, makes the
whole request INVALID_REQUEST: every topic asked answered with that error and no partition
(DescribeTopicPartitionsRequest.getErrorResponse). Eligible leader replicas (KIP-966) are
not kept here: those lists are empty, as Kafka's are when it does not elect from them.
"""
import uuid

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from .. import errors
from ..broker.metadata import INTERNAL_TOPICS, validate_topic_name
from ..structs import TopicPartition
from .authorized_operations import TOPIC_OPERATIONS, authorized_operations
from .error_codes import error_code
from .protocol import NO_THROTTLE, build, response_types

DESCRIBE_TOPIC_PARTITIONS = 75
# Kafka's max.request.partition.size.limit default: the most partitions one answer lists.
MAX_PARTITIONS_PER_RESPONSE = 2000
_NO_TOPIC_ID = uuid.UUID(int=0)


class DescribeTopicPartitionsHandlers:
    def __init__(self, broker, placement, live_nodes):
        """placement(tp, live): the partition's Placement (handlers.py); live_nodes(context):
        the ids of the brokers an answer may name as leaders."""
        self.broker = broker
        self._placement = placement
        self._live_nodes = live_nodes

    @property
    def table(self):
        return {DESCRIBE_TOPIC_PARTITIONS: self.describe_topic_partitions}

    def describe_topic_partitions(self, version, body, context):
        cls, types = response_types(DESCRIBE_TOPIC_PARTITIONS, version)
        cursor = body.cursor
        known = self.broker.topics()
        every_topic = not body.topics
        after = cursor.topic_name if cursor is not None else ""
        names = sorted({name for name in (known if every_topic else
                                          (t.name for t in body.topics)) if name >= after})
        refusal = None
        if cursor is not None and not every_topic and cursor.topic_name not in names:
            refusal = errors.InvalidRequestError(
                f"the topics asked must include the cursor's topic {cursor.topic_name!r}")
        elif cursor is not None and cursor.partition_index < 0:
            refusal = errors.InvalidRequestError(
                f"the cursor's partition must not be negative (got {cursor.partition_index})")
        if refusal is not None:
            return build(cls, throttle_time=NO_THROTTLE, next_cursor=None, topics=tuple(
                build(types.DescribeTopicPartitionsResponseTopic, error_code=error_code(refusal),
                      name=t.name, topic_id=_NO_TOPIC_ID, is_internal=False, partitions=())
                for t in body.topics))
        live = self._live_nodes(context)
        operations = authorized_operations(TOPIC_OPERATIONS, True)
        room = max(min(MAX_PARTITIONS_PER_RESPONSE, int(body.response_partition_limit)), 1)
        topics, next_cursor = [], None
        for name in names:
            if room == 0:
                # Every partition of the topics before fitted: the next page starts here.
                next_cursor = build(types.Cursor, topic_name=name, partition_index=i32(0))
                break
            info = known.get(name)
            if info is None:
                topics.append(build(types.DescribeTopicPartitionsResponseTopic,
                                    error_code=_unknown_topic_code(name), name=name,
                                    topic_id=_NO_TOPIC_ID, is_internal=name in INTERNAL_TOPICS,
                                    partitions=(), topic_authorized_operations=operations))
                continue
            first = cursor.partition_index if cursor is not None and \
                name == cursor.topic_name else 0
            end = min(info.partitions, first + room)
            partitions = tuple(self._partition(types, TopicPartition(name, p), live)
                               for p in range(first, end))
            topics.append(build(types.DescribeTopicPartitionsResponseTopic,
                                error_code=ErrorCode.none, name=name,
                                topic_id=uuid.UUID(hex=info.topic_id), is_internal=info.internal,
                                partitions=partitions, topic_authorized_operations=operations))
            if end < info.partitions:
                next_cursor = build(types.Cursor, topic_name=name, partition_index=i32(end))
                break
            room -= len(partitions)
        return build(cls, throttle_time=NO_THROTTLE, topics=tuple(topics),
                     next_cursor=next_cursor)

    def _partition(self, types, tp, live):
        place = self._placement(tp, live)
        # No per-partition error: a partition whose leader is down says so by leader -1.
        return build(types.DescribeTopicPartitionsResponsePartition, error_code=ErrorCode.none,
                     partition_index=i32(tp.partition), leader_id=i32(place.leader),
                     leader_epoch=i32(place.leader_epoch),
                     replica_nodes=tuple(i32(r) for r in place.replicas),
                     isr_nodes=tuple(i32(r) for r in place.isr),
                     eligible_leader_replicas=(), last_known_elr=(),
                     offline_replicas=tuple(i32(r) for r in place.offline))


def _unknown_topic_code(name):
    try:
        validate_topic_name(name, allow_internal=True)
    except errors.InvalidTopicError as exc:
        return error_code(exc)
    return error_code(errors.UnknownTopicOrPartitionError(name))
