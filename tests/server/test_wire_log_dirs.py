"""DescribeLogDirs (key 35) on a database on its own: its one directory, and each partition
log's size, offset lag and is_future_key, as Kafka's ReplicaManager.describeLogDirs
answers (v4: the volume's total and usable bytes)."""
import glob
import importlib
import os

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from support.wire import call

kafka = pytest.importorskip("kafka")


def describe(sock, version, topics):
    module = importlib.import_module(f"kio.schema.describe_log_dirs.v{version}.request")
    return call(sock, module.DescribeLogDirsRequest(topics=None if topics is None else tuple(
        module.DescribableLogDirTopic(topic=t, partitions=tuple(i32(p) for p in ps))
        for t, ps in topics)))


def segments_size(db, partition_dir):
    return sum(os.path.getsize(f)
               for f in glob.glob(os.path.join(db.path, partition_dir, "*.log")))


def listed(result):
    return [(t.name, [(p.partition_index, p.partition_size, p.offset_lag, p.is_future_key)
                      for p in t.partitions]) for t in result.topics]


@pytest.fixture
def written(db):
    producer = db.producer()
    for i in range(10):
        producer.send("t", b"value-%d" % i, partition=0)
    producer.flush()
    db.create_topic("other", partitions=1)
    return db


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_log_dirs_answers_the_databases_directory_and_its_logs(written, sock,
                                                                       version):
    db = written
    size = segments_size(db, "t-0")
    assert size > 0
    answer = describe(sock, version, None)   # every log
    assert getattr(answer, "error_code", ErrorCode.none) == ErrorCode.none
    (result,) = answer.results
    assert (result.error_code, result.log_dir) == (ErrorCode.none, os.path.abspath(db.path))
    assert listed(result) == [("other", [(0, 0, 0, False)]),
                              ("t", [(0, size, 0, False), (1, 0, 0, False)])]
    # Only the partitions asked for, those the database holds: a partition or topic it
    # does not have is left out.
    (result,) = describe(sock, version, [("t", [0, 9]), ("missing", [0])]).results
    assert listed(result) == [("t", [(0, size, 0, False)])]
    if version >= 4:
        usage = os.statvfs(db.path)
        assert result.total_bytes == usage.f_blocks * usage.f_frsize
        assert 0 < result.usable_bytes <= result.total_bytes


def test_kafka_python_describe_log_dirs(written, server):
    kp = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        (broker,) = kp.describe_log_dirs()
        assert broker["broker"] == 0
        (log_dir,) = broker["log_dirs"]
        assert log_dir["error_code"] == 0
        assert log_dir["log_dir"] == os.path.abspath(written.path)
        by_topic = {t["name"]: t["partitions"] for t in log_dir["topics"]}
        assert [(p["partition_index"], p["partition_size"]) for p in by_topic["t"]] == \
            [(0, segments_size(written, "t-0")), (1, 0)]
    finally:
        kp.close()
