"""Cluster steps that several cluster tests take."""
def values(prefix, n):
    return [b"%s-%d" % (prefix, i) for i in range(n)]


def lose_the_isr_but_one(cluster, topic):
    """The follower of a partition 0 replicated twice falls out of the ISR, then the leader
    acknowledges records it lacks ("leader-only"). (leader, follower)."""
    leader = cluster.leader(topic, 0)
    follower = next(r for r in cluster.partition_state(topic, 0).replicas if r != leader)
    cluster.produce(topic, 0, values(b"both", 3))
    cluster.isolate(follower)
    # acks=all: answered once the follower, behind now, has left the ISR
    # (Partition.maybeShrinkIsr) and the ISR is the leader.
    cluster.produce(topic, 0, values(b"leader-only", 3))
    assert cluster.partition_state(topic, 0).isr == (leader,)
    return leader, follower


def led_by_another_than_preferred(cluster, key, key_type):
    """Make the internal partition holding key (a group, key_type 0, or a transactional
    id, 1) led by a broker other than its first replica (that one is killed and
    restarted), every replica in sync; (the partition, its leader now)."""
    tp = cluster.coordinator_partition(key, key_type)
    preferred = cluster.partition_state(tp.topic, tp.partition).replicas[0]
    cluster.wait_in_sync(tp.topic)
    cluster.kill(preferred)
    cluster.restart(preferred)
    cluster.wait_in_sync(tp.topic)
    return tp, cluster.leader(tp.topic, tp.partition)
