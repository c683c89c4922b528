"""Manual replica assignments of CreateTopics and CreatePartitions (`kafka-topics.sh
--replica-assignment`, confluent-kafka's `NewTopic(replica_assignment=...)`,
`NewPartitions(replica_assignment=...)`), checked as Kafka's controller checks them
(ReplicationControlManager.createTopic, createPartitions and
validateManualPartitionAssignment), with its messages. A database on its own is broker 0,
so there every replica list is [0]; a cluster's brokers are its broker ids.
"""
from .. import errors


def manual_assignment(replica_lists, registered, alive, replication_factor=None,
                      first_partition=0):
    """{partition: (broker ids)} of replica_lists ([(partition, [broker id])]), each
    checked against the registered broker ids and the live ones; replication_factor, when
    given (CreatePartitions: the topic's), is the count every list must have, else the
    first list's is. InvalidReplicaAssignmentError otherwise."""
    assignment = {}
    for partition, replicas in replica_lists:
        if partition in assignment:
            raise errors.InvalidReplicaAssignmentError(
                f"Found multiple manual partition assignments for partition {partition}")
        _check_replicas(replicas, registered, replication_factor)
        replication_factor = len(replicas)
        if not any(broker in alive for broker in replicas):
            raise errors.InvalidReplicaAssignmentError(
                "All brokers specified in the manual partition assignment for partition "
                f"{partition} are fenced or in controlled shutdown.")
        assignment[partition] = tuple(int(broker) for broker in replicas)
    if sorted(assignment) != list(range(first_partition, first_partition + len(assignment))):
        raise errors.InvalidReplicaAssignmentError(
            "partitions should be a consecutive 0-based integer sequence")
    return assignment


def _check_replicas(replicas, registered, replication_factor):
    """Kafka's validateManualPartitionAssignment: a list not empty, of registered brokers,
    each once, of the replication factor the other partitions have."""
    if not replicas:
        raise errors.InvalidReplicaAssignmentError(
            "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(replicas):
        if broker not in registered:
            raise errors.InvalidReplicaAssignmentError(
                f"The manual partition assignment includes broker {broker}, but no such "
                "broker is registered.")
        if broker == previous:
            raise errors.InvalidReplicaAssignmentError(
                f"The manual partition assignment includes the broker {broker} more than "
                "once.")
        previous = broker
    if replication_factor is not None and len(replicas) != replication_factor:
        raise errors.InvalidReplicaAssignmentError(
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s).")
