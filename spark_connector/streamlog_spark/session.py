"""Putting the "streamlog" data source on a SparkSession: register(spark).

Spark knows a Python data source by name once it is registered on the session, or once its
discovery scan finds a top-level `pyspark_*` module exposing one (pyspark_streamlog). Neither
is enough alone:

  - `spark.dataSource.register(cls)` refuses any name that a JVM class also answers to
    (DATA_SOURCE_ALREADY_EXISTS), and with the JVM reader on the classpath
    (`configure()`), `streamlog.DefaultSource` answers to "streamlog". That class fronts this
    very Python source, so the refusal guards nothing here.
  - The discovery scan (pkgutil.iter_modules over sys.path) does not see modules served by an
    import hook, which is how a default editable install (`pip install -e`) serves this
    project's two source trees.

register(spark) puts StreamlogDataSource into the session's data-source manager directly (the
step Spark's register() takes after its name check), unless the session already has a
"streamlog" Python source (found by discovery, or registered before): calling it twice, or
after discovery, changes nothing. It works with and without the JVM reader, under every kind
of install.
"""
from .source import StreamlogDataSource

_UDPDS = "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource"


def register(spark):
    """Make format("streamlog") available on `spark`; harmless to repeat. Returns spark."""
    from pyspark.sql.udf import _wrap_function

    name = StreamlogDataSource.name()
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    if manager.dataSourceExists(name):
        return spark
    # The class is pickled by reference (streamlog_spark is importable wherever
    # $PYSPARK_PYTHON runs), as Spark's own register() pickles it.
    wrapped = _wrap_function(spark.sparkContext, StreamlogDataSource)
    jvm = spark.sparkContext._jvm
    manager.registerDataSource(name, getattr(jvm, _UDPDS)(wrapped))
    return spark
