"""An application that keeps its state as an event log, and rebuilds it by replaying.

    python examples/event_log_app.py [DIRECTORY]

A tiny bank: every deposit and withdrawal is an event in the `account-events`
topic, keyed by account so each account's events stay in order in one
partition. Balances are never stored: they are folded from the events. The
app writes a day of events, closes the database, reopens it (as after a
restart) and replays the log to rebuild the balances, then shows a point-in-
time replay from a timestamp. With no argument it uses a temporary directory.
"""
import json
import random
import sys
import tempfile

import streamlog
from streamlog import TopicPartition

TOPIC = "account-events"
START_MS = 1_700_000_000_000


def write_events(path, n=2000):
    rng = random.Random(42)
    expected = {}
    with streamlog.open(path) as db:
        if TOPIC not in db.topics():
            db.create_topic(TOPIC, partitions=4, config={"retention.ms": -1})
        producer = db.producer(acks="all", linger_ms=5,  # durable, as a ledger should be
                               value_serializer=lambda event: json.dumps(event).encode(),
                               key_serializer=str.encode)
        for i in range(n):
            account = f"acct-{rng.randrange(20):02d}"
            amount = rng.choice([1, 1, 1, -1]) * rng.randrange(1, 500)
            producer.send(TOPIC, key=account, value={"account": account, "amount": amount},
                          timestamp_ms=START_MS + i * 60_000)  # one event a minute
            expected[account] = expected.get(account, 0) + amount
        producer.flush()
    return expected


def replay(path, from_ms=None):
    """Fold the events into balances: everything, or only events at or after from_ms."""
    balances = {}
    with streamlog.open(path) as db:
        partitions = [TopicPartition(TOPIC, p.partition)
                      for p in db.describe_topic(TOPIC).partitions]
        consumer = db.consumer(auto_offset_reset="earliest",
                               value_deserializer=lambda raw: json.loads(raw))
        consumer.assign(partitions)
        if from_ms is not None:
            found = consumer.offsets_for_times({tp: from_ms for tp in partitions})
            for tp, where in found.items():
                if where is None:
                    consumer.seek_to_end([tp])
                else:
                    consumer.seek(tp, where.offset)
        end = consumer.end_offsets(partitions)
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            for record in consumer.poll(timeout=1.0):
                event = record.value
                balances[event["account"]] = balances.get(event["account"], 0) + event["amount"]
    return balances


def main(path):
    expected = write_events(path)
    rebuilt = replay(path)
    assert rebuilt == expected, "replay must rebuild exactly the balances that were written"
    print(f"replayed {len(rebuilt)} accounts; balances match what was written")
    richest = max(rebuilt, key=rebuilt.get)
    print(f"richest account: {richest} with {rebuilt[richest]}")
    last_hour = replay(path, from_ms=START_MS + 1999 * 60_000 - 3_600_000)
    print(f"net change over the last hour of events: {sum(last_hour.values())}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            main(d)
