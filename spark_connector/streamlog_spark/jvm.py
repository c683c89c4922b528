"""The JVM reader: its jar, built from the Java sources shipped here, and the session setting
that puts it on Spark's classpath.

With the jar on the classpath, format("streamlog") resolves to the JVM class
streamlog.DefaultSource, which fronts the Python data source: options,
planning, stream offsets and writing stay in Python, and only the executors'
side of reads (batch and micro-batch) runs in the JVM, decoding segment files
into Spark's column vectors (java/streamlog/*.java; docs/SPARK.md, "The JVM
reader"). Without it every read goes through Python workers, with the same
results, slower.

    from streamlog_spark import jvm
    spark = jvm.configure(SparkSession.builder.master("local[2]")).getOrCreate()

The jar is compiled once per source version and pyspark version with the
JDK's javac, against the jars pyspark ships, into the user's cache directory
($STREAMLOG_CACHE_DIR, else $XDG_CACHE_HOME/streamlog, else ~/.cache/streamlog).
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

JAVA_SOURCES = Path(__file__).parent / "java"
# Session setting read by the JVM scan: "false" routes reads through Python executors again.
ENABLED_CONF = "spark.streamlog.jvmReader.enabled"


class JvmReaderUnavailable(RuntimeError):
    """The jar cannot be built here (no JDK, or javac failed); reads stay in Python."""


def jar_path():
    """The path of the reader's jar, compiled first if this version has no jar yet."""
    import pyspark

    sources = sorted(JAVA_SOURCES.rglob("*.java"))
    digest = hashlib.sha256(pyspark.__version__.encode())
    for source in sources:
        digest.update(source.relative_to(JAVA_SOURCES).as_posix().encode())
        digest.update(source.read_bytes())
    jar = _cache_dir() / f"streamlog-spark-{digest.hexdigest()[:16]}.jar"
    if not jar.exists():
        _build(jar, sources, Path(pyspark.__file__).parent / "jars")
    return str(jar)


def configure(builder):
    """builder with the JVM reader's jar added to spark.jars; unchanged (with a warning) when
    the jar cannot be built here."""
    try:
        jar = jar_path()
    except JvmReaderUnavailable as e:
        warnings.warn(f"streamlog: reads will run in Python workers: {e}", stacklevel=2)
        return builder
    existing = [j for j in getattr(builder, "_options", {}).get("spark.jars", "").split(",") if j]
    if jar in existing:
        return builder   # configured already
    return builder.config("spark.jars", ",".join([*existing, jar]))


def _cache_dir():
    explicit = os.environ.get("STREAMLOG_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "streamlog"


def _javac():
    home = os.environ.get("JAVA_HOME")
    candidates = [os.path.join(home, "bin", "javac")] if home else []
    candidates += [os.path.join(d, "javac") for d in os.environ.get("PATH", "").split(os.pathsep)]
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise JvmReaderUnavailable("no javac found (install a JDK 17+ or set JAVA_HOME)")


def _build(jar, sources, spark_jars):
    javac = _javac()
    jar.parent.mkdir(parents=True, exist_ok=True)
    print(f"streamlog: compiling the JVM reader into {jar} (once per version) ...",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="streamlog-javac-") as classes:
        done = subprocess.run(
            [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8",
             "-cp", str(spark_jars / "*"), "-d", classes, *map(str, sources)],
            capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise JvmReaderUnavailable(f"javac failed:\n{done.stderr.strip()}")
        # Written aside and renamed: two processes building at once each leave a whole jar.
        fd, partial = tempfile.mkstemp(dir=jar.parent, suffix=".jar.tmp")
        os.close(fd)
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
                for path in sorted(Path(classes).rglob("*.class")):
                    z.write(path, path.relative_to(classes).as_posix())
            os.replace(partial, jar)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
