"""ElectLeaders (key 43) on the wire: an admin's preferred or unclean leader election
(confluent-kafka's and kafka-python's `elect_leaders`, `kafka-leader-election.sh`), with
the answers of Kafka's controller (ReplicationControlManager.electLeaders / electLeader,
which a broker forwards the request to).

Per partition: UNKNOWN_TOPIC_OR_PARTITION for one that does not exist; ELECTION_NOT_NEEDED
for a PREFERRED election whose first replica leads already, or an UNCLEAN one of a
partition that has a leader; else the election. On a database on its own, and for the
internal topics of a cluster's broker (each broker's own, not replicated), the only
replica leads every partition: nothing is ever elected. In a cluster the controller
elects (ClusterView.elect_leader): PREFERRED_LEADER_NOT_AVAILABLE when the first replica
is down or out of the ISR, ELIGIBLE_LEADERS_NOT_AVAILABLE when an unclean election finds
no replica alive. Asked for every partition (a null list), the ones that needed no
election are left out, each topic still listed, as KRaft's controller answers.
"""
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from .. import errors
from ..structs import TopicPartition
from .error_codes import error_code, error_message
from .protocol import NO_THROTTLE, build, response_types

ELECT_LEADERS = 43
# Kafka's ElectionType.
PREFERRED, UNCLEAN = 0, 1
# The messages Kafka answers these with (ApiError(Errors.X): the error's own message).
_KAFKA_MESSAGES = {
    ErrorCode.election_not_needed: "Leader election not needed for topic partition.",
    ErrorCode.preferred_leader_not_available: "The preferred leader was not available.",
    ErrorCode.eligible_leaders_not_available:
        "Eligible topic partition leaders are not available.",
}


class ElectLeadersHandlers:
    def __init__(self, broker, view=None):
        self.broker = broker
        self.view = view   # cluster.ClusterView, or None on a database on its own

    @property
    def table(self):
        return {ELECT_LEADERS: self.elect_leaders}

    def elect_leaders(self, version, body, context):
        cls, types = response_types(ELECT_LEADERS, version)
        asked = body.topic_partitions
        election = int(getattr(body, "election_type", PREFERRED))   # v0: preferred only
        if asked is not None and not asked:
            # QuorumController.electLeaders: nothing asked, nothing to do.
            return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                         replica_election_results=())
        if election not in (PREFERRED, UNCLEAN):
            # ReplicationControlManager.electionType's InvalidRequestException, answered
            # by ElectLeadersRequest.getErrorResponse: top-level and per partition asked.
            refusal = errors.InvalidRequestError(f"Unknown election type {election}")
            return build(cls, throttle_time=NO_THROTTLE, error_code=error_code(refusal),
                         replica_election_results=tuple(
                             _topic_result(types, t.topic, [(p, refusal) for p in t.partitions])
                             for t in asked or ()))
        unclean = election == UNCLEAN
        results = []
        if asked is None:
            for name, info in sorted(self.broker.topics().items()):
                outcomes = [(p, self._elect(TopicPartition(name, p), unclean))
                            for p in range(info.partitions)]
                results.append(_topic_result(types, name, [
                    (p, exc) for p, exc in outcomes
                    if not isinstance(exc, errors.ElectionNotNeededError)]))
        else:
            for topic in asked:
                results.append(_topic_result(types, topic.topic, [
                    (p, self._elect(TopicPartition(topic.topic, int(p)), unclean))
                    for p in topic.partitions]))
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     replica_election_results=tuple(results))

    def _elect(self, tp, unclean):
        """Elect tp's leader; the error that stopped it, None when elected."""
        try:
            info = self.broker.topics().get(tp.topic)
            if info is None:   # Kafka's messages (ReplicationControlManager.electLeader)
                raise errors.UnknownTopicOrPartitionError(f"No such topic as {tp.topic}",
                                                          tp.topic)
            if not 0 <= tp.partition < info.partitions:
                raise errors.UnknownTopicOrPartitionError(
                    f"No such partition as {tp.topic}-{tp.partition}")
            if self.view is None or self.view.partition_state(tp) is None:
                raise errors.ElectionNotNeededError(f"this broker is {tp}'s only replica")
            self.view.elect_leader(tp, unclean)
        except errors.StreamlogError as exc:
            return exc
        return None


def _topic_result(types, topic, outcomes):
    """One topic's ReplicaElectionResult of [(partition, error or None)]."""
    return build(types.ReplicaElectionResult, topic=topic, partition_result=tuple(
        build(types.PartitionResult, partition_id=i32(p), error_code=error_code(exc),
              error_message=_KAFKA_MESSAGES.get(error_code(exc), error_message(exc)))
        for p, exc in outcomes))
