"""Client settings (streamlog.client.config): the int32 bound Kafka puts on its Type.INT settings.

Kafka's ConsumerConfig / ProducerConfig declare fetch.max.wait.ms,
max.poll.interval.ms, session.timeout.ms and the other settings below as
Type.INT, so a value past 2147483647 is refused; streamlog refuses it the same
way, with the setting's name in the message. Kafka's Type.LONG settings
(linger.ms, max.block.ms, buffer.memory) have no upper bound: a far-off
deadline is clamped by the timer instead.
"""
import pytest

from streamlog.client.config import CONSUMER, INT32_MAX, PRODUCER, resolve
from streamlog.errors import InvalidConfigurationError

CONSUMER_INT32 = ["fetch.max.wait.ms", "max.poll.interval.ms", "session.timeout.ms",
                  "heartbeat.interval.ms", "auto.commit.interval.ms", "fetch.min.bytes",
                  "fetch.max.bytes", "max.partition.fetch.bytes", "max.poll.records"]
PRODUCER_INT32 = ["batch.size", "max.request.size", "delivery.timeout.ms", "request.timeout.ms"]
PRODUCER_INT64 = ["linger.ms", "max.block.ms", "buffer.memory"]


@pytest.mark.parametrize("schema, kind, name",
                         [(CONSUMER, "consumer", n) for n in CONSUMER_INT32]
                         + [(PRODUCER, "producer", n) for n in PRODUCER_INT32])
def test_kafka_int_settings_accept_int32_max_and_refuse_one_more(schema, kind, name):
    assert resolve(schema, kind, {name: INT32_MAX})[name] == INT32_MAX
    assert resolve(schema, kind, {name: str(INT32_MAX)})[name] == INT32_MAX
    with pytest.raises(InvalidConfigurationError, match=rf"'{name}'.*<= 2147483647.*int32"):
        resolve(schema, kind, {name: INT32_MAX + 1})


def test_python_keyword_names_get_the_same_bound():
    with pytest.raises(InvalidConfigurationError, match="fetch.max.wait.ms"):
        resolve(CONSUMER, "consumer", fetch_max_wait_ms=10**13)
    with pytest.raises(InvalidConfigurationError, match="max.poll.interval.ms"):
        resolve(CONSUMER, "consumer", max_poll_interval_ms="99999999999")


@pytest.mark.parametrize("name", PRODUCER_INT64)
def test_kafka_long_settings_have_no_upper_bound(name):
    assert resolve(PRODUCER, "producer", {name: 2**63 - 1})[name] == 2**63 - 1


def test_an_empty_transactional_id_is_refused_as_kafkas_producer_config_refuses_it():
    # ProducerConfig: transactional.id has ConfigDef.NonEmptyString ("String must be
    # non-empty"); Kafka's coordinator answers INVALID_REQUEST to one, too.
    assert resolve(PRODUCER, "producer", {"transactional.id": "t-1"})["transactional.id"] == \
        "t-1"
    assert resolve(PRODUCER, "producer", {})["transactional.id"] is None
    with pytest.raises(InvalidConfigurationError, match=r"'transactional.id': must be a "
                                                        r"non-empty string"):
        resolve(PRODUCER, "producer", {"transactional.id": ""})


@pytest.mark.parametrize("instance_id, problem", [
    ("", "is empty"), ("..", "cannot be '..'"), ("a" * 250, "250 characters long"),
    ("worker 1", "contains characters other than")])
def test_a_group_instance_id_follows_the_rule_of_topic_names(instance_id, problem):
    # GroupRebalanceConfig -> JoinGroupRequest.validateGroupInstanceId -> Topic.validate:
    # 1 to 249 of [a-zA-Z0-9._-], not "." or "..".
    for good in ("worker-1", "a.b_c", "a" * 249):
        assert resolve(CONSUMER, "consumer", {"group.instance.id": good})[
            "group.instance.id"] == good
    with pytest.raises(InvalidConfigurationError,
                       match=rf"'group.instance.id': a group instance id .*{problem}"):
        resolve(CONSUMER, "consumer", {"group.instance.id": instance_id})
