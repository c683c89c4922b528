"""coordinator.transaction and transaction_log: the state machine of KAFKA_REFERENCE.md §6.1,
every allowed and every refused transition, and the __transaction_state record schemas."""
import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlog.coordinator.transaction import VALID_PREVIOUS, TransactionMetadata, TxnState
from streamlog.coordinator.transaction_log import (decode_key, decode_value, encode_key,
                                                   encode_value)
from streamlog.errors import IllegalStateError
from streamlog.structs import TopicPartition

S = TxnState
# KAFKA_REFERENCE §6.1, the "valid previous states" column, written out again here.
KAFKA_TABLE = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteAbort", "CompleteCommit"},
    "PrepareEpochFence": {"Ongoing"},
}
NAMES = {S.EMPTY: "Empty", S.ONGOING: "Ongoing", S.PREPARE_COMMIT: "PrepareCommit",
         S.PREPARE_ABORT: "PrepareAbort", S.COMPLETE_COMMIT: "CompleteCommit",
         S.COMPLETE_ABORT: "CompleteAbort", S.DEAD: "Dead",
         S.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}


def test_state_ids_are_kafkas():
    assert [int(s) for s in (S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT,
                             S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.DEAD,
                             S.PREPARE_EPOCH_FENCE)] == list(range(8))


def test_the_table_is_kafkas():
    assert {NAMES[t]: {NAMES[p] for p in prev} for t, prev in VALID_PREVIOUS.items()} \
        == KAFKA_TABLE


@pytest.mark.parametrize("current,target", list(itertools.product(list(S), list(S))))
def test_every_transition(current, target):
    meta = TransactionMetadata("t", 1, 0, 60000, current, frozenset({TopicPartition("a", 0)}),
                               5, 5 if current == S.ONGOING else -1)
    if NAMES[current] in KAFKA_TABLE[NAMES[target]]:
        after = meta.prepare(target, 10)
        assert after.state == target and after.last_update_ms == 10
        assert meta.state == current  # prepare never changes the metadata it is asked on
        if target == S.ONGOING and current != S.ONGOING:
            assert after.start_ms == 10
        if target in (S.EMPTY, S.DEAD, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert after.partitions == frozenset()
    else:
        with pytest.raises(IllegalStateError):
            meta.prepare(target, 10)


def test_key_layout_is_kafkas():
    assert encode_key("tx") == struct.pack(">hh", 0, 2) + b"tx"
    assert decode_key(encode_key("ünï")) == "ünï"


def test_value_layout_is_kafkas():
    meta = TransactionMetadata("tx", 7, 3, 60000, S.ONGOING,
                               frozenset({TopicPartition("b", 1), TopicPartition("b", 0)}), 11, 9)
    data = encode_value(meta)
    # version, pid, epoch, timeout, status | 1 topic: "b" with partitions [0, 1] | two times
    assert data == (struct.pack(">hqhib", 0, 7, 3, 60000, 1) + struct.pack(">i", 1) +
                    struct.pack(">h", 1) + b"b" + struct.pack(">iii", 2, 0, 1) +
                    struct.pack(">qq", 11, 9))


@given(st.text(min_size=1, max_size=20), st.integers(0, 2**62), st.integers(-1, 2**15 - 1),
       st.integers(1, 2**31 - 1), st.sampled_from(list(S)),
       st.sets(st.tuples(st.sampled_from(["a", "b.c", "__consumer_offsets"]),
                         st.integers(0, 50)), max_size=8),
       st.integers(-1, 2**50), st.integers(-1, 2**50))
def test_value_round_trip(tid, pid, epoch, timeout, state, tps, last, start):
    meta = TransactionMetadata(tid, pid, epoch, timeout, state,
                               frozenset(TopicPartition(*t) for t in tps), last, start)
    assert decode_value(tid, encode_value(meta)) == meta
