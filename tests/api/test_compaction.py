"""Log compaction through the public API: the guarantees Kafka documents for compacted topics
(docs/design.html "What guarantees does log compaction provide", KAFKA_REFERENCE.md §4), the
library's own compacted logs, and db.compact / describe_topic."""
import os

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.errors import InvalidConfigurationError, ReadOnlyError
from streamlog.storage import files

from support import wait_until

TP = TopicPartition("table", 0)
SMALL = {"cleanup.policy": "compact", "segment.bytes": 4096}


def produce(db, pairs, topic="table"):
    producer = db.producer(linger_ms=0, batch_size=512)
    written = []
    futures = [(key, value, producer.send(topic, key=key, value=value, partition=0))
               for key, value in pairs]
    producer.flush()
    for key, value, future in futures:
        written.append((future.get().offset, key, value))
    producer.close()
    return written


def read_from(db, offset, topic="table", isolation="read_uncommitted"):
    consumer = db.consumer(auto_offset_reset="earliest", isolation_level=isolation)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, offset)
    rows = []
    while True:
        got = consumer.poll(timeout=0.05)
        if not got:
            break
        rows += [(r.offset, r.key, r.value) for r in got]
    consumer.close()
    return rows


def db_records(db, topic="table"):
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    rows = []
    while True:
        got = consumer.poll(timeout=0.05)
        if not got:
            break
        rows += got
    consumer.close()
    return rows


def final_values(written):
    last = {}
    for offset, key, value in written:
        last[key] = (offset, value)
    return sorted((offset, key, value) for key, (offset, value) in last.items())


def updates(rounds, keys, tag=b"v"):
    return [(b"key-%d" % k, tag + b"%d-%d" % (r, k)) for r in range(rounds) for k in range(keys)]


def test_offsets_never_change_and_a_read_at_a_removed_offset_gets_the_next(db):
    db.create_topic("table", config=SMALL)
    written = produce(db, updates(20, 10))
    (result,) = db.compact("table")
    assert result.stats.records_kept < result.stats.records_read
    after = read_from(db, 0)
    assert after == final_values(written)
    by_offset = {offset: (key, value) for offset, key, value in written}
    assert all(by_offset[offset] == (key, value) for offset, key, value in after)
    # Offset 0 was removed: a read from it starts at the next offset that exists.
    assert read_from(db, 0)[0][0] == after[0][0] > 0
    assert db.describe_topic("table").partitions[0].log_end_offset == len(written)


def test_a_consumer_within_the_head_sees_every_record(tmp_path):
    db = streamlog.open(str(tmp_path / "db"), config={"log.cleaner.backoff.ms": 20})
    db.create_topic("table", config=dict(SMALL, **{"min.cleanable.dirty.ratio": 0.01}))
    written = produce(db, updates(40, 5))
    wait_until(lambda: db.describe_topic("table").partitions[0].first_dirty_offset > 0,
               "a background pass")
    # The background cleaner never rolls: the active segment (the head) is never cleaned.
    head = db.describe_topic("table").partitions[0].first_dirty_offset
    assert 0 < head < len(written)
    assert read_from(db, head) == [w for w in written if w[0] >= head]
    db.close()


def test_a_reader_from_the_start_sees_every_final_value_and_recent_tombstones(db):
    db.create_topic("table", config=dict(SMALL, **{"delete.retention.ms": 3_600_000}))
    written = produce(db, updates(10, 8))
    written += produce(db, [(b"key-3", None)])
    db.compact("table")
    rows = read_from(db, 0)
    assert rows == final_values(written)
    assert (written[-1][0], b"key-3", None) in rows   # within delete.retention.ms


def test_a_tombstone_goes_once_delete_retention_ms_has_passed(db_path):
    db = streamlog.open(db_path)
    db.create_topic("table", config=dict(SMALL, **{"delete.retention.ms": 0}))
    written = produce(db, updates(4, 4) + [(b"key-1", None)])
    db.compact("table")   # the first pass that keeps the tombstone sets its horizon: now
    produce(db, [(b"key-2", b"later")])
    db.compact("table")
    rows = read_from(db, 0)
    assert all(key != b"key-1" for _, key, _ in rows)
    assert {key for _, key, _ in rows} == {b"key-0", b"key-2", b"key-3"}
    db.close()
    assert len(written) == 17


def test_min_compaction_lag_ms_holds_records_back(db):
    db.create_topic("table", config=dict(SMALL, **{"min.compaction.lag.ms": 3_600_000}))
    written = produce(db, updates(10, 5))
    (result,) = db.compact("table")
    assert result.stats is None
    assert read_from(db, 0) == written


@pytest.fixture
def quiet_db(tmp_path):
    """A database whose cleaner runs the passes db.compact asks for, and no others."""
    database = streamlog.open(str(tmp_path / "db"), config={"log.cleaner.enable": False})
    yield database
    database.close()


def change_before_each_swap(db, monkeypatch, change, times):
    """Run change(log) on the cleaner thread just before each of the next `times` swaps of
    table-0's passes: another thread's change to the log while a pass copied it. Returns
    the log start before each call."""
    log = db._broker.partition_log(TP)
    swap = log.replace_segments
    calls = []

    def meanwhile(replacements, truncations):
        if len(calls) < times:
            calls.append(log.log_start_offset)
            change(log)
        return swap(replacements, truncations)
    monkeypatch.setattr(log, "replace_segments", meanwhile)
    return calls


def drop_first_segment(log):
    """The log start moved to the second segment (DeleteRecords), then retention: the first
    segment goes."""
    start = log.segments[1].base_offset
    log.increase_log_start_offset(start)
    log.delete_old_segments()
    assert log.segments[0].base_offset == start   # (the flusher's retention may be first)


def test_compact_says_so_when_every_pass_was_abandoned(quiet_db, monkeypatch):
    # Kafka's cleaner lets an aborted cleaning go and cleans the log in a later round
    # (LogCleaner.CleanerThread.cleanLog); db.compact retries a few passes, then its result
    # must say the log was not cleaned and why, not look like "nothing to clean".
    db = quiet_db
    db.create_topic("table", config=dict(SMALL, **{"cleanup.policy": "compact,delete"}))
    written = produce(db, updates(200, 8))
    assert len(db._broker.partition_log(TP).segments) > 8   # more than the passes drop
    calls = change_before_each_swap(db, monkeypatch, drop_first_segment, times=1000)
    (result,) = db.compact("table")
    assert len(calls) == 5 and calls == sorted(set(calls))   # five passes, each abandoned
    assert result.stats is None
    assert result.aborted.startswith("5 passes in a row abandoned: the log changed under")
    start = db.describe_topic("table").partitions[0].log_start_offset
    assert read_from(db, 0) == [row for row in written if row[0] >= start]   # nothing cleaned
    monkeypatch.undo()
    (result,) = db.compact("table")
    assert result.aborted is None and result.stats.records_kept < result.stats.records_read


def test_compact_retries_a_pass_that_retention_abandoned(quiet_db, monkeypatch):
    db = quiet_db
    db.create_topic("table", config=dict(SMALL, **{"cleanup.policy": "compact,delete"}))
    written = produce(db, updates(200, 8))
    calls = change_before_each_swap(db, monkeypatch, drop_first_segment, times=1)
    (result,) = db.compact("table")
    assert len(calls) == 1
    assert result.aborted is None and result.stats is not None
    start = db.describe_topic("table").partitions[0].log_start_offset
    assert read_from(db, 0) == final_values([row for row in written if row[0] >= start])


def test_the_retention_check_during_a_pass_waits_for_it(tmp_path, monkeypatch):
    # Kafka's retention check leaves compacted logs to the cleaner thread
    # (LogManager.cleanupLogs takes only pauseCleaningForNonCompactedPartitions), which
    # deletes their old segments after each cleaning (LogCleaner.cleanFilthiestLog:
    # deletableLogs): retention never removes a segment a pass is reading.
    db = streamlog.open(str(tmp_path / "db"), config={"log.cleaner.backoff.ms": 3_600_000})
    db.create_topic("table", config=dict(SMALL, **{"cleanup.policy": "compact,delete",
                                                   "retention.bytes": 8192}))
    written = produce(db, updates(4, 400))   # what the pass keeps is still over 8192 bytes
    assert db._broker.partition_log(TP).size_in_bytes > 8192 + 4096   # retention is due
    calls = change_before_each_swap(db, monkeypatch, lambda log: db._broker.apply_retention(),
                                    times=1)
    (result,) = db.compact("table")
    assert calls == [0]
    # The pass was not thrown away and retried over what retention left: it cleaned all of it.
    assert result.aborted is None and result.stats.records_read == len(written)
    start = wait_until(lambda: db.describe_topic("table").partitions[0].log_start_offset,
                       "retention of the compacted log, after the pass")
    assert read_from(db, start) == final_values([w for w in written if w[0] >= start])
    db.close()


@pytest.mark.parametrize("why", ["background cleaning off", "uncleanable"])
def test_the_flusher_keeps_the_retention_of_a_log_the_cleaner_does_not_clean(tmp_path, why):
    # Only a log the cleaner cleans in the background has its retention there: the others'
    # must not wait for a pass that never comes.
    off = why == "background cleaning off"
    db = streamlog.open(str(tmp_path / "db"), config={"log.cleaner.enable": not off,
                                                      "log.cleaner.backoff.ms": 3_600_000})
    db.create_topic("table", config=dict(SMALL, **{"cleanup.policy": "compact,delete",
                                                   "retention.bytes": 8192}))
    produce(db, updates(4, 400))
    if not off:
        db._broker.cleaner.uncleanable[TP] = OSError("a damaged segment")
    db._broker.apply_retention()
    assert db.describe_topic("table").partitions[0].log_start_offset > 0   # at once
    db.close()


def test_compact_of_a_log_deleted_during_its_pass_says_so(quiet_db, monkeypatch):
    db = quiet_db
    db.create_topic("table", config=SMALL)
    produce(db, updates(200, 8))
    calls = change_before_each_swap(db, monkeypatch, lambda log: db.delete_topic("table"),
                                    times=1000)
    (result,) = db.compact("table")
    assert len(calls) == 1   # no pass after the log is gone
    assert result.stats is None and result.aborted == "the log was deleted during the pass"
    assert "table" not in db.topics()


def test_max_compaction_lag_ms_forces_a_pass_whatever_the_dirty_ratio(tmp_path):
    db = streamlog.open(str(tmp_path / "db"), config={"log.cleaner.backoff.ms": 20})
    db.create_topic("table", config=dict(SMALL, **{"min.cleanable.dirty.ratio": 0.99}))
    written = produce(db, updates(30, 5))
    db.compact("table")
    written += produce(db, updates(1, 5, tag=b"late"))
    part = db.describe_topic("table").partitions[0]
    first_dirty = part.first_dirty_offset
    # max.compaction.lag.ms also bounds segment.ms, so the next append rolls the active
    # segment; its dirty records are then older than the lag, which forces a pass.
    db.alter_topic_config("table", {"max.compaction.lag.ms": 1})
    producer = db.producer()
    late_ms = max(r.timestamp for r in db_records(db)) + 10   # past the lag by the clock
    offset = producer.send("table", key=b"roll", value=b"1", partition=0,
                           timestamp_ms=late_ms).get().offset
    producer.close()
    written.append((offset, b"roll", b"1"))
    wait_until(lambda: db.describe_topic("table").partitions[0].first_dirty_offset >
               first_dirty, "a pass forced by max.compaction.lag.ms")
    assert read_from(db, 0)[:5] == final_values(written)[:5]
    assert {k: v for _, k, v in read_from(db, 0)} == {k: v for _, k, v in written}
    db.close()


def test_the_dirty_ratio_decides_when_the_background_cleaner_runs(tmp_path):
    db = streamlog.open(str(tmp_path / "db"), config={"log.cleaner.backoff.ms": 20})
    db.create_topic("table", config=dict(SMALL, **{"min.cleanable.dirty.ratio": 0.5}))
    written = produce(db, updates(40, 5))
    wait_until(lambda: db.describe_topic("table").partitions[0].dirty_ratio < 0.5,
               "the background cleaner")
    part = db.describe_topic("table").partitions[0]
    assert part.first_dirty_offset > 0
    rows = read_from(db, 0)
    assert {key: value for _, key, value in rows} == {k: v for _, k, v in written}
    db.close()


def test_describe_topic_shows_the_dirty_ratio_of_compacted_topics_only(db):
    db.create_topic("table", config=SMALL)
    db.create_topic("events")
    produce(db, updates(10, 5))
    db.producer().send("events", b"x")
    part = db.describe_topic("table").partitions[0]
    assert part.first_dirty_offset == 0
    assert 0 <= part.dirty_ratio <= 1
    assert db.describe_topic("events").partitions[0].dirty_ratio is None
    db.compact("table")
    part = db.describe_topic("table").partitions[0]
    assert (part.first_dirty_offset, part.dirty_ratio) == (50, 0.0)


def test_compact_refuses_a_topic_that_is_not_compacted_and_a_read_only_handle(db_path):
    db = streamlog.open(db_path)
    db.create_topic("events")
    with pytest.raises(InvalidConfigurationError, match="not compacted"):
        db.compact("events")
    db.close()
    ro = streamlog.open(db_path, readonly=True)
    with pytest.raises(ReadOnlyError):
        ro.compact()
    ro.close()


def test_compact_delete_applies_retention_too(tmp_path):
    db = streamlog.open(str(tmp_path / "db"), config={"log.retention.check.interval.ms": 20})
    db.create_topic("table", config=dict(SMALL, **{"cleanup.policy": "compact,delete",
                                                   "retention.bytes": 2000}))
    written = produce(db, updates(60, 5))
    start = wait_until(lambda: db.describe_topic("table").partitions[0].log_start_offset,
                       "retention of a compact,delete topic")
    db.compact("table")
    assert read_from(db, start) == final_values([w for w in written if w[0] >= start])
    db.close()


def test_compaction_survives_reopen_and_is_checkpointed(db_path):
    db = streamlog.open(db_path)
    db.create_topic("table", config=SMALL)
    written = produce(db, updates(20, 10))
    db.compact("table")
    db.close()
    db = streamlog.open(db_path)
    assert read_from(db, 0) == final_values(written)
    assert db.describe_topic("table").partitions[0].first_dirty_offset == len(written)
    db.close()


def test_aborted_transactions_are_removed_and_read_committed_never_sees_them(db):
    db.create_topic("table", config=SMALL)
    committed = produce(db, updates(3, 4))
    producer = db.producer(transactional_id="writer")
    producer.init_transactions()
    producer.begin_transaction()
    for key, value in updates(2, 4, tag=b"aborted"):
        producer.send("table", key=key, value=value, partition=0)
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("table", key=b"key-9", value=b"committed", partition=0)
    producer.commit_transaction()
    producer.close()
    db.compact("table")
    for isolation in ("read_uncommitted", "read_committed"):
        rows = read_from(db, 0, isolation=isolation)
        assert all(not value.startswith(b"aborted") for _, _, value in rows)
        assert (b"key-9", b"committed") in [(k, v) for _, k, v in rows]
        assert {k for _, k, _ in rows} >= {k for _, k, _ in committed}


def test_committed_offsets_survive_compaction_of_the_offsets_log(db_path):
    db = streamlog.open(db_path)
    db.create_topic("events")
    db.producer().send("events", b"x")
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest")
    tp = TopicPartition("events", 0)
    consumer.assign([tp])
    for i in range(300):
        consumer.commit({tp: i})
    consumer.close()
    results = db.compact("__consumer_offsets")
    assert sum(r.stats.records_read for r in results if r.stats) >= 300
    assert sum(r.stats.records_kept for r in results if r.stats) < 20
    db.close()
    db = streamlog.open(db_path)
    consumer = db.consumer(group_id="g")
    assert consumer.committed([tp])[tp].offset == 299
    db.close()


def test_the_metadata_log_is_compacted_and_topics_survive(db_path):
    db = streamlog.open(db_path)
    for i in range(30):
        db.create_topic(f"t{i % 3}-{i}")
        if i % 2:
            db.delete_topic(f"t{i % 3}-{i}")
    before = db.topics()
    (result,) = db.compact("__cluster_metadata")
    assert result.stats.records_kept < result.stats.records_read
    db.close()
    db = streamlog.open(db_path)
    assert db.topics() == before
    db.close()


def test_compaction_cannot_be_taken_off_a_topic_the_cleaner_compacted(db):
    db.create_topic("table", config=SMALL)
    produce(db, updates(10, 5))
    db.alter_topic_config("table", {"cleanup.policy": "compact,delete"})   # still compacted
    db.compact("table")
    with pytest.raises(InvalidConfigurationError, match="has been compacted"):
        db.alter_topic_config("table", {"cleanup.policy": "delete"})
    db.create_topic("fresh", config=SMALL)
    db.alter_topic_config("fresh", {"cleanup.policy": "delete"})   # never cleaned: allowed


def test_a_lost_cleaner_checkpoint_does_not_let_compaction_be_taken_off(db_path):
    # The checkpoint was the only proof of a cleaned log: without the file, the change was
    # taken, the cleaner's gaps then read as damage ("record batch offsets ... are out of
    # order") and an unclean stop's recovery cut the log at the first of them. The batch
    # headers still show the gaps: losing one metadata file must not cost the data.
    with streamlog.open(db_path, config=SMALL) as db:
        db.create_topic("table", config=SMALL)
        written = produce(db, updates(20, 10))
        db.compact("table")
        kept = read_from(db, 0)
        assert kept == final_values(written)
    os.remove(os.path.join(db_path, files.CLEANER_OFFSET_CHECKPOINT))
    with streamlog.open(db_path, config=SMALL) as db:
        with pytest.raises(InvalidConfigurationError, match="has been compacted"):
            db.alter_topic_config("table", {"cleanup.policy": "delete"})
        assert read_from(db, 0) == kept
        db.create_topic("uncleaned", config=SMALL)
        produce(db, updates(3, 2), topic="uncleaned")
        db.alter_topic_config("uncleaned", {"cleanup.policy": "delete"})   # no gap: allowed


def stop_uncleanly(db):
    """The process dies: no flush, no checkpoint, no clean-shutdown marker."""
    db._broker._abandon()
    db._broker._closed = True
    db.close()


def test_a_database_default_cannot_take_compaction_off_a_compacted_topic(db_path):
    # A topic with no cleanup.policy of its own follows the database's default. Its logs
    # hold the cleaner's offset gaps: opened as a log that is not compacted after an unclean
    # stop, recovery read the first gap as lost data and deleted every segment from there.
    with streamlog.open(db_path, config=SMALL) as db:
        db.create_topic("table")
        written = produce(db, updates(20, 10))
        db.compact("table")
        kept = read_from(db, 0)
        assert kept == final_values(written)
        stop_uncleanly(db)
    with pytest.raises(InvalidConfigurationError, match="has been compacted"):
        streamlog.open(db_path, config=dict(SMALL, **{"cleanup.policy": "delete"}))
    with streamlog.open(db_path, config=SMALL) as db:
        assert read_from(db, 0) == kept


def keys_read(db, isolation="read_committed"):
    return sorted(key for _, key, _ in read_from(db, 0, isolation=isolation)
                  if not key.startswith(b"pad"))


def test_a_caught_up_view_forgets_an_aborted_transaction_the_cleaner_dropped(tmp_path):
    """Kafka's cleaner drops an aborted transaction's entry once its data is gone and then
    its marker after delete.retention.ms (CleanedTransactionMetadata). A read-only view
    that had followed to the writer's roll kept the entry it had learnt: its
    read_committed consumers held the producer inside that transaction for good (its
    ABORT marker gone) and skipped the producer's later committed records."""
    root = str(tmp_path / "db")
    with streamlog.open(root, config={"log.cleaner.enable": False}) as db, \
            streamlog.open(root, readonly=True) as view:
        db.create_topic("table", config={"cleanup.policy": "compact", "delete.retention.ms": 0,
                                         "min.cleanable.dirty.ratio": 0.01})
        rounds = []

        def compact():
            db.compact("table")
            rounds.append(produce(db, [(b"pad%d" % len(rounds), b"p")]))
        p = db.producer(transactional_id="P")
        p.init_transactions()
        p.begin_transaction()
        p.send("table", key=b"x", value=b"aborted", partition=0)
        p.abort_transaction()
        p.begin_transaction()
        p.send("table", key=b"t", value=b"committed", partition=0)
        p.commit_transaction()
        for _ in range(3):   # the data goes, then the marker, each pass the view follows
            compact()
            assert keys_read(view) == [b"t"]
        assert view._broker.partition_log(TP).txn_indexes.entries() == []
        p.begin_transaction()
        p.send("table", key=b"u", value=b"committed", partition=0)
        p.commit_transaction()
        assert keys_read(db) == keys_read(view) == [b"t", b"u"]


def test_a_view_scans_a_cleaned_last_segment_from_its_start(tmp_path):
    """The view kept the byte position its tail scan had reached by segment base: when the
    cleaner put a merged file under the same base, the view scanned the new file from the
    old position and raised CorruptRecordError on a sound log."""
    root = str(tmp_path / "db")
    with streamlog.open(root, config={"log.cleaner.enable": False}) as db, \
            streamlog.open(root, readonly=True) as view:
        db.create_topic("table", config={"cleanup.policy": "compact"})
        produce(db, [(b"k%d" % i, b"v") for i in range(5)])
        db.compact("table")
        assert len(read_from(view, 0)) == 5
        produce(db, [(b"k0", b"replaced")] + [(b"n%d" % i, b"w" * (7 + i)) for i in range(5)])
        db.compact("table")
        # The first read may still serve the old segment's records below its end (a view
        # sees the log as of its last look), then refreshes; the next sees the new files.
        first = read_from(view, 0)
        assert [r[0] for r in first][-6:] == list(range(5, 11))
        assert read_from(view, 0) == read_from(db, 0)
