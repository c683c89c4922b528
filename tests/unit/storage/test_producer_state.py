"""storage.producer_state: the sequence and epoch rules of KAFKA_REFERENCE.md §5, case by case,
and the snapshot file (Kafka's ProducerSnapshot v1 layout)."""
import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlog.errors import (CorruptRecordError, InvalidProducerEpochError, InvalidRecordError,
                              InvalidTxnStateError, OutOfOrderSequenceError,
                              TransactionCoordinatorFencedError)
from streamlog.storage import files
from streamlog.storage.producer_state import (COORDINATOR, INT32_MAX, NUM_BATCHES_TO_RETAIN,
                                              REPLICA, BatchMetadata, ProducerBatch,
                                              ProducerEntry, ProducerState, decode_snapshot,
                                              encode_snapshot)
from streamlog.storage.record_batch import CONTROL_ABORT, CONTROL_COMMIT

PID = 7


def batch(first_seq, count=1, epoch=0, offset=0, pid=PID, ts=1000, txn=False):
    last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
    return ProducerBatch(pid, epoch, first_seq, last_seq, offset, offset + count - 1, ts, txn,
                         False, -1)


def marker(commit, epoch=0, offset=0, pid=PID, ts=1000, coordinator_epoch=0):
    return ProducerBatch(pid, epoch, -1, -1, offset, offset, ts, True, True,
                         CONTROL_COMMIT if commit else CONTROL_ABORT, coordinator_epoch)


class Log:
    """The part of a partition log the rules need: offsets assigned, check then apply."""

    def __init__(self, tmp_path, expiration_ms=86_400_000):
        self.state = ProducerState(str(tmp_path), expiration_ms)
        self.end = 0

    def append(self, first_seq, count=1, epoch=0, pid=PID, **kw):
        b = batch(first_seq, count, epoch, self.end, pid, **kw)
        updated, duplicate, _ = self.state.check([b])
        if duplicate is not None:
            return ("duplicate", duplicate.first_offset, duplicate.last_offset)
        self.end += count
        self.state.apply(updated, self.end)
        return ("appended", b.first_offset, b.last_offset)


@pytest.fixture
def log(tmp_path):
    return Log(tmp_path)


def test_a_new_producer_may_start_at_any_sequence(log):
    # "a producer with no known epoch (never seen / expired / state lost) accepts any sequence"
    assert log.append(42)[0] == "appended"
    assert log.state.producers[PID].last_seq == 42


def test_the_next_sequence_is_accepted_and_a_gap_is_refused(log):
    log.append(0, count=3)
    assert log.append(3)[0] == "appended"
    with pytest.raises(OutOfOrderSequenceError, match="sequence 5 after 3"):
        log.append(5)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(2, count=3)  # overlaps the last batch without repeating it
    assert log.end == 4  # nothing refused was counted


@pytest.mark.parametrize("back", range(1, NUM_BATCHES_TO_RETAIN + 1))
def test_a_duplicate_of_each_of_the_last_five_batches_returns_its_first_offsets(log, back):
    for i in range(8):
        log.append(i * 2, count=2)
    first_seq = (8 - back) * 2
    result = log.append(first_seq, count=2)
    assert result == ("duplicate", first_seq, first_seq + 1)
    assert log.end == 16


def test_a_duplicate_of_the_sixth_oldest_batch_is_out_of_order(log):
    for i in range(8):
        log.append(i * 2, count=2)
    with pytest.raises(OutOfOrderSequenceError):
        log.append((8 - NUM_BATCHES_TO_RETAIN - 1) * 2, count=2)


def test_a_duplicate_must_match_both_ends(log):
    log.append(0, count=4)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(0, count=3)


def test_sequences_wrap_at_int32_max(log):
    log.append(INT32_MAX - 1, count=2)    # ends exactly at INT32_MAX
    assert log.append(0, count=2)[0] == "appended"
    log.state.producers.clear()
    log.append(INT32_MAX - 1, count=4)    # a batch that wraps inside itself
    entry = log.state.producers[PID]
    assert entry.last_seq == 1 and entry.batches[-1].first_seq == INT32_MAX - 1
    assert log.append(INT32_MAX - 1, count=4)[0] == "duplicate"
    assert log.append(2)[0] == "appended"


def test_an_older_epoch_is_fenced(log):
    log.append(0, epoch=3)
    with pytest.raises(InvalidProducerEpochError, match="epoch 2"):
        log.append(1, epoch=2)


def test_a_new_epoch_starts_at_sequence_zero(log):
    log.append(0, count=5, epoch=0)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch starts at 0"):
        log.append(5, epoch=1)
    assert log.append(0, epoch=1)[0] == "appended"
    entry = log.state.producers[PID]
    assert entry.epoch == 1 and len(entry.batches) == 1  # the old epoch's window is gone
    # A retry from the fenced epoch is not a duplicate any more: it is fenced.
    with pytest.raises(InvalidProducerEpochError):
        log.append(0, count=5, epoch=0)


def test_a_request_of_several_batches_is_judged_in_order(log):
    log.append(0)
    ok = [batch(1, offset=1), batch(2, offset=2)]
    updated, duplicate, _ = log.state.check(ok)
    assert duplicate is None and updated[PID].last_seq == 2
    assert log.state.producers[PID].last_seq == 0  # nothing changes before apply
    with pytest.raises(OutOfOrderSequenceError):
        log.state.check([batch(1, offset=1), batch(3, offset=2)])


def test_a_plain_batch_inside_an_open_transaction_is_refused(log):
    log.append(0, txn=True)
    assert log.state.producers[PID].txn_first_offset == 0
    with pytest.raises(InvalidTxnStateError):
        log.append(1)


def test_markers_end_transactions_and_say_which_were_aborted(log):
    log.append(0, count=2, txn=True)                       # offsets 0-1
    log.append(0, count=1, pid=8, txn=True)                # offset 2, another producer
    assert log.state.first_unstable_offset() == 0
    updated, _, completed = log.state.check([marker(False, offset=3)], origin=COORDINATOR)
    assert [(c.producer_id, c.first_offset, c.marker_offset, c.aborted) for c in completed] \
        == [(PID, 0, 3, True)]
    # The LSO after it: the other open transaction's first offset (KAFKA_REFERENCE §6.3).
    assert log.state.stable_offsets([marker(False, offset=3)], completed) == {3: 2}
    log.state.apply(updated, 4)
    assert log.state.first_unstable_offset() == 2 and PID not in log.state.ongoing
    # A marker for a producer with no open transaction completes nothing.
    assert log.state.check([marker(True, offset=4)], origin=COORDINATOR)[2] == []


def test_a_marker_from_an_older_epoch_is_fenced_and_a_client_may_not_write_one(log):
    log.append(0, epoch=2, txn=True)
    with pytest.raises(InvalidProducerEpochError):
        log.state.check([marker(True, epoch=1, offset=1)], origin=COORDINATOR)
    with pytest.raises(InvalidRecordError, match="control batch"):
        log.state.check([marker(True, epoch=2, offset=1)])
    # A marker may carry a newer epoch (the coordinator fenced the producer): it ends the
    # transaction and the new epoch's batches start at 0.
    updated, _, completed = log.state.check([marker(False, epoch=3, offset=1)],
                                            origin=COORDINATOR)
    log.state.apply(updated, 2)
    assert completed[0].aborted and log.state.producers[PID].epoch == 3
    with pytest.raises(InvalidProducerEpochError):
        log.append(1, epoch=2)


def test_a_marker_of_an_older_coordinator_epoch_is_fenced(log):
    """Kafka's ProducerAppendInfo.checkCoordinatorEpoch: once a coordinator of epoch 4 wrote
    a marker for the producer here, a marker of epoch 3 (a replaced coordinator's request
    still running) is refused, whatever transaction is open now; an equal or newer epoch
    is taken, and a replica copies what its leader wrote."""
    log.append(0, txn=True)
    updated, _, _ = log.state.check([marker(True, offset=1, coordinator_epoch=4)],
                                    origin=COORDINATOR)
    log.state.apply(updated, 2)
    assert log.state.producers[PID].coordinator_epoch == 4
    log.end = 2
    log.append(1, txn=True)                                   # the next transaction, open
    with pytest.raises(TransactionCoordinatorFencedError, match="coordinator epoch 3"):
        log.state.check([marker(True, offset=3, coordinator_epoch=3)], origin=COORDINATOR)
    assert log.state.first_unstable_offset() == 2             # still open
    for epoch in (4, 5):
        updated, _, completed = log.state.check(
            [marker(False, offset=3, coordinator_epoch=epoch)], origin=COORDINATOR)
        assert completed[0].aborted and updated[PID].coordinator_epoch == epoch
    updated, _, _ = log.state.check([marker(False, offset=3, coordinator_epoch=1)],
                                    origin=REPLICA)
    assert updated[PID].coordinator_epoch == 1


def test_replica_batches_skip_the_rules(log):
    log.append(0, count=2, epoch=5)
    updated, duplicate, _ = log.state.check([batch(100, epoch=1, offset=2)], origin=REPLICA)
    assert duplicate is None and updated[PID].last_seq == 100


def test_expiration_forgets_idle_producers_without_an_open_transaction(tmp_path):
    log = Log(tmp_path, expiration_ms=1000)
    log.append(0, pid=1, ts=1000)
    log.append(0, pid=2, ts=1000, txn=True)
    log.append(0, pid=3, ts=5000)
    assert log.state.expire(now_ms=2000) == 1
    assert sorted(log.state.producers) == [2, 3]
    # Forgotten: the next batch of producer 1 may start anywhere again.
    assert log.append(9, pid=1)[0] == "appended"


# --- snapshots -------------------------------------------------------------------------


def entries():
    return st.builds(
        lambda pid, epoch, last_seq, last_offset, delta, ts, ce, txn:
            ProducerEntry(pid, epoch, [BatchMetadata(last_seq, last_offset, delta, ts)], ce, ts,
                          txn),
        st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, INT32_MAX),
        st.integers(0, 2**62), st.integers(0, 1000), st.integers(-1, 2**62),
        st.integers(-1, 2**31 - 1), st.integers(-1, 2**62))


def test_a_snapshot_keeps_the_producers_last_timestamp_a_markers_too():
    # Kafka's ProducerStateManager.writeSnapshot stores entry.lastTimestamp, which a marker
    # moves; the last data batch's stored instead made the producer expire early after a
    # reopen (24 h after its data, though its marker came later).
    entry = ProducerEntry(5, 2, [BatchMetadata(9, 100, 3, 1_000)], 7, 5_000, -1)
    (decoded,) = decode_snapshot(encode_snapshot([entry]))
    assert decoded.last_timestamp == 5_000


@given(st.lists(entries(), max_size=20, unique_by=lambda e: e.producer_id))
def test_snapshot_round_trip(items):
    assert decode_snapshot(encode_snapshot(items)) == items


def test_snapshot_layout_is_kafkas():
    # int16 version | uint32 crc | int32 count | 46-byte entries (KAFKA_REFERENCE §5)
    entry = ProducerEntry(5, 2, [BatchMetadata(9, 100, 3, 1234)], 7, 1234, -1)
    data = encode_snapshot([entry])
    assert len(data) == 2 + 4 + 4 + 46
    version, _crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1)
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (5, 2, 9, 100, 3, 1234, 7, -1)


@pytest.mark.parametrize("damage", ["flip", "truncate", "version"])
def test_a_damaged_snapshot_is_refused(damage):
    data = bytearray(encode_snapshot([ProducerEntry(1, 0, [BatchMetadata(0, 0, 0, 1)])]))
    if damage == "flip":
        data[20] ^= 0x40
    elif damage == "truncate":
        data = data[:-3]
    else:
        data[1] = 2
    with pytest.raises(CorruptRecordError):
        decode_snapshot(bytes(data))


def test_load_takes_the_newest_readable_snapshot_and_deletes_the_rest(tmp_path):
    state = ProducerState(str(tmp_path), 86_400_000)
    for offset, seq in ((10, 1), (20, 2), (30, 3)):
        state.producers = {PID: ProducerEntry(PID, 0, [BatchMetadata(seq, offset - 1, 0, 5)],
                                              last_timestamp=5)}
        state.take_snapshot(offset)
    with open(files.snapshot_file(str(tmp_path), 20), "r+b") as f:
        f.seek(12)
        f.write(b"\xff")            # the newest at or below 25 is damaged
    fresh = ProducerState(str(tmp_path), 86_400_000)
    assert fresh.load([10, 20, 30], end_offset=25, now_ms=5) == 10
    assert fresh.producers[PID].last_seq == 1
    # 30 is above the log end (a truncated tail) and 20 is corrupt: both gone, as in Kafka.
    assert sorted(os.listdir(tmp_path)) == [f"{10:020d}.snapshot"]
    assert fresh.snapshot_offsets == [10]


def test_retention_keeps_the_snapshot_a_rebuild_starts_from(tmp_path):
    state = ProducerState(str(tmp_path), 86_400_000)
    for offset in (0, 10, 20, 30):
        state.take_snapshot(offset)
    state.delete_snapshots_below(25)
    assert state.snapshot_offsets == [20, 30]


def test_a_snapshot_that_cannot_be_read_now_is_not_deleted(tmp_path, monkeypatch):
    import errno

    from streamlog.errors import KafkaStorageError
    from streamlog.storage import producer_state
    state = ProducerState(str(tmp_path), 86_400_000)
    state.take_snapshot(10)

    def out_of_descriptors(path):
        raise OSError(errno.EMFILE, "Too many open files")
    monkeypatch.setattr(producer_state, "read_whole", out_of_descriptors)
    with pytest.raises(KafkaStorageError, match="Too many open files"):
        ProducerState(str(tmp_path), 86_400_000).load([10], end_offset=10, now_ms=0)
    assert os.path.exists(files.snapshot_file(str(tmp_path), 10))  # only damage deletes one


def test_snapshots_below_the_log_start_are_not_loaded(tmp_path):
    state = ProducerState(str(tmp_path), 86_400_000)
    state.producers = {PID: ProducerEntry(PID, 0, [BatchMetadata(5, 9, 0, 5)], last_timestamp=5)}
    state.take_snapshot(10)
    fresh = ProducerState(str(tmp_path), 86_400_000)
    assert fresh.load([10], end_offset=30, now_ms=5, start_offset=20) is None
    assert fresh.producers == {} and not os.listdir(tmp_path)
