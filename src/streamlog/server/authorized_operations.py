"""The authorized operations a describe answers (Metadata's topics and cluster,
DescribeCluster, DescribeGroups: KIP-430), as a Kafka broker without an authorizer answers
them: every operation the resource type supports, as a bit field, when the client asks;
INT32_MIN, the schemas' "not asked for", when it does not.

Kafka's AuthHelper.authorizedOperations, with no authorizer, takes
AclEntry.supportedOperations(resourceType) whole and folds their AclOperation codes into
one int with Utils.to32BitField (bit `code` set for each). This server authorizes nothing,
so every client may do everything a resource supports: the same answer.
"""
from kio.static.primitive import i32

# Kafka's "authorized operations not asked for" (the schemas' default, Int.MinValue).
NOT_ASKED = -2**31

# Kafka's AclOperation codes.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12

# Kafka's AclEntry.supportedOperations, by resource type.
TOPIC_OPERATIONS = (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS,
                    ALTER_CONFIGS)
GROUP_OPERATIONS = (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPERATIONS = (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
                      IDEMPOTENT_WRITE, ALTER, DESCRIBE)


def bit_field(operations):
    """Kafka's Utils.to32BitField: bit `code` set for each operation."""
    value = 0
    for code in operations:
        value |= 1 << code
    return value


def authorized_operations(operations, asked):
    """The i32 to answer for a resource supporting `operations`: all of them when the
    client asked (nothing is refused here), NOT_ASKED otherwise."""
    return i32(bit_field(operations) if asked else NOT_ASKED)
