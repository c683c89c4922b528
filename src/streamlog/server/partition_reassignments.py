"""ListPartitionReassignments (key 46) on the wire: the partition reassignments in progress
(kafka-python's `list_partition_reassignments`, Kafka's admin client's
listPartitionReassignments, `kafka-reassign-partitions.sh --list`), answered as Kafka's
controller answers it (ReplicationControlManager.listPartitionReassignments, which a
broker forwards the request to).

Nothing here ever moves a partition's replicas (AlterPartitionReassignments is not
served), so no reassignment is ever in progress, and the controller's rules give an empty
answer to every request: a null topic list asks for every reassigning topic (there are
none); a topic named that does not exist, and a partition named that is not being
reassigned, are left out (a topic none of whose partitions are listed is left out too);
error NONE, no message.
"""
from kio.schema.errors import ErrorCode

from .protocol import NO_THROTTLE, build, response_types

LIST_PARTITION_REASSIGNMENTS = 46


class PartitionReassignmentsHandlers:
    @property
    def table(self):
        return {LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments}

    def list_partition_reassignments(self, version, body, context):
        cls, _ = response_types(LIST_PARTITION_REASSIGNMENTS, version)
        # Every partition asked (or, for a null list, every reassigning one) is left out:
        # none is being reassigned.
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     error_message=None, topics=())
