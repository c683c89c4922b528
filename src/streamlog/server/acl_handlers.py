"""The ACL APIs on the wire: DescribeAcls, CreateAcls and DeleteAcls, answered as a Kafka
broker without an authorizer answers them (Kafka's AclApis, `authorizer` None): every one
SECURITY_DISABLED. This server authorizes nothing, so it keeps no ACLs to list, add or
remove; answering the APIs at all turns an admin client's call into that clear error
instead of a client-side "not supported by the broker" about a version it cannot pick.
"""
from kio.schema.errors import ErrorCode

from .protocol import NO_THROTTLE, build, response_types

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
# The messages of Kafka's AclApis.handleDescribeAcls and of the SecurityDisabledException
# that handleCreateAcls and handleDeleteAcls answer with.
_DESCRIBE_MESSAGE = "No Authorizer is configured on the broker"
_ALTER_MESSAGE = "No Authorizer is configured."


class AclHandlers:
    @property
    def table(self):
        return {DESCRIBE_ACLS: self.describe_acls, CREATE_ACLS: self.create_acls,
                DELETE_ACLS: self.delete_acls}

    def describe_acls(self, version, body, context):
        cls, _ = response_types(DESCRIBE_ACLS, version)
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.security_disabled,
                     error_message=_DESCRIBE_MESSAGE, resources=())

    def create_acls(self, version, body, context):
        """One result per creation asked for (Kafka's CreateAclsRequest.getErrorResponse)."""
        cls, types = response_types(CREATE_ACLS, version)
        return build(cls, throttle_time=NO_THROTTLE, results=tuple(
            build(types.AclCreationResult, error_code=ErrorCode.security_disabled,
                  error_message=_ALTER_MESSAGE) for _ in body.creations))

    def delete_acls(self, version, body, context):
        """One result per filter asked for (Kafka's DeleteAclsRequest.getErrorResponse)."""
        cls, types = response_types(DELETE_ACLS, version)
        return build(cls, throttle_time=NO_THROTTLE, filter_results=tuple(
            build(types.DeleteAclsFilterResult, error_code=ErrorCode.security_disabled,
                  error_message=_ALTER_MESSAGE, matching_acls=()) for _ in body.filters))
