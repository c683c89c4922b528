"""The ACL APIs over the wire: answered SECURITY_DISABLED, as a Kafka broker without an
authorizer answers them (Kafka's AclApis), so an admin client's ACL call fails with that
error instead of one about an API the broker does not support."""
import importlib

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from support.wire import call

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
admin_module = pytest.importorskip("confluent_kafka.admin")

# Kafka's ResourceType, PatternType, AclOperation and AclPermissionType codes.
TOPIC, LITERAL, ANY, READ, ALLOW = 2, 3, 1, 3, 3


def _request(api, version):
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


@pytest.mark.parametrize("version", [1, 2, 3])
def test_each_acl_api_answers_security_disabled_for_everything_it_is_asked(sock, version):
    # AclApis.handleDescribeAcls: one top-level error; handleCreateAcls and
    # handleDeleteAcls: CreateAclsRequest/DeleteAclsRequest.getErrorResponse, one result per
    # creation or filter.
    describe = _request("describe_acls", version)
    answer = call(sock, describe.DescribeAclsRequest(
        resource_type_filter=i8(ANY), resource_name_filter=None, pattern_type_filter=i8(ANY),
        principal_filter=None, host_filter=None, operation=i8(ANY), permission_type=i8(ANY)))
    assert (answer.error_code, answer.error_message, answer.resources) == (
        ErrorCode.security_disabled, "No Authorizer is configured on the broker", ())
    create = _request("create_acls", version)
    creation = create.AclCreation(
        resource_type=i8(TOPIC), resource_name="t", resource_pattern_type=i8(LITERAL),
        principal="User:app", host="*", operation=i8(READ), permission_type=i8(ALLOW))
    answer = call(sock, create.CreateAclsRequest(creations=(creation, creation)))
    assert [(r.error_code, r.error_message) for r in answer.results] == \
        [(ErrorCode.security_disabled, "No Authorizer is configured.")] * 2
    delete = _request("delete_acls", version)
    answer = call(sock, delete.DeleteAclsRequest(filters=(delete.DeleteAclsFilter(
        resource_type_filter=i8(ANY), resource_name_filter=None, pattern_type_filter=i8(ANY),
        principal_filter=None, host_filter=None, operation=i8(ANY),
        permission_type=i8(ANY)),)))
    assert [(r.error_code, r.error_message, r.matching_acls) for r in answer.filter_results] \
        == [(ErrorCode.security_disabled, "No Authorizer is configured.", ())]


def test_admin_clients_acl_calls_fail_with_security_disabled(server):
    admin = admin_module.AdminClient({"bootstrap.servers": server.bootstrap_servers})
    binding = admin_module.AclBinding(
        admin_module.ResourceType.TOPIC, "t", admin_module.ResourcePatternType.LITERAL,
        "User:app", "*", admin_module.AclOperation.READ, admin_module.AclPermissionType.ALLOW)
    any_acl = admin_module.AclBindingFilter(
        admin_module.ResourceType.ANY, None, admin_module.ResourcePatternType.ANY, None, None,
        admin_module.AclOperation.ANY, admin_module.AclPermissionType.ANY)
    for future in (admin.create_acls([binding])[binding], admin.delete_acls([any_acl])[any_acl]):
        with pytest.raises(confluent_kafka.KafkaException, match="SECURITY_DISABLED"):
            future.result(10)
    # librdkafka reads DescribeAcls' top-level error into no exception: the call lists no
    # ACLs, as it does against Kafka without an authorizer.
    assert admin.describe_acls(any_acl).result(10) == []
    kp = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType,
                                 ACLResourcePatternType, ResourcePatternFilter, ResourceType)
        with pytest.raises(kafka.errors.SecurityDisabledError):
            kp.describe_acls(ACLFilter(
                principal=None, host="*", operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY, resource_pattern=ResourcePatternFilter(
                    ResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        kp.close()
