"""Cluster steps that several cluster tests take."""


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
