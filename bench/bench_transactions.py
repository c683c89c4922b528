"""Exactly-once producers: what idempotence (and, once built, transactions) cost.

    python bench/bench_transactions.py [--quick] [--repeats N] [--json FILE]

1. Idempotent send_batch (acks="all", so each batch carries a producer id, epoch and
   sequence that the log checks under its append lock) against the same send_batch with
   enable_idempotence=False and acks="all": target >= 0.9x.
2. Idempotent send() of single records, against the same without idempotence (the
   per-batch cost shows most where batches are small).
3. Transactions of 1,000 records (send_batch, begin + commit each) against the same
   records from a non-transactional producer with acks="all": target >= 0.7x.
4. One transaction against one batch, medians, with the fdatasync/fsync calls each
   makes counted and timed: where the transaction's time goes (not judged); then both
   with every fdatasync/fsync a no-op, the ratio the coordinator's own work allows
   before any durability is paid for (a measurement only: nothing is durable then).
5. read_committed poll_batch over a log where 10% of the transactions were aborted,
   against read_uncommitted over the same log: target >= 0.8x.
"""
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

import streamlog  # noqa: E402

VALUE = b"v" * 100


@contextlib.contextmanager
def database(tmp, name, *topics):
    """A fresh database under tmp with one-partition topics; removed afterwards."""
    root = os.path.join(tmp, name)
    shutil.rmtree(root, ignore_errors=True)
    with streamlog.open(root) as db:
        for topic in topics:
            db.create_topic(topic, partitions=1)
        yield db
    shutil.rmtree(root, ignore_errors=True)


def bench_send_batch(results, tmp, records, chunk, repeats):
    values = [VALUE] * chunk
    with database(tmp, "send_batch", "idem", "plain") as db:
        idem = db.producer(acks="all")
        plain = db.producer(acks="all", enable_idempotence=False)
        assert idem.settings["enable.idempotence"] and not plain.settings["enable.idempotence"]

        def run(producer, topic):
            def go():
                for _ in range(records // chunk):
                    producer.send_batch(topic, values, partition=0)
                producer.flush()
            return go

        t_idem, t_plain = harness.best_of(repeats, run(idem, "idem"), run(plain, "plain"))
        batch = db._broker.partition_log(streamlog.TopicPartition("idem", 0)) \
            .read(0, 1 << 20).batches[0]
        assert batch.producer_id >= 0 and batch.base_sequence == 0  # it measured idempotence
    results.add(f"idempotent send_batch ({chunk:,} records a call, acks=all)",
                records / t_idem, "rec/s", ratio=t_plain / t_idem, target=0.9,
                baseline="the same, enable_idempotence=False")


def bench_send(results, tmp, records, repeats):
    with database(tmp, "send", "idem", "plain") as db:
        idem = db.producer(acks="all")
        plain = db.producer(acks="all", enable_idempotence=False)

        def run(producer, topic):
            def go():
                for _ in range(records):
                    producer.send(topic, value=VALUE, partition=0)
                producer.flush()
            return go

        t_idem, t_plain = harness.best_of(repeats, run(idem, "idem"), run(plain, "plain"))
    results.add("idempotent send() (acks=all)", records / t_idem, "rec/s",
                ratio=t_plain / t_idem, baseline="the same, enable_idempotence=False")


@contextlib.contextmanager
def transaction_and_batch(tmp, name, per_txn):
    """(one transaction of per_txn records, one batch of them + flush with acks="all"), two
    functions writing to topics "txn" and "plain" of a fresh database."""
    values = [VALUE] * per_txn
    with database(tmp, name, "txn", "plain") as db:
        txn = db.producer(transactional_id=name)
        txn.init_transactions()
        plain = db.producer(acks="all")

        def transaction():
            txn.begin_transaction()
            txn.send_batch("txn", values, partition=0)
            txn.commit_transaction()

        def batch():
            plain.send_batch("plain", values, partition=0)
            plain.flush()
        yield transaction, batch


def bench_transactional(results, tmp, records, per_txn, repeats):
    with transaction_and_batch(tmp, "bench", per_txn) as (transaction, batch):
        def transactional():
            for _ in range(records // per_txn):
                transaction()

        def non_transactional():
            for _ in range(records // per_txn):
                batch()

        t_txn, t_plain = harness.best_of(repeats, transactional, non_transactional)
    results.add(f"transactions of {per_txn:,} records (send_batch + commit)", records / t_txn,
                "rec/s", ratio=t_plain / t_txn, target=0.7,
                baseline="the same batches, acks=all, no transaction")


class SyncClock:
    """Counts and times the process's fdatasync/fsync calls while it is installed."""

    def __init__(self):
        self.calls, self.seconds = 0, 0.0

    def _wrap(self, real):
        def timed(fd):
            start = time.perf_counter()
            try:
                return real(fd)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
        return timed

    @contextlib.contextmanager
    def installed(self, durable=True):
        """durable=False makes every call a no-op (counted, not timed): a measurement of
        what the rest costs, with nothing written durably."""
        saved = os.fdatasync, os.fsync
        if durable:
            os.fdatasync, os.fsync = self._wrap(saved[0]), self._wrap(saved[1])
        else:
            os.fdatasync = os.fsync = self._wrap(lambda fd: None)
        try:
            yield self
        finally:
            os.fdatasync, os.fsync = saved


def _medians(rounds, functions, durable):
    """{name: (median seconds, sync calls per round, seconds per sync call)}, the functions
    called in turn, round after round, so that the machine's drift touches each alike."""
    times = {name: [] for name in functions}
    clocks = {name: SyncClock() for name in functions}
    for _ in range(rounds):
        for name, fn in functions.items():
            with clocks[name].installed(durable):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(times[name]), clocks[name].calls / rounds,
                   clocks[name].seconds / max(clocks[name].calls, 1)) for name in functions}


def bench_transaction_cost(results, tmp, rounds, per_txn):
    """Where one transaction's time goes next to one plain batch: the median time of each,
    and the fdatasyncs each makes (count, time); then both again with every fdatasync and
    fsync a no-op. Not judged; it says what bounds the transaction ratio on this machine: a
    transaction must make at least the data's fdatasync and PrepareCommit's before
    commit_transaction() returns, one more than the batch, and the no-op run shows the ratio
    that the coordinator's own work leaves before any durability is paid for."""
    with transaction_and_batch(tmp, "cost", per_txn) as (transaction, batch):
        functions = {"transaction": transaction, "batch": batch}
        for fn in functions.values():
            fn()   # the first of each opens files and makes the coordinator
        cost = _medians(rounds, functions, durable=True)
        free = _medians(rounds, functions, durable=False)
    (t_txn, n_txn, s_txn), (t_plain, n_plain, s_plain) = cost["transaction"], cost["batch"]
    results.add(f"one transaction of {per_txn:,} records (median of {rounds})", t_txn * 1e6,
                "us", ratio=t_plain / t_txn, baseline="one batch + flush, acks=all")
    print(f"    a transaction made {n_txn:.1f} fdatasync/fsync calls of {s_txn * 1e3:.2f} ms "
          f"each; the batch {n_plain:.1f} of {s_plain * 1e3:.2f} ms. Without them: "
          f"{(t_txn - n_txn * s_txn) * 1e3:.2f} ms against {(t_plain - n_plain * s_plain) * 1e3:.2f}"
          f" ms. With one fdatasync more than the batch and no other cost, a transaction "
          f"would reach {t_plain / (t_plain + s_plain):.2f}x.", flush=True)
    t_txn, t_plain = free["transaction"][0], free["batch"][0]
    results.add(f"the same, every fdatasync/fsync a no-op (median of {rounds})",
                t_txn * 1e6, "us", ratio=t_plain / t_txn,
                baseline="the batch, also with no fsync: nothing durable, a measurement only")


def bench_read_committed(results, tmp, records, per_txn, repeats):
    values = [VALUE] * per_txn
    tp = streamlog.TopicPartition("mixed", 0)
    with database(tmp, "read", "mixed") as db:
        txn = db.producer(transactional_id="writer")
        txn.init_transactions()
        for i in range(records // per_txn):
            txn.begin_transaction()
            txn.send_batch("mixed", values, partition=0)
            if i % 10 == 9:
                txn.abort_transaction()     # 10% of the transactions
            else:
                txn.commit_transaction()

        def read(isolation):
            def go():
                consumer = db.consumer(isolation_level=isolation, max_poll_records=100_000)
                consumer.assign([tp])
                consumer.seek(tp, 0)
                got = 0
                while True:
                    chunks = consumer.poll_batch(timeout=0)
                    if not chunks:
                        break
                    got += sum(len(c) for c in chunks)
                consumer.close()
                read.counts[isolation] = got
            return go
        read.counts = {}
        t_committed, t_uncommitted = harness.best_of(repeats, read("read_committed"),
                                                     read("read_uncommitted"))
        assert read.counts["read_committed"] == records - records // 10  # it skipped 10%
    results.add("read_committed poll_batch, 10% of transactions aborted",
                read.counts["read_committed"] / t_committed, "rec/s",
                ratio=t_uncommitted / t_committed, target=0.8,
                baseline="read_uncommitted over the same log")


def main():
    args = harness.parse_args(__doc__.splitlines()[0])
    harness.check_native()
    results = harness.Results("bench_transactions")
    results.header()
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        bench_send_batch(results, tmp, 20_000 if args.quick else 1_000_000, 1_000, args.repeats)
        bench_send(results, tmp, 5_000 if args.quick else 200_000, args.repeats)
        bench_transactional(results, tmp, 20_000 if args.quick else 1_000_000, 1_000,
                            args.repeats)
        bench_transaction_cost(results, tmp, 20 if args.quick else 300, 1_000)
        bench_read_committed(results, tmp, 20_000 if args.quick else 1_000_000, 1_000,
                             args.repeats)
    return harness.finish(results, args)


if __name__ == "__main__":
    sys.exit(main())
