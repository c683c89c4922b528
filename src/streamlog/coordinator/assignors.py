"""Partition assignors: which member of a consumer group reads which partition.

Owns the assignor interface -- the group leader's half of a rebalance:
partition counts and every member's Subscription in, one list of partitions
per member out -- the four built-in assignors under Kafka's names ("range",
"roundrobin", "sticky", "cooperative-sticky"), which give Kafka's results for
the same input, the rebalance protocols each supports, and get_assignor(),
which turns a configured name (or a user's object) into an assignor. The
sticky algorithm itself is in sticky.py.

An assignor is any object with `name` (the protocol name members vote on
when they join) and `assign(partitions_per_topic, subscriptions)` returning
{member_id: [TopicPartition, ...]}; optionally `supported_protocols`, a
sequence of "eager" / "cooperative", preferred first (default: eager only).
Built-in assignors are stateless: a plan depends on the arguments alone,
every member gets a key (an empty list if it gets nothing), each list is
sorted by (topic, partition), and the keys come in Kafka's member order:
static members (with a group_instance_id) first by instance id, then dynamic
members by member id -- ids compared as Java compares strings.

Rebalance protocols (KIP-429). EAGER: every member gives up all its
partitions before it rejoins. COOPERATIVE: members keep consuming and list
what they own; the assignor may only hand a partition to a new owner once
its current owner has given it up, so a partition that must move is first
left out of the plan (its owner revokes it and rejoins at once), and is
assigned in the follow-up rebalance. `reassigned_before_revoked` finds
plans that break that rule (the coordinator checks user assignors with it).
"""
from typing import NamedTuple, Optional, Sequence

from ..errors import InvalidConfigurationError
from ..structs import TopicPartition
from . import sticky
from .java_order import java_string_key

__all__ = ["EAGER", "COOPERATIVE", "ASSIGNOR_NAMES", "Subscription", "RangeAssignor",
           "RoundRobinAssignor", "StickyAssignor", "CooperativeStickyAssignor", "get_assignor",
           "member_order", "supported_protocols", "rebalance_protocol",
           "reassigned_before_revoked"]

EAGER = "eager"
COOPERATIVE = "cooperative"
# Kafka's RebalanceProtocol ids: when several are common to all assignors, the highest wins.
_PROTOCOL_RANK = {EAGER: 0, COOPERATIVE: 1}


class Subscription(NamedTuple):
    """One member's JoinGroup metadata, as the leader's assignor sees it.

    topics: the topics it subscribes to. owned_partitions: what it owned
    when it joined (cooperative members keep these while rebalancing; sticky
    assignors try to leave them in place). generation: the generation in
    which it owned them, -1 if unknown. group_instance_id: set for static
    members. user_data: opaque bytes for user assignors.
    """

    topics: Sequence[str]
    owned_partitions: Sequence[TopicPartition] = ()
    generation: int = -1
    group_instance_id: Optional[str] = None
    user_data: Optional[bytes] = None


def _member_key(member_id, subscription):
    # Kafka's MemberInfo.compareTo: static before dynamic; static by instance id, else by member id
    # (the member id also breaks a tie between equal instance ids, which Kafka leaves to map order).
    if subscription.group_instance_id is not None:
        return (0, java_string_key(subscription.group_instance_id), java_string_key(member_id))
    return (1, java_string_key(member_id))


def member_order(subscriptions):
    """The member ids of {member_id: Subscription} in Kafka's order for range and round-robin."""
    return sorted(subscriptions, key=lambda member: _member_key(member, subscriptions[member]))


class _Group:
    """The assignors' view of one rebalance: normalised subscriptions and the partitions to hand out.

    Topics that no member subscribes to, or that have no partitions, are left
    out, as Kafka's leader leaves out topics without metadata.
    """

    def __init__(self, partitions_per_topic, subscriptions):
        self.subscriptions = {}
        for member, sub in subscriptions.items():
            topics = sub.topics
            topics = frozenset([topics] if isinstance(topics, str) else topics)
            owned = tuple(dict.fromkeys(TopicPartition(*tp) for tp in sub.owned_partitions))
            generation = -1 if sub.generation is None else int(sub.generation)
            self.subscriptions[member] = sub._replace(topics=topics, owned_partitions=owned,
                                                      generation=generation)
        subscribed = set().union(*(s.topics for s in self.subscriptions.values()))
        self.partition_counts = {topic: count for topic, count in partitions_per_topic.items()
                                 if count > 0 and topic in subscribed}
        self.members = member_order(self.subscriptions)

    def plan(self, assignment):
        """The public shape: every member in Kafka's order, each list sorted."""
        return {member: sorted(assignment.get(member, ())) for member in self.members}


class RangeAssignor:
    """Kafka's RangeAssignor: each topic on its own, split into consecutive ranges.

    For a topic with n partitions and m subscribed members (in member
    order), the first n % m members get n // m + 1 consecutive partitions,
    the rest n // m. Topics with equal partition counts and subscribers are
    co-partitioned: partition p of each goes to the same member.
    """

    name = "range"
    supported_protocols = (EAGER,)

    def assign(self, partitions_per_topic, subscriptions):
        group = _Group(partitions_per_topic, subscriptions)
        subscribers = {topic: [] for topic in group.partition_counts}
        for member in group.members:
            for topic in group.subscriptions[member].topics:
                if topic in subscribers:
                    subscribers[topic].append(member)
        assignment = {member: [] for member in group.members}
        for topic, members in subscribers.items():
            per_member, extra = divmod(group.partition_counts[topic], len(members))
            start = 0
            for i, member in enumerate(members):
                end = start + per_member + (1 if i < extra else 0)
                assignment[member].extend(TopicPartition(topic, p) for p in range(start, end))
                start = end
        return group.plan(assignment)


class RoundRobinAssignor:
    """Kafka's RoundRobinAssignor: all partitions, sorted, dealt to members in turn.

    Partitions of all subscribed topics sorted by (topic, partition) go one
    by one to the next member in member order, skipping members that do not
    subscribe to the partition's topic.
    """

    name = "roundrobin"
    supported_protocols = (EAGER,)

    def assign(self, partitions_per_topic, subscriptions):
        group = _Group(partitions_per_topic, subscriptions)
        members = group.members
        topics_of = [group.subscriptions[member].topics for member in members]
        assignment = {member: [] for member in members}
        turn = 0
        for topic in sorted(group.partition_counts, key=java_string_key):
            for p in range(group.partition_counts[topic]):
                while topic not in topics_of[turn]:  # some member subscribes, so this stops
                    turn = (turn + 1) % len(members)
                assignment[members[turn]].append(TopicPartition(topic, p))
                turn = (turn + 1) % len(members)
        return group.plan(assignment)


class StickyAssignor:
    """Kafka's StickyAssignor: balanced, and moving as few owned partitions as possible.

    Reads each member's owned_partitions and generation (Kafka's sticky
    assignor carries them in its user data; here they are fields). Eager:
    members still give up everything before rejoining, the plan only decides
    who gets what back. See sticky.py for the algorithm.
    """

    name = "sticky"
    supported_protocols = (EAGER,)

    def assign(self, partitions_per_topic, subscriptions):
        group = _Group(partitions_per_topic, subscriptions)
        assignment, _ = sticky.assign(group.partition_counts, group.subscriptions)
        return group.plan(assignment)


class CooperativeStickyAssignor:
    """Kafka's CooperativeStickyAssignor: the sticky plan minus partitions still owned elsewhere.

    Every partition the sticky plan gives to a member other than the one
    that owns it is left out of this round's plan; its owner revokes it,
    rejoins at once, and the follow-up rebalance assigns it. A partition
    claimed by two members of the same generation waits the same way, until
    both have given it up.
    """

    name = "cooperative-sticky"
    supported_protocols = (COOPERATIVE, EAGER)

    def assign(self, partitions_per_topic, subscriptions):
        group = _Group(partitions_per_topic, subscriptions)
        assignment, transferring = sticky.assign(group.partition_counts, group.subscriptions)
        if transferring is None:
            transferring = _moving_while_claimed(group.subscriptions, assignment)
        withheld = {}
        for tp, member in transferring.items():
            withheld.setdefault(member, set()).add(tp)
        for member, partitions in withheld.items():
            assignment[member] = [tp for tp in assignment[member] if tp not in partitions]
        return group.plan(assignment)


def _moving_while_claimed(subscriptions, assignment):
    """{partition: member} for partitions the plan gives to a member that did not claim them
    while a member that did claim them loses them (Kafka's partitionsTransferringOwnership)."""
    claimed_by = {}
    for member, sub in subscriptions.items():
        for tp in sub.owned_partitions:
            claimed_by.setdefault(TopicPartition(*tp), []).append(member)
    moving = {}
    for member, partitions in assignment.items():
        for tp in partitions:
            claimants = claimed_by.get(tp)
            if claimants and member not in claimants:
                moving[tp] = member  # every claimant loses it: this member is the only one given it
    return moving


def reassigned_before_revoked(subscriptions, plan):
    """Partitions `plan` hands to a new owner in the same round a current owner still claims them.

    Empty for any plan valid under the cooperative protocol (what Kafka's
    ConsumerCoordinator checks for assignors other than cooperative-sticky).
    Returns a sorted list of TopicPartition.
    """
    assigned = {member: set(partitions) for member, partitions in plan.items()}
    for member in subscriptions:
        assigned.setdefault(member, set())
    return sorted(_moving_while_claimed(subscriptions, assigned))


_BUILT_IN = {cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor,
                                         CooperativeStickyAssignor)}
ASSIGNOR_NAMES = tuple(_BUILT_IN)
# Kafka configs name assignors by class (partition.assignment.strategy); accept those too.
_KAFKA_CLASS_NAMES = {
    **{f"org.apache.kafka.clients.consumer.{cls.__name__}": name for name, cls in _BUILT_IN.items()},
    **{cls.__name__: name for name, cls in _BUILT_IN.items()},
}


def get_assignor(assignor):
    """The assignor for a configured name, class, or object.

    A name is one of ASSIGNOR_NAMES (or Kafka's class name for it, e.g.
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"); a class
    is instantiated; any other object is returned as is if it has a string
    `name` and a callable `assign`. Anything else raises
    InvalidConfigurationError naming the valid choices.
    """
    if isinstance(assignor, str):
        name = _KAFKA_CLASS_NAMES.get(assignor.strip(), assignor.strip())
        if name in _BUILT_IN:
            return _BUILT_IN[name]()
        raise InvalidConfigurationError(
            f"unknown partition assignor {assignor!r}: use one of "
            f"{', '.join(repr(n) for n in ASSIGNOR_NAMES)}, or an object with a `name` and "
            f"an `assign(partitions_per_topic, subscriptions)` method")
    if isinstance(assignor, type):
        assignor = assignor()
    if not isinstance(getattr(assignor, "name", None), str) or not assignor.name \
            or not callable(getattr(assignor, "assign", None)):
        raise InvalidConfigurationError(
            f"{assignor!r} is not a partition assignor: it needs a non-empty string `name` and "
            f"an `assign(partitions_per_topic, subscriptions)` method (or use one of "
            f"{', '.join(repr(n) for n in ASSIGNOR_NAMES)})")
    supported_protocols(assignor)  # fail at configuration time, not at the first rebalance
    return assignor


def supported_protocols(assignor):
    """The rebalance protocols an assignor supports, preferred first (default: eager only)."""
    protocols = getattr(assignor, "supported_protocols", (EAGER,))
    if callable(protocols):
        protocols = protocols()
    protocols = (protocols,) if isinstance(protocols, str) else tuple(protocols)
    unknown = [p for p in protocols if p not in _PROTOCOL_RANK]
    if not protocols or unknown:
        raise InvalidConfigurationError(
            f"assignor {getattr(assignor, 'name', assignor)!r} declares supported_protocols "
            f"{protocols!r}: each must be {EAGER!r} or {COOPERATIVE!r}, at least one")
    return protocols


def rebalance_protocol(assignors):
    """The protocol a consumer configured with these assignors uses, as Kafka picks it.

    The most advanced protocol (cooperative over eager) that every assignor
    supports; InvalidConfigurationError if they share none.
    """
    assignors = list(assignors)
    if not assignors:
        raise InvalidConfigurationError("partition_assignment_strategy needs at least one assignor")
    common = set(supported_protocols(assignors[0]))
    for assignor in assignors[1:]:
        common &= set(supported_protocols(assignor))
    if not common:
        names = ", ".join(repr(getattr(a, "name", a)) for a in assignors)
        raise InvalidConfigurationError(
            f"the assignors {names} have no rebalance protocol in common: list only eager "
            f"assignors (range, roundrobin, sticky) or only cooperative ones (cooperative-sticky)")
    return max(common, key=_PROTOCOL_RANK.__getitem__)
