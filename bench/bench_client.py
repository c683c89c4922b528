"""Producer and consumer throughput against stdlib sqlite3, and produce->consume latency.

    python bench/bench_client.py [--quick]

All through the public API on one topic with one partition (sqlite3 stores
the same rows in one table):
1. send(): N records (16-byte keys, 100-byte values) one send() call each,
   then flush(); default producer settings (acks=1, linger.ms=0).
   Baseline: sqlite3 executemany (WAL, synchronous=NORMAL, transactions of
   10,000) of the same rows.
2. send_batch(): the same records in calls of 10,000.
3. poll() drain: a fresh consumer (max.poll.records=10,000, a bulk reader's
   setting) reads all N records as Record objects and adds up the value
   lengths. Baseline: a full ordered SELECT of (offset, key, value) rows,
   adding up the value lengths the same way. The write phase's input lists
   are freed first: alive, they make every full GC pass of either side
   traverse 2 x N references, which measures the benchmark, not the reader.
4. poll_batch() drain: the same as columns (RecordColumns). Same baseline.
5. latency: one record at a time, sent while a consumer thread waits in
   poll(); p50 / p99 from send() to the consumer holding the Record.
"""
import gc
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402
from bench_storage import SqliteRun, make_records  # noqa: E402

from streamlog import TopicPartition  # noqa: E402

TOPIC = "bench"
TP = TopicPartition(TOPIC, 0)


class Run(harness.FreshDatabase):
    def __init__(self, root):
        super().__init__(root, TOPIC, 1)

    def send_each(self, keys, values):
        producer = self.db.producer()
        send = producer.send
        for key, value in zip(keys, values, strict=True):
            send(TOPIC, value, key)
        producer.flush()
        producer.close()

    def send_batches(self, keys, values, size=10_000):
        producer = self.db.producer()
        futures = [producer.send_batch(TOPIC, values[i:i + size], keys=keys[i:i + size])
                   for i in range(0, len(values), size)]
        for future in futures:
            future.result()
        producer.close()

    def drain(self, n, columns):
        """Read every record, touching each value (as SqliteRun.read touches each row)."""
        consumer = self.db.consumer(auto_offset_reset="earliest", max_poll_records=10_000)
        consumer.assign([TP])
        count = total = 0
        while count < n:
            if columns:
                for chunk in consumer.poll_batch(timeout=5):
                    count += len(chunk)
                    total += int(chunk.value_offsets[-1])  # the bytes of every value
            else:
                for record in consumer.poll(timeout=5):
                    total += len(record.value)
                    count += 1
        consumer.close()
        assert total >= 100 * n
        return count


def latency(db, samples):
    """Microseconds from send() to the waiting consumer holding the record."""
    consumer = db.consumer(auto_offset_reset="latest", fetch_max_wait_ms=5_000)
    consumer.assign([TP])
    consumer.position(TP)
    producer = db.producer()
    got = []
    arrived = threading.Event()
    stop = threading.Event()

    def consume():
        while not stop.is_set():
            for record in consumer.poll(timeout=1):
                got.append(time.perf_counter_ns() - int(record.value))
                arrived.set()
    thread = threading.Thread(target=consume)
    thread.start()
    time.sleep(0.2)
    for _ in range(samples):
        arrived.clear()
        producer.send(TOPIC, value=b"%d" % time.perf_counter_ns())
        arrived.wait(5)
        time.sleep(0.0005)  # let the consumer thread park again before the next send
    stop.set()
    thread.join()
    producer.close()
    consumer.close()
    got.sort()
    return [x / 1000 for x in got]


def main():
    args = harness.parse_args(__doc__.splitlines()[0])
    harness.check_native()
    n = 20_000 if args.quick else 1_000_000
    samples = 200 if args.quick else 3000
    results = harness.Results("bench_client")
    results.header()
    tmp = tempfile.mkdtemp(prefix="streamlog-bench-")
    ours, theirs = Run(os.path.join(tmp, "sl")), SqliteRun(os.path.join(tmp, "db"))
    try:
        keys, values = make_records(n, 100)
        t_send, t_batch, t_sqlite = harness.best_of(
            args.repeats, (ours.fresh, lambda: ours.send_each(keys, values)),
            (ours.fresh, lambda: ours.send_batches(keys, values)),
            (theirs.clear, lambda: theirs.append(keys, values)))
        results.add(f"send() + flush(), {n:,} x 100 B", n / t_send, "records/s",
                    t_sqlite / t_send, 1.0, "sqlite3 executemany")
        results.add_absolute("  send() + flush() rate", n / t_send, "records/s", 300_000)
        results.add("send_batch() in calls of 10,000", n / t_batch, "records/s",
                    t_sqlite / t_batch, 3.0, "sqlite3 executemany")
        results.add("  sqlite3 executemany (WAL, synchronous=NORMAL)", n / t_sqlite,
                    "records/s")

        ours.fresh()
        ours.send_batches(keys, values)
        # The write phase's input lists (2 x N objects) would make every full GC pass of the
        # read phase traverse them, on both sides; they are not part of either read path.
        keys = values = None
        gc.collect()
        assert ours.drain(n, False) == ours.drain(n, True) == theirs.read(touch=True) == n
        t_poll, t_cols, t_select = harness.best_of(args.repeats, lambda: ours.drain(n, False),
                                                   lambda: ours.drain(n, True),
                                                   lambda: theirs.read(touch=True))
        results.add("poll() drain, Record objects", n / t_poll, "records/s", t_select / t_poll,
                    3.0, "sqlite3 SELECT")
        results.add("poll_batch() drain, columns", n / t_cols, "records/s", t_select / t_cols,
                    10.0, "sqlite3 SELECT")
        results.add("  sqlite3 full ordered SELECT", n / t_select, "records/s")

        lat = latency(ours.db, samples)
        p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
        results.add_absolute(f"produce->consume latency p50 ({len(lat)} single records)", p50,
                             "us", 100, higher_is_better=False)
        results.add("produce->consume latency p99", p99, "us")
    finally:
        ours.close()
        shutil.rmtree(tmp, ignore_errors=True)
    results.write_json(args.json)
    return harness.exit_code(results, args.quick)


if __name__ == "__main__":
    sys.exit(main())
