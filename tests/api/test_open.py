"""streamlog.open: paths, temporary databases, the writer lock, read-only opens, sharing."""
import os
import subprocess
import sys
import textwrap

import pytest

import streamlog
from streamlog import TopicPartition

from support.child import run_py


def test_open_creates_the_directory_and_reopens_it(db_path):
    with streamlog.open(db_path) as db:
        db.create_topic("t", partitions=2, config={"retention.ms": 1234})
        db.producer().send("t", value=b"x", partition=1).result()
    assert os.path.isdir(db_path)
    with streamlog.open(db_path) as db:
        d = db.describe_topic("t")
        assert len(d.partitions) == 2 and d.overrides == {"retention.ms": 1234}
        assert d.partitions[1].high_watermark == 1


@pytest.mark.parametrize("path", [None, ":memory:"])
def test_temporary_database_is_removed_on_close(path):
    db = streamlog.open(path)
    where = db.path
    db.create_topic("t")
    assert os.path.isdir(where)
    db.close()
    assert not os.path.exists(where)


def test_context_manager_closes(db_path):
    with streamlog.open(db_path) as db:
        pass
    assert db.closed
    with pytest.raises(streamlog.StreamlogError):
        db.topics()


def test_second_writer_process_is_refused_naming_the_holder(db_path):
    with streamlog.open(db_path):
        result = run_py("""
            import sys, time, streamlog
            started = time.monotonic()
            try:
                streamlog.open(sys.argv[1])
            except streamlog.DatabaseLockedError as exc:
                print("REFUSED", exc)
            print(f"after {time.monotonic() - started:.3f} s")
        """, db_path)
    assert result.stdout.startswith("REFUSED"), result.stderr
    refused, after = result.stdout.splitlines()
    assert f"process {os.getpid()}" in refused and "readonly=True" in refused
    # At once: a lock taken with a blocking flock would wait for the holder (here, forever).
    assert float(after.split()[1]) < 5, after


def test_lock_is_released_on_close_and_on_kill(db_path):
    with streamlog.open(db_path):
        pass
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time, streamlog
        db = streamlog.open(sys.argv[1]); print("open", flush=True); time.sleep(60)
    """), db_path], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "open"
    with pytest.raises(streamlog.DatabaseLockedError):
        streamlog.open(db_path)
    holder.kill()
    holder.wait()
    holder.stdout.close()
    with streamlog.open(db_path):  # the kernel dropped the dead writer's lock
        pass


def test_readonly_open_from_another_process_reads_while_the_writer_holds_the_lock(db_path):
    with streamlog.open(db_path) as db:
        db.create_topic("t")
        db.producer().send("t", value=b"from the writer").result()
        result = run_py("""
            import sys, streamlog
            with streamlog.open(sys.argv[1], readonly=True) as ro:
                c = ro.consumer(auto_offset_reset="earliest")
                c.assign([streamlog.TopicPartition("t", 0)])
                print([r.value for r in c.poll(timeout=5)])
                try:
                    ro.create_topic("nope")
                except streamlog.ReadOnlyError:
                    print("READONLY")
        """, db_path)
    assert result.stdout.splitlines() == ["[b'from the writer']", "READONLY"], result.stderr


def test_same_path_twice_in_one_process_shares_one_broker(db_path):
    a = streamlog.open(db_path)
    b = streamlog.open(db_path)
    a.create_topic("shared")
    assert "shared" in b.topics()
    a.close()
    b.producer().send("shared", value=b"still open").result()  # b keeps the broker alive
    b.close()
    with streamlog.open(db_path) as c:
        assert c.describe_topic("shared").partitions[0].high_watermark == 1


def test_reopening_with_a_different_config_while_open_is_refused(db_path):
    with streamlog.open(db_path, config={"num.partitions": 3}):
        with pytest.raises(streamlog.InvalidConfigurationError, match="different config"):
            streamlog.open(db_path, config={"num.partitions": 4})


def test_bad_database_config_is_refused(db_path):
    with pytest.raises(streamlog.InvalidConfigurationError, match="unknown database config"):
        streamlog.open(db_path, config={"no.such.setting": 1})
    assert not os.path.exists(db_path)  # refused before anything was written


@pytest.mark.parametrize("name", ["remote.storage.enable", "remote.log.copy.disable",
                                  "remote.log.delete.on.disable",
                                  "leader.replication.throttled.replicas",
                                  "follower.replication.throttled.replicas"])
def test_a_topic_config_no_broker_config_defaults_is_no_database_config(db_path, name):
    # Kafka's LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS: no broker config stands for these,
    # so the database, whose topic-config settings are Kafka's broker defaults, has none.
    with pytest.raises(streamlog.InvalidConfigurationError, match="unknown database config"):
        streamlog.open(db_path, config={name: "false" if "remote" in name else "*"})
    assert not os.path.exists(db_path)


def test_max_open_files_below_one_is_refused_and_minus_one_is_unbounded(db_path):
    with pytest.raises(streamlog.InvalidConfigurationError,
                       match="max.open.files must be -1 .unbounded. or at least 1, not 0"):
        streamlog.open(db_path, config={"max.open.files": 0})
    with streamlog.open(db_path, config={"max.open.files": -1}) as db:
        assert db._broker.logs.open_files.max_open_files == -1


def test_fetch_max_bytes_below_kafkas_minimum_is_refused(db_path):
    # Kafka's ServerConfigs: fetch.max.bytes is at least 1024 (default 55 MiB).
    with pytest.raises(streamlog.InvalidConfigurationError, match="fetch.max.bytes must be >= 1024"):
        streamlog.open(db_path, config={"fetch.max.bytes": 1023})
    with streamlog.open(db_path, config={"fetch.max.bytes": 1024}) as db:
        assert db._broker.config.fetch_max_bytes == 1024
    with streamlog.open(db_path) as db:
        assert db._broker.config.fetch_max_bytes == 55 * 1024 * 1024


def test_readonly_open_of_a_non_database_is_a_clear_error(tmp_path):
    with pytest.raises(streamlog.StreamlogError, match="not a streamlog database"):
        streamlog.open(str(tmp_path), readonly=True)


def test_database_defaults_apply_to_new_topics(db_path):
    with streamlog.open(db_path, config={"segment.bytes": 4096, "num.partitions": 2}) as db:
        db.create_topic("t", partitions=None)
        d = db.describe_topic("t")
        assert d.config["segment.bytes"] == 4096 and len(d.partitions) == 2


def test_public_api_is_exactly_all():
    for name in streamlog.__all__:
        assert hasattr(streamlog, name), name
    assert {"open", "TopicPartition", "Record", "RecordMetadata", "DatabaseLockedError",
            "OffsetOutOfRangeError", "RecordTooLargeError"} <= set(streamlog.__all__)
    assert TopicPartition("a", 1) == ("a", 1)


def test_closing_lets_go_of_the_logs_without_waiting_for_the_garbage_collector(tmp_path):
    """The broker and its threads refer to each other, so a closed database is freed by the
    cyclic collector; its logs (tens of objects per partition) are let go at close instead,
    or a later full collection walks every one of them, in whatever the program does next."""
    import gc
    import weakref
    db = streamlog.open(str(tmp_path / "db"))
    db.create_topic("t", partitions=3)
    logs = [weakref.ref(db._broker.partition_log(streamlog.TopicPartition("t", p)))
            for p in range(3)]
    gc.disable()
    try:
        db.close()
        del db
        assert [ref() for ref in logs] == [None, None, None]
    finally:
        gc.enable()
