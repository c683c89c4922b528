"""Test-suite helpers: a temporary database behind a Kafka listener, for application code that
uses Kafka's own clients (the pytest plugin in pytest_plugin.py wraps these as fixtures).

    records(db, topic)                 every record of a topic, partition by partition
    wait_for_records(db, topic, n)     the records once there are at least n (or an
                                       AssertionError saying how many came)
    wait_for_lag(db, group)            once the group has committed up to the end of its
                                       topics (lag 0, or at most `lag`)
    assert_records(records, keys=, values=, headers=)
                                       the records' keys / values / headers, in order,
                                       with the first difference named on failure
    cluster(brokers=3)                 a replicated cluster of brokers in this process,
                                       with faults on demand (docs/CLUSTER.md)
"""
import time

import streamlog
from streamlog import TopicPartition

_POLL_S = 0.02


def fake_kafka_database(path=None, config=None):
    """A database as a default Kafka broker behaves (topics created on first use), at path
    (None: a temporary directory, removed on close)."""
    settings = {"auto.create.topics.enable": True}
    settings.update(config or {})
    return streamlog.open(path, config=settings)


def cluster(brokers=3, path=None, config=None, **options):
    """A cluster of `brokers` replicated brokers (streamlog.cluster.Cluster; a context
    manager), topics created on first use as a default Kafka cluster does, at path (None:
    a temporary directory, removed on close). options: replica_lag_time_max_ms,
    replica_fetch_wait_max_ms, host, port."""
    from ..cluster import Cluster   # kio (the wire codec) loads only for what serves
    settings = {"auto.create.topics.enable": True}
    settings.update(config or {})
    return Cluster(brokers, path=path, config=settings, **options)


def records(db, topic, isolation_level="read_committed", timeout=10.0):
    """Every record of topic, partition by partition in offset order (streamlog.Record):
    by default what a read_committed consumer sees (no aborted or still-open transactional
    records, no transaction markers); isolation_level="read_uncommitted" for all of them."""
    info = db.describe_topic(topic)
    consumer = db.consumer(auto_offset_reset="earliest", isolation_level=isolation_level)
    try:
        out = []
        for partition in info.partitions:
            tp = TopicPartition(topic, partition.partition)
            consumer.assign([tp])
            consumer.seek(tp, partition.log_start_offset)
            end = partition.last_stable_offset if isolation_level == "read_committed" \
                else partition.high_watermark
            deadline = time.monotonic() + timeout
            while consumer.position(tp) < end:
                out += consumer.poll(timeout=0.1)
                if time.monotonic() > deadline:
                    raise AssertionError(f"{tp} could not be read to offset {end} in "
                                         f"{timeout} s (at {consumer.position(tp)})")
        return out
    finally:
        consumer.close()


def wait_for_records(db, topic, count, timeout=10.0, isolation_level="read_committed"):
    """The topic's records (as records() reads them) once there are at least `count` (an
    application's producer may deliver in the background); AssertionError after `timeout`
    seconds otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = records(db, topic, isolation_level, timeout)
        except streamlog.errors.UnknownTopicOrPartitionError:
            got = []   # not created yet (auto-created on its first use)
        if len(got) >= count:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic!r} holds {len(got)} record(s) after "
                                 f"{timeout} s; expected at least {count}")
        time.sleep(_POLL_S)


def _lags(db, group, topics):
    description = db.describe_group(group)
    topics = topics or sorted({tp.topic for tp in description.partitions})
    lags = {}
    for topic in topics:
        for partition in db.describe_topic(topic).partitions:
            tp = TopicPartition(topic, partition.partition)
            found = description.partitions.get(tp)
            committed = found.committed if found is not None else None
            if committed is None:   # never committed: everything in it is still to read
                committed = partition.log_start_offset
            lags[tp] = max(partition.high_watermark - committed, 0)
    return lags


def wait_for_lag(db, group, lag=0, topics=None, timeout=30.0):
    """Wait until the group's committed offsets are within `lag` records of the end of
    `topics` (default: the topics it has offsets for), summed over their partitions;
    returns {TopicPartition: lag}. AssertionError after `timeout` seconds, naming each
    partition's lag."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            lags = _lags(db, group, topics)
        except streamlog.errors.GroupIdNotFoundError:
            lags = None   # no member has joined or committed yet
        if lags and sum(lags.values()) <= lag:
            return lags
        if time.monotonic() > deadline:
            raise AssertionError(f"group {group!r} did not reach lag <= {lag} in {timeout} s: "
                                 f"{'it does not exist' if lags is None else lags or 'no offsets'}")
        time.sleep(_POLL_S)


def assert_records(got, keys=None, values=None, headers=None):
    """Assert the records' keys, values and/or headers equal the lists given (in order;
    headers as lists of (name, value) pairs); the message names the first difference."""
    for field, expected in (("key", keys), ("value", values), ("headers", headers)):
        if expected is None:
            continue
        actual = [list(r.headers) if field == "headers" else getattr(r, field) for r in got]
        expected = [list(h) for h in expected] if field == "headers" else list(expected)
        if actual == expected:
            continue
        if len(actual) != len(expected):
            raise AssertionError(f"{len(actual)} record(s), expected {len(expected)}; "
                                 f"their {field}s: {actual!r}")
        index = next(i for i, (a, e) in enumerate(zip(actual, expected, strict=True)) if a != e)
        record = got[index]
        raise AssertionError(f"record {index} ({record.topic}[{record.partition}] offset "
                             f"{record.offset}) has {field} {actual[index]!r}, expected "
                             f"{expected[index]!r}")
