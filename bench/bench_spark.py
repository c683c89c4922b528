"""Spark reads of a streamlog topic against Spark reading the same records from Parquet.

    python bench/bench_spark.py [--quick] [--records N]

N records (16-byte keys, 100-byte values, 4 partitions) are appended to a
topic, and the very same records (all Kafka-source columns, read back through
the consumer's columnar path) are written to Parquet, one file per partition,
in the same run. Then, on one local[2] SparkSession:

1. count: spark.read.format("streamlog")...load().count() vs spark.read.parquet(...).count()
2. aggregate: groupBy("partition").agg(sum(length("value"))) on both.

Each figure is rows/s and a ratio to Parquet (target >= 0.5x), read through
the JVM reader (streamlog_spark.configure), then the same queries through
the Python data source's own executors for comparison. The count is
Parquet's best case: Spark answers it from the files' row-group metadata;
the JVM reader answers it from batch headers, the Python executors by
producing every column of every row.
"""
import os
import shutil
import sys
import tempfile

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

import streamlog  # noqa: E402
from streamlog import TopicPartition  # noqa: E402

PARTITIONS = 4
CHUNK = 100_000
TARGET = 0.5


def make_records(root, n):
    """Append n records to topic "bench"; return the database path."""
    path = os.path.join(root, "db")
    filler = bytes(range(256)) * 2
    with streamlog.open(path, config={"segment.bytes": 256 << 20}) as db:
        db.create_topic("bench", partitions=PARTITIONS)
        producer = db.producer(batch_size=1 << 20)
        for start in range(0, n, CHUNK):
            ids = range(start, min(start + CHUNK, n))
            keys = [b"key-%012d" % i for i in ids]
            values = [b"%08d" % i + filler[i % 200:i % 200 + 92] for i in ids]
            producer.send_batch("bench", values, keys=keys, partition=None).result()
        producer.flush()
    return path


def write_parquet(path, out):
    """The topic's records, as Spark's Kafka-source columns, to one Parquet file per partition."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(out)
    with streamlog.open(path, readonly=True) as db:
        consumer = db.consumer(auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20,
                               fetch_max_bytes=4 << 20)
        for p in range(PARTITIONS):
            tp = TopicPartition("bench", p)
            consumer.assign([tp])
            end = consumer.end_offsets([tp])[tp]
            batches = []
            while consumer.position(tp) < end:
                batches.extend(c.to_arrow() for c in consumer.poll_batch(timeout=0))
            pq.write_table(pa.Table.from_batches(batches), os.path.join(out, f"part-{p}.parquet"))


def spark_session(quick):
    from pyspark.sql import SparkSession
    from streamlog_spark import configure

    builder = configure(SparkSession.builder)
    if quick:  # C1-only JIT: the JVM starts in half the time; never for measured runs
        builder = builder.config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
    spark = (builder.master("local[2]").appName("bench_spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from streamlog_spark import register
    return register(spark)


def main():
    args = harness.parse_args(__doc__.splitlines()[0], extra=lambda p: p.add_argument(
        "--records", type=int, default=None, help="records to read (default 5,000,000)"))
    harness.check_native()
    n = args.records or (20_000 if args.quick else 5_000_000)
    results = harness.Results("bench_spark")
    results.header()
    root = tempfile.mkdtemp(prefix="bench-spark-")
    try:
        path = make_records(root, n)
        parquet = os.path.join(root, "parquet")
        write_parquet(path, parquet)
        spark = spark_session(args.quick)
        from pyspark.sql import functions as F

        def streamlog_df():
            return spark.read.format("streamlog").option("subscribe", "bench").load(path)

        def parquet_df():
            return spark.read.parquet(parquet)

        def aggregate(df):
            return df.groupBy("partition").agg(F.sum(F.length("value")).alias("bytes")).collect()

        # Both sides hold the same records and give the same answer.
        assert streamlog_df().count() == parquet_df().count() == n
        a = sorted(tuple(r) for r in aggregate(streamlog_df()))
        b = sorted(tuple(r) for r in aggregate(parquet_df()))
        assert a == b, (a, b)

        plan = streamlog_df()._jdf.queryExecution().executedPlan().toString()
        if "JVM reader" not in plan:
            sys.exit("bench_spark: the JVM reader is not in use (see the warning above)")
        from streamlog_spark.jvm import ENABLED_CONF

        # The measured rows use the JVM reader; the same queries through Python executors
        # follow for comparison (no target).
        for reader, target in (("", TARGET), (" [Python executors]", None)):
            spark.conf.set(ENABLED_CONF, "true" if target else "false")
            ours, base = harness.best_of(args.repeats, lambda: streamlog_df().count(),
                                         lambda: parquet_df().count())
            results.add(f"count(), {n:,} records{reader}", n / ours, "rows/s",
                        ratio=base / ours, target=None if args.quick else target,
                        baseline="parquet")
            ours, base = harness.best_of(args.repeats, lambda: aggregate(streamlog_df()),
                                         lambda: aggregate(parquet_df()))
            results.add(f"groupBy(partition).agg(sum(length(value))){reader}", n / ours,
                        "rows/s", ratio=base / ours, target=None if args.quick else target,
                        baseline="parquet")
        spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results.write_json(args.json)
    return harness.exit_code(results, args.quick)


if __name__ == "__main__":
    sys.exit(main())
