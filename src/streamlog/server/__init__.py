"""A Kafka wire-protocol server in front of a database: Kafka's own clients (confluent-kafka,
kafka-python, aiokafka) produce to and fetch from it unchanged (network.py listens,
protocol.py frames through kio, handlers.py answers through the broker)."""
from .network import KafkaServer

__all__ = ["KafkaServer"]
