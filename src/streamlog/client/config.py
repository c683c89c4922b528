"""Producer and consumer configuration: Kafka's config names, defaults and checks.

Every setting may be given as a Python keyword (`linger_ms=5`) or under
Kafka's dotted name (`{"linger.ms": 5}`); both mean the same, a value given
twice differently is an error, an unknown name is an error listing the
known ones. Values may be strings (command line, config files).

Defaults are Kafka's, except where DESIGN.md fixes the embedded choice:
acks=1 and linger.ms=0 (Kafka 3.x/4.x default to acks=all / linger.ms=5).
"""
from ..errors import InvalidConfigurationError
from ..parsing import bad_value, parse_bool, parse_choice, parse_int
from ..storage import compression
from ..storage.files import topic_name_problem


# Kafka declares these settings Type.INT (ConsumerConfig / ProducerConfig), so a
# value past int32 is refused there; the same here, rather than a 30-year
# fetch.max.wait.ms reaching the timing wheel. Kafka's Type.LONG ones (linger.ms,
# max.block.ms, buffer.memory) are bounded by int64 only (parsing.LONG_MAX): the timer
# clamps far deadlines.
INT32_MAX = 2**31 - 1
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def _int(minimum=None):
    return lambda name, value: parse_int(repr(name), value, minimum)


def _int32(minimum=None):
    def parse(name, value):
        value = parse_int(repr(name), value, minimum)
        if value > INT32_MAX:
            raise _bad(name, value, f"an integer <= {INT32_MAX} (an int32, as in Kafka)")
        return value
    return parse


def _bool(name, value):
    return parse_bool(repr(name), value)


def _choice(*options):
    return lambda name, value: parse_choice(repr(name), value, options)


def _acks(name, value):
    if value in ("all", "-1", -1):
        return "all"
    if value in (0, 1, "0", "1"):
        return int(value)
    raise _bad(name, value, "0, 1 or 'all'")


def _optional_str(name, value):
    if value is not None and not isinstance(value, str):
        raise _bad(name, value, "a string or None")
    return value


def _group_id(name, value):
    # Kafka deprecated "" as a group id (KIP-289) and refuses it for group work
    # (InvalidGroupIdException): None means "no group".
    value = _optional_str(name, value)
    if value is not None and not value.strip():
        raise _bad(name, value, "a non-empty string, or None for no group")
    return value


def _transactional_id(name, value):
    # Kafka's ProducerConfig checks it with ConfigDef.NonEmptyString (and its coordinator
    # answers INVALID_REQUEST to an empty one).
    value = _optional_str(name, value)
    if value == "":
        raise _bad(name, value, "a non-empty string, or None for no transactions")
    return value


def _group_instance_id(name, value):
    # Kafka's consumer checks it as it checks a topic name (GroupRebalanceConfig ->
    # JoinGroupRequest.validateGroupInstanceId -> Topic.validate).
    value = _optional_str(name, value)
    problem = None if value is None else topic_name_problem(value, "a group instance id")
    if problem:
        raise InvalidConfigurationError(f"invalid value {value!r} for {name!r}: {problem} "
                                        "(Kafka checks it as a topic name)")
    return value


def _callable_or_none(name, value):
    if value is not None and not callable(value):
        raise _bad(name, value, "a callable or None")
    return value


def _any(name, value):
    return value


def _strategies(name, value):
    items = [value] if isinstance(value, str) or not hasattr(value, "__iter__") else list(value)
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise _bad(name, value, "a non-empty list of assignors")
    return items


def _bad(name, value, rule):
    return bad_value(repr(name), value, rule)


PRODUCER = {
    "acks": (None, _acks),  # None: 1, or "all" for a transactional producer (Producer)
    "linger.ms": (0, _int(0)),
    "batch.size": (16384, _int32(0)),
    "compression.type": ("none", _choice("none", "gzip", "snappy", "lz4", "zstd")),
    # KIP-390: the level a producer compresses each codec at, Kafka's defaults and ranges.
    **{f"compression.{compression.NAMES[cid]}.level":
       (compression.DEFAULT_LEVELS[cid],
        lambda name, value, cid=cid: compression.parse_level(cid, repr(name), value))
       for cid in compression.DEFAULT_LEVELS},
    "partitioner": ("default", _any),  # a name or a callable; checked by the producer
    "partitioner.ignore.keys": (False, _bool),
    "enable.idempotence": (None, _bool),  # None: as acks allows (Producer)
    "transactional.id": (None, _transactional_id),
    "transaction.timeout.ms": (60000, _int32(1)),
    "key.serializer": (None, _callable_or_none),
    "value.serializer": (None, _callable_or_none),
    "max.request.size": (1048576, _int32(1)),
    "buffer.memory": (33554432, _int(1)),
    "max.block.ms": (60000, _int(0)),
    "delivery.timeout.ms": (120000, _int32(1)),
    "request.timeout.ms": (30000, _int32(1)),
    "client.id": ("", _optional_str),
}

CONSUMER = {
    "group.id": (None, _group_id),
    "group.instance.id": (None, _group_instance_id),
    "client.id": ("", _optional_str),
    "auto.offset.reset": ("latest", _choice("earliest", "latest", "none")),
    "enable.auto.commit": (True, _bool),
    "auto.commit.interval.ms": (5000, _int32(0)),
    "isolation.level": ("read_uncommitted", _choice(*ISOLATION_LEVELS)),
    "fetch.min.bytes": (1, _int32(1)),
    "fetch.max.wait.ms": (500, _int32(0)),
    "fetch.max.bytes": (52428800, _int32(0)),
    "max.partition.fetch.bytes": (1048576, _int32(1)),
    "max.poll.records": (500, _int32(1)),
    "max.poll.interval.ms": (300000, _int32(1)),
    "session.timeout.ms": (45000, _int32(1)),
    "heartbeat.interval.ms": (3000, _int32(1)),
    "partition.assignment.strategy": (["range", "cooperative-sticky"], _strategies),
    "key.deserializer": (None, _callable_or_none),
    "value.deserializer": (None, _callable_or_none),
    "check.crcs": (True, _bool),
    "exclude.internal.topics": (True, _bool),
    "default.api.timeout.ms": (60000, _int32(0)),
}


class Settings(dict):
    """Resolved settings; attribute access uses Python names (settings.linger_ms). `given`
    names the settings the caller set (a rule may treat a default otherwise, as Kafka's
    config.originals() lets it)."""

    given = frozenset()

    def __getattr__(self, name):
        try:
            return self[name.replace("_", ".")]
        except KeyError:
            raise AttributeError(name) from None


def resolve(schema, kind, config=None, **kwargs):
    """Merge `config` (dotted or Python names) and keyword settings over the schema defaults."""
    given = {}
    for source in (dict(config or {}), kwargs):
        for key, value in source.items():
            name = key.replace("_", ".")
            if name not in schema:
                raise InvalidConfigurationError(
                    f"unknown {kind} config {key!r}; known: {', '.join(sorted(schema))}")
            if name in given and given[name] != value:
                raise InvalidConfigurationError(f"{kind} config {name!r} is given twice with "
                                                f"different values ({given[name]!r}, {value!r})")
            given[name] = value
    out = Settings()
    for name, (default, parse) in schema.items():
        out[name] = parse(name, given[name]) if name in given else default
    out.given = frozenset(given)
    return out
