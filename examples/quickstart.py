"""streamlog in one minute: a topic, a producer, a consumer.

    python examples/quickstart.py [DIRECTORY]

With no argument the database is a throw-away temporary directory.
"""
import sys

import streamlog
from streamlog import TopicPartition


def main(path=None):
    with streamlog.open(path) as db:
        if "greetings" not in db.topics():
            db.create_topic("greetings", partitions=3)

        producer = db.producer()
        for i, name in enumerate(["ada", "grace", "edsger", "barbara", "ken", "ada"]):
            producer.send("greetings", value=f"hello {name} #{i}".encode(), key=name.encode())
        producer.flush()  # everything above is now appended (acks=1)

        metadata = producer.send("greetings", value=b"one more", key=b"ada").result()
        print(f"the last record went to partition {metadata.partition} at offset "
              f"{metadata.offset}")

        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("greetings", p) for p in range(3)])
        for record in consumer.poll(timeout=1.0):
            print(f"  partition {record.partition} offset {record.offset}: "
                  f"{record.key.decode()} -> {record.value.decode()}")

        # The same key always lands in the same partition, in order.
        for d in db.describe_topic("greetings").partitions:
            print(f"partition {d.partition}: offsets {d.log_start_offset}..{d.high_watermark - 1}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
