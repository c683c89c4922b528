"""streamlog: Kafka's log model embedded in one Python process.

The public API (DESIGN.md section 4) is exactly `__all__`; everything else is
internal and may change.
"""
from .errors import StreamlogError
from .structs import TopicPartition

__all__ = ["StreamlogError", "TopicPartition"]
