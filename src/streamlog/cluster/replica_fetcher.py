"""A follower's replication from one leader: a thread per (follower, leader) pair, as
Kafka's ReplicaFetcherThread (core/.../server/ReplicaFetcherThread.scala,
AbstractFetcherThread.scala).

Each round, for the partitions the follower follows under that leader:
  1. a partition that just became a follower truncates first (KIP-101): it asks the
     leader where its own latest epoch ends (OffsetsForLeaderEpoch) and cuts its log
     there, or, when the leader answers with an older epoch than the one asked (the
     follower holds an epoch the leader never had: KIP-279), cuts to where that epoch
     ends here and asks again; with no epoch known it cuts to its high watermark;
  2. the rest fetch from their log end (the leader's replica_fetch waits up to
     replica.fetch.wait.max.ms while nothing is new), naming the follower's broker epoch
     (KIP-903: a fetch of an incarnation a restart replaced is refused), append what
     comes with its own offsets and epochs, and take the leader's high watermark;
  3. an out-of-range fetch offset means the leader's log ends below ours (an unclean
     election: cut to its end) or starts above it (retention: start over at its start).

Calls cross the cluster's links (cluster.py): a cut link fails the round (the follower
retries after replica.fetch.backoff.ms), a slowed one delays it.
"""
import logging
import threading

from ..broker.replica_manager import NO_LEADER, FollowerPosition
from ..errors import OffsetOutOfRangeError, StreamlogError
from ..storage.leader_epoch_cache import UNDEFINED_EPOCH

log = logging.getLogger("streamlog.replication")

REPLICA_FETCH_WAIT_MAX_MS = 500
REPLICA_FETCH_BACKOFF_MS = 100   # Kafka's default is 1000; a test cluster recovers faster
REPLICA_FETCH_MAX_BYTES = 1 << 20


class LinkDown(StreamlogError):
    """The link between two brokers is cut (Cluster.isolate) or the peer is down."""

    retriable = True


class ReplicaFetcher:
    def __init__(self, cluster, follower_id, leader_id, wait_max_ms=REPLICA_FETCH_WAIT_MAX_MS):
        self.cluster = cluster
        self.follower_id = follower_id
        self.leader_id = leader_id
        self.wait_max_ms = wait_max_ms
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True,
            name=f"streamlog-replica-fetcher-{follower_id}-from-{leader_id}")
        self._thread.start()

    @property
    def stopped(self):
        return self._stopped.is_set()

    def stop(self):
        self._stopped.set()

    def join(self, timeout=None):
        self._thread.join(timeout)

    def _run(self):
        while not self._stopped.is_set():
            follower = self.cluster.replica_manager(self.follower_id)
            seen = -1 if follower is None else follower.version
            try:
                worked = self._round()
            except LinkDown:
                worked = False
            except StreamlogError as exc:
                if self._stopped.is_set():
                    return
                log.info("replica fetcher %d<-%d: %s; retrying", self.follower_id,
                         self.leader_id, exc)
                worked = False
            except Exception:
                if self._stopped.is_set():
                    return
                log.exception("replica fetcher %d<-%d failed; retrying", self.follower_id,
                              self.leader_id)
                worked = False
            if worked is None and follower is not None:
                # Nothing to fetch from this leader: until a state changes (a new
                # leadership wakes us at once).
                follower.wait_for_change(seen, REPLICA_FETCH_BACKOFF_MS / 1000)
            elif not worked:
                self._stopped.wait(REPLICA_FETCH_BACKOFF_MS / 1000)

    def _round(self):
        """One round: True when it fetched, None when nothing here follows this leader
        (the caller waits for a change of state), False when it could not (it backs off)."""
        follower = self.cluster.replica_manager(self.follower_id)
        if follower is None:
            return False
        seen = follower.version
        mine = {tp: epoch for tp, (leader, epoch) in follower.followed().items()
                if leader == self.leader_id and leader != NO_LEADER}
        if not mine:
            return None
        leader = self.cluster.fetch_link(self.follower_id, self.leader_id, self)
        for tp, epoch in mine.items():
            if follower.needs_truncation(tp):
                self._truncate(follower, leader, tp, epoch)
        wanted = {tp: FollowerPosition(follower.log_of(tp).log_end_offset, epoch,
                                       follower.log_of(tp).log_start_offset)
                  for tp, epoch in mine.items() if not follower.needs_truncation(tp)}
        if not wanted:
            return False
        # A state the follower took since it listed its partitions (a new topic's) ends the
        # leader's wait: its next round fetches them too, without waiting the rest out.
        results = leader.replica_fetch(self.follower_id, wanted, REPLICA_FETCH_MAX_BYTES,
                                       self.wait_max_ms, follower.broker_epoch,
                                       stale=lambda: follower.version != seen)
        self.cluster.link(self.follower_id, self.leader_id)   # cut meanwhile: drop the answer
        for tp, result in results.items():
            epoch = wanted[tp].leader_epoch
            if result.error is None:
                data = b"".join(bytes(b.view()) for b in result.batches)
                follower.append_as_follower(tp, data, epoch, result.high_watermark,
                                            result.log_start_offset)
            elif isinstance(result.error, OffsetOutOfRangeError):
                self._out_of_range(follower, leader, tp, epoch, result)
        return True

    def _truncate(self, follower, leader, tp, epoch):
        """Step 1 of the module doc (AbstractFetcherThread.getOffsetTruncationState)."""
        partition_log = follower.log_of(tp)
        asked = follower.latest_epoch(tp)
        while True:
            if asked == UNDEFINED_EPOCH:
                follower.truncate(tp, partition_log.high_watermark, epoch)
                return
            leader_epoch, leader_end = leader.offsets_for_leader_epoch(tp, asked, epoch)
            if leader_end == -1:
                follower.truncate(tp, partition_log.high_watermark, epoch)
                return
            local_epoch, local_end = follower.local_epoch_end(tp, leader_epoch)
            if local_epoch == leader_epoch:
                follower.truncate(tp, min(leader_end, local_end,
                                          partition_log.log_end_offset), epoch)
                return
            if local_epoch == UNDEFINED_EPOCH:
                follower.truncate(tp, min(leader_end, partition_log.log_end_offset), epoch)
                return
            # We hold epochs the leader never had: cut to where the leader's epoch ends
            # here and ask again with our new latest epoch (KIP-279).
            follower.truncate(tp, min(local_end, partition_log.log_end_offset), epoch,
                              done=False)
            if follower.latest_epoch(tp) >= asked:
                follower.truncate(tp, min(leader_end, partition_log.log_end_offset), epoch)
                return
            asked = follower.latest_epoch(tp)

    def _out_of_range(self, follower, leader, tp, epoch, result):
        partition_log = follower.log_of(tp)
        leader_log = leader.log_end_offsets(tp)
        if leader_log is None:
            return
        leader_start, leader_end = leader_log
        if leader_end < partition_log.log_end_offset:
            follower.truncate(tp, leader_end, epoch)
        elif partition_log.log_end_offset < leader_start:
            follower.truncate(tp, leader_start, epoch)   # empties the log: starts there
