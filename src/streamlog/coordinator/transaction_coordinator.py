"""The transaction coordinator: transactional ids, epochs, markers, timeouts.

Kafka's TransactionCoordinator (KAFKA_REFERENCE.md §6.2) in one process. The
requests are method calls that answer synchronously: EndTxn writes its
markers before it returns, so the PrepareCommit/PrepareAbort states last only
as long as that call, until the next open if the process stopped in between
(the open finishes them: `_finish_pending`), or until the next try if a
marker's append failed (the id's next request, or the timeout check).

    init_producer_id(id, timeout[, (pid, epoch)])
                                    new id: a producer id, epoch 0. Known id:
                                    the epoch is bumped (a new producer id at
                                    epoch 32766). An Ongoing transaction of the
                                    previous instance is aborted instead, with a
                                    bumped epoch (PrepareEpochFence), which
                                    fences that instance everywhere, and the
                                    answer is ConcurrentTransactionsError: the
                                    caller retries (init_producer_id_retrying)
                                    and gets the epoch after. A transaction
                                    left completing (Prepare*) gets the same
                                    answer once its markers are tried again;
                                    the retry after they land bumps the epoch.
                                    A caller naming its producer id and epoch
                                    (KIP-360) is fenced unless they are the
                                    current ones, or the last ones (a retry: no
                                    new bump).
    add_partitions(id, pid, epoch, tps) / add_offsets(..., group)
                                    Ongoing, with the partitions added.
    end_txn(id, pid, epoch, commit) PrepareCommit/PrepareAbort written, a marker
                                    to every partition of the transaction, then
                                    CompleteCommit/CompleteAbort written. Over
                                    the wire it is answered once the decision is
                                    written, whatever its markers do (retried).
    timeouts                        every transaction.abort.timed.out.transaction.
                                    cleanup.interval.ms, an Ongoing transaction
                                    older than its timeout is aborted as a fence
                                    (epoch bumped), as Kafka's.
    describe_transaction(id) / list_transactions(filters)
                                    what DescribeTransactions and ListTransactions
                                    answer: the ids coordinated here.

Each transition is written to `__transaction_state` and fsynced before it is
applied (transaction.py). Requests carrying another producer id than the
transactional id's get InvalidProducerIdMappingError; an older epoch,
ProducerFencedError.

Thread-safety: one lock over every transactional id's metadata; markers are
written under it (an EndTxn's markers must not interleave with a fence's).
"""
import logging
import threading
import time

from ..errors import (ConcurrentTransactionsError, InvalidProducerIdMappingError,
                      InvalidRegularExpressionError, InvalidRequestError,
                      InvalidTransactionTimeoutError, InvalidTxnStateError,
                      LogClosedError, NotCoordinatorError, ProducerFencedError, ReadOnlyError,
                      StreamlogError, TimerClosedError, TransactionAbortableError,
                      TransactionalIdNotFoundError, TransactionCoordinatorFencedError,
                      UnknownTopicOrPartitionError)
from ..re2j import PatternError, compile_pattern
from .group_coordinator import find_coordinator
from .offsets import OFFSETS_TOPIC
from .transaction import (COMPLETED, EXPIRABLE, PREPARING, STATE_NAMED, S,
                          TransactionMetadata)
from .transaction_log import TRANSACTION_STATE_TOPIC, TransactionLog

log = logging.getLogger("streamlog.transactions")

SERVICE = "transaction-coordinator"
MAX_EPOCH = 2**15 - 1  # int16: an epoch at MAX_EPOCH - 1 is exhausted: a new producer id
RETRY_BACKOFF_S = 0.1   # Kafka's producer retry.backoff.ms


def find_transaction_coordinator(broker):
    """The coordinator of the broker's transactions (made on first use; closed with it)."""
    return broker.attach_service(SERVICE, TransactionCoordinator)


def has_transactions(broker):
    """True once a transactional producer used this database (its log exists)."""
    return TRANSACTION_STATE_TOPIC in broker.topics()


def init_producer_id_retrying(coordinator, transactional_id, timeout_ms, expected=None,
                              max_block_s=60.0):
    """coordinator.init_producer_id as an in-process client calls it: retried while it
    answers ConcurrentTransactionsError, as Kafka's producer retries InitProducerId
    (TransactionManager.InitProducerIdHandler) until max.block.ms. The first retry is at
    once: that answer comes after the fenced transaction's abort completed. Another
    instance reopening the id in between makes it answer so again: then it backs off."""
    deadline = time.monotonic() + max_block_s
    retries = 0
    while True:
        try:
            return coordinator.init_producer_id(transactional_id, timeout_ms, expected)
        except ConcurrentTransactionsError:
            if time.monotonic() >= deadline:
                raise
            if retries:
                time.sleep(min(RETRY_BACKOFF_S, max(deadline - time.monotonic(), 0)))
            retries += 1


def _id_matcher(pattern):
    """A test of a transactional id against ListTransactions' pattern: every id passes
    without one."""
    if not pattern:
        return lambda transactional_id: True
    try:
        compiled = compile_pattern(pattern)
    except PatternError as exc:
        raise InvalidRegularExpressionError(str(exc)) from None
    return lambda transactional_id: compiled.fullmatch(transactional_id) is not None


class TransactionCoordinator:
    def __init__(self, broker):
        if broker.readonly:
            raise ReadOnlyError("transactions need the database open for writing")
        self._broker = broker
        self._config = broker.config
        self._lock = threading.RLock()
        self._closed = False
        self._log = TransactionLog(broker, self._config.transaction_state_log_num_partitions)
        self._timeout_task = self._expiry_task = None
        self._finish_pending()
        self._schedule_timeouts()
        self._schedule_expiry()

    # --- requests ------------------------------------------------------------------------

    def init_producer_id(self, transactional_id, timeout_ms, expected=None):
        """(producer id, epoch) for the producer that now owns transactional_id.

        expected: the (producer id, epoch) the caller holds, or None (KIP-360: a producer
        bumping its own epoch after an error names them, so that a fenced one cannot
        fence its successor); checked as Kafka's prepareInitProducerIdTransit does."""
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidRequestError("a transactional id is a non-empty string")
        maximum = self._config.transaction_max_timeout_ms
        if not 0 < timeout_ms <= maximum:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={timeout_ms} must be in 1..{maximum} "
                "(the database's transaction.max.timeout.ms)")
        with self._lock:
            self._check_open()
            self._log.check_leads(transactional_id)
            now = self._broker.clock_ms()
            meta = self._log.transactions.get(transactional_id)
            if meta is None or meta.state == S.DEAD:
                pid, _ = self._broker.init_producer_id()
                meta = TransactionMetadata(transactional_id, pid, -1, timeout_ms, S.EMPTY)
            else:
                self._check_expected_producer_id(meta, expected)
                if meta.state in PREPARING or meta.state == S.PREPARE_EPOCH_FENCE:
                    # Kafka's prepareInitProducerIdTransit answers CONCURRENT_TRANSACTIONS
                    # while a completion's markers are pending, whether they land now or
                    # not; the client retries, and finds the transaction complete.
                    self._finish_completion(meta)
                    raise ConcurrentTransactionsError(
                        f"transaction {transactional_id!r} was completing; retry "
                        "InitProducerId")
                if meta.state == S.ONGOING:
                    # Kafka's handleInitProducerId: the open transaction is aborted with a
                    # bumped epoch (prepareFenceProducerEpoch), an epoch "never returned to
                    # the user", and the answer is CONCURRENT_TRANSACTIONS; the client's
                    # retry finds CompleteAbort and bumps the epoch a second time (or
                    # moves to a new producer id if the fence exhausted the epochs). A
                    # KIP-360 caller's retry is fenced: its epoch is neither the current
                    # nor the last. The abort is complete here when the error is raised.
                    self._fence_and_abort(meta, "a new instance called init_transactions()")
                    raise ConcurrentTransactionsError(
                        f"transactional id {transactional_id!r} had an open transaction: it "
                        "was aborted and its producer fenced; retry InitProducerId")
            pid, epoch, last_epoch = self._next_producer(meta, expected)
            meta = meta.prepare(S.EMPTY, now, producer_id=pid, producer_epoch=epoch,
                                timeout_ms=timeout_ms, last_producer_epoch=last_epoch,
                                previous_producer_id=meta.producer_id)
            self._log.write(meta, now)
            return meta.producer_id, meta.producer_epoch

    @staticmethod
    def _check_expected_producer_id(meta, expected):
        """Kafka's isValidProducerId (TransactionCoordinator.scala:216-228): the caller's
        producer id must be the transactional id's, or the one it had before a new
        producer id replaced an exhausted epoch (a retry of that InitProducerId)."""
        if expected is None or meta.producer_epoch < 0:
            return
        producer_id, epoch = expected
        if producer_id == meta.producer_id or (
                producer_id == meta.previous_producer_id and epoch >= MAX_EPOCH - 1):
            return
        raise ProducerFencedError(
            f"producer id {producer_id} is not transactional id {meta.transactional_id!r}'s "
            f"({meta.producer_id}): another instance replaced it; close this producer")

    def _next_producer(self, meta, expected):
        """(producer id, epoch, last epoch) after InitProducerId: Kafka's
        prepareIncrementProducerEpoch and prepareProducerIdRotation (TransactionMetadata
        .scala:269-319; TransactionCoordinator.scala:243-262). The epoch goes up by one,
        and a new producer id with epoch 0 replaces an exhausted epoch. A caller naming
        its epoch (KIP-360) must hold the current one, or the last one, which means it
        retries a bump whose answer it lost: it gets the current epoch, bumped no more."""
        current, last = meta.producer_epoch, meta.last_producer_epoch
        if expected is not None and current >= 0 and expected[1] != current:
            if expected[1] != last:
                raise ProducerFencedError(
                    f"epoch {expected[1]} of transactional id {meta.transactional_id!r} is "
                    f"fenced: its epoch is {current}; close this producer")
            return meta.producer_id, current, last
        # A bump remembers the epoch it came from only when the caller named it: a new
        # instance (no epoch named) must make the last epoch's retries fenced.
        bumped_from = current if expected is not None else -1
        if current >= MAX_EPOCH - 1:
            return self._broker.init_producer_id()[0], 0, bumped_from
        return meta.producer_id, current + 1, bumped_from

    def state_partition(self, transactional_id):
        """The partition of __transaction_state that holds the id's state (the topic made
        on first use)."""
        with self._lock:
            return self._log.partition_of(transactional_id)

    def add_partitions(self, transactional_id, producer_id, epoch, partitions):
        """Make partitions part of the open transaction (Ongoing from now)."""
        with self._lock:
            meta = self._checked(transactional_id, producer_id, epoch)
            partitions = frozenset(partitions)
            if meta.state == S.ONGOING and partitions <= meta.partitions:
                return
            now = self._broker.clock_ms()
            meta = meta.prepare(S.ONGOING, now, partitions=meta.partitions | partitions)
            self._log.write(meta, now)

    def add_offsets(self, transactional_id, producer_id, epoch, group_id):
        """The group's partition of __consumer_offsets joins the transaction; returns it."""
        tp = find_coordinator(self._broker).offsets_partition(group_id)
        self.add_partitions(transactional_id, producer_id, epoch, [tp])
        return tp

    def verify_partitions(self, transactional_id, producer_id, epoch, partitions):
        """{tp: None, or why tp is not in the producer's open transaction} for a produce
        that would open a transaction on tp (Kafka's handleVerifyPartitionsInTransaction);
        raises when the whole request is refused (unknown id, fenced epoch, a transaction
        completing). Reads only: nothing is completed or written."""
        with self._lock:
            meta = self._owned(transactional_id, producer_id, epoch)
            if meta.state in PREPARING:
                raise ConcurrentTransactionsError(
                    f"transaction {transactional_id!r} is completing; retry")
            return {tp: None if tp in meta.partitions else TransactionAbortableError(
                        f"{tp} was not added to transaction {transactional_id!r}")
                    for tp in partitions}

    def end_txn(self, transactional_id, producer_id, epoch, commit, answer_when_decided=False):
        """Commit or abort the open transaction: every marker is written when this returns,
        or the first failure is raised (the caller's retry finishes the markers).
        answer_when_decided (the wire's EndTxn): once PrepareCommit/PrepareAbort is durable,
        a marker that cannot be written yet (a disk error, too few in-sync replicas) does
        not fail the call: Kafka's coordinator answers EndTxn as soon as the decision is
        written and its marker channel retries the markers, and a client takes any other
        answer for a failed end (fatal to its producer). The id's next request and the
        periodic check retry them here; until they land, the id's requests answer
        CONCURRENT_TRANSACTIONS."""
        with self._lock:
            meta = self._checked(transactional_id, producer_id, epoch)
            if meta.state in COMPLETED:
                if (meta.state == S.COMPLETE_COMMIT) == commit:
                    return  # a retry of the call that completed it
                raise InvalidTxnStateError(
                    f"transaction {transactional_id!r} was already "
                    f"{'committed' if meta.state == S.COMPLETE_COMMIT else 'aborted'}")
            if meta.state != S.ONGOING:
                raise InvalidTxnStateError(f"transaction {transactional_id!r} is "
                                           f"{meta.state.name}: there is nothing to end")
            now = self._broker.clock_ms()
            meta = meta.prepare(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now)
            self._log.write(meta, now)
            if not answer_when_decided:
                self._complete(meta)
                return
            try:
                self._finish_completion(meta)
            except ConcurrentTransactionsError as exc:
                log.warning("transaction %r: %s is written, a marker is not yet (%s); the "
                            "id's next request or the periodic check writes it",
                            transactional_id, meta.state.wire_name, exc)

    def describe(self, transactional_id):
        """The id's TransactionMetadata, or None."""
        with self._lock:
            return self._log.transactions.get(transactional_id)

    def describe_transaction(self, transactional_id):
        """The id's TransactionMetadata, where this broker coordinates it (Kafka's
        handleDescribeTransactions): an id it does not know, or one expiring (Dead), is
        TransactionalIdNotFoundError."""
        if not transactional_id:
            raise InvalidRequestError("a transactional id is a non-empty string")
        with self._lock:
            self._check_open()
            self._log.check_leads(transactional_id)
            meta = self._log.transactions.get(transactional_id)
            if meta is None or meta.state == S.DEAD:
                raise TransactionalIdNotFoundError(
                    f"transactional id {transactional_id!r} is not known here")
            return meta

    def list_transactions(self, producer_ids=(), state_names=(), min_duration_ms=-1,
                          id_pattern=None):
        """([metadata of each id this broker coordinates that passes the filters], [the state
        names that name no state]), as Kafka's listTransactionStates: an empty filter passes
        every id; min_duration_ms >= 0 passes the transactions open longer than it;
        id_pattern (KIP-1152; None or empty: no filter) passes the ids it matches whole, an
        RE2/J pattern, InvalidRegularExpressionError when it is none; Dead ids are never
        listed. CoordinatorLoadInProgressError while a partition of the transaction log this
        broker leads is loading."""
        matches = _id_matcher(id_pattern)
        states = {STATE_NAMED[name] for name in state_names if name in STATE_NAMED}
        unknown = [name for name in state_names if name not in STATE_NAMED]
        producer_ids = set(producer_ids)
        with self._lock:
            self._check_open()
            self._log.check_none_loading()
            now = self._broker.clock_ms()
            listed = [meta for meta in self._log.transactions.values()
                      if meta.state != S.DEAD and self._log.leads(meta.transactional_id)
                      and (not producer_ids or meta.producer_id in producer_ids)
                      and (not state_names or meta.state in states)
                      and (min_duration_ms < 0 or now - meta.start_ms > min_duration_ms)
                      and matches(meta.transactional_id)]
        return listed, unknown

    # --- internals --------------------------------------------------------------------------

    def _owned(self, transactional_id, producer_id, epoch):
        """The id's metadata, once producer_id at epoch is known to own it."""
        self._check_open()
        self._log.check_leads(transactional_id)
        meta = self._log.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"producer id {producer_id} does not own transactional id {transactional_id!r}"
                "; call init_transactions() first")
        if epoch != meta.producer_epoch:
            raise ProducerFencedError(
                f"producer {producer_id} (epoch {epoch}) of transactional id "
                f"{transactional_id!r} was fenced: epoch {meta.producer_epoch} replaced it "
                "(another instance called init_transactions(), or a transaction outlived "
                "transaction.timeout.ms); close this producer")
        return meta

    def _checked(self, transactional_id, producer_id, epoch):
        """_owned, with a completion a stop or a failure cut short finished first."""
        meta = self._owned(transactional_id, producer_id, epoch)
        if meta.state in PREPARING or meta.state == S.PREPARE_EPOCH_FENCE:
            self._finish_completion(meta)
            meta = self._log.transactions[transactional_id]
            if meta.producer_epoch != epoch:
                raise ProducerFencedError(
                    f"producer {producer_id} (epoch {epoch}) of transactional id "
                    f"{transactional_id!r} was fenced while its transaction completed; close "
                    "this producer")
        return meta

    def _finish_completion(self, meta):
        """Finish a completion that a stop or a failure cut short (a marker's append), or
        say why not as ConcurrentTransactionsError, which the caller's client retries
        (Kafka answers so while the markers are pending); the retry then finds it
        complete."""
        try:
            self._complete(meta)
        except (LogClosedError, TimerClosedError):
            raise
        except StreamlogError as exc:
            raise ConcurrentTransactionsError(
                f"transaction {meta.transactional_id!r} is still completing ({exc}); "
                "retry") from exc

    def _fence_and_abort(self, meta, why):
        """Abort an Ongoing transaction with a bumped epoch, which fences its producer."""
        log.info("transaction %r: aborting the open transaction of epoch %d (%s)",
                 meta.transactional_id, meta.producer_epoch, why)
        now = self._broker.clock_ms()
        meta = meta.prepare(S.PREPARE_EPOCH_FENCE, now, producer_epoch=meta.producer_epoch + 1,
                            last_producer_epoch=-1)   # Kafka's prepareFenceProducerEpoch
        self._log.write(meta, now)
        meta = meta.prepare(S.PREPARE_ABORT, now)
        self._log.write(meta, now)
        # The abort is decided: a marker that cannot be written yet is retried later, and
        # the caller hears ConcurrentTransactionsError, as Kafka answers once PrepareAbort
        # is written.
        self._finish_completion(meta)

    def _complete(self, meta):
        """Finish a Prepare* (or PrepareEpochFence) transaction: markers, then Complete*."""
        now = self._broker.clock_ms()
        if meta.state == S.PREPARE_EPOCH_FENCE:
            meta = meta.prepare(S.PREPARE_ABORT, now)
            self._log.write(meta, now)
        commit = meta.state == S.PREPARE_COMMIT
        coordinator_epoch = self._log.coordinator_epoch(meta.transactional_id)
        markers = [(tp, meta.producer_id, meta.producer_epoch, coordinator_epoch, commit)
                   for tp in sorted(meta.partitions)]
        marked = []
        clustered = self._broker.replicas is not None
        for marker in markers:
            try:
                self._broker.write_txn_markers([marker])
            except TransactionCoordinatorFencedError as exc:
                # A newer coordinator of the id finished this transaction and wrote there
                # since: this broker no longer coordinates it (Kafka's marker channel drops
                # the transaction's markers); the client asks the new one.
                raise NotCoordinatorError(f"transaction {meta.transactional_id!r}: {exc}") \
                    from None
            except UnknownTopicOrPartitionError:
                # The topic was deleted: no partition is left to mark (Kafka drops these too).
                log.info("transaction %r: %s is gone; no marker written there",
                         meta.transactional_id, marker[0])
                continue
            marked.append(marker[0])
            if marker[0].topic == OFFSETS_TOPIC and not clustered:
                # The group's pending offsets of this transaction apply now, or are dropped
                # (in a cluster, by the coordinator of the broker that leads the partition:
                # the cluster's marker writer tells it).
                find_coordinator(self._broker).complete_transaction(marker[0],
                                                                    meta.producer_id, commit)
        # The markers are durable before the transaction is called complete: a Complete
        # record that outlived a lost marker would leave that partition's transaction open
        # for good (Kafka appends markers with acks=all for the same reason; in a cluster
        # the marker writer waited for the in-sync replicas).
        for tp in marked if not clustered else ():
            self._broker.partition_log(tp).flush()
        meta = meta.prepare(S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, now)
        self._log.write(meta, now, durable=False)

    def take_over(self, partition, coordinator_epoch):
        """This broker now leads `partition` of __transaction_state (a cluster's election):
        its transactional ids are loaded from what the replica holds, and what their last
        coordinator left between Prepare* and Complete* is finished (Kafka's
        TransactionStateManager loading a partition, then resending markers)."""
        with self._lock:
            self._check_open()
            loaded = [self._log.transactions[transactional_id]
                      for transactional_id in self._log.reload_partition(partition,
                                                                         coordinator_epoch)]
            try:
                self._finish_unfinished(loaded)
            except (LogClosedError, TimerClosedError):
                pass   # this broker is stopping: the next leader finishes them

    def resign(self, partition):
        """This broker no longer leads `partition` of __transaction_state but stays up (a
        cluster's preferred-leader election): its ids are unloaded (Kafka's
        TransactionStateManager.removeTransactionsForTxnTopicPartition). Requests about
        them answer NOT_COORDINATOR already (the leadership check); the new leader loads
        them at a higher coordinator epoch, which fences this broker's markers."""
        with self._lock:
            self._log.unload_partition(partition)

    def _finish_pending(self):
        """At open: complete what a stop left between Prepare* and Complete* (in a cluster,
        of the ids this broker coordinates; take_over does the others' when it may)."""
        with self._lock:
            self._finish_unfinished([meta for meta in list(self._log.transactions.values())
                                     if self._log.leads(meta.transactional_id)])

    # --- timeouts ---------------------------------------------------------------------------

    def _schedule(self, interval_ms, work):
        """work() on the appender thread (it writes) in interval_ms: the timer's task, or
        None once the timer is closed."""
        try:
            return self._broker.timer.add(
                interval_ms, lambda: self._broker.appender.submit(self, work))
        except TimerClosedError:
            return None

    def _schedule_timeouts(self):
        self._timeout_task = self._schedule(
            self._config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            self.abort_timed_out)

    def _schedule_expiry(self):
        self._expiry_task = self._schedule(
            self._config.transaction_remove_expired_transaction_cleanup_interval_ms,
            self.expire_transactional_ids)

    def expire_transactional_ids(self):
        """Forget the ids with no transaction open (Empty, CompleteCommit, CompleteAbort)
        whose state has not changed for transactional.id.expiration.ms, as Kafka's
        TransactionStateManager.removeExpiredTransactionalIds does, with a tombstone each:
        InitProducerId then gives the id a new producer id, and its old producer gets
        INVALID_PRODUCER_ID_MAPPING. Returns how many were removed."""
        with self._lock:
            if self._closed:
                return 0
            now = self._broker.clock_ms()
            cutoff = now - self._config.transactional_id_expiration_ms
            expired = [m.transactional_id for m in self._log.transactions.values()
                       if m.state in EXPIRABLE and m.last_update_ms <= cutoff and
                       self._log.leads(m.transactional_id)]
            try:
                if expired:
                    self._log.remove(expired, now)
            except (LogClosedError, TimerClosedError):
                return 0
            except StreamlogError as exc:
                log.warning("expired transactional ids stay until the next check: %s", exc)
                return 0
            finally:
                if not self._closed:
                    self._schedule_expiry()
            return len(expired)

    def abort_timed_out(self):
        """Abort, as fences, the Ongoing transactions older than their timeout."""
        with self._lock:
            if self._closed:
                return 0
            now = self._broker.clock_ms()
            mine = [m for m in self._log.transactions.values()
                    if self._log.leads(m.transactional_id)]
            expired = [m for m in mine
                       if m.state == S.ONGOING and m.start_ms + m.timeout_ms < now]
            try:
                # Each id alone, as Kafka's abortTimedOutTransactions: one whose markers
                # cannot be written must not hold back the others (their LSOs wait on them).
                self._finish_unfinished(mine)
                for meta in expired:
                    try:
                        self._fence_and_abort(meta, f"open longer than its "
                                                    f"transaction.timeout.ms ({meta.timeout_ms} ms)")
                    except (LogClosedError, TimerClosedError):
                        raise
                    except StreamlogError as exc:
                        log.warning("transaction %r: aborting it failed (%s); the next check "
                                    "tries again", meta.transactional_id, exc)
            except (LogClosedError, TimerClosedError):
                return 0
            finally:
                if not self._closed:
                    self._schedule_timeouts()
            return len(expired)

    def _finish_unfinished(self, metas):
        """Complete the Prepare* (and PrepareEpochFence) transactions among metas, each alone:
        one whose markers cannot be written yet is left for the next timeout check, as
        Kafka's marker channel retries it, and the others go on."""
        for meta in metas:
            if meta.state in PREPARING or meta.state == S.PREPARE_EPOCH_FENCE:
                try:
                    self._complete(meta)
                except (LogClosedError, TimerClosedError):
                    raise
                except StreamlogError as exc:
                    log.warning("transaction %r: finishing %s failed (%s); the next timeout "
                                "check tries again", meta.transactional_id, meta.state.name, exc)

    # --- lifecycle ------------------------------------------------------------------------

    def _check_open(self):
        if self._closed:
            raise LogClosedError(f"the database {self._broker.root} is closed")

    def close(self):
        with self._lock:
            self._closed = True
            for task in (self._timeout_task, self._expiry_task):
                if task is not None:
                    try:
                        self._broker.timer.cancel(task)
                    except TimerClosedError:
                        pass
