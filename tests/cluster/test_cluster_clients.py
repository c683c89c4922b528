"""Kafka's own clients against a 3-broker cluster while brokers are killed and restarted
20 times: confluent-kafka, kafka-python and aiokafka producers (idempotent, acks=all)
write side by side, a consumer group of each client reads, and the main thread kills
(unflushed tail lost) and restarts one broker after another.

Kafka's promise, asserted: with idempotence and acks=all, min.insync.replicas=2 and one
broker down at a time, every record a producer saw acknowledged is in the log exactly
once, and no record is written twice; the group keeps consuming through every change of
leader and coordinator."""
import asyncio
import logging
import threading
import time

import pytest

from streamlog.testing import cluster as make_cluster

from support import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

log = logging.getLogger("test.cluster_clients")

TOPIC = "orders"
KILLS = 20
# The bound on each wait for the cluster to be back in sync. A kill loses all of the
# victim's unflushed log -- all of it here, as flush.ms is Kafka's default (never) -- and
# the restarted broker copies every partition back before it rejoins the ISRs: the wait
# grows with every kill, and with the machine's load. The test waits for full ISRs, not
# for a time; this only bounds a cluster that never gets there.
IN_SYNC_TIMEOUT_S = 300


class Writer:
    """A producer thread: sends value `<name>-<i>` until stopped; `acked` is what its
    client reported delivered ({value: (partition, offset)}), `failed` what it reported
    lost."""

    def __init__(self, name, send_all):
        self.name = name
        self.acked, self.failed = {}, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=send_all, args=(self,), daemon=True,
                                       name=f"writer-{name}")

    def values(self):
        i = 0
        while not self.stop.is_set():
            yield b"%s-%d" % (self.name.encode(), i)
            i += 1
            time.sleep(0.002)


def confluent_writer(bootstrap):
    def run(w):
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                      "acks": "all", "linger.ms": 5,
                                      "message.timeout.ms": 120000})

        def delivered(err, msg):
            if err:
                w.failed.append(err)
            else:
                w.acked[msg.value()] = (msg.partition(), msg.offset())
        for value in w.values():
            p.produce(TOPIC, value=value, on_delivery=delivered)
            p.poll(0)
        assert p.flush(120) == 0
    return Writer("confluent", run)


def kafka_python_writer(bootstrap):
    def run(w):
        p = kafka.KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                acks="all", linger_ms=5, delivery_timeout_ms=120000,
                                request_timeout_ms=10000, retry_backoff_ms=50)
        futures = []
        for value in w.values():
            futures.append((value, p.send(TOPIC, value=value)))
        p.flush(120)
        for value, future in futures:
            try:
                meta = future.get(timeout=120)
                w.acked[value] = (meta.partition, meta.offset)
            except Exception as exc:   # noqa: BLE001 - the client's own error, recorded
                w.failed.append(exc)
        p.close()
    return Writer("kafkapython", run)


def aiokafka_writer(bootstrap):
    def run(w):
        async def main():
            p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                          acks="all", linger_ms=5, request_timeout_ms=10000,
                                          retry_backoff_ms=50)
            await p.start()
            pending = []
            try:
                for value in w.values():
                    pending.append((value, await p.send(TOPIC, value=value)))
                    await asyncio.sleep(0)
                for value, future in pending:
                    try:
                        meta = await future
                        w.acked[value] = (meta.partition, meta.offset)
                    except Exception as exc:   # noqa: BLE001 - recorded, judged below
                        w.failed.append(exc)
            finally:
                await p.stop()
        asyncio.run(main())
    return Writer("aiokafka", run)


class Reader:
    """A consumer thread of one client library, in a group of its own, reading the topic
    from the start until stopped; `consumed` is every value it was given (at least once:
    a record after the group's last commit is read again when its coordinator moves)."""

    def __init__(self, name, run, bootstrap, stop):
        self.name, self.consumed, self.stop = name, [], stop
        self.thread = threading.Thread(target=run, args=(self, bootstrap), daemon=True,
                                       name=f"reader-{name}")


def confluent_reader(r, bootstrap):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "readers-ck",
                                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                                  "reconnect.backoff.max.ms": 1000})
    c.subscribe([TOPIC])
    while not r.stop.is_set():
        m = c.poll(0.2)
        if m is not None and not m.error():
            r.consumed.append(m.value())
    c.close()


def kafka_python_reader(r, bootstrap):
    c = kafka.KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="readers-kp",
                            auto_offset_reset="earliest", session_timeout_ms=6000,
                            request_timeout_ms=10000, retry_backoff_ms=50)
    while not r.stop.is_set():
        try:
            polled = c.poll(timeout_ms=200)
        except kafka.errors.KafkaConnectionError:
            # kafka-python 3 raises out of poll() a refused connection its metadata refresh
            # met (a broker just killed); the error is retriable, and an application retries.
            continue
        for records in polled.values():
            r.consumed += [m.value for m in records]
    c.close()


def aiokafka_reader(r, bootstrap):
    async def main():
        c = aiokafka.AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="readers-aio",
                                      auto_offset_reset="earliest", session_timeout_ms=6000,
                                      request_timeout_ms=10000, retry_backoff_ms=50)
        await c.start()
        try:
            while not r.stop.is_set():
                for records in (await c.getmany(timeout_ms=200)).values():
                    r.consumed += [m.value for m in records]
        finally:
            await c.stop()
    asyncio.run(main())


@pytest.mark.slow
def test_three_clients_through_twenty_broker_kills(tmp_path):
    with make_cluster(3, path=str(tmp_path / "c"), config={"min.insync.replicas": 2},
                      replica_lag_time_max_ms=2000) as cluster:
        cluster.create_topic(TOPIC, 3, 3)
        bootstrap = cluster.bootstrap_servers
        consumer_stop = threading.Event()
        readers = [Reader(name, run, bootstrap, consumer_stop) for name, run in (
            ("confluent", confluent_reader), ("kafkapython", kafka_python_reader),
            ("aiokafka", aiokafka_reader))]
        for r in readers:
            r.thread.start()
        writers = [confluent_writer(bootstrap), kafka_python_writer(bootstrap),
                   aiokafka_writer(bootstrap)]
        try:
            _kill_and_check(cluster, writers, readers)
        finally:
            # Whatever failed, no client thread outlives the test (later tests count them).
            consumer_stop.set()
            for w in writers:
                w.stop.set()
            for t in [w.thread for w in writers] + [r.thread for r in readers]:
                if t.is_alive():
                    t.join(60)


def _kill_and_check(cluster, writers, readers):
    for w in writers:
        w.thread.start()
    for kill in range(KILLS):
        # One broker down at a time, each kill from full ISRs: every acknowledged
        # record has a copy on a live in-sync replica (Kafka's promise).
        cluster.wait_in_sync(TOPIC, timeout=IN_SYNC_TIMEOUT_S, offsets=False)
        victim = kill % 3
        log.info("kill %d: broker %d", kill, victim)
        cluster.kill(victim)
        time.sleep(0.3)
        cluster.restart(victim)
    # The writers go on until the last broker restarted is back in every ISR: records are
    # acknowledged after the last kill too. Full ISRs, not equal logs: under the writers'
    # stream of appends the replicas' ends are seldom all equal at one instant.
    cluster.wait_in_sync(TOPIC, timeout=IN_SYNC_TIMEOUT_S, offsets=False)
    for w in writers:
        w.stop.set()
    for w in writers:
        w.thread.join(180)
        assert not w.thread.is_alive(), f"{w.name} did not finish"
    cluster.wait_in_sync(TOPIC, timeout=IN_SYNC_TIMEOUT_S)
    at = {}   # (partition, offset) -> value, from each partition's leader
    written = []
    for p in range(3):
        for offset, value in cluster.replica_records(TOPIC, p, cluster.leader(TOPIC, p)):
            at[p, offset] = value
            written.append(value)
    assert len(written) == len(set(written)), "a record was written twice"
    for w in writers:
        assert w.acked, f"{w.name} had nothing acknowledged"
        missing = sorted(set(w.acked) - set(written))
        assert not missing, f"{w.name}: acknowledged then lost: " + ", ".join(
            f"{v!r} (acknowledged at {TOPIC}-{w.acked[v][0]}@{w.acked[v][1]}, which now "
            f"holds {at.get(w.acked[v])!r})" for v in missing[:5])
    # Each group keeps consuming through the kills: it reads every acknowledged record,
    # those written after the last kill included.
    every = set().union(*(set(w.acked) for w in writers))
    for r in readers:
        wait_until(lambda r=r: every <= set(r.consumed),
                   f"the {r.name} group to read every acknowledged record", timeout_s=180)
