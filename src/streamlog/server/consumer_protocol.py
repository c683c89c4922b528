"""Kafka's consumer protocol (ConsumerProtocolSubscription / ConsumerProtocolAssignment, the
JoinGroup metadata and SyncGroup assignment of a "consumer" group) to and from the group
coordinator's own forms: a coordinator.assignors.Subscription, a list of TopicPartitions.

One group may hold members of both kinds, threads of this process and clients on the wire:
the coordinator keeps every member's metadata in its own form, and the server converts at
the boundary. Each blob starts with its int16 version; versions above the newest known (3)
are read as 3, as Kafka's clients do (the fields they add come at the end).
"""
import struct

from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from ..coordinator.assignors import Subscription
from ..structs import TopicPartition

PROTOCOL_TYPE = "consumer"
_VERSION = struct.Struct(">h")
_NEWEST = 3


class _Bytes:
    __slots__ = ("parts",)

    def __init__(self):
        self.parts = []

    def write(self, data):
        self.parts.append(bytes(data))
        return len(data)


def _schema(module, name, version):
    """The entity class of one version (v0..v3) of a consumer protocol message."""
    package = module.__name__.rsplit(".", 2)[0]
    data = __import__(f"{package}.v{min(max(version, 0), _NEWEST)}.data", fromlist=[name])
    return getattr(data, name), data


class WireSubscription(Subscription):
    """The Subscription a wire member's metadata bytes hold, with the bytes themselves
    (`blob`): Kafka's coordinator passes member metadata through unread, so a wire leader
    gets them as the member sent them (its version, rack_id and all), and a rejoin counts
    as new metadata exactly when the bytes differ (ClassicGroupMember.matches)."""

    def __eq__(self, other):
        mine, theirs = getattr(self, "blob", None), getattr(other, "blob", None)
        if mine is not None and theirs is not None:
            return mine == theirs
        return tuple.__eq__(self, other)

    def __ne__(self, other):
        return not self == other

    __hash__ = Subscription.__hash__


def decode_subscription(blob, group_instance_id=None):
    """A WireSubscription from a JoinGroup member's metadata bytes."""
    (version,) = _VERSION.unpack_from(blob, 0)
    cls, _ = _schema(subscription_v3, "ConsumerProtocolSubscription", version)
    message, _ = entity_reader(cls)(bytes(blob[2:]), 0)
    owned = [TopicPartition(t.topic, int(p)) for t in getattr(message, "owned_partitions", ())
             for p in t.partitions]
    subscription = WireSubscription(list(message.topics), owned,
                                    int(getattr(message, "generation_id", -1)),
                                    group_instance_id, message.user_data)
    subscription.blob = bytes(blob)
    return subscription


def encode_subscription(subscription, version=_NEWEST):
    cls, data = _schema(subscription_v3, "ConsumerProtocolSubscription", version)
    by_topic = {}
    for tp in subscription.owned_partitions:
        tp = TopicPartition(*tp)
        by_topic.setdefault(tp.topic, []).append(i32(tp.partition))
    names = set(cls.__dataclass_fields__)
    fields = {"topics": tuple(subscription.topics), "user_data": subscription.user_data,
              "generation_id": i32(subscription.generation), "rack_id": None}
    if "owned_partitions" in names:   # v1 on
        fields["owned_partitions"] = tuple(data.TopicPartition(topic=t, partitions=tuple(ps))
                                           for t, ps in sorted(by_topic.items()))
    out = _Bytes()
    entity_writer(cls)(out, cls(**{k: v for k, v in fields.items() if k in names}))
    return _VERSION.pack(version) + b"".join(out.parts)


class Assignment(list):
    """A member's TopicPartitions as a wire leader assigned them, with the bytes it sent
    (`blob`): Kafka's coordinator hands a member the leader's bytes unchanged (their
    version, topic order and user data), so a wire member gets them back as sent; an
    in-process member reads the list."""

    __slots__ = ("blob",)

    def __init__(self, partitions, blob):
        super().__init__(partitions)
        self.blob = blob


def decode_assignment(blob):
    """The Assignment of a SyncGroup assignment's bytes (empty bytes: none)."""
    blob = bytes(blob)
    if not blob:
        return Assignment((), blob)
    (version,) = _VERSION.unpack_from(blob, 0)
    cls, _ = _schema(assignment_v3, "ConsumerProtocolAssignment", version)
    message, _ = entity_reader(cls)(blob[2:], 0)
    return Assignment((TopicPartition(t.topic, int(p)) for t in message.assigned_partitions
                       for p in t.partitions), blob)


def encode_assignment(partitions, version=_NEWEST):
    """An in-process leader's assignment (TopicPartitions) as consumer protocol bytes."""
    cls, data = _schema(assignment_v3, "ConsumerProtocolAssignment", version)
    by_topic = {}
    for tp in partitions:
        tp = TopicPartition(*tp)
        by_topic.setdefault(tp.topic, []).append(i32(tp.partition))
    out = _Bytes()
    entity_writer(cls)(out, cls(assigned_partitions=tuple(
        data.TopicPartition(topic=t, partitions=tuple(ps)) for t, ps in sorted(by_topic.items())),
        user_data=None))
    return _VERSION.pack(version) + b"".join(out.parts)
