"""Properties of every assignor on random groups (hypothesis).

Groups: 1-20 members, 1-5 topics of 0-30 partitions, random subscriptions
(or one subscription shared by all), random previous ownership with
conflicting claims and generations, some static members.
"""
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from support.assignor_checks import (check_balanced, check_valid, cooperative_rounds, fully_balanced,
                                     moved, owner_map, reassigned_before_revoked, two_way_moves,
                                     valid_owners)
from streamlog.assignors import Subscription, TopicPartition, get_assignor

ALL = ("range", "roundrobin", "sticky", "cooperative-sticky")
# Some ids that sort differently in Java (UTF-16 code units) and Python (code points).
ODD_IDS = ["c\U0001F600", "c\uFFFF", "consumer-10", "consumer-9", "Aa", "BB", ""]


@st.composite
def groups(draw, same_subscriptions=None, max_members=20):
    topic_names = [f"t{i}" for i in range(draw(st.integers(1, 5)))]
    partitions = {t: draw(st.integers(0, 30)) for t in topic_names}
    ids = draw(st.lists(st.one_of(st.sampled_from(ODD_IDS), st.text(min_size=1, max_size=6),
                                  st.builds("m{:02d}".format, st.integers(0, 99))),
                        min_size=1, max_size=max_members, unique=True))
    same = draw(st.booleans()) if same_subscriptions is None else same_subscriptions
    shared = draw(st.lists(st.sampled_from(topic_names), min_size=1, unique=True))
    every_partition = [TopicPartition(t, p) for t in topic_names for p in range(partitions[t])]
    owned = {member: [] for member in ids}
    for tp in every_partition + [TopicPartition(topic_names[0], 99)]:  # and one that does not exist
        claimants = draw(st.lists(st.sampled_from(ids), max_size=2, unique=True))
        for member in claimants:
            owned[member].append(tp)
    subscriptions = {}
    for member in ids:
        topics = shared if same else draw(st.lists(st.sampled_from(topic_names), unique=True))
        subscriptions[member] = Subscription(
            topics=list(topics), owned_partitions=owned[member],
            generation=draw(st.integers(-1, 3)),
            group_instance_id=draw(st.one_of(st.none(), st.sampled_from(["i1", "i2", "i3", "i4"]))))
    return partitions, subscriptions


def plan_of(name, group):
    partitions, subscriptions = group
    return get_assignor(name).assign(partitions, subscriptions)


@settings(max_examples=150)
@given(groups())
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(group):
    partitions, subscriptions = group
    for name in ("range", "roundrobin", "sticky"):
        check_valid(partitions, subscriptions, plan_of(name, group))
    check_valid(partitions, subscriptions, plan_of("cooperative-sticky", group), complete=False)


@given(groups())
def test_plans_are_deterministic(group):
    for name in ALL:
        assert plan_of(name, group) == plan_of(name, group)


@given(groups())
def test_range_and_roundrobin_ignore_the_callers_member_order(group):
    partitions, subscriptions = group
    backwards = dict(reversed(list(subscriptions.items())))
    for name in ("range", "roundrobin"):
        assert get_assignor(name).assign(partitions, backwards) == plan_of(name, group)


@given(groups(same_subscriptions=True))
def test_identical_subscriptions_give_counts_within_one(group):
    for name in ("roundrobin", "sticky"):
        plan = plan_of(name, group)
        assert fully_balanced(plan), plan


@settings(max_examples=200)
@given(groups(same_subscriptions=False))
def test_sticky_leaves_no_partition_that_could_move_to_a_member_with_two_fewer(group):
    partitions, subscriptions = group
    check_balanced(subscriptions, plan_of("sticky", group))


@settings(max_examples=200)
@given(groups(same_subscriptions=True))
def test_sticky_moves_the_fewest_partitions_when_subscriptions_are_identical(group):
    """With P partitions and M members, P % M members may keep ceil(P/M), the rest floor(P/M):
    the fewest moves keep the larger quota for members that own at least that many."""
    partitions, subscriptions = group
    plan = plan_of("sticky", group)
    topics = next(iter(subscriptions.values())).topics
    total = sum(partitions[t] for t in topics)
    min_quota, larger_quotas = divmod(total, len(subscriptions))
    previous = {tp: m for tp, m in valid_owners(partitions, subscriptions).items() if tp.topic in topics}
    owned_counts = [sum(1 for m in previous.values() if m == member) for member in subscriptions]
    fewest = sum(max(0, c - min_quota) for c in owned_counts) \
        - min(larger_quotas, sum(1 for c in owned_counts if c > min_quota))
    assert len(moved(previous, plan)) == fewest


@settings(max_examples=150)
@given(groups(), st.sampled_from(["roundrobin", "sticky"]))
def test_sticky_returns_a_valid_balanced_ownership_unchanged(group, source):
    partitions, subscriptions = group
    current = plan_of(source, group)
    assume(not _balance_violations(subscriptions, current))
    owning = {m: s._replace(owned_partitions=current[m], generation=5)
              for m, s in subscriptions.items()}
    assert get_assignor("sticky").assign(partitions, owning) == current


def _balance_violations(subscriptions, plan):
    try:
        check_balanced(subscriptions, plan)
        return False
    except AssertionError:
        return True


@settings(max_examples=150)
@given(groups())
def test_sticky_never_moves_partitions_of_a_topic_both_ways_between_two_members(group):
    partitions, subscriptions = group
    previous = valid_owners(partitions, subscriptions)
    assert not two_way_moves(previous, plan_of("sticky", group))


@settings(max_examples=150)
@given(groups())
def test_cooperative_never_gives_a_partition_away_while_its_owner_still_claims_it(group):
    partitions, subscriptions = group
    cooperative = plan_of("cooperative-sticky", group)
    assert reassigned_before_revoked(subscriptions, cooperative) == []
    sticky = plan_of("sticky", group)
    claimed = {}
    for member, s in subscriptions.items():
        for tp in s.owned_partitions:
            claimed.setdefault(tp, set()).add(member)
    for member, partitions_of in sticky.items():
        assert set(cooperative[member]) <= set(partitions_of)
        for tp in set(partitions_of) - set(cooperative[member]):  # withheld for one round
            assert claimed.get(tp, set()) - {member}, f"{tp} withheld from {member} for no owner"


@settings(max_examples=100)
@given(groups())
def test_cooperative_rounds_settle_on_a_valid_balanced_plan(group):
    partitions, subscriptions = group
    plans = cooperative_rounds(get_assignor("cooperative-sticky"), partitions, subscriptions,
                               max_rounds=5)  # Kafka's test allows four follow-up rebalances
    check_valid(partitions, subscriptions, plans[-1])
    check_balanced(subscriptions, plans[-1])


@given(groups(same_subscriptions=True))
def test_cooperative_first_round_keeps_every_partition_that_stays(group):
    """What the sticky plan leaves with its owner is in the first cooperative round already."""
    partitions, subscriptions = group
    sticky = owner_map(plan_of("sticky", group))
    cooperative = owner_map(plan_of("cooperative-sticky", group))
    for tp, owner in valid_owners(partitions, subscriptions).items():
        if sticky.get(tp) == owner:
            assert cooperative.get(tp) == owner
