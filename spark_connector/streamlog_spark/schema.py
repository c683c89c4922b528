"""The columns the source yields: Spark's Kafka-source schema, as DDL for Spark.

The same columns as Spark's own Kafka source, so moving a job between the
two changes only the format name and the connection option. The Arrow form
of these columns is built by streamlog's RecordColumns.to_arrow(); this
module only tells Spark what to expect.
"""

BASE_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset LONG, "
            "timestamp TIMESTAMP, timestampType INT")
HEADERS_DDL = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


def source_ddl(include_headers):
    """The DDL of the rows read: the base columns, plus `headers` when asked for."""
    return f"{BASE_DDL}, {HEADERS_DDL}" if include_headers else BASE_DDL
