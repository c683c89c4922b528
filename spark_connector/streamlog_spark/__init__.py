"""streamlog_spark: a PySpark (4.x) Python DataSource named "streamlog".

Reads topics into DataFrames (batch and Structured Streaming) with the
columns and option names of Spark's own Kafka source, and writes DataFrames
into topics. Install with `pip install "streamlog[spark]"`, then either

    spark.dataSource.register(StreamlogDataSource)

or rely on the `pyspark_streamlog` module, which PySpark discovers by itself.
Reads run several times faster with the JVM reader on the classpath:
build the session with `configure(SparkSession.builder...)` (jvm.py).
Spark's workers run $PYSPARK_PYTHON: set it to the interpreter that has
streamlog installed before the SparkSession starts. docs/SPARK.md has the
options and semantics.
"""
from .jvm import configure
from .source import StreamlogDataSource

__all__ = ["StreamlogDataSource", "configure"]
