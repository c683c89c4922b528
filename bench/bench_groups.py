#!/usr/bin/env python3
"""Consumer-group benchmark: assignor speed, and rebalances with the eager and cooperative protocols.

    python bench/bench_groups.py [--quick] [--repeats N] [--json FILE]

Prints, in one run:
 (a) assignment time of each built-in assignor for M members x P partitions
     (100 x 1,000 in a full run: 10 topics of 100 partitions, every member
     subscribed to all): a fresh assignment, and a reassignment after one
     member left (the sticky assignors' hard case: previous ownership given).
     Target: sticky under 1 s. Ratio: to round-robin of the same input, the
     simplest assignor, measured in the same run.
 (b) a group growing from 1 to 16 members over one topic of 64 partitions,
     each member a consumer polling on its own thread: for each join, the
     time from subscribe() until every member owns its final share and the
     group is Stable; and how many partitions were revoked on the way (eager:
     every owned partition at every rebalance; cooperative: only those that
     move). Eager (range) against cooperative (cooperative-sticky), same run.

The machine is shared and noisy: compare ratios measured in the same run.
Exit status 1 when a full run misses a target.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import streamlog  # noqa: E402
from streamlog.assignors import Subscription, get_assignor  # noqa: E402

STICKY_TARGET_S = 1.0


# --- (a) assignors ------------------------------------------------------------------------


def assignor_inputs(members, topics, partitions_per_topic, equal):
    """Equal: every member subscribes to every topic (sticky's constrained algorithm).
    Unequal: member i subscribes to half the topics, starting at topic i (the general one)."""
    counts = {f"topic-{t:02d}": partitions_per_topic for t in range(topics)}
    names = list(counts)
    ids = [f"consumer-{m:03d}" for m in range(members)]
    if equal:
        fresh = {m: Subscription(names) for m in ids}
    else:
        fresh = {m: Subscription([names[(i + k) % topics] for k in range(topics // 2)])
                 for i, m in enumerate(ids)}
    return counts, ids, fresh


def after_one_left(name, counts, ids, fresh):
    """Subscriptions of the members left after ids[0] leaves, owning what they had."""
    plan = get_assignor(name).assign(counts, fresh)
    return {m: fresh[m]._replace(owned_partitions=plan[m], generation=1) for m in ids[1:]}


def bench_assignors(args, results):
    members, topics, per_topic = (20, 4, 50) if args.quick else (100, 10, 100)
    print(f"(a) assignors: {members} members x {topics * per_topic:,} partitions "
          f"({topics} topics of {per_topic}); best of {args.repeats}")
    names = ["roundrobin", "range", "sticky", "cooperative-sticky"]
    for equal, kind in ((True, "all subscribe to every topic"),
                        (False, "each subscribes to half the topics")):
        counts, ids, fresh = assignor_inputs(members, topics, per_topic, equal)
        shrunk = {name: after_one_left(name, counts, ids, fresh) for name in names}
        for case, subscriptions in (("fresh", lambda name, fresh=fresh: fresh),
                                    ("one member left",
                                     lambda name, shrunk=shrunk: shrunk[name])):
            times = harness.best_of(args.repeats, *[
                (lambda name=name, counts=counts, subscriptions=subscriptions:
                    get_assignor(name).assign(counts, subscriptions(name)))
                for name in names])
            print(f"  {kind}, {case}:")
            for name, seconds in zip(names, times, strict=True):
                results.add(f"    {name}", seconds * 1e6, "us", seconds / times[0], None,
                            "round-robin's time")
                if name == "sticky" and not args.quick:
                    results.add_absolute("    sticky against the 1 s target", seconds * 1000,
                                         "ms", STICKY_TARGET_S * 1000, higher_is_better=False)


# --- (b) rebalances -------------------------------------------------------------------------


class Member(threading.Thread):
    """A consumer of the group polling on its own thread; counts what it gives up."""

    def __init__(self, db, strategy, name):
        super().__init__(name=name, daemon=True)
        self.db, self.strategy = db, strategy
        self.revoked = 0
        self.owned = frozenset()
        self.consumer = None
        self.stop = threading.Event()

    def on_partitions_revoked(self, partitions):
        self.revoked += len(partitions)

    def on_partitions_assigned(self, partitions):
        # Called at the end of every rebalance this member goes through (with what it
        # gained, maybe nothing): the moment its share is known, not when poll() returns.
        self.owned = frozenset(self.consumer.assignment())

    def run(self):
        consumer = self.consumer = self.db.consumer(group_id="bench", client_id=self.name,
                                                    partition_assignment_strategy=self.strategy,
                                                    heartbeat_interval_ms=100,
                                                    enable_auto_commit=False)
        consumer.subscribe(["topic"], listener=self)
        while not self.stop.is_set():
            consumer.poll(timeout=0.02)
        consumer.close()


def settled(db, members, partitions):
    """Every member owns its final share, together exactly the partitions, group Stable."""
    owned = [m.owned for m in members]
    if sum(len(o) for o in owned) != partitions or len(frozenset().union(*owned)) != partitions:
        return False
    if max(len(o) for o in owned) - min(len(o) for o in owned) > 1:
        return False
    return db.describe_group("bench").state == "Stable"


def grow_group(strategy, members, partitions):
    """Seconds per join while the group grows to `members`, and partitions revoked."""
    with streamlog.open() as db:
        db.create_topic("topic", partitions=partitions)
        group, times = [], []
        for i in range(members):
            member = Member(db, strategy, f"m{i:02d}")
            start = time.perf_counter()
            member.start()
            group.append(member)
            while not settled(db, group, partitions):
                time.sleep(0.001)
            times.append(time.perf_counter() - start)
        revoked = sum(m.revoked for m in group)
        for member in group:
            member.stop.set()
        for member in group:
            member.join()
    return times, revoked


def bench_rebalances(args, results):
    members, partitions = (4, 16) if args.quick else (16, 64)
    print(f"(b) a group growing from 1 to {members} members over {partitions} partitions, "
          f"each member a consumer polling on its own thread; best total of {args.repeats}")
    outcome = {}
    for strategy in ("range", "cooperative-sticky"):
        best = None
        for _ in range(args.repeats):
            times, revoked = grow_group(strategy, members, partitions)
            if best is None or sum(times) < sum(best[0]):
                best = (times, revoked)
        outcome[strategy] = best
    eager_total = sum(outcome["range"][0])
    for strategy, protocol in (("range", "eager"), ("cooperative-sticky", "cooperative")):
        times, revoked = outcome[strategy]
        total = sum(times)
        ordered = sorted(times)
        results.add(f"    {protocol} ({strategy}): total for {members} joins", total * 1000, "ms",
                    eager_total / total, None, "eager's speed")
        results.add(f"    {protocol}: median join -> settled", ordered[len(ordered) // 2] * 1000,
                    "ms")
        results.add(f"    {protocol}: slowest join -> settled", ordered[-1] * 1000, "ms")
        results.add(f"    {protocol}: partitions revoked while growing", revoked, "partitions")


def main():
    args = harness.parse_args(__doc__.splitlines()[0])
    results = harness.Results("bench_groups")
    results.header()
    if args.quick:
        print("(--quick: sizes too small for the targets, which are judged on full runs only)")
    bench_assignors(args, results)
    bench_rebalances(args, results)
    results.write_json(args.json)
    return harness.exit_code(results, args.quick)


if __name__ == "__main__":
    sys.exit(main())
