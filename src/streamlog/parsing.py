"""Parsing configuration values given as Python values or as strings.

Shared by the topic configs (storage.log_config), the database config and the
client configs: integers with bounds, booleans and choices, each refusing a
bad value with InvalidConfigurationError naming what was configured and the
rule it breaks. `label` is how the setting is named in that message.
"""
from .errors import InvalidConfigurationError


def bad_value(label, value, rule):
    return InvalidConfigurationError(f"invalid value {value!r} for {label}: must be {rule}")


def parse_int(label, value, minimum=None, maximum=None):
    if isinstance(value, bool):
        raise bad_value(label, value, "an integer")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise bad_value(label, value, "an integer") from None
    if not isinstance(value, int):
        raise bad_value(label, value, "an integer")
    if minimum is not None and value < minimum:
        raise bad_value(label, value, f"an integer >= {minimum}")
    if maximum is not None and value > maximum:
        raise bad_value(label, value, f"an integer <= {maximum}")
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
