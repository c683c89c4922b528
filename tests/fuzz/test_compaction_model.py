"""Property test: the log cleaner against a model of what compaction must leave.

Any sequence of keyed writes (values and tombstones, in batches), forced cleaning passes and
clock ticks runs on a PartitionLog with small segments. After every pass, a full read must
yield exactly what the model says (KAFKA_REFERENCE.md §4): below the pass's end, per key
only its last record, at its original offset, a tombstone only while the delete horizon its
first pass gave it has not passed; above it (the head), every record as written; all in
offset order. The same holds after a reopen, and with the native per-batch paths
(native/sl_cleaner.h) as with their pure-Python twins.

CompactionMachine runs the same model as a state machine over a LogDirectory, adding what
the list of steps never does: passes that a tiny offset map ends early (Kafka's
LogCleaner.buildOffsetMap stops where its map is full; log.cleaner.dedupe.buffer.size), so
that several passes, each from the checkpointed first dirty offset, compact the log; and
clean and unclean stops between steps, whose reopen recovers cleaned segments."""
import shutil
import tempfile

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from streamlog import native
from streamlog.storage import log_cleaner
from streamlog.storage.log_directory import LogDirectory
from streamlog.storage.offset_map import SLOT_BYTES, OffsetMap
from streamlog.storage.partition_log import PartitionLog
from streamlog.storage.record_batch import build_batch
from streamlog.structs import TopicPartition

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

    def clean(self, now_ms, end=None, rewritten_end=None):
        """A pass whose offset map covered the log up to end (default: all written): below
        it, per key only its last record below end; tombstones get their horizon in every
        batch the pass rewrote (those below rewritten_end: the segments starting below end),
        past end too, where they are kept whatever their age."""
        end = len(self.written) if end is None else end
        rewritten_end = end if rewritten_end is None else rewritten_end
        if end == self.cleaned_to:
            return   # nothing dirty: no pass runs
        latest = {}
        for offset, key, _ in self.written[:end]:
            latest[key] = offset
        for offset, key, value in self.written[:rewritten_end]:
            if offset in self.removed:
                continue
            if offset < end and latest[key] != offset:
                self.removed.add(offset)
            elif value is None:
                # The first pass that keeps a tombstone gives its batch a horizon.
                horizon = self.horizons.setdefault(offset, now_ms + RETENTION_MS)
                if offset < end and now_ms >= horizon:
                    self.removed.add(offset)
        self.cleaned_to = end

    def map_end(self, capacity):
        """Where a pass from cleaned_to ends with a map of capacity keys: at the first record
        of a key the full map does not hold (offset_map.OffsetMap.put); the log end if the
        map holds every key of the dirty section."""
        keys = set()
        for offset, key, _ in self.written[self.cleaned_to:]:
            if key not in keys:
                if len(keys) == capacity:
                    return offset
                keys.add(key)
        return len(self.written)

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


# --- the same model as a state machine: partial passes, and stops between steps ----------

TP = TopicPartition("t", 0)
MACHINE_CFG = config(cleanup_policy="compact", segment_bytes=2048, index_interval_bytes=64,
                     delete_retention_ms=RETENTION_MS)
MANY_KEYS = [b"k%03d" % i for i in range(120)]   # more than a tiny map holds
SMALL_VALUES = st.one_of(st.none(), st.binary(min_size=1, max_size=6))
# log_cleaner.map_memory never sizes a map below 64 slots, whatever the configured bytes.
TINY_MAP_BYTES = 64 * SLOT_BYTES
LARGE_MAP_BYTES = 1 << 20


class CompactionMachine(RuleBasedStateMachine):
    """Writes, passes, ticks and stops of a compacted log in a LogDirectory, against Model.

    Runs with a tiny offset map (the smallest the storage layer sizes) end most passes where
    the map fills, as Kafka's LogCleaner.buildOffsetMap does: the next pass goes on from
    there (the cleaner-offset-checkpoint). A stop closes the directory (the clean-shutdown
    marker, checkpoints, saved listings) or drops it without a close, as a kill would; the
    reopen recovers the cleaned segments (their offset gaps, merged groups, indexes)."""

    use_native = False

    def __init__(self):
        super().__init__()
        self.saved_native, log_cleaner.USE_NATIVE = log_cleaner.USE_NATIVE, self.use_native
        self.root = tempfile.mkdtemp(prefix="compaction-sm-")
        self.clock = Clock()
        self.model = Model()
        self.map_bytes = LARGE_MAP_BYTES
        self.directory = self.log = None
        self._open()

    def _open(self):
        self.directory = LogDirectory(self.root, clock_ms=self.clock)
        self.log = self.directory.open_log(TP, MACHINE_CFG)

    def teardown(self):
        try:
            if self.directory is not None:
                self.directory.close()
        finally:
            log_cleaner.USE_NATIVE = self.saved_native
            shutil.rmtree(self.root, ignore_errors=True)

    @initialize(tiny=st.booleans(), batches=st.integers(0, 4),
                values=st.lists(SMALL_VALUES, min_size=1, max_size=3))
    def start(self, tiny, batches, values):
        """The map, and a start of batches of many keys each: a tiny map's passes end early
        from the first one on."""
        self.map_bytes = TINY_MAP_BYTES if tiny else LARGE_MAP_BYTES
        for i in range(batches):
            self.write_distinct_keys(i * 37, 50, values)

    def _append(self, rows):
        info = self.log.append(build_batch([v for _, v in rows], keys=[k for k, _ in rows],
                                           timestamp=self.clock.now_ms))
        self.model.written += [(info.first_offset + i, k, v) for i, (k, v) in enumerate(rows)]

    @rule(rows=st.lists(st.tuples(st.sampled_from(MANY_KEYS), SMALL_VALUES), min_size=1,
                        max_size=8))
    def write(self, rows):
        self._append(rows)

    @rule(first=st.integers(0, len(MANY_KEYS) - 1), count=st.integers(16, 60),
          values=st.lists(SMALL_VALUES, min_size=1, max_size=3))
    def write_distinct_keys(self, first, count, values):
        """A batch of count different keys: a few of these fill a tiny map."""
        keys = [MANY_KEYS[(first + i) % len(MANY_KEYS)] for i in range(count)]
        self._append([(k, values[i % len(values)]) for i, k in enumerate(keys)])

    @rule(ms=st.integers(1, 2 * RETENTION_MS))
    def tick(self, ms):
        self.clock.now_ms += ms

    def _pass(self):
        """One pass from the checkpointed first dirty offset, as the broker's cleaner runs
        one; the model predicts where the map ends it. Returns whether a pass ran."""
        log, model = self.log, self.model
        log.roll()
        first_dirty = self.directory.cleaner_checkpoint(TP)
        assert (first_dirty or 0) == model.cleaned_to
        if model.cleaned_to == log.log_end_offset:
            assert clean_pass(log, first_dirty, roll=False) == model.cleaned_to
            return False
        dirty = log.log_end_offset - model.cleaned_to
        capacity = OffsetMap(log_cleaner.map_memory(dirty, self.map_bytes)).max_entries
        end = model.map_end(capacity)
        # The pass rewrites every segment starting below its end.
        rewritten_end = min(s.base_offset for s in log.segments if s.base_offset >= end)
        assert clean_pass(log, first_dirty, max_map_bytes=self.map_bytes, roll=False) == end
        self.directory.write_cleaner_checkpoint(TP, end)
        model.clean(self.clock.now_ms, end, rewritten_end)
        return True

    @rule()
    def clean(self):
        self._pass()

    @rule()
    def clean_to_the_end(self):
        """Passes until none has anything left: then the whole log is compacted, each key
        at most once (a tombstone only within its horizon), its last record."""
        passes = 0
        while self._pass():
            passes += 1
            assert passes <= len(MANY_KEYS), "the passes do not get to the log end"
        last = {}
        for offset, key, value in self.model.written:
            last[key] = (offset, value)
        rows = keyed_rows(self.log)
        assert len({key for _, key, _ in rows}) == len(rows)
        for offset, key, value in rows:
            assert last[key] == (offset, value)
        assert {key for key, (_, value) in last.items() if value is not None} <= \
            {key for _, key, _ in rows}

    @rule()
    def checkpoint(self):
        """A periodic flush and checkpoint: a later unclean open recovers from here."""
        self.log.flush()
        self.directory.checkpoint()

    @rule(clean=st.booleans())
    def reopen(self, clean):
        if clean:
            self.directory.close()
        else:
            # A kill: no flush, no sealed indexes, no checkpoints, no clean-shutdown marker
            # (the process's writes are in the page cache: nothing is torn).
            self.log.close(flush=False, seal=False)
        self.directory = None
        self._open()
        assert self.directory.clean_shutdown == clean

    @rule(data=st.data())
    def read_from(self, data):
        """A read at any offset, one a pass removed included, starts with the first batch
        ending at or after it (the indexes of cleaned and recovered segments); a reader going
        on from each read's last batch, as a consumer does past batches a pass emptied, gets
        next the first record kept at or after it."""
        rows = self.model.rows()
        if not rows:
            return
        offset = position = data.draw(st.integers(0, rows[-1][0]))
        while True:
            batches = self.log.read(position, 1 << 16).batches
            assert batches and batches[0].last_offset >= position
            got = [(off, key, value) for b in batches
                   for off, _ts, key, value, _h in b.records() if off >= offset]
            if got:
                break
            position = batches[-1].next_offset
        assert got[0] == next(r for r in rows if r[0] >= offset)

    @invariant()
    def log_reads_as_the_model_says(self):
        assert keyed_rows(self.log) == self.model.rows()
        assert self.log.log_end_offset == len(self.model.written)


class NativeCompactionMachine(CompactionMachine):
    use_native = True


MACHINE_SETTINGS = settings(max_examples=40, stateful_step_count=25, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow])
TestCompactionMachine = CompactionMachine.TestCase
TestCompactionMachine.settings = MACHINE_SETTINGS
TestNativeCompactionMachine = pytest.mark.skipif(
    not native.CLEANER_AVAILABLE, reason=str(native.CLEANER_UNAVAILABLE_REASON))(
    NativeCompactionMachine.TestCase)
TestNativeCompactionMachine.settings = MACHINE_SETTINGS
