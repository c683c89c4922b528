"""docs/FORMAT.md's byte tables agree with the code's constants and struct layouts."""
import os
import re

import pytest

from streamlog.storage import files, record_batch
from streamlog.storage.offset_index import OffsetIndex
from streamlog.storage.time_index import TimeIndex

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
    for row, name in zip(rows, cls.DTYPE.names):
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


def test_file_names_in_the_doc_match_the_code():
    text = open(DOC, encoding="utf-8").read()
    for name in (files.RECOVERY_POINT_CHECKPOINT, files.LOG_START_OFFSET_CHECKPOINT,
                 files.CLEAN_SHUTDOWN_MARKER, files.LOCK_FILE):
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
    assert value == [str(offsets._VALUE_VERSION), *offsets.GroupRecord._fields]
    assert offsets.OFFSETS_TOPIC_CONFIG == {"cleanup.policy": "compact",
                                            "segment.bytes": 104857600}
