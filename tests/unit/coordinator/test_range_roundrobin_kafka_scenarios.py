"""Range and round-robin give exactly Kafka's assignments: scenarios of Kafka's own tests, as data.

Each row: the Kafka test method it comes from, the assignor, partition counts,
members' subscriptions (topics, static instance id) and the assignment Kafka
expects. Rack-aware expectations are left out (streamlog has no racks); where
a Kafka test checks a rack-aware variant, the row keeps the assignment Kafka
expects when racks do not apply.
"""
import pytest

from support.assignor_checks import check_valid, sub, tps
from streamlog.assignors import get_assignor, member_order

R, RR = "range", "roundrobin"
T2 = "topic1, topic2"
ALL3 = "t1, t2, t3"


def static(topics, instance):
    return sub(topics, instance=instance)


ROWS = [
    # --- RangeAssignorTest -------------------------------------------------------------
    ("RangeAssignorTest.testOneConsumerNoTopic", R, {},
     {"consumer1": sub("")}, {"consumer1": ""}),
    ("RangeAssignorTest.testOneConsumerNonexistentTopic", R, {},
     {"consumer1": sub("topic1")}, {"consumer1": ""}),
    ("RangeAssignorTest.testOneConsumerOneTopic", R, {"topic1": 3},
     {"consumer1": sub("topic1")}, {"consumer1": "topic1-0, topic1-1, topic1-2"}),
    ("RangeAssignorTest.testOnlyAssignsPartitionsFromSubscribedTopics", R, {"topic1": 3, "other": 3},
     {"consumer1": sub("topic1")}, {"consumer1": "topic1-0, topic1-1, topic1-2"}),
    ("RangeAssignorTest.testOneConsumerMultipleTopics", R, {"topic1": 1, "topic2": 2},
     {"consumer1": sub(T2)}, {"consumer1": "topic1-0, topic2-0, topic2-1"}),
    ("RangeAssignorTest.testTwoConsumersOneTopicOnePartition", R, {"topic1": 1},
     {"consumer1": sub("topic1"), "consumer2": sub("topic1")},
     {"consumer1": "topic1-0", "consumer2": ""}),
    ("RangeAssignorTest.testTwoConsumersOneTopicTwoPartitions", R, {"topic1": 2},
     {"consumer1": sub("topic1"), "consumer2": sub("topic1")},
     {"consumer1": "topic1-0", "consumer2": "topic1-1"}),
    ("RangeAssignorTest.testMultipleConsumersMixedTopics", R, {"topic1": 3, "topic2": 2},
     {"consumer1": sub("topic1"), "consumer2": sub(T2), "consumer3": sub("topic1")},
     {"consumer1": "topic1-0", "consumer2": "topic1-1, topic2-0, topic2-1",
      "consumer3": "topic1-2"}),
    ("RangeAssignorTest.testTwoConsumersTwoTopicsSixPartitions", R, {"topic1": 3, "topic2": 3},
     {"consumer1": sub(T2), "consumer2": sub(T2)},
     {"consumer1": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer2": "topic1-2, topic2-2"}),
    # static members are ordered by instance id, whatever their member ids
    ("RangeAssignorTest.testTwoStaticConsumersTwoTopicsSixPartitions", R, {"topic1": 3, "topic2": 3},
     {"consumer-b": static(T2, "instance1"), "consumer-a": static(T2, "instance2")},
     {"consumer-b": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer-a": "topic1-2, topic2-2"}),
    # a static member comes before a dynamic one, whatever their member ids
    ("RangeAssignorTest.testOneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions", R,
     {"topic1": 3, "topic2": 3},
     {"consumer-b": static(T2, "instance1"), "consumer-a": sub(T2)},
     {"consumer-b": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer-a": "topic1-2, topic2-2"}),
    ("RangeAssignorTest.testStaticMemberRangeAssignmentPersistent", R, {"topic1": 5, "topic2": 4},
     {"consumer1": static(T2, "instance1"), "consumer2": static(T2, "instance2"),
      "consumer3": static(T2, "instance3"), "consumer4": sub(T2)},
     {"consumer1": "topic1-0, topic1-1, topic2-0", "consumer2": "topic1-2, topic2-1",
      "consumer3": "topic1-3, topic2-2", "consumer4": "topic1-4, topic2-3"}),
    # ... and the dynamic member replaced by another takes over the same partitions
    ("RangeAssignorTest.testStaticMemberRangeAssignmentPersistent (consumer4 replaced)", R,
     {"topic1": 5, "topic2": 4},
     {"consumer1": static(T2, "instance1"), "consumer2": static(T2, "instance2"),
      "consumer3": static(T2, "instance3"), "consumer5": sub(T2)},
     {"consumer1": "topic1-0, topic1-1, topic2-0", "consumer2": "topic1-2, topic2-1",
      "consumer3": "topic1-3, topic2-2", "consumer5": "topic1-4, topic2-3"}),
    ("RangeAssignorTest.testStaticMemberRangeAssignmentPersistentAfterMemberIdChanges", R,
     {"topic1": 5, "topic2": 5},
     {"consumer1": static(T2, "instance1"), "consumer2": static(T2, "instance2"),
      "consumer3": static(T2, "instance3")},
     {"consumer1": "topic1-0, topic1-1, topic2-0, topic2-1",
      "consumer2": "topic1-2, topic1-3, topic2-2, topic2-3", "consumer3": "topic1-4, topic2-4"}),
    # ... after the members rejoin under new member ids, each instance keeps its partitions
    ("RangeAssignorTest.testStaticMemberRangeAssignmentPersistentAfterMemberIdChanges (new ids)", R,
     {"topic1": 5, "topic2": 5},
     {"consumer1": static(T2, "instance1"), "consumer5": static(T2, "instance2"),
      "consumer4": static(T2, "instance3")},
     {"consumer1": "topic1-0, topic1-1, topic2-0, topic2-1",
      "consumer5": "topic1-2, topic1-3, topic2-2, topic2-3", "consumer4": "topic1-4, topic2-4"}),
    ("RangeAssignorTest.testRackAwareAssignmentWithUniformSubscription (no racks)", R,
     {"t1": 6, "t2": 7, "t3": 2},
     {"consumer0": sub(ALL3), "consumer1": sub(ALL3), "consumer2": sub(ALL3)},
     {"consumer0": "t1-0, t1-1, t2-0, t2-1, t2-2, t3-0", "consumer1": "t1-2, t1-3, t2-3, t2-4, t3-1",
      "consumer2": "t1-4, t1-5, t2-5, t2-6"}),
    ("RangeAssignorTest.testRackAwareAssignmentWithNonEqualSubscription (no racks)", R,
     {"t1": 6, "t2": 7, "t3": 2},
     {"consumer0": sub(ALL3), "consumer1": sub(ALL3), "consumer2": sub("t1, t3")},
     {"consumer0": "t1-0, t1-1, t2-0, t2-1, t2-2, t2-3, t3-0",
      "consumer1": "t1-2, t1-3, t2-4, t2-5, t2-6, t3-1", "consumer2": "t1-4, t1-5"}),
    ("RangeAssignorTest.testRackAwareAssignmentWithUniformPartitions (no racks)", R,
     {"t1": 5, "t2": 5, "t3": 5},
     {"consumer0": sub(ALL3), "consumer1": sub(ALL3), "consumer2": sub(ALL3)},
     {"consumer0": "t1-0, t1-1, t2-0, t2-1, t3-0, t3-1",
      "consumer1": "t1-2, t1-3, t2-2, t2-3, t3-2, t3-3", "consumer2": "t1-4, t2-4, t3-4"}),
    ("RangeAssignorTest.testRackAwareAssignmentWithUniformPartitionsNonEqualSubscription (no racks)",
     R, {"t1": 5, "t2": 5, "t3": 5},
     {"consumer0": sub(ALL3), "consumer1": sub(ALL3), "consumer2": sub("t1, t3")},
     {"consumer0": "t1-0, t1-1, t2-0, t2-1, t2-2, t3-0, t3-1",
      "consumer1": "t1-2, t1-3, t2-3, t2-4, t3-2, t3-3", "consumer2": "t1-4, t3-4"}),
    # co-partitioned topics: partition p of t1 and t2 goes to the same member
    ("RangeAssignorTest.testRackAwareAssignmentWithCoPartitioning (no racks)", R,
     {"t1": 6, "t2": 6, "t3": 2, "t4": 2},
     {"consumer0": sub("t1, t2"), "consumer1": sub("t1, t2"), "consumer2": sub("t3, t4"),
      "consumer3": sub("t3, t4")},
     {"consumer0": "t1-0, t1-1, t1-2, t2-0, t2-1, t2-2", "consumer1": "t1-3, t1-4, t1-5, t2-3, t2-4, t2-5",
      "consumer2": "t3-0, t4-0", "consumer3": "t3-1, t4-1"}),
    ("RangeAssignorTest.testRackAwareAssignmentWithCoPartitioning (all topics, no racks)", R,
     {"t1": 6, "t2": 6, "t3": 2, "t4": 2},
     {f"consumer{i}": sub("t1, t2, t3, t4") for i in range(4)},
     {"consumer0": "t1-0, t1-1, t2-0, t2-1, t3-0, t4-0", "consumer1": "t1-2, t1-3, t2-2, t2-3, t3-1, t4-1",
      "consumer2": "t1-4, t2-4", "consumer3": "t1-5, t2-5"}),
    # subscriptions include topics t7..t9 that do not exist
    ("RangeAssignorTest.testCoPartitionedAssignmentWithSameSubscription (no racks)", R,
     {"t1": 6, "t2": 6, "t3": 2, "t4": 2, "t5": 4, "t6": 4},
     {f"consumer{i}": sub("t1, t2, t3, t4, t5, t6, t7, t8, t9") for i in range(3)},
     {"consumer0": "t1-0, t1-1, t2-0, t2-1, t3-0, t4-0, t5-0, t5-1, t6-0, t6-1",
      "consumer1": "t1-2, t1-3, t2-2, t2-3, t3-1, t4-1, t5-2, t6-2",
      "consumer2": "t1-4, t1-5, t2-4, t2-5, t5-3, t6-3"}),

    # --- RoundRobinAssignorTest --------------------------------------------------------
    ("RoundRobinAssignorTest.testOneConsumerNoTopic", RR, {},
     {"consumer": sub("")}, {"consumer": ""}),
    ("RoundRobinAssignorTest.testOneConsumerNonexistentTopic", RR, {},
     {"consumer": sub("topic")}, {"consumer": ""}),
    ("RoundRobinAssignorTest.testOneConsumerOneTopic", RR, {"topic": 3},
     {"consumer": sub("topic")}, {"consumer": "topic-0, topic-1, topic-2"}),
    ("RoundRobinAssignorTest.testOnlyAssignsPartitionsFromSubscribedTopics", RR,
     {"topic": 3, "other": 3}, {"consumer": sub("topic")}, {"consumer": "topic-0, topic-1, topic-2"}),
    ("RoundRobinAssignorTest.testOneConsumerMultipleTopics", RR, {"topic1": 1, "topic2": 2},
     {"consumer": sub(T2)}, {"consumer": "topic1-0, topic2-0, topic2-1"}),
    ("RoundRobinAssignorTest.testTwoConsumersOneTopicOnePartition", RR, {"topic": 1},
     {"consumer1": sub("topic"), "consumer2": sub("topic")},
     {"consumer1": "topic-0", "consumer2": ""}),
    ("RoundRobinAssignorTest.testTwoConsumersOneTopicTwoPartitions", RR, {"topic": 2},
     {"consumer1": sub("topic"), "consumer2": sub("topic")},
     {"consumer1": "topic-0", "consumer2": "topic-1"}),
    ("RoundRobinAssignorTest.testMultipleConsumersMixedTopics", RR, {"topic1": 3, "topic2": 2},
     {"consumer1": sub("topic1"), "consumer2": sub(T2), "consumer3": sub("topic1")},
     {"consumer1": "topic1-0", "consumer2": "topic1-1, topic2-0, topic2-1", "consumer3": "topic1-2"}),
    ("RoundRobinAssignorTest.testTwoDynamicConsumersTwoTopicsSixPartitions", RR,
     {"topic1": 3, "topic2": 3}, {"consumer1": sub(T2), "consumer2": sub(T2)},
     {"consumer1": "topic1-0, topic1-2, topic2-1", "consumer2": "topic1-1, topic2-0, topic2-2"}),
    ("RoundRobinAssignorTest.testTwoStaticConsumersTwoTopicsSixPartitions", RR,
     {"topic1": 3, "topic2": 3},
     {"consumer-b": static(T2, "instance1"), "consumer-a": static(T2, "instance2")},
     {"consumer-b": "topic1-0, topic1-2, topic2-1", "consumer-a": "topic1-1, topic2-0, topic2-2"}),
    ("RoundRobinAssignorTest.testOneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions", RR,
     {"topic1": 3, "topic2": 3},
     {"consumer-b": static(T2, "instance1"), "consumer-a": sub(T2)},
     {"consumer-b": "topic1-0, topic1-2, topic2-1", "consumer-a": "topic1-1, topic2-0, topic2-2"}),
    ("RoundRobinAssignorTest.testStaticMemberRoundRobinAssignmentPersistent", RR,
     {"topic1": 3, "topic2": 3},
     {"consumer1": static(T2, "instance1"), "consumer2": static(T2, "instance2"),
      "consumer3": static(T2, "instance3"), "consumer4": sub(T2)},
     {"consumer1": "topic1-0, topic2-1", "consumer2": "topic1-1, topic2-2", "consumer3": "topic1-2",
      "consumer4": "topic2-0"}),
    ("RoundRobinAssignorTest.testStaticMemberRoundRobinAssignmentPersistent (consumer4 replaced)", RR,
     {"topic1": 3, "topic2": 3},
     {"consumer1": static(T2, "instance1"), "consumer2": static(T2, "instance2"),
      "consumer3": static(T2, "instance3"), "consumer5": sub(T2)},
     {"consumer1": "topic1-0, topic2-1", "consumer2": "topic1-1, topic2-2", "consumer3": "topic1-2",
      "consumer5": "topic2-0"}),
    ("RoundRobinAssignorTest.testStaticMemberRoundRobinAssignmentPersistentAfterMemberIdChanges", RR,
     {"topic1": 5, "topic2": 5},
     {"consumer1": static(T2, "instance1"), "consumer2": static(T2, "instance2"),
      "consumer3": static(T2, "instance3")},
     {"consumer1": "topic1-0, topic1-3, topic2-1, topic2-4", "consumer2": "topic1-1, topic1-4, topic2-2",
      "consumer3": "topic1-2, topic2-0, topic2-3"}),
    ("RoundRobinAssignorTest.testStaticMemberRoundRobinAssignmentPersistentAfterMemberIdChanges "
     "(new ids)", RR, {"topic1": 5, "topic2": 5},
     {"consumer1": static(T2, "instance1"), "consumer5": static(T2, "instance2"),
      "consumer4": static(T2, "instance3")},
     {"consumer1": "topic1-0, topic1-3, topic2-1, topic2-4", "consumer5": "topic1-1, topic1-4, topic2-2",
      "consumer4": "topic1-2, topic2-0, topic2-3"}),
]


@pytest.mark.parametrize("kafka_test,assignor,partitions,members,expected", ROWS,
                         ids=[row[0] for row in ROWS])
def test_kafka_scenario(kafka_test, assignor, partitions, members, expected):
    plan = get_assignor(assignor).assign(partitions, members)
    assert plan == {member: tps(text) for member, text in expected.items()}
    check_valid(partitions, members, plan)
    assert list(plan) == member_order(members)


@pytest.mark.parametrize("kafka_test,assignor,partitions,members,expected", ROWS,
                         ids=[row[0] for row in ROWS])
def test_kafka_scenario_does_not_depend_on_the_callers_member_order(kafka_test, assignor,
                                                                     partitions, members, expected):
    reversed_members = dict(reversed(list(members.items())))
    assert get_assignor(assignor).assign(partitions, reversed_members) == \
        get_assignor(assignor).assign(partitions, members)


# AbstractPartitionAssignorTest: Kafka's member order (MemberInfo.compareTo), as
# (member id, group instance id) in the order Kafka sorts them.
MEMBER_ORDER_ROWS = [
    ("AbstractPartitionAssignorTest.testMemberInfoSortingWithoutGroupInstanceId",
     [("a", None), ("b", None), ("c", None)]),
    ("AbstractPartitionAssignorTest.testMemberInfoSortingWithAllGroupInstanceId",
     [("c", "x"), ("a", "y"), ("b", "z")]),
    ("AbstractPartitionAssignorTest.testMemberInfoSortingSomeGroupInstanceId",
     [("c", "x"), ("b", "y"), ("a", None)]),
    # testMergeSortManyMemberInfo: 100 three-digit ids, every other one static: statics first
    ("AbstractPartitionAssignorTest.testMergeSortManyMemberInfo",
     [(str(i), str(i)) for i in range(100, 200, 2)] + [(str(i), None) for i in range(101, 200, 2)]),
]


@pytest.mark.parametrize("kafka_test,expected", MEMBER_ORDER_ROWS,
                         ids=[row[0] for row in MEMBER_ORDER_ROWS])
def test_member_order_is_kafkas(kafka_test, expected):
    import random
    shuffled = list(expected)
    random.Random(7).shuffle(shuffled)
    subscriptions = {member: sub("t", instance=instance) for member, instance in shuffled}
    assert member_order(subscriptions) == [member for member, _ in expected]
