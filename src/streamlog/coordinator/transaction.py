"""One transactional id's metadata and the state machine it moves through.

Kafka's TransactionMetadata (KAFKA_REFERENCE.md §6.1). States and the states
each may be entered from:

    Empty (0)             <- Empty, CompleteCommit, CompleteAbort    (InitProducerId)
    Ongoing (1)           <- Ongoing, Empty, CompleteCommit, CompleteAbort
                                                                     (AddPartitions/AddOffsets)
    PrepareCommit (2)     <- Ongoing                                 (EndTxn commit)
    PrepareAbort (3)      <- Ongoing, PrepareEpochFence              (EndTxn abort, timeout, fencing)
    CompleteCommit (4)    <- PrepareCommit                           (every marker written)
    CompleteAbort (5)     <- PrepareAbort                            (every marker written)
    Dead (6)              <- Empty, CompleteAbort, CompleteCommit    (transactional.id expired)
    PrepareEpochFence (7) <- Ongoing                                 (InitProducerId or timeout
                                                                      while Ongoing)

Every transition is prepared (`prepare` returns the metadata as it will be),
written to `__transaction_state`, and only then applied (`apply`): what is in
memory is never ahead of the log. A transition to a state not allowed from
the current one is a bug, raised as IllegalStateError.

Thread-safety: the transaction coordinator's lock covers every instance.
"""
from dataclasses import dataclass, field, replace
from enum import IntEnum

from ..errors import IllegalStateError


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def wire_name(self):
        """The name DescribeTransactions and ListTransactions answer ("PrepareCommit")."""
        return "".join(word.capitalize() for word in self.name.split("_"))


S = TxnState
STATE_NAMED = {state.wire_name: state for state in TxnState}
VALID_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}
COMPLETED = frozenset({S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
PREPARING = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
# The states a transactional id may expire in (Kafka's isExpirationAllowed): no transaction
# open, the ones Dead may follow.
EXPIRABLE = frozenset(VALID_PREVIOUS[S.DEAD])


@dataclass(frozen=True)
class TransactionMetadata:
    """What `__transaction_state` records of one transactional id (its value's fields)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset = field(default_factory=frozenset)  # TopicPartitions in the txn
    last_update_ms: int = -1
    start_ms: int = -1   # when the open transaction began (-1: none)
    # Not in the record (TransactionLogValue version 0 has no field for them), so kept in
    # memory only, as Kafka's TransactionLog.readTxnRecordValue loads lastProducerEpoch
    # as -1: the producer id before the last InitProducerId, and the epoch a KIP-360
    # InitProducerId bumped from (-1: none). Lost when the database reopens or another
    # broker takes the id over: a retry of a bump whose answer was lost is then fenced.
    previous_producer_id: int = field(default=-1, compare=False)
    last_producer_epoch: int = field(default=-1, compare=False)

    def prepare(self, state, now_ms, **changes):
        """The metadata after a transition to `state` (not applied: see the module doc)."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalStateError(
                f"transaction {self.transactional_id!r}: {self.state.name} cannot become "
                f"{state.name}")
        if state == S.ONGOING and self.state != S.ONGOING:
            changes.setdefault("start_ms", now_ms)
        if state in (S.EMPTY, S.DEAD):
            changes.setdefault("start_ms", -1)
        if state in (S.EMPTY, S.DEAD) or state in COMPLETED:
            changes.setdefault("partitions", frozenset())  # every marker is written
        return replace(self, state=state, last_update_ms=now_ms, **changes)
