"""Checks on partition-assignment plans, shared by the assignor tests (and usable by coordinator tests).

Written independently of streamlog.coordinator so that the tests do not
grade the assignors with their own code: validity, balance, previous owners,
stickiness, and the cooperative protocol's rounds.
"""
from streamlog.assignors import Subscription, reassigned_before_revoked
from streamlog.structs import TopicPartition


def tps(text):
    """'t1-0, t1-3' -> [TopicPartition('t1', 0), TopicPartition('t1', 3)] (Kafka's toString form)."""
    result = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        topic, _, partition = item.rpartition("-")
        result.append(TopicPartition(topic, int(partition)))
    return result


def sub(topics="", owned="", generation=-1, instance=None):
    """A Subscription from comma-separated topics and owned partitions."""
    return Subscription(topics=[t.strip() for t in topics.split(",") if t.strip()],
                        owned_partitions=tps(owned) if isinstance(owned, str) else list(owned),
                        generation=generation, group_instance_id=instance)


def subscribed_partitions(partitions_per_topic, subscriptions):
    topics = set().union(*(set(s.topics) for s in subscriptions.values())) if subscriptions else set()
    return {TopicPartition(t, p) for t, n in partitions_per_topic.items() if t in topics
            for p in range(n)}


def check_valid(partitions_per_topic, subscriptions, plan, complete=True):
    """Every member has a sorted list of distinct partitions of topics it subscribes to, no
    partition goes to two members, and (complete) every subscribed partition is assigned."""
    assert set(plan) == set(subscriptions), \
        f"plan members {sorted(plan)} != subscribed members {sorted(subscriptions)}"
    seen = {}
    for member, partitions in plan.items():
        assert partitions == sorted(partitions), f"{member}'s list is not sorted: {partitions}"
        for tp in partitions:
            assert isinstance(tp, TopicPartition), tp
            assert tp.topic in subscriptions[member].topics, \
                f"{tp} given to {member}, which subscribes to {subscriptions[member].topics}"
            assert 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0), f"{tp} does not exist"
            assert tp not in seen, f"{tp} given to both {seen[tp]} and {member}"
            seen[tp] = member
    if complete:
        missing = subscribed_partitions(partitions_per_topic, subscriptions) - set(seen)
        assert not missing, f"not assigned: {sorted(missing)}"


def balance_violations(subscriptions, plan):
    """(partition, from, to) moves that would help: `to` subscribes and holds 2+ fewer."""
    found = []
    for heavy, partitions in plan.items():
        for light, light_partitions in plan.items():
            if len(partitions) >= len(light_partitions) + 2:
                found.extend((tp, heavy, light) for tp in partitions
                             if tp.topic in subscriptions[light].topics)
    return found


def check_balanced(subscriptions, plan):
    """Kafka's balance goal: no partition could move to a subscribed member with 2+ fewer."""
    violations = balance_violations(subscriptions, plan)
    assert not violations, f"could move {violations[:5]} for better balance: {counts(plan)}"


def fully_balanced(plan):
    sizes = [len(p) for p in plan.values()]
    return not sizes or max(sizes) - min(sizes) <= 1


def counts(plan):
    return {member: len(partitions) for member, partitions in plan.items()}


def valid_owners(partitions_per_topic, subscriptions):
    """{partition: member} of previous owners a sticky assignor must respect: a claim on an
    existing partition wins if it is the only one at the highest generation claiming it."""
    claims = {}
    for member, s in subscriptions.items():
        for tp in set(map(lambda p: TopicPartition(*p), s.owned_partitions)):
            if 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                claims.setdefault(tp, []).append((s.generation, member))
    owners = {}
    for tp, claimants in claims.items():
        top = max(g for g, _ in claimants)
        at_top = [m for g, m in claimants if g == top]
        if len(at_top) == 1:
            owners[tp] = at_top[0]
    return owners


def owner_map(plan):
    return {tp: member for member, partitions in plan.items() for tp in partitions}


def moved(previous_owners, plan):
    """Partitions whose previous owner does not hold them in the plan."""
    now = owner_map(plan)
    return {tp: (was, now.get(tp)) for tp, was in previous_owners.items() if now.get(tp) != was}


def two_way_moves(previous_owners, plan):
    """(topic, a, b) where partitions of one topic moved both from a to b and from b to a."""
    pairs = {(tp.topic, a, b) for tp, (a, b) in moved(previous_owners, plan).items() if b is not None}
    return sorted((t, a, b) for t, a, b in pairs if (t, b, a) in pairs and a < b)


def revocations(subscriptions, plan):
    """{member: partitions it owned and must give up}."""
    gone = {}
    for member, s in subscriptions.items():
        lost = set(map(lambda p: TopicPartition(*p), s.owned_partitions)) - set(plan.get(member, ()))
        if lost:
            gone[member] = lost
    return gone


def cooperative_rounds(assignor, partitions_per_topic, subscriptions, generation=1, max_rounds=5):
    """Run the cooperative protocol until no member must revoke anything.

    Each round checks that no partition is given to a new owner while a
    current owner still claims it; members then own what they were given
    (in `generation`) and rejoin. Returns the list of plans, first to last.
    """
    plans = []
    while True:
        plan = assignor.assign(partitions_per_topic, subscriptions)
        early = reassigned_before_revoked(subscriptions, plan)
        assert not early, f"round {len(plans) + 1} hands {early} over before their owners revoke"
        plans.append(plan)
        if not revocations(subscriptions, plan):
            return plans
        assert len(plans) < max_rounds, f"still revoking after {max_rounds} rounds: {plans}"
        subscriptions = {m: s._replace(owned_partitions=plan[m], generation=generation)
                         for m, s in subscriptions.items()}
