"""Helpers shared by the test suite (importable as `support`)."""
import os
import time

from streamlog.storage.log_config import LogConfig
from streamlog.storage.record_batch import build_batch


def config(**overrides):
    """A LogConfig from Python-style keyword overrides (segment_bytes=..., ...)."""
    return LogConfig.from_dict(overrides)


def value_of(batch_no, i, size=0):
    """Deterministic record value: which batch, which record, optional padding."""
    base = b"b%06d-r%04d" % (batch_no, i)
    return base + b"x" * max(0, size - len(base))


def make_batch(batch_no, records=10, timestamp=None, value_size=0, keys=True, **kwargs):
    values = [value_of(batch_no, i, value_size) for i in range(records)]
    ks = [b"k%d" % (i % 7) for i in range(records)] if keys else None
    ts = 1_000_000 + batch_no if timestamp is None else timestamp
    return build_batch(values, keys=ks, timestamp=ts, **kwargs)


def read_all(log, start=None, max_bytes=1 << 16):
    """Every (offset, timestamp, key, value) from `start` (default: log start) to the HW."""
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.high_watermark:
        fetch = log.read(offset, max_bytes)
        if not fetch.batches:
            break
        for batch in fetch.batches:
            assert batch.next_offset > offset, f"a read at {offset} returned {batch!r}"
            for off, ts, key, value, _headers in batch.records():
                if off >= offset:
                    out.append((off, ts, key, value))
            offset = batch.next_offset
    return out


def segment_files(directory, suffix=".log"):
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(suffix))


def bitwise_crc32c(data):
    """Independent CRC-32C oracle: the reflected polynomial applied one bit at a time."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


GENEROUS_S = 30.0  # how long "eventually" may take on a loaded 2-core machine


def wait_until(predicate, what=None, timeout_s=GENEROUS_S):
    """predicate()'s first truthy value; AssertionError naming `what` if it has none by
    timeout_s.

    The one way the suite waits for something to happen. The deadline only bounds how long a
    broken build takes to fail: no verdict rests on how fast the condition came true.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting until "
                                 f"{what or 'the condition held'}")
        time.sleep(0.002)


def append_offset_valued(db, topic, records, unique=20):
    """records more on partition 0 of a compacted topic, each valued with its offset: the
    keys of its first `unique` offsets are never written again (compaction keeps them all),
    the others cycle through `unique` keys (compaction keeps the last of each)."""
    start = db.describe_topic(topic).partitions[0].log_end_offset
    producer = db.producer(linger_ms=0, batch_size=1024)
    for i in range(start, start + records):
        key = b"first-%d" % i if i < unique else b"k%d" % (i % unique)
        producer.send(topic, key=key, value=b"%d" % i, partition=0)
    producer.close()


def callback_catching(call, error):
    """(a producer callback that calls call(), the list of what it raised of type error)."""
    caught = []

    def callback(metadata, exception):
        try:
            call()
        except error as exc:
            caught.append(exc)
    return callback, caught


def clean_pass(log, first_dirty=None, now_ms=None, max_map_bytes=1 << 20, roll=True):
    """One cleaning pass on a PartitionLog, as the broker's cleaner runs a forced one (the
    active segment rolled first); returns the next first dirty offset."""
    from streamlog.storage.cleaner_manager import log_to_clean
    from streamlog.storage.log_cleaner import clean_log
    if roll:
        log.roll()
    now_ms = log.clock_ms() if now_ms is None else now_ms
    measured = log_to_clean(log, first_dirty, now_ms)
    if measured.first_uncleanable <= measured.first_dirty:
        return measured.first_dirty
    result = clean_log(log, measured.first_dirty, measured.first_uncleanable, now_ms,
                       max_map_bytes)
    assert result is not None, "the log changed under the pass"
    return result.first_dirty


def keyed_rows(log):
    """[(offset, key, value)] of a full read of the log."""
    return [(offset, key, value) for offset, _ts, key, value in read_all(log)]


def last_values(writes):
    """{key: (offset, value)} of the last write of each key, from [(offset, key, value)]."""
    out = {}
    for offset, key, value in writes:
        out[key] = (offset, value)
    return out


def producer_in_a_transaction(bootstrap, transactional_id, topic, value, timeout_s):
    """A confluent-kafka producer of transactional_id whose transaction is begun, with value
    sent to partition 0 of topic and flushed; not ended."""
    import confluent_kafka
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         "transactional.id": transactional_id})
    producer.init_transactions(timeout_s)
    producer.begin_transaction()
    producer.produce(topic, value=value, partition=0)
    producer.flush(timeout_s)
    return producer
