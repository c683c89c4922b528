"""PartitionLog as a replica: epochs stamped by a leader and learnt by a follower, a high
watermark moved by the replica manager, reads up to the log end for followers, and
truncation of a divergent tail (KIP-101) while readers read."""
import os

import pytest

from streamlog.errors import NotLeaderOrFollowerError, TransactionCoordinatorFencedError

from streamlog.storage import files
from streamlog.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT
from streamlog.storage.partition_log import PartitionLog
from streamlog.storage.record_batch import build_batch

from support import config, make_batch

SMALL = dict(segment_bytes=2000, index_interval_bytes=150)


def replica(log_dir, name="p-0", hw=0, **overrides):
    directory = os.path.join(str(log_dir), name)
    os.makedirs(directory, exist_ok=True)
    log = PartitionLog(directory, config(**{**SMALL, **overrides}))
    log.start_replication(hw)
    return log


def everything(log):
    """(offset, value) of every record up to the log end, whatever the high watermark."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        fetch = log.read(offset, 1 << 16, below_high_watermark=False)
        for batch in fetch.batches:
            out += [(o, v) for o, _, _, v, _ in batch.records() if o >= offset]
            offset = batch.next_offset
    return out


def replicate(leader, follower):
    """What a follower's fetcher does: copy the leader's batches from the follower's end."""
    while follower.log_end_offset < leader.log_end_offset:
        fetch = leader.read(follower.log_end_offset, 1 << 16, below_high_watermark=False)
        follower.append(b"".join(bytes(b.view()) for b in fetch.batches), assign_offsets=False)


def test_a_leader_stamps_its_epoch_on_every_batch_and_the_crc_still_holds(log_dir):
    log = replica(log_dir)
    log.become_leader(3)
    for i in range(4):
        log.append(make_batch(i, 5))
    log.set_high_watermark(log.log_end_offset)
    batches = log.read(0, 1 << 16).batches
    assert [b.partition_leader_epoch for b in batches] == [3, 3, 3, 3]
    for batch in batches:
        batch.ensure_valid()
    assert log.epochs.entries == [(3, 0)]
    with open(os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT), "rb") as f:
        assert f.read() == b"0\n1\n3 0\n"


def test_an_unreplicated_log_writes_no_epoch_file_and_stamps_clients_batches_epoch_0(log_dir):
    # Kafka's leader stamps its epoch on every batch it appends (LogValidator's
    # partitionLeaderEpoch); a log that is not replicated is led in epoch 0, as Metadata
    # says of it, whatever epoch a client's or a coordinator's batch came with. A batch
    # copied with its offsets keeps its own; batches written before with -1 read as they
    # did, before and after a reopen.
    from streamlog.storage.producer_state import COORDINATOR
    log = PartitionLog(str(log_dir), config(**SMALL))
    log.append(make_batch(0, 5), assign_offsets=False)    # -1, as older versions wrote it
    log.close()
    log = PartitionLog(str(log_dir), config(**SMALL))
    log.append(make_batch(1, 5))                          # -1, from a producer
    log.append(make_batch(2, 5, partition_leader_epoch=5))    # a client's made-up one
    log.append(make_batch(3, 5), origin=COORDINATOR)
    log.append(make_batch(4, 5, base_offset=20), assign_offsets=False)
    log.close()
    assert not os.path.exists(os.path.join(str(log_dir), LEADER_EPOCH_CHECKPOINT))
    log = PartitionLog(str(log_dir), config(**SMALL))
    old = PartitionLog(str(log_dir) + "-old", config(**SMALL))
    for batch_no in range(5):
        old.append(make_batch(batch_no, 5))
    batches = log.read(0, 1 << 16).batches
    assert [b.partition_leader_epoch for b in batches] == [-1, 0, 0, 0, -1]
    for batch in batches:
        batch.ensure_valid()
    assert [r[1:] for b in batches for r in b.records()] == \
        [r[1:] for b in old.read(0, 1 << 16).batches for r in b.records()]
    assert log.high_watermark == 25
    log.close()
    old.close()


def test_appends_leave_a_replicated_high_watermark_where_it_is(log_dir):
    log = replica(log_dir)
    log.become_leader(0)
    log.append(make_batch(0, 5))
    log.append(make_batch(1, 5))
    assert (log.log_end_offset, log.high_watermark) == (10, 0)
    assert log.read(0).batches == []                      # a consumer sees nothing yet
    assert len(log.read(0, below_high_watermark=False).batches) == 2  # a follower does
    assert log.set_high_watermark(5) and log.high_watermark == 5
    assert [b.base_offset for b in log.read(0).batches] == [0]
    assert not log.set_high_watermark(5)
    log.set_high_watermark(99)
    assert log.high_watermark == 10                       # never past the log end


def test_a_follower_takes_the_leaders_offsets_and_learns_its_epochs(log_dir):
    leader = replica(log_dir, "a")
    follower = replica(log_dir, "b")
    leader.become_leader(1)
    leader.append(make_batch(0, 5))
    leader.become_leader(4)
    leader.append(make_batch(1, 5))
    replicate(leader, follower)
    assert follower.epochs.entries == [(1, 0), (4, 5)] == leader.epochs.entries
    assert everything(follower) == everything(leader)


def test_truncation_cuts_a_divergent_tail_across_segments_and_appends_go_on(log_dir):
    log = replica(log_dir)
    log.become_leader(0)
    for i in range(30):
        log.append(make_batch(i, 5, value_size=20))
    assert len(log.segments) > 3
    kept = everything(log)[:42]
    end = log.truncate_to(42)
    assert end == 40  # offset 42 lies inside the batch 40..44: it goes whole
    assert log.log_end_offset == 40 and everything(log) == kept[:40]
    assert all(os.path.exists(s.path) for s in log.segments)
    assert any(n.endswith(files.DELETED_SUFFIX) for n in os.listdir(log.directory))
    log.append(make_batch(100, 5))
    assert [o for o, _ in everything(log)] == list(range(45))
    log.close()
    reopened = PartitionLog(log.directory, config(**SMALL))
    assert [o for o, _ in everything(reopened)][-5:] == list(range(40, 45))
    reopened.close()


def test_truncation_lowers_the_high_watermark_and_the_epoch_history(log_dir):
    log = replica(log_dir)
    log.become_leader(1)
    log.append(make_batch(0, 10))
    log.become_leader(2)
    log.append(make_batch(1, 10))
    log.set_high_watermark(20)
    log.truncate_to(10)
    assert log.high_watermark == 10 and log.epochs.entries == [(1, 0)]
    assert log.end_offset_for_epoch(1) == (1, 10)


def test_truncation_after_a_crash_of_the_file_replacement_leaves_a_loadable_log(log_dir):
    log = replica(log_dir)
    log.become_leader(0)
    for i in range(5):
        log.append(make_batch(i, 5, value_size=20))
    log.truncate_to(10)
    log.close(flush=False, seal=False)   # no clean close: the next open recovers
    reopened = PartitionLog(log.directory, config(**SMALL))
    assert reopened.log_end_offset == 10
    assert [o for o, _ in everything(reopened)] == list(range(10))


def test_a_view_handed_out_before_a_truncation_stays_readable(log_dir):
    log = replica(log_dir, segment_bytes=8 << 20)
    log.become_leader(0)
    big = build_batch([b"x" * (300 << 10)], timestamp=1)   # large reads are zero-copy views
    log.append(big)
    log.append(big)
    view = log.read(1, 8 << 20, below_high_watermark=False).batches[0]
    before = bytes(view.view())
    log.truncate_to(1)
    assert log.log_end_offset == 1
    assert bytes(view.view()) == before   # mapped pages of the old file are still there
    view.ensure_valid()


def test_truncation_rebuilds_producer_state_so_a_resent_batch_is_not_a_duplicate(log_dir):
    log = replica(log_dir)
    log.become_leader(0)
    for seq in range(3):
        log.append(build_batch([b"v%d" % seq], timestamp=1, producer_id=7, producer_epoch=0,
                               base_sequence=seq))
    log.truncate_to(2)
    again = log.append(build_batch([b"v2"], timestamp=1, producer_id=7, producer_epoch=0,
                                   base_sequence=2))
    assert again.first_offset == 2 and log.log_end_offset == 3


def test_a_completed_transaction_stays_unstable_until_the_high_watermark_passes_its_marker(
        log_dir):
    log = replica(log_dir)
    log.become_leader(0)
    log.append(build_batch([b"t"], timestamp=1, producer_id=9, producer_epoch=0,
                           base_sequence=0, is_transactional=True))
    log.write_txn_marker(9, 0, 0, commit=False)
    log.set_high_watermark(1)
    assert log.last_stable_offset == 0   # the marker at 1 is not below the HW yet
    log.set_high_watermark(2)
    assert log.last_stable_offset == 2


def test_a_follower_indexes_aborted_transactions_as_its_leader_did(log_dir):
    # A follower appends a whole fetch at once: each .txnindex entry's LSO must count the
    # transactions that the same fetch opened before its marker, or collect() stops early
    # and a read_committed fetch from the follower, once leader, returns aborted records.
    leader, follower = replica(log_dir, "l-0"), replica(log_dir, "f-0")
    leader.become_leader(0)
    follower.become_follower()
    sequences = {}

    def send(pid):
        leader.append(build_batch([b"p%d" % pid], timestamp=1, producer_id=pid,
                                  producer_epoch=0, base_sequence=sequences.get(pid, 0),
                                  is_transactional=True))
        sequences[pid] = sequences.get(pid, 0) + 1
    send(1)                                      # 0: A opens
    replicate(leader, follower)
    send(2)                                      # 1: B opens
    leader.write_txn_marker(1, 0, 0, commit=False)   # 2: A aborted while B is open
    replicate(leader, follower)                  # B's data and A's marker in one append
    send(3)                                      # 3: C opens and stays open
    leader.write_txn_marker(2, 0, 0, commit=False)   # 4: B aborted
    replicate(leader, follower)
    assert follower.txn_indexes.entries() == leader.txn_indexes.entries()
    for log in (leader, follower):
        log.set_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == 3
        assert [t.producer_id for t in log.aborted_transactions(0, 3)] == [1, 2]


def test_the_coordinator_epoch_of_markers_fences_older_coordinators_on_every_replica(log_dir):
    # A marker of coordinator epoch 3 arriving after one of epoch 4 comes from a replaced
    # coordinator (Kafka's checkCoordinatorEpoch): refused by the leader, by a follower that
    # became leader, and after a reopen, whatever transaction of the producer is open.
    leader, follower = replica(log_dir, "l-0"), replica(log_dir, "f-0")
    leader.become_leader(0)
    follower.become_follower()

    def open_transaction(log, seq):
        log.append(build_batch([b"t%d" % seq], timestamp=1, producer_id=9, producer_epoch=0,
                               base_sequence=seq, is_transactional=True))
    open_transaction(leader, 0)
    leader.write_txn_marker(9, 0, 4, commit=True)
    open_transaction(leader, 1)
    with pytest.raises(TransactionCoordinatorFencedError):
        leader.write_txn_marker(9, 0, 3, commit=True)
    replicate(leader, follower)
    follower.become_leader(1)
    end = follower.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError):
        follower.write_txn_marker(9, 0, 3, commit=True)
    assert follower.log_end_offset == end
    follower.close()
    reopened = replica(log_dir, "f-0")
    reopened.become_leader(2)
    with pytest.raises(TransactionCoordinatorFencedError):
        reopened.write_txn_marker(9, 0, 3, commit=False)
    reopened.write_txn_marker(9, 0, 5, commit=False)   # a newer coordinator's ends it
    reopened.set_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == reopened.log_end_offset


def test_truncation_below_the_log_start_restarts_the_log_there(log_dir):
    log = replica(log_dir)
    log.become_leader(0)
    for i in range(4):
        log.append(make_batch(i, 5))
    log.set_high_watermark(20)
    log.increase_log_start_offset(10)
    assert log.truncate_to(5) == 10
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (10, 10, 10)
    log.append(make_batch(9, 5), assign_offsets=True)
    assert log.log_end_offset == 15


def test_kip_101_two_leaders_in_turn_end_with_identical_logs(log_dir):
    """KIP-101's scenario 2: A leads epoch 1 and writes m1, m2; B replicates m1 only; A dies
    before B fetches m2; B leads epoch 2 and writes m3; A returns as a follower. Truncating to
    the high watermark alone would keep A's m2 at the offset where B has m3. A asks B where
    epoch 1 ends, truncates there and copies B's log."""
    a, b = replica(log_dir, "a"), replica(log_dir, "b")
    a.become_leader(1)
    a.append(build_batch([b"m1"], timestamp=1))
    replicate(a, b)
    a.append(build_batch([b"m2"], timestamp=2))   # never reaches b
    b.become_leader(2)
    b.append(build_batch([b"m3"], timestamp=3))
    a.become_follower()
    epoch, end = b.end_offset_for_epoch(a.epochs.latest_epoch)
    assert (epoch, end) == (1, 1)
    a.truncate_to(min(end, a.log_end_offset))
    replicate(b, a)
    assert everything(a) == everything(b) == [(0, b"m1"), (1, b"m3")]
    assert a.epochs.entries == b.epochs.entries == [(1, 0), (2, 1)]


def test_a_follower_refuses_appends_that_would_assign_offsets(log_dir):
    # An append that passed the leader check just before the replica became a follower
    # must not land after the follower's truncation, where the leader's batches go.
    leader = replica(log_dir, "a")
    follower = replica(log_dir, "b")
    leader.become_leader(0)
    leader.append(make_batch(0, 5))
    follower.become_leader(0)
    follower.become_follower()
    with pytest.raises(NotLeaderOrFollowerError):
        follower.append(make_batch(1, 5))
    replicate(leader, follower)
    assert everything(follower) == everything(leader)
