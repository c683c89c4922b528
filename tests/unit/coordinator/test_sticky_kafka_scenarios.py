"""Sticky and cooperative-sticky give Kafka's results: scenarios of Kafka's own tests, as data.

A scenario is a list of rounds (rebalances). Each round lists the members'
subscriptions -- topics, owned partitions and the generation they were owned
in -- and what Kafka's test expects: an exact plan, the partitions that
change owner (the cooperative assignor withholds those for one round), or a
property. `had(...)` means "owns what it was assigned in an earlier round".

How a round runs: "sticky" assigns once. "cooperative-sticky" runs the
protocol until nobody has to revoke anything (each follow-up round: members
own what they were given, generation 1), checking on every round that no
partition goes to a new owner while its owner still claims it -- as Kafka's
CooperativeStickyAssignorTest does in verifyValidityAndBalance. `expect` is
checked on the settled plan, `first` on the first round's plan.

Every round is checked for validity (members get only subscribed topics, no
partition twice, every partition assigned) and Kafka's balance rule (no
partition could move to a subscribed member with 2+ fewer) unless the Kafka
test does not check them. Rack-aware expectations are left out (streamlog
has no racks); where Kafka tests a rack variant, the row keeps what Kafka
expects when racks do not apply.
"""
import random
from typing import NamedTuple

import pytest

from support.assignor_checks import (check_balanced, check_valid, cooperative_rounds,
                                     fully_balanced, moved, two_way_moves, tps, valid_owners)
from streamlog.assignors import Subscription, get_assignor

STICKY, COOP = "sticky", "cooperative-sticky"
BOTH = (STICKY, COOP)
VALID, BALANCED, FULLY, STICKINESS = "valid", "balanced", "fully_balanced", "sticky"
DEFAULT_CHECKS = (VALID, BALANCED)


class Had(NamedTuple):
    """Owned partitions = the member's settled plan in round `round` (0: the previous round)."""
    round: int = 0


def member(topics="", owned="", generation=-1):
    return Subscription(topics=[t.strip() for t in topics.split(",") if t.strip()],
                        owned_partitions=tps(owned) if isinstance(owned, str) else owned,
                        generation=generation)


def had(topics, generation=1, round=0):
    return member(topics, Had(round), generation)


class Round(NamedTuple):
    members: dict
    partitions: dict = None      # partition counts, if they changed since the previous round
    expect: dict = None          # {member: partitions} on the settled plan (may list only some)
    first: dict = None           # {assignor: {member: partitions}} on the first round's plan
    transferring: dict = None    # {partition: new owner} the cooperative assignor must withhold
    checks: tuple = DEFAULT_CHECKS
    relations: tuple = ()        # see check_relation


class Scenario(NamedTuple):
    kafka: str
    partitions: dict
    rounds: list
    assignors: tuple = BOTH


def each(prefix, digits, numbers):
    return [f"{prefix}{n:0{digits}d}" for n in numbers]


T1T2 = "topic1, topic2"
ALL3 = "t1, t2, t3"

SCENARIOS = [
    Scenario("AbstractStickyAssignorTest.testOneConsumerNoTopic", {}, [
        Round({"consumer": member("")}, expect={"consumer": ""}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    Scenario("AbstractStickyAssignorTest.testOneConsumerNonexistentTopic", {"topic": 0}, [
        Round({"consumer": member("topic")}, expect={"consumer": ""}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    Scenario("AbstractStickyAssignorTest.testOneConsumerOneTopic", {"topic": 3}, [
        Round({"consumer": member("topic")}, expect={"consumer": "topic-0, topic-1, topic-2"},
              transferring={}, checks=(VALID, BALANCED, FULLY))]),
    # it claims partitions of a topic that is gone
    Scenario("AbstractStickyAssignorTest.testOnlyAssignsPartitionsFromSubscribedTopics", {"topic": 2}, [
        Round({"consumer": member("topic", "topic-0, topic-1, other-0, other-1", 1)},
              expect={"consumer": "topic-0, topic-1"}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    Scenario("AbstractStickyAssignorTest.testOneConsumerMultipleTopics", {"topic1": 1, "topic2": 2}, [
        Round({"consumer": member(T1T2)}, expect={"consumer": "topic1-0, topic2-0, topic2-1"},
              transferring={}, checks=(VALID, BALANCED, FULLY))]),
    Scenario("AbstractStickyAssignorTest.testTwoConsumersOneTopicOnePartition", {"topic": 1}, [
        Round({"consumer1": member("topic"), "consumer2": member("topic")}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    Scenario("AbstractStickyAssignorTest.testTwoConsumersOneTopicTwoPartitions", {"topic": 2}, [
        Round({"consumer1": member("topic"), "consumer2": member("topic")},
              expect={"consumer1": "topic-0", "consumer2": "topic-1"}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    # subscriptions differ: the general algorithm
    Scenario("AbstractStickyAssignorTest.testMultipleConsumersMixedTopicSubscriptions",
             {"topic1": 3, "topic2": 2}, [
        Round({"consumer1": member("topic1"), "consumer2": member(T1T2),
               "consumer3": member("topic1")},
              expect={"consumer1": "topic1-0, topic1-2", "consumer2": "topic2-0, topic2-1",
                      "consumer3": "topic1-1"}, checks=(VALID, BALANCED, FULLY))]),
    Scenario("AbstractStickyAssignorTest.testTwoConsumersTwoTopicsSixPartitions",
             {"topic1": 3, "topic2": 3}, [
        Round({"consumer1": member(T1T2), "consumer2": member(T1T2)},
              expect={"consumer1": "topic1-0, topic1-2, topic2-1",
                      "consumer2": "topic1-1, topic2-0, topic2-2"}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    # 5 partitions, 2 members: one owns min quota (2) and must end at max quota (3)
    Scenario("AbstractStickyAssignorTest.testConsumerOwningMinQuotaExpectedMaxQuota",
             {"topic1": 2, "topic2": 3}, [
        Round({"consumer1": member(T1T2, "topic1-0, topic2-1", 1),
               "consumer2": member(T1T2, "topic1-1, topic2-2", 1)},
              expect={"consumer1": "topic1-0, topic2-0, topic2-1",
                      "consumer2": "topic1-1, topic2-2"}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    # two members own max quota (2) but only one may keep it; Kafka's map order picks consumer2
    Scenario("AbstractStickyAssignorTest.testMaxQuotaConsumerMoreThanNumExpectedMaxCapacityMembers",
             {"topic1": 2, "topic2": 2}, [
        Round({"consumer1": member(T1T2, "topic1-0, topic2-0", 1),
               "consumer2": member(T1T2, "topic1-1, topic2-1", 1),
               "consumer3": member(T1T2, "", 1)},
              transferring={"topic2-0": "consumer3"},
              expect={"consumer1": "topic1-0", "consumer2": "topic1-1, topic2-1",
                      "consumer3": "topic2-0"}, checks=(VALID, BALANCED, FULLY))]),
    Scenario("AbstractStickyAssignorTest.testAllConsumersAreUnderMinQuota",
             {"topic1": 2, "topic2": 3}, [
        Round({"consumer1": member(T1T2, "topic1-0", 1), "consumer2": member(T1T2, "topic1-1", 1),
               "consumer3": member(T1T2, "", 1)}, transferring={},
              expect={"consumer1": "topic1-0, topic2-1", "consumer2": "topic1-1, topic2-2",
                      "consumer3": "topic2-0"}, checks=(VALID, BALANCED, FULLY))]),
    Scenario("AbstractStickyAssignorTest.testAddRemoveConsumerOneTopic", {"topic": 3}, [
        Round({"consumer1": member("topic")}, expect={"consumer1": "topic-0, topic-1, topic-2"},
              checks=(VALID, BALANCED, FULLY)),
        Round({"consumer1": had("topic"), "consumer2": member("topic", "", 1)},
              transferring={"topic-2": "consumer2"},
              expect={"consumer1": "topic-0, topic-1", "consumer2": "topic-2"},
              checks=(VALID, BALANCED, FULLY)),
        Round({"consumer2": had("topic")}, expect={"consumer2": "topic-0, topic-1, topic-2"},
              transferring={}, checks=(VALID, BALANCED, FULLY))]),
    # each member ends with an equal share of each topic
    Scenario("AbstractStickyAssignorTest.testTopicBalanceAfterReassignment",
             {"topic1": 12, "topic2": 12}, [
        Round({"consumer1": member(T1T2)}, transferring={}, checks=(VALID, BALANCED, FULLY),
              relations=(("topic_counts", {"topic1": 12, "topic2": 12}),)),
        Round({"consumer1": had(T1T2), "consumer2": member(T1T2, "", 1)},
              checks=(VALID, BALANCED, FULLY),
              relations=(("topic_counts", {"topic1": 6, "topic2": 6}),)),
        Round({"consumer1": had(T1T2), "consumer2": had(T1T2), "consumer3": member(T1T2, "", 1),
               "consumer4": member(T1T2, "", 1)}, checks=(VALID, BALANCED, FULLY),
              relations=(("topic_counts", {"topic1": 3, "topic2": 3}),)),
        Round({"consumer3": had(T1T2), "consumer4": had(T1T2)}, transferring={},
              checks=(VALID, BALANCED, FULLY),
              relations=(("topic_counts", {"topic1": 6, "topic2": 6}),))]),
    Scenario("AbstractStickyAssignorTest.testAddRemoveTwoConsumersTwoTopics",
             {"topic1": 3, "topic2": 4}, [
        Round({"consumer1": member(T1T2), "consumer2": member(T1T2)}, transferring={},
              expect={"consumer1": "topic1-0, topic1-2, topic2-1, topic2-3",
                      "consumer2": "topic1-1, topic2-0, topic2-2"}, checks=(VALID, BALANCED, FULLY)),
        Round({"consumer1": had(T1T2), "consumer2": had(T1T2), "consumer3": member(T1T2, "", 1),
               "consumer4": member(T1T2, "", 1)},
              transferring={"topic1-2": "consumer3", "topic2-3": "consumer3",
                            "topic2-2": "consumer4"},
              expect={"consumer1": "topic1-0, topic2-1", "consumer2": "topic1-1, topic2-0",
                      "consumer3": "topic1-2, topic2-3", "consumer4": "topic2-2"},
              checks=(VALID, BALANCED, FULLY)),
        Round({"consumer3": had(T1T2), "consumer4": had(T1T2)},
              expect={"consumer3": "topic1-0, topic1-2, topic2-1, topic2-3",
                      "consumer4": "topic1-1, topic2-0, topic2-2"}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    # round-robin gives consumer3 nothing here; sticky must balance
    Scenario("AbstractStickyAssignorTest.testPoorRoundRobinAssignmentScenario",
             {"topic1": 2, "topic2": 1, "topic3": 2, "topic4": 1, "topic5": 2}, [
        Round({"consumer1": member("topic1, topic2, topic3, topic4, topic5"),
               "consumer2": member("topic1, topic3, topic5"),
               "consumer3": member("topic1, topic3, topic5"),
               "consumer4": member("topic1, topic2, topic3, topic4, topic5")})]),
    Scenario("AbstractStickyAssignorTest.testAddRemoveTopicTwoConsumers", {"topic": 3}, [
        Round({"consumer1": member("topic"), "consumer2": member("topic")}, transferring={},
              checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer1": (1, 2), "consumer2": (1, 2)}),)),
        Round({"consumer1": had("topic, topic2"), "consumer2": had("topic, topic2")},
              partitions={"topic": 3, "topic2": 3}, transferring={}, checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer1": 3, "consumer2": 3}),
                         ("contains", (0, "consumer1"), (1, "consumer1")),
                         ("contains", (0, "consumer2"), (1, "consumer2")))),
        Round({"consumer1": had("topic2"), "consumer2": had("topic2")}, partitions={"topic2": 3},
              transferring={}, checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer1": (1, 2), "consumer2": (1, 2)}),
                         ("contains", (2, "consumer1"), (0, "consumer1")),
                         ("contains", (2, "consumer2"), (0, "consumer2"))))]),
    # 19 topics t01..t19 with 1..19 partitions; c_i subscribes to t01..t_i; then c10 leaves
    Scenario("AbstractStickyAssignorTest.testReassignmentAfterOneConsumerLeaves",
             {t: i for i, t in enumerate(each("t", 2, range(1, 20)), 1)}, [
        Round({c: member(", ".join(each("t", 2, range(1, i + 1))))
               for i, c in enumerate(each("c", 2, range(1, 20)), 1)}),
        Round({c: had(", ".join(each("t", 2, range(1, i + 1))))
               for i, c in enumerate(each("c", 2, range(1, 20)), 1) if c != "c10"},
              checks=(VALID, BALANCED, STICKINESS))]),
    # the second round carries no ownership: Kafka re-sends the first round's subscriptions
    Scenario("AbstractStickyAssignorTest.testReassignmentAfterOneConsumerAdded", {"topic": 20}, [
        Round({c: member("topic") for c in each("c", 2, range(1, 10))}, transferring={}),
        Round({c: member("topic") for c in each("c", 2, range(1, 11))}, transferring={})]),
    # 14 topics t01..t14 with 1..14 partitions, 8 members subscribed to all; c5 leaves
    Scenario("AbstractStickyAssignorTest.testSameSubscriptions",
             {t: i for i, t in enumerate(each("t", 2, range(1, 15)), 1)}, [
        Round({c: member(", ".join(each("t", 2, range(1, 15)))) for c in each("c", 1, range(1, 9))},
              transferring={}),
        Round({c: had(", ".join(each("t", 2, range(1, 15))))
               for c in each("c", 1, range(1, 9)) if c != "c5"}, transferring={})]),
    Scenario("AbstractStickyAssignorTest.testNewSubscription",
             {t: 1 for t in each("t", 1, range(1, 5))}, [
        Round({"c0": member(""), "c1": member("t1"), "c2": member("t2, t3, t4")}),
        Round({"c0": member("t1"), "c1": member("t1"), "c2": member("t2, t3, t4")},
              checks=(VALID, BALANCED, STICKINESS))]),
    Scenario("AbstractStickyAssignorTest.testMoveExistingAssignments",
             {f"topic{i}": 1 for i in range(1, 7)}, [
        Round({"consumer1": member("topic1, topic2", "topic1-0", 1),
               "consumer2": member("topic1, topic2, topic3, topic4", "topic2-0, topic3-0", 1),
               "consumer3": member("topic2, topic3, topic4, topic5, topic6",
                                   "topic4-0, topic5-0, topic6-0", 1)})]),
    # the potential leader leaves; the others keep what they had
    Scenario("AbstractStickyAssignorTest.testStickiness", {"topic1": 3}, [
        Round({c: member("topic1") for c in ("consumer1", "consumer2", "consumer3", "consumer4")},
              transferring={},
              relations=(("sizes", {c: (0, 1) for c in ("consumer1", "consumer2", "consumer3",
                                                         "consumer4")}),)),
        Round({c: had("topic1") for c in ("consumer2", "consumer3", "consumer4")}, transferring={},
              relations=(("sizes", {"consumer2": 1, "consumer3": 1, "consumer4": 1}),
                         ("contains", (0, "consumer2"), (1, "consumer2")),
                         ("contains", (0, "consumer3"), (1, "consumer3")),
                         ("contains", (0, "consumer4"), (1, "consumer4"))))]),
    # topic2 is subscribed to but does not exist
    Scenario("AbstractStickyAssignorTest.testAssignmentUpdatedForDeletedTopic",
             {"topic1": 1, "topic3": 100}, [
        Round({"consumer": member("topic1, topic2, topic3")}, transferring={},
              checks=(VALID, FULLY), relations=(("total", 101),))]),
    Scenario("AbstractStickyAssignorTest.testNoExceptionThrownWhenOnlySubscribedTopicDeleted",
             {"topic": 3}, [
        Round({"consumer": member("topic")}, transferring={}),
        Round({"consumer": had("topic")}, partitions={}, expect={"consumer": ""}, transferring={})]),
    Scenario("AbstractStickyAssignorTest.testAllConsumersReachExpectedQuotaAndAreConsideredFilled",
             {"topic": 4}, [
        Round({"consumer1": member("topic", "topic-0, topic-1", 1),
               "consumer2": member("topic", "topic-2", 1), "consumer3": member("topic", "", 1)},
              expect={"consumer1": "topic-0, topic-1", "consumer2": "topic-2",
                      "consumer3": "topic-3"}, transferring={}, checks=(VALID, BALANCED, FULLY))]),
    # the same partitions claimed in generations 10 and 9: generation 10 keeps them
    Scenario("AbstractStickyAssignorTest.testOwnedPartitionsAreInvalidatedForConsumerWithStaleGeneration",
             {"topic": 3, "topic2": 3}, [
        Round({"consumer1": member("topic, topic2", "topic-0, topic-2, topic2-1", 10),
               "consumer2": member("topic, topic2", "topic-0, topic-2, topic2-1", 9)},
              expect={"consumer1": "topic-0, topic-2, topic2-1",
                      "consumer2": "topic-1, topic2-0, topic2-2"}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    Scenario("AbstractStickyAssignorTest.testOwnedPartitionsAreInvalidatedForConsumerWithNoGeneration",
             {"topic": 3, "topic2": 3}, [
        Round({"consumer1": member("topic, topic2", "topic-0, topic-2, topic2-1", 10),
               "consumer2": member("topic, topic2", "topic-0, topic-2, topic2-1", -1)},
              expect={"consumer1": "topic-0, topic-2, topic2-1",
                      "consumer2": "topic-1, topic2-0, topic2-2"}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    # topic-0 claimed by two members of generation 1: nobody keeps it, and it changes owner
    Scenario("AbstractStickyAssignorTest."
             "testPartitionsTransferringOwnershipIncludeThePartitionClaimedByMultipleConsumersInSameGeneration",
             {"topic": 3}, [
        Round({"consumer1": member("topic", "topic-0, topic-1", 1),
               "consumer2": member("topic", "topic-0, topic-2", 1),
               "consumer3": member("topic", "", 1)},
              transferring={"topic-0": "consumer3"},
              expect={"consumer1": "topic-1", "consumer2": "topic-2", "consumer3": "topic-0"},
              checks=(VALID, BALANCED, FULLY))]),
    # consumer3 (generation 8) claims topic2-1 and topic3-0, owned by newer generations
    Scenario("AbstractStickyAssignorTest.testEnsurePartitionsAssignedToHighestGeneration",
             {"topic": 3, "topic2": 3, "topic3": 3}, [
        Round({"consumer1": member("topic, topic2, topic3", "topic-0, topic2-0, topic3-0", 10),
               "consumer2": member("topic, topic2, topic3", "topic-1, topic2-1, topic3-1", 9),
               "consumer3": member("topic, topic2, topic3", "topic2-1, topic3-0, topic3-2", 8)},
              expect={"consumer1": "topic-0, topic2-0, topic3-0",
                      "consumer2": "topic-1, topic2-1, topic3-1",
                      "consumer3": "topic-2, topic2-2, topic3-2"}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    # members of three older generations keep what they own; the new one gets the rest
    Scenario("AbstractStickyAssignorTest.testNoReassignmentOnCurrentMembers",
             {"topic": 3, "topic1": 3, "topic2": 3, "topic3": 3}, [
        Round({"consumer1": member("topic, topic2, topic3, topic1", "", -1),
               "consumer2": member("topic, topic2, topic3, topic1", "topic-0, topic2-0, topic1-0", 9),
               "consumer3": member("topic, topic2, topic3, topic1", "topic3-2, topic2-2, topic1-1", 8),
               "consumer4": member("topic, topic2, topic3, topic1", "topic3-1, topic-1, topic-2", 7)},
              expect={"consumer1": "topic1-2, topic2-1, topic3-0"}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    Scenario("AbstractStickyAssignorTest.testOwnedPartitionsAreInvalidatedForConsumerWithMultipleGeneration",
             {"topic": 3, "topic2": 3}, [
        Round({"consumer1": member("topic, topic2", "topic-0, topic2-1, topic-1", 10),
               "consumer2": member("topic, topic2", "topic-0, topic2-1, topic2-2", 8)},
              expect={"consumer1": "topic-0, topic-1, topic2-1",
                      "consumer2": "topic-2, topic2-0, topic2-2"}, transferring={},
              checks=(VALID, BALANCED, FULLY))]),
    # the second round owns exactly the first round's plan (generation unknown): nothing moves
    Scenario("AbstractStickyAssignorTest.testRackAwareAssignmentWithUniformSubscription (no racks)",
             {"t1": 6, "t2": 7, "t3": 2}, [
        Round({f"consumer{i}": member(ALL3) for i in range(3)},
              expect={"consumer0": "t1-0, t1-3, t2-0, t2-3, t2-6",
                      "consumer1": "t1-1, t1-4, t2-1, t2-4, t3-0",
                      "consumer2": "t1-2, t1-5, t2-2, t2-5, t3-1"}),
        Round({"consumer0": member(ALL3, "t1-0, t1-3, t2-0, t2-3, t2-6"),
               "consumer1": member(ALL3, "t1-1, t1-4, t2-1, t2-4, t3-0"),
               "consumer2": member(ALL3, "t1-2, t1-5, t2-2, t2-5, t3-1")},
              expect={"consumer0": "t1-0, t1-3, t2-0, t2-3, t2-6",
                      "consumer1": "t1-1, t1-4, t2-1, t2-4, t3-0",
                      "consumer2": "t1-2, t1-5, t2-2, t2-5, t3-1"})]),
    Scenario("AbstractStickyAssignorTest.testRackAwareAssignmentWithNonEqualSubscription (no racks)",
             {"t1": 6, "t2": 7, "t3": 2}, [
        Round({"consumer0": member(ALL3), "consumer1": member(ALL3), "consumer2": member("t1, t3")},
              expect={"consumer0": "t1-5, t2-0, t2-2, t2-4, t2-6",
                      "consumer1": "t1-3, t2-1, t2-3, t2-5, t3-0",
                      "consumer2": "t1-0, t1-1, t1-2, t1-4, t3-1"}),
        Round({"consumer0": member(ALL3, "t1-5, t2-0, t2-2, t2-4, t2-6"),
               "consumer1": member(ALL3, "t1-3, t2-1, t2-3, t2-5, t3-0"),
               "consumer2": member("t1, t3", "t1-0, t1-1, t1-2, t1-4, t3-1")},
              expect={"consumer0": "t1-5, t2-0, t2-2, t2-4, t2-6",
                      "consumer1": "t1-3, t2-1, t2-3, t2-5, t3-0",
                      "consumer2": "t1-0, t1-1, t1-2, t1-4, t3-1"})]),
    # cooperative: owned lists that must change a lot; the first round keeps what can stay,
    # the next (owning that) completes the plan
    Scenario("AbstractStickyAssignorTest.testRackAwareAssignmentWithNonEqualSubscription "
             "(cooperative, misplaced owned partitions, no racks)", {"t1": 6, "t2": 7, "t3": 2}, [
        Round({"consumer0": member(ALL3, "t1-0, t1-1, t1-2, t1-3, t1-4"),
               "consumer1": member(ALL3, "t1-5, t2-0, t2-1, t2-2, t2-3"),
               "consumer2": member("t1, t3", "t2-4, t2-5, t2-6, t3-0, t3-1")},
              first={COOP: {"consumer0": "t1-2, t1-3, t1-4", "consumer1": "t2-0, t2-1, t2-2, t2-3",
                            "consumer2": "t3-0, t3-1"}}),
        Round({"consumer0": member(ALL3, "t1-2, t1-3, t1-4"),
               "consumer1": member(ALL3, "t2-0, t2-1, t2-2, t2-3"),
               "consumer2": member("t1, t3", "t3-0, t3-1")},
              first={COOP: {"consumer0": "t1-2, t1-3, t1-4, t2-4, t2-5",
                            "consumer1": "t2-0, t2-1, t2-2, t2-3, t2-6",
                            "consumer2": "t1-0, t1-1, t1-5, t3-0, t3-1"}})],
             assignors=(COOP,)),
    # StickyAssignorTest / CooperativeStickyAssignorTest: topic-0 claimed twice in generation 1
    Scenario("StickyAssignorTest/CooperativeStickyAssignorTest."
             "testAllConsumersHaveOwnedPartitionInvalidatedWhenClaimedByMultipleConsumersInSameGeneration"
             "WithEqualPartitionsPerConsumer", {"topic": 3}, [
        Round({"consumer1": member("topic", "topic-0, topic-1", 1),
               "consumer2": member("topic", "topic-0, topic-2", 1),
               "consumer3": member("topic", "", 1)},
              first={STICKY: {"consumer1": "topic-1", "consumer2": "topic-2", "consumer3": "topic-0"},
                     COOP: {"consumer1": "topic-1", "consumer2": "topic-2", "consumer3": ""}},
              checks=(VALID, BALANCED, FULLY))]),
    Scenario("StickyAssignorTest/CooperativeStickyAssignorTest."
             "testAllConsumersHaveOwnedPartitionInvalidatedWhenClaimedByMultipleConsumersInSameGeneration"
             "WithUnequalPartitionsPerConsumer", {"topic": 4}, [
        Round({"consumer1": member("topic", "topic-0, topic-1", 1),
               "consumer2": member("topic", "topic-0, topic-2", 1),
               "consumer3": member("topic", "", 1)},
              first={STICKY: {"consumer1": "topic-1, topic-3", "consumer2": "topic-2",
                              "consumer3": "topic-0"},
                     COOP: {"consumer1": "topic-1, topic-3", "consumer2": "topic-2", "consumer3": ""}},
              checks=(VALID, BALANCED, FULLY))]),
    # consumer2 carries no generation (the old user-data schema)
    Scenario("StickyAssignorTest.testSchemaBackwardCompatibility", {"topic": 3}, [
        Round({"consumer1": member("topic", "topic-0, topic-2", 1),
               "consumer2": member("topic", "topic-1", -1), "consumer3": member("topic")},
              checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer1": 1, "consumer2": 1, "consumer3": 1}),
                         ("within_owned", "consumer1"), ("within_owned", "consumer2")))],
             assignors=(STICKY,)),
    Scenario("StickyAssignorTest/CooperativeStickyAssignorTest.testAssignorWithOldVersionSubscriptions",
             {"topic1": 3}, [
        Round({"consumer1": member("topic1", "topic1-0", 1), "consumer2": member("topic1", "topic1-1", 1),
               "consumer3": member("topic1", "", 1)},
              expect={"consumer1": "topic1-0", "consumer2": "topic1-1", "consumer3": "topic1-2"},
              checks=(VALID, BALANCED, FULLY))]),
]


def _multiple_generations_1(equal):
    everything = "topic, topic2"
    c2_topics = everything if equal else "topic"
    return Scenario(f"StickyAssignorTest.testAssignmentWithMultipleGenerations1 (equal={equal})",
                    {"topic": 6, "topic2": 6}, [
        Round({"consumer1": member(everything), "consumer2": member(c2_topics),
               "consumer3": member(everything)}, checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer1": 4, "consumer2": 4, "consumer3": 4}),)),
        Round({"consumer1": had(everything, 1, 1), "consumer2": had(c2_topics, 1, 1)},
              checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer1": 6, "consumer2": 6}),
                         ("contains", (0, "consumer2"), (1, "consumer2")),
                         ("intersects", (0, "consumer2"), (1, "consumer3")))
              + ((("contains", (0, "consumer1"), (1, "consumer1")),) if equal else ())),
        Round({"consumer2": had(c2_topics, 2, 2), "consumer3": had(everything, 1, 1)},
              checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer2": 6, "consumer3": 6}),))],
                    assignors=(STICKY,))


def _multiple_generations_2(equal):
    everything = "topic, topic2, topic3"
    c1_topics = everything if equal else "topic"
    c3_topics = everything if equal else "topic, topic2"
    return Scenario(f"StickyAssignorTest.testAssignmentWithMultipleGenerations2 (equal={equal})",
                    {"topic": 4, "topic2": 4, "topic3": 4}, [
        Round({"consumer1": member(c1_topics), "consumer2": member(everything),
               "consumer3": member(c3_topics)}, checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer1": 4, "consumer2": 4, "consumer3": 4}),)),
        Round({"consumer2": had(everything, 1, 1)}, checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer2": 12}),
                         ("contains", (0, "consumer2"), (1, "consumer2")))),
        Round({"consumer1": had(c1_topics, 1, 1), "consumer2": had(everything, 2, 2),
               "consumer3": had(c3_topics, 1, 1)}, checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer1": 4, "consumer2": 4, "consumer3": 4}),))],
                    assignors=(STICKY,))


def _conflicting_previous_generations(equal):
    everything = "topic, topic2, topic3"
    c1_topics = everything if equal else "topic"
    c2_topics = everything if equal else "topic, topic2"
    c1_owned = "topic-0, topic-1, topic-2, topic2-2, topic2-3, topic3-0" if equal \
        else "topic-0, topic-1, topic-2, topic-3"
    return Scenario(f"StickyAssignorTest.testAssignmentWithConflictingPreviousGenerations "
                    f"(equal={equal})", {"topic": 4, "topic2": 4, "topic3": 4}, [
        Round({"consumer1": member(c1_topics, c1_owned, 1),
               "consumer2": member(c2_topics, "topic-0, topic-1, topic2-0, topic2-1, topic2-2, topic2-3", 2),
               "consumer3": member(everything, "topic-2, topic-3, topic3-0, topic3-1, topic3-2, topic3-3", 2)},
              checks=(VALID, BALANCED, FULLY),
              relations=(("sizes", {"consumer1": 4, "consumer2": 4, "consumer3": 4}),
                         ("within_owned", "consumer2"), ("within_owned", "consumer3")))],
                    assignors=(STICKY,))


def _three_generations(order):
    first, second, third = order
    return Scenario(f"AbstractStickyAssignorTest.testSubscriptionNotEqualAndAssignSamePartitionWith3Generation"
                    f" (generations {order})", {"topic": 6, "topic1": 1}, [
        Round({"consumer1": member("topic", "topic-0, topic-2", first),
               "consumer2": member("topic", "topic-1, topic-2, topic-3", second),
               "consumer3": member("topic", "topic-2, topic-4, topic-5", third),
               "consumer4": member("topic1", "topic1-0", 2)}, checks=(),
              relations=(("first_sizes", {c: (1, 2) for c in ("consumer1", "consumer2", "consumer3",
                                                               "consumer4")}),))])


def _random_subscriptions_and_changes(seed):
    """Kafka's randomized test, with a fixed seed: 20-40 members, 10-20 topics, subscriptions
    re-drawn between the two rounds."""
    rng = random.Random(seed)
    topic_count = rng.randrange(10, 20)
    topics = each("t", 2, range(topic_count))
    partitions = {t: i + 1 for i, t in enumerate(topics)}
    members = each("c", 2, range(rng.randrange(20, 40)))

    def some_topics():
        chosen = list(topics)
        for _ in range(rng.randrange(len(chosen))):
            chosen.pop(rng.randrange(len(chosen)))
        return ", ".join(chosen)
    return Scenario(f"AbstractStickyAssignorTest.testReassignmentWithRandomSubscriptionsAndChanges "
                    f"(seed {seed})", partitions, [
        Round({c: member(some_topics()) for c in members}),
        Round({c: had(some_topics()) for c in members}, checks=(VALID, BALANCED, STICKINESS))])


def _many_leave_random_subscriptions(seed):
    """Kafka's testLargeAssignmentWithMultipleConsumersLeavingAndRandomSubscription, fixed seed:
    200 members on 40 topics of 1-10 partitions; then up to 50 random members leave."""
    rng = random.Random(seed)
    topics = each("t", 2, range(40))
    partitions = {t: rng.randrange(10) + 1 for t in topics}
    members = each("c", 3, range(200))
    subscriptions = {c: ", ".join(rng.choice(topics) for _ in range(rng.randrange(20)))
                     for c in members}
    leaving = {rng.choice(members) for _ in range(50)}
    return Scenario(f"AbstractStickyAssignorTest.testLargeAssignmentWithMultipleConsumersLeavingAnd"
                    f"RandomSubscription (seed {seed})", partitions, [
        Round({c: member(topics_of) for c, topics_of in subscriptions.items()}),
        Round({c: had(topics_of) for c, topics_of in subscriptions.items() if c not in leaving},
              checks=(VALID, BALANCED, STICKINESS))])


SCENARIOS += [_multiple_generations_1(equal) for equal in (True, False)]
SCENARIOS += [_multiple_generations_2(equal) for equal in (True, False)]
SCENARIOS += [_conflicting_previous_generations(equal) for equal in (True, False)]
SCENARIOS += [_three_generations(order) for order in
              ((1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1))]
SCENARIOS += [_random_subscriptions_and_changes(seed) for seed in (1, 2, 3)]
SCENARIOS += [_many_leave_random_subscriptions(seed) for seed in (1, 2)]

CASES = [(scenario, name) for scenario in SCENARIOS for name in scenario.assignors]


def _plan(expected):
    return {member: tps(text) for member, text in expected.items()}


def _resolve(members, settled):
    """Replace Had(k) by the member's settled plan in round k (0: the previous round)."""
    resolved = {}
    for name, subscription in members.items():
        owned = subscription.owned_partitions
        if isinstance(owned, Had):
            source = settled[-1] if owned.round == 0 else settled[owned.round - 1]
            owned = source.get(name, [])
        resolved[name] = subscription._replace(owned_partitions=list(owned))
    return resolved


def check_relation(relation, plan, first_plan, subscriptions, settled):
    kind, *args = relation

    def plan_of(round_no, member_id):
        return set((plan if round_no == 0 else settled[round_no - 1]).get(member_id, ()))
    if kind in ("sizes", "first_sizes"):
        source = plan if kind == "sizes" else first_plan
        for member_id, size in args[0].items():
            low, high = size if isinstance(size, tuple) else (size, size)
            assert low <= len(source[member_id]) <= high, (kind, member_id, source[member_id])
    elif kind == "topic_counts":
        for member_id, partitions in plan.items():
            for topic, count in args[0].items():
                assert sum(tp.topic == topic for tp in partitions) == count, (member_id, topic)
    elif kind == "total":
        assert sum(map(len, plan.values())) == args[0]
    elif kind == "contains":
        assert plan_of(*args[0]) >= plan_of(*args[1]), relation
    elif kind == "intersects":
        assert plan_of(*args[0]) & plan_of(*args[1]), relation
    elif kind == "within_owned":
        assert set(plan[args[0]]) <= set(subscriptions[args[0]].owned_partitions), relation
    else:
        raise AssertionError(f"unknown relation {kind}")


@pytest.mark.parametrize("scenario,assignor_name", CASES,
                         ids=[f"{s.kafka}[{name}]" for s, name in CASES])
def test_kafka_scenario(scenario, assignor_name):
    assignor = get_assignor(assignor_name)
    partitions = scenario.partitions
    settled = []
    for number, round_ in enumerate(scenario.rounds, 1):
        if round_.partitions is not None:
            partitions = round_.partitions
        subscriptions = _resolve(round_.members, settled)
        if assignor_name == COOP:
            plans = cooperative_rounds(assignor, partitions, subscriptions)
        else:
            plans = [assignor.assign(partitions, subscriptions)]
        first_plan, plan = plans[0], plans[-1]
        where = f"round {number}"

        if round_.first and assignor_name in round_.first:
            assert first_plan == _plan(round_.first[assignor_name]), where
        if round_.expect is not None:
            expected = _plan(round_.expect)
            assert {m: plan[m] for m in expected} == expected, where
        if round_.transferring is not None:
            sticky_plan = get_assignor(STICKY).assign(partitions, subscriptions)
            cooperative_plan = get_assignor(COOP).assign(partitions, subscriptions)
            withheld = {str(tp): m for m, partitions_of in sticky_plan.items()
                        for tp in partitions_of if tp not in cooperative_plan[m]}
            assert withheld == round_.transferring, where
        if VALID in round_.checks:
            check_valid(partitions, subscriptions, plan)
        else:
            check_valid(partitions, subscriptions, first_plan, complete=False)
        if BALANCED in round_.checks:
            check_balanced(subscriptions, plan)
        if FULLY in round_.checks:
            assert fully_balanced(plan), (where, plan)
        if STICKINESS in round_.checks:
            assert not two_way_moves(valid_owners(partitions, subscriptions), first_plan), where
        for relation in round_.relations:
            check_relation(relation, plan, first_plan, subscriptions, settled)
        settled.append(plan)


def test_the_scenarios_cover_at_least_fifteen_kafka_tests():
    assert len({s.kafka.split(" (")[0] for s in SCENARIOS}) >= 15
    assert moved({}, {}) == {}
