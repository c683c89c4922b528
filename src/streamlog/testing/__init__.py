"""Test-suite helpers: a temporary database behind a Kafka listener, for application code that
uses Kafka's own clients (the pytest plugin in pytest_plugin.py wraps these as fixtures)."""
import streamlog
from streamlog import TopicPartition


def fake_kafka_database(path=None, config=None):
    """A database as a default Kafka broker behaves (topics created on first use), at path
    (None: a temporary directory, removed on close)."""
    settings = {"auto.create.topics.enable": True}
    settings.update(config or {})
    return streamlog.open(path, config=settings)


def records(db, topic, timeout=1.0):
    """Every record of topic, partition by partition in offset order (streamlog.Record)."""
    info = db.describe_topic(topic)
    consumer = db.consumer(auto_offset_reset="earliest")
    try:
        out = []
        for partition in info.partitions:
            tp = TopicPartition(topic, partition.partition)
            consumer.assign([tp])
            consumer.seek(tp, partition.log_start_offset)
            end = partition.high_watermark
            while consumer.position(tp) < end:
                got = consumer.poll(timeout=timeout)
                if not got:
                    break
                out += got
        return out
    finally:
        consumer.close()
