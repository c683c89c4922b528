"""A transactional producer's side of a transaction: its states and its coordinator calls.

Kafka's TransactionManager, reduced to what one process needs (the
coordinator answers in the call). States and the calls that move them:

    UNINITIALIZED --init_transactions()--> READY --begin_transaction()--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction()--> COMMITTING --> READY
    IN_TRANSACTION / ABORTABLE --abort_transaction(), or close()--> ABORTING --> READY
    IN_TRANSACTION / COMMITTING --a batch failed--> ABORTABLE (only abort_transaction() is
        allowed)
    COMMITTING / ABORTING stay so when the coordinator call fails: the same call again
        retries it (after an abort of failed batches, the epoch bump too)
    any --fenced (ProducerFencedError from the coordinator or a partition)--> FENCED (final)

A call in the wrong state raises InvalidTxnStateError naming the call that was
expected. COMMITTING and ABORTING refuse new sends while the buffered batches
are appended. Partitions join the transaction at their first batch (Kafka's
AddPartitionsToTxn before the first produce to each): `appending` holds the
lock from that check to the end of the batch's append, so no batch of a
transaction reaches a partition after its marker (end() waits for it; a batch
that comes after end() is refused).

Thread-safety: one lock over the state, the set of partitions and every append.
"""
import threading
from contextlib import contextmanager

from ..coordinator.transaction_coordinator import init_producer_id_retrying
from ..errors import InvalidTxnStateError, ProducerFencedError

UNINITIALIZED, READY, IN_TRANSACTION, ABORTABLE, FENCED = (
    "uninitialized", "ready", "in a transaction", "abortable", "fenced")
COMMITTING, ABORTING = "committing", "aborting"


class TransactionManager:
    def __init__(self, coordinator, transactional_id, timeout_ms, max_block_ms=60000):
        self._coordinator = coordinator
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.max_block_s = max_block_ms / 1000
        self._lock = threading.RLock()
        self.state = UNINITIALIZED
        self.producer = None       # (producer id, epoch) from the coordinator
        self._partitions = set()   # partitions added to the open transaction
        self._error = None         # why the transaction became abortable
        self._failed_before_abort = False

    @property
    def fenced(self):
        return self.state == FENCED

    @property
    def open(self):
        """A transaction was begun and no commit or abort has started (Kafka's
        hasOngoingTransaction, less its completing states): close() aborts it."""
        return self.state in (IN_TRANSACTION, ABORTABLE)

    def _expect(self, *states, call):
        if self.state == FENCED:
            raise ProducerFencedError(f"transactional id {self.transactional_id!r}: this "
                                      "producer was fenced by a newer epoch; close it")
        if self.state not in states:
            hint = {UNINITIALIZED: "call init_transactions() first",
                    READY: "call begin_transaction() first",
                    IN_TRANSACTION: "commit_transaction() or abort_transaction() first",
                    ABORTABLE: f"the transaction failed ({self._error}); call "
                               "abort_transaction()",
                    COMMITTING: "the transaction is being committed (if "
                                "commit_transaction() failed, call it again)",
                    ABORTING: "the transaction is being aborted (if abort_transaction() "
                              "failed, call it again)"}[self.state]
            raise InvalidTxnStateError(f"{call} is not allowed while the producer is "
                                       f"{self.state}: {hint}")

    def _calling(self, fn, *args):
        """A coordinator call; a fence makes this producer FENCED for good."""
        try:
            return fn(*args)
        except ProducerFencedError:
            self.state = FENCED
            raise

    def init(self):
        with self._lock:
            self._expect(UNINITIALIZED, call="init_transactions()")
            self.producer = self._calling(self._init_producer_id)
            self.state = READY
            return self.producer

    def begin(self):
        with self._lock:
            self._expect(READY, call="begin_transaction()")
            self.state = IN_TRANSACTION

    def check_send(self):
        with self._lock:
            self._expect(IN_TRANSACTION, call="send()")

    @contextmanager
    def appending(self, tp, producer):
        """Around one batch's append: tp joins the transaction at the coordinator first
        (its first batch), and the transaction cannot end until the append is done."""
        with self._lock:
            self._expect(IN_TRANSACTION, ABORTABLE, COMMITTING, ABORTING, call="a batch append")
            if producer != self.producer:
                raise InvalidTxnStateError("a batch of an earlier transaction of this producer "
                                           "comes after it ended; it is not appended")
            if tp not in self._partitions:
                self._calling(self._coordinator.add_partitions, self.transactional_id,
                              producer[0], producer[1], [tp])
                self._partitions.add(tp)
            yield

    def start_ending(self, commit):
        """commit_transaction() / abort_transaction() begins: no more sends."""
        with self._lock:
            if commit:
                # COMMITTING again: a retry after the coordinator failed to finish it.
                self._expect(IN_TRANSACTION, COMMITTING, call="commit_transaction()")
                self.state = COMMITTING
            else:
                self._expect(IN_TRANSACTION, ABORTABLE, ABORTING, call="abort_transaction()")
                if self.state != ABORTING:
                    self._failed_before_abort = self.state == ABORTABLE
                self.state = ABORTING

    def add_offsets(self, group_id):
        with self._lock:
            self._expect(IN_TRANSACTION, call="send_offsets_to_transaction()")
            pid, epoch = self.producer
            tp = self._calling(self._coordinator.add_offsets, self.transactional_id, pid,
                               epoch, group_id)
            self._partitions.add(tp)
            return tp

    def fail(self, error):
        """A batch of the open transaction failed: it can only be aborted now."""
        with self._lock:
            if isinstance(error, ProducerFencedError):
                self.state = FENCED
            elif self.state in (IN_TRANSACTION, COMMITTING):
                self.state, self._error = ABORTABLE, error
            elif self.state == ABORTING:
                self._failed_before_abort = True

    def end(self, commit):
        """Commit or abort at the coordinator (nothing to do if no partition joined), after
        start_ending() and the flush. Returns True when sequences must restart: an aborted
        transaction had failed batches, so the producer takes a bumped epoch (Kafka's
        KIP-360)."""
        with self._lock:
            self._expect(COMMITTING if commit else ABORTING,
                         call="commit_transaction()" if commit else "abort_transaction()")
            pid, epoch = self.producer
            if self._partitions:
                self._calling(self._coordinator.end_txn, self.transactional_id, pid, epoch,
                              commit)
                self._partitions.clear()
            failed = not commit and self._failed_before_abort
            if failed:
                # The epoch bump names the epoch it bumps (KIP-360, as Kafka's client): a
                # producer another instance fenced meanwhile is told so, and cannot fence
                # that instance in turn. Until it succeeds the producer stays ABORTING
                # (abort_transaction() again retries it, as Kafka's client stays
                # INITIALIZING): the old epoch's sequences are unknown, and a send under it
                # could be taken for the aborted batch's retry and dropped.
                self.producer = self._calling(self._init_producer_id, (pid, epoch))
                self._failed_before_abort = False
            self.state, self._error = READY, None
            return failed

    def _init_producer_id(self, expected=None):
        """InitProducerId, retried while the coordinator aborts an open transaction of the
        id (CONCURRENT_TRANSACTIONS), for up to max.block.ms as Kafka's producer."""
        return init_producer_id_retrying(self._coordinator, self.transactional_id,
                                         self.timeout_ms, expected, self.max_block_s)
