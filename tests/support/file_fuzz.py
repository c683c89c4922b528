"""Helpers of tests/fuzz/test_file_fuzz.py: the reference database, the file kinds and
mutations, the child that opens a damaged copy, and the classification of what it saw.

A case is (file kind, mutation, seed). Its seed alone decides which file of the kind is
damaged and where, so `choose(kind, mutation, seed, files)` then `apply(case, root)` on a copy
of the same reference database redo exactly the same damage.
"""
import json
import os
import random
import shutil
import subprocess
from dataclasses import dataclass, field

from support.child import run_py

TOPIC = "t"
PARTITIONS = 2
RECORDS_PER_PARTITION = 150
RECORDS_PER_BATCH = 4
GROUP = "g"
OFFSETS_TOPIC_PARTITIONS = 2
# Small segments and a small index interval: every partition of the topic gets sealed
# segments and an active one, each with index entries, so every file kind has bytes to damage.
TOPIC_CONFIG = {"segment.bytes": 2048, "index.interval.bytes": 200}
BASE_TIMESTAMP_MS = 1_700_000_000_000
# (offset of t-0, offset of t-1) of each commit, in order: a cut __consumer_offsets log may
# fall back to any earlier one, never to a value that was not committed.
COMMITS = [(5, 7), (40, 61), (133, 150)]

# The child gives up on a poll that makes no progress after this many empty polls in a row
# (0.05 s each), and the parent on the whole child after CHILD_TIMEOUT_S: either is a stall.
STUCK_POLLS = 40
CHILD_TIMEOUT_S = 60

OUTCOMES = ("intact", "cut", "typed error", "failure")


def value_of(partition, i):
    return b"t-%d-%06d" % (partition, i)


def key_of(i):
    return b"k%d" % i


# --- the reference database -----------------------------------------------------------------


def build_reference(root):
    """Write the reference database through the public API and close it cleanly."""
    import streamlog
    from streamlog import TopicPartition

    with streamlog.open(root, config={"offsets.topic.num.partitions":
                                      OFFSETS_TOPIC_PARTITIONS}) as db:
        db.create_topic(TOPIC, partitions=PARTITIONS, config=TOPIC_CONFIG)
        producer = db.producer(acks="all", linger_ms=0)
        for start in range(0, RECORDS_PER_PARTITION, RECORDS_PER_BATCH):
            span = range(start, min(start + RECORDS_PER_BATCH, RECORDS_PER_PARTITION))
            for p in range(PARTITIONS):
                producer.send_batch(TOPIC, [value_of(p, i) for i in span],
                                    keys=[key_of(i) for i in span], partition=p,
                                    timestamps=[BASE_TIMESTAMP_MS + i for i in span]).result()
        producer.flush()
        consumer = db.consumer(group_id=GROUP, enable_auto_commit=False)
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        for offsets in COMMITS:
            consumer.commit(offsets=dict(zip(tps, offsets, strict=True)))
        consumer.close()


def expected_records():
    """{partition: [[offset, timestamp, key hex, value hex], ...]} as the child reports them."""
    return {str(p): [[i, BASE_TIMESTAMP_MS + i, key_of(i).hex(), value_of(p, i).hex()]
                     for i in range(RECORDS_PER_PARTITION)] for p in range(PARTITIONS)}


def commit_history():
    """Every committed-offsets state the group went through, oldest first ({} = none)."""
    states = [{}]
    for offsets in COMMITS:
        states.append({str(p): o for p, o in enumerate(offsets)})
    return states


def inventory(root):
    """{relative path: size} of every file of the database."""
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            out[os.path.relpath(path, root)] = os.path.getsize(path)
    return dict(sorted(out.items()))


# --- file kinds ---------------------------------------------------------------------------------


def _segment_logs(files, directory_prefix):
    """{partition dir: sorted .log paths} of the directories starting with the prefix."""
    out = {}
    for path in files:
        directory, name = os.path.split(path)
        if directory.startswith(directory_prefix) and name.endswith(".log"):
            out.setdefault(directory, []).append(path)
    return {d: sorted(paths) for d, paths in out.items()}


def _topic_prefix(topic):
    return topic + "-"


def _sealed_logs(files):
    return [p for logs in _segment_logs(files, _topic_prefix(TOPIC)).values() for p in logs[:-1]]


def _active_logs(files):
    return [logs[-1] for logs in _segment_logs(files, _topic_prefix(TOPIC)).values()]


def _with_suffix(files, suffix):
    return [p for p in files if p.endswith(suffix)]


def _internal_logs(files, topic):
    # Only the partitions that hold records: an empty log has no bytes a mutation could damage,
    # and the group's offsets are all in one partition.
    return [p for p in _with_suffix(files, ".log")
            if p.startswith(topic + "-") and files[p] > 0]


# name -> what it selects, from {path: size} of the reference.
FILE_KINDS = {
    "sealed segment (.log)": _sealed_logs,
    "active segment (.log)": _active_logs,
    "offset index (.index)": lambda files: _with_suffix(files, ".index"),
    "time index (.timeindex)": lambda files: _with_suffix(files, ".timeindex"),
    "recovery-point-offset-checkpoint":
        lambda files: [p for p in files if p == "recovery-point-offset-checkpoint"],
    "log-start-offset-checkpoint":
        lambda files: [p for p in files if p == "log-start-offset-checkpoint"],
    "partition.metadata": lambda files: _with_suffix(files, "partition.metadata"),
    "topic.json": lambda files: _with_suffix(files, "topic.json"),
    ".clean-shutdown marker": lambda files: [p for p in files if p == ".clean-shutdown"],
    "LOCK": lambda files: [p for p in files if p == "LOCK"],
    "__cluster_metadata-0 (.log)": lambda files: _internal_logs(files, "__cluster_metadata"),
    "__consumer_offsets (.log)": lambda files: _internal_logs(files, "__consumer_offsets"),
}

# The kinds whose files hold records: only their damage may cut a log.
RECORD_KINDS = {"sealed segment (.log)", "active segment (.log)", "__cluster_metadata-0 (.log)",
                "__consumer_offsets (.log)"}


# --- mutations ------------------------------------------------------------------------------------
# Each takes (path, bytes of the file, rng) and returns (new bytes or None to delete, what it
# did). Those that need bytes to work on are listed in NEEDS_BYTES.


def _flip_byte(data, rng):
    pos = rng.randrange(len(data))
    mask = rng.randrange(1, 256)
    out = bytearray(data)
    out[pos] ^= mask
    return bytes(out), f"xor 0x{mask:02x} at byte {pos}"


def _flip_bytes(data, rng):
    out = bytearray(data)
    done = []
    for _ in range(rng.randint(2, 8)):
        pos = rng.randrange(len(data))
        mask = rng.randrange(1, 256)
        out[pos] ^= mask
        done.append(f"{pos}^0x{mask:02x}")
    return bytes(out), "xor at bytes " + ", ".join(done)


def _truncate(data, rng):
    size = rng.randrange(len(data))
    return data[:size], f"truncated from {len(data)} to {size} bytes"


def _zero_range(data, rng):
    start = rng.randrange(len(data))
    length = rng.randint(1, min(64, len(data) - start))
    return data[:start] + bytes(length) + data[start + length:], \
        f"zeroed bytes {start}..{start + length - 1}"


def _append_garbage(data, rng):
    garbage = rng.randbytes(rng.randint(1, 200))
    return data + garbage, f"appended {len(garbage)} random bytes"


def _delete(data, rng):
    return None, "deleted"


def _empty(data, rng):
    return b"", f"replaced with an empty file (was {len(data)} bytes)"


def _duplicate_range(data, rng):
    start = rng.randrange(len(data))
    length = rng.randint(1, min(256, len(data) - start))
    at = rng.randint(0, len(data))
    piece = data[start:start + length]
    return data[:at] + piece + data[at:], \
        f"copied bytes {start}..{start + length - 1} in again at byte {at}"


MUTATIONS = {
    "flip one byte": _flip_byte,
    "flip several bytes": _flip_bytes,
    "truncate": _truncate,
    "zero a range": _zero_range,
    "append garbage": _append_garbage,
    "delete": _delete,
    "replace with empty": _empty,
    "duplicate a range": _duplicate_range,
}
NEEDS_BYTES = {"flip one byte", "flip several bytes", "truncate", "zero a range",
               "replace with empty", "duplicate a range"}


@dataclass
class Case:
    kind: str
    mutation: str
    seed: int
    iteration: int = -1
    path: str = ""          # relative to the database root
    what: str = ""
    applicable: bool = True
    outcomes: dict = field(default_factory=dict)   # mode -> outcome
    failures: list = field(default_factory=list)   # strings
    seen: dict = field(default_factory=dict, repr=False)  # the child's result

    @property
    def scope(self):
        """The partition directory the damaged file belongs to ('' for a file of the root)."""
        return os.path.dirname(self.path)


def choose(kind, mutation, seed, files):
    """The Case of (kind, mutation, seed) on a database whose files are {path: size}."""
    rng = random.Random(f"{seed}:file")
    candidates = sorted(FILE_KINDS[kind](files))
    if mutation in NEEDS_BYTES:
        candidates = [p for p in candidates if files[p] > 0]
    case = Case(kind, mutation, seed)
    if not candidates:
        case.applicable = False
        return case
    case.path = rng.choice(candidates)
    return case


def apply(case, root):
    """Damage the copy at root as the case says (same seed, same damage)."""
    rng = random.Random(f"{case.seed}:mutation")
    path = os.path.join(root, case.path)
    with open(path, "rb") as f:
        data = f.read()
    new, case.what = MUTATIONS[case.mutation](data, rng)
    if new is None:
        os.unlink(path)
    else:
        with open(path, "wb") as f:
            f.write(new)


# --- the child ------------------------------------------------------------------------------------

CHILD = r"""
import hashlib, json, os, sys
root = sys.argv[1]
TOPIC, GROUP, STUCK_POLLS = sys.argv[2], sys.argv[3], int(sys.argv[4])
import streamlog
from streamlog import TopicPartition
from streamlog.errors import GroupIdNotFoundError, StreamlogError


def describe(exc):
    return {"type": type(exc).__name__, "module": type(exc).__module__,
            "typed": isinstance(exc, StreamlogError), "message": str(exc)[:1500]}


def snapshot():
    out = {}
    for directory, dirs, names in os.walk(root):
        for name in dirs:
            out[os.path.relpath(os.path.join(directory, name), root) + "/"] = "dir"
        for name in names:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = [st.st_size, st.st_mtime_ns, st.st_mode, digest]
    return out


def read_partition(db, tp):
    records = []
    consumer = db.consumer(auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning()
        end = consumer.end_offsets([tp])[tp]
        idle = 0
        while consumer.position(tp) < end:
            got = consumer.poll(timeout=0.05)
            idle = 0 if got else idle + 1
            for r in got:
                records.append([r.offset, r.timestamp, None if r.key is None else r.key.hex(),
                                None if r.value is None else r.value.hex()])
            if idle >= STUCK_POLLS:
                return {"records": records, "stuck": [consumer.position(tp), end]}
        return {"records": records}
    except Exception as exc:
        return {"records": records, "error": describe(exc)}
    finally:
        try:
            consumer.close()
        except Exception:
            pass


def read_db(readonly):
    out = {}
    try:
        db = streamlog.open(root, readonly=readonly)
    except Exception as exc:
        return {"open_error": describe(exc)}
    try:
        try:
            names = db.topics(internal=True)
            out["topics"] = {n: len(db.describe_topic(n).partitions) for n in names}
        except Exception as exc:
            out["topics_error"] = describe(exc)
        out["unexplained"] = sorted(os.path.relpath(p, root) for p in db.unexplained_paths)
        if "t" in out.get("topics", {}):
            out["partitions"] = {str(p): read_partition(db, TopicPartition(TOPIC, p))
                                 for p in range(out["topics"][TOPIC])}
        try:
            described = db.describe_group(GROUP)
            out["committed"] = {str(tp.partition): p.committed
                                for tp, p in described.partitions.items()
                                if p.committed is not None}
        except GroupIdNotFoundError:
            out["committed"] = {}
        except Exception as exc:
            out["committed_error"] = describe(exc)
    finally:
        try:
            db.close()
        except Exception as exc:
            out["close_error"] = describe(exc)
    return out


before = snapshot()
result = {"readonly": read_db(True)}
after = snapshot()
result["readonly_changed"] = sorted(k for k in set(before) | set(after)
                                    if before.get(k) != after.get(k))
result["writable"] = read_db(False)
final = snapshot()
result["writable_changed"] = sorted(k for k in set(after) | set(final)
                                    if after.get(k) != final.get(k))
print("RESULT " + json.dumps(result))
"""


def run_child(root):
    """What the child saw in the database at root: the parsed result, or {'failure': why}."""
    try:
        proc = run_py(CHILD, root, TOPIC, GROUP, str(STUCK_POLLS), timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"failure": f"stall: the child did not finish in {CHILD_TIMEOUT_S} s"}
    if proc.returncode < 0:
        return {"failure": f"the child died of signal {-proc.returncode}: {proc.stderr[-2000:]}"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"failure": f"the child exited {proc.returncode} without a result: "
                           f"{proc.stderr[-2000:]}"}
    return json.loads(lines[-1][len("RESULT "):])


# --- classification ---------------------------------------------------------------------------------


class Reference:
    """What the child sees in the untouched copy: every value below is compared with it."""

    def __init__(self, seen, files):
        self.seen = seen
        self.files = files
        self.records = expected_records()
        self.history = commit_history()
        self.committed = self.history[-1]
        self.topics = seen["writable"]["topics"]
        # Topics in the order the metadata log created them: a cut metadata log keeps a prefix.
        self.topic_history = [{}, {TOPIC: PARTITIONS},
                              {TOPIC: PARTITIONS, "__consumer_offsets": OFFSETS_TOPIC_PARTITIONS}]


def _names_damage(case, error):
    """A typed error must lead the user to the damage: the file or its partition directory."""
    message = error["message"]
    name = os.path.basename(case.path)
    return name in message or (case.scope and case.scope in message)


def _error_problem(case, error):
    if not error["typed"]:
        return f"untyped {error['module']}.{error['type']}: {error['message'][:300]}"
    if not _names_damage(case, error):
        return (f"{error['type']} does not name {case.path} or its directory: "
                f"{error['message'][:300]}")
    return None


def _first_difference(got, want):
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"record #{i} is {g}, expected {w}"
    if len(got) > len(want):
        return f"{len(got) - len(want)} record(s) beyond the reference, first {got[len(want)]}"
    return None


def classify_mode(case, ref, mode, seen, failures):
    """Outcome of one open (mode 'readonly' or 'writable'); appends what went wrong."""
    count = len(failures)

    def fail(text):
        failures.append(f"{mode}: {text}")

    if "open_error" in seen:
        problem = _error_problem(case, seen["open_error"])
        if problem:
            fail(f"open failed: {problem}")
        return "typed error"
    outcomes = set()
    for key in ("topics_error", "committed_error", "close_error"):
        if key in seen:
            problem = _error_problem(case, seen[key])
            if problem:
                fail(f"{key.replace('_', ' ')}: {problem}")
            outcomes.add("typed error")

    metadata_damaged = case.scope == "__cluster_metadata-0"
    topics = seen.get("topics")
    if topics is not None:
        internal = {n: c for n, c in topics.items() if n != "__cluster_metadata"}
        if internal != {n: c for n, c in ref.topics.items() if n != "__cluster_metadata"}:
            if metadata_damaged and internal in ref.topic_history:
                outcomes.add("cut")   # the metadata log kept the topics before its damage
            else:
                fail(f"topics {topics}, expected {ref.topics}")

    partitions = seen.get("partitions", {})
    if TOPIC in (topics or {}):
        for p, want in ref.records.items():
            got = partitions.get(p)
            if got is None:
                fail(f"partition {p} was not read")
                continue
            own = case.scope == f"{TOPIC}-{p}"
            records = got["records"]
            wrong = _first_difference(records, want)
            if wrong:
                fail(f"{TOPIC}-{p}: {wrong}")
            elif "error" in got:
                problem = _error_problem(case, got["error"])
                if problem:
                    fail(f"{TOPIC}-{p} after {len(records)} record(s): {problem}")
                elif not own:
                    fail(f"{TOPIC}-{p} (not damaged) failed: {got['error']['message'][:300]}")
                outcomes.add("typed error")
            elif "stuck" in got:
                position, end = got["stuck"]
                fail(f"{TOPIC}-{p}: stall, no record and no error at offset {position} below "
                     f"the end offset {end}")
            elif len(records) < len(want):
                if own:
                    outcomes.add("cut")
                else:
                    fail(f"{TOPIC}-{p} (not damaged) lost records from offset {len(records)} "
                         "without an error")

    if "committed" in seen:
        committed = seen["committed"]
        if committed != ref.committed:
            offsets_damaged = case.scope.startswith("__consumer_offsets-")
            if (offsets_damaged or metadata_damaged) and committed in ref.history:
                outcomes.add("cut")   # the offsets log kept the commits before its damage
            else:
                fail(f"committed offsets {committed}, expected {ref.committed}")

    if len(failures) > count:
        return "failure"
    for outcome in ("typed error", "cut"):
        if outcome in outcomes:
            return outcome
    return "intact"


def classify(case, ref, seen):
    """Fill case.outcomes and case.failures from the child's result."""
    if "failure" in seen:
        case.failures.append(seen["failure"])
        return
    if seen["readonly_changed"]:
        case.failures.append(f"the read-only open changed {seen['readonly_changed']}")
    # Recovery may cut the damaged partition's segments; a writable open that only reads must
    # leave every other segment byte for byte (a forgotten topic's included).
    rewritten = [p for p in seen["writable_changed"]
                 if p.endswith(".log") and os.path.dirname(p) != case.scope]
    if rewritten:
        case.failures.append(f"writable: the open changed segments outside {case.path!r}'s "
                             f"directory: {rewritten}")
    for mode in ("readonly", "writable"):
        outcome = classify_mode(case, ref, mode, seen[mode], case.failures)
        if outcome == "cut" and case.kind not in RECORD_KINDS:
            case.failures.append(f"{mode}: records or commits lost after damage to "
                                 f"{case.path}, which holds none")
            outcome = "failure"
        case.outcomes[mode] = outcome


def run_case(case, ref_root, work_dir):
    """Copy the reference, damage the copy, let a child open it, classify: returns the case."""
    root = os.path.join(work_dir, f"case-{case.seed}")
    shutil.copytree(ref_root, root, symlinks=True)
    try:
        apply(case, root)
        seen = run_child(root)
        case.seen = seen
        classify(case, REFERENCE[0], seen)
    except Exception as exc:  # a bug of the test itself: reported with the case, not hidden
        case.failures.append(f"the fuzz harness failed: {exc!r}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return case


# The session's Reference (set by the test's fixture): run_case runs on worker threads.
REFERENCE = [None]


# --- the table ----------------------------------------------------------------------------------------


def table(cases, seed, iterations):
    """Markdown: per file kind and mutation, how many cases ended in each outcome, per open mode."""
    counts = {}
    for case in cases:
        if not case.applicable:
            continue
        row = counts.setdefault((case.kind, case.mutation), {"n": 0})
        row["n"] += 1
        for mode in ("readonly", "writable"):
            # A case that failed outside either open (a stall, a signal, a file written by the
            # read-only open) counts as a failure of both.
            outcome = case.outcomes.get(mode, "failure")
            if case.failures and outcome != "failure" and not any(
                    f.startswith(("readonly:", "writable:")) for f in case.failures):
                outcome = "failure"
            row[(mode, outcome)] = row.get((mode, outcome), 0) + 1
    lines = [
        f"Seed `{seed}`, {iterations} iterations ({sum(1 for c in cases if c.applicable)} "
        "applicable: a mutation that needs bytes skips an empty file). Each cell counts "
        "cases as read-only open / writable open.",
        "",
        "| file kind | mutation | cases | intact | cut | typed error | failure |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind in FILE_KINDS:
        for mutation in MUTATIONS:
            row = counts.get((kind, mutation))
            if row is None:
                continue
            cells = [" / ".join(str(row.get((mode, outcome), 0))
                                for mode in ("readonly", "writable")) for outcome in OUTCOMES]
            lines.append(f"| {kind} | {mutation} | {row['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
