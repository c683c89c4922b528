"""Choosing a partition for a record without an explicit one.

- "default" (Kafka's built-in partitioner): a keyed record goes to
  to_positive(murmur2(key)) % partitions, so a key lands where it would on a
  Kafka cluster with the same partition count; a record without a key goes
  to the topic's current *sticky* partition, which switches (uniformly at
  random, KIP-794) when a record no longer fits its open batch, or after
  2 x batch.size bytes if batches leave before they fill. Null-key traffic
  thus fills whole batches and spreads over all partitions.
- "round_robin": every record to the next partition, keys ignored.
- "random": a uniformly random partition, keys ignored.
- a callable `fn(topic, key, num_partitions) -> int`: the user decides
  (key is the serialized key, or None).

Thread-safety: the producer calls these under its accumulator lock.
"""
import numbers
import random

from ..errors import InvalidConfigurationError, InvalidRequestError
from .murmur2 import partition_for_key


class DefaultPartitioner:
    def __init__(self, batch_size, ignore_keys=False, rng=None):
        self.batch_size = max(batch_size, 1)
        self.ignore_keys = ignore_keys
        self._rng = rng or random.Random()
        self._sticky = {}  # topic -> [partition, bytes produced to it]

    def partition(self, topic, key, num_partitions):
        if key is not None and not self.ignore_keys:
            return partition_for_key(key, num_partitions)
        state = self._sticky.get(topic)
        if state is None or state[0] >= num_partitions:
            return self.switch(topic, num_partitions)
        return state[0]

    def switch(self, topic, num_partitions):
        """A new sticky partition, uniformly at random (the batch of the old one is full)."""
        self._sticky[topic] = [self._rng.randrange(num_partitions), 0]
        return self._sticky[topic][0]

    def record_appended(self, topic, partition, size, num_partitions):
        """Count a null-key record; switch after 2 x batch.size bytes even if no batch filled
        (with linger.ms=0 the sender may take every batch before it fills)."""
        state = self._sticky.get(topic)
        if state is not None and state[0] == partition:
            state[1] += size
            if state[1] >= 2 * self.batch_size:
                self.switch(topic, num_partitions)

    def uses_sticky(self, key):
        return key is None or self.ignore_keys


class RoundRobinPartitioner:
    def __init__(self):
        self._next = {}

    def partition(self, topic, key, num_partitions):
        n = self._next.get(topic, 0)
        self._next[topic] = n + 1
        return n % num_partitions

    def record_appended(self, *args):
        pass

    def uses_sticky(self, key):
        return False


class RandomPartitioner:
    def __init__(self, rng=None):
        self._rng = rng or random.Random()

    def partition(self, topic, key, num_partitions):
        return self._rng.randrange(num_partitions)

    def record_appended(self, *args):
        pass

    def uses_sticky(self, key):
        return False


def valid_partition(p, num_partitions):
    """p as an int when it names one of num_partitions partitions, numpy's integers included
    (as a timestamp or a TopicPartition's pair may be one); None otherwise, a bool too."""
    if isinstance(p, numbers.Integral) and not isinstance(p, bool) and 0 <= p < num_partitions:
        return int(p)
    return None


class CallablePartitioner:
    def __init__(self, fn):
        self._fn = fn

    def partition(self, topic, key, num_partitions):
        returned = self._fn(topic, key, num_partitions)
        p = valid_partition(returned, num_partitions)
        if p is None:
            raise InvalidRequestError(
                f"the partitioner returned {returned!r} for topic {topic!r}, which has "
                f"{num_partitions} partitions (expected 0..{num_partitions - 1})")
        return p

    def record_appended(self, *args):
        pass

    def uses_sticky(self, key):
        return False


def make_partitioner(spec, batch_size, ignore_keys=False):
    if callable(spec) and not isinstance(spec, str):
        return CallablePartitioner(spec)
    if spec == "default":
        return DefaultPartitioner(batch_size, ignore_keys)
    if spec in ("round_robin", "roundrobin"):
        return RoundRobinPartitioner()
    if spec == "random":
        return RandomPartitioner()
    raise InvalidConfigurationError(
        f"unknown partitioner {spec!r}: use 'default', 'round_robin', 'random' or a callable "
        "fn(topic, key, num_partitions) -> int")
