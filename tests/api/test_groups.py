"""Consumer groups through the public API: subscribe, rebalances, commits, administration."""
import re
import threading
import time
from collections import Counter

import pytest

import streamlog
from streamlog import OffsetAndMetadata, TopicPartition
from streamlog.assignors import get_assignor
from support.group_threads import GENEROUS_S, GroupReader, partitions_of, wait_until

FAST = {"heartbeat_interval_ms": 50}


def fill(db, n, topic="t", partitions=4, start=0):
    if topic not in db.topics():
        db.create_topic(topic, partitions=partitions)
    producer = db.producer()
    for i in range(start, start + n):
        producer.send(topic, value=b"%d" % i, partition=i % partitions)
    producer.flush()
    producer.close()


def poll_until(consumer, condition, what, timeout=GENEROUS_S):
    records = []
    deadline = time.monotonic() + timeout
    while not condition(records):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out polling until {what}")
        records.extend(consumer.poll(timeout=0.05))
    return records


def poll_each(consumers, condition, what, timeout=GENEROUS_S):
    """Poll the consumers in turn on this thread until condition(got); got: each one's records."""
    got = [[] for _ in consumers]
    deadline = time.monotonic() + timeout
    while not condition(got):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out polling until {what}")
        for records, consumer in zip(got, consumers, strict=True):
            records.extend(consumer.poll(timeout=0.02))
    return got


def values(records):
    return sorted(int(r.value) for r in records)


# --- calls and their checks -------------------------------------------------------------


def test_subscribe_needs_a_group_and_excludes_assign(db):
    db.create_topic("t")
    with pytest.raises(streamlog.InvalidGroupIdError):
        db.consumer().subscribe(["t"])
    with pytest.raises(streamlog.InvalidGroupIdError):
        db.consumer().commit()
    manual = db.consumer(group_id="g")
    manual.assign([TopicPartition("t", 0)])
    with pytest.raises(streamlog.IllegalStateError):
        manual.subscribe(["t"])
    member = db.consumer(group_id="g")
    member.subscribe(["t"])
    with pytest.raises(streamlog.IllegalStateError):
        member.assign([TopicPartition("t", 0)])
    with pytest.raises(TypeError):
        member.subscribe(["t"], listener=object())
    with pytest.raises(streamlog.IllegalStateError):
        member.subscribe(["t"], pattern="t.*")
    with pytest.raises(streamlog.IllegalStateError):
        db.consumer(group_id="g").poll(timeout=0)
    with pytest.raises(streamlog.InvalidConfigurationError):
        db.consumer(group_id="g", heartbeat_interval_ms=5000, session_timeout_ms=4000)
    with pytest.raises(streamlog.InvalidConfigurationError):
        db.consumer(group_id="g", partition_assignment_strategy=["no-such-assignor"])


def test_one_member_gets_every_partition_and_commits_its_position(db):
    fill(db, 40)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe(["t"])
    assert consumer.subscription() == {"t"}
    records = poll_until(consumer, lambda r: len(r) >= 40, "40 records")
    assert values(records) == list(range(40))
    assert consumer.assignment() == set(partitions_of(db, "t"))
    consumer.commit()
    committed = consumer.committed(partitions_of(db, "t"))
    # The position's leader epoch goes with it: a database of its own stamps epoch 0.
    assert committed == {tp: OffsetAndMetadata(10, "", 0) for tp in partitions_of(db, "t")}
    meta = consumer.group_metadata()
    assert meta.group_id == "g" and meta.generation_id >= 1 and meta.member_id
    consumer.commit({TopicPartition("t", 0): OffsetAndMetadata(3, "checkpoint")})
    assert consumer.committed([TopicPartition("t", 0)])[TopicPartition("t", 0)] == \
        OffsetAndMetadata(3, "checkpoint")


def test_async_commit_callback_runs_on_the_consumer_thread_at_the_next_poll(db):
    fill(db, 8)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe(["t"])
    poll_until(consumer, lambda r: len(r) >= 8, "8 records")
    calls = []
    consumer.commit(asynchronous=True,
                    callback=lambda offsets, error: calls.append(
                        (threading.current_thread(), dict(offsets), error)))
    assert calls == []
    consumer.poll(timeout=0)
    assert calls == [(threading.current_thread(),
                      {tp: OffsetAndMetadata(2, "", 0) for tp in partitions_of(db, "t")}, None)]


def test_auto_commit_on_close_and_restart_from_the_committed_offsets(db_path):
    with streamlog.open(db_path) as db:
        fill(db, 40)
        consumer = db.consumer(group_id="g", auto_offset_reset="earliest", max_poll_records=6)
        consumer.subscribe(["t"])
        first = poll_until(consumer, lambda r: len(r) >= 6, "some records")
        consumer.close()   # auto-commit (enable_auto_commit defaults to True) on close
    with streamlog.open(db_path) as db:   # committed offsets survive the reopen
        # Every position is committed: after the records read, 0 where nothing was read yet.
        expected = dict.fromkeys(partitions_of(db, "t"), 0)
        expected.update({TopicPartition(r.topic, r.partition): r.offset + 1 for r in first})
        assert {tp: p.committed for tp, p in db.describe_group("g").partitions.items()} == \
            expected
        consumer = db.consumer(group_id="g", auto_offset_reset="earliest")
        consumer.subscribe(["t"])
        rest = poll_until(consumer, lambda r: len(first) + len(r) >= 40, "the rest")
        assert values(first + rest) == list(range(40))


def committed_offsets(db, group_id="g"):
    return {tp: p.committed for tp, p in db.describe_group(group_id).partitions.items()}


def test_a_topic_deleted_and_made_again_is_read_from_the_start_by_a_group(db_path):
    # Kafka's OffsetMetadataManager.onPartitionsDeleted: deleting a topic deletes every
    # group's offsets of it, here too when no group was used since the database opened.
    with streamlog.open(db_path) as db:
        fill(db, 8, partitions=1)
        consumer = db.consumer(group_id="g")
        consumer.commit({TopicPartition("t", 0): OffsetAndMetadata(5)})
        consumer.close()
    with streamlog.open(db_path) as db:
        db.delete_topic("t")
        fill(db, 8, partitions=1)
        assert db.describe_group("g").partitions == {}
        consumer = db.consumer(group_id="g", auto_offset_reset="earliest")
        consumer.subscribe(["t"])
        assert values(poll_until(consumer, lambda r: len(r) >= 8, "the new topic")) == \
            list(range(8))
        consumer.close()


def test_auto_commit_commits_the_positions_every_interval_while_the_consumer_polls(db):
    fill(db, 40)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest", max_poll_records=6,
                           auto_commit_interval_ms=100)
    consumer.subscribe(["t"])
    poll_until(consumer, lambda r: len(r) >= 40, "every record")
    # Neither closed nor rebalanced: only the poll-time auto-commit can store the positions.
    poll_until(consumer, lambda r: committed_offsets(db) ==
               dict.fromkeys(partitions_of(db, "t"), 10), "the positions are committed")
    assert all(consumer.position(tp) == 10 for tp in partitions_of(db, "t"))
    consumer.close()


def test_assign_auto_commits_the_partitions_it_drops_once_the_interval_has_passed(db):
    """Kafka's ClassicKafkaConsumer.assign calls maybeAutoCommitOffsetsAsync before changing
    the assignment (no rebalance will commit the partitions dropped): the positions are
    committed when auto.commit.interval.ms has passed, not before; unsubscribe() (and
    assign([]), which is unsubscribe()) commits nothing (onLeavePrepare, maybeLeaveGroup)."""
    fill(db, 8, partitions=2)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    due = db.consumer(group_id="g", auto_offset_reset="earliest", auto_commit_interval_ms=0)
    due.assign([tp0])
    poll_until(due, lambda r: len(r) >= 4, "partition 0's records")
    due.seek(tp0, 3)         # a position no poll() has seen
    due.assign([tp1])        # drops tp0: its position is committed
    assert committed_offsets(db) == {tp0: 3}
    due.seek(tp1, 2)
    due.assign([])           # unsubscribe(): no commit
    assert committed_offsets(db) == {tp0: 3}
    due.close()
    later = db.consumer(group_id="h", auto_offset_reset="earliest",
                        auto_commit_interval_ms=3_600_000)
    later.assign([tp0])
    later.seek(tp0, 1)
    later.assign([tp1])      # the interval has not passed: nothing is committed
    assert later.committed([tp0]) == {tp0: None}
    later.close()


def test_auto_commit_before_a_rebalance_hands_the_next_owner_the_position(db):
    """Single-threaded: the interval (an hour) never comes; the rebalance commits."""
    fill(db, 40)
    settings = {"group_id": "g", "auto_offset_reset": "earliest",
                "heartbeat_interval_ms": 10_000, "auto_commit_interval_ms": 3_600_000}
    keeper = db.consumer(client_id="keeper", **settings)
    keeper.subscribe(["t"])
    poll_until(keeper, lambda r: len(r) >= 40, "every record")
    assert set(committed_offsets(db).values()) == {None}
    joiner = db.consumer(client_id="joiner", **settings)
    joiner.subscribe(["t"])
    joiner.poll(timeout=0)   # joins: the group rebalances
    keeper.poll(timeout=0)   # commits what it read, revokes (eager), rejoins and assigns
    assert committed_offsets(db) == dict.fromkeys(partitions_of(db, "t"), 10)
    assert joiner.poll(timeout=0) == []   # takes its share: nothing is read a second time
    assert len(joiner.assignment()) == 2
    assert all(joiner.position(tp) == 10 for tp in joiner.assignment())
    joiner.close()
    keeper.close()


def test_an_async_commit_refused_after_the_member_left_reports_it_to_the_callback(db):
    fill(db, 8)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                           max_poll_interval_ms=300, **FAST)
    consumer.subscribe(["t"])
    poll_until(consumer, lambda r: len(r) >= 8, "8 records")
    # The consumer stops calling poll(): past max_poll_interval_ms its heartbeat leaves.
    wait_until(lambda: db.describe_group("g").members == [], "the member left the group")
    positions = {tp: OffsetAndMetadata(consumer.position(tp), "", 0)
                 for tp in consumer.assignment()}
    assert positions
    calls = []
    consumer.commit(asynchronous=True,
                    callback=lambda offsets, error: calls.append(
                        (threading.current_thread(), dict(offsets), error)))
    assert calls == []   # callbacks run at a later poll(), on the consumer's thread
    consumer.poll(timeout=0)
    [(thread, offsets, error)] = calls
    assert thread is threading.current_thread() and offsets == positions
    assert isinstance(error, streamlog.CommitFailedError)
    assert "max_poll_interval_ms" in str(error)
    assert set(committed_offsets(db).values()) <= {None}
    consumer.close()


def test_auto_offset_reset_applies_where_nothing_is_committed(db):
    fill(db, 20)
    consumer = db.consumer(group_id="g", auto_offset_reset="latest")
    consumer.subscribe(["t"])
    poll_until(consumer, lambda r: consumer.assignment(), "assigned")
    fill(db, 4, start=20)
    records = poll_until(consumer, lambda r: len(r) >= 4, "the new records")
    assert values(records) == [20, 21, 22, 23]


def test_wakeup_interrupts_a_waiting_poll(db):
    db.create_topic("t")
    consumer = db.consumer(group_id="g")
    consumer.subscribe(["t"])
    threading.Timer(0.2, consumer.wakeup).start()
    with pytest.raises(streamlog.WakeupError):
        consumer.poll(timeout=None)
    assert consumer.poll(timeout=0) == []   # the wake-up is used up


def test_close_from_another_thread_ends_a_waiting_poll_and_leaves(db):
    db.create_topic("t")
    consumer = db.consumer(group_id="g")
    consumer.subscribe(["t"])
    poll_until(consumer, lambda r: consumer.assignment(), "assigned")
    threading.Timer(0.2, consumer.close).start()
    assert consumer.poll(timeout=None) == []
    wait_until(lambda: consumer.closed, "closed")
    assert db.describe_group("g").state == "Empty"


# --- groups of threads --------------------------------------------------------------------


def test_members_joining_and_leaving_in_threads_split_the_partitions_and_lose_nothing(db):
    fill(db, 2000, partitions=6)
    readers = [GroupReader(db, ["t"], f"r{i}", max_poll_records=20) for i in range(4)]
    for reader in readers:
        reader.start()
    wait_until(lambda: sorted(tp for r in readers for tp in r.assignment()) ==
               partitions_of(db, "t") and all(r.assignment() for r in readers),
               "four members share the six partitions")
    readers[0].finish()
    readers[1].finish()
    fill(db, 1000, partitions=6, start=2000)
    survivors = readers[2:]
    wait_until(lambda: sum(len(r.records) for r in readers) >= 3000 and
               sorted(tp for r in survivors for tp in r.assignment()) == partitions_of(db, "t"),
               "the two left take every partition and read everything")
    for reader in survivors:
        reader.finish()
    got = Counter(int(rec.value) for r in readers for rec in r.records)
    assert sorted(got) == list(range(3000))                       # nothing lost
    assert [v for v, n in got.items() if n > 1] == []             # nothing read twice
    assert all(r.commit_failures == 0 for r in readers)


def test_two_groups_each_get_everything_while_members_of_one_group_split_it(db):
    db.create_topic("t", partitions=4)
    queue = [GroupReader(db, ["t"], f"q{i}", group_id="queue") for i in range(2)]
    pubsub = GroupReader(db, ["t"], "p", group_id="other")
    for reader in queue + [pubsub]:
        reader.start()
    wait_until(lambda: all(len(r.assignment()) == 2 for r in queue) and
               len(pubsub.assignment()) == 4, "both groups are formed")
    fill(db, 400)
    wait_until(lambda: sum(len(r.records) for r in queue) >= 400 and
               len(pubsub.records) >= 400 and all(r.assignment() for r in queue),
               "both groups read everything")
    for reader in queue + [pubsub]:
        reader.finish()
    assert values(pubsub.records) == list(range(400))
    assert values(queue[0].records + queue[1].records) == list(range(400))
    assert queue[0].records and queue[1].records          # split, not copied
    assert {(r.topic, r.partition) for r in queue[0].records}.isdisjoint(
        {(r.topic, r.partition) for r in queue[1].records})


def test_a_member_that_stops_heartbeating_is_evicted_and_its_partitions_reassigned(db_path):
    with streamlog.open(db_path, config={"group.min.session.timeout.ms": 50}) as db:
        fill(db, 10)
        frozen = db.consumer(group_id="g", session_timeout_ms=300, **FAST)
        frozen.subscribe(["t"])
        poll_until(frozen, lambda r: frozen.assignment(), "the first member has partitions")
        # Only `frozen` is to be evicted: a healthy member whose heartbeats a loaded machine
        # delays by a fraction of a second must not be.
        healthy = GroupReader(db, ["t"], "healthy", session_timeout_ms=30_000, **FAST)
        healthy.start()
        poll_until(frozen, lambda r: len(frozen.assignment()) == 2, "the partitions are shared")
        # Test hook: the member's heartbeats stop, as if its process froze.
        frozen._group.stop_heartbeats()
        wait_until(lambda: healthy.assignment() == partitions_of(db, "t"),
                   "the healthy member owns every partition")
        assert [m.client_id for m in db.describe_group("g").members] == ["healthy"]
        lost = []
        frozen.subscribe(["t"], listener=type("L", (), {
            "on_partitions_lost": lambda self, tps: lost.append(sorted(tps))})())
        frozen.poll(timeout=0)
        assert len(lost) == 1 and len(lost[0]) == 2   # told it lost them, not revoked
        healthy.finish()


def test_heartbeats_keep_a_member_that_does_not_poll_for_several_sessions(db_path):
    with streamlog.open(db_path, config={"group.min.session.timeout.ms": 50}) as db:
        fill(db, 4)
        # A session 40 heartbeats long: only a timer thread that does not heartbeat at all
        # (not one a loaded machine delays by a second) lets it expire.
        session_s = 2.0
        consumer = db.consumer(group_id="g", session_timeout_ms=int(session_s * 1000), **FAST)
        consumer.subscribe(["t"])
        poll_until(consumer, lambda r: consumer.assignment(), "assigned")
        generation = db.describe_group("g").generation
        # Two sessions without a poll (the timer thread heartbeats): the time passing is the
        # scenario, and the verdict is checked all along it, not once after a sleep.
        quiet_until = time.monotonic() + 2 * session_s
        while time.monotonic() < quiet_until:
            d = db.describe_group("g")
            assert (d.state, d.generation, len(d.members)) == ("Stable", generation, 1)
            time.sleep(0.05)
        consumer.poll(timeout=0)
        assert len(consumer.assignment()) == 4   # nothing was lost or revoked
        assert consumer.group_metadata().generation_id == generation


def test_a_member_that_stops_polling_leaves_after_max_poll_interval(db):
    fill(db, 10)
    slow = db.consumer(group_id="g", max_poll_interval_ms=300, **FAST)
    slow.subscribe(["t"])
    poll_until(slow, lambda r: slow.assignment(), "assigned")
    other = GroupReader(db, ["t"], "other", **FAST)
    other.start()
    poll_until(slow, lambda r: len(slow.assignment()) == 2, "the partitions are shared")
    # `slow` stops calling poll(): its heartbeat notices and it leaves the group.
    wait_until(lambda: other.assignment() == partitions_of(db, "t"),
               "the other member owns every partition")
    assert [m.client_id for m in db.describe_group("g").members] == ["other"]
    with pytest.raises(streamlog.CommitFailedError, match="max_poll_interval_ms"):
        slow.commit({TopicPartition("t", 0): 1})
    other.finish()


def test_a_commit_from_an_older_generation_is_fenced(db):
    fill(db, 10)
    # `old` stops polling: past max_poll_interval_ms it leaves the group (or, as its rebalance
    # timeout, it is dropped for not rejoining). Either way it is no longer a member, so the
    # coordinator refuses its commit as an unknown member; the generation check alone is
    # tested by test_a_member_still_in_the_group_cannot_commit_with_a_generation_it_left.
    old = db.consumer(group_id="g", enable_auto_commit=False, max_poll_interval_ms=500, **FAST)
    old.subscribe(["t"])
    poll_until(old, lambda r: old.assignment(), "assigned")
    generation = old.group_metadata().generation_id
    newcomer = GroupReader(db, ["t"], "new", **FAST)
    newcomer.start()
    # `old` does not poll: the group forms the next generation without it, while it still
    # believes it owns both partitions in generation `generation`.
    wait_until(lambda: db.describe_group("g").generation > generation and
               newcomer.assignment() == partitions_of(db, "t"), "the group moves on")
    assert old.group_metadata().generation_id == generation
    with pytest.raises(streamlog.CommitFailedError, match="rebalanced"):
        old.commit({TopicPartition("t", 0): 5})
    assert db.describe_group("g").partitions[TopicPartition("t", 0)].committed != 5
    poll_until(old, lambda r: old.group_metadata().generation_id > generation + 1,
               "the old member rejoins in a later generation")
    newcomer.finish()


def test_a_member_still_in_the_group_cannot_commit_with_a_generation_it_left(db):
    """Generations alone fence a commit (single-threaded, deterministic).

    `a` rejoins but has not taken the answer when `b` completes the next
    generation: the group is Stable and `a` is one of its members, yet `a`
    still holds the generation before. Its commit must be refused, as
    Kafka's RebalanceInProgressException (retriable: poll, then commit).
    """
    db.create_topic("t", partitions=6)
    settings = {"group_id": "g", "enable_auto_commit": False, "heartbeat_interval_ms": 10_000}
    consumers = {}
    for name in ("b", "a"):
        consumers[name] = db.consumer(client_id=name, **settings)
        consumers[name].subscribe(["t"])
        consumers[name].poll(timeout=0)   # b leads alone; a's join starts a rebalance
    a, b = consumers["a"], consumers["b"]
    b.poll(timeout=0)   # b rejoins, the generation forms, b assigns
    a.poll(timeout=0)   # a takes its answer and its share
    generation = db.describe_group("g").generation
    assert a.group_metadata().generation_id == generation and len(a.assignment()) == 3
    c = db.consumer(client_id="c", **settings)
    c.subscribe(["t"])
    c.poll(timeout=0)   # the next rebalance
    a.poll(timeout=0)   # a rejoins; its answer waits for b
    b.poll(timeout=0)   # b rejoins: generation + 1 forms with a, b and c; b assigns
    d = db.describe_group("g")
    assert (d.state, d.generation) == ("Stable", generation + 1)
    assert a.group_metadata().member_id in [m.member_id for m in d.members]
    assert a.group_metadata().generation_id == generation   # a has not taken its answer
    tp = TopicPartition("t", 0)
    with pytest.raises(streamlog.RebalanceInProgressError, match="poll"):
        a.commit({tp: 5})
    assert db.describe_group("g").partitions[tp].committed is None   # nothing stored
    a.poll(timeout=0)   # a takes its answer: now it is in generation + 1
    assert a.group_metadata().generation_id == generation + 1
    mine = min(a.assignment())
    a.commit({mine: 5})
    assert db.describe_group("g").partitions[mine].committed == 5
    for consumer in (a, b, c):
        consumer.close()


class RebalanceLog:
    """A listener that records its calls: (method, sorted partitions)."""

    def __init__(self):
        self.calls = []

    def on_partitions_revoked(self, partitions):
        self.calls.append(("revoked", sorted(partitions)))

    def on_partitions_assigned(self, partitions):
        self.calls.append(("assigned", sorted(partitions)))

    def on_partitions_lost(self, partitions):
        self.calls.append(("lost", sorted(partitions)))


def keeper_and_joiner(db, strategy):
    """A keeper that has read the 40-record backlog of "t", and a joiner that has sent its join.

    Single-threaded: heartbeats every 10 s cannot step in, so the joiner,
    polled once, stays in the middle of the rebalance until it is polled
    again.
    """
    fill(db, 40)
    settings = {"group_id": "g", "auto_offset_reset": "earliest", "enable_auto_commit": False,
                "partition_assignment_strategy": strategy, "heartbeat_interval_ms": 10_000}
    keeper = db.consumer(client_id="keeper", **settings)
    listener = RebalanceLog()
    keeper.subscribe(["t"], listener=listener)
    backlog = poll_until(keeper, lambda r: len(r) >= 40, "the backlog")
    assert keeper.assignment() == set(partitions_of(db, "t"))
    listener.calls.clear()
    joiner = db.consumer(client_id="joiner", **settings)
    joiner.subscribe(["t"])
    joiner.poll(timeout=0)   # sends its join: the group starts a rebalance and waits for keeper
    assert db.describe_group("g").state == "PreparingRebalance"
    return keeper, listener, backlog, joiner


def offsets_by_partition(records):
    by_partition = {}
    for r in records:
        by_partition.setdefault(TopicPartition(r.topic, r.partition), []).append(r.offset)
    return by_partition


def test_a_cooperative_member_reads_its_kept_partitions_on_while_the_group_waits_for_a_joiner(db):
    """KIP-429: the partitions that stay are never stopped, revoked or re-read.

    The keeper's first poll runs the first round (it keeps two partitions
    and revokes the two that move) and rejoins for the follow-up round,
    which cannot finish while the joiner is not polled. Throughout that
    window the keeper must own its two partitions and read what is produced
    to them, from where it was: offsets contiguous, nothing read twice.
    """
    keeper, listener, backlog, joiner = keeper_and_joiner(db, "cooperative-sticky")
    every = set(partitions_of(db, "t"))
    window = keeper.poll(timeout=0)   # the first round, and the rejoin for the second
    kept = keeper.assignment()
    moving = sorted(every - kept)
    assert len(kept) == 2
    assert listener.calls == [("revoked", moving), ("assigned", [])]   # kept ones untouched
    for n in range(40, 60, 4):
        fill(db, 4, start=n)   # one record to each partition
        window += poll_until(keeper, lambda r: {TopicPartition(x.topic, x.partition)
                                                for x in r} >= kept,
                             "the new records of both kept partitions")
        # Still mid-rebalance: the follow-up round waits for the joiner.
        assert db.describe_group("g").state == "PreparingRebalance"
        assert keeper.assignment() == kept
    assert window and {TopicPartition(r.topic, r.partition) for r in window} == kept
    read = offsets_by_partition(backlog + window)
    assert {tp: read[tp] for tp in kept} == {tp: list(range(15)) for tp in kept}

    # The follow-up round hands the moving partitions to the joiner once it polls.
    poll_each([joiner, keeper], lambda got: sorted(joiner.assignment()) == moving and
              db.describe_group("g").state == "Stable", "the joiner gets the two that moved")
    assert keeper.assignment() == kept
    follow_up = listener.calls[2:]
    assert follow_up and all(call == ("assigned", []) for call in follow_up)   # no change
    joiner.close()
    keeper.close()


def test_an_eager_member_gives_up_every_partition_when_another_joins(db):
    """The control for the test above, same steps under the eager protocol ("range").

    The keeper revokes all four partitions before it rejoins, gets two of
    them back as new, and their positions are gone with them: nothing was
    committed, so it reads them again from the beginning -- the re-reading
    the cooperative test's contiguity check rules out.
    """
    keeper, listener, _, joiner = keeper_and_joiner(db, "range")
    again = keeper.poll(timeout=0)
    kept = keeper.assignment()
    assert len(kept) == 2
    assert listener.calls == [("revoked", partitions_of(db, "t")), ("assigned", sorted(kept))]
    again += poll_until(keeper, lambda r: len(again) + len(r) >= 20,
                        "the kept partitions once more")
    assert offsets_by_partition(again) == {tp: list(range(10)) for tp in kept}
    joiner.close()
    keeper.close()


def test_subscribing_again_to_the_same_topics_rebalances_nothing(db):
    """Kafka rejoins only when the subscription changed (ConsumerCoordinator
    .rejoinNeededOrPending). A second subscribe() to the same topics started a rebalance:
    an eager member revoked every partition and read them again from the start."""
    fill(db, 8)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest",
                           enable_auto_commit=False, partition_assignment_strategy="range")
    listener = RebalanceLog()
    consumer.subscribe(["t"], listener=listener)
    first = poll_until(consumer, lambda r: len(r) >= 8, "the eight records")
    generation = consumer.group_metadata().generation_id
    consumer.subscribe(["t"], listener=listener)
    fill(db, 4, start=8)
    more = poll_until(consumer, lambda r: len(r) >= 4, "the four new records")
    assert values(first + more) == list(range(12))
    assert consumer.group_metadata().generation_id == generation
    assert listener.calls == [("assigned", partitions_of(db, "t"))]
    consumer.close()


def test_an_eager_member_without_partitions_is_told_of_the_revocation_too(db):
    """ConsumerRebalanceListener: "With eager rebalancing, onPartitionsRevoked will always
    be called at the start of a rebalance" (ConsumerCoordinator.onJoinPrepare calls it with
    an empty set). A member that owned nothing was not called."""
    fill(db, 1, partitions=1)
    settings = dict(group_id="g", partition_assignment_strategy="range", **FAST)
    consumers = [db.consumer(**settings) for _ in range(3)]
    listeners = [RebalanceLog() for _ in range(3)]

    def settled(members):
        """Every member of the group's generation has its assignment."""
        try:
            group = db.describe_group("g")
        except streamlog.GroupIdNotFoundError:
            return False
        return group.state == "Stable" and len(group.members) == members and all(
            listener.calls and listener.calls[-1][0] == "assigned"
            for listener in listeners[:members])
    for consumer, listener in zip(consumers[:2], listeners, strict=False):
        consumer.subscribe(["t"], listener=listener)
    poll_each(consumers[:2], lambda _: settled(2), "the first generation")
    idle = next(listener for consumer, listener in zip(consumers[:2], listeners, strict=False)
                if not consumer.assignment())
    idle.calls.clear()
    consumers[2].subscribe(["t"], listener=listeners[2])
    poll_each(consumers, lambda _: settled(3), "the next generation")
    assert idle.calls[0] == ("revoked", [])
    for consumer in consumers:
        consumer.close()


def test_growth_of_a_subscribed_topic_rebalances_the_group_and_assigns_the_new_partitions(db):
    """Kafka's leader notices the partition count change (explicit topics, two members)."""
    fill(db, 8)
    settings = {"group_id": "g", "auto_offset_reset": "earliest", "enable_auto_commit": False,
                "heartbeat_interval_ms": 10_000}
    members = [db.consumer(client_id=name, **settings) for name in ("a", "b")]
    for consumer in members:
        consumer.subscribe(["t"])

    def shares(counts):
        return lambda got: (sorted(len(c.assignment()) for c in members) == counts and
                            db.describe_group("g").state == "Stable")

    poll_each(members, shares([2, 2]), "the two members share the four partitions")
    generation = db.describe_group("g").generation
    db.add_partitions("t", 8)
    producer = db.producer()
    for p in range(4, 8):
        producer.send("t", value=b"%d" % (p + 4), partition=p)   # values 8..11
    producer.flush()
    producer.close()

    def from_new_partitions(got):
        return [r for records in got for r in records if r.partition >= 4]

    got = poll_each(members, lambda got: shares([4, 4])(got) and
                    len(from_new_partitions(got)) >= 4, "the new partitions are assigned and read")
    assert db.describe_group("g").generation > generation
    assert sorted(tp for c in members for tp in c.assignment()) == partitions_of(db, "t")
    assert values(from_new_partitions(got)) == [8, 9, 10, 11]   # each read once
    for consumer in members:
        consumer.close()


class DealIgnoringOwners:
    """A user assignor that deals the partitions round-robin, whoever owns them now."""

    name = "deal"

    def __init__(self, supported_protocols):
        self.supported_protocols = supported_protocols

    def assign(self, partitions_per_topic, subscriptions):
        members = sorted(subscriptions)
        plan = {member: [] for member in members}
        tps = [TopicPartition(topic, p) for topic in sorted(partitions_per_topic)
               for p in range(partitions_per_topic[topic])]
        for i, tp in enumerate(tps):
            plan[members[i % len(members)]].append(tp)
        return plan


@pytest.mark.parametrize("protocols", [("cooperative",), ("eager",)])
def test_under_cooperative_a_user_assignor_may_not_move_a_partition_its_owner_still_holds(
        db, protocols):
    """The eager case is the control: the same plan is fine when owners revoke first."""
    db.create_topic("t", partitions=4)
    settings = {"group_id": "g", "heartbeat_interval_ms": 10_000,
                "partition_assignment_strategy": [DealIgnoringOwners(protocols)]}
    keeper = db.consumer(client_id="keeper", **settings)
    keeper.subscribe(["t"])
    keeper.poll(timeout=0)
    assert keeper.assignment() == set(partitions_of(db, "t"))
    joiner = db.consumer(client_id="joiner", **settings)
    joiner.subscribe(["t"])
    joiner.poll(timeout=0)
    if protocols == ("cooperative",):
        # The keeper leads; the plan gives the joiner two partitions the keeper still owns.
        with pytest.raises(streamlog.IllegalStateError, match="cooperative protocol"):
            keeper.poll(timeout=0)
        joiner.poll(timeout=0)
        assert joiner.assignment() == set()   # the plan was not handed out
        assert keeper.assignment() == set(partitions_of(db, "t"))
    else:
        keeper.poll(timeout=0)
        joiner.poll(timeout=0)
        assert len(keeper.assignment()) == len(joiner.assignment()) == 2
    keeper.close()
    joiner.close()


class CooperativeOnly(DealIgnoringOwners):
    name = "cooperative-only"

    def __init__(self):
        super().__init__(("cooperative",))


def test_the_rebalance_protocol_is_the_one_every_listed_assignor_supports(db):
    """Kafka's choice: cooperative only if every assignor supports it, else eager if all do."""
    db.create_topic("t", partitions=4)
    # The default list ["range", "cooperative-sticky"] is eager: a join revokes everything.
    keeper = db.consumer(group_id="g", client_id="keeper", heartbeat_interval_ms=10_000)
    listener = RebalanceLog()
    keeper.subscribe(["t"], listener=listener)
    keeper.poll(timeout=0)
    joiner = db.consumer(group_id="g", client_id="joiner", heartbeat_interval_ms=10_000)
    joiner.subscribe(["t"])
    joiner.poll(timeout=0)
    keeper.poll(timeout=0)
    assert ("revoked", partitions_of(db, "t")) in listener.calls
    # No protocol in common: refused when the consumer is made, not at its first rebalance.
    with pytest.raises(streamlog.InvalidConfigurationError, match="no rebalance protocol"):
        db.consumer(group_id="g", partition_assignment_strategy=[CooperativeOnly(), "range"])
    db.consumer(group_id="g",   # both support cooperative: accepted
                partition_assignment_strategy=[CooperativeOnly(), "cooperative-sticky"])
    keeper.close()
    joiner.close()


def test_a_static_member_restarting_within_its_session_causes_no_rebalance(db):
    fill(db, 10)
    settled = GroupReader(db, ["t"], "settled", **FAST)
    settled.start()
    first = db.consumer(group_id="g", group_instance_id="worker-1", **FAST)
    first.subscribe(["t"])
    poll_until(first, lambda r: len(first.assignment()) == 2 and
               len(settled.assignment()) == 2, "two members share")
    generation = db.describe_group("g").generation
    mine = first.assignment()
    events_before = list(settled.events)
    first.close()   # a static member does not leave the group on close
    assert db.describe_group("g").generation == generation
    restarted = db.consumer(group_id="g", group_instance_id="worker-1", **FAST)
    restarted.subscribe(["t"])
    poll_until(restarted, lambda r: restarted.assignment(), "the restarted member")
    assert restarted.assignment() == mine
    d = db.describe_group("g")
    assert d.generation == generation and d.state == "Stable"
    assert settled.events == events_before      # the other member saw nothing
    settled.finish()


def test_pattern_subscription_picks_up_new_topics_and_partition_growth(db):
    fill(db, 4, topic="ev-a", partitions=1)
    db.create_topic("other")
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest")
    consumer.subscribe(pattern=re.compile(r"ev-.*"))
    poll_until(consumer, lambda r: len(r) >= 4, "ev-a")
    assert consumer.subscription() == {"ev-a"}
    fill(db, 3, topic="ev-b", partitions=1)
    records = poll_until(consumer, lambda r: len(r) >= 3, "the new topic")
    assert {r.topic for r in records} == {"ev-b"}
    assert consumer.subscription() == {"ev-a", "ev-b"}
    db.add_partitions("ev-b", 3)
    poll_until(consumer, lambda r: len(consumer.assignment()) == 4, "the new partitions")
    assert TopicPartition("ev-b", 2) in consumer.assignment()


@pytest.mark.parametrize("leave", ["unsubscribe", "subscribe to no topic",
                                   "assign no partition"])
def test_unsubscribe_leaves_and_the_consumer_can_assign_afterwards(db, leave):
    """subscribe([]) and assign([]) are unsubscribe(), as in Kafka (KafkaConsumer.subscribe:
    "If the given list of topics is empty, it is treated the same as unsubscribe()";
    ClassicKafkaConsumer.assign calls unsubscribe() for an empty collection). subscribe([])
    left the member in the group with its partitions, and assign() was refused as mixing the
    two; assign([]) on a subscribed consumer was refused so."""
    fill(db, 4)
    consumer = db.consumer(group_id="g")
    consumer.subscribe(["t"])
    poll_until(consumer, lambda r: consumer.assignment(), "assigned")
    leave_now = {"unsubscribe": consumer.unsubscribe,
                 "subscribe to no topic": lambda: consumer.subscribe([]),
                 "assign no partition": lambda: consumer.assign([])}[leave]
    leave_now()
    assert consumer.assignment() == set() and consumer.subscription() == set()
    assert db.describe_group("g").members == []
    consumer.assign([TopicPartition("t", 0)])
    assert consumer.assignment() == {TopicPartition("t", 0)}
    leave_now()
    assert consumer.assignment() == set()


def test_a_read_only_database_cannot_join_groups_but_can_describe_them(db_path):
    with streamlog.open(db_path) as db:
        fill(db, 4)
        c = db.consumer(group_id="g", auto_offset_reset="earliest")
        c.subscribe(["t"])
        poll_until(c, lambda r: len(r) >= 4, "records")
        c.commit()
        with streamlog.open(db_path, readonly=True) as reader:
            assert reader.describe_group("g").state == "Stable"
            member = reader.consumer(group_id="g")
            member.subscribe(["t"])
            with pytest.raises(streamlog.ReadOnlyError):
                member.poll(timeout=0)


def test_a_failed_auto_commit_is_logged_never_raised_by_poll_or_close(db_path, caplog):
    """Kafka's consumer logs a failed auto-commit, in poll() (autoCommitOffsetsAsync) and in
    close() (ConsumerCoordinator.maybeAutoCommitOffsetsSync: "consistent with async
    auto-commit failures, we do not propagate the exception"). A read-only consumer reading
    from its group's committed offsets got ReadOnlyError from poll() once
    auto_commit_interval_ms passed, and from close(); a group consumer whose topic was
    deleted got UnknownTopicOrPartitionError from close()."""
    tp = TopicPartition("t", 0)
    with streamlog.open(db_path) as db:
        fill(db, 4, partitions=1)
        db.alter_group_offsets("g", {tp: 1})
        with streamlog.open(db_path, readonly=True) as reader:
            consumer = reader.consumer(group_id="g", auto_commit_interval_ms=1)
            consumer.assign([tp])
            assert [r.offset for r in consumer.poll(timeout=5)] == [1, 2, 3]
            time.sleep(0.01)  # past auto_commit_interval_ms: the next poll auto-commits
            assert consumer.poll(timeout=0) == []
            consumer.close()
            assert consumer.closed
        assert db.describe_group("g").partitions[tp].committed == 1
        consumer = db.consumer(group_id="h", auto_offset_reset="earliest")
        consumer.assign([tp])
        assert len(consumer.poll(timeout=5)) == 4
        db.delete_topic("t")
        consumer.close()
    failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert any("auto-commit failed" in m and "open for writing" in m for m in failures)
    assert any("committing on close failed" in m and "open for writing" in m for m in failures)
    assert any("committing on close failed" in m and "'t' does not exist" in m
               for m in failures)


# --- administration --------------------------------------------------------------------


def test_describe_list_delete_and_reset_offsets(db):
    fill(db, 40)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                           client_id="app", max_poll_records=8)
    consumer.subscribe(["t"])
    poll_until(consumer, lambda r: len(r) >= 8, "records")
    consumer.commit({TopicPartition("t", 0): 4, TopicPartition("t", 1): 10})
    d = db.describe_group("g")
    assert (d.state, d.protocol_type, d.assignor) == ("Stable", "consumer", "range")
    assert [(m.client_id, m.assignment) for m in d.members] == [("app", partitions_of(db, "t"))]
    assert d.partitions[TopicPartition("t", 0)][:4] == (4, "", 10, 6)
    assert d.partitions[TopicPartition("t", 1)].lag == 0
    assert d.partitions[TopicPartition("t", 2)].committed is None   # assigned, never committed
    assert d.total_lag == 6
    assert [(g.group_id, g.state) for g in db.list_groups()] == [("g", "Stable")]
    with pytest.raises(streamlog.NonEmptyGroupError):
        db.delete_group("g")
    with pytest.raises(streamlog.NonEmptyGroupError):
        db.reset_group_offsets("g", partitions_of(db, "t"), "earliest")
    consumer.close()
    tps = partitions_of(db, "t")
    assert db.reset_group_offsets("g", tps[:2], "shift", -6, dry_run=True) == {
        tps[0]: 0, tps[1]: 4}
    assert db.describe_group("g").partitions[tps[1]].committed == 10   # dry run
    db.reset_group_offsets("g", tps, "offset", 7)
    assert {tp: p.committed for tp, p in db.describe_group("g").partitions.items()} == \
        dict.fromkeys(tps, 7)
    db.reset_group_offsets("g", tps, "latest")
    assert db.describe_group("g").total_lag == 0
    db.delete_group("g")
    assert db.list_groups() == []
    with pytest.raises(streamlog.GroupIdNotFoundError):
        db.describe_group("g")


def test_shift_reset_refuses_a_partition_without_a_committed_offset(db):
    # Kafka's ConsumerGroupCommand.prepareOffsetsToReset: --shift-by on a partition the group
    # has no committed offset for throws "Cannot shift offset for partition ... since there
    # is no current committed offset", before any offset is changed.
    fill(db, 8)
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    db.alter_group_offsets("g", {t0: 1})
    with pytest.raises(ValueError, match="no committed offset"):
        db.reset_group_offsets("g", [t0, t1], "shift", 1)
    assert {tp: p.committed for tp, p in db.describe_group("g").partitions.items()} == {t0: 1}
    assert db.reset_group_offsets("g", [t0], "shift", 1) == {t0: 2}


def test_delete_group_offsets_spares_subscribed_topics_and_outlives_a_reopen(db_path):
    # Kafka's OffsetDelete (OffsetMetadataManager.deleteOffsets and replay): a subscribed
    # topic's offsets stay (GROUP_SUBSCRIBED_TO_TOPIC) while the others go, and an offset
    # pending in an open transaction is dropped with the committed one, for good: the
    # transaction's commit marker does not bring it back, after a reopen either.
    db = streamlog.open(db_path)
    fill(db, 8)
    fill(db, 2, topic="u", partitions=1)
    t0, u0 = TopicPartition("t", 0), TopicPartition("u", 0)
    db.alter_group_offsets("g", {t0: 1, u0: 1})
    producer = db.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({u0: 2}, "g")
    consumer = db.consumer(group_id="g", enable_auto_commit=False)
    consumer.subscribe(["t"])
    poll_until(consumer, lambda _: consumer.assignment(), "an assignment")
    with pytest.raises(streamlog.GroupSubscribedToTopicError):
        db.delete_group_offsets("g", [t0, u0])
    producer.commit_transaction()
    producer.close()
    assert {tp: p.committed for tp, p in db.describe_group("g").partitions.items()
            if p.committed is not None} == {t0: 1}
    consumer.close()
    db.close()
    db = streamlog.open(db_path)
    try:
        assert {tp: p.committed for tp, p in db.describe_group("g").partitions.items()} == \
            {t0: 1}
        with pytest.raises(streamlog.GroupIdNotFoundError):
            db.delete_group_offsets("nobody", [t0])
    finally:
        db.close()


def test_a_rebalance_that_starts_while_a_member_syncs_is_not_missed(db):
    """Single-threaded and deterministic: heartbeats (every 10 s) cannot help.

    The leader's assignor lets the second member send its sync first, so that
    member is syncing when a third member's join starts the next rebalance.
    Taking in its sync answer must not make it forget that rebalance.
    """
    db.create_topic("t", partitions=6)
    slow = {"heartbeat_interval_ms": 10_000}
    consumers = {}

    class LetOthersSyncFirst:
        name = "range-after-others"

        def assign(self, partitions_per_topic, subscriptions):
            if "b" in consumers:
                consumers["b"].poll(timeout=0)   # b takes its join answer and sends its sync
            return get_assignor("range").assign(partitions_per_topic,
                                                subscriptions)

    def member(name):
        consumers[name] = db.consumer(group_id="g", client_id=name, **slow,
                                      partition_assignment_strategy=[LetOthersSyncFirst()])
        consumers[name].subscribe(["t"])
        consumers[name].poll(timeout=0)

    member("a")
    assert len(consumers["a"].assignment()) == 6
    member("b")                      # starts a rebalance; b waits for a
    consumers["a"].poll(timeout=0)   # a rejoins, leads; b syncs inside a's assignor
    assert db.describe_group("g").state == "Stable"
    member("c")                      # the next rebalance, while b has not taken its answer
    for _ in range(3):
        for name in ("b", "a", "c"):
            consumers[name].poll(timeout=0)
    d = db.describe_group("g")
    assert d.state == "Stable" and len(d.members) == 3
    assert sorted(len(c.assignment()) for c in consumers.values()) == [2, 2, 2]


def test_an_assigned_consumer_of_a_group_starts_at_its_committed_offset(db):
    # Kafka's consumer looks up the group's committed offset for every partition without a
    # position, assign()ed ones too (ClassicKafkaConsumer.updateFetchPositions ->
    # ConsumerCoordinator.initWithCommittedOffsetsIfNeeded); auto_offset_reset is for those
    # with none.
    fill(db, 20)
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    db.alter_group_offsets("g", {t0: 3})
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([t0, t1])
    assert consumer.position(t0) == 3 and consumer.position(t1) == 0
    consumer.seek(t1, 2)   # a position of its own is not replaced
    got = poll_until(consumer, lambda r: len(r) == 2 + 3, "the records after the positions")
    assert sorted((r.partition, r.offset) for r in got) == \
        [(0, 3), (0, 4), (1, 2), (1, 3), (1, 4)]
    consumer.close()


@pytest.mark.parametrize("how", ["assign", "subscribe"])
def test_a_consumer_waits_out_a_committed_offset_pending_in_a_transaction(db, how):
    # Kafka's consumer fetches committed offsets with require_stable and retries while one
    # is UNSTABLE_OFFSET_COMMIT (ConsumerCoordinator.fetchCommittedOffsets, KIP-447): a
    # consumer taking over a partition starts where the committing transaction says, never
    # at the offset before it, which would read again what that transaction consumed.
    fill(db, 20)
    t0 = TopicPartition("t", 0)
    db.alter_group_offsets("g", {t0: 1})
    producer = db.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({t0: 4}, "g")
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                           default_api_timeout_ms=200)
    with pytest.raises(streamlog.KafkaTimeoutError, match="pending in an open transaction"):
        consumer.committed([t0])   # Kafka's committed() asks for stable offsets too
    if how == "assign":
        consumer.assign([t0, TopicPartition("t", 1)])
        with pytest.raises(streamlog.KafkaTimeoutError, match="pending in an open transaction"):
            consumer.position(t0)
    else:
        consumer.subscribe(["t"])
    got = poll_until(consumer, lambda r: any(x.partition == 1 for x in r),
                     "records of the partition whose offset is not pending")
    assert all(r.partition != 0 for r in got)   # none of t-0 while its offset is pending
    producer.commit_transaction()
    producer.close()
    got = poll_until(consumer, lambda r: any(x.partition == 0 for x in r), "t-0's records")
    assert min(r.offset for r in got if r.partition == 0) == 4
    assert consumer.committed([t0]) == {t0: OffsetAndMetadata(4, "")}
    consumer.close()


def test_a_committed_leader_epoch_is_kept_across_a_reopen(db_path):
    # Kafka's OffsetAndMetadata carries the leader epoch of the last record consumed
    # (KIP-320); the coordinator keeps it with the offset (OffsetCommitValue v3). A commit
    # of an (offset, metadata, epoch) triple reads back whole, also after a reopen, and a
    # value written before the epoch was kept (version 1) reads back with none (-1).
    from streamlog.coordinator import offsets as offsets_log
    tp = TopicPartition("t", 0)
    with streamlog.open(db_path) as db:
        db.create_topic("t")
        db.consumer(group_id="g").commit({tp: (7, "note", 4)})
        with pytest.raises(ValueError, match="leader epoch"):
            db.consumer(group_id="g").commit({tp: OffsetAndMetadata(8, "", -2)})
    with streamlog.open(db_path) as db:
        assert db.consumer(group_id="g").committed([tp]) == {
            tp: OffsetAndMetadata(7, "note", 4)}
    store = offsets_log.OffsetStore.__new__(offsets_log.OffsetStore)
    store.offsets, store.groups = {}, {}
    key = offsets_log._offset_key("old", tp)
    store._apply(TopicPartition(offsets_log.OFFSETS_TOPIC, 0), key,
                 offsets_log._pack([1, 5, "m", 1000]))
    assert store.offsets["old"][tp] == offsets_log.CommittedOffset(5, "m", 1000, -1)


def test_a_consumer_commits_the_leader_epoch_its_position_came_with(db):
    # Kafka's consumer commits its position with the leader epoch of the batch it last
    # read from (FetchPosition.offsetEpoch, set by CompletedFetch from the batch's
    # partitionLeaderEpoch; KIP-320), the committed epoch when the position is the
    # committed offset, and none after a seek or a reset (OffsetFetcherUtils
    # .resetPositionIfNeeded: "This will ensure we skip validation").
    tp = TopicPartition("t", 0)
    fill(db, 12, partitions=1)
    consumer = db.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([tp])
    assert consumer.position(tp) == 0
    consumer.commit()
    assert consumer.committed([tp])[tp] == OffsetAndMetadata(0, "", -1)   # a reset's
    records = poll_until(consumer, lambda r: len(r) >= 12, "12 records")
    assert [r.offset for r in records] == list(range(12))
    consumer.commit()
    assert consumer.committed([tp])[tp] == OffsetAndMetadata(12, "", 0)   # the batch's
    consumer.seek(tp, 5)
    consumer.commit()
    assert consumer.committed([tp])[tp] == OffsetAndMetadata(5, "", -1)   # a seek's
    consumer.commit({tp: (3, "", 4)})
    consumer.close()
    restarted = db.consumer(group_id="g", enable_auto_commit=False)
    restarted.assign([tp])
    assert restarted.position(tp) == 3
    restarted.commit()
    assert restarted.committed([tp])[tp] == OffsetAndMetadata(3, "", 4)   # the committed
    restarted.close()
