"""Exactly-once producers: what idempotence (and, once built, transactions) cost.

    python bench/bench_transactions.py [--quick] [--repeats N] [--json FILE]

1. Idempotent send_batch (acks="all", so each batch carries a producer id, epoch and
   sequence that the log checks under its append lock) against the same send_batch with
   enable_idempotence=False and acks="all": target >= 0.9x.
2. Idempotent send() of single records, against the same without idempotence (the
   per-batch cost shows most where batches are small).

Transactions (1,000-record transactions, read_committed over 10% aborted data) are not
built yet: the issue's other two figures come with them.
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

import streamlog  # noqa: E402

VALUE = b"v" * 100


def bench_send_batch(results, tmp, records, chunk, repeats):
    root = os.path.join(tmp, "send_batch")
    shutil.rmtree(root, ignore_errors=True)
    values = [VALUE] * chunk
    with streamlog.open(root) as db:
        db.create_topic("idem", partitions=1)
        db.create_topic("plain", partitions=1)
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
    shutil.rmtree(root, ignore_errors=True)
    results.add(f"idempotent send_batch ({chunk:,} records a call, acks=all)",
                records / t_idem, "rec/s", ratio=t_plain / t_idem, target=0.9,
                baseline="the same, enable_idempotence=False")


def bench_send(results, tmp, records, repeats):
    root = os.path.join(tmp, "send")
    shutil.rmtree(root, ignore_errors=True)
    with streamlog.open(root) as db:
        db.create_topic("idem", partitions=1)
        db.create_topic("plain", partitions=1)
        idem = db.producer(acks="all")
        plain = db.producer(acks="all", enable_idempotence=False)

        def run(producer, topic):
            def go():
                for _ in range(records):
                    producer.send(topic, value=VALUE, partition=0)
                producer.flush()
            return go

        t_idem, t_plain = harness.best_of(repeats, run(idem, "idem"), run(plain, "plain"))
    shutil.rmtree(root, ignore_errors=True)
    results.add("idempotent send() (acks=all)", records / t_idem, "rec/s",
                ratio=t_plain / t_idem, baseline="the same, enable_idempotence=False")


def main():
    args = harness.parse_args(__doc__.splitlines()[0])
    harness.check_native()
    results = harness.Results("bench_transactions")
    results.header()
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        bench_send_batch(results, tmp, 20_000 if args.quick else 1_000_000, 1_000, args.repeats)
        bench_send(results, tmp, 5_000 if args.quick else 200_000, args.repeats)
    return harness.finish(results, args)


if __name__ == "__main__":
    sys.exit(main())
