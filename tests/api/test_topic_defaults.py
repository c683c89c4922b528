"""A database's topic defaults (topic configs given to its writable open) reach its read-only views.

Kafka keeps cluster-wide default configs in its metadata log (__cluster_metadata) as
ConfigRecords (metadata/src/main/resources/common/metadata/ConfigRecord.json) of the default
broker resource (ConfigurationControlManager.DEFAULT_NODE = new ConfigResource(Type.BROKER, "")
in metadata/src/main/java/org/apache/kafka/controller/), so every reader of that log applies them. Here the
writer records them in the database's own __cluster_metadata under the key `!topic-defaults`.
Before, a read-only open applied Kafka's defaults: a topic compacted under a compact default
was read as a dense log, and the cleaner's gaps raised CorruptRecordError.
"""
import os

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.broker.metadata import TopicRegistry
from streamlog.storage.keyed_log import encode_changes

TP = TopicPartition("t", 0)
DAY_MS = 24 * 3600 * 1000


def read_all(db, topic="t"):
    """(offset, key, value) of every record of partition 0, read from the start."""
    end = db.describe_topic(topic).partitions[0].high_watermark
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    got = []
    while not got or got[-1][0] < end - 1:
        records = consumer.poll(timeout=5.0)
        assert records, f"stopped after {got[-1:]} of {end}"
        got.extend((r.offset, r.key, r.value) for r in records)
    consumer.close()
    return got


def compacted_topic(db, records, keys):
    """Topic "t" (no config of its own) written with `records` records over `keys` keys, then
    compacted; returns what it reads after."""
    db.create_topic("t")
    producer = db.producer(linger_ms=0)
    for i in range(records):
        producer.send("t", key=b"k%d" % (i % keys), value=b"v%d" % i).result()
    db.compact("t")
    return read_all(db)


def metadata_log_bytes(root):
    directory = os.path.join(root, "__cluster_metadata-0")
    return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)
               if name.endswith(".log"))


def test_a_view_reads_a_topic_compacted_under_the_databases_compact_default(db_path):
    # The reviewer's reproduction: the topic has no cleanup.policy of its own.
    with streamlog.open(db_path, config={"cleanup.policy": "compact",
                                         "segment.bytes": 1024}) as db:
        written = compacted_topic(db, records=40, keys=4)
        assert [offset for offset, _, _ in written] == [36, 37, 38, 39]
        with streamlog.open(db_path, readonly=True) as view:   # the writer is live
            assert read_all(view) == written
            assert view.describe_topic("t").config["cleanup.policy"] == "compact"
            assert view.describe_topic("t").partitions[0].first_dirty_offset == 40
    with streamlog.open(db_path, readonly=True) as view:       # and after it stopped
        assert read_all(view) == written


def test_a_view_reports_the_databases_retention_segment_and_timestamp_defaults(db_path):
    defaults = {"retention.ms": 3 * DAY_MS, "segment.bytes": 1 << 20,
                "message.timestamp.type": "LogAppendTime"}
    with streamlog.open(db_path, config=defaults) as db:
        db.create_topic("t", config={"retention.bytes": 4096})
        written = db.describe_topic("t").config
        with streamlog.open(db_path, readonly=True) as view:
            seen = view.describe_topic("t")
            assert seen.config == written
            assert {k: seen.config[k] for k in defaults} == defaults
            assert seen.overrides == {"retention.bytes": 4096}


def test_the_recorded_defaults_win_over_a_config_given_to_a_read_only_open(db_path):
    with streamlog.open(db_path, config={"retention.ms": 3 * DAY_MS}) as db:
        db.create_topic("t")
    with streamlog.open(db_path, readonly=True,
                        config={"retention.ms": 5 * DAY_MS, "max.open.files": 64}) as view:
        assert view.describe_topic("t").config["retention.ms"] == 3 * DAY_MS
        # A second open in the process compares what it is given with what the first was.
        with streamlog.open(db_path, readonly=True,
                            config={"retention.ms": 5 * DAY_MS, "max.open.files": 64}):
            pass


def test_the_record_survives_a_reopen_and_is_written_only_when_the_defaults_change(db_path):
    with streamlog.open(db_path, config={"retention_ms": 3 * DAY_MS}) as db:
        db.create_topic("t")
    size = metadata_log_bytes(db_path)
    with streamlog.open(db_path, config={"retention.ms": str(3 * DAY_MS)}):
        pass                                     # the same defaults: nothing written
    assert metadata_log_bytes(db_path) == size
    with streamlog.open(db_path, readonly=True) as view:
        assert view.describe_topic("t").config["retention.ms"] == 3 * DAY_MS
    # A writable open's config is the database's defaults from then on, none included.
    with streamlog.open(db_path):
        pass
    with streamlog.open(db_path, readonly=True) as view:
        assert view.describe_topic("t").config["retention.ms"] == 7 * DAY_MS


def test_a_view_follows_a_change_of_defaults_when_it_refreshes_its_metadata(db_path):
    with streamlog.open(db_path, config={"retention.ms": 3 * DAY_MS}) as db:
        db.create_topic("t")
        db.producer(linger_ms=0).send("t", value=b"x").result()
    with streamlog.open(db_path, readonly=True) as view:
        assert view.describe_topic("t").config["retention.ms"] == 3 * DAY_MS
        with streamlog.open(db_path, config={"retention.ms": 2 * DAY_MS}):
            assert view.topics() == ["t"]        # the view re-reads the metadata log
            assert view.describe_topic("t").config["retention.ms"] == 2 * DAY_MS


def test_a_database_without_the_record_opens_read_only_as_before(db_path, monkeypatch):
    # What a writer before the record left: defaults applied, nothing recorded.
    with monkeypatch.context() as old_writer:
        old_writer.setattr(TopicRegistry, "record_topic_defaults", lambda self, overrides: None)
        with streamlog.open(db_path, config={"retention.ms": 3 * DAY_MS}) as db:
            db.create_topic("t")
    with streamlog.open(db_path, readonly=True) as view:
        assert view.describe_topic("t").config["retention.ms"] == 7 * DAY_MS
    with streamlog.open(db_path, readonly=True, config={"retention.ms": 4 * DAY_MS}) as view:
        assert view.describe_topic("t").config["retention.ms"] == 4 * DAY_MS
    # A writer given no defaults adds no record to such a database ...
    size = metadata_log_bytes(db_path)
    with streamlog.open(db_path):
        pass
    assert metadata_log_bytes(db_path) == size
    # ... one given some records them.
    with streamlog.open(db_path, config={"retention.ms": 3 * DAY_MS}):
        pass
    with streamlog.open(db_path, readonly=True, config={"retention.ms": 4 * DAY_MS}) as view:
        assert view.describe_topic("t").config["retention.ms"] == 3 * DAY_MS


def test_repair_keeps_the_recorded_defaults(db_path):
    compact = {"cleanup.policy": "compact"}
    with streamlog.open(db_path, config=compact) as db:
        written = compacted_topic(db, records=10, keys=2)
        # A malformed record makes repair rewrite the log (tests/api/test_repair.py).
        db._broker.metadata._log.append(encode_changes([(b"t", b"\xc1")], 1))
    report = streamlog.repair(db_path)
    assert len(report.malformed_records) == 1, report.lines()
    with streamlog.open(db_path, readonly=True) as view:
        assert view.describe_topic("t").config["cleanup.policy"] == "compact"
        assert read_all(view) == written


@pytest.mark.parametrize("value", [None, b"\xc1", b"\x92\x01\x02",
                                   b"\x81\xa6config\x81\xa2no\x01"])
def test_a_malformed_defaults_record_is_corruption_naming_the_log(db_path, value):
    with streamlog.open(db_path) as db:
        db.create_topic("t")
        db._broker.metadata._log.append(encode_changes([(b"!topic-defaults", value)], 1))
    for readonly in (False, True):
        with pytest.raises(streamlog.CorruptRecordError, match="__cluster_metadata"):
            streamlog.open(db_path, readonly=readonly)
