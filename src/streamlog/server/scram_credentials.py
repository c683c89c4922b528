"""DescribeUserScramCredentials (key 50) on the wire: which users have SCRAM credentials
(confluent-kafka's and kafka-python's `describe_user_scram_credentials`,
`kafka-configs.sh --describe --entity-type users`), answered as a Kafka broker answers it
from its metadata image (KafkaApis.handleDescribeUserScramCredentialsRequest,
ScramImage.describe) when no credential is stored.

This server has no SASL and stores no credentials, so: a null or empty user list (every
user with credentials) answers no results; each user named answers RESOURCE_NOT_FOUND; a
user named more than once answers one result, DUPLICATE_RESOURCE. Each user is answered
once, in the order first named (Kafka's order is its hash map's). The messages are
Kafka's, which clients show as they are.

AlterUserScramCredentials (key 51) is not served: a credential stored here would
authenticate nobody, so accepting one would mislead; clients get UNSUPPORTED_VERSION.
"""
from kio.schema.errors import ErrorCode

from .protocol import NO_THROTTLE, build, response_types

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
# The messages of Kafka's ScramImage.describe, followed by the user's name.
_NOT_FOUND = "Attempt to describe a user credential that does not exist: "
_DUPLICATE = "Cannot describe SCRAM credentials for the same user twice in a single request: "


class ScramCredentialsHandlers:
    @property
    def table(self):
        return {DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials}

    def describe_user_scram_credentials(self, version, body, context):
        cls, types = response_types(DESCRIBE_USER_SCRAM_CREDENTIALS, version)
        named = {}   # user -> named more than once; a dict keeps the order first named
        for user in body.users or ():
            named[user.name] = user.name in named
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     error_message=None, results=tuple(
                         _result(types, user, twice) for user, twice in named.items()))


def _result(types, user, twice):
    code, message = ((ErrorCode.duplicate_resource, _DUPLICATE) if twice else
                     (ErrorCode.resource_not_found, _NOT_FOUND))
    return build(types.DescribeUserScramCredentialsResult, user=user, error_code=code,
                 error_message=message + user, credential_infos=())
