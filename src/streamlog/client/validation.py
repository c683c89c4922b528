"""Checks of what the client's calls are given: send() and send_batch()'s records, made
before anything is queued, and the partitions the consumer's and the admin calls name.

A record joins a batch shared with other calls' records; anything wrong with it found
later, when the batch is encoded, would fail every record of that batch. So every argument
is checked here, in the caller's thread, and a bad call fails alone: TypeError for a wrong
type, ValueError for a value out of range, each naming the argument.

One rule for every payload -- keys, values and header values: bytes (or bytearray,
memoryview) or None. A str is refused everywhere alike (a serializer turns other types into
bytes); header keys are str, as in Kafka (Header.key() is a String).
"""
import numbers
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from ..parsing import LONG_MAX
from ..structs import TopicPartition

BYTES_TYPES = (bytes, bytearray, memoryview)


def check_payload(what, data):
    if data is not None and not isinstance(data, BYTES_TYPES):
        # A record's key and value have serializers; a header's value has none (nor in Kafka).
        hint = f"set a {what}_serializer to send other types" if what in ("key", "value") \
            else "encode it to bytes first"
        raise TypeError(f"the {what} must be bytes (or None), not {type(data).__name__}; "
                        f"{hint}")


def check_timeout(timeout, call):
    """The timeout to use: None (no bound), or a number of seconds >= 0: Kafka's
    poll(Duration) and close(Duration) refuse a negative timeout
    (IllegalArgumentException). One past what a thread can wait (centuries, or inf) is
    None, as Kafka takes Long.MAX_VALUE ms for ever."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{call} timeout must be a number of seconds (or None), not "
                        f"{type(timeout).__name__} {timeout!r}")
    if not timeout >= 0:  # also refuses NaN
        raise ValueError(f"{call} timeout must be >= 0 seconds, got {timeout}")
    return None if timeout >= threading.TIMEOUT_MAX else timeout


def check_timestamp(timestamp_ms, what="timestamp_ms", nullable=True):
    """None (when nullable), or ms since the epoch as an int in [0, 2**63 - 1] (Kafka's
    CreateTime)."""
    if timestamp_ms is None and nullable:
        return None
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, (int, np.integer)):
        raise TypeError(f"{what} must be an int of milliseconds since the epoch"
                        f"{' (or None)' if nullable else ''}, not "
                        f"{type(timestamp_ms).__name__} {timestamp_ms!r}")
    if not 0 <= timestamp_ms <= LONG_MAX:
        raise ValueError(f"{what} must be in [0, {LONG_MAX}] (ms since the epoch), got "
                         f"{timestamp_ms}")
    return int(timestamp_ms)


def check_headers(headers, what="headers"):
    """The headers as a tuple of (str, bytes | None) pairs; None when there are none."""
    if headers is None:
        return None
    if isinstance(headers, dict):
        raise TypeError(f"{what} must be a list of (key, value) pairs, not a dict (Kafka "
                        "allows a key more than once): pass list(headers.items())")
    if isinstance(headers, (str, bytes)) or not isinstance(headers, (list, tuple)):
        raise TypeError(f"{what} must be a list of (str, bytes | None) pairs, not "
                        f"{type(headers).__name__}")
    for pair in headers:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"each of the {what} must be a (key, value) pair, not {pair!r}")
        key, value = pair
        if not isinstance(key, str):
            raise TypeError(f"a header key must be a str, not {type(key).__name__} {key!r}")
        check_payload(f"value of header {key!r}", value)
    return tuple(headers) or None


def check_column(name, column, n, check_item=None, optional=True):
    """A send_batch column: a sized, indexable sequence of n items (None stays None, where
    the column is optional).

    With check_item, returns [check_item(item) for each item], a failure naming the item's
    index; without, the column unchanged and no per-item work (the columnar encoding checks
    the items of the good path)."""
    if column is None and optional:
        return None
    if not isinstance(column, (Sequence, np.ndarray)) or isinstance(column, (str, bytes)):
        raise TypeError(f"send_batch: {name} must be a sequence (list, tuple or numpy array) "
                        f"of one item per record, not {type(column).__name__}; wrap an "
                        "iterator in list()")
    if n is not None and len(column) != n:
        raise ValueError(f"send_batch: {name} has {len(column)} items, values has {n}")
    if check_item is None:
        return column
    out = []
    for i, item in enumerate(column):
        try:
            out.append(check_item(item))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"send_batch: {name}[{i}]: {exc}") from None
    return out


def check_timestamps(timestamps, n):
    """send_batch's per-record timestamps, checked as one numpy array (no per-item Python
    work on the good path); a bad one is named by its index."""
    if timestamps is None:
        return None
    column = check_column("timestamps", timestamps, n)
    array = np.asarray(column)
    suspect = array.dtype.kind not in "iu"
    # numpy turns [True, 1] into ints; send() refuses a bool timestamp, so this does too
    suspect = suspect or (not isinstance(column, np.ndarray) and bool in set(map(type, column)))
    if not suspect and len(array):
        suspect = array.min() < 0 or array.max() > LONG_MAX
    if suspect:
        check_column("timestamps", column, n, _record_timestamp)  # names the first bad one
    return column


def _record_timestamp(timestamp):
    if timestamp is None:
        raise TypeError("a record's timestamp must be an int of ms since the epoch, not None "
                        "(timestamps=None stamps every record with the send time)")
    return check_timestamp(timestamp, "a record's timestamp", nullable=False)


def topic_partition(tp, call):
    """tp, a TopicPartition or a (topic, partition) pair, as a TopicPartition; TypeError
    naming call for anything else."""
    if isinstance(tp, TopicPartition):
        return tp
    if isinstance(tp, (tuple, list)) and len(tp) == 2 and isinstance(tp[0], str) and \
            isinstance(tp[1], numbers.Integral) and not isinstance(tp[1], bool):
        return TopicPartition(tp[0], int(tp[1]))
    raise TypeError(f"{call} takes TopicPartitions (or (topic, partition) pairs), not {tp!r}")


def topic_partitions(partitions, call):
    """A list of TopicPartitions from an iterable of them (or of pairs). One TopicPartition,
    or a topic name, is refused with a hint: iterated, it would give its fields or its
    characters, and the error would name neither the call nor the argument."""
    if isinstance(partitions, TopicPartition):
        raise TypeError(f"{call} takes a list of TopicPartitions, not {partitions!r}: "
                        f"pass [{partitions!r}]")
    if isinstance(partitions, str):
        raise TypeError(f"{call} takes a list of TopicPartitions, not the str {partitions!r}")
    return [topic_partition(tp, call) for tp in partitions]


def by_topic_partition(mapping, call, what="offset"):
    """{TopicPartition: value} from a dict keyed by TopicPartitions (or pairs); TypeError
    naming call for anything but a dict, or a key that is no partition."""
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{call} takes a dict {{TopicPartition: {what}}}, not "
                        f"{type(mapping).__name__}")
    return {topic_partition(tp, call): value for tp, value in mapping.items()}
