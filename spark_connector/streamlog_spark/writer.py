"""The writer: executors stage rows as Arrow files, the driver appends them to topics.

Owns the write path, batch and streaming. Only one process may write a
streamlog directory (it holds the directory's lock), and Spark's executor
tasks are many processes, so they never open the database for writing:

  1. write() (executor task) streams its Arrow batches into one Arrow IPC
     file under <database>/spark-staging/<job id>/ and returns a
     StagedFile commit message (its path and row count). A task that fails
     removes its own file.
  2. commit() (a Python process on the driver) opens the database for
     writing -- retrying while another process holds the lock, up to
     lockTimeoutMs -- appends every staged file, in task order, with the
     producer's columnar send_batch, flushes, and removes the staging files.
  3. abort() marks a batch job aborted (<job id>.aborted next to its
     directory), then removes its staging files. Spark cancels a failed
     job's other tasks asynchronously, so one may finish staging after the
     abort: stage() looks for the mark after writing its file and removes the
     file itself. Marks older than an hour are swept (with anything left
     under their job directory) by the next commit or abort in the database.

Not atomic yet: streamlog has no transactional producer, so a commit that
fails half-way (or a driver killed during it) leaves the records appended so
far visible, and a streaming batch replayed after such a failure is written
again (at-least-once, as Spark's Kafka sink). Once transactions exist, the
commit becomes one transaction and a failed job leaves nothing visible.

Columns, as Spark's Kafka sink takes them: value (string or binary,
required), key (string or binary), topic (string; the `topic` option
overrides it), partition (int; null or absent lets the producer's partitioner
choose), headers (array<struct<key: string, value: binary>>). Other columns
are an error, so a misspelt column is not silently dropped.
"""
import os
import shutil
import time
import uuid
from dataclasses import dataclass

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, StringType, StructType)

import streamlog

STAGING_DIR = "spark-staging"  # not a <topic>-<partition> name, so the broker ignores it
ABORTED_SUFFIX = ".aborted"
# Long past the end of any task of an aborted job: only then may its mark go.
_ABORTED_MARK_LIFETIME_S = 3600


class SchemaError(ValueError):
    """The DataFrame's columns do not fit the sink (Spark's Kafka sink wording)."""


@dataclass
class StagedFile(WriterCommitMessage):
    path: str
    rows: int
    task: int


# The columns the sink writes; any other is ignored, as Spark's KafkaWriter.validateQuery
# looks up these alone (a source DataFrame, offset and timestamp included, writes as is).
SINK_COLUMNS = ("key", "value", "topic", "partition", "headers")


def check_schema(schema, topic_option):
    """Refuse a DataFrame the sink cannot write, in the words of Spark's Kafka sink."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise SchemaError("Required attribute 'value' not found")
    if not isinstance(fields["value"], (StringType, BinaryType)):
        raise SchemaError("value must be a(n) string or binary")
    if "key" in fields and not isinstance(fields["key"], (StringType, BinaryType)):
        raise SchemaError("key must be a(n) string or binary")
    if topic_option is None:
        if "topic" not in fields:
            raise SchemaError("topic option required when no 'topic' attribute is present. Use "
                              "the topic option for setting a topic.")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise SchemaError("topic must be a(n) string")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise SchemaError("partition must be a(n) int")
    if "headers" in fields:
        h = fields["headers"]
        ok = isinstance(h, ArrayType) and isinstance(h.elementType, StructType) and \
            [f.name for f in h.elementType.fields] == ["key", "value"] and \
            isinstance(h.elementType.fields[0].dataType, StringType) and \
            isinstance(h.elementType.fields[1].dataType, BinaryType)
        if not ok:
            raise SchemaError("headers must be a(n) array<struct<key:string,value:binary>>")


def stage(job_dir, batches):
    """Write an executor task's batches to one Arrow IPC file; return its StagedFile."""
    import pyarrow as pa
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task = ctx.partitionId() if ctx is not None else 0
    os.makedirs(job_dir, exist_ok=True)
    attempt = f"{ctx.stageId()}-{ctx.attemptNumber()}" if ctx is not None else "0-0"
    path = os.path.join(job_dir, f"task-{task:05d}-{attempt}-{uuid.uuid4().hex[:8]}.arrow")
    rows = 0
    writer = None
    try:
        for batch in batches:
            batch = batch.select([n for n in batch.schema.names if n in SINK_COLUMNS])
            if writer is None:
                writer = pa.ipc.new_file(path, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
    except BaseException:
        if writer is not None:
            writer.close()
        _remove(path)
        raise
    if writer is None:
        return StagedFile(None, 0, task)  # no rows: nothing staged
    writer.close()
    if os.path.exists(job_dir + ABORTED_SUFFIX):
        # The job was aborted while this task ran (the file was complete before the look,
        # so either abort() saw it or this task sees the mark).
        _remove(path)
        _remove_dir(job_dir)
        return StagedFile(None, 0, task)
    return StagedFile(path, rows, task)


def _remove_dir(path):
    try:
        os.rmdir(path)
    except OSError:
        pass  # not empty, or already gone


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _binary_list(column):
    """An Arrow string/binary column -> list of bytes or None (what send_batch takes)."""
    import pyarrow as pa

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


def _headers_list(column):
    return [None if h is None else [(e["key"], e["value"]) for e in h]
            for h in column.to_pylist()]


def _open_for_writing(path, timeout_ms):
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            return streamlog.open(path)
        except streamlog.DatabaseLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def append_staged(options, messages):
    """Append every staged file of a job to its topics (driver); returns records appended."""
    import numpy as np
    import pyarrow as pa

    staged = sorted((m for m in messages if m is not None and m.path is not None),
                    key=lambda m: (m.task, m.path))
    if not staged:
        return 0
    appended = 0
    with _open_for_writing(options.path, options.lock_timeout_ms) as db:
        producer = db.producer(linger_ms=0)
        futures = []
        for message in staged:
            with pa.memory_map(message.path) as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    batch = reader.get_batch(i)
                    futures.extend(_send(producer, options.topic, batch, np))
                    appended += batch.num_rows
        producer.flush()
        for future in futures:
            future.result()  # raise the first failed append, if any
    return appended


def _send(producer, topic_option, batch, np):
    """send_batch per (topic, partition) group of a batch, keeping row order within each."""
    names = batch.schema.names
    n = batch.num_rows
    values = _binary_list(batch.column("value"))
    keys = _binary_list(batch.column("key")) if "key" in names else None
    headers = _headers_list(batch.column("headers")) if "headers" in names else None
    if topic_option is not None or "topic" not in names:
        topics = None
    else:
        topics = batch.column("topic").to_pylist()
        if any(t is None for t in topics):
            raise SchemaError("a row has a null topic and no topic option is set")
    partitions = batch.column("partition").to_numpy(zero_copy_only=False) \
        if "partition" in names else None
    groups = {}
    for i in range(n) if (topics is not None or partitions is not None) else ():
        t = topic_option if topics is None else topics[i]
        p = None if partitions is None or np.isnan(partitions[i]) else int(partitions[i])
        groups.setdefault((t, p), []).append(i)
    if not groups:
        groups = {(topic_option, None): None}  # one topic, partitioner's choice: no regrouping
    futures = []
    for (topic, partition), rows in groups.items():
        pick = (lambda col: col) if rows is None else \
            (lambda col, rows=rows: None if col is None else [col[i] for i in rows])
        futures.append(producer.send_batch(topic, pick(values), keys=pick(keys),
                                           partition=partition, headers=pick(headers)))
    return futures


def _job_dir(path, job_id):
    return os.path.join(path, STAGING_DIR, job_id)


def _discard(job_dir, messages, aborted=False):
    """Remove a job's staged files (after its commit, or marking it aborted first)."""
    root = os.path.dirname(job_dir)
    if aborted:
        os.makedirs(root, exist_ok=True)
        with open(job_dir + ABORTED_SUFFIX, "w"):
            pass
    for m in messages:
        if m is not None and m.path is not None:
            _remove(m.path)
    shutil.rmtree(job_dir, ignore_errors=True)
    _sweep_aborted(root)
    _remove_dir(root)  # the staging root, when nothing else is in it


def _sweep_aborted(root):
    now = time.time()
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return
    for name in names:
        if not name.endswith(ABORTED_SUFFIX):
            continue
        mark = os.path.join(root, name)
        try:
            old = now - os.path.getmtime(mark) > _ABORTED_MARK_LIFETIME_S
        except FileNotFoundError:
            continue
        if old:
            shutil.rmtree(mark[:-len(ABORTED_SUFFIX)], ignore_errors=True)
            _remove(mark)


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options):
        self.options = options
        self.job_dir = _job_dir(options.path, uuid.uuid4().hex)

    def write(self, iterator):
        return stage(self.job_dir, iterator)

    def commit(self, messages):
        append_staged(self.options, messages)
        _discard(self.job_dir, messages)

    def abort(self, messages):
        _discard(self.job_dir, messages, aborted=True)


class StreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch is one job: staged by its tasks, appended by commit(batchId)."""

    def __init__(self, options):
        self.options = options
        self.query_dir = _job_dir(options.path, uuid.uuid4().hex)

    def write(self, iterator):
        return stage(self.query_dir, iterator)

    def commit(self, messages, batchId):
        append_staged(self.options, messages)
        _discard(self.query_dir, messages)

    def abort(self, messages, batchId):
        # Not marked aborted: the query's later micro-batches stage into the same
        # directory (write() does not learn the batch id), and a mark would discard them.
        _discard(self.query_dir, messages)
