"""The `partition.metadata` file of a partition directory: the topic id it belongs to.

Kafka's PartitionMetadataFile, as text:

    version: 0
    topic_id: <the topic's 128-bit id as Kafka prints a Uuid: URL-safe base64, no padding>

It is what lets the library prove that a directory is its own before it
removes one. A directory whose file names a topic id that the metadata log
has deleted is the leftover of an interrupted deletion; any directory it
cannot explain is kept and reported. The file is written when the partition
is made, and, for a directory that lacks one (made before the file existed,
or by a stop between mkdir and the write), on its next writable open.

Durability: written to a temporary name and renamed, but not fsynced. A
crash that loses it leaves a directory the next open either rewrites (its
topic still exists) or keeps (it does not): never one removed on a guess.
"""
import base64
import os

from ..errors import KafkaStorageError
from .files import PARTITION_METADATA_FILE, TMP_SUFFIX

VERSION = 0


class CorruptPartitionMetadataError(KafkaStorageError):
    """partition.metadata does not parse: the directory's topic is unknown."""


def kafka_uuid(topic_id_hex):
    """A 32-hex-digit id as Kafka's Uuid.toString() prints it (22 base64url characters)."""
    return base64.urlsafe_b64encode(bytes.fromhex(topic_id_hex)).decode("ascii").rstrip("=")


def _hex_of(kafka_text):
    raw = base64.urlsafe_b64decode(kafka_text + "=" * (-len(kafka_text) % 4))
    if len(raw) != 16:
        raise ValueError(f"a topic id is 16 bytes, not {len(raw)}")
    return raw.hex()


def write(directory, topic_id_hex):
    path = os.path.join(directory, PARTITION_METADATA_FILE)
    text = f"version: {VERSION}\ntopic_id: {kafka_uuid(topic_id_hex)}\n"
    try:
        with open(path + TMP_SUFFIX, "w", encoding="ascii") as f:
            f.write(text)
        os.replace(path + TMP_SUFFIX, path)
    except OSError as exc:
        raise KafkaStorageError(f"cannot write {path}: {exc}") from exc


def read(directory):
    """The topic id (32 hex digits) the directory's file names; None when it has none."""
    path = os.path.join(directory, PARTITION_METADATA_FILE)
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptPartitionMetadataError(f"cannot read {path}: {exc}") from exc
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    try:
        if int(fields["version"]) != VERSION:
            raise ValueError(f"unknown version {fields['version']!r}")
        return _hex_of(fields["topic_id"].strip())
    except (KeyError, ValueError) as exc:
        raise CorruptPartitionMetadataError(f"malformed {path}: {exc!r}") from exc
