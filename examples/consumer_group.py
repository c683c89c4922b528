"""Three consumers share a topic as one group; one leaves; nothing is lost or read twice.

Each consumer runs on its own thread, subscribes to "orders" in group
"billing", processes what poll() returns and then commits (at-least-once:
commit after processing). Its rebalance listener commits too when
partitions are taken away, so the next owner starts exactly where this one
stopped. Halfway through, one consumer closes: the group rebalances and the
other two take over its partitions. At the end the example checks that
every order was processed exactly once. Last, with every worker gone, the
group's offsets of two partitions are deleted (Kafka's OffsetDelete): the
group reads those two again from the start, and only those.

    python examples/consumer_group.py
"""
import threading
import time
from collections import Counter

import streamlog

ORDERS = 6_000
PARTITIONS = 6


class Worker(threading.Thread):
    def __init__(self, db, name, processed, lock):
        super().__init__(name=name)
        self.db, self.processed, self.lock = db, processed, lock
        self.stop = threading.Event()
        self.consumer = None

    # ConsumerRebalanceListener -----------------------------------------------------------
    def on_partitions_revoked(self, partitions):
        self.consumer.commit()   # hand over exactly what was processed
        print(f"  {self.name}: revoked   {sorted(p.partition for p in partitions)}")

    def on_partitions_assigned(self, partitions):
        print(f"  {self.name}: assigned  {sorted(p.partition for p in partitions)} -> owns "
              f"{sorted(p.partition for p in self.consumer.assignment())}")

    def run(self):
        self.consumer = self.db.consumer(group_id="billing", client_id=self.name,
                                         auto_offset_reset="earliest", enable_auto_commit=False,
                                         max_poll_records=100)
        self.consumer.subscribe(["orders"], listener=self)
        while not self.stop.is_set():
            records = self.consumer.poll(timeout=0.1)
            for record in records:           # "process" the order
                with self.lock:
                    self.processed[int(record.value)] += 1
            if records:
                time.sleep(0.01)             # processing takes a little while
                try:
                    self.consumer.commit()   # after processing: at-least-once
                except (streamlog.CommitFailedError, streamlog.RebalanceInProgressError) as exc:
                    # The group moved on before the commit: these records may be read again
                    # by their new owner (at-least-once), so processing must be idempotent.
                    print(f"  {self.name}: commit refused ({type(exc).__name__})")
        self.consumer.close()                # commits, revokes, leaves the group


def main():
    with streamlog.open() as db:             # a temporary database
        db.create_topic("orders", partitions=PARTITIONS)
        producer = db.producer()
        for i in range(ORDERS // 2):
            producer.send("orders", key=b"customer-%d" % (i % 97), value=b"%d" % i)
        producer.flush()

        processed, lock = Counter(), threading.Lock()
        workers = [Worker(db, f"worker-{i}", processed, lock) for i in range(3)]
        print("three workers join group 'billing':")
        for worker in workers:
            worker.start()
        while sum(processed.values()) < ORDERS // 4:
            time.sleep(0.01)

        print("worker-0 leaves; the others take over its partitions:")
        workers[0].stop.set()
        workers[0].join()
        for i in range(ORDERS // 2, ORDERS):   # more orders arrive meanwhile
            producer.send("orders", key=b"customer-%d" % (i % 97), value=b"%d" % i)
        producer.flush()

        deadline = time.monotonic() + 60
        while sum(processed.values()) < ORDERS and time.monotonic() < deadline:
            time.sleep(0.01)
        for worker in workers[1:]:
            worker.stop.set()
            worker.join()

        description = db.describe_group("billing")
        lost = [i for i in range(ORDERS) if processed[i] == 0]
        twice = [i for i, n in processed.items() if n > 1]
        print(f"group 'billing' is {description.state} at generation "
              f"{description.generation}; lag {description.total_lag}")
        print(f"processed {len(processed)} distinct orders of {ORDERS}: "
              f"{len(lost)} lost, {len(twice)} processed twice")
        if lost or twice:
            raise SystemExit("records were lost or repeated")

        # Reprocess two partitions: delete the group's offsets of them. Kafka allows it
        # since no member subscribes to "orders" any more (GroupSubscribedToTopicError else).
        replay = [streamlog.TopicPartition("orders", p) for p in (4, 5)]
        db.delete_group_offsets("billing", replay)
        kept = {tp.partition: p.committed
                for tp, p in db.describe_group("billing").partitions.items()
                if p.committed is not None}
        print(f"deleted the offsets of partitions 4, 5; committed now: {kept}")
        # A new member resumes at the committed offsets, and from the start where none is.
        expected = sum(description.partitions[tp].log_end_offset for tp in replay)
        read = Counter()
        with db.consumer(group_id="billing", auto_offset_reset="earliest") as again:
            again.subscribe(["orders"])
            deadline = time.monotonic() + 60
            while sum(read.values()) < expected and time.monotonic() < deadline:
                read.update(record.partition for record in again.poll(timeout=0.1))
            read.update(record.partition for record in again.poll(timeout=0.2))  # no more
        print(f"a new member of 'billing' reads {dict(sorted(read.items()))} records "
              f"(partition: count), all of partitions 4 and 5 again")
        if set(read) != {4, 5} or sum(read.values()) != expected:
            raise SystemExit("the group did not restart exactly the partitions deleted")


if __name__ == "__main__":
    main()
