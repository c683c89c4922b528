"""storage.batch_filter: one batch rewritten with only some of its records, offsets, order and
producer fields unchanged (Kafka's MemoryRecords.filterTo for one v2 batch), across codecs,
with and without a delete horizon (KAFKA_REFERENCE.md §4)."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlog.storage import compression
from streamlog.storage.batch_filter import filter_batch
from streamlog.storage.record_batch import RecordBatch, build_batch

T0 = 1_700_000_000_000
CODECS = [c for c in compression.NAMES if c == compression.NONE or
          compression.check_available(c) is None]

records = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=8)),   # key
                             st.one_of(st.none(), st.binary(max_size=20)),  # value (None: tombstone)
                             st.integers(-5_000, 5_000),                    # timestamp offset
                             st.lists(st.tuples(st.text(max_size=3),
                                                st.one_of(st.none(), st.binary(max_size=3))),
                                      max_size=2)),
                   min_size=1, max_size=12)


def decoded(data):
    batch = RecordBatch(data)
    batch.ensure_valid()
    return batch, [(offset, ts, key, value, tuple(headers))
                   for offset, ts, key, value, headers in batch.records()]


@given(records, st.data(), st.sampled_from(CODECS), st.booleans())
def test_kept_records_read_back_unchanged(rows, data, codec, horizon):
    built = build_batch([r[1] for r in rows], keys=[r[0] for r in rows],
                        timestamps=[T0 + r[2] for r in rows], headers=[r[3] for r in rows],
                        base_offset=1000, compression_type=codec, producer_id=42,
                        producer_epoch=3, base_sequence=77, is_transactional=True)
    original, before = decoded(bytes(built))
    keep = data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
    out = filter_batch(original, keep, delete_horizon_ms=T0 + 99_999 if horizon else None)
    expected = [r for r, k in zip(before, keep, strict=True) if k]
    if not expected:
        assert out is None
        return
    batch, after = decoded(out)
    assert after == expected                     # offsets, times, keys, values, headers
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence,
            batch.is_transactional, batch.compression) == (1000, 42, 3, 77, True, codec)
    # The original last offset, and with it the last sequence (Kafka's
    # MemoryRecords.buildRetainedRecordsInto: overrideLastOffset).
    assert batch.last_offset == original.last_offset == 1000 + len(rows) - 1
    assert batch.records_count == len(expected)
    assert batch.max_timestamp == max(r[1] for r in expected)
    assert batch.delete_horizon_ms == (T0 + 99_999 if horizon else None)


def test_a_horizon_once_set_stays():
    built = build_batch([b"a", None, b"c"], keys=[b"1", b"2", b"3"], timestamp=T0)
    with_horizon = filter_batch(RecordBatch(bytes(built)), [True, True, True],
                                delete_horizon_ms=T0 + 500)
    again = filter_batch(RecordBatch(with_horizon), [False, True, True])
    batch, rows = decoded(again)
    assert batch.delete_horizon_ms == T0 + 500
    assert [(o, ts, v) for o, ts, _k, v, _h in rows] == [(1, T0, None), (2, T0, b"c")]


def test_the_mask_must_cover_every_record():
    built = build_batch([b"a", b"b"], timestamp=T0)
    with pytest.raises(ValueError):
        filter_batch(RecordBatch(bytes(built)), [True])
