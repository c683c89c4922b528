"""Exactly-once consume-transform-produce: orders in, invoices out, each order billed once.

    python examples/exactly_once.py

A consumer in group "billing" reads orders; a transactional producer writes one
invoice per order and commits the consumer's offsets in the same transaction
(send_offsets_to_transaction). Halfway through, a transaction is aborted (say the
invoice service failed): its invoices are never seen by read_committed readers, and
the orders are read again from the committed offsets. Then a second copy of the
application takes over from a stalled first one: init_transactions() fences the
first, whose commit fails with ProducerFencedError. The invoice topic ends up with
exactly one invoice per order.
"""
import time

import streamlog
from streamlog import TopicPartition
from streamlog.errors import ProducerFencedError

ORDERS = 40


def application(db):
    """One copy of the app: a group member reading orders, a transactional producer."""
    consumer = db.consumer(group_id="billing", isolation_level="read_committed",
                           enable_auto_commit=False, auto_offset_reset="earliest",
                           max_poll_records=8)
    consumer.subscribe(["orders"])
    producer = db.producer(transactional_id="billing-app")
    producer.init_transactions()          # fences any earlier copy with this id
    return consumer, producer


def process_one_poll(consumer, producer, fail=False):
    """One transaction: invoices for the polled orders plus the orders' offsets."""
    records = []
    for _ in range(50):
        records = consumer.poll(timeout=0.1)
        if records:
            break
    if not records:
        return 0
    producer.begin_transaction()
    for r in records:
        producer.send("invoices", key=r.key, value=b"invoice for " + r.value)
    next_offsets = {}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        next_offsets[tp] = max(next_offsets.get(tp, 0), r.offset + 1)
    producer.send_offsets_to_transaction(next_offsets, consumer.group_metadata())
    if fail:
        producer.abort_transaction()      # nothing of it is visible; read the orders again
        committed = consumer.committed(consumer.assignment())
        for tp in consumer.assignment():
            consumer.seek(tp, committed[tp].offset if committed.get(tp) else 0)
        return 0
    producer.commit_transaction()
    return len(records)


def main():
    with streamlog.open() as db:
        db.create_topic("orders", partitions=2)
        db.create_topic("invoices", partitions=1)
        orders = db.producer()
        for i in range(ORDERS):
            orders.send("orders", key=b"customer-%d" % (i % 5), value=b"order-%02d" % i)
        orders.flush()

        consumer, producer = application(db)
        billed = process_one_poll(consumer, producer)
        process_one_poll(consumer, producer, fail=True)
        billed += process_one_poll(consumer, producer)
        print(f"first copy billed {billed} orders, then one transaction was aborted")

        # The first copy stalls in the middle of a transaction; a second copy takes over.
        producer.begin_transaction()
        producer.send("invoices", value=b"invoice from a zombie")
        consumer.close()
        consumer2, producer2 = application(db)
        try:
            producer.commit_transaction()
        except ProducerFencedError:
            print("the stalled copy was fenced: its transaction was aborted")
        # It bills what the first copy did not commit, however long its group join takes.
        left, deadline = ORDERS - billed, time.monotonic() + 120
        while left:
            assert time.monotonic() < deadline, f"the second copy left {left} orders unbilled"
            left -= process_one_poll(consumer2, producer2)
        consumer2.close()

        reader = db.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
        reader.assign([TopicPartition("invoices", 0)])
        invoices = []
        while batch := reader.poll(timeout=0.2):
            invoices += [r.value for r in batch]
        expected = sorted(b"invoice for order-%02d" % i for i in range(ORDERS))
        assert sorted(invoices) == expected, "not exactly once"
        print(f"{len(invoices)} invoices for {ORDERS} orders, each exactly once")
        lag = db.describe_group("billing").total_lag
        print(f"group billing: committed to the end (lag {lag})")


if __name__ == "__main__":
    main()
