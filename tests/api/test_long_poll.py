"""The consumer's long poll through the broker: fetch.max.wait.ms on the timing wheel, fetch.min.bytes.

A fetch that finds too little data waits as a DelayedFetch in the broker's
purgatory; an append completes it once fetch.min.bytes are readable, the
timing wheel's reaper expires it after fetch.max.wait.ms. Broker.fetch also
waits at most 1 s longer than fetch.max.wait.ms, a backstop for a broker
closed under the waiter, so a dead reaper would still let fetches return,
just 1 s late and without the expiry ever running. These tests tell the two
apart by the thread that completed the DelayedFetch.

Timing decides nothing here: which thread completed a wait says whether the
wheel expired it or an append completed it, and the one time check is a lower
bound, that a wait never ends before fetch.max.wait.ms. How fast a poll wakes
is measured in bench/, not asserted here.
"""
import threading
import time


from streamlog import TopicPartition
from support import wait_until

TP0 = TopicPartition("t", 0)
MAX_WAIT_MS = 300
REAPER = "streamlog-timer-broker"
GENEROUS_S = 60.0  # join timeouts: only reached when a test is failing


def test_fetch_on_an_empty_partition_is_expired_by_the_wheel_after_max_wait(db, completions):
    db.create_topic("t", partitions=1)
    start = time.monotonic()
    result = db._broker.fetch({TP0: 0}, max_wait_ms=MAX_WAIT_MS, min_bytes=1)
    elapsed_s = time.monotonic() - start
    assert result[TP0].error is None and result[TP0].batches == []
    assert elapsed_s >= MAX_WAIT_MS / 1000  # never before fetch.max.wait.ms
    # The reaper expired it: with a dead reaper nothing completes it and only the backstop
    # ends the wait, at max_wait + 1 s. A reaper a loaded machine held back past the
    # backstop still expires it, later: wait for that, a dead one never does.
    wait_until(lambda: completions, "the wheel expired the fetch")
    assert completions == [REAPER]


def test_consumer_poll_on_an_empty_partition_returns_empty_after_max_wait(db, completions):
    db.create_topic("t", partitions=1)
    consumer = db.consumer(auto_offset_reset="earliest", fetch_max_wait_ms=MAX_WAIT_MS)
    consumer.assign([TP0])
    consumer.position(TP0)  # resolve the position first: the poll is only the long poll
    start = time.monotonic()
    records = consumer.poll(timeout=MAX_WAIT_MS / 1000)
    elapsed_s = time.monotonic() - start
    assert records == []
    assert elapsed_s >= MAX_WAIT_MS / 1000
    wait_until(lambda: completions, "the wheel expired the fetch")
    assert completions == [REAPER]
    consumer.close()



def test_fetch_min_bytes_holds_the_poll_until_enough_bytes_are_appended(db, completions):
    db.create_topic("t", partitions=1)
    max_wait_ms = 20_000
    consumer = db.consumer(auto_offset_reset="earliest", fetch_min_bytes=1000,
                           fetch_max_wait_ms=max_wait_ms)
    consumer.assign([TP0])
    consumer.position(TP0)
    producer = db.producer(linger_ms=0)
    polled = []

    def poll():
        polled.append(consumer.poll(timeout=GENEROUS_S))

    poller = threading.Thread(target=poll)
    poller.start()
    purgatory = db._broker.fetch_purgatory
    wait_until(lambda: purgatory.watched() > 0, "the fetch is parked")
    # One small batch, well under 1000 bytes. The append tries to complete the waiting fetch
    # before send() returns (Broker.produce), so by now it has tried, and must have declined.
    producer.send("t", value=b"s" * 10).result()
    assert poller.is_alive() and completions == [] and purgatory.watched() > 0
    producer.send("t", value=b"L" * 1000).result()
    poller.join(GENEROUS_S)
    assert not poller.is_alive()
    assert [len(r.value) for r in polled[0]] == [10, 1000]
    # Completed by the append (on the producer's thread), not by the wheel at max wait.
    assert completions and completions[0] != REAPER
    producer.close()
    consumer.close()


def test_fetch_min_bytes_counts_batches_across_segments(db, completions):
    # segment.bytes below two batches: every append rolls a new segment, and a read stops
    # at each segment's end, so reaching 1000 bytes takes batches from several segments.
    db.create_topic("t", partitions=1, config={"segment.bytes": 400})
    producer = db.producer(linger_ms=0)
    for _ in range(3):
        producer.send("t", value=b"v" * 200).result()  # ~270-byte batches: 3 are < 1000
    assert len(db._broker.partition_log(TP0).segments) >= 3
    done = []
    fetcher = threading.Thread(target=lambda: done.append(
        db._broker.fetch({TP0: 0}, max_wait_ms=20_000, min_bytes=1000)))
    fetcher.start()
    wait_until(lambda: db._broker.fetch_purgatory.watched() > 0, "the fetch is parked")
    assert completions == []
    producer.send("t", value=b"v" * 200).result()  # the fourth crosses 1000 bytes
    fetcher.join(GENEROUS_S)
    assert done and completions and completions[0] != REAPER
    producer.close()


def test_fetch_min_bytes_already_available_answers_at_once(db, completions):
    db.create_topic("t", partitions=1)
    producer = db.producer(linger_ms=0)
    producer.send("t", value=b"x" * 2000).result()
    result = db._broker.fetch({TP0: 0}, max_wait_ms=20_000, min_bytes=1000)
    assert result[TP0].batches and completions == []  # never parked in the purgatory
    producer.close()
