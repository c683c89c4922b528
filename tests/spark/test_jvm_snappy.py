"""The JVM reader reads snappy batches: the xerial framing streamlog writes (Kafka's Java
producer's, docs/FORMAT.md), and a bare raw snappy block (librdkafka's), as the Python
reader does. Before snappy was supported the JVM reader refused every snappy batch."""
import datetime
import glob

import pytest
from spark.frames import read

import streamlog
from streamlog import TopicPartition
from streamlog.storage import compression

pytestmark = pytest.mark.spark

UTC = datetime.timezone.utc


def _truth(path, topic):
    with streamlog.open(path, readonly=True) as db:
        consumer = db.consumer(auto_offset_reset="earliest")
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        records = []
        while consumer.position(tp) < end:
            records.extend(consumer.poll(timeout=1.0))
        consumer.close()
    return sorted((r.offset, r.key, r.value, r.timestamp) for r in records)


def _jvm_rows(spark, path, topic):
    df = read(spark, path, subscribe=topic)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "JVM reader" in plan
    return sorted((r.offset, None if r.key is None else bytes(r.key),
                   None if r.value is None else bytes(r.value),
                   int(r.timestamp.replace(tzinfo=UTC).timestamp() * 1000))
                  for r in df.collect())


def _produce(path, topic):
    with streamlog.open(path) as db:
        db.create_topic(topic, partitions=1)
        producer = db.producer(compression_type="snappy", linger_ms=10_000)
        for i in range(400):   # several batches, some over one 32 KiB xerial block
            producer.send(topic, key=None if i % 7 == 0 else b"k%d" % i,
                          value=b"value-%d-" % i * (i % 40), timestamp_ms=1_700_000_000_000 + i)
            if i % 150 == 149:
                producer.flush()
        producer.flush()


def _has_xerial_header(path, topic):
    (log_file,) = glob.glob(f"{path}/{topic}-0/*.log")
    with open(log_file, "rb") as f:
        return b"\x82SNAPPY\x00" in f.read()


def test_the_jvm_reader_reads_xerial_framed_snappy(spark, tmp_path):
    path = str(tmp_path / "db")
    _produce(path, "xerial")
    assert _has_xerial_header(path, "xerial")
    truth = _truth(path, "xerial")
    assert len(truth) == 400
    assert _jvm_rows(spark, path, "xerial") == truth


def test_the_jvm_reader_reads_a_raw_snappy_block(spark, tmp_path, monkeypatch):
    """librdkafka writes one raw snappy block, without the xerial header."""
    import cramjam

    monkeypatch.setattr(compression, "_snappy_xerial",
                        lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))))
    path = str(tmp_path / "db")
    _produce(path, "raw")
    monkeypatch.undo()
    assert not _has_xerial_header(path, "raw")
    truth = _truth(path, "raw")
    assert len(truth) == 400
    assert _jvm_rows(spark, path, "raw") == truth
