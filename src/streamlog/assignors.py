"""Public partition-assignor API (a facade over streamlog.coordinator.assignors).

    from streamlog.assignors import get_assignor, Subscription
    plan = get_assignor("sticky").assign(
        partitions_per_topic={"t0": 3, "t1": 2},
        subscriptions={"c0": Subscription(topics=["t0", "t1"])})

Built-in names: "range", "roundrobin", "sticky", "cooperative-sticky". A
user assignor is any object with `.name` and `.assign(partitions_per_topic,
subscriptions)`, optionally `.supported_protocols`. See docs/GROUPS.md.
"""
from .coordinator.assignors import (ASSIGNOR_NAMES, COOPERATIVE, EAGER, CooperativeStickyAssignor,
                                    RangeAssignor, RoundRobinAssignor, StickyAssignor,
                                    Subscription, get_assignor, member_order,
                                    reassigned_before_revoked, rebalance_protocol,
                                    supported_protocols)
from .structs import TopicPartition

__all__ = ["get_assignor", "Subscription", "TopicPartition", "ASSIGNOR_NAMES", "EAGER",
           "COOPERATIVE", "RangeAssignor", "RoundRobinAssignor", "StickyAssignor",
           "CooperativeStickyAssignor", "member_order", "supported_protocols",
           "rebalance_protocol", "reassigned_before_revoked"]
