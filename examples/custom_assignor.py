"""A partition assignor of your own: whole topics per member, plugged into a consumer group.

Some consumers keep state per topic (an in-memory table built from one
topic's records, say), so each topic should be read by exactly one member.
The built-in assignors spread a topic's partitions over members; this one
gives every topic whole to one subscribed member. Any object with a `name`
and `assign(partitions_per_topic, subscriptions)` is an assignor; the
group's leader runs it at every rebalance. The built-in ones are also
usable on their own, as shown at the end.

    python examples/custom_assignor.py
"""
import streamlog
from streamlog import TopicPartition
from streamlog.assignors import Subscription, get_assignor


class WholeTopics:
    """Each topic goes, with all its partitions, to one of the members subscribed to it."""

    name = "whole-topics"
    supported_protocols = ("eager",)

    def assign(self, partitions_per_topic, subscriptions):
        members = sorted(subscriptions)
        plan = {member: [] for member in members}
        for i, topic in enumerate(sorted(partitions_per_topic)):
            readers = [m for m in members if topic in subscriptions[m].topics]
            if readers:
                owner = readers[i % len(readers)]
                plan[owner] += [TopicPartition(topic, p)
                                for p in range(partitions_per_topic[topic])]
        return plan


def main():
    with streamlog.open() as db:
        topics = ["users", "orders", "payments"]
        for topic in topics:
            db.create_topic(topic, partitions=3)
        consumers = [db.consumer(group_id="tables", client_id=f"member-{i}",
                                 partition_assignment_strategy=[WholeTopics()])
                     for i in range(2)]
        for consumer in consumers:
            consumer.subscribe(topics)
        # One thread may drive several consumers: each poll() moves its member along.
        while sum(len(c.assignment()) for c in consumers) < 9 or \
                db.describe_group("tables").state != "Stable":
            for consumer in consumers:
                consumer.poll(timeout=0.05)
        for consumer in consumers:
            owned = sorted(consumer.assignment())
            print(f"{consumer.settings.client_id}: topics {sorted({tp.topic for tp in owned})} "
                  f"({len(owned)} partitions)")
        owners = {tp.topic: c.settings.client_id for c in consumers for tp in c.assignment()}
        assert len(owners) == 3 and all(
            sum(tp.topic == t for c in consumers for tp in c.assignment()) == 3 for t in topics)
        print(f"group 'tables' uses assignor {db.describe_group('tables').assignor!r}")
        for consumer in consumers:
            consumer.close()

    # The built-in assignors outside a group: the plan Kafka would compute.
    subscriptions = {"c1": Subscription(["orders"]), "c2": Subscription(["orders"])}
    for name in ("range", "roundrobin", "sticky"):
        plan = get_assignor(name).assign({"orders": 5}, subscriptions)
        print(f"{name:>10}: " + ", ".join(f"{m} -> {[tp.partition for tp in tps]}"
                                          for m, tps in plan.items()))


if __name__ == "__main__":
    main()
