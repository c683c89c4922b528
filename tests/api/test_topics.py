"""Topics through the public API: create, delete, describe, grow, configs, and refusals."""
import os
import shutil

import pytest

import streamlog

from support.child import run_py

KAFKA_DEFAULTS = {"segment.bytes": 1073741824, "segment.ms": 604800000,
                  "segment.index.bytes": 10485760, "index.interval.bytes": 4096,
                  "retention.ms": 604800000, "retention.bytes": -1, "cleanup.policy": "delete",
                  "max.message.bytes": 1048588, "message.timestamp.type": "CreateTime",
                  "min.insync.replicas": 1, "flush.messages": 2**63 - 1,
                  "flush.ms": 2**63 - 1, "file.delete.delay.ms": 60000,
                  # CompressionType's default levels (GZIP: Deflater.DEFAULT_COMPRESSION).
                  "compression.gzip.level": -1, "compression.lz4.level": 9,
                  "compression.zstd.level": 3,
                  "message.format.version": "3.0-IV1",   # ServerLogConfigs: IBP_3_0_IV1
                  # Kafka's LogConfig defaults of the configs that have no effect in one
                  # process: QuotaConfig's empty throttled-replica lists,
                  # ServerLogConfigs.LOG_MESSAGE_DOWNCONVERSION_ENABLE_DEFAULT, and the remote
                  # storage ones (-2: follow retention.ms / retention.bytes).
                  "leader.replication.throttled.replicas": "",
                  "follower.replication.throttled.replicas": "",
                  "message.downconversion.enable": True, "remote.storage.enable": False,
                  "local.retention.ms": -2, "local.retention.bytes": -2,
                  "remote.log.copy.disable": False, "remote.log.delete.on.disable": False}


def test_create_list_describe_delete(db):
    db.create_topic("orders", partitions=3, config={"retention.ms": 86_400_000,
                                                    "cleanup.policy": "delete"})
    db.create_topic("audit")
    assert db.topics() == ["audit", "orders"]
    d = db.describe_topic("orders")
    assert d.name == "orders" and not d.internal and len(d.topic_id) == 32
    assert [p.partition for p in d.partitions] == [0, 1, 2]
    assert d.config["retention.ms"] == 86_400_000 and d.overrides["retention.ms"] == 86_400_000
    db.delete_topic("orders")
    assert db.topics() == ["audit"]
    assert not any(n.startswith("orders-") for n in os.listdir(db.path))
    with pytest.raises(streamlog.UnknownTopicOrPartitionError):
        db.describe_topic("orders")


def test_topic_configs_default_to_kafkas_values(db):
    db.create_topic("t")
    config = db.describe_topic("t").config
    for key, value in KAFKA_DEFAULTS.items():
        assert config[key] == value, key


def test_describe_reports_offsets_segments_and_bytes(db):
    db.create_topic("t", config={"segment.bytes": 400})
    producer = db.producer(linger_ms=0)
    for _ in range(20):
        producer.send("t", value=b"x" * 50, partition=0).result()
    p = db.describe_topic("t").partitions[0]
    assert (p.log_start_offset, p.high_watermark, p.log_end_offset, p.last_stable_offset) == \
        (0, 20, 20, 20)
    assert p.segments > 1 and p.size_bytes > 20 * 50


def test_add_partitions_only_grows(db):
    db.create_topic("t", partitions=2)
    assert len(db.add_partitions("t", 5).partitions) == 5
    for bad in (5, 3):
        with pytest.raises(streamlog.InvalidPartitionsError, match="only grow"):
            db.add_partitions("t", bad)
    producer = db.producer()
    assert producer.send("t", value=b"v", partition=4).result().partition == 4


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/no",
                                  "uni\u00e7ode", "semi;colon", "__consumer_offsets",
                                  "__cluster_metadata"])
def test_invalid_topic_names_are_refused_and_nothing_is_created(db, name):
    before = sorted(os.listdir(db.path))
    with pytest.raises(streamlog.InvalidTopicError):
        db.create_topic(name)
    assert db.topics(internal=True) == []
    assert sorted(os.listdir(db.path)) == before


def test_names_differing_only_by_dot_and_underscore_collide(db):
    db.create_topic("app.events")
    with pytest.raises(streamlog.InvalidTopicError, match="collides"):
        db.create_topic("app_events")


@pytest.mark.parametrize("config,match", [
    ({"retention.ms": "soon"}, "integer"), ({"segment.bytes": 10}, ">= 14"),
    ({"cleanup.policy": "shred"}, "delete"), ({"no.such.config": 1}, "unknown topic config"),
    ({"message.timestamp.type": "WallTime"}, "CreateTime"), ({"min.insync.replicas": 0}, ">= 1"),
    # Kafka's LogConfig validators (index.interval.bytes also in KAFKA_REFERENCE.md 1.2):
    # segment.ms >= 1, index.interval.bytes >= 0, max.message.bytes >= 0, flush.messages >= 1,
    # flush.ms >= 0
    ({"segment.ms": 0}, r"'segment\.ms'.*>= 1"),
    ({"index.interval.bytes": -1}, r"'index\.interval\.bytes'.*>= 0"),
    ({"max.message.bytes": -1}, r"'max\.message\.bytes'.*>= 0"),
    ({"flush.messages": 0}, r"'flush\.messages'.*>= 1"),
    ({"flush.ms": -1}, r"'flush\.ms'.*>= 0"),
    # ThrottledReplicaListValidator: '*' or partition:broker pairs; local.retention.* >= -2.
    ({"leader.replication.throttled.replicas": "0-1"}, r"\[partitionId\]:\[brokerId\]"),
    ({"follower.replication.throttled.replicas": "*,0:1"}, "'\\*'"),
    ({"local.retention.ms": -3}, r"'local\.retention\.ms'.*>= -2"),
    ({"local.retention.bytes": "x"}, "integer"),
    ({"remote.log.copy.disable": "yes"}, "true or false"),
    ({"message.downconversion.enable": 1}, "true or false"),
    # CompressionType's levelValidator: gzip [1, 9] or -1, lz4 [1, 17], zstd [-131072, 22].
    ({"compression.gzip.level": 0}, r"\[1, 9\] or -1"),
    ({"compression.gzip.level": 10}, r"\[1, 9\] or -1"),
    ({"compression.lz4.level": 0}, r"'compression\.lz4\.level'.*\[1, 17\]"),
    ({"compression.lz4.level": 18}, r"'compression\.lz4\.level'.*\[1, 17\]"),
    ({"compression.zstd.level": 23}, r"'compression\.zstd\.level'.*\[-131072, 22\]"),
    ({"compression.zstd.level": -131073}, r"'compression\.zstd\.level'.*\[-131072, 22\]"),
    # MetadataVersionValidator: MetadataVersion.fromVersionString knows no 3.10 nor 3.0-IV2.
    ({"message.format.version": "3.10"}, "Kafka version"),
    ({"message.format.version": "3.0-IV2"}, "Kafka version")])
def test_invalid_configs_are_refused_and_nothing_is_created(db, config, match):
    with pytest.raises(streamlog.InvalidConfigurationError, match=match):
        db.create_topic("t", config=config)
    assert "t" not in db.topics()
    assert not os.path.exists(os.path.join(db.path, "t-0"))


def test_a_config_that_is_no_dict_is_a_type_error_naming_it(db):
    """A list of pairs reached the config-name lookup as (name, value) tuples: AttributeError
    "'tuple' object has no attribute 'replace'", from inside the metadata registry."""
    db.create_topic("u")
    for call in (lambda: db.create_topic("t", config=[("retention.ms", 5)]),
                 lambda: db.alter_topic_config("u", [("retention.ms", 5)])):
        with pytest.raises(TypeError, match=r"a topic config is a dict \{name: value\}, not list"):
            call()
    assert db.topics() == ["u"] and db.describe_topic("u").overrides == {}


def test_configs_with_no_effect_here_are_checked_kept_and_described(db_path):
    # Kafka's LogConfig defines them (replication throttling, down-conversion, tiered
    # storage, the deprecated message.format.version, which Kafka ignores from protocol 3.0
    # on); one process has none of those features, but a topic takes the configs as
    # Kafka's does and keeps them across a reopen. A LIST is shown joined by commas, as
    # ConfigDef.convertToString does.
    given = {"leader.replication.throttled.replicas": "0:0, 1:0",
             "follower.replication.throttled.replicas": "*",
             "message.downconversion.enable": "false", "local.retention.ms": 1000,
             "local.retention.bytes": -1, "remote.log.copy.disable": True,
             "remote.log.delete.on.disable": "true", "remote.storage.enable": False,
             "message.format.version": " 2.8.1 "}
    kept = {"leader.replication.throttled.replicas": "0:0,1:0",
            "follower.replication.throttled.replicas": "*",
            "message.downconversion.enable": False, "local.retention.ms": 1000,
            "local.retention.bytes": -1, "remote.log.copy.disable": True,
            "remote.log.delete.on.disable": True, "remote.storage.enable": False,
            "message.format.version": "2.8.1"}
    with streamlog.open(db_path) as db:
        db.create_topic("t", config=given)
    with streamlog.open(db_path) as db:
        assert db.describe_topic("t").overrides == kept
        assert {k: db.describe_topic("t").config[k] for k in kept} == kept


def test_remote_storage_is_refused_as_kafka_refuses_it_without_tiered_storage(db):
    # LogConfig.validateRemoteStorageOnlyIfSystemEnabled: remote.storage.enable=true on a
    # broker whose remote.log.storage.system.enable is false (there is no remote tier here).
    message = ("Tiered Storage functionality is disabled in the broker. Topic cannot be "
               "configured with remote log storage.")
    with pytest.raises(streamlog.InvalidConfigurationError) as refused:
        db.create_topic("t", config={"remote.storage.enable": "true"})
    assert str(refused.value) == message
    assert "t" not in db.topics()
    db.create_topic("t")
    with pytest.raises(streamlog.InvalidConfigurationError, match="Tiered Storage"):
        db.alter_topic_config("t", {"remote.storage.enable": True})
    assert db.describe_topic("t").overrides == {}


def test_a_min_compaction_lag_above_the_max_is_refused_against_the_configs_in_force(db_path):
    # Kafka's LogConfig.validateValues over the topic's configs merged with the broker's
    # (LogConfig.validate, at creation and at every change), and at the broker's start
    # (validateBrokerLogConfigValues): min.compaction.lag.ms may not exceed
    # max.compaction.lag.ms.
    message = r"^conflict topic config setting min\.compaction\.lag\.ms \(5000\) > " \
              r"max\.compaction\.lag\.ms \(1000\)$"
    with pytest.raises(streamlog.InvalidConfigurationError, match=message):
        streamlog.open(db_path, config={"min.compaction.lag.ms": 5000,
                                        "max.compaction.lag.ms": 1000})
    with streamlog.open(db_path, config={"max.compaction.lag.ms": 1000}) as db:
        with pytest.raises(streamlog.InvalidConfigurationError, match=message):
            db.create_topic("t", config={"min.compaction.lag.ms": 5000})
        assert "t" not in db.topics()
        db.create_topic("t", config={"min.compaction.lag.ms": 5000,
                                     "max.compaction.lag.ms": 5000})
        with pytest.raises(streamlog.InvalidConfigurationError, match=r"\(5000\) > .*\(1000\)"):
            db.alter_topic_config("t", {"max.compaction.lag.ms": 1000})
        assert db.describe_topic("t").config["max.compaction.lag.ms"] == 5000
    # A stored config is read back without the rule (Kafka's LogConfig.fromProps does not
    # validate): a topic whose min is above a database default lowered since still opens.
    with streamlog.open(db_path) as db:
        db.create_topic("u", config={"min.compaction.lag.ms": 5000})
    with streamlog.open(db_path, config={"max.compaction.lag.ms": 1000}) as db:
        config = db.describe_topic("u").config
        assert (config["min.compaction.lag.ms"], config["max.compaction.lag.ms"]) == (5000, 1000)


@pytest.mark.parametrize("partitions", [0, -1, "3", 1.5, 20_000])
def test_invalid_partition_counts_are_refused(db, partitions):
    with pytest.raises(streamlog.InvalidPartitionsError):
        db.create_topic("t", partitions=partitions)
    assert db.topics() == []


def test_duplicate_topic_is_refused(db):
    db.create_topic("t")
    with pytest.raises(streamlog.TopicAlreadyExistsError):
        db.create_topic("t")


def test_config_names_with_underscores_and_string_values(db):
    db.create_topic("t", config={"retention_ms": "5000", "max.message.bytes": "2000"})
    d = db.describe_topic("t")
    assert d.overrides == {"retention.ms": 5000, "max.message.bytes": 2000}


def test_alter_config_changes_behaviour(db):
    db.create_topic("t")
    producer = db.producer()
    producer.send("t", value=b"x" * 500).result()
    db.alter_topic_config("t", {"max.message.bytes": 300})
    producer.refresh_metadata("t")
    with pytest.raises(streamlog.RecordTooLargeError):
        producer.send("t", value=b"x" * 500).result()
    assert db.describe_topic("t").overrides == {"max.message.bytes": 300}


def test_topics_survive_reopen_and_deleted_ones_stay_deleted(db_path):
    with streamlog.open(db_path) as db:
        db.create_topic("keep", partitions=2)
        db.create_topic("drop")
        db.delete_topic("drop")
        db.create_topic("grow")
        db.add_partitions("grow", 4)
    with streamlog.open(db_path) as db:
        assert db.topics() == ["grow", "keep"]
        assert len(db.describe_topic("grow").partitions) == 4


def test_recreated_topic_starts_empty(db):
    db.create_topic("t")
    db.producer().send("t", value=b"old").result()
    db.delete_topic("t")
    db.create_topic("t")
    assert db.describe_topic("t").partitions[0].high_watermark == 0


def test_internal_topics_are_hidden_unless_asked(db):
    db.create_topic("t")
    assert db.topics() == ["t"]
    assert "__cluster_metadata" not in db.topics(internal=True)  # the registry itself is no topic


def test_reopen_finishes_a_create_or_delete_interrupted_between_registry_and_directories(
        db_path):
    with streamlog.open(db_path) as db:
        db.create_topic("t", partitions=2)
        db.create_topic("gone")
        producer = db.producer()
        producer.send("t", value=b"kept", partition=0).result()
        producer.send("t", value=b"lost with its directory", partition=1).result()
        producer.send("gone", value=b"deleted").result()
    # A deletion killed after its registry record, before its directory was renamed.
    killed = run_py("""
        import os, signal, sys, streamlog
        from streamlog.storage.log_directory import LogDirectory
        LogDirectory.delete_logs = lambda self, tps: os.kill(os.getpid(), signal.SIGKILL)
        streamlog.open(sys.argv[1]).delete_topic("gone")
    """, db_path)
    assert killed.returncode == -9, killed.stderr
    ghost = os.path.join(db_path, "gone-0")
    assert os.path.isdir(ghost)
    # A creation that stopped before making the directory of partition 1 of t (here: that
    # directory vanished).
    shutil.rmtree(os.path.join(db_path, "t-1"))
    with streamlog.open(db_path) as db:
        assert not os.path.exists(ghost)  # its partition.metadata names the deleted topic
        assert db.topics() == ["t"]
        assert os.path.isdir(os.path.join(db_path, "t-1"))
        p0, p1 = db.describe_topic("t").partitions
        assert (p0.log_start_offset, p0.high_watermark) == (0, 1)
        assert (p1.log_start_offset, p1.high_watermark) == (0, 0)
        assert db.producer().send("t", value=b"new", partition=1).result().offset == 0
    with streamlog.open(db_path, readonly=True) as ro:
        assert ro.describe_topic("t").partitions[1].high_watermark == 1


@pytest.mark.parametrize("key, value", [("retention.ms", 2**70), ("retention.bytes", 2**64),
                                        ("segment.ms", 2**63), ("retention.bytes", -2**63 - 1)])
def test_configs_outside_int64_are_refused_before_anything_is_written(db_path, key, value):
    """Kafka's time and size configs are LONGs (ConfigDef.Type.LONG): past int64 they failed
    deep inside msgpack with OverflowError, after validation had let them through."""
    with streamlog.open(db_path) as db:
        with pytest.raises(streamlog.InvalidConfigurationError, match=key):
            db.create_topic("t", config={key: value})
        db.create_topic("u")
        with pytest.raises(streamlog.InvalidConfigurationError, match=key):
            db.alter_topic_config("u", {key: value})
        assert db.topics() == ["u"]


def test_the_largest_int64_config_round_trips_through_the_metadata_log(db_path):
    with streamlog.open(db_path) as db:
        db.create_topic("t", config={"retention.ms": 2**63 - 1, "segment.ms": 2**63 - 1})
    with streamlog.open(db_path) as db:
        assert db.describe_topic("t").overrides == {"retention.ms": 2**63 - 1,
                                                    "segment.ms": 2**63 - 1}
