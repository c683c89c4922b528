"""Kafka wire server: confluent-kafka throughput, latency and start-up, against baselines.

    python bench/bench_server.py [--quick] [--repeats N] [--json FILE]

Kafka's own client (confluent-kafka / librdkafka) talks to db.serve() over loopback, the
server in this process (as the pytest plugin runs it), one topic of 8 partitions:

1. Producer throughput: N records of 100-byte values (no key: librdkafka's sticky
   partitioner), one produce() call each, then flush(); linger.ms=5, batch.size=1,000,000,
   compression none, acks=1 (librdkafka's default is acks=all, which streamlog fsyncs).
   A delivery callback counts every report: a record not acknowledged fails the run.
   Target >= 500,000 records/s.
2. Consumer throughput: a fresh Consumer assigned every partition from offset 0 reads the
   N records back with consume(num_messages=10,000) and adds up the value lengths, twice:
   with librdkafka's default consumer config, and tuned for throughput as the producer is
   (two client-side stalls removed: a 500 ms offset-query retry when assign() comes before
   the client has the topic's metadata, avoided by list_topics() first; and the 1,000 ms
   fetch.queue.backoff.ms librdkafka 2.4+ waits whenever its local queue holds 100,000
   messages, set to 10). Target >= 300,000 records/s, judged on the tuned client: the
   default one idles for whole seconds in the client whatever the broker (the same
   against Kafka), so its figure swings between runs (220k to 380k seen) and is printed,
   not judged.
   Baselines of 1 and 2, measured in the same run: the same records through the in-process
   API (db.producer().send() per record with the same linger / batch size / acks, and
   db.consumer().poll() with max.poll.records=10,000), and the same confluent-kafka client
   code run against mockafka-py's FakeProducer / FakeConsumer (an in-memory mock of
   confluent-kafka, when installed: pip install mockafka-py). What mockafka-py cannot do,
   so the mock's code differs from the real one there (mockafka-py 0.2.3):
   - FakeProducer.produce() without partition= raises (no partitioner): the mock run
     passes partition= round robin;
   - it never calls delivery callbacks (flush() and poll() do nothing): the mock run counts
     the records in its store instead;
   - FakeConsumer.assign() does nothing: the mock run subscribe()s (its subscribe reads
     every partition from its first offset, no group);
   - FakeProducer has no close().
3. Produce-to-consume latency over loopback: one record at a time (linger.ms=0, acks=1,
   TCP_NODELAY) carrying its perf_counter send time, while a consumer thread positioned at
   the end waits in poll(); p50 / p99. Not run on mockafka-py (no network, and its poll()
   never waits: there is nothing comparable to time).
4. Start-up: from db.serve() on a fresh database (auto.create.topics.enable on, as the
   pytest plugin's) to the first delivery report of a fresh Producer with the default
   config (acks=all, linger.ms=5): median of 20 runs. Target <= 50 ms. Baselines: the first
   append of a fresh database through the in-process producer (send().result()), and
   sqlite3 (connect, CREATE TABLE, INSERT one row, commit). The runs are in this process,
   where the server's modules are already imported; one more run in a fresh interpreter
   shows the first serve() of a test session (which imports them: kio's schemas).
   Not on mockafka-py (no server).
"""
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import version

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

import streamlog  # noqa: E402
from streamlog import TopicPartition  # noqa: E402

TOPIC = "bench"
PARTITIONS = 8
VALUE_BYTES = 100
CONSUME_BATCH = 10_000
TIMEOUT = 120  # seconds any one stage may wait for records before the run fails

PRODUCER_CONFIG = {"linger.ms": 5, "batch.size": 1_000_000, "compression.type": "none",
                   "acks": 1}
# librdkafka (2.4+) postpones a partition's next fetch by fetch.queue.backoff.ms (1,000) once
# its local queue holds queued.min.messages (100,000): the default consumer idles whenever it
# fetches faster than the application reads.
TUNED_CONSUMER_CONFIG = {"fetch.queue.backoff.ms": 10}
LATENCY_PRODUCER_CONFIG = {"linger.ms": 0, "acks": 1, "socket.nagle.disable": True}


def make_values(n):
    """n distinct 100-byte values."""
    filler = bytes(range(256)) * 2
    return [b"%08d" % i + filler[i % 200:i % 200 + VALUE_BYTES - 8] for i in range(n)]


# --- the client code: the same for confluent-kafka and mockafka-py -------------------------

def produce_all(producer, values, partitions=None):
    """produce() each value, then flush(); returns (delivered, failed) from the delivery
    callback given in the producer's config. partitions: pass partition= round robin over
    that many (mockafka-py has no partitioner); None: the client's partitioner."""
    produce, poll = producer.produce, producer.poll
    for i, value in enumerate(values):
        kwargs = {} if partitions is None else {"partition": i % partitions}
        while True:
            try:
                produce(TOPIC, value, **kwargs)
                break
            except BufferError:  # the client's queue is full: let it drain
                poll(0.05)
        if not i & 0x3FFF:
            poll(0)
    left = producer.flush(TIMEOUT)
    if left:
        raise RuntimeError(f"{left:,} records still unacknowledged after flush({TIMEOUT})")
    close = getattr(producer, "close", None)  # mockafka-py's FakeProducer has no close()
    if close is not None:
        close()


def consume_all(consumer, n):
    """Read n records with consume() batches; returns (records, value bytes)."""
    count = total = 0
    deadline = time.monotonic() + TIMEOUT
    while count < n:
        messages = consumer.consume(num_messages=CONSUME_BATCH, timeout=1.0)
        for message in messages:
            if message.error() is not None:
                raise RuntimeError(f"consumer error: {message.error()}")
            total += len(message.value())
        count += len(messages)
        if not messages and time.monotonic() > deadline:
            raise RuntimeError(f"only {count:,} of {n:,} records read in {TIMEOUT} s")
    consumer.close()
    return count, total


class DeliveryCount:
    """The producer's on_delivery callback: counts acknowledged records, keeps errors."""

    def __init__(self):
        self.delivered = 0
        self.errors = []

    def __call__(self, err, msg):
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(err)

    def check(self, n, what):
        if self.errors or self.delivered != n:
            raise RuntimeError(f"{what}: {self.delivered:,} of {n:,} records acknowledged, "
                               f"{len(self.errors):,} failed (first: "
                               f"{self.errors[0] if self.errors else None})")


# --- the three systems --------------------------------------------------------------------

class WireRun(harness.FreshDatabase):
    """A database with the topic, served; confluent-kafka clients against it."""

    def __init__(self, root, ck):
        super().__init__(root, TOPIC, PARTITIONS)
        self.ck = ck
        self.server = None

    def fresh(self):
        super().fresh()
        self.server = self.db.serve(host="127.0.0.1", port=0)

    def close(self):
        if self.server is not None:
            self.server.close()
            self.server = None
        super().close()

    def produce(self, values):
        report = DeliveryCount()
        producer = self.ck.Producer({"bootstrap.servers": self.server.bootstrap_servers,
                                     "on_delivery": report, **PRODUCER_CONFIG})
        produce_all(producer, values)
        report.check(len(values), "confluent-kafka Producer")

    def consume(self, n, tuned=False):
        config = {"bootstrap.servers": self.server.bootstrap_servers, "group.id": "bench",
                  "enable.auto.commit": False}
        if tuned:
            config.update(TUNED_CONSUMER_CONFIG)
        consumer = self.ck.Consumer(config)
        if tuned:  # leaders known before assign(): no 500 ms offset-query retry
            consumer.list_topics(TOPIC, timeout=10)
        consumer.assign([self.ck.TopicPartition(TOPIC, p, self.ck.OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        return consume_all(consumer, n)


class MockRun:
    """mockafka-py: the same client code on FakeProducer / FakeConsumer (one global store)."""

    def __init__(self, mockafka):
        self.mockafka = mockafka

    def fresh(self):
        admin = self.mockafka.FakeAdminClientImpl(clean=True)  # empties the global store
        admin.kafka.create_partition(topic=TOPIC, partitions=PARTITIONS)

    def close(self):
        self.mockafka.FakeAdminClientImpl(clean=True)

    def produce(self, values):
        report = DeliveryCount()
        producer = self.mockafka.FakeProducer({"on_delivery": report, **PRODUCER_CONFIG})
        produce_all(producer, values, partitions=PARTITIONS)
        # No delivery reports from the mock: count what its store holds instead.
        stored = self.mockafka.FakeAdminClientImpl().kafka.number_of_message_in_topic(TOPIC)
        if stored != len(values):
            raise RuntimeError(f"mockafka-py holds {stored:,} of {len(values):,} records")

    def consume(self, n):
        consumer = self.mockafka.FakeConsumer({"group.id": "bench"})
        consumer.subscribe([TOPIC])  # its assign() does nothing
        return consume_all(consumer, n)


class InProcessRun(harness.FreshDatabase):
    """The same records through the library's own producer and consumer."""

    def __init__(self, root):
        super().__init__(root, TOPIC, PARTITIONS)

    def produce(self, values):
        producer = self.db.producer(acks=1, linger_ms=PRODUCER_CONFIG["linger.ms"],
                                    batch_size=PRODUCER_CONFIG["batch.size"])
        send = producer.send
        for value in values:
            send(TOPIC, value)
        producer.flush()
        producer.close()

    def consume(self, n):
        consumer = self.db.consumer(auto_offset_reset="earliest", max_poll_records=CONSUME_BATCH)
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        count = total = 0
        deadline = time.monotonic() + TIMEOUT
        while count < n:
            records = consumer.poll(timeout=1.0)
            for record in records:
                total += len(record.value)
            count += len(records)
            if not records and time.monotonic() > deadline:
                raise RuntimeError(f"only {count:,} of {n:,} records read in {TIMEOUT} s")
        consumer.close()
        return count, total


# --- latency and start-up -----------------------------------------------------------------

def latency(ck, server, samples):
    """Microseconds from produce() to a waiting consumer thread holding the record."""
    bootstrap = server.bootstrap_servers
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "latency",
                            "enable.auto.commit": False, "socket.nagle.disable": True})
    consumer.assign([ck.TopicPartition(TOPIC, 0, ck.OFFSET_END)])
    report = DeliveryCount()
    producer = ck.Producer({"bootstrap.servers": bootstrap, "on_delivery": report,
                            **LATENCY_PRODUCER_CONFIG})
    got = []
    arrived = threading.Event()
    stop = threading.Event()
    errors = []

    def consume():
        while not stop.is_set():
            message = consumer.poll(0.1)
            if message is None:
                continue
            now = time.perf_counter_ns()
            if message.error() is not None:
                errors.append(message.error())
            else:
                got.append(now - int(message.value()))
            arrived.set()
    thread = threading.Thread(target=consume, name="bench-latency-consumer")
    thread.start()
    try:
        # Warm up until the consumer has resolved the end offset and fetches: a record sent
        # before that would be skipped, and the first ones pay for connections.
        deadline = time.monotonic() + 30
        while len(got) < 20:
            if time.monotonic() > deadline:
                raise RuntimeError("the latency consumer received nothing in 30 s")
            arrived.clear()
            producer.produce(TOPIC, b"%d" % time.perf_counter_ns(), partition=0)
            producer.poll(0)
            arrived.wait(0.5)
        producer.flush(10)
        time.sleep(0.1)
        del got[:]
        lost = 0
        for _ in range(samples):
            arrived.clear()
            producer.produce(TOPIC, b"%d" % time.perf_counter_ns(), partition=0)
            if not arrived.wait(5):
                lost += 1
            producer.poll(0)  # serve the delivery report
        producer.flush(10)
        if errors or lost:
            raise RuntimeError(f"latency: {lost} records never arrived, errors {errors[:3]}")
    finally:
        stop.set()
        thread.join()
        consumer.close()
        producer.close()
    got.sort()
    return [x / 1000 for x in got]


# The first serve() of a process: the server's modules (kio) are imported by db.serve().
COLD_START_CHILD = """
import sys, time, confluent_kafka, streamlog
db = streamlog.open(sys.argv[1], config={"auto.create.topics.enable": True})
got = []
start = time.perf_counter()
server = db.serve(host="127.0.0.1", port=0)
producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers})
producer.produce("first", b"hello",
                 on_delivery=lambda err, msg: got.append((err, time.perf_counter())))
producer.flush(30)
producer.close()
server.close()
db.close()
assert got and got[0][0] is None, got
print((got[0][1] - start) * 1e6)
"""


def cold_start(tmp):
    """Microseconds from the first db.serve() of a fresh interpreter to a delivery report."""
    root = os.path.join(tmp, "cold-start")
    try:
        out = subprocess.run([sys.executable, "-c", COLD_START_CHILD, root], check=True,
                             capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return float(out.stdout.strip().splitlines()[-1])


def startup_runs(ck, tmp, runs):
    """Per run, in microseconds: serve() -> first delivery report of a fresh Producer
    (default config) on a fresh database; serve() alone; the in-process first append on a
    fresh database; sqlite3's first row."""
    wire, serve_only, inproc, sqlite = [], [], [], []
    for i in range(runs):
        root = os.path.join(tmp, f"startup-{i}")
        db = streamlog.open(os.path.join(root, "wire"),
                            config={"auto.create.topics.enable": True})
        server = producer = None
        try:
            delivered = []
            start = time.perf_counter()
            server = db.serve(host="127.0.0.1", port=0)
            served = time.perf_counter()
            producer = ck.Producer({"bootstrap.servers": server.bootstrap_servers})
            producer.produce("first", b"hello",
                             on_delivery=lambda err, msg, got=delivered: got.append(
                                 (err, time.perf_counter())))
            producer.flush(30)
            if not delivered or delivered[0][0] is not None:
                raise RuntimeError(f"start-up run {i}: no delivery report ({delivered})")
            wire.append((delivered[0][1] - start) * 1e6)
            serve_only.append((served - start) * 1e6)
        finally:
            if producer is not None:
                producer.close()
            if server is not None:
                server.close()
            db.close()

        db = streamlog.open(os.path.join(root, "inproc"),
                            config={"auto.create.topics.enable": True})
        try:
            start = time.perf_counter()
            p = db.producer()
            p.send("first", b"hello").result()
            inproc.append((time.perf_counter() - start) * 1e6)
            p.close()
        finally:
            db.close()

        start = time.perf_counter()
        conn = sqlite3.connect(os.path.join(root, "first.sqlite"))
        conn.execute("CREATE TABLE first (offset INTEGER PRIMARY KEY, value BLOB)")
        with conn:
            conn.execute("INSERT INTO first VALUES (0, ?)", (b"hello",))
        sqlite.append((time.perf_counter() - start) * 1e6)
        conn.close()
        shutil.rmtree(root, ignore_errors=True)
    return wire, serve_only, inproc, sqlite


# --- main ---------------------------------------------------------------------------------

def main():
    args = harness.parse_args(__doc__.splitlines()[0])
    try:
        import confluent_kafka as ck
    except ImportError:
        print("bench_server needs confluent-kafka (Kafka's librdkafka client): "
              "pip install confluent-kafka (or pip install 'streamlog[test]')", file=sys.stderr)
        return 2
    try:
        import mockafka
    except ImportError:
        mockafka = None
    harness.check_native()
    n = 20_000 if args.quick else 1_000_000
    samples = 200 if args.quick else 2_000
    startups = 5 if args.quick else 20
    results = harness.Results("bench_server")
    results.header()
    print(f"confluent-kafka {version('confluent-kafka')} (librdkafka {ck.libversion()[0]}); "
          f"topic of {PARTITIONS} partitions; producer: "
          + ", ".join(f"{k}={v}" for k, v in PRODUCER_CONFIG.items()), flush=True)
    if mockafka is None:
        print("mockafka-py not installed: the ratios to it are skipped "
              "(pip install mockafka-py)", flush=True)
    else:
        print(f"mockafka-py {version('mockafka-py')}: produce() with partition= round robin "
              "(it has no partitioner), no delivery reports (records counted in its store), "
              "subscribe() (its assign() does nothing)", flush=True)

    tmp = tempfile.mkdtemp(prefix="streamlog-bench-server-")
    wire = WireRun(os.path.join(tmp, "wire"), ck)
    inproc = InProcessRun(os.path.join(tmp, "inproc"))
    mock = MockRun(mockafka) if mockafka is not None else None
    try:
        values = make_values(n)
        cases = [(wire.fresh, lambda: wire.produce(values)),
                 (inproc.fresh, lambda: inproc.produce(values))]
        if mock is not None:
            cases.append((mock.fresh, lambda: mock.produce(values)))
        t_wire, t_inproc, *t_mock = harness.best_of(args.repeats, *cases)
        results.add(f"Producer.produce() + flush(), {n:,} x 100 B", n / t_wire, "records/s",
                    t_inproc / t_wire, baseline="in-process db.producer().send()")
        if t_mock:
            results.add("  the same against mockafka-py FakeProducer", n / t_wire, "records/s",
                        t_mock[0] / t_wire, baseline="mockafka-py")
        results.add_absolute("  Producer rate through the server (acks=1)", n / t_wire,
                             "records/s", 500_000)
        results.add("  in-process db.producer().send() + flush()", n / t_inproc, "records/s")
        if t_mock:
            results.add("  mockafka-py FakeProducer.produce()", n / t_mock[0], "records/s")

        values = None  # the read phase should not traverse them in every GC pass
        checks = [wire.consume(n), wire.consume(n, tuned=True), inproc.consume(n)] + ([mock.consume(n)] if mock else [])
        if any(check != (n, n * VALUE_BYTES) for check in checks):
            raise RuntimeError(f"read back (records, bytes) {checks}, "
                               f"expected {(n, n * VALUE_BYTES)}")
        cases = [lambda: wire.consume(n), lambda: wire.consume(n, tuned=True),
                 lambda: inproc.consume(n)]
        if mock is not None:
            cases.append(lambda: mock.consume(n))
        t_wire, t_tuned, t_inproc, *t_mock = harness.best_of(args.repeats, *cases)
        results.add(f"Consumer.consume({CONSUME_BATCH:,}) drain, {PARTITIONS} partitions",
                    n / t_wire, "records/s", t_inproc / t_wire,
                    baseline="in-process db.consumer().poll()")
        if t_mock:
            results.add("  the same against mockafka-py FakeConsumer", n / t_wire, "records/s",
                        t_mock[0] / t_wire, baseline="mockafka-py")
        results.add("  tuned: list_topics() first, fetch.queue.backoff.ms=10", n / t_tuned,
                    "records/s", t_inproc / t_tuned, baseline="in-process db.consumer().poll()")
        results.add_absolute("  Consumer rate through the server (tuned client)", n / t_tuned,
                             "records/s", 300_000)
        results.add("  in-process db.consumer().poll() drain", n / t_inproc, "records/s")
        if t_mock:
            results.add("  mockafka-py FakeConsumer.consume()", n / t_mock[0], "records/s")
        if mock is not None:
            mock.close()

        lat = latency(ck, wire.server, samples)
        p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
        results.add(f"produce->consume latency p50 ({len(lat):,} single records)", p50, "us")
        results.add("produce->consume latency p99", p99, "us")
        print("  (not on mockafka-py: no network, and its poll() never waits)", flush=True)
        wire.close()
        inproc.close()

        t_start, t_serve, t_first, t_sqlite = (statistics.median(x) for x in
                                               startup_runs(ck, tmp, startups))
        results.add_absolute(f"db.serve() -> first delivery report, median of {startups}",
                             t_start / 1000, "ms", 50, higher_is_better=False)
        results.add("  the same in us, vs the in-process first append", t_start, "us",
                    t_first / t_start, baseline="db.producer().send().result()")
        results.add("  the same in us, vs sqlite3's first row", t_start, "us",
                    t_sqlite / t_start, baseline="sqlite3 connect+CREATE+INSERT+commit")
        results.add("  the same, first serve() of a fresh interpreter", cold_start(tmp), "us")
        results.add("  db.serve() alone", t_serve, "us")
        results.add("  in-process: fresh producer, first send().result()", t_first, "us")
        results.add("  sqlite3: connect, CREATE TABLE, INSERT, commit", t_sqlite, "us")
        print("  (not on mockafka-py: it has no server to start)", flush=True)
    finally:
        wire.close()
        inproc.close()
        if mock is not None:
            mock.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish(results, args)


if __name__ == "__main__":
    sys.exit(main())
