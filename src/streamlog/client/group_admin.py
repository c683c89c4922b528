"""Administering consumer groups: what describe/list/delete/reset-offsets show and change.

The coordinator knows members, generations and committed offsets; this
module adds what an operator wants next to them -- each partition's log
end offset and the group's lag on it (log end - committed, Kafka's
kafka-consumer-groups figure) -- and computes offset resets the way
kafka-consumer-groups --reset-offsets does: a target per partition
(earliest, latest, an offset, a time, or a shift of the committed offset),
clamped into the partition's [log start, log end].
"""
from typing import NamedTuple, Optional

from ..coordinator.group_coordinator import find_coordinator
from ..errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from ..structs import OffsetAndMetadata
from .validation import by_topic_partition, topic_partitions

EARLIEST, LATEST = -2, -1
RESET_STRATEGIES = ("earliest", "latest", "offset", "datetime", "shift")


class PartitionLag(NamedTuple):
    """One partition of a group: committed offset (None if never committed) and lag."""

    committed: Optional[int]
    metadata: str
    log_end_offset: Optional[int]   # None if the topic or partition no longer exists
    lag: Optional[int]              # log end - committed (None when either is unknown)
    member_id: Optional[str]        # the member it is assigned to, if any


class GroupMember(NamedTuple):
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    assignment: list                # [TopicPartition]


class GroupDescription(NamedTuple):
    group_id: str
    state: str                      # Empty, PreparingRebalance, CompletingRebalance, Stable
    protocol_type: Optional[str]    # "consumer", or None for a group that only has offsets
    assignor: Optional[str]         # the partition assignor of the current generation
    generation: int
    leader: Optional[str]
    members: list                   # [GroupMember]
    partitions: dict                # {TopicPartition: PartitionLag}, sorted

    @property
    def total_lag(self):
        return sum(p.lag for p in self.partitions.values() if p.lag is not None)


class GroupListing(NamedTuple):
    group_id: str
    state: str
    protocol_type: Optional[str]


def _log_end_offsets(broker, partitions):
    out = {}
    for tp in partitions:
        try:
            out[tp] = broker.list_offsets({tp: LATEST})[tp][0]
        except UnknownTopicOrPartitionError:
            out[tp] = None
    return out


def describe_group(broker, group_id):
    """GroupDescription of one group (GroupIdNotFoundError if it does not exist)."""
    d = find_coordinator(broker).describe_group(group_id)
    owner = {tp: m.member_id for m in d.members for tp in m.assignment}
    tps = sorted(set(d.offsets) | set(owner))
    ends = _log_end_offsets(broker, tps)
    partitions = {}
    for tp in tps:
        c = d.offsets.get(tp)
        committed = None if c is None else c.offset
        end = ends[tp]
        lag = None if committed is None or end is None else max(end - committed, 0)
        partitions[tp] = PartitionLag(committed, "" if c is None else c.metadata, end, lag,
                                      owner.get(tp))
    members = [GroupMember(m.member_id, m.group_instance_id, m.client_id, sorted(m.assignment))
               for m in d.members]
    return GroupDescription(d.group_id, d.state, d.protocol_type, d.protocol, d.generation,
                            d.leader, members, partitions)


def list_groups(broker):
    return [GroupListing(g.group_id, g.state, g.protocol_type)
            for g in find_coordinator(broker).list_groups()]


def delete_group(broker, group_id):
    find_coordinator(broker).delete_group(group_id)


def delete_group_offsets(broker, group_id, partitions):
    """Delete the group's committed offsets of `partitions`, as Kafka's
    Admin.deleteConsumerGroupOffsets does: each partition that can be is, and then the
    first refusal is raised (GroupSubscribedToTopicError: a member subscribes to its topic;
    UnknownTopicOrPartitionError); GroupIdNotFoundError and NonEmptyGroupError refuse all."""
    partitions = topic_partitions(partitions, "delete_group_offsets()")
    results = find_coordinator(broker).delete_offsets(group_id, partitions)
    for error in results.values():
        if error is not None:
            raise error


def alter_group_offsets(broker, group_id, offsets):
    """Set the committed offsets of a group that has no active member.

    An offset past a partition's log end is refused (OffsetOutOfRangeError):
    the group would skip records not yet written, and its lag would read 0.
    reset_group_offsets() clamps instead, as kafka-consumer-groups does.
    """
    offsets = {tp: OffsetAndMetadata.of(v)
               for tp, v in by_topic_partition(offsets, "alter_group_offsets()").items()}
    for tp, meta in offsets.items():
        if isinstance(meta.offset, bool) or not isinstance(meta.offset, int):
            raise TypeError(f"the offset for {tp} must be an int, not {meta.offset!r}")
        info = broker.topic(tp.topic)
        if not 0 <= tp.partition < info.partitions:
            raise UnknownTopicOrPartitionError(f"topic {tp.topic!r} has no partition "
                                               f"{tp.partition}")
    ends = {tp: o for tp, (o, _) in broker.list_offsets({tp: LATEST for tp in offsets}).items()}
    for tp, meta in offsets.items():
        if not 0 <= meta.offset <= ends[tp]:
            raise OffsetOutOfRangeError(
                f"offset {meta.offset} for {tp} is outside [0, {ends[tp]}] (its log end); "
                "nothing was changed. reset_group_offsets(..., 'offset', n) clamps into the "
                "log's range instead", tp, meta.offset)
    find_coordinator(broker).alter_offsets(group_id, offsets)


def plan_offset_reset(broker, group_id, partitions, strategy, value=None):
    """{tp: new offset} for a reset of `partitions` (Kafka's --reset-offsets rules).

    strategy: "earliest", "latest", "offset" (value: the offset), "datetime"
    (value: ms since the epoch; the first offset at or after it, else the
    log end) or "shift" (value: +/- records from the committed offset; a
    partition with none is refused, ValueError, nothing changed, as Kafka's
    ConsumerGroupCommand refuses it). Every target is clamped into
    [log start, log end].
    """
    if strategy not in RESET_STRATEGIES:
        raise ValueError(f"reset strategy must be one of {', '.join(RESET_STRATEGIES)}, "
                         f"not {strategy!r}")
    if strategy in ("offset", "datetime", "shift") and (
            isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"reset strategy {strategy!r} needs an integer value, got {value!r}")
    tps = topic_partitions(partitions, "reset_group_offsets()")
    for tp in tps:
        info = broker.topic(tp.topic)
        if not 0 <= tp.partition < info.partitions:
            raise UnknownTopicOrPartitionError(f"topic {tp.topic!r} has no partition "
                                               f"{tp.partition}")
    starts = {tp: o for tp, (o, _) in broker.list_offsets({tp: EARLIEST for tp in tps}).items()}
    ends = {tp: o for tp, (o, _) in broker.list_offsets({tp: LATEST for tp in tps}).items()}
    committed = find_coordinator(broker).offset_fetch(group_id, tps)
    plan = {}
    for tp in tps:
        if strategy == "earliest":
            target = starts[tp]
        elif strategy == "latest":
            target = ends[tp]
        elif strategy == "offset":
            target = value
        elif strategy == "datetime":
            found = broker.list_offsets({tp: max(value, 0)})[tp]
            target = ends[tp] if found is None else found[0]
        else:
            c = committed.get(tp)
            if c is None:
                raise ValueError(f"cannot shift the offset of {tp} for group {group_id!r}: it "
                                 "has no committed offset to shift from; nothing was changed")
            target = c.offset + value
        plan[tp] = min(max(target, starts[tp]), ends[tp])
    return plan
