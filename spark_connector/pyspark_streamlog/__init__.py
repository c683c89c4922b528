"""Auto-discovery of the "streamlog" data source by PySpark.

PySpark imports every top-level module whose name starts with `pyspark_` and
registers its `DefaultSource` under `DefaultSource.name()`, so with this
package installed spark.read.format("streamlog") works without
spark.dataSource.register(). It holds nothing else: the source lives in
streamlog_spark.
"""
from streamlog_spark import StreamlogDataSource as DefaultSource

__all__ = ["DefaultSource"]
