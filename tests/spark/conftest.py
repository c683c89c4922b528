"""One local SparkSession for every Spark test, and the shared database the reads use.

Spark starts its Python workers (planners, executors, the streaming source
runner) with $PYSPARK_PYTHON, not with this interpreter and not with
spark.pyspark.python, so both variables are pinned to sys.executable before
the JVM starts. Without pyspark or Java the directory is skipped, so the
plain `pip install -e ".[test]"` run stays green; .ci/run installs the
[spark] extra and runs these with `-m spark`.
"""
import os
import pkgutil
import shutil
import sys

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError:
    collect_ignore_glob = ["test_*.py"]  # the [spark] extra is not installed
else:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        collect_ignore_glob = ["test_*.py"]

from spark.events_data import EVENTS, event_headers, event_key, event_timestamp  # noqa: E402
from support import wait_until  # noqa: E402

import streamlog  # noqa: E402


@pytest.fixture(scope="session")
def events_db(tmp_path_factory):
    """(path, expected) with expected = [(partition, offset, key, value, ts_ms, headers)]."""
    path = str(tmp_path_factory.mktemp("sparkdb") / "db")
    expected = []
    with streamlog.open(path) as db:
        db.create_topic("events", partitions=3)
        for name in ("pat-a", "pat-b", "other"):
            db.create_topic(name, partitions=2)
        producer = db.producer()
        for i in range(EVENTS):
            key = event_key(i)
            value = b"value-%d" % i
            md = producer.send("events", value=value, key=key, partition=i % 3,
                               timestamp_ms=event_timestamp(i), headers=event_headers(i)).result()
            expected.append((md.partition, md.offset, key, value, event_timestamp(i),
                             event_headers(i)))
        for name in ("pat-a", "pat-b", "other"):
            producer.send_batch(name, [b"%s-%d" % (name.encode(), i) for i in range(6)],
                                partition=0)
        producer.flush()
    return path, expected


@pytest.fixture(scope="session")
def retained_db(tmp_path_factory):
    """(path, log_start): topic "r", 1 partition, offsets 0..19, whose first records were
    removed by retention (log_start > 0)."""
    path = str(tmp_path_factory.mktemp("retained") / "db")
    with streamlog.open(path, config={"log.retention.check.interval.ms": 20}) as db:
        db.create_topic("r", partitions=1, config={"segment.bytes": 200,
                                                   "retention.bytes": 300})
        producer = db.producer()
        for i in range(20):
            producer.send("r", value=b"%02d" % i + b"x" * 48).result()
            producer.flush()
        assert wait_until(lambda: db.describe_topic("r").partitions[0].log_start_offset > 0,
                          timeout_s=30), "retention did not run"
    # Read after the close: retention may have removed more before the database closed.
    with streamlog.open(path, readonly=True) as db:
        log_start = db.describe_topic("r").partitions[0].log_start_offset
    return path, log_start


def _discoverable():
    return any(m.name == "pyspark_streamlog" for m in pkgutil.iter_modules())


@pytest.fixture(scope="session")
def spark(tmp_path_factory, events_db):
    from pyspark.sql import SparkSession
    from streamlog_spark import jvm

    # The JVM reader is on the classpath, so reads take it unless a test turns it off
    # (python_reader); jar_path() raises rather than let the suite fall back to Python unseen.
    session = (SparkSession.builder.master("local[2]").appName("streamlog-tests")
               .config("spark.jars", jvm.jar_path())
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    # Auto-discovery happens once per session, at the first use of a Python data source, so
    # it is exercised here, before any register() could hide it (see test_discovery).
    session.streamlog_discovered = None
    if _discoverable():
        path, _ = events_db
        session.streamlog_discovered = (session.read.format("streamlog")
                                        .option("subscribe", "events").load(path).count())
    else:
        from streamlog_spark import register
        register(session)
    yield session
    session.stop()


@pytest.fixture
def pushdown(spark):
    """Spark's switch for Python filter pushdown, on for one test."""
    key = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(key, "true")
    yield
    spark.conf.set(key, "false")


@pytest.fixture
def python_reader(spark):
    """Batch reads through the Python data source's own executors, for one test."""
    from streamlog_spark.jvm import ENABLED_CONF

    spark.conf.set(ENABLED_CONF, "false")
    yield
    spark.conf.unset(ENABLED_CONF)


@pytest.fixture
def fresh_db(tmp_path):
    """A new empty database directory for tests that change what is in it."""
    return str(tmp_path / "db")


@pytest.fixture
def consumer_isolation_levels(monkeypatch):
    """A list that gets the isolation level of every consumer this process opens from now on.

    Executors run in other processes, where no spy reaches: tests that use this
    call the reader's read() in-process, as Spark's executor worker does.
    """
    levels = []
    real_consumer = streamlog.Database.consumer

    def consumer(self, config=None, **settings):
        made = real_consumer(self, config, **settings)
        levels.append(made.settings["isolation.level"])
        return made

    monkeypatch.setattr(streamlog.Database, "consumer", consumer)
    return levels
