"""A table's latest state kept in a compacted topic, and rebuilt from it.

    python examples/changelog_table.py

An inventory service writes every change to a row as a record keyed by the row's id:
an update is the new row, a delete a tombstone (a null value). Compaction keeps only the
last record of each key, so the topic stays the size of the table, not of its history,
and rebuilding the table after a restart reads only that. Deleted rows' tombstones stay
for delete.retention.ms, so a reader that was away less than that still learns of them.
"""
import json
import random
import tempfile

import streamlog

TOPIC = "inventory"


def apply_changes(db, changes):
    """Write each (sku, row or None) change; the row is the whole new state, as JSON."""
    producer = db.producer(acks="all")
    for sku, row in changes:
        value = None if row is None else json.dumps(row).encode()
        producer.send(TOPIC, key=sku.encode(), value=value)
    producer.close()


def rebuild(db):
    """The table, from a full read of the topic: the last record of each key wins."""
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([streamlog.TopicPartition(TOPIC, p) for p in range(3)])
    table, records = {}, 0
    while True:
        polled = consumer.poll(timeout=0.2)
        if not polled:
            break
        for record in polled:
            records += 1
            if record.value is None:
                table.pop(record.key.decode(), None)
            else:
                table[record.key.decode()] = json.loads(record.value)
    consumer.close()
    return table, records


def main():
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as path, streamlog.open(path) as db:
        # Small segments so this small example has sealed segments to clean; the delete
        # horizon is one hour (delete.retention.ms), Kafka's default is one day.
        db.create_topic(TOPIC, partitions=3, config={
            "cleanup.policy": "compact", "segment.bytes": 16384,
            "delete.retention.ms": 3_600_000})
        skus = [f"sku-{i:03d}" for i in range(50)]
        changes = []
        for day in range(40):                     # 40 days of stock updates
            for sku in rng.sample(skus, 20):
                changes.append((sku, {"sku": sku, "stock": rng.randrange(100), "day": day}))
        changes += [(sku, None) for sku in skus[:5]]   # five products discontinued
        apply_changes(db, changes)

        before, read_before = rebuild(db)
        size_before = sum(p.size_bytes for p in db.describe_topic(TOPIC).partitions)
        results = db.compact(TOPIC)
        after, read_after = rebuild(db)
        size_after = sum(p.size_bytes for p in db.describe_topic(TOPIC).partitions)

        assert after == before, "compaction must not change the table"
        assert len(after) == 45 and not any(sku in after for sku in skus[:5])
        assert read_after < read_before
        kept = sum(r.stats.records_kept for r in results if r.stats)
        print(f"{len(changes)} changes to {len(skus)} rows; the table has {len(after)} rows")
        print(f"to rebuild it before compaction: {read_before} records, {size_before:,} "
              "bytes of log")
        print(f"after compaction:  {read_after} records ({kept} kept by the cleaner, "
              f"the tombstones of deleted rows included), {size_after:,} bytes")
        print(f"sku-010 now: {after['sku-010']}")


if __name__ == "__main__":
    main()
