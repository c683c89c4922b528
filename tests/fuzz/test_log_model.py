"""Stateful property test: PartitionLog against a list of records.

Random appends (any batch sizes, keys, nulls, timestamps, compression),
rolls, clean and unclean reopens, log-start moves with retention, and reads
from random offsets must always agree with the model.
"""
import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from streamlog.errors import OffsetOutOfRangeError
from streamlog.storage import compression
from streamlog.storage.partition_log import PartitionLog
from streamlog.storage.record_batch import build_batch

from support import config, read_all

CFG = config(segment_bytes=1500, index_interval_bytes=120, segment_index_bytes=8 * 40)
records = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=8)),
                             st.one_of(st.none(), st.binary(max_size=60)),
                             st.integers(0, 10**6)), min_size=1, max_size=12)


class MemoryCheckpoint:
    """The log start checkpoint of a LogDirectory, kept in memory across the model's reopens."""

    value = None

    def read(self):
        return self.value

    def write(self, offset):
        self.value = offset


class LogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = self.dir + "/m-0"
        self.checkpoint = MemoryCheckpoint()
        self.log = PartitionLog(self.path, CFG, log_start_checkpoint=self.checkpoint)
        self.model = []  # (offset, timestamp, key, value)
        self.start = 0

    def teardown(self):
        self.log.close(flush=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(recs=records, codec=st.sampled_from([compression.NONE, compression.GZIP]))
    def append(self, recs, codec):
        keys = [r[0] for r in recs]
        values = [r[1] for r in recs]
        stamps = [r[2] for r in recs]
        info = self.log.append(build_batch(values, keys=keys, timestamps=stamps,
                                           compression_type=codec))
        assert info.first_offset == len(self.model)
        for i, (k, v, ts) in enumerate(recs):
            self.model.append((info.first_offset + i, ts, k, v))

    @rule()
    def roll(self):
        self.log.roll()

    @rule(clean=st.booleans())
    def reopen(self, clean):
        if clean:
            self.log.close()
            self.checkpoint.write(self.log.log_start_offset)  # as LogDirectory.close does
        else:
            self.log.close(flush=False)  # as a kill after the last write: nothing torn
        # self.start: as if a periodic checkpoint had run since the last move of the start;
        # retention (by time, too) wrote its own moves into the checkpoint before deleting.
        self.log = PartitionLog(self.path, CFG, recovery_point=0,
                                log_start_offset=max(self.start, self.checkpoint.value or 0),
                                clean_shutdown=clean, log_start_checkpoint=self.checkpoint)

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data())
    def move_log_start(self, data):
        new_start = data.draw(st.integers(self.start, len(self.model)))
        self.log.increase_log_start_offset(new_start)
        self.start = new_start
        self.log.delete_old_segments()
        self.log.delete_pending_files(force=True)
        assert self.log.log_start_offset >= self.start or self.log.log_start_offset == self.start

    @precondition(lambda self: len(self.model) > self.log.log_start_offset)
    @rule(data=st.data())
    def read_from(self, data):
        offset = data.draw(st.integers(self.log.log_start_offset, len(self.model) - 1))
        fetch = self.log.read(offset, data.draw(st.integers(1, 3000)))
        first = fetch.batches[0]
        assert first.base_offset <= offset <= first.last_offset
        got = [r for b in fetch.batches for r in b.records()]
        expected = {m[0]: m for m in self.model}
        for off, ts, key, value, _ in got:
            assert expected[off] == (off, ts, key, value)

    @precondition(lambda self: len(self.model) > 0)
    @rule(ts=st.integers(0, 10**6 + 1))
    def lookup_timestamp(self, ts):
        visible = [m for m in self.model if m[0] >= self.log.log_start_offset]
        expected = next(((m[0], m[1]) for m in visible if m[1] >= ts), None)
        assert self.log.find_offset_by_timestamp(ts) == expected

    @invariant()
    def log_matches_model(self):
        assert self.log.log_end_offset == len(self.model)
        assert read_all(self.log) == self.model[self.log.log_start_offset:]
        with pytest.raises(OffsetOutOfRangeError):
            self.log.read(self.log.log_start_offset - 1, 10)


LogModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestLogModel = LogModel.TestCase
