"""A small application that uses confluent-kafka, and its pytest tests against streamlog as a
fake Kafka: the application's code runs unchanged against a real log on a free port.

    python examples/test_with_fake_kafka.py      # runs the tests below with pytest
    pytest examples/test_with_fake_kafka.py      # the same

The fixtures (kafka_bootstrap, kafka_records, kafka_wait_for_records, kafka_wait_for_lag,
kafka_faults) come from streamlog's pytest plugin, loaded because streamlog is installed:
see docs/TESTING.md.
"""
import json
import sys

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")


# --- the application -----------------------------------------------------------------------

class InvoiceService:
    """Reads orders, writes one invoice per order (keyed by customer, so a customer's
    invoices stay in order on one partition), and commits what it has invoiced."""

    def __init__(self, bootstrap_servers):
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap_servers, "group.id": "invoicing",
            "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap_servers,
                                                  "enable.idempotence": True})
        self.consumer.subscribe(["orders"])

    def run_once(self, timeout=1.0):
        """Invoice what arrives within timeout; returns how many orders were handled."""
        messages = self.consumer.consume(100, timeout)
        for message in messages:
            if message.error():
                raise confluent_kafka.KafkaException(message.error())
            order = json.loads(message.value())
            invoice = {"order": order["id"], "amount": order["quantity"] * order["price"]}
            self.producer.produce("invoices", key=order["customer"].encode(),
                                  value=json.dumps(invoice).encode(),
                                  headers=[("source-offset", str(message.offset()).encode())])
        if messages:
            if self.producer.flush(30):
                raise RuntimeError("invoices not delivered")
            self.consumer.commit(asynchronous=False)
        return len(messages)

    def close(self):
        self.consumer.close()


def place_order(producer, order_id, customer, quantity, price):
    producer.produce("orders", key=customer.encode(), value=json.dumps(
        {"id": order_id, "customer": customer, "quantity": quantity, "price": price}).encode())


# --- its tests -----------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def topics(streamlog_db):
    # Created up front, as a test against a real broker would: a consumer that subscribes
    # before its topic exists gets UNKNOWN_TOPIC_OR_PART from Kafka (and from this fake).
    streamlog_db.create_topic("orders", partitions=2)
    streamlog_db.create_topic("invoices", partitions=2)


@pytest.fixture
def orders(kafka_bootstrap):
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap})
    yield producer
    producer.flush(10)


@pytest.fixture
def service(kafka_bootstrap):
    app = InvoiceService(kafka_bootstrap)
    yield app
    app.close()


def run_until(service, handled):
    total = 0
    while total < handled:
        total += service.run_once()
    return total


def test_each_order_is_invoiced_once_and_committed(service, orders, kafka_wait_for_records,
                                                   kafka_wait_for_lag):
    from streamlog.testing import assert_records
    place_order(orders, "o-1", "ada", 2, 10)
    place_order(orders, "o-2", "ada", 1, 5)
    orders.flush(10)
    run_until(service, 2)
    invoices = kafka_wait_for_records("invoices", 2)
    assert_records(invoices, keys=[b"ada", b"ada"],
                   values=[b'{"order": "o-1", "amount": 20}', b'{"order": "o-2", "amount": 5}'],
                   headers=[[("source-offset", b"0")], [("source-offset", b"1")]])
    kafka_wait_for_lag("invoicing", topics=["orders"])   # everything read was committed


def test_a_broker_hiccup_is_retried_without_duplicate_invoices(service, orders, kafka_faults,
                                                              kafka_records):
    # Kafka answers NOT_LEADER_OR_FOLLOWER during a leader change: the producer retries,
    # and idempotence keeps a retried batch from being written twice.
    kafka_faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=3, topic="invoices")
    place_order(orders, "o-3", "grace", 1, 7)
    orders.flush(10)
    run_until(service, 1)
    assert [r.key for r in kafka_records("invoices")] == [b"grace"]


def test_a_rebalance_does_not_lose_orders(service, orders, kafka_faults, kafka_records):
    place_order(orders, "o-4", "linus", 1, 1)
    orders.flush(10)
    run_until(service, 1)
    kafka_faults.rebalance("invoicing")          # as when another instance joins
    place_order(orders, "o-5", "linus", 3, 1)
    orders.flush(10)
    run_until(service, 1)
    assert [json.loads(r.value)["order"] for r in kafka_records("invoices")] == ["o-4", "o-5"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
