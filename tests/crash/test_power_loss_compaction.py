"""System test: the power goes at each sync of a process that compacts a log.

kill -9 keeps the page cache (tests/crash/test_kill9_compaction.py), so it cannot tell
whether the cleaner's syncs come in the order its swap needs (docs/COMPACTION.md, crash
safety): each `.cleaned` segment, its indexes and its `.txnindex` fsynced before the
renames to `.swap` and the directory's fsync (the commit point), then the old segments
renamed `.deleted` and the `.swap` files given their names, the cleaner checkpoint after
the swap. Here writer process N compacts two compacted topics with small segments, appends
keyed updates to them ("c": acks="all"; "t": cleanup.policy "compact,delete", transactions,
one of every three aborted) and compacts both again; die_at_sync (support.power_loss) kills
it just before its N-th sync counted from the end of its appends, and this process puts every segment file back to its bytes as of its last sync,
`.cleaned`, `.swap` and `.deleted` files included, the synced bytes going with a file when
it is renamed. Some updates to "c" are deletes (tombstones, kept for delete.retention.ms,
a day: every pass keeps them, and the first one sets their delete horizon). The sweep cuts every sync of a pass, from the rolls db.compact makes to the
checkpoint, and goes on past the pass's end; a few writers are cut during their appends
instead, so the passes also open logs cut in a roll. All writers share one database: each
opens what the cuts before it left, and each pass cleans what earlier passes cleaned.
Where a writer died with renames or removals that their directory had not synced yet (a
cut at the swap's directory fsyncs, at a checkpoint's or snapshot's), a copy of the
database is also checked as a power loss that loses those too leaves it.

After each cut, the guarantees of a compacted log (KAFKA_REFERENCE.md §4, Kafka's "What
guarantees does log compaction provide") and DESIGN.md §2 (acknowledged, fsynced data is
never lost) are checked on the reopened database: every key's latest acknowledged value is
there at its acknowledged offset, or a later value of the key written after it; every
record read is one that was written, at the offset it was acknowledged with, each once,
offsets increasing; the log reads from its start to its end and a new record goes at the
end; a read_committed consumer sees no record of an aborted transaction (§6); once closed,
`verify` finds no damage and no `.cleaned`, `.swap` or `.deleted` file is left. At the end
a pass on the reopened database succeeds and all of it holds again."""
import copy
import os
import shutil

import pytest

import streamlog
from streamlog import TopicPartition
from streamlog.storage import files
from streamlog.storage.verify import verify_directory
from support.power_loss import run_cut_writer

CONFIG = {"log.cleaner.enable": False,   # only db.compact cleans: the syncs are the same
          "transaction.state.log.num.partitions": 1, "offsets.topic.num.partitions": 1}
# Markers go at the pass after the one that set their horizon, so passes remove them too
# (and the log, its passes and their syncs stop growing from run to run).
TOPICS = {"c": {"cleanup.policy": "compact", "segment.bytes": 1024},
          "t": {"cleanup.policy": "compact,delete", "segment.bytes": 1024,
                "delete.retention.ms": 0}}
KEYS = 5
UPDATES = 10          # records to "c" per writer
TRANSACTIONS = 3      # transactions to "t" per writer, two records each; the second aborted
APPEND_CUTS = (3, 11, 27)   # writers cut during their appends (counted from their start)
WARM_UP = 4   # writers never cut, before the sweep: their passes settle to one size
PAD = b"." * 90       # a segment holds about six batches
EXPLAINED = {files.PARTITION_METADATA_FILE, files.TOPIC_CONFIG_FILE,
             files.LEADER_EPOCH_CHECKPOINT}

# Every record carries its value's text in its "id" header: a tombstone's ("~" first) too.
# Lines: "W topic key value" before a record is sent; "A topic key value offset" once it
# is acknowledged (acks="all"; for "t", once its transaction committed); "X topic key
# value" before a record of a transaction that will be aborted is sent; "P syncs" once
# both passes after the appends are done, with the syncs they made (a writer cut in them).
WRITER = """
import os, sys
import streamlog
from support.power_loss import die_at_sync
root, cut, durable, run, arm = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), \\
    sys.argv[5]
db = streamlog.open(root, config=%(config)r)
for topic, config in %(topics)r.items():
    if topic not in db.topics():
        db.create_topic(topic, partitions=1, config=config)
# Not idempotent: each writer's new producer id would keep its last batch in "c", emptied,
# for a day (docs/COMPACTION.md, the batch rule), and the passes would grow run by run.
p = db.producer(acks="all", enable_idempotence=False, linger_ms=0)
tx = db.producer(transactional_id="tx", linger_ms=0)
tx.init_transactions()
# A whole pass first: the pass cut below then cleans this writer's appends and what that
# pass left (the same work, and syncs, run after run), not all that the cuts before left.
db.compact("c")
db.compact("t")
os.sync()
if arm == "appends":
    die = die_at_sync(root, cut, durable)
for i in range(%(updates)d):
    key, value = b"k%%d" %% ((run * 3 + i) %% %(keys)d), b"r%%d-%%d" %% (run, i)
    if i %% 5 == 4:
        value = b"~" + value   # a tombstone: a delete of the key
    print("W c", key.decode(), value.decode(), flush=True)
    md = p.send("c", key=key, value=None if value[:1] == b"~" else value + %(pad)r,
                headers=[("id", value)], partition=0).result()
    print("A c", key.decode(), value.decode(), md.offset, flush=True)
for j in range(%(transactions)d):
    sent = []
    tx.begin_transaction()
    for k in range(2):
        key, value = b"k%%d" %% ((run + j + k) %% %(keys)d), b"r%%d-t%%d-%%d" %% (run, j, k)
        print("X" if j %% 3 == 1 else "W", "t", key.decode(), value.decode(), flush=True)
        # One batch a record (waited for), as to "c": the passes' sizes do not vary.
        sent.append((key, value, tx.send("t", key=key, value=value + %(pad)r,
                                         headers=[("id", value)], partition=0).result()))
    if j %% 3 == 1:
        tx.abort_transaction()
        continue
    tx.commit_transaction()
    for key, value, md in sent:
        print("A t", key.decode(), value.decode(), md.offset, flush=True)
if arm == "compact":
    die = die_at_sync(root, cut, durable)
db.compact("c")
db.compact("t")
if arm == "compact":
    print("P", die.syncs(), flush=True)
die()
""" % {"config": CONFIG, "topics": TOPICS, "updates": UPDATES, "keys": KEYS, "pad": PAD,
       "transactions": TRANSACTIONS}


class Written:
    """What the writers said they did, per topic: every value sent (value -> key), the
    offset of each acknowledged one, the values of aborted transactions."""

    def __init__(self):
        self.keys = {"c": {}, "t": {}}
        self.offsets = {"c": {}, "t": {}}
        self.aborted = set()
        self.passes = 0   # writers whose passes both ended before their cut
        self.pass_syncs = []

    def add(self, fields):
        for f in fields:
            if len(f) == 4 and f[0] in "WX":
                self.keys[f[1]][f[3]] = f[2]
                if f[0] == "X":
                    self.aborted.add(f[3])
            elif len(f) == 5 and f[0] == "A":
                self.offsets[f[1]][f[3]] = int(f[4])
            elif len(f) == 2 and f[0] == "P":
                self.passes += 1
                self.pass_syncs.append(int(f[1]))

    def latest_acknowledged(self, topic):
        """key -> (offset, value) of its acknowledged record with the highest offset."""
        latest = {}
        for value, offset in self.offsets[topic].items():
            key = self.keys[topic][value]
            if offset > latest.get(key, (-1, None))[0]:
                latest[key] = (offset, value)
        return latest


def cut_one(root, written, run, cut, arm="compact"):
    """One writer cut; True when it died with renames or removals its directories had not
    synced, and `check_cut` checked the database as a power loss that loses them too leaves
    it (a copy: the next writer opens the one that kept them)."""
    undone = root + ".undone"
    written.add(run_cut_writer(WRITER, root, cut, run, arm, undone=undone))
    if not os.path.exists(undone):
        return False
    check_cut(undone, copy.deepcopy(written), f"at sync {cut} of its {arm}, "
              "losing the renames and removals not synced")
    shutil.rmtree(undone)
    return True


def check_cut(root, written, where):
    """check(), its failure saying which cut left the database so."""
    try:
        check(root, written)
    except AssertionError as exc:
        raise AssertionError(f"after a writer cut {where}: {exc}") from exc


def read_all(db, topic, isolation):
    """(offset, key, value) of every record a consumer from the start reads, up to the log's
    end (read_committed: its last stable offset)."""
    tp = TopicPartition(topic, 0)
    log = db._broker.partition_log(tp)
    end = log.last_stable_offset if isolation == "read_committed" else log.log_end_offset
    consumer = db.consumer(isolation_level=isolation, auto_offset_reset="earliest")
    consumer.assign([tp])
    out = []
    while (position := consumer.position(tp)) < end:
        records = consumer.poll(timeout=5)
        assert records or consumer.position(tp) > position, \
            f"{topic}: the read stops at {position}, before the end {end}"
        for r in records:
            ident = dict(r.headers)["id"].decode()
            assert r.value == (None if ident[0] == "~" else ident.encode() + PAD), \
                f"{topic}: at {r.offset}, {ident} holds {r.value!r}"
            out.append((r.offset, r.key.decode(), ident))
    consumer.close()
    return out


def check_topic(db, topic, written, isolation, probe):
    records = read_all(db, topic, isolation)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), f"{topic}: offsets out of order or repeated"
    values = [v for _, _, v in records]
    assert len(set(values)) == len(values), f"{topic}: a record is there twice"
    keys, acknowledged = written.keys[topic], written.offsets[topic]
    for offset, key, value in records:
        assert keys.get(value) == key, f"{topic}: read {key}={value} at {offset}, never written"
        assert acknowledged.get(value, offset) == offset, \
            f"{topic}: {value} read at {offset}, acknowledged at {acknowledged[value]}"
    if isolation == "read_committed":
        seen = sorted(set(values) & written.aborted)
        assert not seen, f"{topic}: aborted records seen: {seen[:5]}"
    newest = {}
    for offset, key, _ in records:
        newest[key] = offset
    lost = {k: (o, v) for k, (o, v) in written.latest_acknowledged(topic).items()
            if newest.get(k, -1) < o}
    assert not lost, f"{topic}: latest acknowledged values lost: {lost}"
    log = db._broker.partition_log(TopicPartition(topic, 0))
    end = log.log_end_offset
    assert not offsets or offsets[-1] < end
    if probe:
        # A new record goes at the end; it is then a write like the others.
        value = "probe-%d" % sum(len(v) for v in written.keys.values())
        producer = db.producer(acks="all", enable_idempotence=False)
        offset = producer.send(topic, key=b"k0", value=value.encode() + PAD,
                               headers=[("id", value.encode())], partition=0).result().offset
        producer.close()
        assert offset == end, (topic, offset, end)
        keys[value], acknowledged[value] = "k0", offset


def check(root, written, probe=True):
    with streamlog.open(root, config=CONFIG) as db:
        tx = db.producer(transactional_id="tx")
        tx.init_transactions()     # fences the dead writer, aborts what it left open
        tx.close()
        check_topic(db, "c", written, "read_uncommitted", probe)
        check_topic(db, "t", written, "read_uncommitted", False)
        check_topic(db, "t", written, "read_committed", probe)
    report = verify_directory(root)
    assert not report.problems, report.problems
    for topic in TOPICS:
        # Every file is one of the log's (the open finished or removed the rest).
        listing = files.list_directory(os.path.join(root, files.partition_dir_name(topic, 0)))
        left = listing.leftovers + listing.orphan_indexes + [
            n for n in listing.other_names if n not in EXPLAINED] + listing.swap_bases
        assert not left, f"{topic}: left after a reopen: {left}"


@pytest.mark.slow
def test_a_power_loss_at_each_sync_of_a_compaction_keeps_the_compacted_logs_guarantees(
        tmp_path):
    root = os.path.abspath(str(tmp_path / "db"))
    written = Written()
    # Writers never cut, until the passes make as many syncs run after run.
    for run in range(WARM_UP):
        cut_one(root, written, run, cut=10**6)
    assert written.passes == WARM_UP and len(set(written.pass_syncs[-2:])) == 1, \
        written.pass_syncs
    syncs = written.pass_syncs[-1]
    check_cut(root, written, "once its pass was over")
    cut, finished, undone = 0, 0, 0
    while finished < 2:     # on past the pass's end: its last syncs are cut too
        cut += 1
        run += 1
        passes = written.passes
        undone += cut_one(root, written, run, cut)
        finished = finished + 1 if written.passes > passes else 0
        check_cut(root, written, f"at sync {cut} of its pass")
        if cut in APPEND_CUTS:
            run += 1
            cut_one(root, written, run, cut, arm="appends")
            check_cut(root, written, f"at sync {cut} of its appends")
        assert cut <= 2 * syncs, f"writer cut at sync {cut} of a pass of {syncs}: no end"
    # The passes the sweep ran past were whole ones, as big as the warm-up's: it cut each
    # of their syncs.
    assert min(written.pass_syncs[WARM_UP:]) >= syncs, (written.pass_syncs, syncs)
    assert undone >= 4    # the cuts at the swap's and the checkpoint's directory fsyncs
    assert written.aborted and written.offsets["t"]
    with streamlog.open(root, config=CONFIG) as db:
        results = db.compact("c") + db.compact("t")
        assert all(r.stats is not None for r in results), results
    check(root, written, probe=False)
