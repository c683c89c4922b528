"""Small value types shared by every layer (bottom layer: imports nothing of streamlog)."""
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic, the unit of ordering and of storage."""

    topic: str
    partition: int

    def __str__(self):
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to consume, and a note stored with it;
    leader_epoch: the leader epoch of the last record consumed (-1: none), which Kafka's
    clients commit to validate the position later (KIP-320), kept and answered as given."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1

    @classmethod
    def of(cls, value):
        """value as an OffsetAndMetadata: one already, an (offset, metadata) pair, or an
        offset alone -- what every call that takes offsets to commit accepts."""
        if not isinstance(value, tuple):
            return cls(value)
        if not 1 <= len(value) <= 3:
            raise ValueError(f"an offset to commit is an offset, an (offset, metadata) "
                             f"pair or an (offset, metadata, leader epoch), not {value!r}")
        return cls(*value)
