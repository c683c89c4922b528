"""Replicated cluster: acks=all throughput on 3 brokers against 1, and failover time.

    python bench/bench_cluster.py [--quick] [--repeats N] [--json FILE]

Kafka's own client (confluent-kafka / librdkafka) over loopback, every broker in this
process (as streamlog.testing.cluster runs them):

1. acks=all producer throughput: N records of 100-byte values to a topic of 8 partitions,
   idempotent producer, linger.ms=5, batch.size=1,000,000, compression none; a delivery
   callback counts every report (a record not acknowledged fails the run). On a 3-broker
   cluster (replication factor 3, min.insync.replicas=2: each batch is copied by two
   replica fetchers before it is acknowledged) against a 1-broker cluster (replication
   factor 1: the same code, nothing to copy). Target >= 0.5x. Printed too: the same
   producer against one database's own listener (db.serve(), where acks=all means fsync).
2. Failover: a topic of 1 partition, replication factor 3; a producer (acks=all) that has
   delivered to it; the leader is killed (kill: no clean shutdown, unflushed tail lost) and
   at once a record is produced; the time from the kill to that record's delivery report,
   p50 and p99 over K kills (the killed broker restarts and catches up between them). It
   covers the controller's election, the client's metadata refresh and its retry. Twice:
   with librdkafka's defaults, where the tail is the client's own reconnect backoff (it
   doubles up to reconnect.backoff.max.ms=10 s towards a broker it saw die, and the next
   leader is often the broker that just came back: any Kafka cluster shows the same), and
   with reconnect.backoff.max.ms=1000.
"""
import os
import shutil
import statistics
import sys
import tempfile
import time
from importlib.metadata import version

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

PARTITIONS = 8
VALUE_BYTES = 100
PRODUCER_CONFIG = {"linger.ms": 5, "batch.size": 1_000_000, "acks": "all",
                   "enable.idempotence": True, "compression.type": "none",
                   "queue.buffering.max.messages": 2_000_000}


def produce_all(ck, bootstrap, topic, n):
    delivered, failed = [0], []

    def report(err, _msg):
        if err is None:
            delivered[0] += 1
        else:
            failed.append(err)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "on_delivery": report,
                            **PRODUCER_CONFIG})
    value = b"v" * VALUE_BYTES
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(600)
    if failed or delivered[0] != n:
        raise RuntimeError(f"{delivered[0]} of {n} delivered; errors: {failed[:3]}")


class ClusterRun:
    """A fresh cluster of `brokers` per measured run (the topic's replication factor is
    the broker count)."""

    def __init__(self, root, brokers):
        self.root, self.brokers = root, brokers
        self.cluster = None

    def fresh(self):
        from streamlog.cluster import Cluster
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)
        self.cluster = Cluster(self.brokers, path=self.root,
                               config={"min.insync.replicas": min(2, self.brokers)})
        self.cluster.create_topic("bench", PARTITIONS, self.brokers)

    def close(self):
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None


class ServeRun(harness.FreshDatabase):
    def fresh(self):
        super().fresh()
        self.server = self.db.serve()


def failover_times(ck, root, kills, client_config=None):
    from streamlog.cluster import Cluster
    times = []
    with Cluster(3, path=root, config={"min.insync.replicas": 2}) as cluster:
        cluster.create_topic("f", 1, 3)
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                                "enable.idempotence": True, "linger.ms": 0,
                                **(client_config or {})})
        for _ in range(kills):
            done = []
            producer.produce("f", b"warm", partition=0,
                             on_delivery=lambda err, _m, done=done: done.append(err))
            producer.flush(30)
            if done != [None]:
                raise RuntimeError(f"warm-up record not delivered: {done}")
            cluster.wait_in_sync("f", timeout=60)
            leader = cluster.leader("f", 0)
            done = []
            start = time.perf_counter()
            cluster.kill(leader)
            producer.produce("f", b"after-kill", partition=0,
                             on_delivery=lambda err, _m, done=done: done.append(
                                 (err, time.perf_counter())))
            while not done:
                producer.poll(0.001)
            err, at = done[0]
            if err is not None:
                raise RuntimeError(f"the record after the kill failed: {err}")
            times.append(at - start)
            cluster.restart(leader)
        producer.flush(30)
    return times


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main():
    args = harness.parse_args(__doc__.splitlines()[0])
    try:
        import confluent_kafka as ck
    except ImportError:
        print("bench_cluster needs confluent-kafka: pip install confluent-kafka",
              file=sys.stderr)
        return 2
    harness.check_native()
    n = 10_000 if args.quick else 300_000
    kills = 5 if args.quick else 50
    results = harness.Results("bench_cluster")
    results.header()
    print(f"confluent-kafka {version('confluent-kafka')} (librdkafka {ck.libversion()[0]}); "
          f"topic of {PARTITIONS} partitions; producer: "
          + ", ".join(f"{k}={v}" for k, v in PRODUCER_CONFIG.items()), flush=True)
    tmp = tempfile.mkdtemp(prefix="streamlog-bench-cluster-")
    three = ClusterRun(os.path.join(tmp, "three"), 3)
    one = ClusterRun(os.path.join(tmp, "one"), 1)
    serve = ServeRun(os.path.join(tmp, "serve"), "bench", PARTITIONS)
    try:
        t_three, t_one, t_serve = harness.best_of(
            args.repeats,
            (three.fresh, lambda: produce_all(ck, three.cluster.bootstrap_servers, "bench", n)),
            (one.fresh, lambda: produce_all(ck, one.cluster.bootstrap_servers, "bench", n)),
            (serve.fresh, lambda: produce_all(ck, serve.server.bootstrap_servers, "bench", n)))
        results.add(f"acks=all produce, 3 brokers (RF 3, min ISR 2), {n:,} x 100 B", n / t_three,
                    "records/s", t_one / t_three, target=0.5, baseline="1 broker (RF 1)")
        results.add("  1-broker cluster, RF 1", n / t_one, "records/s")
        results.add("  3 brokers against one database's listener (acks=all: fsync)",
                    n / t_three, "records/s", t_serve / t_three, baseline="db.serve()")
        results.add("  db.serve(), acks=all", n / t_serve, "records/s")
        three.close(), one.close(), serve.close()

        for label, config in (("librdkafka defaults", None),
                              ("reconnect.backoff.max.ms=1000", {"reconnect.backoff.max.ms": 1000})):
            times = failover_times(ck, os.path.join(tmp, "failover"), kills, config)
            shutil.rmtree(os.path.join(tmp, "failover"), ignore_errors=True)
            p50, p99 = percentile(times, 0.5) * 1000, percentile(times, 0.99) * 1000
            print(f"leader kill -> first delivered acks=all record, {kills} kills, {label}: "
                  f"p50 {p50:,.1f} ms, p99 {p99:,.1f} ms, max {max(times) * 1000:,.1f} ms, "
                  f"mean {statistics.mean(times) * 1000:,.1f} ms", flush=True)
            for name, value in (("p50", p50), ("p99", p99)):
                results.rows.append(dict(label=f"failover {name}, {label}", value=value,
                                         unit="ms", ratio=None, target=None, baseline=None,
                                         met=None))
    finally:
        three.close(), one.close(), serve.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish(results, args)


if __name__ == "__main__":
    sys.exit(main())
