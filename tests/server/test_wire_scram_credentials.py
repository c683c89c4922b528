"""DescribeUserScramCredentials (key 50): this server stores no SCRAM credentials (it has
no SASL), and answers as a Kafka broker with none stored (KafkaApis
.handleDescribeUserScramCredentialsRequest, ScramImage.describe): no result for a null or
empty user list, RESOURCE_NOT_FOUND for each user named, DUPLICATE_RESOURCE, answered once,
for a user named twice; Kafka's messages. AlterUserScramCredentials (key 51) stays
unserved."""
import pytest
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest, UserName)
from kio.schema.errors import ErrorCode

from support.wire import call

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_module = pytest.importorskip("confluent_kafka.admin")
kafka = pytest.importorskip("kafka")

NOT_FOUND = "Attempt to describe a user credential that does not exist: "
DUPLICATE = "Cannot describe SCRAM credentials for the same user twice in a single request: "


def describe(sock, users):
    answer = call(sock, DescribeUserScramCredentialsRequest(
        users=None if users is None else tuple(UserName(name=u) for u in users)))
    assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)
    return [(r.user, r.error_code, r.error_message, r.credential_infos)
            for r in answer.results]


@pytest.mark.parametrize("users", [None, []], ids=["null", "empty"])
def test_every_user_is_no_user(sock, users):
    # ScramImage.describe: no user named asks for every user with credentials: none here.
    assert describe(sock, users) == []


def test_each_user_named_is_not_found_and_one_named_twice_a_duplicate(sock):
    assert describe(sock, ["alice", "bob", "alice", "alice"]) == [
        ("alice", ErrorCode.duplicate_resource, DUPLICATE + "alice", ()),
        ("bob", ErrorCode.resource_not_found, NOT_FOUND + "bob", ())]
    assert describe(sock, [""]) == [("", ErrorCode.resource_not_found, NOT_FOUND, ())]


def test_only_describe_is_served(sock):
    # A credential stored here would authenticate nobody: AlterUserScramCredentials (51) is
    # left out of ApiVersions, so clients do not send it (UNSUPPORTED_VERSION if they do).
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    answer = call(sock, ApiVersionsRequest(client_software_name="wire-test",
                                           client_software_version="1"))
    served = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert served[50] == (0, 0) and 51 not in served


def test_admin_clients_describe_no_credentials(server):
    admin = admin_module.AdminClient({"bootstrap.servers": server.bootstrap_servers})
    assert admin.describe_user_scram_credentials().result(10) == {}
    futures = admin.describe_user_scram_credentials(["alice", "bob"])
    for user, future in futures.items():
        with pytest.raises(confluent_kafka.KafkaException) as failure:
            future.result(10)
        error = failure.value.args[0]
        assert error.code() == confluent_kafka.KafkaError.RESOURCE_NOT_FOUND
        # (librdkafka 2.16 copies the message up to the next zero byte of the frame, not by
        # its length, so a byte of the next field may follow it.)
        assert error.str().startswith(NOT_FOUND + user)
    kp = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        assert kp.describe_user_scram_credentials() == {}
        assert kp.describe_user_scram_credentials(["alice", "bob", "alice"]) == {
            "alice": {"error": DUPLICATE + "alice", "credential_infos": []},
            "bob": {"error": NOT_FOUND + "bob", "credential_infos": []}}
    finally:
        kp.close()
