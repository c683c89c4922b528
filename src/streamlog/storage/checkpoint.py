"""The offset checkpoint files of a log root (recovery points, log start offsets),
each replaced atomically on write (durable.write_atomically).

Offset checkpoint format (text, as Kafka's): line 1 version `0`, line 2 the
entry count, then one `<topic> <partition> <offset>` line per partition.
"""
from ..errors import KafkaStorageError
from ..structs import TopicPartition
from .durable import write_atomically

VERSION = 0


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint file does not parse; callers fall back to a full recovery."""


class OffsetCheckpointFile:
    def __init__(self, path):
        self.path = path

    def write(self, offsets):
        """offsets: {TopicPartition: offset}. Sorted for stable, diffable files."""
        lines = [str(VERSION), str(len(offsets))]
        for tp in sorted(offsets):
            lines.append(f"{tp.topic} {tp.partition} {offsets[tp]}")
        write_atomically(self.path, ("\n".join(lines) + "\n").encode("utf-8"))

    def read(self):
        """{TopicPartition: offset}; {} when the file does not exist."""
        try:
            with open(self.path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            raise CorruptCheckpointError(f"cannot read {self.path}: {exc}") from exc
        try:
            if int(lines[0]) != VERSION:
                raise ValueError(f"unknown version {lines[0]!r}")
            count = int(lines[1])
            entries = lines[2:]
            if len(entries) != count:
                raise ValueError(f"expected {count} entries, found {len(entries)}")
            out = {}
            for line in entries:
                topic, partition, offset = line.split(" ")
                out[TopicPartition(topic, int(partition))] = int(offset)
            return out
        except (ValueError, IndexError) as exc:
            raise CorruptCheckpointError(f"malformed checkpoint file {self.path}: {exc}") from exc
