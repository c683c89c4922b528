"""Kafka's replication textbook, driven on an in-process cluster and asserted as Kafka
answers (docs/CLUSTER.md; the rules' sources are in broker/replica_manager.py,
cluster/controller.py and cluster/replica_fetcher.py).

Waits are on states (support.wait_until); no verdict rests on how fast one came."""
import os
import threading
import time

import pytest

from streamlog.broker.replica_manager import HIGH_WATERMARK_CHECKPOINT
from streamlog.cluster import Cluster
from streamlog.errors import (ElectionNotNeededError, LeaderNotAvailableError,
                              NotEnoughReplicasError, NotLeaderOrFollowerError,
                              OffsetOutOfRangeError, PreferredLeaderNotAvailableError,
                              RequestTimedOutError)
from streamlog.storage.checkpoint import OffsetCheckpointFile
from streamlog.storage.leader_epoch_cache import LeaderEpochCache
from streamlog.storage.record_batch import LOG_APPEND_TIME
from streamlog.structs import TopicPartition

from support import GENEROUS_S, wait_until
from support.cluster_steps import lose_the_isr_but_one, values

LAG_MS = 300   # replica.lag.time.max.ms for these tests (Kafka's default is 30 s)


@pytest.fixture
def cluster(tmp_path):
    with Cluster(3, path=str(tmp_path / "cluster"), replica_lag_time_max_ms=LAG_MS) as c:
        yield c


def test_a_lagging_follower_leaves_the_isr_and_rejoins_once_caught_up(cluster):
    # Partition.maybeShrinkIsr: not caught up for replica.lag.time.max.ms -> out;
    # maybeExpandIsr: at or past the high watermark -> back in.
    cluster.create_topic("t", 1, 3)
    leader = cluster.leader("t", 0)
    follower = next(b for b in cluster.broker_ids if b != leader)
    cluster.produce("t", 0, values(b"a", 10))
    cluster.isolate(follower)
    # At the leader's log end it would stay in (Replica.isCaughtUp): the leader moves on.
    cluster.produce("t", 0, values(b"b", 10), acks=1)
    wait_until(lambda: follower not in cluster.partition_state("t", 0).isr,
               "the isolated follower to leave the ISR")
    state = cluster.partition_state("t", 0)
    assert state.leader == leader and len(state.isr) == 2
    cluster.produce("t", 0, values(b"c", 5))   # acks=all needs only the ISR now
    assert cluster.partition_state("t", 0).replica_states[follower].log_end_offset == 10
    cluster.heal(follower)
    wait_until(lambda: follower in cluster.partition_state("t", 0).isr,
               "the follower to rejoin the ISR")
    assert cluster.replica_records("t", 0, follower)[:20] == \
        cluster.replica_records("t", 0, leader)[:20]


def test_a_follower_at_the_leaders_log_end_stays_in_the_isr_however_long_it_is_cut_off(
        cluster):
    # Partition.getOutOfSyncReplicas asks Replica.isCaughtUp: a follower whose log end is
    # the leader's is in sync whether it fetches or not ("If the follower already has the
    # same leo as the leader, it will not be considered as out-of-sync"). It holds every
    # acknowledged record, so when the leader dies it leads cleanly.
    cluster.create_topic("t", 1, 2)
    leader = cluster.leader("t", 0)
    follower = next(r for r in cluster.partition_state("t", 0).replicas if r != leader)
    cluster.produce("t", 0, values(b"a", 5))
    cluster.wait_in_sync("t")
    cluster.isolate(follower)
    time.sleep(3 * LAG_MS / 1000)   # past replica.lag.time.max.ms: what follows is a state
    cluster.replica_manager(leader).shrink_isrs()   # the isr-expiration check, once more
    assert set(cluster.partition_state("t", 0).isr) == {leader, follower}
    cluster.kill(leader)
    state = cluster.partition_state("t", 0)
    assert (state.leader, state.isr) == (follower, (follower,))
    assert [v for _, v in cluster.replica_records("t", 0, follower)] == values(b"a", 5)


def test_the_high_watermark_waits_for_a_follower_the_leader_is_adding(cluster):
    # Partition.scala's maximal ISR (PendingExpandIsr): from the leader's decision to add
    # a follower until the controller answers, the high watermark waits for that follower
    # too. Here the other follower copies new records meanwhile; were the high watermark
    # computed over the committed ISR, it would pass records the joining follower lacks,
    # and that follower would enter the ISR (electable) without acknowledged records.
    cluster.create_topic("t", 1, 3)
    tp = TopicPartition("t", 0)
    leader = cluster.leader("t", 0)
    joining, other = [r for r in cluster.partition_state("t", 0).replicas if r != leader]
    cluster.produce("t", 0, values(b"all", 5))
    cluster.isolate(joining)
    cluster.produce("t", 0, values(b"two", 5), acks=1)
    wait_until(lambda: joining not in cluster.partition_state("t", 0).isr,
               "the cut follower to leave the ISR")
    seen = []
    alter_partitions = cluster.controller.alter_partitions

    def racing_alter_partitions(broker_id, changes):
        if not seen and any(joining in isr and joining not in cluster.controller.partitions[
                tp_].isr for tp_, _, _, isr, _ in changes):
            end = cluster.produce("t", 0, values(b"meanwhile", 5), acks=1) + 5
            leader_view = cluster.replica_manager(leader)._replicas[tp].followers[other]
            wait_until(lambda: leader_view.leo == end,
                       "the other follower to fetch at the new log end")
            state = cluster.partition_state("t", 0)
            seen.append((state.replica_states[leader].high_watermark,
                         state.replica_states[joining].log_end_offset))
        return alter_partitions(broker_id, changes)

    cluster.controller.alter_partitions = racing_alter_partitions
    cluster.heal(joining)
    wait_until(lambda: joining in cluster.partition_state("t", 0).isr,
               "the follower to rejoin the ISR")
    high_watermark, joining_end = seen[0]
    assert joining_end == 10 and high_watermark <= joining_end
    cluster.produce("t", 0, values(b"after", 1))
    assert cluster.replica_records("t", 0, joining) == cluster.replica_records("t", 0, leader)


def test_min_insync_replicas_counts_the_committed_isr_before_an_append_the_maximal_after(
        cluster):
    # Partition.appendRecordsToLeader checks min.insync.replicas against the committed ISR
    # (partitionState.isr: NOT_ENOUGH_REPLICAS, nothing written); a waiting acks=all
    # request is answered by checkEnoughReplicasReachOffset against the maximal ISR, which
    # holds a follower the leader is adding (PendingExpandIsr.maximalIsr): records the
    # high watermark passed are acknowledged, not NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    cluster.create_topic("t", 1, 2, config={"min.insync.replicas": 2})
    tp = TopicPartition("t", 0)
    leader, joining = cluster.partition_state("t", 0).replicas
    cluster.produce("t", 0, values(b"both", 5))
    cluster.isolate(joining)
    cluster.produce("t", 0, [b"leader-only"], acks=1)   # the high watermark stays at 5
    wait_until(lambda: cluster.partition_state("t", 0).isr == (leader,),
               "the cut follower to leave the ISR")
    manager = cluster.replica_manager(leader)
    seen = {}
    alter_partitions = cluster.controller.alter_partitions

    def while_pending(broker_id, changes):
        if not seen and any(joining in isr for _, _, _, isr, _ in changes):   # the leader's fetch thread: recorded, not raised
            seen["maximal"] = manager._replicas[tp].maximal_isr()
            try:
                cluster.produce("t", 0, [b"refused"])
            except NotEnoughReplicasError as exc:
                seen["append"] = exc
            seen["answer"] = []
            manager.when_replicated(tp, 5, seen["answer"].append)   # at the high watermark
        return alter_partitions(broker_id, changes)

    cluster.controller.alter_partitions = while_pending
    cluster.heal(joining)
    wait_until(lambda: joining in cluster.partition_state("t", 0).isr,
               "the follower to rejoin the ISR")
    assert seen["maximal"] == (leader, joining)
    assert isinstance(seen["append"], NotEnoughReplicasError)   # nothing written
    assert cluster.partition_state("t", 0).replica_states[leader].log_end_offset == 6
    assert seen["answer"] == [None]


def test_an_isr_change_decided_from_an_older_state_is_refused(cluster):
    # AlterPartition names the partition epoch of the state the leader decided from (Kafka's
    # PendingPartitionChange.sentLeaderAndIsr); the controller refuses it once the state has
    # moved on. Here the ISR the leader decided on still holds a follower that died since,
    # came back empty and has not caught up: applied to the newer state, that ISR would
    # make it electable without the records it lacks.
    cluster.create_topic("t", 1, 3)
    tp = TopicPartition("t", 0)
    cluster.produce("t", 0, values(b"a", 5))
    cluster.wait_in_sync("t")
    leader = cluster.leader("t", 0)
    follower = next(r for r in cluster.partition_state("t", 0).replicas if r != leader)
    manager = cluster.replica_manager(leader)
    replica = manager._replicas[tp]
    with manager._lock:
        decided = manager._propose_isr(replica, replica.state.isr)
    cluster.kill(follower)
    cluster.produce("t", 0, values(b"b", 5))
    cluster.slow(follower, 60_000)   # back, but copying nothing
    cluster.restart(follower)
    assert cluster.partition_state("t", 0).replica_states[follower].log_end_offset < 10
    manager._alter_isrs([decided])
    assert follower not in cluster.partition_state("t", 0).isr
    cluster.slow(follower, 0)


def test_acks_all_under_min_insync_replicas_blocks_then_is_refused(cluster):
    # Partition.appendRecordsToLeader: ISR < min.insync.replicas -> NOT_ENOUGH_REPLICAS,
    # nothing appended. While the ISR still holds the cut followers, the produce waits and
    # the high watermark does not move (it never does under the minimum: KAFKA-15583).
    cluster.create_topic("t", 1, 3, config={"min.insync.replicas": 2})
    leader = cluster.leader("t", 0)
    cluster.produce("t", 0, values(b"ok", 3))
    for other in cluster.broker_ids:
        if other != leader:
            cluster.isolate(other)
    with pytest.raises(RequestTimedOutError):
        cluster.produce("t", 0, [b"blocked"], timeout=0.2)
    wait_until(lambda: cluster.partition_state("t", 0).isr == (leader,),
               "both cut followers to leave the ISR")
    end = cluster.partition_state("t", 0).replica_states[leader].log_end_offset
    with pytest.raises(NotEnoughReplicasError):
        cluster.produce("t", 0, [b"refused"])
    state = cluster.partition_state("t", 0)
    assert state.replica_states[leader].log_end_offset == end   # nothing written
    assert state.high_watermark == 3   # "blocked" is in the log, never acknowledged
    cluster.produce("t", 0, [b"acks=1 still works"], acks=1)
    cluster.heal()
    wait_until(lambda: len(cluster.partition_state("t", 0).isr) == 3, "the ISR to refill")
    cluster.produce("t", 0, [b"after"])


def test_a_leader_killed_after_acks_all_loses_nothing_acknowledged(cluster):
    cluster.create_topic("t", 1, 3, config={"min.insync.replicas": 2})
    acked = []
    for i in range(20):
        first = cluster.produce("t", 0, values(b"r%d" % i, 5))
        acked += [(first + j, v) for j, v in enumerate(values(b"r%d" % i, 5))]
    old = cluster.leader("t", 0)
    cluster.kill(old)   # its unflushed tail is gone with it
    new = wait_until(lambda: (st := cluster.partition_state("t", 0)).leader not in (-1, old)
                     and st.leader, "a new leader")
    assert cluster.replica_records("t", 0, new)[:len(acked)] == acked
    cluster.restart(old)
    cluster.wait_in_sync("t")
    assert cluster.replica_records("t", 0, old) == cluster.replica_records("t", 0, new)


def test_acks_1_loses_what_the_leader_acknowledged_before_followers_copied_it(cluster):
    # Kafka's documented window for acks=1: the leader answers after its own append; if it
    # dies before a follower copies the records, the next leader never had them.
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, values(b"safe", 5))
    leader = cluster.leader("t", 0)
    cluster.wait_in_sync("t")
    for other in cluster.broker_ids:
        if other != leader:
            cluster.slow(other, 10_000)   # their next fetch comes too late
    first = cluster.produce("t", 0, values(b"acks1", 5), acks=1)
    assert first == 5
    cluster.kill(leader)
    for other in cluster.broker_ids:
        cluster.slow(other, 0)
    new = wait_until(lambda: cluster.partition_state("t", 0).leader not in (-1, leader)
                     and cluster.partition_state("t", 0).leader, "a new leader")
    kept = [v for _, v in cluster.replica_records("t", 0, new)]
    assert kept == values(b"safe", 5)   # the five acks=1 records are lost


def test_clean_election_refuses_an_out_of_sync_replica(cluster):
    cluster.create_topic("t", 1, 2)
    leader, follower = lose_the_isr_but_one(cluster, "t")
    cluster.heal(follower)
    cluster.stop(leader)   # a clean stop: its log is whole when it returns
    state = cluster.partition_state("t", 0)
    assert state.leader == -1 and state.isr == (leader,)   # waits for the in-sync replica
    with pytest.raises(LeaderNotAvailableError):
        cluster.produce("t", 0, [b"x"])
    cluster.restart(leader)
    wait_until(lambda: cluster.partition_state("t", 0).leader == leader, "the old leader back")
    cluster.wait_in_sync("t")
    assert [v for _, v in cluster.replica_records("t", 0, follower)] == \
        values(b"both", 3) + values(b"leader-only", 3)


def test_unclean_election_elects_an_out_of_sync_replica_and_loses_data(cluster):
    cluster.create_topic("t", 1, 2, config={"unclean.leader.election.enable": "true"})
    leader, follower = lose_the_isr_but_one(cluster, "t")
    cluster.heal(follower)
    cluster.kill(leader)
    state = cluster.partition_state("t", 0)
    assert state.leader == follower and state.isr == (follower,)
    cluster.produce("t", 0, [b"new-leader"])
    cluster.restart(leader)
    cluster.wait_in_sync("t")
    expected = values(b"both", 3) + [b"new-leader"]   # "leader-only" is gone everywhere
    for broker_id in (leader, follower):
        assert [v for _, v in cluster.replica_records("t", 0, broker_id)] == expected


def test_kip_101_two_leaders_in_turn_and_a_hard_crash_end_with_identical_logs(cluster):
    """KIP-101's second scenario. A leads and has m1, m2 fsynced, its high watermark 2
    checkpointed; B copied both but never fsynced m2. Both crash; B restarts first, leads
    and writes m3 at offset 1. When A returns, truncating to its high watermark (2) would
    keep m2 where B has m3: the logs would differ for good. A asks B where A's last epoch
    ends (offset 1) instead, cuts there and copies m3."""
    cluster.create_topic("t", 1, 2)
    tp = TopicPartition("t", 0)
    a = cluster.leader("t", 0)
    b = next(r for r in cluster.partition_state("t", 0).replicas if r != a)
    cluster.produce("t", 0, [b"m1"])
    cluster.broker(a).partition_log(tp).flush()
    cluster.broker(b).partition_log(tp).flush()      # m1 is safe on both
    cluster.produce("t", 0, [b"m2"])
    wait_until(lambda: cluster.partition_state("t", 0).replica_states[b].log_end_offset == 2,
               "B to copy m2")
    wait_until(lambda: cluster.partition_state("t", 0).high_watermark == 2, "HW 2")
    cluster.broker(a).partition_log(tp).flush()      # A fsyncs m2; B never does
    cluster.broker(a).replicas.checkpoint_high_watermarks()
    cluster.kill(a)
    cluster.kill(b)
    checkpoint = OffsetCheckpointFile(os.path.join(cluster.path, f"broker-{a}",
                                                   HIGH_WATERMARK_CHECKPOINT))
    assert checkpoint.read()[tp] == 2   # what a truncation to the high watermark would keep
    cluster.restart(b)
    wait_until(lambda: cluster.partition_state("t", 0).leader == b, "B to lead")
    assert cluster.replica_records("t", 0, b) == [(0, b"m1")]
    cluster.produce("t", 0, [b"m3"], acks=1)
    cluster.restart(a)
    cluster.wait_in_sync("t")
    assert cluster.replica_records("t", 0, a) == cluster.replica_records("t", 0, b) == \
        [(0, b"m1"), (1, b"m3")]
    epochs_a = LeaderEpochCache(cluster.broker(a).partition_log(tp).directory).entries
    assert epochs_a == cluster.broker(b).partition_log(tp).epochs.entries


def _ten_records_then_the_last_replica_cut(cluster):
    """t-0, three replicas, holding 5 records in sync; then its last replica cut off as
    _fetching_for does, the others holding 5 more: (its replicas, the leader's replica
    manager, the leader epoch)."""
    cluster.create_topic("t", 1, 3)
    written = values(b"a", 10)
    cluster.produce("t", 0, written[:5])
    cluster.wait_in_sync("t")
    replicas = cluster.partition_state("t", 0).replicas
    return (replicas, *_fetching_for(cluster, replicas[2], written[5:]))


def _fetching_for(cluster, follower, behind):
    """Cut the follower of t-0 off (the test fetches for it from then on), append `behind`
    without it (at the leader's log end it would stay in the ISR: Replica.isCaughtUp) and
    wait for it to leave the ISR; (the leader's replica manager, the leader epoch)."""
    cluster.isolate(follower)
    cluster.produce("t", 0, behind, acks=1)
    wait_until(lambda: follower not in cluster.partition_state("t", 0).isr,
               "the cut follower to leave the ISR")
    manager = cluster.replica_manager(cluster.leader("t", 0))
    # The controller makes the smaller ISR known before the leader's proposal is done:
    # until then a fetch cannot propose taking the follower back (one change at a time).
    wait_until(lambda: manager._replicas[TopicPartition("t", 0)].pending_isr is None,
               "the leader's ISR change to finish")
    return manager, cluster.partition_state("t", 0).leader_epoch


def test_the_high_watermark_waits_for_a_caught_up_follower_outside_the_isr(tmp_path):
    # Partition.maybeIncrementLeaderHW (shouldWaitForReplicaToJoinIsr): a live follower
    # outside the ISR that is caught up (replica.lag.time.max.ms, as the ISR counts it)
    # holds the high watermark back, so its next fetch reaches it and it joins. Were the
    # high watermark the other replicas' log end, appends between its fetches would keep
    # it ahead of the follower, which would not come back into the ISR under load.
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=3000) as cluster:
        tp = TopicPartition("t", 0)
        (leader, other, returning), manager, epoch = \
            _ten_records_then_the_last_replica_cut(cluster)

        def fetch_as_returning(offset):
            assert manager.replica_fetch(returning, {tp: (offset, epoch)})[tp].error is None
        fetch_as_returning(5)                      # behind the log end, 10
        cluster.produce("t", 0, values(b"b", 5))   # the other follower copies: HW 15
        fetch_as_returning(10)   # at the log end of its previous fetch: caught up, below HW
        assert returning not in cluster.partition_state("t", 0).isr
        cluster.produce("t", 0, values(b"c", 5), acks=1)
        wait_until(lambda: manager._replicas[tp].followers[other].leo == 20,
                   "the other follower to copy offsets 15..19")
        assert cluster.partition_state("t", 0).high_watermark == 15   # waits at 15
        fetch_as_returning(15)   # at the high watermark: back in the ISR
        assert returning in cluster.partition_state("t", 0).isr


def test_a_follower_fetch_out_of_range_leaves_the_followers_state_as_it_was(cluster):
    # Partition.fetchRecords reads first and calls updateFollowerFetchState only after a
    # successful read (ReplicaManager.readFromLog answers OFFSET_OUT_OF_RANGE otherwise):
    # an offset past the leader's log end is not the follower's log end offset. Taken for
    # it, the follower would look caught up and join the ISR without the records.
    tp = TopicPartition("t", 0)
    (leader, _, follower), manager, epoch = _ten_records_then_the_last_replica_cut(cluster)
    cluster.produce("t", 0, values(b"b", 5))
    view = manager._replicas[tp].followers[follower]
    before = (view.leo, view.last_caught_up_ms, view.last_fetch_ms)
    answer = manager.replica_fetch(follower, {tp: (100, epoch)})[tp]
    assert isinstance(answer.error, OffsetOutOfRangeError)
    assert (view.leo, view.last_caught_up_ms, view.last_fetch_ms) == before
    assert before[0] == 5
    state = cluster.partition_state("t", 0)
    assert follower not in state.isr and state.high_watermark == 15
    answer = manager.replica_fetch(follower, {tp: (5, epoch)})[tp]   # where it is
    assert answer.error is None and view.leo == 5


def test_a_restarted_follower_counts_only_once_it_fetched_in_its_new_incarnation(tmp_path):
    # KIP-903: each start of a broker registers a new broker epoch, which its fetches carry.
    # Partition.isReplicaIsrEligible: the high watermark waits for a caught-up follower
    # outside the ISR (shouldWaitForReplicaToJoinIsr) and the ISR takes one in only if its
    # last fetch was of its current epoch; Replica.updateFetchStateOrThrow refuses a fetch
    # of an older epoch (NOT_LEADER_OR_FOLLOWER). Here the follower restarts and cannot
    # fetch yet: its earlier incarnation's state, caught up well within
    # replica.lag.time.max.ms, must neither hold the high watermark back (acks=all would
    # wait for it) nor be refreshed by that incarnation's late fetch.
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=30_000) as cluster:
        cluster.create_topic("t", 1, 3)
        tp = TopicPartition("t", 0)
        leader, _, follower = cluster.partition_state("t", 0).replicas
        cluster.produce("t", 0, values(b"a", 10))
        cluster.wait_in_sync("t")
        earlier = cluster.replica_manager(follower)
        cluster.kill(follower)   # it leaves the ISR
        cluster.isolate(follower)
        cluster.restart(follower)   # alive again, but fetching nothing
        manager = cluster.replica_manager(leader)
        view = manager._replicas[tp].followers[follower]
        assert view.leo == 10   # what the earlier incarnation last fetched at
        cluster.produce("t", 0, values(b"b", 5))   # acks=all: the ISR is the two others
        assert cluster.partition_state("t", 0).high_watermark == 15
        old_epoch = earlier.broker_epoch
        assert cluster.replica_manager(follower).broker_epoch > old_epoch
        before = (view.leo, view.last_caught_up_ms, view.last_fetch_ms)
        epoch = cluster.partition_state("t", 0).leader_epoch
        late = manager.replica_fetch(follower, {tp: (15, epoch)}, broker_epoch=old_epoch)[tp]
        assert isinstance(late.error, NotLeaderOrFollowerError)
        assert (view.leo, view.last_caught_up_ms, view.last_fetch_ms) == before
        assert follower not in cluster.partition_state("t", 0).isr
        cluster.heal(follower)
        cluster.wait_in_sync("t")
        assert cluster.replica_records("t", 0, follower) == \
            cluster.replica_records("t", 0, leader)


def test_the_isr_changes_of_one_fetch_reach_the_controller_in_one_write(cluster):
    # AlterPartitionManager sends every pending ISR change of the broker in one
    # AlterPartition request, and the controller records the accepted ones in one batch.
    # Written one by one, with an fsync each, a restarted follower's first fetch over many
    # partitions outlasted replica.lag.time.max.ms: the partitions taken back first were
    # dropped again before the last was taken back.
    cluster.create_topic("t", 12, 3)
    tps = [TopicPartition("t", p) for p in range(12)
           if cluster.partition_state("t", p).leader == 0]
    follower = cluster.partition_state("t", tps[0].partition).replicas[1]
    assert len(tps) == 4 and all(follower in cluster.partition_state("t", tp.partition)
                                 .replicas for tp in tps)
    for tp in tps:
        cluster.produce("t", tp.partition, values(b"a", 5))
    cluster.wait_in_sync("t")
    manager = cluster.replica_manager(0)
    cluster.isolate(follower)
    for tp in tps:   # at the leaders' log ends it would stay in (Replica.isCaughtUp)
        cluster.produce("t", tp.partition, values(b"b", 1), acks=1)
    wait_until(lambda: all(follower not in cluster.partition_state("t", tp.partition).isr
                           and manager._replicas[tp].pending_isr is None for tp in tps),
               "the cut follower to leave the ISRs")
    manager.replica_lag_time_max_ms = 600_000   # nothing leaves an ISR from here on
    writes = []
    write = cluster.controller._write

    def recording(changes, *args):
        writes.append([key for key, _ in changes])
        return write(changes, *args)

    cluster.controller._write = recording
    epochs = {tp: cluster.partition_state("t", tp.partition).leader_epoch for tp in tps}
    answers = manager.replica_fetch(follower, {tp: (6, epochs[tp]) for tp in tps},
                                    broker_epoch=cluster.controller.broker_epochs[follower])
    assert all(answer.error is None for answer in answers.values())
    assert all(follower in cluster.partition_state("t", tp.partition).isr for tp in tps)
    # Only the writes of these partitions: the other leaders may still be dropping the cut
    # follower from their ISRs meanwhile (their own lag clocks).
    keys = [b"partition:t:%d" % tp.partition for tp in tps]
    assert [w for w in writes if set(w) & set(keys)] == [keys]
    cluster.controller._write = write
    cluster.heal(follower)


def test_an_isr_change_naming_a_member_that_restarted_since_is_refused(cluster):
    # KIP-903 at the controller (ReplicationControlManager.validateAlterPartitionData,
    # ineligibleReplicasForIsr): AlterPartition names each member of the new ISR with the
    # broker epoch the leader saw it fetch in (Partition.addBrokerEpochToIsr); a member
    # whose current epoch is another is INELIGIBLE_REPLICA, and the ISR stays as it was.
    # Here the leader decides to take the follower back on a fetch of its incarnation
    # then, which is killed (its unflushed records lost) and restarted before the
    # controller hears of the change: taken in, it would be electable without them.
    tp = TopicPartition("t", 0)
    (leader, _, follower), manager, epoch = _ten_records_then_the_last_replica_cut(cluster)
    isr = cluster.partition_state("t", 0).isr
    earlier = cluster.controller.broker_epochs[follower]
    alter_partitions = cluster.controller.alter_partitions

    def restarting_first(broker_id, changes):
        if any(follower in new_isr for _, _, _, new_isr, _ in changes):
            cluster.kill(follower)
            cluster.restart(follower)   # still cut off: it fetches nothing
        return alter_partitions(broker_id, changes)

    cluster.controller.alter_partitions = restarting_first
    answer = manager.replica_fetch(follower, {tp: (10, epoch)}, broker_epoch=earlier)[tp]
    assert answer.error is None
    assert cluster.controller.broker_epochs[follower] > earlier
    assert cluster.partition_state("t", 0).isr == isr
    assert manager._replicas[tp].pending_isr is None
    cluster.controller.alter_partitions = alter_partitions
    cluster.heal(follower)
    cluster.wait_in_sync("t")   # its new incarnation joins once it fetched
    assert cluster.replica_records("t", 0, follower) == \
        cluster.replica_records("t", 0, leader)


def test_a_preferred_leader_election_hands_leadership_back_to_the_first_replica(cluster):
    # ReplicationControlManager.electLeader, PREFERRED: the first replica leads again, at a
    # new leader epoch, when it is alive and in the ISR (else PREFERRED_LEADER_NOT_AVAILABLE;
    # ELECTION_NOT_NEEDED when it leads already); the leader it replaces goes on following.
    cluster.create_topic("t", 1, 3)
    preferred = cluster.partition_state("t", 0).replicas[0]
    cluster.produce("t", 0, values(b"a", 5))
    cluster.kill(preferred)
    cluster.produce("t", 0, values(b"b", 5))
    cluster.isolate(preferred)
    cluster.restart(preferred)   # alive, but out of the ISR
    with pytest.raises(PreferredLeaderNotAvailableError):
        cluster.elect_preferred_leader("t", 0)
    cluster.heal(preferred)
    cluster.wait_in_sync("t")
    before = cluster.partition_state("t", 0)
    after = cluster.elect_preferred_leader("t", 0)
    assert (after.leader, after.leader_epoch, after.isr) == \
        (preferred, before.leader_epoch + 1, before.isr)
    with pytest.raises(ElectionNotNeededError):
        cluster.elect_preferred_leader("t", 0)
    cluster.produce("t", 0, values(b"c", 5))
    cluster.wait_in_sync("t")
    assert cluster.replica_records("t", 0, before.leader) == \
        cluster.replica_records("t", 0, preferred)
    assert len(cluster.replica_records("t", 0, preferred)) == 15


def _fetcher_threads():
    import threading
    return [t for t in threading.enumerate()
            if t.name.startswith("streamlog-replica-fetcher-") and t.is_alive()]


def test_a_slowed_fetch_ends_its_wait_when_the_delay_is_cleared_or_the_cluster_closes(
        tmp_path):
    # slow() is a fault a test injects and takes back: a fetch already waiting must not go
    # on waiting an hour after heal, and close() must not leave its thread behind.
    before = set(_fetcher_threads())
    cluster = Cluster(3, path=str(tmp_path / "cluster"), replica_lag_time_max_ms=LAG_MS)
    try:
        cluster.create_topic("t", 1, 3)
        cluster.wait_in_sync("t")
        leader = cluster.leader("t", 0)
        follower = next(b for b in cluster.broker_ids if b != leader)
        cluster.slow(follower, 3_600_000)
        cluster.produce("t", 0, values(b"late", 3), acks=1)
        wait_until(lambda: follower not in cluster.partition_state("t", 0).isr,
                   "the slowed follower to leave the ISR")
        cluster.slow(follower, 0)
        cluster.wait_in_sync("t")     # the waiting fetch went on at once
        cluster.slow(follower, 3_600_000)
        cluster.produce("t", 0, values(b"later", 3), acks=1)
    finally:
        cluster.close()
    assert set(_fetcher_threads()) - before == set()


@pytest.mark.parametrize("down", ["kill", "stop"])
def test_a_broker_going_down_ends_its_fetches_waiting_at_the_leaders(tmp_path, down):
    # A follower's fetch waits at its leader up to replica.fetch.wait.max.ms while nothing
    # is new. Once the controller lets the follower go, the wait ends: kill() and stop()
    # return with the broker's fetcher threads finished, however long the wait was set;
    # and so does the cluster's close().
    before = set(_fetcher_threads())
    hour_ms = 3_600_000
    with Cluster(3, path=str(tmp_path / "cluster"), replica_lag_time_max_ms=hour_ms,
                 replica_fetch_wait_max_ms=hour_ms) as cluster:
        cluster.create_topic("t", 6, 3)    # every broker leads two partitions, follows four
        cluster.wait_in_sync("t")
        gone = cluster.leader("t", 0)
        prefix = f"streamlog-replica-fetcher-{gone}-from-"
        assert len([t for t in _fetcher_threads() if t.name.startswith(prefix)]) == 2
        getattr(cluster, down)(gone)
        assert [t.name for t in _fetcher_threads() if t.name.startswith(prefix)] == []
    assert set(_fetcher_threads()) - before == set()


def test_a_follower_stores_a_log_append_time_batch_as_its_leader_stamped_it(cluster):
    # Kafka's LogValidator stamps LogAppendTime on the leader only; a follower appends what
    # it fetched as it is (UnifiedLog.appendAsFollower: validateAndAssignOffsets=false), so
    # every replica holds the leader's bytes, timestamps and CRCs included, and a consumer
    # sees the same timestamps after a leader change.
    cluster.create_topic("t", 1, 3, config={"message.timestamp.type": "LogAppendTime"})
    tp = TopicPartition("t", 0)
    leader = cluster.leader("t", 0)
    followers = [b for b in cluster.partition_state("t", 0).replicas if b != leader]
    late = followers[-1]
    cluster.isolate(late)
    wait_until(lambda: late not in cluster.partition_state("t", 0).isr,
               "the cut follower to leave the ISR")
    cluster.produce("t", 0, values(b"a", 3))
    time.sleep(0.05)   # the cut follower copies the batch at least 50 ms after its stamp
    cluster.heal(late)
    cluster.wait_in_sync("t")

    def stored(broker_id):
        log = cluster.broker(broker_id).partition_log(tp)
        return log.read(0, 1 << 20, below_high_watermark=False).batches

    (batch,) = stored(leader)
    assert batch.timestamp_type == LOG_APPEND_TIME
    for broker_id in followers:
        assert [bytes(b.view()) for b in stored(broker_id)] == [bytes(batch.view())], broker_id


def test_a_followers_append_in_progress_holds_up_no_state_change_of_the_broker(cluster):
    # Kafka guards a follower's append with its partition's own lock (Partition.
    # leaderIsrUpdateLock): while broker 1 copies a fetch of t-0, the controller's pushes
    # of new ISRs to it -- a kill's, here -- go through, and the copy then completes.
    cluster.create_topic("t", 2, 3)
    tp0 = TopicPartition("t", 0)
    assert cluster.leader("t", 0) == 0 and cluster.leader("t", 1) == 1
    cluster.wait_in_sync("t")
    for leader in (0, 1):
        # Only the kill changes the ISRs: the held copy must not also make broker 1 lag
        # out of t-0's ISR (LAG_MS is short, and a kill on a loaded machine can outlast it).
        cluster.replica_manager(leader).replica_lag_time_max_ms = 600_000
    follower_log = cluster.broker(1).partition_log(tp0)
    appending, release, appended = threading.Event(), threading.Event(), threading.Event()
    append = follower_log.append

    def held_append(data, *args, **kwargs):
        appending.set()
        release.wait(2 * GENEROUS_S)   # a copy that takes long (a large fetch, a busy machine)
        try:
            return append(data, *args, **kwargs)
        finally:
            appended.set()
    follower_log.append = held_append
    kill = threading.Thread(target=cluster.kill, args=(2,), daemon=True)
    try:
        cluster.produce("t", 0, values(b"a", 3), acks=1)
        wait_until(appending.is_set, "broker 1 to start copying t-0")
        kill.start()
        wait_until(lambda: not kill.is_alive(), "the kill to complete during the copy")
        assert not appended.is_set()   # the kill and the new ISRs came during the copy
        manager = cluster.replica_manager(1)
        assert manager.state(tp0).isr == (0, 1)
        assert manager.state(TopicPartition("t", 1)).isr == (1, 0)
    finally:
        release.set()
        kill.join(GENEROUS_S)
    wait_until(lambda: follower_log.log_end_offset == 3, "the copy to complete")


def test_a_new_topic_is_replicated_without_waiting_out_the_followers_fetches(tmp_path):
    # A follower's fetch waits at its leader up to replica.fetch.wait.max.ms while nothing
    # it asked for is new. A topic made meanwhile was fetched only once that wait ended: a
    # first acks=all write to it waited it out (500 ms by default, per new topic, over
    # the wire). The new state ends the wait, and the next fetch asks for the new topic.
    hour_ms = 3_600_000
    with Cluster(3, path=str(tmp_path / "cluster"), replica_lag_time_max_ms=hour_ms,
                 replica_fetch_wait_max_ms=hour_ms) as cluster:
        cluster.create_topic("first", 3, 3)   # every broker's fetchers now wait at leaders
        cluster.wait_in_sync("first")
        cluster.produce("first", 0, values(b"first", 1))
        for name in ("second", "third"):
            cluster.create_topic(name, 3, 3)
            for partition in range(3):
                # A wait out of the hour would fail this at its timeout.
                assert cluster.produce(name, partition, values(name.encode(), 2),
                                       timeout=GENEROUS_S) == 0
