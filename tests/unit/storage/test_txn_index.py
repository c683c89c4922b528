"""storage.txn_index: Kafka's 34-byte AbortedTxn entries and the collection rule of
KAFKA_REFERENCE.md §6.3 (TransactionIndex.collectAbortedTxns)."""
import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlog.errors import CorruptRecordError, KafkaStorageError
from streamlog.storage import files
from streamlog.storage.txn_index import AbortedTxn, TxnIndexes, decode_entries, encode_entry


def test_entry_layout_is_kafkas():
    data = encode_entry(AbortedTxn(7, 10, 20, 15))
    assert len(data) == 34
    assert struct.unpack(">hqqqq", data) == (0, 7, 10, 20, 15)


@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**40),
                          st.integers(1, 1000), st.integers(0, 2**40)), max_size=30))
def test_entries_round_trip(raw):
    entries, last = [], 0
    for pid, first, step, lso in raw:
        last += step
        entries.append(AbortedTxn(pid, min(first, last), last, lso))
    assert decode_entries(b"".join(encode_entry(t) for t in entries)) == entries


@pytest.mark.parametrize("bad", [b"\x00" * 33, encode_entry(AbortedTxn(1, 0, 5, 6))[:1] + b"\x01"
                                 + encode_entry(AbortedTxn(1, 0, 5, 6))[2:],
                                 encode_entry(AbortedTxn(1, 0, 5, 6)) * 2])
def test_damaged_files_are_refused(bad):
    # a torn entry, an unknown version, last offsets that do not increase
    with pytest.raises(CorruptRecordError):
        decode_entries(bad)


@pytest.fixture
def index(tmp_path):
    index = TxnIndexes(str(tmp_path))
    # Segment 0 holds the markers of two aborted transactions, segment 100 of two more.
    index.append(0, AbortedTxn(1, 0, 10, 5))
    index.append(0, AbortedTxn(2, 5, 20, 21))
    index.append(100, AbortedTxn(3, 90, 110, 111))
    index.append(100, AbortedTxn(4, 105, 130, 131))
    return index


def test_collect_takes_what_overlaps_the_fetch_and_stops_at_the_lso(index):
    # last offset >= fetch offset and first offset < upper bound ...
    assert [t.producer_id for t in index.collect(0, 1000)] == [1, 2, 3, 4]
    assert [t.producer_id for t in index.collect(11, 1000)] == [2, 3, 4]
    assert [t.producer_id for t in index.collect(21, 100)] == [3]
    # ... and the scan stops after the first entry whose LSO reaches the upper bound:
    # entry 2 (LSO 21 >= 21) ends it, though entry 3 would not match anyway, nor 4.
    assert [t.producer_id for t in index.collect(0, 21)] == [1, 2]
    assert [t.producer_id for t in index.collect(0, 4)] == [1]  # 2 starts at 5; 1's LSO is 5


def test_the_files_survive_a_reload(index, tmp_path):
    again = TxnIndexes(str(tmp_path))
    again.load([0, 100])
    assert again.entries() == index.entries()


def test_a_reload_reads_a_file_the_cleaner_replaced_with_one_of_the_same_length(index,
                                                                                 tmp_path):
    """A view read a file again only when its length changed; the cleaner's new file of
    segment 0 with as many entries, other ones, was taken for the one read before."""
    view = TxnIndexes(str(tmp_path))
    view.load([0, 100])
    path = files.txn_index_file(str(tmp_path), 0)
    cleaned = [AbortedTxn(7, 30, 40, 41), AbortedTxn(8, 45, 50, 51)]
    with open(path + ".cleaned", "wb") as f:
        f.write(b"".join(encode_entry(t) for t in cleaned))
    os.replace(path + ".cleaned", path)
    view.load([0, 100])
    assert [t.producer_id for t in view.entries()] == [7, 8, 3, 4]


def test_last_offsets_must_increase(index):
    with pytest.raises(KafkaStorageError, match="not above"):
        index.append(100, AbortedTxn(9, 0, 130, 131))


def test_truncate_from_drops_entries_at_and_above_an_offset(index, tmp_path):
    index.truncate_from(110)
    assert [t.producer_id for t in index.entries()] == [1, 2]
    assert not os.path.exists(files.txn_index_file(str(tmp_path), 100))
    index.truncate_from(15)
    assert os.path.getsize(files.txn_index_file(str(tmp_path), 0)) == 34
    again = TxnIndexes(str(tmp_path))
    again.load([0, 100])
    assert again.entries() == [AbortedTxn(1, 0, 10, 5)]
