"""streamlog.repair: a database whose metadata log is damaged or lost gets its topics back.

The rules (docs/RELIABILITY.md, "Repair"; SQLite's `.recover` is the model): topics come back
from their partition directories -- names and partition counts from the directory names, ids
from Kafka's `partition.metadata`, configs from `topic.json`; every record is kept byte for
byte; nothing is deleted (the old metadata log is renamed aside); a directory that cannot be
proven to be the library's is reported, never adopted.
"""
import os

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.storage import files, partition_metadata
from streamlog.storage.keyed_log import encode_changes

from support.child import run_py

METADATA = "__cluster_metadata-0"


def tree(root):
    """Every file under root, as {relative path: bytes}."""
    out = {}
    for parent, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def partition_files(files_by_path):
    """The files of partition directories (the root's checkpoints name the metadata log too)."""
    return {p: b for p, b in files_by_path.items()
            if os.sep in p and not p.startswith(METADATA)}


def records(db, topic):
    """{partition: [(offset, key, value)]} of every record in topic."""
    description = db.describe_topic(topic)
    consumer = db.consumer(auto_offset_reset="earliest")
    tps = [TopicPartition(topic, p.partition) for p in description.partitions]
    consumer.assign(tps)
    want = sum(p.high_watermark - p.log_start_offset for p in description.partitions)
    out = {tp.partition: [] for tp in tps}
    got = 0
    while got < want:
        batch = consumer.poll(timeout=5.0)
        assert batch, f"stopped after {got} of {want} records"
        for r in batch:
            out[r.partition].append((r.offset, r.key, r.value))
        got += len(batch)
    consumer.close()
    return out


def make_database(root):
    """Three topics with records, configs, a deleted topic and a group's committed offsets;
    returns what a reader saw of each topic, and the group's offsets."""
    with streamlog.open(root) as db:
        db.create_topic("orders", partitions=3, config={"retention.ms": 86_400_000,
                                                        "segment.bytes": 4096})
        db.create_topic("gone", partitions=1)
        db.create_topic("audit", partitions=1, config={"cleanup.policy": "compact"})
        db.delete_topic("gone")
        db.create_topic("late", partitions=2)
        producer = db.producer(acks="all")
        for i in range(300):
            producer.send("orders", key=b"k%d" % (i % 7), value=b"order-%04d" % i)
            producer.send("late", value=b"late-%d" % i)
        producer.send("audit", key=b"a", value=b"one").result()
        producer.flush()
        consumer = db.consumer(group_id="billing", auto_offset_reset="earliest")
        consumer.assign([TopicPartition("orders", 1)])
        consumer.poll(timeout=5.0)
        consumer.commit()
        committed = consumer.committed([TopicPartition("orders", 1)])
        consumer.close()
        seen = {t: records(db, t) for t in ("orders", "audit", "late")}
        configs = {t: db.describe_topic(t).overrides for t in ("orders", "audit", "late")}
        ids = {t: db.describe_topic(t).topic_id for t in ("orders", "audit", "late")}
    return seen, configs, ids, committed


def assert_as_before(root, seen, configs, ids, committed):
    with streamlog.open(root) as db:
        assert sorted(db.topics()) == sorted(seen)
        for topic in seen:
            assert records(db, topic) == seen[topic]
            assert db.describe_topic(topic).overrides == configs[topic]
            assert db.describe_topic(topic).topic_id == ids[topic]
        consumer = db.consumer(group_id="billing")
        assert consumer.committed([TopicPartition("orders", 1)]) == committed
        consumer.close()
        assert db.unexplained_paths == []


def test_a_lost_metadata_log_is_rebuilt_from_the_partition_directories(tmp_path):
    root = str(tmp_path / "db")
    expected = make_database(root)
    os.rename(os.path.join(root, METADATA), str(tmp_path / "lost"))
    with pytest.raises(streamlog.NotADatabaseError, match="streamlog repair"):
        streamlog.open(root)
    before = tree(root)

    report = streamlog.repair(root)

    assert report.metadata_log == "missing"
    assert sorted(t.name for t in report.recovered) == [
        "__consumer_offsets", "audit", "late", "orders"]
    assert report.not_recovered == [] and report.backup is None
    assert partition_files(tree(root)) == partition_files(before)
    assert_as_before(root, *expected)


@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_damage_to_the_metadata_log_is_repaired_and_the_old_log_kept(tmp_path, stop):
    root = str(tmp_path / "db")
    expected = make_database(root)
    segment = os.path.join(root, METADATA, "00000000000000000000.log")
    with open(segment, "r+b") as f:
        data = bytearray(f.read())
        first_batch_end = 12 + int.from_bytes(data[8:12], "big")
        data[first_batch_end + 30] ^= 0xFF  # the second record's batch fails its CRC
        f.seek(0)
        f.write(data)
    damaged = tree(os.path.join(root, METADATA))
    if stop == "clean":
        # Nothing to recover after a clean stop: the replay meets the damage, opens refuse.
        with pytest.raises(streamlog.CorruptRecordError, match=METADATA):
            streamlog.open(root)
    else:
        # Recovery cuts the log after its last valid batch (Kafka's LogLoader): the topics
        # created later are forgotten, their directories kept and reported.
        os.unlink(os.path.join(root, files.CLEAN_SHUTDOWN_MARKER))
        with streamlog.open(root) as db:
            assert sorted(db.topics()) == ["orders"]
            assert len(db.unexplained_paths) == 2 + 1 + 50  # late, audit, __consumer_offsets

    report = streamlog.repair(root)

    assert sorted(t.name for t in report.recovered) == ["__consumer_offsets", "audit", "late"]
    if stop == "clean":
        assert report.metadata_log.startswith("damaged:") and "CRC" in report.metadata_log
        assert tree(report.backup) == damaged  # every byte of the old log kept
    assert_as_before(root, *expected)
    assert streamlog.repair(root).lines()[-1] == "nothing to repair"


def test_a_malformed_metadata_record_is_dropped_and_its_topic_recovered(tmp_path):
    root = str(tmp_path / "db")
    expected = make_database(root)
    with streamlog.open(root) as db:
        # A CRC-valid record that is not a topic record: every open refuses the database.
        db._broker.metadata._log.append(encode_changes([(b"orders", b"\xc1")], 1))
    with pytest.raises(streamlog.CorruptRecordError, match=METADATA):
        streamlog.open(root)

    report = streamlog.repair(root)

    assert len(report.malformed_records) == 1 and "b'orders'" in report.malformed_records[0]
    assert report.metadata_log == "intact"  # every batch is whole; one record is not a topic's
    assert report.recovered == []  # the record before the malformed one still names orders
    assert_as_before(root, *expected)


def test_the_rewritten_log_still_proves_deleted_topics_deleted(tmp_path):
    """Deleted topics are written to the new log as record + tombstone: a directory a stop
    left behind after deleting one is still removed by the next open, not kept as unknown."""
    root = str(tmp_path / "db")
    make_database(root)
    with streamlog.open(root) as db:
        (gone_id,) = db._broker.metadata.deleted_topic_ids
        db._broker.metadata._log.append(encode_changes([(b"x", b"\xc1")], 1))
    streamlog.repair(root)  # the malformed record makes it write a new log
    leftover = os.path.join(root, "gone-0")
    os.makedirs(leftover)
    partition_metadata.write(leftover, gone_id)
    with streamlog.open(root) as db:
        assert db._broker.metadata.deleted_topic_ids == {gone_id}
        assert db.unexplained_paths == [] and not os.path.exists(leftover)


def test_a_leftover_of_a_deleted_topic_is_reported_and_not_recovered(tmp_path):
    root = str(tmp_path / "db")
    make_database(root)
    with streamlog.open(root) as db:
        gone_id = list(db._broker.metadata.deleted_topic_ids)[0]
        db.create_topic("gone", partitions=1)  # the name again, with a new id
        new_id = db.describe_topic("gone").topic_id
    # A directory of the deleted incarnation, as a stop between tombstone and removal leaves it.
    leftover = os.path.join(root, "gone-1")
    os.makedirs(leftover)
    partition_metadata.write(leftover, gone_id)

    report = streamlog.repair(root, dry_run=True)

    assert [(p, "leftover of deleted topic 'gone'" in why) for p, why in report.not_recovered] \
        == [(leftover, True)]
    assert report.recovered == [] and new_id != gone_id


def test_a_folder_without_partition_metadata_is_reported_and_kept(tmp_path):
    root = str(tmp_path / "db")
    expected = make_database(root)
    folder = os.path.join(root, "orders-7")  # named like a partition of a real topic
    os.makedirs(folder)
    with open(os.path.join(folder, "notes.txt"), "wb") as f:
        f.write(b"mine")
    os.rename(os.path.join(root, METADATA), str(tmp_path / "lost"))

    report = streamlog.repair(root)

    assert report.not_recovered == [(folder, "no partition.metadata: nothing proves the "
                                             "library made this directory")]
    orders = [t for t in report.recovered if t.name == "orders"][0]
    assert orders.partitions == 3  # the folder did not grow the topic
    with open(os.path.join(folder, "notes.txt"), "rb") as f:
        assert f.read() == b"mine"
    os.rename(folder, str(tmp_path / "moved"))
    assert_as_before(root, *expected)


def test_partitions_past_the_log_grow_the_topic_and_a_gap_is_created_empty(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", partitions=1)
        cut_at = os.path.getsize(os.path.join(root, METADATA, "00000000000000000000.log"))
        db.add_partitions("t", 4)
        producer = db.producer(acks="all")
        for p in (0, 3):
            producer.send("t", value=b"p%d" % p, partition=p).result()
    os.truncate(os.path.join(root, METADATA, "00000000000000000000.log"), cut_at)
    os.rename(os.path.join(root, "t-2"), str(tmp_path / "t-2-away"))

    report = streamlog.repair(root)

    (t,) = report.recovered
    assert (t.name, t.grown_from, t.partitions) == ("t", 1, 4)
    with streamlog.open(root) as db:
        assert len(db.describe_topic("t").partitions) == 4
        assert records(db, "t") == {0: [(0, None, b"p0")], 1: [], 2: [], 3: [(0, None, b"p3")]}


def test_a_dry_run_changes_nothing(tmp_path):
    root = str(tmp_path / "db")
    make_database(root)
    os.rename(os.path.join(root, METADATA), str(tmp_path / "lost"))
    before = tree(root)
    report = streamlog.repair(root, dry_run=True)
    assert len(report.recovered) == 4 and report.lines()[-1] == "dry run: nothing was changed"
    assert tree(root) == before


@pytest.mark.parametrize("contents", [{}, {"notes.txt": "mine"}])
def test_repair_refuses_a_folder_with_no_metadata_log_and_no_partition(tmp_path, contents):
    """An empty folder, or somebody's folder, was "repaired": a LOCK file, checkpoints and a
    new metadata log were written into it ("wrote a new metadata log: 0 topic(s)"), making
    it a database. With neither a metadata log nor a partition directory there is nothing
    to repair, and nothing is written."""
    root = tmp_path / "folder"
    root.mkdir()
    for name, text in contents.items():
        (root / name).write_text(text)
    with pytest.raises(streamlog.NotADatabaseError, match="nothing to repair"):
        streamlog.repair(str(root))
    assert sorted(os.listdir(root)) == sorted(contents)


def test_repair_refuses_a_database_open_for_writing(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root):
        with pytest.raises(streamlog.DatabaseLockedError):
            streamlog.repair(root)


def test_topic_json_follows_config_changes_and_a_crash_cannot_leave_it_stale(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", partitions=2)
        db.alter_topic_config("t", {"retention.ms": 5000})
        topic_id = db.describe_topic("t").topic_id
    for p in (0, 1):
        doc = partition_metadata.read_topic_config(os.path.join(root, f"t-{p}"))
        assert doc["config"] == {"retention.ms": 5000} and doc["topic_id"] == topic_id
    # As a kill between the metadata record and the rewrite leaves it: stale, and no marker.
    stale = os.path.join(root, "t-1", files.TOPIC_CONFIG_FILE)
    with open(stale, "w") as f:
        f.write('{"version": 0}\n')
    os.unlink(os.path.join(root, files.CLEAN_SHUTDOWN_MARKER))
    streamlog.open(root).close()
    assert partition_metadata.read_topic_config(os.path.join(root, "t-1"))["config"] == \
        {"retention.ms": 5000}


def test_a_clean_open_writes_a_missing_topic_json_and_reads_no_present_one(tmp_path):
    """After a clean stop the open trusts an existing topic.json, and learns that it exists
    from the partition's own listing (no stat each); one that is missing (a directory made
    before the file existed) is written."""
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", partitions=2)
        topic_id = db.describe_topic("t").topic_id
    os.unlink(os.path.join(root, "t-0", files.TOPIC_CONFIG_FILE))
    kept = os.path.join(root, "t-1", files.TOPIC_CONFIG_FILE)
    before = os.stat(kept).st_mtime_ns
    streamlog.open(root).close()
    assert partition_metadata.read_topic_config(os.path.join(root, "t-0"))["topic_id"] == topic_id
    assert os.stat(kept).st_mtime_ns == before


KILLED_WRITER = """
    import os, signal, sys, streamlog
    db = streamlog.open(sys.argv[1])
    db.create_topic("t", partitions=2, config={"segment.bytes": 2048})
    producer = db.producer(acks="all")
    for i in range(200):
        producer.send("t", value=b"v%04d" % i, partition=i % 2).result()
    print("acked", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_repair_after_kill_9_leaves_the_partitions_to_recovery(tmp_path):
    """Repair opens only the metadata log: it must not mark a crashed database clean, or the
    next open would skip the partitions' recovery."""
    root = str(tmp_path / "db")
    child = run_py(KILLED_WRITER, root)
    assert child.returncode == -9 and child.stdout == "acked\n", child.stderr
    os.rename(os.path.join(root, METADATA), str(tmp_path / "lost"))
    streamlog.repair(root)
    assert not os.path.exists(os.path.join(root, files.CLEAN_SHUTDOWN_MARKER))
    with streamlog.open(root) as db:
        got = records(db, "t")
    assert got == {p: [(i // 2, None, b"v%04d" % i) for i in range(p, 200, 2)] for p in (0, 1)}
