"""`streamlog serve`: a Kafka listener in the foreground that says where it listens and stops
cleanly on SIGTERM, with what clients wrote on disk."""
import re
import signal
import subprocess
import sys

import pytest

import streamlog
from streamlog import TopicPartition

kafka = pytest.importorskip("kafka")


def test_serve_listens_prints_its_address_and_stops_on_sigterm(tmp_path):
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("t", partitions=2)
    child = subprocess.Popen([sys.executable, "-m", "streamlog.cli", "serve", "--path", path,
                              "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        line = child.stdout.readline()
        match = re.search(r"on (127\.0\.0\.1:\d+)", line)
        assert match, (line, child.stderr.read() if child.poll() is not None else "")
        producer = kafka.KafkaProducer(bootstrap_servers=match.group(1), acks=1)
        offsets = [producer.send("t", b"v%d" % i, partition=i % 2).get(timeout=10).offset
                   for i in range(10)]
        producer.close()
        assert offsets == [i // 2 for i in range(10)]
    finally:
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert "stopping" in out
    with streamlog.open(path) as db:   # a clean close: every acknowledged record is there
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        values = []
        while len(values) < 10:
            records = consumer.poll(timeout=5.0)
            assert records
            values += [r.value for r in records]
        assert sorted(values) == sorted(b"v%d" % i for i in range(10))
