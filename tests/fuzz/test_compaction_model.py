"""Property test: the log cleaner against a model of what compaction must leave.

Any sequence of keyed writes (values and tombstones, in batches), forced cleaning passes and
clock ticks runs on a PartitionLog with small segments. After every pass, a full read must
yield exactly what the model says (KAFKA_REFERENCE.md §4): below the pass's end, per key
only its last record, at its original offset, a tombstone only while the delete horizon its
first pass gave it has not passed; above it (the head), every record as written; all in
offset order. The same holds after a reopen, and with the native per-batch paths
(native/sl_cleaner.h) as with their pure-Python twins."""
import tempfile

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamlog import native
from streamlog.storage import log_cleaner
from streamlog.storage.partition_log import PartitionLog
from streamlog.storage.record_batch import build_batch

from support import clean_pass, config, keyed_rows

RETENTION_MS = 1000
KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]

record = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=1,
                                                                            max_size=30)))
step = st.one_of(
    st.tuples(st.just("write"), st.lists(record, min_size=1, max_size=6)),
    st.tuples(st.just("clean"), st.just(None)),
    st.tuples(st.just("tick"), st.integers(1, 2 * RETENTION_MS)))


class Clock:
    now_ms = 1_700_000_000_000

    def __call__(self):
        return self.now_ms


class Model:
    def __init__(self):
        self.written = []     # (offset, key, value) as appended
        self.cleaned_to = 0   # offsets below it have been through a pass
        self.horizons = {}    # tombstone offset -> its delete horizon
        self.removed = set()  # offsets a pass removed

    def clean(self, now_ms):
        end = len(self.written)
        if end == self.cleaned_to:
            return   # nothing dirty: no pass runs
        latest = {}
        for offset, key, _ in self.written:
            latest[key] = offset
        for offset, key, value in self.written:
            if offset in self.removed:
                continue
            if latest[key] != offset:
                self.removed.add(offset)
            elif value is None:
                # The first pass that keeps a tombstone gives it its horizon.
                if now_ms >= self.horizons.setdefault(offset, now_ms + RETENTION_MS):
                    self.removed.add(offset)
        self.cleaned_to = end

    def rows(self):
        return [w for w in self.written if w[0] not in self.removed]


@pytest.mark.parametrize("use_native", [False, True], ids=["python", "native"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, max_size=30))
def test_a_compacted_log_reads_as_the_model_says(use_native, steps):
    if use_native and not native.CLEANER_AVAILABLE:
        pytest.skip(str(native.CLEANER_UNAVAILABLE_REASON))
    saved, log_cleaner.USE_NATIVE = log_cleaner.USE_NATIVE, use_native
    try:
        run(steps)
    finally:
        log_cleaner.USE_NATIVE = saved


def run(steps):
    clock = Clock()
    with tempfile.TemporaryDirectory() as directory:
        cfg = config(cleanup_policy="compact", segment_bytes=300, index_interval_bytes=64,
                     delete_retention_ms=RETENTION_MS)
        log = PartitionLog(directory, cfg, clock_ms=clock)
        model = Model()
        first_dirty = None
        for kind, arg in steps:
            if kind == "write":
                info = log.append(build_batch([v for _, v in arg], keys=[k for k, _ in arg],
                                              timestamp=clock.now_ms))
                model.written += [(info.first_offset + i, k, v)
                                  for i, (k, v) in enumerate(arg)]
            elif kind == "tick":
                clock.now_ms += arg
            else:
                first_dirty = clean_pass(log, first_dirty)
                model.clean(clock.now_ms)
                assert keyed_rows(log) == model.rows()
        assert keyed_rows(log) == model.rows()
        assert log.log_end_offset == len(model.written)
        log.close()
        reopened = PartitionLog(directory, cfg, clock_ms=clock)
        assert keyed_rows(reopened) == model.rows()
        reopened.close()
