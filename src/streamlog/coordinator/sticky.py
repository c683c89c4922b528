"""The sticky assignment algorithm behind the "sticky" and "cooperative-sticky" assignors.

Owns Kafka's AbstractStickyAssignor logic, re-written: resolving the
partitions members claim to own, the constrained algorithm for groups whose
members all subscribe to the same topics, and the general algorithm for the
rest. Goals, in order: (1) balance -- partition counts differ by at most one,
or no partition could move to an eligible member that has two or more fewer;
(2) stickiness -- as few partitions as possible change owner.

Claims (`resolve_claims`). Each member's subscription lists the partitions it
owned and the generation it owned them in (-1 = unknown). A partition claimed
by several members goes to the one with the highest generation; if two or
more share that highest generation the claim is invalid for all of them (it
is a "contested" partition; a split brain or a zombie, nobody may keep it).
Kafka applies the rule pairwise in map order, so with three or more claimants
its outcome can depend on the order; here it is applied to the highest
generation at once, which is what the pairwise rule means for two claimants.

Constrained algorithm (`_assign_constrained`), P partitions, M members:
min_quota = P // M, max_quota = ceil(P / M), and exactly P % M members end
with max_quota. Members are visited in Kafka's HashMap order (java_order);
each keeps its owned partitions, sorted by (partition, topic), up to its
quota: max_quota while fewer than P % M members have taken it, else
min_quota. Partitions beyond the quota are given up. The partitions left,
sorted by (topic, partition), are dealt round-robin to members under
min_quota (sorted by member id), then one each to members at min_quota
while max_quota places remain.

General algorithm (`_GeneralAssignment`): keep every owned partition the
member still subscribes to; give each unowned partition (topics with the
fewest subscribers first) to the least-loaded subscribed member (fewest
partitions, then member id); then, while unbalanced, move partitions from
members with 2+ more than some other subscriber of the topic to the
least-loaded subscriber -- back to a previous owner from an older generation
if that one has 2+ fewer -- and keep the result only if it is more balanced
than before (sum of count differences over all pairs), else revert.

Cooperative support: `assign` also returns the partitions handed to a member
other than their valid owner (or that were contested), which the
cooperative-sticky assignor withholds until their owners have revoked them;
the general algorithm leaves that to the caller (None), as in Kafka.

Deliberate deviations from Kafka, each for a case Kafka gets wrong or
cannot meet: claims on partitions that do not exist (beyond the topic's
count) are ignored (Kafka would assign them); a member listing a partition
twice claims it once (Kafka invalidates it against itself); "all
subscriptions equal" is plain set equality (Kafka's check is fooled when the
first member it visits subscribes to nothing, and then assigns partitions to
that member); a partition is moved back to a previous owner only if that
owner still subscribes to the topic (Kafka does not check; a stale member
that changed its subscription could get a partition it does not read); the
highest generation is that of this call's members (Kafka keeps it in the
assignor instance across calls).
"""
from bisect import bisect_left, insort
from collections import deque

from ..structs import TopicPartition
from .java_order import (HashSetOrder, hashmap_order, java_string_hash, java_string_key,
                         topic_partition_hash)

__all__ = ["NO_GENERATION", "assign", "resolve_claims"]

NO_GENERATION = -1


def assign(partition_counts, subscriptions):
    """The sticky plan and the partitions changing owner.

    partition_counts: {topic: partitions} for the topics some member subscribes
    to (count > 0). subscriptions: {member_id: Subscription} with `topics` a
    frozenset, `owned_partitions` a tuple of distinct TopicPartitions and
    `generation` an int, in the caller's order.

    Returns (assignment, transferring): assignment maps every member to a
    list of TopicPartitions (unsorted); transferring maps each partition
    assigned to a member other than its valid previous owner (or contested)
    to that member, or is None (general algorithm: the caller compares the
    plan with the claims).
    """
    if not subscriptions:
        return {}, {}
    visit_order = hashmap_order(subscriptions, java_string_hash)
    owned, contested = resolve_claims(partition_counts, subscriptions, visit_order)
    topic_sets = {sub.topics for sub in subscriptions.values()}
    if len(topic_sets) == 1:
        return _assign_constrained(partition_counts, owned, contested, visit_order)
    return _GeneralAssignment(partition_counts, subscriptions, owned, visit_order).build(), None


def resolve_claims(partition_counts, subscriptions, visit_order):
    """({member: [owned partitions it may keep]}, {contested partitions}).

    Only partitions that exist count. The highest generation wins; a tie at
    the highest generation invalidates the partition for every claimant.
    """
    best = {}  # partition -> [generation, claimants at that generation]
    for member in visit_order:
        generation = subscriptions[member].generation
        for tp in subscriptions[member].owned_partitions:
            count = partition_counts.get(tp.topic)
            if count is None or not 0 <= tp.partition < count:
                continue
            claim = best.get(tp)
            if claim is None or generation > claim[0]:
                best[tp] = [generation, [member]]
            elif generation == claim[0]:
                claim[1].append(member)
    owned = {member: [] for member in subscriptions}
    contested = set()
    for tp, (_, claimants) in best.items():
        if len(claimants) == 1:
            owned[claimants[0]].append(tp)
        else:
            contested.add(tp)
    return owned, contested


def _sorted_partitions(partition_counts, topics):
    return [TopicPartition(topic, p) for topic in topics for p in range(partition_counts[topic])]


def _assign_constrained(partition_counts, owned, contested, visit_order):
    """Kafka's ConstrainedAssignmentBuilder: every member subscribes to every topic."""
    total = sum(partition_counts.values())
    min_quota, members_over_min_expected = divmod(total, len(visit_order))
    max_quota = min_quota + (1 if members_over_min_expected else 0)
    members_over_min = 0
    assignment = {member: [] for member in visit_order}
    kept = set()
    given_up = {}      # partition -> the valid owner that could not keep it
    under_min = []     # members still below min_quota
    at_min = []        # members at min_quota that may still take one more

    for member in visit_order:
        mine = sorted(owned[member], key=lambda tp: (tp.partition, tp.topic))
        if len(mine) < min_quota:
            keep = mine
            under_min.append(member)
        elif len(mine) >= max_quota and members_over_min < members_over_min_expected:
            keep = mine[:max_quota]
            members_over_min += 1
            if members_over_min == members_over_min_expected:
                at_min.clear()  # every max_quota place is taken
        else:
            keep = mine[:min_quota]
            if members_over_min < members_over_min_expected:
                at_min.append(member)
        assignment[member].extend(keep)
        kept.update(keep)
        for tp in mine[len(keep):]:
            given_up[tp] = member

    under_min.sort(key=java_string_key)
    at_min.sort(key=java_string_key)
    at_min = deque(at_min)
    transferring = {}
    position = 0  # the next member of under_min to deal to, cycling
    for tp in _sorted_partitions(partition_counts, sorted(partition_counts, key=java_string_key)):
        if tp in kept:
            continue
        from_under_min = True
        if position == len(under_min):
            if under_min:
                position = 0
            else:
                assert at_min, "no member left to take a partition: quota arithmetic broken"
                from_under_min = False
        member = under_min[position] if from_under_min else at_min.popleft()
        received = assignment[member]
        received.append(tp)
        if tp in contested or given_up.get(tp, member) != member:
            transferring[tp] = member
        if from_under_min and len(received) == min_quota:
            del under_min[position]  # it reached min_quota; it may take one more later
            at_min.append(member)
        elif from_under_min:
            position += 1
    assert all(len(tps) in (min_quota, max_quota) for tps in assignment.values())
    return assignment, transferring


class _Movements:
    """Where partitions moved during balancing, to move one back rather than swap two.

    Kafka's PartitionMovements: for each moved partition its (first owner,
    current owner); per topic, the partitions moved between each pair. When
    a partition is to move from A to B while another of the same topic
    earlier moved from B to A, that one goes back instead, so no topic has
    partitions moving both ways between two members.
    """

    def __init__(self):
        self.pair_of = {}       # partition -> (source, destination)
        self.by_topic = {}      # topic -> {(source, destination): HashSetOrder of partitions}

    def _forget(self, tp):
        pair = self.pair_of.pop(tp)
        pairs = self.by_topic[tp.topic]
        pairs[pair].remove(tp)
        if not pairs[pair]:
            del pairs[pair]
            if not pairs:
                del self.by_topic[tp.topic]
        return pair

    def _remember(self, tp, pair):
        self.pair_of[tp] = pair
        pairs = self.by_topic.setdefault(tp.topic, {})
        if pair not in pairs:
            pairs[pair] = HashSetOrder(topic_partition_hash)
        pairs[pair].add(tp)

    def moved(self, tp, source, destination):
        if tp in self.pair_of:
            first_owner, current_owner = self._forget(tp)
            assert current_owner == source
            if first_owner != destination:  # back home needs no record
                self._remember(tp, (first_owner, destination))
        else:
            self._remember(tp, (source, destination))

    def partition_to_move(self, tp, source, destination):
        pairs = self.by_topic.get(tp.topic)
        if pairs is None:
            return tp
        if tp in self.pair_of:
            source = self.pair_of[tp][0]
        reverse = pairs.get((destination, source))
        return tp if reverse is None else reverse.first()


class _GeneralAssignment:
    """Kafka's GeneralAssignmentBuilder: members subscribe to different topics.

    Members are ordered by (number of partitions, member id) in `keys`, a
    sorted list of ints count * M + rank (rank = position in member-id order),
    kept sorted with bisect: Kafka's TreeSet. Members that can neither gain
    nor lose a partition (they hold everything they could hold, all of topics
    with one subscriber) sit out the balancing, as in Kafka.
    """

    def __init__(self, partition_counts, subscriptions, owned, visit_order):
        self.partition_counts = partition_counts
        self.subscriptions = subscriptions
        self.owned = owned
        self.visit_order = visit_order
        by_id = sorted(subscriptions, key=java_string_key)
        self.member_at = by_id
        self.rank = {member: i for i, member in enumerate(by_id)}
        self.n = len(by_id)
        self.topics_of = {m: [t for t in sub.topics if t in partition_counts]
                          for m, sub in subscriptions.items()}
        self.subscribers = {topic: [] for topic in partition_counts}
        for member, topics in self.topics_of.items():
            for topic in topics:
                self.subscribers[topic].append(member)
        self.max_size = {m: sum(partition_counts[t] for t in topics)
                         for m, topics in self.topics_of.items()}
        self.current = {member: set() for member in subscriptions}
        self.owner = {}
        # per topic: member -> how many of the topic's partitions it holds (for is_balanced)
        self.holders = {topic: {} for topic in partition_counts}
        self.keys = []
        self.movements = _Movements()
        self.revocation_required = False

    # -- the (count, member id) order -------------------------------------

    def _key(self, member):
        return len(self.current[member]) * self.n + self.rank[member]

    def _unlist(self, member):
        keys = self.keys
        del keys[bisect_left(keys, self._key(member))]

    def _least_loaded_subscriber(self, topic):
        n, member_at, topics_of = self.n, self.member_at, self.topics_of
        for key in self.keys:
            member = member_at[key % n]
            if topic in topics_of[member]:
                return member
        raise AssertionError(f"no member left that subscribes to {topic}")

    def _give(self, tp, member):
        """Hand an unowned partition to member (it is listed in keys)."""
        self._unlist(member)
        self.current[member].add(tp)
        insort(self.keys, self._key(member))
        self.owner[tp] = member
        holders = self.holders[tp.topic]
        holders[member] = holders.get(member, 0) + 1

    def _transfer(self, tp, destination):
        source = self.owner[tp]
        self.movements.moved(tp, source, destination)
        self._unlist(source)
        self._unlist(destination)
        self.current[source].remove(tp)
        self.current[destination].add(tp)
        insort(self.keys, self._key(source))
        insort(self.keys, self._key(destination))
        self.owner[tp] = destination
        holders = self.holders[tp.topic]
        holders[source] -= 1
        if not holders[source]:
            del holders[source]
        holders[destination] = holders.get(destination, 0) + 1

    def _move(self, tp, destination):
        source = self.owner[tp]
        self._transfer(self.movements.partition_to_move(tp, source, destination), destination)

    # -- building -----------------------------------------------------------

    def build(self):
        previous_owner = self._older_generation_owners()
        for member, partitions in self.owned.items():
            topics = self.topics_of[member]
            for tp in partitions:
                if tp.topic in topics:
                    self.current[member].add(tp)
                    self.owner[tp] = member
                    holders = self.holders[tp.topic]
                    holders[member] = holders.get(member, 0) + 1
                else:
                    self.revocation_required = True  # the member stopped reading the topic
        self.keys = sorted(self._key(member) for member in self.subscriptions)
        topic_order = sorted(self.partition_counts,
                             key=lambda t: (len(self.subscribers[t]), java_string_key(t)))
        all_partitions = _sorted_partitions(self.partition_counts, topic_order)
        unassigned = [tp for tp in all_partitions if tp not in self.owner]
        self._balance(previous_owner, all_partitions, unassigned)
        return {member: list(partitions) for member, partitions in self.current.items()}

    def _older_generation_owners(self):
        """partition -> owner in the newest generation older than the group's newest."""
        newest = max([NO_GENERATION] + [s.generation for s in self.subscriptions.values()])
        previous = {}
        for member in self.visit_order:  # first wins a tie, as in Kafka's map order
            generation = self.subscriptions[member].generation
            if generation >= newest:
                continue
            for tp in self.subscriptions[member].owned_partitions:
                if tp not in previous or generation > previous[tp][1]:
                    previous[tp] = (member, generation)
        return {tp: member for tp, (member, _) in previous.items()}

    def _balance(self, previous_owner, all_partitions, unassigned):
        initializing = self.keys[-1] < self.n  # the fullest member holds nothing
        for tp in unassigned:
            self._give(tp, self._least_loaded_subscriber(tp.topic))

        # Only topics with 2+ subscribers and members that can gain or lose take part.
        movable_topics = {t for t, members in self.subscribers.items() if len(members) >= 2}
        movable = [tp for tp in all_partitions if tp.topic in movable_topics]
        newly_assigned = [tp for tp in unassigned if tp.topic in movable_topics]
        for member in self.subscriptions:
            if not self._can_change(member, movable_topics):
                self._unlist(member)
        taking_part = [self.member_at[key % self.n] for key in self.keys]
        before = {member: set(self.current[member]) for member in taking_part}

        if not self.revocation_required:
            # nothing must be revoked: first try to balance by moving only the new partitions
            self._reassign(newly_assigned, previous_owner)
        reassigned = self._reassign(movable, previous_owner)

        if not initializing and reassigned and self._score(self.current[m] for m in taking_part) \
                >= self._score(before.values()):
            for member, partitions in before.items():  # no better: keep the stickier one
                self.current[member] = partitions
                for tp in partitions:
                    self.owner[tp] = member

    def _can_change(self, member, movable_topics):
        if len(self.current[member]) < self.max_size[member]:
            return True
        return any(tp.topic in movable_topics for tp in self.current[member])

    @staticmethod
    def _score(partition_sets):
        """Sum over all member pairs of the difference in partition counts (0 = even)."""
        counts = sorted(len(partitions) for partitions in partition_sets)
        last = len(counts) - 1
        return sum(count * (2 * i - last) for i, count in enumerate(counts))

    def _is_balanced(self):
        """True if counts differ by at most one, or no partition could move to a member 2+ lighter."""
        keys, n = self.keys, self.n
        highest = keys[-1] // n
        if keys[0] // n >= highest - 1:
            return True
        peak_of_topic = {}  # the most partitions held by any holder of the topic
        current, holders = self.current, self.holders
        for key in keys:  # lightest first
            count = key // n
            if count >= highest - 1:
                return True  # nobody holds 2+ more than this member or any after it
            member = self.member_at[key % n]
            if count == self.max_size[member]:
                continue
            for topic in self.topics_of[member]:
                peak = peak_of_topic.get(topic)
                if peak is None:
                    peak = peak_of_topic[topic] = max(
                        (len(current[m]) for m in holders[topic]), default=0)
                if peak >= count + 2:
                    return False
        return True

    def _reassign(self, partitions, previous_owner):
        """Kafka's performReassignments; True if any partition moved."""
        current, subscribers, topics_of, n = self.current, self.subscribers, self.topics_of, self.n
        listed = {self.member_at[key % n] for key in self.keys}
        moved_any = False
        while True:
            moved = False
            for tp in partitions:
                if self._is_balanced():
                    break
                holder_count = len(current[self.owner[tp]])
                earlier = previous_owner.get(tp)
                if earlier is not None and earlier in listed and tp.topic in topics_of[earlier] \
                        and holder_count > len(current[earlier]) + 1:
                    self._move(tp, earlier)
                    moved = True
                    continue
                if holder_count <= self.keys[0] // n + 1:
                    continue  # nobody anywhere has 2+ fewer
                if holder_count > min(len(current[m]) for m in subscribers[tp.topic]) + 1:
                    self._move(tp, self._least_loaded_subscriber(tp.topic))
                    moved = True
            moved_any = moved_any or moved
            if not moved:
                return moved_any
