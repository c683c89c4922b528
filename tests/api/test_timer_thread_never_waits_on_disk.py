"""A slow disk under a lingering batch holds no timer: long polls and sessions expire on time.

The timing wheel's one reaper thread runs long-poll expiry, session and rebalance timeouts and
heartbeats. The producer's linger sweep appended on it (and, with flush.messages, fsynced), so a
slow fsync held all of them. Here the fsync of a lingering batch is held on an Event (the test
hook stands in for a disk that does not answer) and, while it is held, a timer task fires, a
long poll expires and a silent member's session times out. Each verdict waits for its
condition; a generous deadline only bounds how long a broken build takes to fail.
"""
import threading

import streamlog
from streamlog import TopicPartition

from support import wait_until

GENEROUS_S = 20


def hold_fsyncs(db, tp):
    """Make tp's fsyncs wait for `release`; `held` is set once one is waiting."""
    partition_log = db._broker.partition_log(tp)  # test hook: the disk of one partition
    held, release = threading.Event(), threading.Event()
    real_flush = partition_log.flush

    def slow_flush():
        held.set()
        release.wait(GENEROUS_S * 3)
        return real_flush()
    partition_log.flush = slow_flush
    return held, release


def test_a_held_fsync_of_a_lingering_batch_delays_no_timer(db_path):
    with streamlog.open(db_path, config={"group.min.session.timeout.ms": 50}) as db:
        db.create_topic("slow", config={"flush.messages": 1})  # every append fsyncs
        db.create_topic("fast")
        held, release = hold_fsyncs(db, TopicPartition("slow", 0))
        try:
            producer = db.producer(linger_ms=5)
            lingering = producer.send("slow", value=b"waits for the disk")
            assert held.wait(GENEROUS_S), "the lingering batch was never appended"

            # 1. A timer task comes due and runs.
            fired = threading.Event()
            db._broker.timer.add(1, fired.set)
            assert fired.wait(GENEROUS_S), "the timer's thread is stuck behind the disk"

            # 2. A long poll with nothing to read expires on the wheel: the fetch's delayed
            # operation is completed by its expiry, not by the broker's fallback guard.
            fetch = db._broker.fetch({TopicPartition("fast", 0): 0}, max_wait_ms=10)
            assert fetch[TopicPartition("fast", 0)].batches == []
            purgatory = db._broker.fetch_purgatory
            assert wait_until(lambda: purgatory.num_delayed() == 0, "the long poll expired",
                              GENEROUS_S)

            # 3. A member that stops heartbeating is expelled when its session times out.
            member = db.consumer(group_id="g", session_timeout_ms=100,
                                 heartbeat_interval_ms=20)
            member.subscribe(["fast"])
            assert wait_until(lambda: member.poll(timeout=0.05) == [] and member.assignment(),
                              "the member is assigned", GENEROUS_S)
            member._group.stop_heartbeats()  # test hook: as if its process froze
            wait_until(lambda: db.describe_group("g").members == [],
                       "the session timeout fired while the disk was held", GENEROUS_S)
            assert not lingering.done()  # all of it happened while the fsync was held
        finally:
            release.set()
        assert lingering.result(GENEROUS_S).offset == 0
