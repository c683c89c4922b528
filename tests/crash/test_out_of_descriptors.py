"""Running out of file descriptors at random points: only typed errors, nothing half-made.

A child process lowers RLIMIT_NOFILE to a small seeded value and lifts the database's own bound
(max.open.files=-1), so EMFILE strikes wherever a descriptor is next needed: opening the
database, creating a topic of many partitions, appending, rolling, fetching, deleting, closing.
Every exception it sees must be a StreamlogError (KafkaStorageError naming the limit and the
fix), never a bare OSError. Then, with the limit back, the database must open and verify, and:
  - create_topic is all or nothing: a topic is either absent or has every partition directory;
    one whose create_topic returned is there with all of them (unless deleted after);
  - every record whose send() completed is read back at its offset, byte for byte.

STREAMLOG_EMFILE_SEED sets the seed (fixed by default, `random` draws one; printed), STREAMLOG_EMFILE_RUNS sets
how many children (default 6).
"""
import json
import os

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.storage.verify import verify_directory

from support import seeds
from support.child import run_py

CHILD = r"""
import json, random, resource, sys
seed, root = int(sys.argv[1]), sys.argv[2]
rng = random.Random(seed)
import streamlog
from streamlog import StreamlogError, TopicPartition
limit = rng.randint(24, 72)
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
out = {"limit": limit, "errors": [], "created": [], "failed_creates": [], "deleted": [],
       "acked": []}


def note(exc, where):
    out["errors"].append({"where": where, "type": type(exc).__module__ + "." + type(exc).__name__,
                          "typed": isinstance(exc, StreamlogError), "message": str(exc)[:400]})


db = None
for attempt in range(3):
    try:
        db = streamlog.open(root, config={"max.open.files": -1, "segment.bytes": 400,
                                          "offsets.topic.num.partitions": 3})
        break
    except Exception as exc:
        note(exc, "open")
if db is not None:
    topics = {}
    producer = None
    for step in range(60):
        op = rng.choice(["create", "send", "send", "send", "read", "delete"])
        try:
            if op == "create":
                name, count = f"t{step}", rng.randint(1, 12)
                try:
                    db.create_topic(name, partitions=count)
                except Exception:
                    out["failed_creates"].append(name)
                    raise
                topics[name] = count
                out["created"].append([name, count])
            elif op == "send" and topics:
                name = rng.choice(sorted(topics))
                p = rng.randrange(topics[name])
                producer = producer or db.producer(acks=1, linger_ms=0)
                value = b"%d-%d" % (seed, step)
                md = producer.send(name, value=value, partition=p).result()
                out["acked"].append([name, p, md.offset, value.hex()])
            elif op == "read" and topics:
                consumer = db.consumer(auto_offset_reset="earliest")
                try:
                    consumer.assign([TopicPartition(n, q) for n in topics for q in range(topics[n])])
                    consumer.poll(timeout=0.05)
                finally:
                    consumer.close()
            elif op == "delete" and topics:
                name = rng.choice(sorted(topics))
                db.delete_topic(name)
                del topics[name]
                out["deleted"].append(name)
        except Exception as exc:
            note(exc, op)
    try:
        if producer is not None:
            producer.close()
        db.close()
    except Exception as exc:
        note(exc, "close")
print("RESULT " + json.dumps(out), flush=True)
"""


def run_child(seed, root):
    child = run_py(CHILD, str(seed), root, timeout=300)
    lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
    assert child.returncode == 0 and lines, \
        f"seed {seed}: exit {child.returncode}: {child.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def test_emfile_anywhere_is_a_typed_error_and_leaves_a_database_that_opens(tmp_path):
    master = seeds.master_seed("STREAMLOG_EMFILE_SEED")
    runs = int(os.environ.get("STREAMLOG_EMFILE_RUNS", 6))
    struck = 0
    for run in range(runs):
        seed = master + run
        root = str(tmp_path / f"db-{run}")
        seen = run_child(seed, root)
        untyped = [e for e in seen["errors"] if not e["typed"]]
        assert not untyped, f"seed {seed}: untyped errors {untyped[:3]}"
        struck += sum("Too many open files" in e["message"] for e in seen["errors"])
        if not os.path.isdir(os.path.join(root, "__cluster_metadata-0")):
            continue   # the very first open failed before making the database
        report = verify_directory(root)
        assert report.ok, f"seed {seed}: verify: {[str(p) for p in report.problems[:5]]}"
        with streamlog.open(root) as db:
            names = set(db.topics())
            for name in set(seen["failed_creates"]) & names:
                # The rollback's own tombstone may have failed: then the topic is whole.
                count = len(db.describe_topic(name).partitions)
                dirs = [p for p in range(count)
                        if os.path.isdir(os.path.join(root, f"{name}-{p}"))]
                assert dirs == list(range(count)), f"seed {seed}: {name} half-created"
            for name in set(seen["failed_creates"]) - names:
                assert not any(n.startswith(name + "-") for n in os.listdir(root)), \
                    f"seed {seed}: a failed create_topic left directories of {name}"
            for name, count in seen["created"]:
                if name not in seen["deleted"]:
                    assert len(db.describe_topic(name).partitions) == count, f"seed {seed}"
            consumer = db.consumer(enable_auto_commit=False)
            for name, partition, offset, value in seen["acked"]:
                if name in seen["deleted"]:
                    continue
                tp = TopicPartition(name, partition)
                consumer.assign([tp])
                consumer.seek(tp, offset)
                records = []
                for _ in range(20):
                    records = consumer.poll(timeout=0.5)
                    if records:
                        break
                assert records and records[0].offset == offset and \
                    records[0].value == bytes.fromhex(value), f"seed {seed}: {tp}@{offset}"
            consumer.close()
    if struck == 0:
        pytest.fail(f"STREAMLOG_EMFILE_SEED={master}: no run ran out of descriptors; the limits "
                    "drawn were too high to test anything")


CREATE_TOO_MANY = r"""
import os, resource, sys
import streamlog
root = sys.argv[1]
db = streamlog.open(root, config={"max.open.files": -1})
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
try:
    db.create_topic("big", partitions=100)   # a descriptor a partition with no bound
    print("created")
except streamlog.KafkaStorageError as exc:
    print("refused:", exc)
print("topics:", db.topics())
print("dirs:", sorted(n for n in os.listdir(root) if n.startswith("big-")))
db.close()
"""


def test_a_create_topic_that_runs_out_of_descriptors_leaves_no_topic_and_no_directory(tmp_path):
    root = str(tmp_path / "db")
    child = run_py(CREATE_TOO_MANY, root)
    assert child.returncode == 0, child.stderr[-3000:]
    lines = child.stdout.splitlines()
    assert lines[0].startswith("refused: cannot ") and "/big-" in lines[0] and \
        "Too many open files" in lines[0] and "ulimit -n" in lines[0], child.stdout
    assert lines[1:] == ["topics: []", "dirs: []"]
    with streamlog.open(root) as db:   # and with the limit back, the database opens
        assert db.topics() == []
        db.create_topic("big", partitions=100)
        assert len(db.describe_topic("big").partitions) == 100
