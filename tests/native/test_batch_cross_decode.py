"""A batch written with the native path decodes with the Python path and vice versa.

The library binds one codec per process, so the other side runs in a
subprocess with STREAMLOG_NO_NATIVE=1 (or without it).
"""
import os
import subprocess
import sys

import pytest

from streamlog import native
from streamlog.storage import codec
from streamlog.storage.record_batch import RecordBatch, build_batch

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason=str(native.UNAVAILABLE_REASON))

SCRIPT = r"""
import sys
from streamlog.storage import codec
from streamlog.storage.record_batch import RecordBatch, build_batch
mode = sys.argv[1]
if mode == "write":
    b = build_batch([b"v%d" % i for i in range(300)] + [None], keys=[None] + [b"k"] * 300,
                    headers=[[("h", b"%d" % i)] if i % 3 == 0 else [] for i in range(301)],
                    timestamps=list(range(1000, 1301)))
    sys.stdout.buffer.write(bytes(b))
else:
    recs = list(RecordBatch(sys.stdin.buffer.read()).records())
    print(codec.implementation(), repr(recs))
"""


def run(mode, native_on, stdin=None):
    env = dict(os.environ)
    env.pop("STREAMLOG_NO_NATIVE", None)
    if not native_on:
        env["STREAMLOG_NO_NATIVE"] = "1"
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], input=stdin, env=env,
                          capture_output=True, check=True).stdout


def expected():
    b = build_batch([b"v%d" % i for i in range(300)] + [None], keys=[None] + [b"k"] * 300,
                    headers=[[("h", b"%d" % i)] if i % 3 == 0 else [] for i in range(301)],
                    timestamps=list(range(1000, 1301)))
    return bytes(b), repr(list(RecordBatch(b).records()))


def test_both_codecs_write_the_same_bytes():
    assert codec.NATIVE
    assert run("write", True) == run("write", False) == expected()[0]


@pytest.mark.parametrize("writer,reader", [(True, False), (False, True)])
def test_written_by_one_read_by_the_other(writer, reader):
    data = run("write", writer)
    out = run("read", reader, stdin=data).decode()
    impl, recs = out.split(" ", 1)
    assert impl == ("native" if reader else "python")
    assert recs.strip() == expected()[1]
