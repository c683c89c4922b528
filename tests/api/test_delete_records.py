"""Database.delete_records: Kafka's Admin.deleteRecords in process -- the log start moves,
readers start there, and a refused call moves nothing."""
import pytest

import streamlog
from streamlog import TopicPartition


def _starts(db, topic):
    return [p.log_start_offset for p in db.describe_topic(topic).partitions]


def test_records_below_the_offset_are_gone_for_readers_and_after_reopen(tmp_path):
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("t", partitions=2)
        producer = db.producer()
        producer.send_batch("t", [b"%d" % i for i in range(10)], partition=0)
        producer.send_batch("t", [b"x", b"y"], partition=1)
        producer.flush()
        t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
        # -1 is the high watermark, as Kafka's DeleteRecordsRequest.HIGH_WATERMARK.
        assert db.delete_records({t0: 7, ("t", 1): -1}) == {t0: 7, t1: 2}
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([t0, t1])
        values = [r.value for r in consumer.poll(timeout=1.0)]
        assert values == [b"7", b"8", b"9"]
        assert consumer.beginning_offsets([t0, t1]) == {t0: 7, t1: 2}
        assert db.delete_records({t0: 3}) == {t0: 7}   # a start never moves back
        consumer.close()
    with streamlog.open(path) as db:
        assert _starts(db, "t") == [7, 2]


def test_a_refused_offset_moves_no_partition_s_start(db):
    """All checked before any start moves, unlike a wire request, which Kafka answers
    partition by partition."""
    db.create_topic("t", partitions=2)
    db.create_topic("kept", config={"cleanup.policy": "compact"})
    producer = db.producer()
    for p in (0, 1):
        producer.send_batch("t", [b"a", b"b", b"c"], partition=p)
    producer.send("kept", key=b"k", value=b"v")
    producer.flush()
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    with pytest.raises(streamlog.OffsetOutOfRangeError, match=r"in \[0, 3\] \(its high "):
        db.delete_records({t0: 2, t1: 4})
    with pytest.raises(streamlog.OffsetOutOfRangeError):
        db.delete_records({t0: 2, t1: -2})
    with pytest.raises(streamlog.PolicyViolationError, match="cleanup.policy is compact;"):
        db.delete_records({t0: 2, TopicPartition("kept", 0): 1})
    with pytest.raises(streamlog.UnknownTopicOrPartitionError):
        db.delete_records({t0: 2, TopicPartition("t", 2): 0})
    with pytest.raises(streamlog.UnknownTopicOrPartitionError):
        db.delete_records({t0: 2, TopicPartition("nope", 0): 0})
    with pytest.raises(TypeError, match=r"takes an int offset for t-1, not '1'"):
        db.delete_records({t0: 2, t1: "1"})
    with pytest.raises(TypeError, match=r"delete_records\(\) takes a dict"):
        db.delete_records([t0])
    assert _starts(db, "t") == [0, 0]


def test_internal_topics_and_read_only_views_are_refused(db):
    db.create_topic("t")
    db.producer().send("t", value=b"v").result()
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest")
    consumer.subscribe(["t"])
    while not consumer.poll(timeout=1.0):
        pass
    consumer.commit()
    consumer.close()
    with pytest.raises(streamlog.InvalidTopicError, match="internal topic __consumer_offsets"):
        db.delete_records({TopicPartition("__consumer_offsets", 0): -1})
    with streamlog.open(db.path, readonly=True) as view:
        with pytest.raises(streamlog.ReadOnlyError):
            view.delete_records({TopicPartition("t", 0): 1})
    assert _starts(db, "t") == [0]
