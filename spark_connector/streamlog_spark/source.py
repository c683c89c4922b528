"""The DataSource named "streamlog": wires options, planning, readers and writers together.

Owns what Spark calls: DataSource (name, schema, reader, streamReader,
writer, streamWriter) and the batch reader (partitions on the driver, read
in executors). Everything it does is delegated to the modules with one job
each: options (parsing), planning (offset ranges), pushdown (filters),
tasks (the input partitions, packed for the JVM reader), reader (the Python
executors' hot path), streaming (micro-batches), writer (staging and
commit); jvm.py builds the JVM reader that can stand in for the executors.

    streamlog_spark.register(spark)   # or rely on pyspark_streamlog discovery
    spark.read.format("streamlog").option("subscribe", "events").load("data/")
"""
from pyspark.sql.datasource import DataSource, DataSourceReader

from .options import parse_source_options, parse_writer_options
from .planning import LogView, check_start, plan_ranges, resolve, split_ranges, topic_partitions
from .pushdown import translate
from .schema import source_ddl
from .streaming import StreamReader
from .tasks import read_task, read_tasks
from .writer import BatchWriter, StreamWriter, check_schema


class StreamlogDataSource(DataSource):
    """Spark's Kafka source and sink, over a streamlog database directory (option `path`)."""

    @classmethod
    def name(cls):
        return "streamlog"

    def schema(self):
        include = str(self.options.get("includeheaders", "false")).strip().lower() == "true"
        return source_ddl(include)

    def reader(self, schema):
        options = parse_source_options(self.options, streaming=False)
        return PushdownBatchReader(options) if options.filter_pushdown else BatchReader(options)

    def streamReader(self, schema):
        return StreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema, overwrite):
        options = parse_writer_options(self.options)
        _refuse_overwrite(overwrite)
        check_schema(schema, options.topic)
        return BatchWriter(options)

    def streamWriter(self, schema, overwrite):
        options = parse_writer_options(self.options)
        _refuse_overwrite(overwrite)
        check_schema(schema, options.topic)
        return StreamWriter(options)


def _refuse_overwrite(overwrite):
    # Spark's Kafka sink treats overwrite as append; a log cannot be overwritten, and
    # appending on mode("overwrite") would surprise whoever asked for it.
    if overwrite:
        raise ValueError("streamlog topics are append-only logs: write with mode(\"append\")")


class BatchReader(DataSourceReader):
    """A batch read: offset ranges planned once per DataFrame (at its first action)."""

    def __init__(self, options):
        self.options = options
        self.restriction = None   # set by PushdownBatchReader.pushFilters

    def partitions(self):
        o = self.options
        view = LogView(o.path, o.isolation_level)
        try:
            tps = topic_partitions(view, o.subscription)
            r = self.restriction
            if r is not None:
                tps = [tp for tp in tps if r.allows_partition(tp[1])]
            ends = resolve(view, o.ending, tps, "end")
            starts = resolve(view, o.starting, tps, "start", o.timestamp_strategy)
            starts = check_start(view, starts, o.fail_on_data_loss, ends)
            if r is not None:
                starts, ends = _restrict(view, r, starts, ends)
            ranges = plan_ranges(starts, ends)
            if r is not None:
                for x in ranges:
                    x.ts_low_us, x.ts_high_us = r.ts_low_us, r.ts_high_us
            return read_tasks(o, split_ranges(ranges, o.min_partitions), view)
        finally:
            view.close()

    def read(self, task):
        return read_task(task, self.options.isolation_level)


def _restrict(view, r, starts, ends):
    """Narrow the ranges to a pushed-down offset interval and timestamp lower bound."""
    out_starts, out_ends = {}, {}
    for tp in starts:
        out_starts[tp], out_ends[tp] = r.clamp(starts[tp], ends[tp])
    if r.ts_low_us is not None:
        # Every record before the first one at or after the bound is older than it, so
        # starting there is exact; the reader still masks later, out-of-order records.
        ms = -(-r.ts_low_us // 1000)
        if ms >= 0:
            found = view.offsets_for_times({tp: ms for tp in starts})
            for tp, offset in found.items():
                first = out_ends[tp] if offset is None else offset
                out_starts[tp] = max(out_starts[tp], first)
    return out_starts, out_ends


class PushdownBatchReader(BatchReader):
    """BatchReader that also takes filters on partition, offset and timestamp (opt-in:
    option filterPushdown=true and spark.sql.python.filterPushdown.enabled=true)."""

    def pushFilters(self, filters):
        self.restriction, rejected = translate(filters)
        return rejected
