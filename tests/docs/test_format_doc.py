"""docs/FORMAT.md's byte tables agree with the code's constants and struct layouts."""
import os
import re

import pytest

from streamlog.storage import checkpoint, files, record_batch
from streamlog.storage.log_directory import LogDirectory
from streamlog.storage.offset_index import OffsetIndex
from streamlog.storage.partition_log import PartitionLog
from streamlog.storage.record_batch import RecordBatch, build_batch
from streamlog.storage.time_index import TimeIndex
from streamlog.storage.varint import (MAX_VARINT_BYTES, MAX_VARLONG_BYTES, encode_varint,
                                      encode_varlong)
from streamlog.structs import TopicPartition

from support import clean_pass, config, make_batch

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "FORMAT.md")


def table_after(heading):
    """Rows (lists of cells) of the first table under a '## heading'."""
    text = open(DOC, encoding="utf-8").read()
    section = text.split(f"## {heading}\n", 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not set("".join(cells)) <= set("-"):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # drop the header row


BATCH_FIELDS = {
    "baseOffset": ("BASE_OFFSET_OFFSET", 8), "batchLength": ("LENGTH_OFFSET", 4),
    "partitionLeaderEpoch": ("PARTITION_LEADER_EPOCH_OFFSET", 4), "magic": ("MAGIC_OFFSET", 1),
    "crc": ("CRC_OFFSET", 4), "attributes": ("ATTRIBUTES_OFFSET", 2),
    "lastOffsetDelta": ("LAST_OFFSET_DELTA_OFFSET", 4),
    "baseTimestamp": ("BASE_TIMESTAMP_OFFSET", 8), "maxTimestamp": ("MAX_TIMESTAMP_OFFSET", 8),
    "producerId": ("PRODUCER_ID_OFFSET", 8), "producerEpoch": ("PRODUCER_EPOCH_OFFSET", 2),
    "baseSequence": ("BASE_SEQUENCE_OFFSET", 4), "recordsCount": ("RECORDS_COUNT_OFFSET", 4),
}


def test_record_batch_table_matches_the_header_struct():
    rows = table_after("Record batch (`.log`)")
    documented = {r[2]: (int(r[0]), r[1]) for r in rows}
    assert set(documented) == set(BATCH_FIELDS) | {"records"}
    position = 0
    for name, (const, size) in BATCH_FIELDS.items():
        offset, doc_size = documented[name]
        assert offset == getattr(record_batch, const) == position, name
        assert int(doc_size) == size, name
        position += size
    assert position == record_batch.HEADER.size == documented["records"][0] == \
        record_batch.RECORDS_OFFSET
    assert "CRC-32C" in rows[4][3] and f"bytes {record_batch.ATTRIBUTES_OFFSET}" in rows[4][3]


def test_attribute_bits_match_the_masks():
    bits = {r[0]: r[1] for r in _attribute_rows()}
    assert record_batch.COMPRESSION_MASK == 0b111 and "0 none, 1 gzip" in bits["0–2"]
    assert record_batch.TIMESTAMP_TYPE_MASK == 1 << 3 and "LogAppendTime" in bits["3"]
    assert record_batch.TRANSACTIONAL_FLAG == 1 << 4 and bits["4"] == "transactional"
    assert record_batch.CONTROL_FLAG == 1 << 5 and bits["5"] == "control batch"
    assert record_batch.DELETE_HORIZON_FLAG == 1 << 6 and "delete horizon" in bits["6"]


def _attribute_rows():
    text = open(DOC, encoding="utf-8").read()
    section = text.split("Attributes:\n", 1)[1]
    return [[c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines()[2:] if line.startswith("|")][:6]


@pytest.mark.parametrize("heading,cls", [("Offset index (`.index`)", OffsetIndex),
                                         ("Time index (`.timeindex`)", TimeIndex)])
def test_index_tables_match_the_entry_dtypes(heading, cls):
    rows = table_after(heading)
    assert len(rows) == len(cls.DTYPE.names)
    for row, name in zip(rows, cls.DTYPE.names, strict=True):
        offset, size = int(row[0]), int(row[1])
        field_dtype, field_offset = cls.DTYPE.fields[name][:2]
        assert offset == field_offset and size == field_dtype.itemsize, (heading, name)
        assert field_dtype.byteorder == ">"  # big-endian, as the doc says
    assert sum(int(r[1]) for r in rows) == cls.DTYPE.itemsize


def test_control_record_table_matches_the_structs():
    rows = table_after("Control record (transaction marker)")
    key = [r for r in rows if r[0] == "key"]
    value = [r for r in rows if r[0] == "value"]
    assert sum(int(r[2]) for r in key) == record_batch._CONTROL_KEY.size
    assert sum(int(r[2]) for r in value) == record_batch._END_TXN_VALUE.size
    assert "0 ABORT, 1 COMMIT" in key[1][3]
    assert (record_batch.CONTROL_ABORT, record_batch.CONTROL_COMMIT) == (0, 1)


def test_txn_index_table_matches_the_entry_struct():
    from streamlog.storage import txn_index
    rows = table_after("Transaction index (`.txnindex`)")
    position = 0
    for row, code in zip(rows, txn_index._ENTRY.format.lstrip(">"), strict=True):
        assert int(row[0]) == position and int(row[1]) == {"h": 2, "q": 8}[code]
        position += int(row[1])
    assert position == txn_index._ENTRY.size == 34
    assert [r[2] for r in rows[1:]] == ["producerId", *[f.replace("_o", "O").replace(
        "_s", "S") for f in txn_index.AbortedTxn._fields[1:]]]
    assert txn_index.TXN_INDEX_VERSION == 0 and rows[0][3] == "int16, 0"


def test_producer_snapshot_tables_match_the_structs():
    from streamlog.storage import producer_state
    header = table_after("Producer snapshot (`.snapshot`)")
    text = open(DOC, encoding="utf-8").read()
    section = text.split("## Producer snapshot (`.snapshot`)\n", 1)[1]
    table = section.split("Each entry:", 1)[1].strip().split("\n\n", 1)[0]
    entry_rows = [[c.strip() for c in line.strip("|").split("|")]
                  for line in table.splitlines()][2:]
    for rows, layout in ((header, producer_state._HEADER), (entry_rows, producer_state._ENTRY)):
        position = 0
        for row in rows:
            assert int(row[0]) == position
            position += int(row[1])
        assert position == layout.size
        sizes = [int(r[1]) for r in rows]
        codes = {"h": 2, "i": 4, "I": 4, "q": 8}
        assert sizes == [codes[c] for c in layout.format.lstrip(">")]
    assert producer_state._CRC_FROM == int(header[2][0])
    assert f"from offset {producer_state._CRC_FROM}" in header[1][3]
    assert producer_state.SNAPSHOT_VERSION == 1 and header[0][3] == "int16, 1"


def test_file_names_in_the_doc_match_the_code():
    text = open(DOC, encoding="utf-8").read()
    for name in (files.RECOVERY_POINT_CHECKPOINT, files.LOG_START_OFFSET_CHECKPOINT,
                 files.CLEANER_OFFSET_CHECKPOINT, files.CLEAN_SHUTDOWN_MARKER, files.LOCK_FILE):
        assert name in text
    for suffix in (files.CLEANED_SUFFIX, files.SWAP_SUFFIX, files.DELETED_SUFFIX,
                   files.TMP_SUFFIX):
        assert f"`{suffix}`" in text
    assert re.search(r"\b0{20}\.log\b", text) and files.offset_prefix(0) == "0" * 20


def test_consumer_offsets_table_matches_the_store():
    from streamlog.coordinator import offsets
    rows = table_after("Internal topic `__consumer_offsets`")
    documented = {int(r[0]): ([f.strip(" `") for f in r[1].strip("`[]").split(",")],
                              [f.strip(" `") for f in r[2].strip("`[]").split(",")])
                  for r in rows}
    assert set(documented) == {offsets._OFFSET_KEY, offsets._GROUP_KEY}
    key, value = documented[offsets._OFFSET_KEY]
    assert key == ["1", "group", "topic", "partition"]
    assert value == [str(offsets._VALUE_VERSION), *offsets.CommittedOffset._fields]
    key, value = documented[offsets._GROUP_KEY]
    assert key == ["2", "group"]
    assert value == [str(offsets._GROUP_VALUE_VERSION), *offsets.GroupRecord._fields]
    assert offsets.OFFSETS_TOPIC_CONFIG == {"cleanup.policy": "compact",
                                            "segment.bytes": 104857600}


def test_cluster_metadata_table_matches_what_a_database_writes(tmp_path):
    import msgpack

    import streamlog
    from streamlog.broker import metadata
    from streamlog.storage.keyed_log import replay
    rows = table_after("Internal topic `__cluster_metadata`")
    documented = {r[0].strip("`"): set(re.findall(r'"(\w+)"', r[1])) for r in rows}
    assert set(documented) == {"topic name", metadata.PRODUCER_IDS_KEY.decode(),
                               metadata.TOPIC_DEFAULTS_KEY.decode()}
    assert metadata.METADATA_LOG_CONFIG.compact
    assert metadata.METADATA_LOG_CONFIG.segment_bytes == 1048576
    root = str(tmp_path / "db")
    with streamlog.open(root, config={"retention.ms": 1000}) as db:
        db.create_topic("t")
        with db.producer(acks="all", enable_idempotence=True) as producer:
            producer.send("t", value=b"x").result()
        seen = {}
        replay(db._broker.metadata._log, 0,
               lambda key, value, _ts: seen.setdefault(key.decode(), msgpack.unpackb(value)))
    assert set(seen["t"]) == documented["topic name"]
    assert set(seen["!producer-ids"]) == documented["!producer-ids"]
    assert seen["!topic-defaults"] == {"v": 1, "config": {"retention.ms": 1000}}
    assert set(seen["!topic-defaults"]) == documented["!topic-defaults"]


# --- Record ------------------------------------------------------------------


def read_varint(buf, pos):
    """(value, next pos) of a zig-zag varint, decoded as the doc describes it (no code reuse)."""
    shift = raw = 0
    while True:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos


def read_field(buf, pos, kind, previous):
    """(value, next pos) of one field of the doc's Record table, by its type cell."""
    if kind in ("varint", "varlong"):
        return read_varint(buf, pos)
    if kind == "int8":
        return int.from_bytes(buf[pos:pos + 1], "big", signed=True), pos + 1
    assert kind in ("bytes", ""), kind
    assert isinstance(previous, int), "a bytes field must follow its length"
    if previous < 0:  # the preceding length said null
        return None, pos
    return bytes(buf[pos:pos + previous]), pos + previous


def test_record_table_decodes_records_the_code_wrote():
    """Decode a batch built by the code field by field in the table's order, types and sizes."""
    rows = table_after("Record")
    # The order is left to the decoding below to check: any other order misreads the bytes.
    assert {r[0] for r in rows} == {"length", "attributes", "timestampDelta", "offsetDelta",
                                    "keyLength", "key", "valueLength", "value", "headerCount",
                                    "headers"} and rows[-1][0] == "headers"
    # The headers row describes its own layout: "headerCount times: <part>, <part>, ...".
    header_parts = [p.strip() for p in rows[-1][2].split("times:", 1)[1].split(",")]
    header_layout = [(p.split()[0], "varint" if " varint" in p else "") for p in header_parts]
    assert sorted(header_layout) == [("key", ""), ("keyLength", "varint"), ("value", ""),
                                     ("valueLength", "varint")]  # their order: checked below
    assert rows[-1][2].startswith(f"{rows[-2][0]} times")

    written = [  # (key, value, headers, timestamp)
        (b"key-0", b"value-0", [("h1", b"x"), ("h2", None)], 1_700_000_000_000),
        (None, None, [], 1_700_000_000_000 - 3),  # a tombstone with a null key, going back in time
        (b"", b"v" * 200, [("", b"")], 1_700_000_000_000 + 2**40),  # long value: 2-byte varint
    ]
    batch = record_batch.build_batch([w[1] for w in written], keys=[w[0] for w in written],
                                     headers=[w[2] for w in written],
                                     timestamps=[w[3] for w in written], base_offset=1000)
    parsed = record_batch.RecordBatch(batch)
    section = bytes(batch[record_batch.RECORDS_OFFSET:])
    pos = 0
    for i, (key, value, headers, timestamp) in enumerate(written):
        fields = {}
        previous = None
        for name, kind, _notes in rows[:-1]:
            fields[name], pos = read_field(section, pos, kind, previous)
            previous = fields[name]
            if name == "length":
                record_end = pos + fields["length"]  # "bytes after this field"
        got_headers = []
        for _ in range(fields["headerCount"]):
            header = {}
            previous = None
            for name, kind in header_layout:
                header[name], pos = read_field(section, pos, kind, previous)
                previous = header[name]
            got_headers.append((header["key"].decode("utf-8"), header["value"]))
        assert pos == record_end, f"record {i}: length does not cover the fields"
        assert fields["attributes"] == 0
        assert fields["timestampDelta"] == timestamp - parsed.base_timestamp
        assert fields["offsetDelta"] == i
        assert (fields["keyLength"] == -1) == (key is None)  # "-1 = null key"
        assert (fields["valueLength"] == -1) == (value is None)  # "-1 = null value"
        assert (fields["key"], fields["value"], got_headers) == (key, value, headers)
    assert pos == len(section)


def test_varint_sizes_in_the_doc_hold():
    text = open(DOC, encoding="utf-8").read()
    assert f"A varint takes at most {MAX_VARINT_BYTES} bytes, a\nvarlong {MAX_VARLONG_BYTES}" \
        in text
    assert len(encode_varint(-2**31)) == MAX_VARINT_BYTES
    assert len(encode_varlong(-2**63)) == MAX_VARLONG_BYTES
    for v in (0, -1, 1, 63, -64, 64, 2**31 - 1, -2**31):  # zig-zag, 7 bits at a time, LSB first
        assert read_varint(encode_varint(v), 0) == (v, len(encode_varint(v)))


# --- offset checkpoints ----------------------------------------------------


def test_checkpoint_table_matches_what_a_log_directory_writes(tmp_path):
    rows = {r[0]: r[1] for r in table_after("Offset checkpoint files")}
    assert set(rows) == {"1", "2", "3…"}
    version = re.fullmatch(r"format version: `(\d+)`", rows["1"]).group(1)
    assert int(version) == checkpoint.VERSION
    assert rows["2"] == "number of entries"
    template = re.fullmatch(r"`([^`]+)`, one per partition", rows["3…"]).group(1)
    names = re.findall(r"<(\w+)>", template)
    assert sorted(names) == ["offset", "partition", "topic"]  # their order: checked below
    entry = re.compile(re.sub(r"<\w+>", r"(\\S+)", template))

    root = str(tmp_path / "db")
    directory = LogDirectory(root)
    expected = {}
    for tp, batches in ((TopicPartition("orders.eu", 3), 4), (TopicPartition("a-b", 0), 2)):
        log = directory.open_log(tp, config())
        for b in range(batches):
            log.append(make_batch(b, 5))
        log.flush()
        expected[tp] = log.recovery_point
    assert sorted(expected.values()) == [10, 20]
    directory.checkpoint()
    first_dirty = dict(zip(expected, (7, 3), strict=True))
    for tp, offset in first_dirty.items():
        directory.write_cleaner_checkpoint(tp, offset)
    for name, want in ((files.RECOVERY_POINT_CHECKPOINT, expected),
                       (files.LOG_START_OFFSET_CHECKPOINT, dict.fromkeys(expected, 0)),
                       (files.CLEANER_OFFSET_CHECKPOINT, first_dirty)):
        lines = open(os.path.join(root, name), encoding="utf-8").read().splitlines()
        assert lines[0] == version
        assert int(lines[1]) == len(lines) - 2 == len(want)
        got = {}
        for line in lines[2:]:
            fields = dict(zip(names, entry.fullmatch(line).groups(), strict=True))
            got[TopicPartition(fields["topic"], int(fields["partition"]))] = int(fields["offset"])
        assert got == want, name
    directory.close()
    # And a file written by hand from the table reads back.
    by_hand = {TopicPartition("t", 7): 42, TopicPartition("u.v", 0): 0}
    text = "\n".join([version, str(len(by_hand))] + [
        template.replace("<topic>", tp.topic).replace("<partition>", str(tp.partition))
        .replace("<offset>", str(offset)) for tp, offset in by_hand.items()]) + "\n"
    (tmp_path / "by-hand").write_text(text, encoding="utf-8")
    assert checkpoint.OffsetCheckpointFile(str(tmp_path / "by-hand")).read() == by_hand


# --- delete horizon -------------------------------------------------------------


def test_delete_horizon_table_matches_what_the_cleaner_writes(tmp_path):
    rows = {r[0]: r[1] for r in table_after("Delete horizon (compacted logs)")}
    bit = int(re.fullmatch(r"attributes bit (\d+)", next(k for k in rows if k.startswith(
        "attributes bit"))).group(1))
    assert 1 << bit == record_batch.DELETE_HORIZON_FLAG
    now, retention = 1_800_000_000_000, 3_600_000
    log = PartitionLog(str(tmp_path / "p"), config(cleanup_policy="compact",
                                                   delete_retention_ms=retention),
                       clock_ms=lambda: now)
    log.append(build_batch([b"x", None], keys=[b"a", b"b"], timestamps=[now - 50, now - 20]))
    clean_pass(log)
    batch = RecordBatch(next(iter(log.read(0).batches)).view())
    assert batch.attributes & (1 << bit)
    assert batch.base_timestamp == now + retention == batch.delete_horizon_ms
    assert [ts for _, ts, *_ in batch.records()] == [now - 50, now - 20]
    assert batch.max_timestamp == now - 20
    log.close()
