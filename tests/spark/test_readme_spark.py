"""The README's Spark lines, run as written, after the README's own install.

The reported case: after `pip install -e ".[spark]"` (a plain editable install), the README's
`spark.dataSource.register(StreamlogDataSource)` raised DATA_SOURCE_ALREADY_EXISTS (the JVM
reader's class answers to the name) and the read after it DATA_SOURCE_NOT_EXIST (PySpark's
discovery does not see modules an editable install serves through an import hook).

Each interpreter runs the README's ```py block under "## Spark" in a fresh directory holding
the `data/` database the README's CLI walkthrough makes. This test's own interpreter has the
README's editable install (.ci/run); STREAMLOG_WHEEL_PYTHON, when set, names an interpreter
with the wheel installed instead (.ci/run builds one), which runs the block too.
"""
import glob
import os
import re
import subprocess
import sys

import pytest

import streamlog

pytestmark = pytest.mark.spark

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
RECORDS = 100


def readme_spark_block():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    found = re.search(r"^## Spark\n.*?^```py\n(.*?)^```", text, re.S | re.M)
    assert found, "README.md has no ```py block under '## Spark'"
    return found.group(1)


def user_env():
    """The environment a user's program starts with: not the PYSPARK_* settings this test
    session made for its own interpreter (the README's lines set what they need)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}


def interpreters():
    found = [pytest.param(sys.executable, id="this-install")]
    wheel = os.environ.get("STREAMLOG_WHEEL_PYTHON")
    if wheel:
        found.append(pytest.param(wheel, id="wheel"))
    return found


@pytest.mark.parametrize("python", interpreters())
def test_the_readme_spark_lines_run_as_written(tmp_path, python):
    with streamlog.open(str(tmp_path / "data")) as db:
        db.create_topic("events", partitions=2)
        db.producer().send_batch("events", [b"v%d" % i for i in range(RECORDS)],
                                 keys=[b"k%d" % i for i in range(RECORDS)]).result()
    run = subprocess.run([python, "-c", readme_spark_block()], cwd=tmp_path, text=True,
                         capture_output=True, timeout=600, env=user_env())
    assert run.returncode == 0, run.stderr[-4000:]
    with streamlog.open(str(tmp_path / "data"), readonly=True) as db:
        copied = db.describe_topic("copy").partitions
        assert sum(p.high_watermark for p in copied) == RECORDS  # the write
    import pyarrow.parquet as pq
    parts = glob.glob(str(tmp_path / "out" / "part-*.parquet"))
    assert sum(pq.read_metadata(p).num_rows for p in parts) == RECORDS  # the stream


def test_register_is_harmless_to_repeat_and_after_discovery(spark, events_db):
    from streamlog_spark import register
    path, _ = events_db
    before = spark.read.format("streamlog").option("subscribe", "events").load(path).count()
    assert register(spark) is spark
    register(spark)
    assert spark.read.format("streamlog").option("subscribe", "events").load(path).count() == \
        before


DISCOVERY = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").getOrCreate()   # no configure(), no register()
print(spark.read.format("streamlog").option("subscribe", "events").load("data/").count())
"""


@pytest.mark.skipif(not os.environ.get("STREAMLOG_WHEEL_PYTHON"),
                    reason="STREAMLOG_WHEEL_PYTHON names no interpreter with the wheel installed "
                           "(.ci/run makes one)")
def test_a_wheel_install_is_found_by_pysparks_discovery_alone(tmp_path):
    """Installed from a wheel, pyspark_streamlog sits on sys.path, where PySpark's scan for
    pyspark_* modules finds it: format("streamlog") works with no register() at all."""
    with streamlog.open(str(tmp_path / "data")) as db:
        db.create_topic("events")
        db.producer().send_batch("events", [b"v%d" % i for i in range(RECORDS)]).result()
    run = subprocess.run([os.environ["STREAMLOG_WHEEL_PYTHON"], "-c", DISCOVERY], cwd=tmp_path,
                         text=True, capture_output=True, timeout=600, env=user_env())
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.strip().splitlines()[-1] == str(RECORDS)
