"""Database.list_offsets(): Kafka's Admin.listOffsets with its OffsetSpecs (earliest, latest,
max-timestamp, a time) and isolation levels."""
import pytest

import streamlog
from streamlog import OffsetAndTimestamp, TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def db(tmp_path):
    with streamlog.open(tmp_path / "db") as db:
        db.create_topic("t", partitions=2)
        producer = db.producer(acks="all")
        for ts in (1000, 3000, 2000, 3000):
            producer.send("t", value=b"x", partition=0, timestamp_ms=ts)
        producer.flush()
        yield db


def test_each_spec(db):
    def at(spec):
        return db.list_offsets({T0: spec, T1: spec})
    # earliest and latest answer timestamp -1, as Kafka's ListOffsets does.
    assert at("earliest") == {T0: OffsetAndTimestamp(0, -1), T1: OffsetAndTimestamp(0, -1)}
    assert at("latest") == {T0: OffsetAndTimestamp(4, -1), T1: OffsetAndTimestamp(0, -1)}
    # The first record holding the largest timestamp; an empty log has none.
    assert at("max-timestamp") == {T0: OffsetAndTimestamp(1, 3000), T1: None}
    assert at(1500) == {T0: OffsetAndTimestamp(1, 3000), T1: None}
    assert at(3001) == {T0: None, T1: None}
    db.delete_records({T0: 2})
    assert at("earliest")[T0] == OffsetAndTimestamp(2, -1)
    assert at(0)[T0] == OffsetAndTimestamp(2, 2000)


def test_read_committed_stops_at_the_last_stable_offset(db):
    """Kafka answers latest with the last stable offset under read_committed, and no offset
    for a time whose first record lies at or past it (ReplicaManager.fetchOffset)."""
    producer = db.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", value=b"open", partition=0, timestamp_ms=9000).result()
    committed = db.list_offsets({T0: "latest"}, isolation_level="read_committed")
    assert committed == {T0: OffsetAndTimestamp(4, -1)}
    assert db.list_offsets({T0: "latest"}) == {T0: OffsetAndTimestamp(5, -1)}
    assert db.list_offsets({T0: 5000}, isolation_level="read_committed") == {T0: None}
    assert db.list_offsets({T0: 5000}) == {T0: OffsetAndTimestamp(4, 9000)}
    producer.commit_transaction()
    # The commit marker is offset 5: the last stable offset is past it.
    assert db.list_offsets({T0: "latest"}, isolation_level="read_committed") == \
        {T0: OffsetAndTimestamp(6, -1)}
    assert db.list_offsets({T0: 5000}, isolation_level="read_committed") == \
        {T0: OffsetAndTimestamp(4, 9000)}


def test_a_read_only_handle_sees_what_the_writer_appended(db, tmp_path):
    with streamlog.open(tmp_path / "db", readonly=True) as view:
        assert view.list_offsets({T1: "latest"}) == {T1: OffsetAndTimestamp(0, -1)}
        db.producer(acks="all").send("t", value=b"y", partition=1, timestamp_ms=7).result()
        assert view.list_offsets({T1: "latest", T0: "max-timestamp"}) == \
            {T1: OffsetAndTimestamp(1, -1), T0: OffsetAndTimestamp(1, 3000)}


def test_a_read_only_handle_counts_timestamps_the_time_index_has_not_got_yet(tmp_path):
    """The writer's active segment indexes a batch every index.interval.bytes and writes its
    final time-index entry only at seal: the view read its largest timestamp from the time
    index alone, answering an early record's offset for max-timestamp (or none before the
    first entry)."""
    with streamlog.open(tmp_path / "db") as db:
        db.create_topic("w")
        producer = db.producer(acks="all")
        for i in range(100):   # ~100 batches of ~170 bytes: entries every ~25 batches
            producer.send("w", value=b"v" * 100, timestamp_ms=1000 + i).result()
        tp = TopicPartition("w", 0)
        assert db.list_offsets({tp: "max-timestamp"}) == {tp: OffsetAndTimestamp(99, 1099)}
        with streamlog.open(tmp_path / "db", readonly=True) as view:
            assert view.list_offsets({tp: "max-timestamp"}) == \
                {tp: OffsetAndTimestamp(99, 1099)}
            producer.send("w", value=b"v", timestamp_ms=5000).result()
            assert view.list_offsets({tp: "max-timestamp"}) == \
                {tp: OffsetAndTimestamp(100, 5000)}


@pytest.mark.parametrize("spec", [-1, -3, "newest", True, 1.5, None])
def test_a_spec_kafka_has_no_name_for_is_refused(db, spec):
    with pytest.raises(ValueError, match="list_offsets\\(\\) takes 'earliest', 'latest', "
                                         "'max-timestamp' or a time in ms"):
        db.list_offsets({T0: spec})


def test_refusals(db):
    with pytest.raises(ValueError, match="isolation_level read_uncommitted or read_committed"):
        db.list_offsets({T0: "latest"}, isolation_level="committed")
    with pytest.raises(TypeError, match="list_offsets\\(\\) takes a dict"):
        db.list_offsets([T0])
    with pytest.raises(streamlog.errors.UnknownTopicOrPartitionError):
        db.list_offsets({TopicPartition("t", 2): "latest"})


def test_max_timestamp_is_the_records_and_never_a_files_mtime(tmp_path):
    # Kafka's fetchOffsetByTimestamp(MAX_TIMESTAMP) picks the segment by maxTimestampSoFar,
    # -1 for one whose records carry no timestamp (a client may send NO_TIMESTAMP on a
    # CreateTime topic); the mtime stands in for it only for retention and time searches.
    from streamlog.storage.record_batch import build_batch
    with streamlog.open(tmp_path / "db") as db:
        db.create_topic("t", partitions=1)
        db.producer().send("t", value=b"old", timestamp_ms=1_600_000_000_000).result()
        log = db._broker.partition_log(T0)
        log.roll()
        db._broker.produce(T0, bytes(build_batch([b"no time"], timestamp=-1)))
        assert [s.base_offset for s in log.segments] == [0, 1]
        assert db.list_offsets({T0: "max-timestamp"}) == \
            {T0: OffsetAndTimestamp(0, 1_600_000_000_000)}
