"""Parsing configuration values given as Python values or as strings.

Shared by the topic configs (storage.log_config), the database config and the
client configs: integers with bounds, booleans and choices, each refusing a
bad value with InvalidConfigurationError naming what was configured and the
rule it breaks. `label` is how the setting is named in that message.
"""
from .errors import InvalidConfigurationError

# Every integer config is one of Kafka's INT or LONG configs: none may leave int64 (nor could
# the metadata log's msgpack values hold it).
LONG_MIN, LONG_MAX = -2**63, 2**63 - 1


def bad_value(label, value, rule):
    return InvalidConfigurationError(f"invalid value {value!r} for {label}: must be {rule}")


def parse_int(label, value, minimum=LONG_MIN, maximum=LONG_MAX):
    if isinstance(value, bool):
        raise bad_value(label, value, "an integer")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise bad_value(label, value, "an integer") from None
    if not isinstance(value, int):
        raise bad_value(label, value, "an integer")
    minimum = LONG_MIN if minimum is None else minimum
    maximum = LONG_MAX if maximum is None else maximum
    if value < minimum:
        raise bad_value(label, value, f"an integer >= {minimum}")
    if value > maximum:
        raise bad_value(label, value, f"an integer <= {maximum}" +
                        (" (an int64, as Kafka's longs)" if maximum == LONG_MAX else ""))
    return value


def parse_bool(label, value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise bad_value(label, value, "true or false")


def parse_choice(label, value, options):
    if value not in options:
        raise bad_value(label, value, "one of " + ", ".join(repr(o) for o in options))
    return value
