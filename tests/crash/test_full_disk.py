"""A full file system: typed errors, never a signal, and nothing acknowledged lost.

The reported case: producing into a small tmpfs until it filled failed the append cleanly, but
the next close or open died with SIGBUS, touching a hole of a sparse preallocated index through
its map. Two ways to fill a disk, each in a child process (a signal must not take pytest down):
a real 8 MiB tmpfs where this process may mount one (root; CI runs as root), and
RLIMIT_FSIZE, which any process can set on itself (writes past it fail with EFBIG).
"""
import inspect
import json
import os
import subprocess

import pytest

import streamlog
from streamlog.storage.verify import verify_directory

from support.child import run_py

VALUE_BYTES = 1000

FILL = """
    import json, resource, signal, sys, streamlog
    root, limit = sys.argv[1], int(sys.argv[2])
    if limit:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    db = streamlog.open(root)
    db.create_topic("t", partitions=2)
    producer = db.producer(acks="all")
    acked, n = [], 0
    try:
        while True:
            md = producer.send("t", value=b"%08d" % n + b"." * 992, partition=n % 2).result()
            acked.append([md.partition, md.offset, n])
            n += 1
    except streamlog.StreamlogError as exc:
        failure = f"{type(exc).__name__}: {exc}"
    try:
        db.close()
        closed = "closed"
    except streamlog.StreamlogError as exc:
        closed = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"acked": acked, "failure": failure, "closed": closed}))
"""

OPEN_WRITABLE = """
    import sys, streamlog
    try:
        with streamlog.open(sys.argv[1]) as db:
            print("opened", [p.high_watermark for p in db.describe_topic("t").partitions])
    except streamlog.StreamlogError as exc:
        print(type(exc).__name__, exc)
"""

def read_all(db):
    """Every record of topic t, up to each partition's high watermark."""
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([streamlog.TopicPartition("t", p) for p in (0, 1)])
    total = sum(p.high_watermark for p in db.describe_topic("t").partitions)
    out = []
    while len(out) < total:
        records = consumer.poll(timeout=5.0)
        if not records:
            raise AssertionError("records below the high watermark did not come")
        out.extend(records)
    consumer.close()
    return out


# The read-only child reads with the same function (given its source).
READ_ONLY = "import json, sys, streamlog\n" + inspect.getsource(read_all) + """
with streamlog.open(sys.argv[1], readonly=True) as db:
    print(json.dumps(sorted([r.partition, r.offset, int(r.value[:8])] for r in read_all(db))))
"""


def fill(root, limit=0):
    result = run_py(FILL, root, str(limit), timeout=300)
    assert result.returncode == 0, f"the writer died with {result.returncode}: {result.stderr}"
    outcome = json.loads(result.stdout)
    assert outcome["failure"].startswith("KafkaStorageError"), outcome["failure"]
    assert root in outcome["failure"]
    assert "disk full" in outcome["failure"] or "File too large" in outcome["failure"]
    assert outcome["acked"], "nothing was written before the disk filled"
    return outcome


def assert_everything_acknowledged_is_there(root, acked):
    with streamlog.open(root) as db:
        records = read_all(db)
        assert sorted([r.partition, r.offset, int(r.value[:8])] for r in records) == \
            sorted(acked)
        assert all(r.value == b"%08d" % int(r.value[:8]) + b"." * 992 for r in records)
        db.producer(acks="all").send("t", value=b"after", partition=0).result()
    assert verify_directory(root).ok


@pytest.fixture
def small_tmpfs(tmp_path):
    mount_point = str(tmp_path / "fs")
    os.mkdir(mount_point)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mount_point],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the RLIMIT_FSIZE "
                    "test covers a full disk without one")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", mount_point], check=False)


def test_a_full_tmpfs_fails_appends_cleanly_and_every_open_survives(small_tmpfs):
    root = os.path.join(small_tmpfs, "db")
    outcome = fill(root)
    # Close on a full disk may fail (the checkpoints cannot be written): typed, not a signal.
    assert outcome["closed"] == "closed" or outcome["closed"].startswith("KafkaStorageError")
    opened = run_py(OPEN_WRITABLE, root)
    assert opened.returncode == 0, f"open died with {opened.returncode}: {opened.stderr}"
    assert opened.stdout.startswith(("opened", "KafkaStorageError")), opened.stdout
    readonly = run_py(READ_ONLY, root)
    assert readonly.returncode == 0, f"read-only open died: {readonly.stderr}"
    assert json.loads(readonly.stdout) == sorted(outcome["acked"])
    subprocess.run(["mount", "-o", "remount,size=64m", small_tmpfs], check=True)
    assert_everything_acknowledged_is_there(root, outcome["acked"])


def test_a_file_size_limit_fails_appends_cleanly_and_loses_nothing_acknowledged(tmp_path):
    root = str(tmp_path / "db")
    outcome = fill(root, limit=3 << 20)
    assert outcome["closed"] == "closed" or outcome["closed"].startswith("KafkaStorageError")
    assert_everything_acknowledged_is_there(root, outcome["acked"])
