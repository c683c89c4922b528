"""Batch Spark over a streamlog topic: read it as a DataFrame, aggregate, write results back.

    pip install "streamlog[spark]"     # pyspark, pyarrow; needs Java 17
    python examples/spark_batch.py

Spark starts its Python workers with $PYSPARK_PYTHON, so this script points
it at its own interpreter (the one with streamlog installed) before the
SparkSession starts.
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


def main():
    root = tempfile.mkdtemp(prefix="spark-batch-")
    try:
        run(os.path.join(root, "db"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(path):
    with streamlog.open(path) as db:
        db.create_topic("orders", partitions=3)
        db.create_topic("revenue", partitions=1)
        producer = db.producer()
        for i in range(3000):
            order = {"order": i, "customer": f"c{i % 7}", "amount": (i * 37) % 100 + 1}
            producer.send("orders", key=order["customer"].encode(),
                          value=json.dumps(order).encode(), headers=[("source", b"web")])
        producer.flush()
    print(f"appended 3000 orders to {path} (topic 'orders', 3 partitions)")

    # configure(): reads decode segment files in the JVM (compiled once with javac)
    spark = (configure(SparkSession.builder.master("local[2]").appName("streamlog-batch"))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)  # not needed when PySpark discovers pyspark_streamlog; harmless then

    orders = (spark.read.format("streamlog").option("subscribe", "orders")
              .option("includeHeaders", "true").load(path))
    print("schema:", orders.schema.simpleString())
    print("records per partition:",
          {r.partition: r["count"] for r in orders.groupBy("partition").count().collect()})

    parsed = orders.select(F.from_json(F.col("value").cast("string"),
                                       "customer STRING, amount INT").alias("o")).select("o.*")
    totals = parsed.groupBy("customer").agg(F.sum("amount").alias("revenue")).orderBy("customer")
    print("revenue per customer:", [(r.customer, r.revenue) for r in totals.collect()])

    # Offsets in Kafka's JSON shape: the first 10 records of partition 0 only.
    first = (spark.read.format("streamlog").option("assign", '{"orders": [0]}')
             .option("endingOffsets", '{"orders": {"0": 10}}').load(path))
    print("offsets 0..9 of orders-0:", [r.offset for r in first.orderBy("offset").collect()])

    # Write the totals back as a topic: executors stage files, the driver appends them.
    (totals.select(F.col("customer").alias("key"), F.to_json(F.struct("*")).alias("value"))
     .write.format("streamlog").mode("append").option("topic", "revenue").save(path))
    back = spark.read.format("streamlog").option("subscribe", "revenue").load(path)
    print(f"wrote {back.count()} records to topic 'revenue'; first:",
          back.orderBy("offset").first().value.decode())
    spark.stop()


if __name__ == "__main__":
    main()
