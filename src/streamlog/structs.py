"""Small value types shared by every layer (bottom layer: imports nothing of streamlog)."""
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic, the unit of ordering and of storage."""

    topic: str
    partition: int

    def __str__(self):
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to consume, and a note stored with it."""

    offset: int
    metadata: str = ""
