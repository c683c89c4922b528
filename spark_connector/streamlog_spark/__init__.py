"""streamlog_spark: a PySpark (4.x) Python DataSource named "streamlog".

Reads topics into DataFrames (batch and Structured Streaming) with the
columns and option names of Spark's own Kafka source, and writes DataFrames
into topics. Install with `pip install "streamlog[spark]"`, then

    spark = configure(SparkSession.builder...).getOrCreate()   # + the JVM reader (jvm.py)
    register(spark)                                            # harmless to repeat

register() is needed only where PySpark's own discovery of the
`pyspark_streamlog` module cannot see it (an editable install); it never
hurts (session.py says why Spark's spark.dataSource.register() refuses the
name once the JVM reader is on the classpath).
Spark's workers run $PYSPARK_PYTHON: set it to the interpreter that has
streamlog installed before the SparkSession starts. docs/SPARK.md has the
options and semantics.
"""
from .jvm import configure
from .session import register
from .source import StreamlogDataSource

__all__ = ["StreamlogDataSource", "configure", "register"]
