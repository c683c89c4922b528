"""How the coordinators write their internal topics (__consumer_offsets, __transaction_state):
as Kafka's coordinators append, with acks=all, and with the append's errors answered as
they answer them.

In a cluster an append to a replicated partition is refused up front, nothing written,
when fewer replicas than its min.insync.replicas are in sync, and counts once they hold
it (wait_replicated). The errors: NOT_LEADER_OR_FOLLOWER is NOT_COORDINATOR (the client
finds the partition's new leader); too few in-sync replicas, a wait that timed out, or a
partition not there is COORDINATOR_NOT_AVAILABLE, which clients retry (Kafka's
GroupCoordinatorService.handleOperationException and TransactionStateManager
.appendTransactionToLog map them so). On a database of its own nothing is replicated:
the caller fsyncs what must be durable.
"""
import contextlib

from ..errors import (CoordinatorNotAvailableError, NotCoordinatorError,
                      NotEnoughReplicasAfterAppendError, NotEnoughReplicasError,
                      NotLeaderOrFollowerError, RequestTimedOutError,
                      UnknownTopicOrPartitionError)
from ..storage.producer_state import COORDINATOR, UNVERIFIED


@contextlib.contextmanager
def coordinator_errors():
    """An append's or a replication wait's errors, as a coordinator answers them."""
    try:
        yield
    except NotLeaderOrFollowerError as exc:
        raise NotCoordinatorError(str(exc)) from None
    except (NotEnoughReplicasError, NotEnoughReplicasAfterAppendError, RequestTimedOutError,
            UnknownTopicOrPartitionError) as exc:
        raise CoordinatorNotAvailableError(str(exc)) from None


def replicated(broker, tp):
    """Whether tp is a partition of the cluster's (its appends wait for replicas)."""
    replicas = broker.replicas
    return replicas is not None and replicas.manages(tp)


def append(broker, tp, data, acks_all=True, verification=UNVERIFIED):
    """Append a coordinator's encoded batch to tp; its AppendInfo. acks_all: in a cluster,
    refused up front with too few in-sync replicas (else acks=1: a write whose loss costs
    nothing but a replay)."""
    with coordinator_errors():
        return broker.produce(tp, data, origin=COORDINATOR,
                              acks=-1 if acks_all and replicated(broker, tp) else 1,
                              verification=verification)


def wait_replicated(broker, tp, end_offset, timeout_s):
    """In a cluster, until the in-sync replicas hold tp below end_offset (a database of its
    own: at once)."""
    if replicated(broker, tp):
        with coordinator_errors():
            broker.replicas.wait_replicated(tp, end_offset, timeout_s)
