"""The two files that say which topic a partition directory belongs to.

`partition.metadata`: the topic id. `topic.json`: the topic's name, id, overrides
and creation time, so that `streamlog repair` can rebuild a topic's record from
its directories when the metadata log has lost it.

Kafka's PartitionMetadataFile, as text:

    version: 0
    topic_id: <the topic's 128-bit id as Kafka prints a Uuid: URL-safe base64, no padding>

It is what lets the library prove that a directory is its own before it
removes one. A directory whose file names a topic id that the metadata log
has deleted is the leftover of an interrupted deletion; any directory it
cannot explain is kept and reported. The file is written when the partition
is made, and, for a directory that lacks one (made before the file existed,
or by a stop between mkdir and the write), on its next writable open.

`topic.json` is the library's own (Kafka's loader ignores files it does not
know)::

    {"version": 0, "name": "t", "topic_id": "<as above>", "config": {...}, "created_ms": 0}

It is written with the partition, rewritten in every partition when the
topic's configs change, and checked against the metadata log at a writable
open after a crash (a crash between the metadata record and the rewrite can
leave it stale). A copy per partition costs little and means any one
surviving directory can bring its topic back.

Durability: both are written to a temporary name and renamed, but not
fsynced. A crash that loses one leaves a directory the next open either
rewrites (its topic still exists) or keeps (it does not): never one removed
on a guess.
"""
import base64
import functools
import json
import os

from ..errors import KafkaStorageError
from .durable import read_whole
from .files import PARTITION_METADATA_FILE, TMP_SUFFIX, TOPIC_CONFIG_FILE
from .open_files import storage_error

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


def _replace(path, text):
    try:
        with open(path + TMP_SUFFIX, "w", encoding="ascii") as f:
            f.write(text)
        os.replace(path + TMP_SUFFIX, path)
    except OSError as exc:
        raise storage_error(exc, f"cannot write {path}") from exc


@functools.lru_cache(maxsize=1024)
def _text_of(topic_id_hex):
    """The file's text for a topic id (one per topic, asked for once per partition)."""
    return f"version: {VERSION}\ntopic_id: {kafka_uuid(topic_id_hex)}\n"


def write(directory, topic_id_hex):
    _replace(os.path.join(directory, PARTITION_METADATA_FILE), _text_of(topic_id_hex))


def read(directory, expected=None):
    """The topic id (32 hex digits) the directory's file names; None when it has none.
    expected: the id the caller expects; a file that is exactly what write() makes of it
    is answered without parsing (an open reads one per partition)."""
    path = os.path.join(directory, PARTITION_METADATA_FILE)
    try:
        raw = read_whole(path)
        if expected is not None and raw == _text_of(expected).encode("ascii"):
            return expected
        text = raw.decode("ascii")
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


def ensure_topic_config(directory, name, topic_id_hex, overrides, created_ms, check=True):
    """Write the directory's topic.json unless it already says this; check=False trusts any
    existing one (one stat instead of a read: what an open after a clean stop can afford)."""
    path = os.path.join(directory, TOPIC_CONFIG_FILE)
    if not check and os.path.exists(path):
        return
    text = json.dumps({"version": VERSION, "name": name, "topic_id": kafka_uuid(topic_id_hex),
                       "config": overrides, "created_ms": created_ms}, sort_keys=True) + "\n"
    if check:
        try:
            with open(path, encoding="ascii") as f:
                if f.read() == text:
                    return
        except (OSError, UnicodeDecodeError):
            pass  # missing or unreadable: rewritten
    _replace(path, text)


def read_topic_config(directory):
    """{"name", "topic_id" (32 hex digits), "config", "created_ms"} from topic.json; None when
    the directory has none. CorruptPartitionMetadataError when it does not parse."""
    path = os.path.join(directory, TOPIC_CONFIG_FILE)
    try:
        with open(path, encoding="ascii") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CorruptPartitionMetadataError(f"cannot read {path}: {exc}") from exc
    try:
        if doc["version"] != VERSION:
            raise ValueError(f"unknown version {doc['version']!r}")
        if not (isinstance(doc["name"], str) and isinstance(doc["config"], dict) and
                type(doc["created_ms"]) is int):
            raise ValueError("a field has the wrong type")
        return {"name": doc["name"], "topic_id": _hex_of(doc["topic_id"]),
                "config": doc["config"], "created_ms": doc["created_ms"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptPartitionMetadataError(f"malformed {path}: {exc!r}") from exc
