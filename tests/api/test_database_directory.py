"""What open() accepts as a database, and what the library may delete under it.

The rule (docs/API.md, "What open() refuses"): the library deletes only what it can prove it made
and meant to delete. A directory the metadata log cannot explain is kept and reported; a path
that is not a database is refused before anything is written; every name a topic may have can
be created, deleted and created again.
"""
import os
import stat

import pytest

import streamlog
from streamlog.storage import files, partition_metadata
from streamlog.storage.verify import verify_directory

from support.child import run_py

LONGEST_NAME = "t" * files.MAX_TOPIC_NAME_LENGTH


def users_folder(parent, name, content=b"my notes\n"):
    path = os.path.join(parent, name)
    os.makedirs(path)
    with open(os.path.join(path, "notes.txt"), "wb") as f:
        f.write(content)
    return path


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def values(db, topic):
    consumer = db.consumer(auto_offset_reset="earliest")
    tps = [streamlog.TopicPartition(topic, p.partition)
           for p in db.describe_topic(topic).partitions]
    consumer.assign(tps)
    ends = {tp.partition: p.high_watermark
            for tp, p in zip(tps, db.describe_topic(topic).partitions, strict=True)}
    out = []
    while sum(ends.values()) > len(out):
        batch = consumer.poll(timeout=5.0)
        assert batch, "the records the log end promises did not come"
        out.extend(r.value for r in batch)
    consumer.close()
    return sorted(out)


# --- a directory that is not a database ------------------------------------------


def test_a_users_folder_named_like_a_partition_survives_open_of_its_parent(tmp_path):
    """The reported case: `mkdir -p d/release-2 && echo x > d/release-2/notes.txt`, then
    streamlog.open("d").close() deleted d/release-2. Now d is refused, and nothing is touched."""
    root = str(tmp_path / "d")
    folder = users_folder(root, "release-2")
    with pytest.raises(streamlog.NotADatabaseError, match="release-2") as refused:
        streamlog.open(root)
    assert root in str(refused.value)
    assert read_file(os.path.join(folder, "notes.txt")) == b"my notes\n"
    assert sorted(os.listdir(root)) == ["release-2"]  # not even a LOCK file was made


@pytest.mark.parametrize("readonly", [False, True])
def test_a_regular_file_is_not_a_database(tmp_path, readonly):
    path = tmp_path / "hostname"
    path.write_bytes(b"box\n")
    with pytest.raises(streamlog.NotADatabaseError, match="is a file") as refused:
        streamlog.open(str(path), readonly=readonly)
    assert str(path) in str(refused.value)
    assert path.read_bytes() == b"box\n"


def test_a_database_whose_metadata_log_is_lost_is_refused_and_its_partitions_kept(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("events", partitions=2)
        db.producer(acks="all").send("events", value=b"precious", partition=1).result()
    before = read_file(os.path.join(root, "events-1", "00000000000000000000.log"))
    metadata_dir = os.path.join(root, "__cluster_metadata-0")
    for name in os.listdir(metadata_dir):
        os.unlink(os.path.join(metadata_dir, name))
    os.rmdir(metadata_dir)
    with pytest.raises(streamlog.NotADatabaseError, match="no __cluster_metadata-0"):
        streamlog.open(root)
    assert read_file(os.path.join(root, "events-1", "00000000000000000000.log")) == before


def test_an_empty_directory_and_one_left_by_an_interrupted_first_open_are_adopted(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with streamlog.open(str(empty)) as db:
        db.create_topic("t")
    first_open_stopped = tmp_path / "stopped"
    first_open_stopped.mkdir()
    (first_open_stopped / files.LOCK_FILE).write_bytes(b"4242\n")
    with streamlog.open(str(first_open_stopped)) as db:
        db.create_topic("t")
        assert db.topics() == ["t"]


# --- inside a database: keep what the metadata log cannot explain ---------------


def test_a_folder_named_like_a_partition_inside_a_database_is_kept_and_reported(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("release")
    stranger = users_folder(root, "release-2")   # topic exists, partition 2 does not
    other = users_folder(root, "backup-0")       # no such topic at all
    for _ in range(2):
        with streamlog.open(root) as db:
            assert db.topics() == ["release"]
            assert sorted(db.unexplained_paths) == sorted([other, stranger])
    assert read_file(os.path.join(stranger, "notes.txt")) == b"my notes\n"
    assert read_file(os.path.join(other, "notes.txt")) == b"my notes\n"
    report = verify_directory(root)  # checks the two real partitions, notes the folders
    assert report.ok and report.partitions == 2
    assert sum("not a partition" in note for note in report.notes) == 2


def test_creating_a_topic_over_a_folder_the_library_did_not_make_is_refused(tmp_path):
    root = str(tmp_path / "db")
    streamlog.open(root).close()
    folder = users_folder(root, "release-2")
    with streamlog.open(root) as db:
        db.create_topic("release", partitions=2)
        with pytest.raises(streamlog.KafkaStorageError, match="release-2 already exists"):
            db.add_partitions("release", 3)
        assert len(db.describe_topic("release").partitions) == 2
        db.create_topic("other")  # unaffected: only a clash is refused
    os.rename(folder, folder + ".moved")
    os.makedirs(os.path.join(root, "clash-0"))
    with streamlog.open(root) as db:
        with pytest.raises(streamlog.KafkaStorageError, match="clash-0 already exists"):
            db.create_topic("clash")
        assert "clash" not in db.topics()  # refused before its metadata record
    with streamlog.open(root) as db:
        assert "clash" not in db.topics()
        assert db.add_partitions("release", 3).partitions[2].high_watermark == 0


def test_only_delete_directories_the_library_names_are_removed_at_open(tmp_path):
    root = str(tmp_path / "db")
    streamlog.open(root).close()
    ours = os.path.join(root, files.delete_dir_name("gone", 0, "0123456789abcdef" * 2))
    os.makedirs(ours)
    theirs = users_folder(root, "staging-delete")
    with streamlog.open(root):
        pass
    assert not os.path.exists(ours)
    assert read_file(os.path.join(theirs, "notes.txt")) == b"my notes\n"


def test_a_users_file_in_a_deleted_partitions_directory_is_kept_and_reported(tmp_path, caplog):
    """delete_topic removed the whole partition directory, a user's notes.txt in it too. The
    library's own files go; the directory, renamed for deletion, stays with what it did not
    make, and each open says so until the user has moved it; then the open removes it."""
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", partitions=1)
        db.producer(acks="all").send("t", value=b"v").result()
        notes = os.path.join(root, "t-0", "notes.txt")
        with open(notes, "wb") as f:
            f.write(b"my notes\n")
        with caplog.at_level("WARNING", logger="streamlog.storage"):
            db.delete_topic("t")
        assert db.topics() == []
        db.create_topic("t", partitions=1)   # the name is free again
        assert values(db, "t") == []
    (kept,) = [name for name in os.listdir(root) if files.is_delete_dir_name(name)]
    kept = os.path.join(root, kept)
    assert os.listdir(kept) == ["notes.txt"]   # the segment files, indexes and metadata went
    assert read_file(os.path.join(kept, "notes.txt")) == b"my notes\n"
    assert f"kept {kept}" in caplog.text and "notes.txt" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamlog.storage"):
        streamlog.open(root).close()
    assert f"kept {kept}" in caplog.text
    os.unlink(os.path.join(kept, "notes.txt"))
    streamlog.open(root).close()
    assert not os.path.exists(kept)


def test_a_users_files_named_like_offsets_in_a_partition_directory_survive_an_open(tmp_path):
    """Only the temporary names the library makes are leftovers it removes: a segment
    file's or snapshot's suffix, then `.deleted`, `.cleaned` or `.tmp`. A user's file that
    merely starts with 20 digits is kept, and a `.cleaned` of theirs does not undo a swap."""
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t", partitions=1)
        db.producer(acks="all").send("t", value=b"v").result()
    theirs = ["00000000000000000000.txt.tmp", "00000000000000000000.backup.deleted",
              "00000000000000000042.notes.cleaned"]
    for name in theirs:
        with open(os.path.join(root, "t-0", name), "wb") as f:
            f.write(b"my notes\n")
    with streamlog.open(root) as db:
        assert values(db, "t") == [b"v"]
    for name in theirs:
        assert read_file(os.path.join(root, "t-0", name)) == b"my notes\n"


def test_a_directory_of_another_topic_id_is_not_opened_as_this_topic(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t")
        db.producer().send("t", value=b"v").result()
    partition_metadata.write(os.path.join(root, "t-0"), "ab" * 16)
    with pytest.raises(streamlog.InconsistentTopicIdError, match="t-0"):
        streamlog.open(root)
    assert os.path.getsize(os.path.join(root, "t-0", "00000000000000000000.log")) > 0


def test_partition_directories_carry_kafkas_partition_metadata_file(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        topic_id = db.create_topic("t", partitions=2).topic_id
    text = read_file(os.path.join(root, "t-1", files.PARTITION_METADATA_FILE)).decode()
    version, kafka_id = text.splitlines()
    assert version == "version: 0"
    # Kafka prints a Uuid as 22 characters of URL-safe base64 without padding.
    assert kafka_id == "topic_id: " + partition_metadata.kafka_uuid(topic_id)
    assert len(kafka_id.split(": ")[1]) == 22
    os.unlink(os.path.join(root, "t-0", files.PARTITION_METADATA_FILE))  # as an older version
    with streamlog.open(root):
        pass
    assert partition_metadata.read(os.path.join(root, "t-0")) == topic_id


# --- names: every accepted name is creatable, deletable and re-creatable -----------


def test_the_longest_topic_name_is_created_deleted_and_created_again(tmp_path):
    """Deletion renamed `<dir>` to `<dir>.<uuid>-delete`, past the 255-byte limit for names
    of about 214+ characters, and every later open then failed retrying it."""
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic(LONGEST_NAME, partitions=12)
        db.producer(acks="all").send(LONGEST_NAME, value=b"first", partition=11).result()
        db.delete_topic(LONGEST_NAME)
        db.create_topic(LONGEST_NAME, partitions=12)
        db.producer(acks="all").send(LONGEST_NAME, value=b"second", partition=11).result()
    with streamlog.open(root) as db:
        assert values(db, LONGEST_NAME) == [b"second"]
        db.delete_topic(LONGEST_NAME)
    with streamlog.open(root) as db:
        assert db.topics() == []
    assert sorted(os.listdir(root)) == sorted(
        ["__cluster_metadata-0", files.LOCK_FILE, files.CLEAN_SHUTDOWN_MARKER,
         files.RECOVERY_POINT_CHECKPOINT, files.LOG_START_OFFSET_CHECKPOINT])


def test_the_highest_partition_number_of_the_longest_name_fits_its_delete_name():
    highest = 10_000 - 1  # broker.metadata.MAX_PARTITIONS partitions: 0..9999
    name = files.delete_dir_name(LONGEST_NAME, highest, "f" * 32)
    assert len(name.encode()) <= files.MAX_FILE_NAME_BYTES
    assert files.is_delete_dir_name(name)
    assert len(files.partition_dir_name(LONGEST_NAME, highest).encode()) <= 255


def test_the_highest_partition_of_the_longest_name_is_made_deleted_and_made_again(tmp_path):
    """Through the log directory: the public API would need all 10,000 partitions open."""
    from streamlog.storage.log_config import LogConfig
    from streamlog.storage.log_directory import LogDirectory
    from streamlog.storage.record_batch import build_batch
    tp = streamlog.TopicPartition(LONGEST_NAME, 9_999)
    logs = LogDirectory(str(tmp_path))
    for round_no in range(2):
        log = logs.open_log(tp, LogConfig(), topic_id=f"{round_no:032x}")
        log.append(build_batch([b"v"], timestamp=1))
        logs.delete_log(tp)
        assert os.listdir(str(tmp_path)) == []
    logs.close()


def test_a_failed_directory_removal_never_stops_delete_or_open(tmp_path, monkeypatch):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("doomed", partitions=2)
        db.producer(acks="all").send("doomed", value=b"v", partition=1).result()
    real_rename = os.rename

    def refusing_rename(src, dst, *args, **kwargs):
        if dst.endswith(files.DELETE_DIR_SUFFIX):
            raise OSError(36, "File name too long", dst)
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", refusing_rename)
    with streamlog.open(root) as db:
        db.delete_topic("doomed")                 # the tombstone is the commit point
        assert db.topics() == []
    with streamlog.open(root) as db:              # the retry at open fails again: still opens
        assert db.topics() == []
    assert os.path.isdir(os.path.join(root, "doomed-1"))
    monkeypatch.setattr(os, "rename", real_rename)
    with streamlog.open(root) as db:              # and succeeds once it can
        db.create_topic("doomed")
        assert values(db, "doomed") == []
    assert not os.path.exists(os.path.join(root, "doomed-1"))


# --- a bad environment: typed errors naming the path, nothing acknowledged lost ---------


def make_database(root):
    with streamlog.open(root) as db:
        db.create_topic("t", partitions=2)
        producer = db.producer(acks="all")
        for i in range(20):
            producer.send("t", value=b"%d" % i, partition=i % 2).result()
    return sorted(b"%d" % i for i in range(20))


def assert_intact(root, acknowledged):
    with streamlog.open(root) as db:
        assert values(db, "t") == acknowledged
    assert verify_directory(root).ok


WRITABLE_OPEN = """
    import sys, streamlog
    try:
        streamlog.open(sys.argv[1]).close()
        print("OPENED")
    except streamlog.StreamlogError as exc:
        print(type(exc).__name__, exc)
"""

READ_ALL = """
    import sys, streamlog
    with streamlog.open(sys.argv[1], readonly=True) as db:
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([streamlog.TopicPartition("t", p) for p in (0, 1)])
        got = []
        while len(got) < int(sys.argv[2]):
            got.extend(r.value for r in consumer.poll(timeout=5.0))
        print(sorted(got))
"""


def test_a_database_without_write_permission_refuses_writing_and_serves_reading(tmp_path):
    root = str(tmp_path / "db")
    acknowledged = make_database(root)
    os.chmod(root, 0o555)
    try:
        refused = run_py(WRITABLE_OPEN, root, honour_permissions=True)
        assert refused.stdout.startswith("KafkaStorageError"), refused.stdout + refused.stderr
        assert root in refused.stdout and "read-only" in refused.stdout
        read = run_py(READ_ALL, root, str(len(acknowledged)), honour_permissions=True)
        assert read.stdout.strip() == repr(acknowledged), read.stderr
    finally:
        os.chmod(root, 0o755)
    assert_intact(root, acknowledged)


def test_a_database_without_read_permission_is_a_typed_error_both_ways(tmp_path):
    root = str(tmp_path / "db")
    acknowledged = make_database(root)
    os.chmod(root, 0)
    try:
        for readonly in (False, True):
            result = run_py("""
                import sys, streamlog
                try:
                    streamlog.open(sys.argv[1], readonly=sys.argv[2] == "True")
                except streamlog.StreamlogError as exc:
                    print(type(exc).__name__, exc)
            """, root, str(readonly), honour_permissions=True)
            assert result.stdout.startswith("KafkaStorageError"), result.stdout + result.stderr
            assert root in result.stdout and "permission" in result.stdout
    finally:
        os.chmod(root, 0o755)
    assert_intact(root, acknowledged)


def test_a_new_database_under_an_unwritable_parent_is_a_typed_error(tmp_path):
    parent = tmp_path / "locked"
    parent.mkdir()
    os.chmod(parent, stat.S_IRUSR | stat.S_IXUSR)
    try:
        result = run_py(WRITABLE_OPEN, str(parent / "db"), honour_permissions=True)
    finally:
        os.chmod(parent, 0o755)
    assert result.stdout.startswith("KafkaStorageError"), result.stdout + result.stderr
    assert str(parent / "db") in result.stdout
    assert os.listdir(parent) == []


@pytest.mark.parametrize("value", [b"\xc1", b"\x93\x01\x02\x03", b"\x81\xa1v\x01",
                                   b"\x85\xa2id\x01\xaapartitions\x01\xa6config\x80"
                                   b"\xaacreated_ms\x01\xa4name\xa1t"])
def test_a_crc_valid_malformed_metadata_record_is_corruption_named_on_open(tmp_path, value):
    """Such a record failed every open with msgpack's ValueError, a KeyError('id') or an
    AttributeError; now both opens say which log holds it."""
    from streamlog.storage.keyed_log import encode_changes
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("t")
        db._broker.metadata._log.append(encode_changes([(b"t", value)], 1))  # CRC-valid bytes
    for readonly in (False, True):
        with pytest.raises(streamlog.CorruptRecordError, match="__cluster_metadata-0"):
            streamlog.open(root, readonly=readonly)


@pytest.mark.parametrize("damage", ["segment deleted", "garbage after the first batch"])
def test_damage_to_the_metadata_log_never_deletes_partition_directories(tmp_path, damage):
    """A metadata log cut short forgets the topics created after the cut. Their directories
    were then taken for deletion leftovers and removed, __consumer_offsets included; now
    nothing proves them deleted, so every one is kept, byte for byte, and reported."""
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        for name in ("a", "b", "c"):
            db.create_topic(name, partitions=2)
            db.producer(acks="all").send_batch(name, [b"%s-%d" % (name.encode(), i)
                                                      for i in range(10)]).result()
    before = {name: read_file(os.path.join(root, name, "00000000000000000000.log"))
              for name in os.listdir(root) if name[:1] in "abc"}
    metadata_log = os.path.join(root, "__cluster_metadata-0", "00000000000000000000.log")
    if damage == "segment deleted":
        os.unlink(metadata_log)
    else:
        with open(metadata_log, "r+b") as f:
            data = f.read()
            first_batch_end = 12 + int.from_bytes(data[8:12], "big")
            f.seek(first_batch_end)
            f.write(b"\xff" * (len(data) - first_batch_end))
    for _ in range(2):
        with streamlog.open(root) as db:
            forgotten = {os.path.basename(p) for p in db.unexplained_paths}
            assert forgotten == set(before) - {f"{t}-{p}" for t in db.topics() for p in (0, 1)}
    assert {name: read_file(os.path.join(root, name, "00000000000000000000.log"))
            for name in before} == before
