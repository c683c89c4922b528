"""One broker's share of a replicated cluster: which partitions it leads or follows, and
what a leader knows of its followers (Kafka's ReplicaManager and Partition, core/).

The controller (streamlog.cluster) decides each partition's PartitionState -- leader,
leader epoch, replicas, in-sync replicas (ISR) -- and pushes it to every live broker
(apply). A broker leads a partition when the state names it; it follows when it holds a
replica and another leads. Kafka's rules, as kept here:

  - Leader appends stamp the leader epoch into each batch (storage/partition_log.py). A
    follower copies the leader's batches, offsets and epochs unchanged.
  - acks=all: refused with NOT_ENOUGH_REPLICAS, nothing written, when the ISR is smaller
    than min(min.insync.replicas, replicas) (Partition.appendRecordsToLeader); otherwise
    answered once the high watermark passes the batch -- then NOT_ENOUGH_REPLICAS_AFTER_
    APPEND if the maximal ISR (below) shrank below the minimum meanwhile (DelayedProduce,
    Partition.checkEnoughReplicasReachOffset).
  - The high watermark is the smallest log end offset (LEO) among the ISR; it only moves
    up, and not at all while the ISR is below the minimum (Kafka 3.7+, KAFKA-15583). A new
    leader keeps the high watermark it had and knows no follower's LEO until each fetches.
  - A follower's fetch tells the leader its LEO, once the read succeeded (one out of range
    tells nothing: Partition.fetchRecords). It is caught up when it fetched at the
    leader's LEO, or at the LEO the leader had at its previous fetch (then as of that
    fetch); one not caught up for replica.lag.time.max.ms leaves the ISR (isr-expiration,
    every half of that), unless its LEO is the leader's (Replica.isCaughtUp): a follower
    that stopped fetching with nothing left to copy stays in, and may lead cleanly, until
    the leader appends something it lacks. One at or past the high watermark and the
    current epoch's start offset joins it again. ISR changes go through the controller
    (AlterPartition), one at a time per partition, each naming the leader and partition
    epochs of the state it was decided from: a decision the state has moved past since is
    refused, never applied to the newer state. It also names each member's broker epoch as
    the leader last saw it (below): a member that restarted since is refused too.
  - From the moment the leader decides to add a follower, the high watermark waits for
    that follower too (Kafka's "maximal ISR", Partition.scala PendingExpandIsr): were it
    computed over the committed ISR alone until the controller answers, it could pass
    records the joining follower lacks, and that follower, once in the ISR, could be
    elected without them.
  - It also waits for a live follower outside the ISR that is caught up, as the ISR
    rule above counts it (Partition.maybeIncrementLeaderHW, shouldWaitForReplicaToJoinIsr):
    otherwise, under a steady stream of appends, the high watermark, at the other
    replicas' log end, stays ahead of such a follower's fetch offset, and it seldom or
    never reaches it to join the ISR again.
  - Each start of a broker is a new incarnation with a new broker epoch (the controller's;
    KIP-903), which its fetches carry. The leader refuses a fetch naming an older epoch
    than the broker's current one, a late fetch of the incarnation before a restart,
    with NOT_LEADER_OR_FOLLOWER, and leaves the follower's state as it was
    (Replica.updateFetchStateOrThrow). A follower is eligible for the ISR -- to join it,
    or to be waited for by the high watermark as caught up -- only once it fetched in
    its current incarnation (Partition.isReplicaIsrEligible): the log end the leader
    recorded of an earlier one may be past the restarted log's, which lost its unflushed
    tail, and a restarted follower may not fetch for a while. Its caught-up time carries
    over, as in Kafka's Replica: only a new leader epoch resets a follower's state.
  - A replica that becomes a follower truncates, before it fetches, to where its log and
    the leader's part: OffsetsForLeaderEpoch for its latest epoch (KIP-101, KIP-279);
    with no epoch known, to its high watermark.

The high watermarks are checkpointed in `replication-offset-checkpoint` at the root
(Kafka's file and format), on the expiration tick and at close; a restarted broker starts
each partition from it.

Lock order: a replica manager never calls the controller or another broker while holding
its lock (the controller calls apply() while holding its own). Each replica also has a
role lock (Kafka's per-partition Partition.leaderIsrUpdateLock), taken inside the manager's:
a follower's append holds only that one, as the change of role it must not straddle (a
new leader epoch, the replica's removal) takes it too. Held for the whole append, the
manager's lock would stop every other partition of the broker -- the controller's pushes
of their states, the leader's reads and acks -- behind one large fetch.
"""
import contextlib
import logging
import os
import queue
import threading
import time
from typing import NamedTuple

from ..errors import (CoordinatorLoadInProgressError, FencedLeaderEpochError,
                      LeaderNotAvailableError, NotCoordinatorError,
                      NotEnoughReplicasAfterAppendError, NotEnoughReplicasError,
                      NotLeaderOrFollowerError, OffsetNotAvailableError,
                      RequestTimedOutError, StreamlogError, UnknownLeaderEpochError)
from ..storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from ..storage.producer_state import UNVERIFIED

LOAD_RETRY_S = 1.0   # after a leadership listener failed to load a partition
_LOW_WATERMARK_RECHECK_S = 0.1

log = logging.getLogger("streamlog.replication")

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
NO_LEADER = -1
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30000


class PartitionState(NamedTuple):
    """What the controller decided for one partition."""

    leader: int            # broker id, NO_LEADER when none is eligible
    leader_epoch: int
    replicas: tuple        # broker ids, in assignment order
    isr: tuple             # in-sync replicas, the leader among them
    partition_epoch: int   # bumped by every change (AlterPartition's optimistic check)


class ReplicaFetch(NamedTuple):
    """A leader's answer to a follower's fetch of one partition."""

    batches: list
    high_watermark: int
    log_start_offset: int
    error: object = None


class FollowerPosition(NamedTuple):
    """Where a follower's fetch of one partition stands (Kafka's FetchRequest partition)."""

    fetch_offset: int
    leader_epoch: int
    log_start_offset: int = -1   # -1: not told (the leader then takes it for unknown)


class _Follower:
    __slots__ = ("leo", "log_start", "last_caught_up_ms", "last_fetch_ms",
                 "leader_leo_at_last_fetch", "broker_epoch")

    def __init__(self, in_sync, now_ms):
        self.leo = -1   # unknown until it fetches from this leader
        self.log_start = -1   # likewise
        self.last_caught_up_ms = now_ms if in_sync else 0
        self.last_fetch_ms = 0
        self.leader_leo_at_last_fetch = -1
        self.broker_epoch = None   # of its last fetch (-1: it named none); None: no fetch yet


class _Replica:
    """One partition on this broker."""

    __slots__ = ("tp", "log", "state", "followers", "epoch_start_offset", "waiters",
                 "needs_truncation", "pending_isr", "role_lock")

    def __init__(self, tp, partition_log, state):
        self.tp = tp
        self.log = partition_log
        self.state = state
        self.followers = {}
        self.epoch_start_offset = 0
        self.waiters = []            # acks=all: (required offset, callback(error or None))
        self.needs_truncation = False
        self.pending_isr = None      # the ISR this leader proposed, until the controller answers
        # A follower's append, and a change of role it must not straddle (see the module doc).
        self.role_lock = threading.Lock()

    def maximal_isr(self):
        """The committed ISR and any follower a pending change adds (see the module doc)."""
        if self.pending_isr is None:
            return self.state.isr
        return self.state.isr + tuple(r for r in self.pending_isr if r not in self.state.isr)


class ReplicaManager:
    def __init__(self, broker, node_id, controller,
                 replica_lag_time_max_ms=DEFAULT_REPLICA_LAG_TIME_MAX_MS):
        """controller: what this broker asks of the controller --
        alter_partitions(node_id, [(tp, leader_epoch, partition_epoch, isr, broker_epochs)])
        -> {tp: PartitionState, or None when refused (stale, or a member no longer
        eligible)},
        allocate_producer_ids(node_id) -> range -- and knows of it: alive, the ids of the
        brokers in the cluster now (Kafka's unfenced brokers of the metadata cache), and
        broker_epochs, {broker id: the broker epoch of its current incarnation} of those."""
        self.broker = broker
        self.node_id = node_id
        self.broker_epoch = -1   # this incarnation's, given by the controller as it starts
        self.controller = controller
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.clock_ms = broker.clock_ms
        self._replicas = {}
        self._fenced = False
        self._lock = threading.RLock()
        # Wakes replica fetches that wait at the log end (a follower's long poll), and this
        # broker's idle fetchers when a state it follows changes (wait_for_change).
        self._appended = threading.Condition()
        self.version = 0   # bumped by every apply()
        # Called with (tp, leader epoch) when this broker becomes tp's leader (a new epoch),
        # on a thread of their own: the cluster's coordinators load the internal partitions
        # they now lead. Not on the controller's thread: a load writes and waits for the
        # followers, which learn of the change only after the controller's push to them.
        self.leadership_listeners = []
        # Called with tp, on the same thread and in order with the loads, when this broker
        # stops leading a partition its listeners loaded while it stays alive (a preferred
        # leader election): the coordinators unload it (Kafka's onResignation).
        self.resignation_listeners = []
        self._elections = queue.SimpleQueue()
        self._loaded = {}   # tp -> the leader epoch its listeners last finished loading
        self._loader = threading.Thread(target=self._run_listeners, daemon=True,
                                        name=f"streamlog-coordinator-loader-{node_id}")
        self._loader.start()
        self._checkpoint = OffsetCheckpointFile(os.path.join(broker.root,
                                                             HIGH_WATERMARK_CHECKPOINT))
        try:
            self._checkpointed = self._checkpoint.read()
        except CorruptCheckpointError as exc:
            log.warning("%s; high watermarks start from 0", exc)
            self._checkpointed = {}
        self._closed = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True,
                                        name=f"streamlog-isr-expiration-{node_id}")
        self._ticker.start()

    # --- what the controller decides ------------------------------------------

    def apply(self, tp, state):
        """Take the controller's state of tp: become its leader or a follower, or take a
        new ISR. Only a replica listed in state.replicas keeps a role."""
        with self._lock:
            replica = self._replicas.get(tp)
            if self.node_id not in state.replicas:
                if replica is not None:
                    with replica.role_lock:
                        self._fail_waiters(replica, NotLeaderOrFollowerError(
                            f"broker {self.node_id} no longer holds a replica of {tp}"))
                        del self._replicas[tp]
                return
            old = None if replica is None else replica.state
            new_epoch = old is None or state.leader_epoch != old.leader_epoch
            elected = state.leader == self.node_id and new_epoch
            resigned = old is not None and old.leader == self.node_id and \
                state.leader != self.node_id
            if replica is None:
                partition_log = self.broker.partition_log(tp)
                partition_log.start_replication(self._checkpointed.get(tp, 0))
                # Whole before it is seen: fetchers read the map without the lock.
                replica = _Replica(tp, partition_log, state)
                replica.needs_truncation = state.leader != self.node_id
                self._replicas[tp] = replica
            if old is not None and state.partition_epoch != old.partition_epoch:
                # The proposal pending here (if any) was decided from the older state: it was
                # just applied, or the controller will refuse it.
                replica.pending_isr = None
            # A new ISR alone changes no role: it need not wait for a follower's append.
            with replica.role_lock if new_epoch else contextlib.nullcontext():
                self._take_state(replica, state, new_epoch)
            if (elected and self.leadership_listeners) or \
                    (resigned and self.resignation_listeners):
                self._elections.put(tp)
        with self._appended:
            self.version += 1
            self._appended.notify_all()   # a waiting replica fetch sees the change

    def _take_state(self, replica, state, new_epoch):
        """apply()'s change of replica to state (under the locks apply takes)."""
        if state.leader == self.node_id:
            replica.state = state
            if new_epoch:
                self._become_leader(replica)
            self._maybe_advance_high_watermark(replica)
            self._complete_waiters(replica)
        elif new_epoch:
            # The flag before the new state (fetchers read both without the lock): a
            # fetcher that sees the new epoch also sees that it must truncate first.
            replica.needs_truncation = True
            replica.log.become_follower()
            replica.followers = {}
            replica.state = state
            self._fail_waiters(replica, NotLeaderOrFollowerError(
                f"broker {self.node_id} no longer leads {replica.tp}"))
        else:
            replica.state = state

    def _run_listeners(self):
        while True:
            tp = self._elections.get()
            if tp is None:
                return
            replica = self._replicas.get(tp)
            if replica is None or self._fenced:
                continue
            if replica.state.leader != self.node_id:
                self._resign(tp)
                continue
            epoch, loaded = replica.state.leader_epoch, True
            if self._loaded.get(tp) == epoch:
                # A retry of an earlier epoch's failed load, after this epoch's succeeded
                # (each election queues a new epoch once): loading again would reset the
                # groups it serves, their members with them.
                continue
            for listener in self.leadership_listeners:
                try:
                    listener(tp, epoch)
                except Exception:
                    loaded = False
                    if not self._closed.is_set():
                        log.exception("broker %d: taking over %s failed; trying again in "
                                      "%g s", self.node_id, tp, LOAD_RETRY_S)
            if loaded:
                self._loaded[tp] = epoch
            elif not self._closed.is_set():
                # Until a load succeeds the partition's coordinator answers LOAD_IN_PROGRESS
                # (its memory is an older leader's): a failure (a disk error) is retried.
                retry = threading.Timer(LOAD_RETRY_S, self._elections.put, (tp,))
                retry.daemon = True
                retry.start()

    def _resign(self, tp):
        """This broker no longer leads tp: what its listeners loaded of it is unloaded."""
        if self._loaded.pop(tp, None) is None:
            return
        for listener in self.resignation_listeners:
            try:
                listener(tp)
            except Exception:
                if not self._closed.is_set():
                    log.exception("broker %d: unloading %s failed", self.node_id, tp)

    def check_loaded(self, tp):
        """For a coordinator's request about a key of tp (an internal topic's partition):
        NotCoordinatorError unless this broker leads tp, CoordinatorLoadInProgressError
        until its leadership listeners have loaded tp at the current leader epoch (Kafka's
        COORDINATOR_LOAD_IN_PROGRESS: what memory holds of tp is an older leader's)."""
        if not self.leads(tp):
            raise NotCoordinatorError(f"broker {self.node_id} does not lead {tp}")
        replica = self._replicas.get(tp)
        if replica is None or self._loaded.get(tp) != replica.state.leader_epoch:
            raise CoordinatorLoadInProgressError(f"broker {self.node_id} is loading {tp}")

    def loaded(self, tp):
        """Whether check_loaded(tp) passes."""
        try:
            self.check_loaded(tp)
        except (NotCoordinatorError, CoordinatorLoadInProgressError):
            return False
        return True

    def wait_for_change(self, seen_version, timeout):
        """Wait up to timeout while no apply() came after seen_version (an idle fetcher)."""
        with self._appended:
            if self.version == seen_version and not self._closed.is_set():
                self._appended.wait(timeout)

    def wake_fetchers(self):
        """End wait_for_change() waits now (the cluster is stopping this broker's fetchers),
        and have waiting replica fetches look again at why they wait (replica_fetch)."""
        with self._appended:
            self._appended.notify_all()

    def fence(self):
        """The controller let this broker go (it is stopping or was killed): it refuses to
        lead anything from now on, and waiting acks=all requests fail."""
        with self._lock:
            self._fenced = True
            for replica in self._replicas.values():
                self._fail_waiters(replica, NotLeaderOrFollowerError(
                    f"broker {self.node_id} is no longer in the cluster"))

    def forget(self, tp):
        """tp's topic is being deleted: its replica goes, waiting acks=all answered."""
        with self._lock:
            replica = self._replicas.get(tp)
            if replica is not None:
                with replica.role_lock:
                    del self._replicas[tp]
                    self._fail_waiters(replica, NotLeaderOrFollowerError(f"{tp} was deleted"))

    def _become_leader(self, replica):
        """Kafka's makeLeader: the epoch starts at the log end; every follower's LEO is
        unknown until it fetches; those in the ISR count as caught up from now."""
        partition_log = replica.log
        partition_log.become_leader(replica.state.leader_epoch)
        replica.epoch_start_offset = partition_log.log_end_offset
        replica.needs_truncation = False
        replica.pending_isr = None
        now = self.clock_ms()
        replica.followers = {r: _Follower(r in replica.state.isr, now)
                             for r in replica.state.replicas if r != self.node_id}
        log.info("broker %d leads %s in epoch %d from offset %d (ISR %s)", self.node_id,
                 replica.tp, replica.state.leader_epoch, replica.epoch_start_offset,
                 list(replica.state.isr))

    # --- queries --------------------------------------------------------------------

    def manages(self, tp):
        return tp in self._replicas

    def state(self, tp):
        replica = self._replicas.get(tp)
        return None if replica is None else replica.state

    def followed(self):
        """{tp: (leader id, leader epoch)} of the partitions this broker follows."""
        return {tp: (r.state.leader, r.state.leader_epoch) for tp, r in
                list(self._replicas.items()) if r.state.leader != self.node_id}

    def needs_truncation(self, tp):
        replica = self._replicas.get(tp)
        return replica is not None and replica.needs_truncation

    def leader_replica(self, tp, leader_epoch=None):
        """The replica of tp if this broker leads it; else the error Kafka answers."""
        replica = self._replicas.get(tp)
        if replica is None or self._fenced:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} holds no replica of {tp}"
                                           if replica is None else
                                           f"broker {self.node_id} is no longer in the cluster")
        state = replica.state
        if leader_epoch is not None and leader_epoch >= 0:
            if leader_epoch < state.leader_epoch:
                raise FencedLeaderEpochError(
                    f"leader epoch {leader_epoch} of {tp} is older than {state.leader_epoch}")
            if leader_epoch > state.leader_epoch:
                raise UnknownLeaderEpochError(
                    f"leader epoch {leader_epoch} of {tp} is newer than {state.leader_epoch}")
        if state.leader == NO_LEADER:
            raise LeaderNotAvailableError(f"{tp} has no leader now")
        if state.leader != self.node_id:
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} follows {tp}; broker {state.leader} leads it")
        return replica

    def check_offsets_available(self, tp):
        """A ListOffsets of tp that answers from the high watermark (all but the earliest
        offset): OffsetNotAvailableError while this new leader's high watermark is below
        the start of its epoch (Kafka's Partition.fetchOffsetForTimestamp, KIP-207). It then
        still lags the previous leader's, which clients may have read up to already: an
        answer from it would be an end offset older than the partition's."""
        replica = self.leader_replica(tp)
        if replica.log.high_watermark < replica.epoch_start_offset:
            raise OffsetNotAvailableError(
                f"{tp}: the high watermark {replica.log.high_watermark} of leader epoch "
                f"{replica.state.leader_epoch} has not reached the epoch's start offset "
                f"{replica.epoch_start_offset} yet")

    def check_readable(self, tp, current_leader_epoch=None):
        """A consumer's fetch or ListOffsets of tp: only its leader answers (KIP-392's
        follower fetching is not served), at the client's leader epoch if it names one."""
        self.leader_replica(tp, current_leader_epoch)

    # --- the leader's side -------------------------------------------------------

    def append(self, tp, data, origin=None, acks=1, verification=UNVERIFIED):
        """Append a client's (or a coordinator's) batches on the leader. acks=-1 first
        checks the ISR against min.insync.replicas; the caller then waits with
        when_replicated."""
        replica = self.leader_replica(tp)
        if acks == -1:
            # The committed ISR (Partition.appendRecordsToLeader): a pending addition is
            # not in it yet.
            self._check_enough_replicas(replica, NotEnoughReplicasError, replica.state.isr)
        info = replica.log.append(data, origin=origin, verification=verification)
        self._appended_here(replica)
        return info

    def appended_here(self, tp):
        """The leader wrote to tp by other means than append() (a transaction marker):
        the high watermark may move, and waiting follower fetches take the new batch, as
        Partition.appendRecordsToLeader ends (maybeIncrementLeaderHW)."""
        self._appended_here(self.leader_replica(tp))

    def _appended_here(self, replica):
        with self._lock:
            self._maybe_advance_high_watermark(replica)
        with self._appended:
            self._appended.notify_all()

    @staticmethod
    def _check_enough_replicas(replica, error, isr):
        """error unless isr holds min(min.insync.replicas, replicas) replicas."""
        needed = min(replica.log.config.min_insync_replicas, len(replica.state.replicas))
        if len(isr) < needed:
            raise error(f"{replica.tp} has {len(isr)} in-sync replica(s) {list(isr)}, fewer "
                        f"than min.insync.replicas={needed}")

    def when_replicated(self, tp, offset, callback):
        """callback(error or None) once the high watermark of tp reaches offset (acks=all),
        or at once with the error if this broker stops leading tp first."""
        with self._lock:
            try:
                replica = self.leader_replica(tp)
            except StreamlogError as exc:
                error = exc
            else:
                replica.waiters.append((offset, callback))
                self._complete_waiters(replica)
                return
        callback(error)

    def wait_replicated(self, tp, offset, timeout_s):
        """Block until when_replicated(tp, offset) answers: None, or raise its error
        (RequestTimedOutError after timeout_s). For the coordinators' own appends, which
        Kafka makes with acks=all."""
        done, outcome = threading.Event(), []
        self.when_replicated(tp, offset, lambda error: (outcome.append(error), done.set()))
        if not done.wait(timeout_s):
            raise RequestTimedOutError(f"{tp} was not replicated to offset {offset} within "
                                       f"{timeout_s} s")
        if outcome[0] is not None:
            raise outcome[0]

    def low_watermark(self, tp):
        """The smallest log start offset among tp's leader (this broker) and its followers
        the controller counts alive, in the ISR or not; -1 for one that has not fetched
        from this leader yet (Kafka's Partition.lowWatermarkIfLeader). Records below it
        are gone from every live replica."""
        replica = self.leader_replica(tp)
        with self._lock:
            low = replica.log.log_start_offset
            for replica_id in replica.state.replicas:
                if replica_id != self.node_id and replica_id in self.controller.broker_epochs:
                    follower = replica.followers.get(replica_id)
                    low = min(low, -1 if follower is None else follower.log_start)
            return low

    def wait_low_watermark(self, tp, offset, timeout_s):
        """Block until low_watermark(tp) reaches offset and return it, as Kafka's
        DelayedDeleteRecords waits before it answers a DeleteRecords: a deletion answered
        while a follower still holds the records would see them come back if that follower
        led next. RequestTimedOutError after timeout_s; NotLeaderOrFollowerError when this
        broker stops leading tp."""
        deadline = time.monotonic() + timeout_s
        while True:
            low = self.low_watermark(tp)
            remaining = deadline - time.monotonic()
            if low >= offset or remaining <= 0:
                break
            # Woken when a follower's fetch moves its log start; looked at again anyway
            # after a while, for the changes nothing signals here (a follower the
            # controller let go no longer counts) and a move between the look and the wait.
            with self._appended:
                self._appended.wait(min(remaining, _LOW_WATERMARK_RECHECK_S))
        if low < offset:
            raise RequestTimedOutError(
                f"the replicas of {tp} did not all delete the records below {offset} "
                f"within {timeout_s} s (their smallest log start is {low})")
        return low

    def leads(self, tp):
        """Whether this broker is tp's leader now."""
        replica = self._replicas.get(tp)
        return replica is not None and not self._fenced and \
            replica.state.leader == self.node_id

    def _complete_waiters(self, replica):
        if not replica.waiters:
            return
        hw = replica.log.high_watermark
        done = [w for w in replica.waiters if w[0] <= hw]
        if not done:
            return
        replica.waiters = [w for w in replica.waiters if w[0] > hw]
        error = None
        try:
            # Counted over the maximal ISR (Partition.checkEnoughReplicasReachOffset): a
            # follower being added already holds the high watermark back, so it counts
            # among the replicas that have the records.
            self._check_enough_replicas(replica, NotEnoughReplicasAfterAppendError,
                                        replica.maximal_isr())
        except NotEnoughReplicasAfterAppendError as exc:
            error = exc
        for _, callback in done:
            callback(error)

    def _fail_waiters(self, replica, error):
        waiters, replica.waiters = replica.waiters, []
        for _, callback in waiters:
            callback(error)

    def _maybe_advance_high_watermark(self, replica):
        """HW = min LEO over the ISR and the caught-up followers outside it, only upwards,
        never while the ISR is below the minimum (see the module doc). Under self._lock."""
        state = replica.state
        if state.leader != self.node_id:
            return
        if len(state.isr) < min(replica.log.config.min_insync_replicas, len(state.replicas)):
            return
        partition_log = replica.log
        leader_leo = candidate = partition_log.log_end_offset
        isr = replica.maximal_isr()
        for replica_id in isr:
            if replica_id == self.node_id:
                continue
            follower = replica.followers.get(replica_id)
            leo = -1 if follower is None else follower.leo
            if leo < 0:
                return   # a follower of this epoch that has not fetched yet
            candidate = min(candidate, leo)
        now = self.clock_ms()
        for replica_id, follower in replica.followers.items():
            if replica_id not in isr and follower.leo >= 0 and \
                    self._caught_up(follower, leader_leo, now) and \
                    self._isr_eligible(replica_id, follower):
                candidate = min(candidate, follower.leo)
        if candidate > partition_log.high_watermark and partition_log.set_high_watermark(
                candidate):
            self._complete_waiters(replica)
            self.broker.fetch_purgatory.check_and_complete(replica.tp)

    def _caught_up(self, follower, leader_leo, now):
        """Kafka's Replica.isCaughtUp: at the leader's LEO, or caught up within
        replica.lag.time.max.ms. A member of the ISR that is not leaves it; the high
        watermark waits for one outside it that is, so that it can reach the high
        watermark and join (see the module doc). None (no view of it): not caught up."""
        if follower is None:
            return False
        return follower.leo >= leader_leo or \
            now - follower.last_caught_up_ms <= self.replica_lag_time_max_ms

    def _isr_eligible(self, replica_id, follower):
        """Kafka's isReplicaIsrEligible: the follower is in the cluster now and its last
        fetch was of its current incarnation (or named no broker epoch: -1)."""
        current = self.controller.broker_epochs.get(replica_id)
        return current is not None and follower.broker_epoch in (-1, current)

    def replica_fetch(self, replica_id, partitions, max_bytes=1 << 20, max_wait_ms=0,
                      broker_epoch=-1, stale=None):
        """A follower's fetch: partitions = {tp: FollowerPosition (or a tuple of its
        fields)}, from the incarnation of broker_epoch (-1: unchecked, as Kafka's fetches
        without one). Records up to the log end (not the HW); after a successful read, the
        follower's LEO, log start, caught-up time and ISR membership are updated, as
        Kafka's updateFollowerFetchState does, and the answer carries the high watermark
        that follows. Waits up to
        max_wait_ms while nothing is new, and no longer once stale() (when given) is true:
        the asker has partitions to add to its fetch (a topic just made). Returns
        {tp: ReplicaFetch}."""
        deadline = time.monotonic() + max_wait_ms / 1000
        partitions = {tp: FollowerPosition(*position) for tp, position in partitions.items()}
        expand = []
        out = self._replica_read(replica_id, broker_epoch, partitions, max_bytes, expand)
        self._alter_isrs(expand)
        def waits():
            return self._asker_current(replica_id, broker_epoch) and \
                not (stale is not None and stale())
        while not any(r.batches or r.error for r in out.values()) and \
                time.monotonic() < deadline and not self._closed.is_set() and waits():
            with self._appended:
                # Asked again under the lock: a stop's or a new state's wake_fetchers()
                # notifies under it.
                if waits() and all(self._nothing_new(tp, position.fetch_offset)
                                   for tp, position in partitions.items()):
                    self._appended.wait(max(deadline - time.monotonic(), 0))
            out = self._replica_read(replica_id, broker_epoch, partitions, max_bytes, None)
        return out

    def _asker_current(self, replica_id, broker_epoch):
        """Whether the incarnation that sent a waiting fetch is still the registered one:
        once the controller lets it go (a stop or a kill), its fetch answers at once, so
        the cluster need not wait out replica.fetch.wait.max.ms before it is down."""
        return broker_epoch == -1 or \
            self.controller.broker_epochs.get(replica_id) == broker_epoch

    def _nothing_new(self, tp, offset):
        replica = self._replicas.get(tp)
        return replica is not None and replica.state.leader == self.node_id and \
            replica.log.log_end_offset <= offset

    def _replica_read(self, replica_id, broker_epoch, partitions, max_bytes, expand):
        out = {}
        now = self.clock_ms()
        log_starts_moved = False
        for tp, (offset, leader_epoch, log_start) in partitions.items():
            try:
                replica = self.leader_replica(tp, leader_epoch)
                if replica_id not in replica.state.replicas:
                    raise NotLeaderOrFollowerError(f"broker {replica_id} is no replica of {tp}")
                partition_log = replica.log
                leader_leo = partition_log.log_end_offset
                # The read first: only a fetch that succeeds moves the follower's state
                # (Partition.fetchRecords calls updateFollowerFetchState after its read).
                # An offset out of range is not where the follower's log ends: taken for
                # its LEO, it could pass the high watermark or bring it into the ISR.
                fetched = partition_log.read(offset, max_bytes, below_high_watermark=False)
                current = self.controller.broker_epochs.get(replica_id)
                if broker_epoch != -1 and current is not None and current > broker_epoch:
                    raise NotLeaderOrFollowerError(
                        f"a stale fetch of {tp} from broker {replica_id}: broker epoch "
                        f"{broker_epoch}, restarted since at {current}")
                with self._lock:
                    log_starts_moved |= self._update_follower(
                        replica, replica_id, offset, log_start, leader_leo, broker_epoch, now)
                    if expand is not None:
                        proposal = self._propose_isr(replica, self._isr_with(replica,
                                                                             replica_id))
                        if proposal is not None:
                            expand.append(proposal)
                    self._maybe_advance_high_watermark(replica)
                out[tp] = ReplicaFetch(fetched.batches, partition_log.high_watermark,
                                       partition_log.log_start_offset)
            except StreamlogError as exc:
                replica = self._replicas.get(tp)
                out[tp] = ReplicaFetch([], -1, -1 if replica is None else
                                       replica.log.log_start_offset, exc)
        if log_starts_moved:
            with self._appended:
                self._appended.notify_all()   # a DeleteRecords waits (wait_low_watermark)
        return out

    @staticmethod
    def _update_follower(replica, replica_id, offset, log_start, leader_leo, broker_epoch, now):
        """A follower's successful fetch at offset, its log starting at log_start, the
        leader's LEO leader_leo when it read (Replica.updateFetchStateOrThrow). Returns
        whether the follower's log start moved."""
        follower = replica.followers.get(replica_id)
        if follower is None:
            follower = replica.followers[replica_id] = _Follower(False, now)
        if offset >= leader_leo:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now)
        elif offset >= follower.leader_leo_at_last_fetch >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms,
                                             follower.last_fetch_ms)
        moved = log_start != follower.log_start
        follower.leo = offset
        follower.log_start = log_start
        follower.leader_leo_at_last_fetch = leader_leo
        follower.last_fetch_ms = now
        follower.broker_epoch = broker_epoch
        return moved

    def _isr_with(self, replica, replica_id):
        """The ISR with replica_id added when it qualifies (Kafka's maybeExpandIsr: at or
        past the high watermark and the epoch's start offset, and ISR-eligible), else
        None."""
        state = replica.state
        follower = replica.followers.get(replica_id)
        if replica_id in state.isr or follower is None or \
                not self._isr_eligible(replica_id, follower):
            return None
        if follower.leo >= replica.log.high_watermark and \
                follower.leo >= replica.epoch_start_offset:
            return tuple(r for r in state.replicas if r in state.isr or r == replica_id)
        return None

    def _propose_isr(self, replica, isr):
        """Under self._lock: mark isr (None: no change) pending on replica, unless a change
        is already pending there; returns the proposal for _alter_isrs, or None."""
        if isr is None or replica.pending_isr is not None:
            return None
        replica.pending_isr = isr
        state = replica.state
        return (replica.tp, isr, state.leader_epoch, state.partition_epoch,
                self._member_broker_epochs(replica, isr))

    def _member_broker_epochs(self, replica, isr):
        """{broker id: broker epoch} of each member of a proposed ISR, as this leader knows
        it (Partition.addBrokerEpochToIsr): its own, a follower's of its last fetch, -1 for
        one that has not fetched from this leader or named no epoch. The controller refuses
        the change if any is not the broker's current one (KIP-903): the follower restarted
        since the leader decided, and may lack what it had fetched."""
        epochs = {}
        for replica_id in isr:
            if replica_id == self.node_id:
                epochs[replica_id] = self.broker_epoch
            else:
                follower = replica.followers.get(replica_id)
                known = None if follower is None else follower.broker_epoch
                epochs[replica_id] = -1 if known is None else known
        return epochs

    def _alter_isrs(self, proposals):
        """Send proposals of _propose_isr to the controller in one request (outside our
        lock: it calls apply()); whatever it answers, they are no longer pending. One
        request, one fsynced write: a restarted follower's first fetch brings one change
        per partition it catches up on, and written one by one they outlasted
        replica.lag.time.max.ms, dropping the partitions caught up first again."""
        if not proposals:
            return
        log.info("broker %d: proposing the ISRs %s", self.node_id,
                 ", ".join(f"{tp}: {list(isr)}" for tp, isr, *_ in proposals))
        try:
            answers = self.controller.alter_partitions(
                self.node_id, [(tp, leader_epoch, partition_epoch, isr, broker_epochs)
                               for tp, isr, leader_epoch, partition_epoch, broker_epochs
                               in proposals])
        finally:
            with self._lock:
                for tp, isr, *_ in proposals:
                    replica = self._replicas.get(tp)
                    if replica is not None and replica.pending_isr is isr:
                        replica.pending_isr = None
                        self._maybe_advance_high_watermark(replica)
        refused = [f"{tp}: {list(isr)}" for tp, isr, *_ in proposals
                   if answers.get(tp) is None]
        if refused:
            log.info("broker %d: ISR changes refused (stale, or a member's broker epoch is "
                     "not its current one): %s", self.node_id, ", ".join(refused))

    def log_end_offsets(self, tp):
        """(log start, log end) of tp on its leader, for a follower whose fetch offset
        was out of range; None when this broker does not lead tp."""
        try:
            partition_log = self.leader_replica(tp).log
        except StreamlogError:
            return None
        return partition_log.log_start_offset, partition_log.log_end_offset

    def offsets_for_leader_epoch(self, tp, epoch, current_leader_epoch=None):
        """(epoch, end offset) for a follower's OffsetsForLeaderEpoch (leader only)."""
        replica = self.leader_replica(tp, current_leader_epoch)
        return replica.log.end_offset_for_epoch(epoch)

    def shrink_isrs(self):
        """isr-expiration: drop the followers not caught up for replica.lag.time.max.ms
        (a broker the controller let go proposes nothing)."""
        now = self.clock_ms()
        changes = []
        with self._lock:
            for replica in () if self._fenced else self._replicas.values():
                state = replica.state
                if state.leader != self.node_id:
                    continue
                leader_leo = replica.log.log_end_offset
                lagging = [r for r in state.isr if r != self.node_id and
                           not self._caught_up(replica.followers.get(r), leader_leo, now)]
                if lagging:
                    proposal = self._propose_isr(
                        replica, tuple(r for r in state.isr if r not in lagging))
                    if proposal is not None:
                        changes.append(proposal)
        self._alter_isrs(changes)

    # --- the follower's side -----------------------------------------------------

    def append_as_follower(self, tp, data, leader_epoch, leader_high_watermark,
                           leader_log_start=-1):
        """Append batches fetched from the leader of leader_epoch (their own offsets and
        epochs), then take the leader's high watermark, bounded by our LEO, and its log
        start offset (records a DeleteRecords removed there go here too, as Kafka's
        follower takes the leader's log start from each fetch). Ignored when the
        partition's state moved on meanwhile."""
        replica = self._replicas.get(tp)
        if replica is None:
            return False
        with replica.role_lock:   # the check and the append, with no change of role between
            if self._replicas.get(tp) is not replica or \
                    replica.state.leader_epoch != leader_epoch or \
                    replica.state.leader == self.node_id or replica.needs_truncation:
                return False
            partition_log = replica.log
            if data:
                partition_log.append(data, assign_offsets=False)
            partition_log.set_high_watermark(min(leader_high_watermark,
                                                 partition_log.log_end_offset))
            start = min(leader_log_start, partition_log.high_watermark)
            if start > partition_log.log_start_offset:
                partition_log.increase_log_start_offset(start)
            return True

    def truncate(self, tp, offset, leader_epoch, done=True):
        """Cut tp's log at offset (a follower's divergent tail) and, when done, start
        fetching (done=False: one step of KIP-279's walk back). Nothing when tp's state
        moved on meanwhile."""
        replica = self._replicas.get(tp)
        if replica is None:
            return
        with replica.role_lock:   # the check and the cut, with no change of role between
            if self._replicas.get(tp) is not replica or \
                    replica.state.leader_epoch != leader_epoch or \
                    replica.state.leader == self.node_id:
                return
            if offset > replica.log.log_end_offset:
                end = replica.log.restart_at(offset)   # behind the leader's log start
            else:
                end = replica.log.truncate_to(offset)
            if not done:
                return
            replica.needs_truncation = False
        log.info("broker %d: %s truncated to %d for leader epoch %d", self.node_id, tp, end,
                 leader_epoch)

    def local_epoch_end(self, tp, epoch):
        """This replica's own (epoch, end offset) for epoch (KIP-279's iteration)."""
        return self._replicas[tp].log.end_offset_for_epoch(epoch)

    def latest_epoch(self, tp):
        return self._replicas[tp].log.epochs.latest_epoch

    def log_of(self, tp):
        return self._replicas[tp].log

    # --- producer ids -------------------------------------------------------------

    def allocate_producer_ids(self):
        """A block of producer ids unique in the cluster (Kafka's AllocateProducerIds)."""
        return self.controller.allocate_producer_ids(self.node_id)

    # --- background and lifecycle --------------------------------------------------

    def _tick(self):
        interval = max(self.replica_lag_time_max_ms / 2, 10) / 1000
        while not self._closed.wait(interval):
            try:
                self.shrink_isrs()
                self.checkpoint_high_watermarks()
            except Exception:
                if not self._closed.is_set():
                    log.exception("broker %d: isr-expiration failed", self.node_id)

    def checkpoint_high_watermarks(self):
        with self._lock:
            marks = {tp: r.log.high_watermark for tp, r in self._replicas.items()
                     if not r.log.closed}
        if marks:
            self._checkpoint.write(marks)

    def close(self, checkpoint=True):
        self._closed.set()
        self._elections.put(None)
        with self._appended:
            self._appended.notify_all()
        self._ticker.join()
        with self._lock:
            for replica in self._replicas.values():
                self._fail_waiters(replica, NotLeaderOrFollowerError(
                    f"broker {self.node_id} is shutting down"))
        if checkpoint:
            self.checkpoint_high_watermarks()

