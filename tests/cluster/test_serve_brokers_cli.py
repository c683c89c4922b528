"""`streamlog serve --brokers 3`: a replicated cluster in the foreground that prints its
bootstrap servers, takes Kafka clients, and stops cleanly on SIGTERM."""
import os
import re
import signal
import subprocess
import sys

import pytest

kafka = pytest.importorskip("kafka")


def test_serve_brokers_runs_a_cluster_clients_use_and_stops_on_sigterm(tmp_path):
    path = str(tmp_path / "cluster")
    child = subprocess.Popen([sys.executable, "-m", "streamlog.cli", "serve", "--path", path,
                              "--port", "0", "--brokers", "3"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        while line and "serving" not in line:
            line = child.stdout.readline()
        match = re.search(r"on ((?:127\.0\.0\.1:\d+,?){3})", line)
        assert match, (line, child.stderr.read() if child.poll() is not None else "")
        bootstrap = match.group(1).split(",")
        admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([kafka.admin.NewTopic("t", num_partitions=2, replication_factor=3)])
        assert len(admin.describe_cluster()["brokers"]) == 3
        admin.close()
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        offsets = [producer.send("t", b"v%d" % i, partition=i % 2).get(timeout=10).offset
                   for i in range(6)]
        producer.close()
        assert offsets == [i // 2 for i in range(6)]
    finally:
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert "stopping" in out
    assert sorted(os.listdir(path)) == ["broker-0", "broker-1", "broker-2", "controller"]
