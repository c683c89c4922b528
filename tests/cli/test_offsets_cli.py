"""`streamlog get-offsets` and `streamlog delete-records`: kafka-get-offsets and
kafka-delete-records (Kafka's tools/GetOffsetShell.java and DeleteRecordsCommand.java)."""
import json
import subprocess
import sys

import pytest

import streamlog
from streamlog import TopicPartition

T0, T1, T10 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 10)


@pytest.fixture
def path(tmp_path):
    """t: 12 partitions, t-0 records at times 1000, 2000, 3000, 1500 (offsets 0..3), t-10
    two records at 500 and 600; u: 1 empty partition; group g's offsets make
    __consumer_offsets."""
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("t", partitions=12)
        db.create_topic("u")
        producer = db.producer(acks="all")
        for ts in (1000, 2000, 3000, 1500):
            producer.send("t", value=b"x", partition=0, timestamp_ms=ts)
        for ts in (500, 600):
            producer.send("t", value=b"y", partition=10, timestamp_ms=ts)
        producer.flush()
        consumer = db.consumer(group_id="g")
        consumer.assign([T0])
        consumer.commit({T0: 1})
    return path


def run(*args):
    return subprocess.run([sys.executable, "-m", "streamlog.cli", *args], capture_output=True,
                          text=True, timeout=120)


def get_offsets(path, *args, code=0):
    result = run("get-offsets", "--path", path, *args)
    assert result.returncode == code, result.stderr
    return result.stdout.splitlines() if code == 0 else result.stderr.strip()


def test_latest_of_every_partition_internal_topics_too_in_kafkas_order(path):
    """GetOffsetShell lists internal topics unless --exclude-internal-topics, prints
    topic:partition:offset, and sorts by the partitions' "topic-partition" names (t-10
    before t-2)."""
    lines = get_offsets(path)
    offsets = [line for line in lines if not line.startswith("__consumer_offsets:")]
    assert len(lines) - len(offsets) == 50   # __consumer_offsets' partitions
    assert offsets == ["t:0:4", "t:1:0", "t:10:2", "t:11:0"] + \
        [f"t:{p}:0" for p in range(2, 10)] + ["u:0:0"]
    assert get_offsets(path, "--exclude-internal-topics") == offsets


def test_time_names_numbers_and_times(path):
    def at(time):
        return get_offsets(path, "--topic", "t", "--partitions", "0,10,1",
                           "--time", time)
    assert at("earliest") == at("-2") == at("-4") == at("earliest-local") == \
        ["t:0:0", "t:1:0", "t:10:0"]
    assert at("-1") == ["t:0:4", "t:1:0", "t:10:2"]
    # max-timestamp: the record with the largest timestamp; none in an empty partition.
    assert at("max-timestamp") == at("-3") == ["t:0:2", "t:10:1"]
    # A time: the first record at or after it; a partition with none is left out.
    assert at("1200") == ["t:0:1"]
    assert at("550") == ["t:0:0", "t:10:1"]
    assert at("1970-01-01T00:00:01.600") == ["t:0:1"]
    assert at("4000") == []


def test_topic_partition_patterns(path):
    def chosen(patterns):
        return [line.rsplit(":", 1)[0]
                for line in get_offsets(path, "--topic-partitions", patterns)]
    assert chosen("t:1-3") == ["t:1", "t:2"]            # HIGH excluded
    assert chosen("t:-2,u") == ["t:0", "t:1", "u:0"]
    assert chosen("t:10-") == ["t:10", "t:11"]
    assert chosen("[tu]:0") == ["t:0", "u:0"]
    assert chosen(":0")[-2:] == ["t:0", "u:0"]          # no topic: every topic
    assert chosen("t") == chosen("t:")
    # --topic is a regular expression over whole names; ',' means '|' (Kafka's TopicFilter).
    assert get_offsets(path, "--topic", "t,u", "--partitions", "0") == \
        ["t:0:4", "u:0:0"]
    assert get_offsets(path, "--topic", "t.", code=1).endswith("no topic partition "
                                                                       "matches the filters given")


def test_refusals(path):
    assert get_offsets(path, "--topic", "nothing", code=1) == \
        "streamlog get-offsets: no topic partition matches the filters given"
    assert "cannot be used with --topic" in get_offsets(
        path, "--topic-partitions", "t:0", "--topic", "t", code=2)
    assert "--partitions takes a comma-separated list" in get_offsets(
        path, "--partitions", "0,x", code=2)
    assert "'t:x' is not TOPIC" in get_offsets(path, "--topic-partitions", "t:x",
                                                code=2)
    assert "no valid regular expression" in get_offsets(path, "--topic", "t(", code=2)
    assert get_offsets(path, "--time", "soon", code=2).endswith(
        "-4 or earliest-local, or a time (ms, or ISO-8601), got 'soon'")
    assert "tiered storage" in get_offsets(path, "--time", "latest-tiered", code=2)


def test_get_offsets_reads_beside_a_writer(path):
    with streamlog.open(path) as db:
        db.producer(acks="all").send("t", value=b"more", partition=1).result()
        assert get_offsets(path, "--topic-partitions", "t:1") == ["t:1:1"]


def delete_records(tmp_path, path, document, code=0):
    file = tmp_path / "offsets.json"
    file.write_text(document if isinstance(document, str) else json.dumps(document))
    result = run("delete-records", "--path", path, "--offset-json-file", str(file))
    assert result.returncode == code, result.stderr
    return result


def log_starts(path, *partitions):
    with streamlog.open(path, readonly=True) as db:
        return [db.list_offsets({tp: "earliest"})[tp].offset for tp in partitions]


def test_delete_records_moves_log_starts_and_answers_each_partition(tmp_path, path):
    out = delete_records(tmp_path, path, {"partitions": [
        {"topic": "t", "partition": 0, "offset": 3},
        {"topic": "t", "partition": 10, "offset": -1}], "version": 1}).stdout
    assert out.splitlines() == ["Executing records delete operation",
                                "Records delete operation completed:",
                                "partition: t-0\tlow_watermark: 3",
                                "partition: t-10\tlow_watermark: 2"]
    assert log_starts(path, T0, T10) == [3, 2]


def test_a_refused_partition_does_not_hold_back_the_others(tmp_path, path):
    """Kafka's DeleteRecords answers each partition alone; the command prints each error and
    exits 1."""
    out = delete_records(tmp_path, path, {"partitions": [
        {"topic": "t", "partition": 0, "offset": 99},
        {"topic": "t", "partition": 10, "offset": 1},
        {"topic": "__consumer_offsets", "partition": 0, "offset": 0},
        {"topic": "gone", "partition": 0, "offset": 0}]}, code=1).stdout.splitlines()
    assert out[2].startswith("partition: t-0\terror: cannot delete records of t-0 below "
                             "offset 99")
    assert out[3] == "partition: t-10\tlow_watermark: 1"
    assert out[4].startswith("partition: __consumer_offsets-0\terror: cannot delete records "
                             "of internal topic")
    assert out[5].startswith("partition: gone-0\terror: topic 'gone' does not exist")
    assert log_starts(path, T0, T10) == [0, 1]


@pytest.mark.parametrize("document, message", [
    ('{"partitions": [', "is not valid JSON"),
    ('[]', "holds no JSON object"),
    ({"partitions": [], "version": 2}, "version 2 is not supported"),
    ({"version": 1}, 'has no "partitions" list'),
    ({"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}, "each partition is"),
    ({"partitions": [{"topic": "t", "partition": 0}]}, "each partition is"),
    ({"partitions": [{"topic": "t", "partition": 0, "offset": 1},
                     {"topic": "t", "partition": 0, "offset": 2}]},
     "names partitions more than once: t-0"),
])
def test_a_bad_offset_file_is_refused_and_deletes_nothing(tmp_path, path, document,
                                                          message):
    err = delete_records(tmp_path, path, document, code=2).stderr
    assert err.startswith("streamlog delete-records: ") and message in err
    assert log_starts(path, T0) == [0]
