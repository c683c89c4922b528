"""Kappa style: one query, run as a replay over the whole history and as a live stream.

    pip install "streamlog[spark]"     # pyspark, pyarrow; needs Java 17
    python examples/spark_streaming.py

The log is the source of truth. `revenue()` is written once; run over
spark.read it recomputes everything from offset 0 (a replay, e.g. after
fixing a bug), run over spark.readStream it keeps the answer up to date while
records arrive. Both must agree on the same records.
"""
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import streamlog  # noqa: E402
from pyspark.sql import SparkSession, functions as F  # noqa: E402
from streamlog_spark import configure, register  # noqa: E402


def revenue(orders):
    """The one query: revenue per customer from the JSON order values."""
    parsed = orders.select(F.from_json(F.col("value").cast("string"),
                                       "customer STRING, amount INT").alias("o")).select("o.*")
    return parsed.groupBy("customer").agg(F.sum("amount").alias("revenue"))


def append_orders(path, first, count):
    with streamlog.open(path) as db:  # opened and closed: Spark only reads, read-only
        if "orders" not in db.topics():
            db.create_topic("orders", partitions=2)
        producer = db.producer()
        for i in range(first, first + count):
            order = {"customer": f"c{i % 5}", "amount": i % 50 + 1}
            producer.send("orders", key=order["customer"].encode(),
                          value=json.dumps(order).encode())
        producer.flush()


def as_dict(rows):
    return {r.customer: r.revenue for r in rows}


def main():
    root = tempfile.mkdtemp(prefix="spark-kappa-")
    try:
        run(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root):
    path = os.path.join(root, "db")
    append_orders(path, 0, 1000)
    print(f"history: 1000 orders in {path}")

    # configure(): reads decode segment files in the JVM (compiled once with javac)
    spark = (configure(SparkSession.builder.master("local[2]").appName("streamlog-kappa"))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    # 1. Live: the same query as a stream, from the start of the log, kept up to date.
    live = (spark.readStream.format("streamlog").option("subscribe", "orders")
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400")
            .load(path))
    query = (revenue(live).writeStream.outputMode("complete").format("memory")
             .queryName("revenue_live").trigger(processingTime="500 milliseconds")
             .option("checkpointLocation", os.path.join(root, "checkpoint")).start())
    query.processAllAvailable()
    print("live, after the history:", as_dict(spark.table("revenue_live").collect()))
    for wave in range(3):
        append_orders(path, 1000 + wave * 100, 100)
        query.processAllAvailable()
        print(f"live, after {100 * (wave + 1)} new orders:",
              as_dict(spark.table("revenue_live").collect()))
    live_answer = as_dict(spark.table("revenue_live").collect())
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    print("live micro-batches (rows each, at most 400):", batches)

    # 2. Replay: the same query over the whole history, as a batch job.
    replay = revenue(spark.read.format("streamlog").option("subscribe", "orders").load(path))
    replay_answer = as_dict(replay.collect())
    print("replay over all 1300 orders:", replay_answer)
    print("live and replay agree:", live_answer == replay_answer)
    spark.stop()
    if live_answer != replay_answer:
        sys.exit("the live stream and the replay disagree")


if __name__ == "__main__":
    main()
