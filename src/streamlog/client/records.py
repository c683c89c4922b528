"""What clients hand back: Record, RecordMetadata, and the columnar RecordColumns.

Record and RecordMetadata are named tuples (attribute access in C, cheap to
build in bulk: the native decoder makes the consumer's Records directly). A record's headers are a tuple of (str key, bytes value)
pairs, () when it has none.

RecordColumns is one partition's worth of records as columns, for readers
that never want a Python object per record: offsets and timestamps as numpy
int64, keys and values as Arrow-style (data, offsets, null mask) buffers.
to_arrow() turns it into a pyarrow.RecordBatch with the schema of Spark's
Kafka source.
"""
import functools
from typing import NamedTuple

import numpy as np


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: object
    value: object
    headers: tuple = ()


class RecordMetadata(NamedTuple):
    """Where a sent record landed. offset is -1 under acks=0 (no answer is waited for)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class RecordColumns:
    """One partition's records as columns (see the module docstring)."""

    __slots__ = ("topic", "partition", "timestamp_type", "offsets", "timestamps", "key_data",
                 "key_offsets", "key_nulls", "value_data", "value_offsets", "value_nulls",
                 "headers")

    def __init__(self, topic, partition, timestamp_type, offsets, timestamps, keys, values,
                 headers=None):
        self.topic = topic
        self.partition = partition
        self.timestamp_type = timestamp_type
        self.offsets = offsets
        self.timestamps = timestamps
        self.key_data, self.key_offsets, self.key_nulls = keys
        self.value_data, self.value_offsets, self.value_nulls = values
        # Per record a tuple of (key, value) pairs, or None when it has none; the whole
        # column is None unless poll_batch(include_headers=True) asked for it.
        self.headers = headers

    def __len__(self):
        return len(self.offsets)

    def __repr__(self):
        first = int(self.offsets[0]) if len(self) else None
        return f"RecordColumns({self.topic}-{self.partition}, {len(self)} records from {first})"

    @staticmethod
    def _items(data, offsets, nulls):
        raw = data.tobytes()
        bounds = offsets.tolist()
        return [None if null else raw[a:b]
                for a, b, null in zip(bounds, bounds[1:], nulls.tolist(), strict=False)]

    def keys(self):
        return self._items(self.key_data, self.key_offsets, self.key_nulls)

    def values(self):
        return self._items(self.value_data, self.value_offsets, self.value_nulls)

    def to_arrow(self, include_headers=False):
        """A pyarrow.RecordBatch with the schema of Spark's Kafka source:

        key binary, value binary, topic string, partition int32, offset int64,
        timestamp timestamp[us, tz=UTC], timestampType int32, and with
        include_headers, headers list<struct<key string, value binary>> (null,
        not empty, for a record without headers). Every field is nullable, as
        Spark's are.
        """
        try:
            import pyarrow as pa
        except ImportError as exc:
            raise ImportError("RecordColumns.to_arrow() needs pyarrow: pip install "
                              "'streamlog[arrow]' (or the [spark] extra, which has it)") from exc

        n = len(self)

        def binary(data, offsets, nulls):
            validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() \
                else None
            return pa.BinaryArray.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets),
                                                                 pa.py_buffer(data)],
                                               null_count=int(nulls.sum()))
        columns = [
            binary(self.key_data, self.key_offsets, self.key_nulls),
            binary(self.value_data, self.value_offsets, self.value_nulls),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.array(np.full(n, self.partition, np.int32)),
            pa.array(self.offsets),
            pa.array(self.timestamps * 1000, pa.timestamp("us", tz="UTC")),
            pa.array(np.full(n, self.timestamp_type, np.int32)),
        ]
        schema, headers_field = _arrow_schema()
        fields = list(schema)
        if include_headers:
            if self.headers is None:
                raise ValueError("these columns were read without headers: use "
                                 "poll_batch(include_headers=True)")
            columns.append(pa.array([None if h is None else [{"key": k, "value": v}
                                                              for k, v in h]
                                     for h in self.headers], headers_field.type))
            fields.append(headers_field)
        return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


@functools.cache
def _arrow_schema():
    """(the Arrow schema of Spark's Kafka source, its optional headers field) of to_arrow(),
    made at its first call: importing pyarrow
    costs about 30 MiB of memory and 20 ms, which no other use of the library needs."""
    import pyarrow as pa
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                        ("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("us", tz="UTC")),
                        ("timestampType", pa.int32())])
    headers = pa.field("headers", pa.list_(pa.struct([("key", pa.string()),
                                                      ("value", pa.binary())])))
    return schema, headers

