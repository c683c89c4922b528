"""OffsetStore: Kafka's partitioning of __consumer_offsets, commits, tombstones, replay."""
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlog.broker.broker import Broker
from streamlog.coordinator.java_order import java_string_hash
from streamlog.coordinator.offsets import (OFFSETS_TOPIC, CommittedOffset, OffsetStore,
                                           partition_for)
from streamlog.structs import OffsetAndMetadata, TopicPartition

# Values of Java's "...".hashCode(), printed by a JVM (OpenJDK 17).
JAVA_HASHES = [
    ("", 0),
    ("a", 97),
    ("abc", 96354),
    ("Aa", 2112),
    ("BB", 2112),
    ("hello", 99162322),
    ("consumer-group", -1738392088),
    ("polygenelubricants", -2147483648),      # Integer.MIN_VALUE
    ("\u00e9", 233),                          # one UTF-16 unit
    ("\U0001F600", 1772899),                  # a surrogate pair: 0xD83D * 31 + 0xDE00
]


@pytest.mark.parametrize("text,expected", JAVA_HASHES)
def test_java_string_hash_matches_the_jvm(text, expected):
    assert java_string_hash(text) == expected & 0xFFFFFFFF   # unsigned: the int's 32 bits


def test_partition_for_is_kafkas_abs_hash_mod_n():
    assert partition_for("abc", 50) == 96354 % 50
    assert partition_for("consumer-group", 50) == 1738392088 % 50
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 (Math.abs would stay negative).
    assert partition_for("polygenelubricants", 50) == 0


def reference_partition_for(text, partitions):
    """Kafka's Utils.abs(text.hashCode()) % partitions, spelled out as the JDK does it:
    String.hashCode is h = 31 * h + c over the UTF-16 code units in int arithmetic, and
    Utils.abs(n) is (n == Integer.MIN_VALUE) ? 0 : Math.abs(n)."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) % (1 << 32)
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


# Any text, and text of non-BMP characters (two UTF-16 units each) and lone surrogates
# (one unit each, as a Java String holds them), which any text rarely draws.
ids = st.text(max_size=80) | st.text(st.characters(min_codepoint=0x10000) | st.characters(
    min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=20)


@given(ids, st.integers(1, 1000))
def test_partition_for_is_the_jdks_hash_code_and_kafkas_abs(text, partitions):
    assert partition_for(text, partitions) == reference_partition_for(text, partitions)


def test_partition_for_integer_min_value_hashes_and_long_ids():
    # Strings whose hashCode is Integer.MIN_VALUE (found by the reference, checked by it):
    # "polygenelubricants" and the same followed by "\0"s, since 31 * MIN_VALUE wraps to it.
    for text in ("polygenelubricants", "polygenelubricants\0", "polygenelubricants\0\0"):
        assert reference_partition_for(text, 7) == 0 == partition_for(text, 7)
    long_id = "g\U0001F600" * 20_000      # longer than any id met so far: the powers grow
    assert partition_for(long_id, 50) == reference_partition_for(long_id, 50)


@pytest.fixture
def broker(tmp_path):
    b = Broker(str(tmp_path / "db"), config={"offsets.topic.num.partitions": 5})
    yield b
    b.close()


TP = TopicPartition("t", 0)


def test_the_topic_is_made_on_first_write_with_the_configured_partitions(broker):
    broker.create_topic("t", 2)
    store = OffsetStore(broker)
    assert OFFSETS_TOPIC not in broker.topics()
    store.commit("g", {TP: OffsetAndMetadata(5, "m")}, now_ms=1000)
    info = broker.topic(OFFSETS_TOPIC)
    assert info.partitions == 5 and info.internal
    assert info.config.to_dict()["cleanup.policy"] == "compact"
    assert store.committed("g") == {TP: CommittedOffset(5, "m", 1000)}


def test_records_go_to_the_groups_partition_with_msgpack_keys(broker):
    broker.create_topic("t", 2)
    store = OffsetStore(broker)
    store.commit("abc", {TP: OffsetAndMetadata(7)}, now_ms=42)
    store.commit("abc", {TP: OffsetAndMetadata(8, "n", 3)}, now_ms=43)
    tp = TopicPartition(OFFSETS_TOPIC, partition_for("abc", 5))
    batches = broker.partition_log(tp).read(0, 1 << 20).batches
    rows = [(msgpack.unpackb(key), msgpack.unpackb(value)) for batch in batches
            for (_offset, _ts, key, value) in batch.tuples()[0]]
    # Value version 2: the committed leader epoch last (-1: none).
    assert rows == [([1, "abc", "t", 0], [2, 7, "", 42, -1]),
                    ([1, "abc", "t", 0], [2, 8, "n", 43, 3])]
    for other in range(5):
        if other != tp.partition:
            assert broker.partition_log(TopicPartition(OFFSETS_TOPIC, other)).log_end_offset == 0


def test_latest_commit_wins_and_tombstones_delete_across_reopen(tmp_path):
    path = str(tmp_path / "db")
    broker = Broker(path)
    broker.create_topic("t", 3)
    store = OffsetStore(broker)
    tps = [TopicPartition("t", p) for p in range(3)]
    store.commit("g", {tp: OffsetAndMetadata(1) for tp in tps}, 1)
    store.commit("g", {tps[0]: OffsetAndMetadata(9, "x")}, 2)
    store.commit("h", {tps[2]: OffsetAndMetadata(4)}, 3)
    members = [("m-1", None, "app", [tps[0], tps[2]]), ("m-2", "i-2", "app", [tps[1]])]
    store.write_group("g", ("consumer", 3, "range", "m-1", 5, 2, members), 5)
    # A version 1 group value (before members were recorded) still reads, with none.
    store._append("old", [(msgpack.packb([2, "old"]),
                           msgpack.packb([1, "consumer", 7, "range", "x", 5, 1]))], 5)
    store.delete("g", [tps[1]], 6)
    store.delete("h", [tps[2]], 7, group_record=True)
    expected = {tps[0]: CommittedOffset(9, "x", 2), tps[2]: CommittedOffset(1, "", 1)}
    assert store.committed("g") == expected
    assert store.known_groups() == {"g", "old"}
    broker.close()

    broker = Broker(path)
    try:
        reopened = OffsetStore(broker)
        assert reopened.committed("g") == expected
        assert reopened.committed("h") == {}
        assert reopened.groups["g"].generation == 3
        assert reopened.groups["g"].members == tuple(members)
        assert reopened.groups["old"].generation == 7 and reopened.groups["old"].members == ()
        assert reopened.known_groups() == {"g", "old"}
    finally:
        broker.close()


def test_a_read_only_store_follows_the_writer(tmp_path):
    path = str(tmp_path / "db")
    writer = Broker(path)
    try:
        writer.create_topic("t", 1)
        store = OffsetStore(writer)
        store.commit("g", {TP: OffsetAndMetadata(1)}, 1)
        reader_broker = Broker(path, readonly=True)
        try:
            reader = OffsetStore(reader_broker)
            assert reader.committed("g")[TP].offset == 1
            store.commit("g", {TP: OffsetAndMetadata(2)}, 2)
            assert reader.committed("g")[TP].offset == 1
            reader.refresh()
            assert reader.committed("g")[TP].offset == 2
        finally:
            reader_broker.close()
    finally:
        writer.close()
