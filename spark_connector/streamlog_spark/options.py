"""Option parsing: Spark's option map (str -> str) into checked, picklable settings.

Owns the option names, defaults and error wording. The names are those of
Spark's own Kafka source and sink (docs/SPARK.md lists them), so moving a job
between the two changes only the format name and the connection option; the
errors use Spark's words (KafkaSourceProvider, KafkaWriter), so a search for
an error message finds the same explanation for both.

Spark hands options over as a case-insensitive dict whose keys are
lower-cased and whose values are always strings; everything here looks keys
up lower-cased and converts values itself. Parsing runs in Spark's planner
processes on the driver; the results are frozen dataclasses that are pickled
to the executors with the reader or writer.
"""
import json
import re
from dataclasses import dataclass, field

EARLIEST, LATEST = -2, -1  # Kafka's markers in JSON offsets, as in the source's docs

STRATEGIES = ("subscribe", "subscribepattern", "assign")  # the order Spark prints them in
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
TIMESTAMP_STRATEGIES = ("error", "latest")

# Kafka consumer settings Spark refuses, with its reasons; the rest of `kafka.*` is ignored
# because there is no Kafka client to hand it to.
_REFUSED_KAFKA = {
    "kafka.auto.offset.reset":
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
        "'startingoffsets' to 'earliest' or 'latest' to specify where to start.",
    "kafka.key.deserializer":
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte "
        "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize "
        "the keys.",
    "kafka.value.deserializer":
        "Kafka option 'value.deserializer' is not supported as values are deserialized as byte "
        "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize "
        "the values.",
    "kafka.enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}

_DURATION = re.compile(
    r"^\s*(\d+)\s*(ms|s|m|h|d|milliseconds?|seconds?|minutes?|hours?|days?)?\s*$", re.I)
_DURATION_MS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "second": 1000,
                "seconds": 1000, "m": 60_000, "minute": 60_000, "minutes": 60_000,
                "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "d": 86_400_000,
                "day": 86_400_000, "days": 86_400_000}


class OptionError(ValueError):
    """An option value Spark's Kafka source would refuse (IllegalArgumentException there)."""


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions to read: exactly one of the three Kafka strategies."""

    topics: tuple = ()          # subscribe
    pattern: str = None         # subscribePattern (full match, as Java's Pattern.matches)
    assigned: tuple = ()        # assign: ((topic, partition), ...)

    def matches(self, topic):
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assigned:
            return any(t == topic for t, _ in self.assigned)
        return topic in self.topics


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends, before it is resolved against the log.

    kind: "earliest", "latest", "offsets" (per-partition JSON, -2/-1 allowed),
    "timestamps" (per-partition ms) or "timestamp" (one ms for every partition).
    """

    kind: str
    offsets: dict = field(default_factory=dict)   # {(topic, partition): offset or timestamp}
    timestamp: int = None


@dataclass(frozen=True)
class SourceOptions:
    path: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec               # batch only
    timestamp_strategy: str          # startingOffsetsByTimestampStrategy
    include_headers: bool
    isolation_level: str
    fail_on_data_loss: bool
    min_partitions: int = None
    max_offsets_per_trigger: int = None
    min_offsets_per_trigger: int = None
    max_trigger_delay_ms: int = 15 * 60_000
    filter_pushdown: bool = False


@dataclass(frozen=True)
class WriterOptions:
    path: str
    topic: str = None                # overrides the `topic` column, as in Kafka's sink
    lock_timeout_ms: int = 60_000


def _get(options, name):
    """The value of option `name` (any case), stripped, or None."""
    value = options.get(name.lower())
    return None if value is None else str(value)


def _bool(options, name, default):
    value = _get(options, name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option '{name}' must be 'true' or 'false', got '{value}'")
    return lowered == "true"


def _long(options, name, minimum, what):
    value = _get(options, name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got '{value}'") from None
    if number < minimum:
        raise OptionError(f"{what} must be positive" if minimum == 1
                          else f"option '{name}' must be >= {minimum}, got '{value}'")
    return number


def parse_duration_ms(text, name="maxTriggerDelay"):
    """'15m', '30s', '500ms', '2 minutes', or a bare number of ms -> ms."""
    m = _DURATION.match(text)
    if not m:
        raise OptionError(f"option '{name}' must be a duration such as '30s' or '15m', got "
                          f"'{text}'")
    unit = (m.group(2) or "ms").lower()
    return int(m.group(1)) * _DURATION_MS[unit]


def _json(text, option):
    try:
        return json.loads(text)
    except ValueError:
        raise OptionError(f"Expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-1}},\"topicB\":"
                          f"{{\"0\":-2}}}}, got {text}  (option '{option}')") from None


def _partition_map(text, option):
    """{"topic": {"0": n, ...}} -> {(topic, 0): n} with int values."""
    parsed = _json(text, option)
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise OptionError(f"Expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-1}},\"topicB\":"
                          f"{{\"0\":-2}}}}, got {text}  (option '{option}')")
    out = {}
    for topic, parts in parsed.items():
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise OptionError(f"option '{option}': partition {p!r} of topic {topic!r} is "
                                  "not an integer") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"option '{option}': the value for {topic}-{partition} must "
                                  f"be an integer, got {value!r}")
            out[(topic, partition)] = value
    return out


def _subscription(options):
    given = [name for name in STRATEGIES if _get(options, name) is not None]
    if not given:
        raise OptionError("One of the following options must be specified for Kafka source: "
                          + ", ".join(STRATEGIES) + ". See the docs for more details.")
    if len(given) > 1:
        raise OptionError("Only one of the following options can be specified for Kafka "
                          "source: " + ", ".join(STRATEGIES) + ". See the docs for more "
                          "details.")
    value = _get(options, given[0])
    if given[0] == "assign":
        if not value.strip().startswith("{"):
            raise OptionError("No topicpartitions to assign as specified value for option "
                              f"'assign' is '{value}'")
        parsed = _json(value, "assign")
        if not isinstance(parsed, dict) or not all(isinstance(v, list) for v in parsed.values()):
            raise OptionError(f"Expected e.g. {{\"topicA\":[0,1],\"topicB\":[0,1]}}, got "
                              f"{value}  (option 'assign')")
        assigned = []
        for topic, parts in parsed.items():
            for p in parts:
                if isinstance(p, bool) or not isinstance(p, int):
                    raise OptionError(f"option 'assign': partition {p!r} of topic {topic!r} "
                                      "is not an integer")
                if (topic, p) not in assigned:
                    assigned.append((topic, p))
        return Subscription(assigned=tuple(assigned))
    if given[0] == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise OptionError("No topics to subscribe to as specified value for option "
                              f"'subscribe' is '{value}'")
        return Subscription(topics=topics)
    if not value.strip():
        raise OptionError("Pattern to subscribe is empty as specified value for option "
                          f"'subscribePattern' is '{value}'")
    try:
        re.compile(value.strip())
    except re.error as exc:
        raise OptionError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
    return Subscription(pattern=value.strip())


def _offset_spec(options, timestamp_key, by_timestamp_key, offsets_key, default):
    """Spark's precedence: one timestamp > timestamps per partition > offsets > default."""
    one = _get(options, timestamp_key)
    if one is not None:
        try:
            ts = int(one.strip())
        except ValueError:
            raise OptionError(f"option '{timestamp_key}' must be a timestamp in ms, got "
                              f"'{one}'") from None
        return OffsetSpec("timestamp", timestamp=ts)
    per_partition = _get(options, by_timestamp_key)
    if per_partition is not None:
        return OffsetSpec("timestamps", _partition_map(per_partition, by_timestamp_key))
    offsets = _get(options, offsets_key)
    if offsets is None:
        return OffsetSpec(default)
    lowered = offsets.strip().lower()
    if lowered in ("earliest", "latest"):
        return OffsetSpec(lowered)
    return OffsetSpec("offsets", _partition_map(offsets, offsets_key))


def _path(options):
    path = _get(options, "path")
    if not path:
        raise OptionError("option 'path' must be specified: the streamlog database directory "
                          "(spark.read.format(\"streamlog\").load(\"data/\") or "
                          ".option(\"path\", \"data/\"))")
    return path


def _isolation_level(options):
    value = _get(options, "isolationLevel")
    if value is None:
        value = _get(options, "kafka.isolation.level")
    if value is None:
        # Spark's Kafka source sets no isolation.level: its consumers read at the Kafka
        # consumer's default, read_uncommitted.
        return "read_uncommitted"
    value = value.strip().lower()
    if value not in ISOLATION_LEVELS:
        raise OptionError(f"option 'isolationLevel' must be one of {', '.join(ISOLATION_LEVELS)}"
                          f", got '{value}'")
    return value


def parse_source_options(options, streaming):
    """Check the options of a read (batch or streaming) and return SourceOptions."""
    for key, message in _REFUSED_KAFKA.items():
        if key in options:
            raise OptionError(message)
    if streaming:
        if _get(options, "endingOffsets") is not None:
            raise OptionError("ending offset not valid in streaming queries")
        if _get(options, "endingOffsetsByTimestamp") is not None or \
                _get(options, "endingTimestamp") is not None:
            raise OptionError("ending timestamp not valid in streaming queries")
    starting = _offset_spec(options, "startingTimestamp", "startingOffsetsByTimestamp",
                            "startingOffsets", "latest" if streaming else "earliest")
    ending = _offset_spec(options, "endingTimestamp", "endingOffsetsByTimestamp",
                          "endingOffsets", "latest")
    if not streaming:
        if starting.kind == "latest":
            raise OptionError("starting offset can't be latest for batch queries on Kafka")
        if starting.kind == "offsets":
            for (topic, partition), offset in starting.offsets.items():
                if offset == LATEST:
                    raise OptionError(f"startingOffsets for {topic}-{partition} can't be "
                                      "latest for batch queries on Kafka")
        if ending.kind == "earliest":
            raise OptionError("ending offset can't be earliest for batch queries on Kafka")
        if ending.kind == "offsets":
            for (topic, partition), offset in ending.offsets.items():
                if offset == EARLIEST:
                    raise OptionError(f"ending offset for {topic}-{partition} can't be "
                                      "earliest for batch queries on Kafka")
    for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        if spec.kind == "offsets":
            for (topic, partition), offset in spec.offsets.items():
                if offset < EARLIEST:
                    raise OptionError(f"{name} for {topic}-{partition} must be >= 0, or -2 "
                                      f"(earliest) or -1 (latest), got {offset}")
    strategy = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in TIMESTAMP_STRATEGIES:
        raise OptionError("option 'startingOffsetsByTimestampStrategy' must be 'error' or "
                          f"'latest', got '{strategy}'")
    subscription = _subscription(options)
    min_partitions = _long(options, "minPartitions", 1, "minPartitions")
    max_offsets = _long(options, "maxOffsetsPerTrigger", 1, "maxOffsetsPerTrigger")
    min_offsets = _long(options, "minOffsetsPerTrigger", 1, "minOffsetsPerTrigger")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise OptionError(f"The value of minOffsetPerTrigger({min_offsets}) is higher than the "
                          f"maxOffsetsPerTrigger({max_offsets}).")
    delay = _get(options, "maxTriggerDelay")
    return SourceOptions(
        path=_path(options), subscription=subscription, starting=starting, ending=ending,
        timestamp_strategy=strategy,
        include_headers=_bool(options, "includeHeaders", False),
        isolation_level=_isolation_level(options),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        min_partitions=min_partitions, max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=parse_duration_ms(delay) if delay is not None else 15 * 60_000,
        filter_pushdown=_bool(options, "filterPushdown", False))


def parse_writer_options(options):
    topic = _get(options, "topic")
    timeout = _long(options, "lockTimeoutMs", 0, "lockTimeoutMs")
    return WriterOptions(path=_path(options), topic=topic.strip() if topic else None,
                         lock_timeout_ms=60_000 if timeout is None else timeout)
