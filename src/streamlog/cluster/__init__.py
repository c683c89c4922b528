"""A replicated cluster of brokers in one process (docs/CLUSTER.md): the controller,
the replica fetchers, and the Cluster that runs them with each broker's Kafka listener."""
from .cluster import Cluster, PartitionStatus, ReplicaInfo

__all__ = ["Cluster", "PartitionStatus", "ReplicaInfo"]
