"""AlterConfigs and IncrementalAlterConfigs sent raw: what Kafka's broker refuses before its
controller sees the request (ConfigAdminManager.preprocess), and what its controller takes
as no change (ConfigurationControlManager.incrementalAlterConfigResource)."""
from kio.schema.alter_configs.v2 import request as legacy
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (AlterableConfig,
                                                             AlterConfigsResource,
                                                             IncrementalAlterConfigsRequest)
from kio.static.primitive import i8

from support.wire import call

TOPIC = 2   # Kafka's ConfigResource.Type
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3   # AlterConfigOp.OpType


def resource(name, *configs):
    return AlterConfigsResource(resource_type=i8(TOPIC), resource_name=name, configs=tuple(
        AlterableConfig(name=key, config_operation=i8(op), value=value)
        for key, op, value in configs))


def alter(sock, *resources):
    answer = call(sock, IncrementalAlterConfigsRequest(resources=resources, validate_only=False))
    return [(r.resource_name, r.error_code, r.error_message) for r in answer.responses]


def test_what_kafkas_preprocess_refuses_is_invalid_request_and_changes_nothing(db, sock):
    # ConfigAdminManager.preprocess: a resource named twice (each entry), a config named
    # twice, a null value other than DELETE's (the legacy API: any null value), all
    # INVALID_REQUEST with Kafka's messages; the empty topic name, the default resource,
    # ControllerConfigurationValidator.validateTopicName's INVALID_REQUEST.
    db.alter_topic_config("t", {"retention.ms": 5000})
    once = ("retention.ms", SET, "1000")
    twice = "Each resource must appear at most once."
    assert alter(sock, resource("t", once), resource("t", once)) == [
        ("t", ErrorCode.invalid_request, twice), ("t", ErrorCode.invalid_request, twice)]
    assert alter(sock, resource("t", once, ("retention.ms", SET, "2000"))) == [
        ("t", ErrorCode.invalid_request, "Error due to duplicate config keys")]
    assert alter(sock, resource("t", ("cleanup.policy", APPEND, None))) == [
        ("t", ErrorCode.invalid_request, "Null value not supported for : cleanup.policy")]
    assert alter(sock, resource("", once)) == [
        ("", ErrorCode.invalid_request, "Default topic resources are not allowed.")]
    answer = call(sock, legacy.AlterConfigsRequest(validate_only=False, resources=(
        legacy.AlterConfigsResource(resource_type=i8(TOPIC), resource_name="t", configs=(
            legacy.AlterableConfig(name="segment.bytes", value="1048576"),
            legacy.AlterableConfig(name="retention.ms", value=None))),)))
    assert [(r.error_code, r.error_message) for r in answer.responses] == [
        (ErrorCode.invalid_request, "Null value not supported for : retention.ms")]
    assert db.describe_topic("t").overrides == {"retention.ms": 5000}


def test_deleting_a_config_that_is_not_set_is_no_change_even_an_unknown_one(db, sock):
    # ConfigurationControlManager.incrementalAlterConfigResource: DELETE of a config with no
    # value writes no record, and only the configs written are validated.
    db.alter_topic_config("t", {"retention.ms": 5000})
    assert alter(sock, resource("t", ("no.such.config", DELETE, None),
                                ("segment.bytes", DELETE, None))) == [("t", ErrorCode.none, None)]
    assert alter(sock, resource("t", ("retention.ms", DELETE, None))) == [
        ("t", ErrorCode.none, None)]
    assert db.describe_topic("t").overrides == {}


def test_append_and_subtract_apply_to_every_list_config(db, sock):
    # ConfigurationControlManager.incrementalAlterConfigResource: APPEND and SUBTRACT act on
    # any config of type LIST (the throttled-replica lists as cleanup.policy), from its
    # value's non-empty items (getParts); on another type they are INVALID_CONFIG.
    name = "leader.replication.throttled.replicas"
    assert alter(sock, resource("t", (name, APPEND, "0:0,1:0"))) == [("t", ErrorCode.none, None)]
    assert alter(sock, resource("t", (name, SUBTRACT, "0:0"))) == [("t", ErrorCode.none, None)]
    assert db.describe_topic("t").overrides == {name: "1:0"}
    ((_, code, message),) = alter(sock, resource("t", ("retention.ms", APPEND, "5")))
    assert code == ErrorCode.invalid_config and "not a list config" in message


def test_a_missing_topics_bad_config_is_invalid_config_before_it_is_unknown(db, sock):
    # ConfigurationControlManager: an APPEND to a config that is not a list is refused while
    # the records are made, and validateAlterConfig runs the validator (LogConfig.validate:
    # INVALID_CONFIG) before the existence checker (UNKNOWN_TOPIC_OR_PARTITION); the legacy
    # API's legacyAlterConfigResource goes through the same validateAlterConfig. A missing
    # topic with a bad value was answered UNKNOWN_TOPIC_OR_PARTITION.
    invalid, unknown = ErrorCode.invalid_config, ErrorCode.unknown_topic_or_partition
    codes = [code for _, code, _ in alter(
        sock, resource("gone", ("retention.ms", SET, "soon")),
        resource("gone2", ("retention.ms", APPEND, "1")),
        resource("gone3", ("cleanup.policy", APPEND, "bogus")),
        resource("gone4", ("retention.ms", SET, "1000")),
        resource("gone5", ("no.such.config", DELETE, None)))]
    assert codes == [invalid, invalid, invalid, unknown, unknown]
    for validate_only in (False, True):
        answer = call(sock, legacy.AlterConfigsRequest(validate_only=validate_only, resources=tuple(
            legacy.AlterConfigsResource(resource_type=i8(TOPIC), resource_name=name, configs=(
                legacy.AlterableConfig(name="retention.ms", value=value),))
            for name, value in (("gone", "soon"), ("gone2", "1000")))))
        assert [r.error_code for r in answer.responses] == [invalid, unknown]
    assert "gone" not in db.topics()
