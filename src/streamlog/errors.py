"""The exception tree of streamlog.

Every error a user can meet is a subclass of StreamlogError. Where Kafka has
an error code for the same condition the class carries Kafka's name, so code
written against a Kafka client reads the same. `retriable` says whether trying
the same call again later can succeed. Each message says what to do.

Programmer errors inside the library are assertions, not these classes; bytes
read from disk are checked with real checks that raise CorruptRecordError.
"""


class StreamlogError(Exception):
    """Base of every streamlog error."""

    retriable = False


# --- storage -------------------------------------------------------------


class CorruptRecordError(StreamlogError):
    """Bytes on disk fail a check (length, magic, CRC, record framing).

    Carries the file and byte position so `streamlog dump`/`verify` can be
    pointed at them. Corrupt bytes are never returned as records.
    """

    def __init__(self, message, path=None, position=None):
        where = ""
        if path is not None:
            where = f" in {path}" + (f" at byte {position}" if position is not None else "")
        super().__init__(f"{message}{where}. Run `streamlog verify` on the directory; "
                         "restore the partition from a replica or backup if the damage is in a "
                         "sealed segment")
        self.reason = message
        self.path = path
        self.position = position


class UnsupportedCompressionTypeError(StreamlogError):
    """A batch uses a compression codec this installation cannot handle."""


class UnsupportedVersionError(StreamlogError):
    """A batch or file has a format version this library does not read."""


class RecordTooLargeError(StreamlogError):
    """A record or batch exceeds max.message.bytes (or the segment size)."""


class RecordBatchTooLargeError(RecordTooLargeError):
    """A batch exceeds the segment size and can never be appended."""


class _RefusedRecords:
    """An append refused for some of its records: `record_errors` names them, as ((index of
    the record in its batch, why), ...), which a Produce response (v8+) passes on as Kafka's
    record_errors; empty when the batch as a whole is at fault."""

    def __init__(self, message, record_errors=()):
        super().__init__(message)
        self.record_errors = tuple(record_errors)


class InvalidRecordError(_RefusedRecords, StreamlogError):
    """A batch handed to the log is malformed (not data corruption on disk)."""


class InvalidTimestampError(_RefusedRecords, StreamlogError):
    """A record's timestamp lies outside the window its topic allows around the broker's
    clock (message.timestamp.before.max.ms / after.max.ms), or a client marked its batch
    LogAppendTime (Kafka's INVALID_TIMESTAMP)."""


class CorruptInputBatchError(InvalidRecordError):
    """A batch handed to the log fails its CRC, or has a magic no Kafka ever wrote: its bytes
    were damaged before they arrived (Kafka's CORRUPT_MESSAGE). Sending the batch again can
    succeed, so producers retry it."""

    retriable = True


class InvalidOffsetError(StreamlogError):
    """A consumer has no valid position for a partition and no reset policy to find one
    (Kafka's InvalidOffsetException): its position left the log (OffsetOutOfRangeError),
    or it has none (NoOffsetForPartitionError)."""

    def __init__(self, message, partition=None, offset=None):
        super().__init__(message)
        self.partition = partition
        self.offset = offset


class OffsetOutOfRangeError(InvalidOffsetError):
    """A fetch asked for an offset below the log start or above the log end."""


class KafkaStorageError(StreamlogError):
    """An I/O error on the log directory (disk full, permissions, vanished files)."""


class LogClosedError(StreamlogError):
    """The partition log (or the database) was closed."""


# --- database / broker ---------------------------------------------------


class NotADatabaseError(StreamlogError):
    """The path is not a streamlog database: a file, or a non-empty directory without the
    metadata log. Nothing was changed; sqlite3 refuses a file that is not a database alike."""


class InconsistentTopicIdError(StreamlogError):
    """A partition directory's `partition.metadata` names another topic id than the
    topic registry does (Kafka's INCONSISTENT_TOPIC_ID): the directory is not this topic's."""


class DatabaseLockedError(StreamlogError):
    """Another process holds the writer lock on the directory (`holder`: its pid, if known)."""

    retriable = True

    def __init__(self, message, path=None, holder=None):
        super().__init__(message)
        self.path = path
        self.holder = holder


class ReadOnlyError(StreamlogError):
    """A write was attempted on a database opened with readonly=True."""


class UnknownTopicOrPartitionError(StreamlogError):
    """The topic or partition does not exist. `topic` names the topic when the whole topic is
    missing (so a caller can say how to create it); None otherwise. `retriable` is set when
    it exists in the metadata but not yet on disk (a read-only view of a topic the writer is
    creating), as Kafka's UNKNOWN_TOPIC_OR_PARTITION is retriable."""

    def __init__(self, message, topic=None, retriable=False):
        super().__init__(message)
        self.topic = topic
        self.retriable = retriable


class TopicAlreadyExistsError(StreamlogError):
    """create_topic was called for a topic that exists."""


class InvalidTopicError(StreamlogError):
    """A topic name breaks Kafka's naming rule."""


class InvalidPartitionsError(StreamlogError):
    """A partition count is invalid (zero, negative, or a decrease)."""


class PolicyViolationError(StreamlogError):
    """A request the topic's configuration forbids (Kafka's POLICY_VIOLATION): deleting
    records of a topic whose cleanup.policy lacks "delete"."""


class InvalidConfigurationError(StreamlogError):
    """A topic or client configuration key or value is invalid."""


class InvalidRequestError(StreamlogError):
    """A request is malformed for its state (wrong arguments for the call)."""


class InvalidRegularExpressionError(InvalidRequestError):
    """A request's pattern is no regular expression RE2/J compiles (Kafka's
    INVALID_REGULAR_EXPRESSION)."""


class RequestTimedOutError(StreamlogError):
    """An operation did not complete within its timeout."""

    retriable = True


class KafkaTimeoutError(RequestTimedOutError):
    """A client-side wait (flush, metadata, future) ran out of time."""


class TimerClosedError(StreamlogError):
    """A task was added to a timer (or purgatory) that has been closed with its broker."""


# --- producer ------------------------------------------------------------


class ProducerClosedError(StreamlogError):
    """send() on a producer that has been closed."""


class ProducerFencedError(StreamlogError):
    """A newer producer with the same transactional.id exists; close this one."""


class InvalidProducerEpochError(ProducerFencedError):
    """The producer epoch is older than the partition's current one."""


class OutOfOrderSequenceError(StreamlogError):
    """A batch's sequence number is not the next expected one for its producer."""


class DuplicateSequenceError(StreamlogError):
    """The batch was already written (treated as success by the producer)."""


class InvalidTxnStateError(StreamlogError):
    """A transactional call in the wrong state (e.g. commit with no transaction)."""


class InvalidProducerIdMappingError(StreamlogError):
    """The producer id does not own the transactional id (Kafka's INVALID_PRODUCER_ID_MAPPING)."""


class InvalidTransactionTimeoutError(StreamlogError):
    """transaction.timeout.ms is above the database's transaction.max.timeout.ms."""


class TransactionalIdAuthorizationError(StreamlogError):
    """Transactional records without the transactional id that may write them (Kafka's
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""


class TransactionalIdNotFoundError(StreamlogError):
    """A transactional id its coordinator does not know (DescribeTransactions)."""


class TransactionAbortableError(StreamlogError):
    """The producer's transaction cannot go on but need not fence it: abort it and begin
    another (Kafka's TRANSACTION_ABORTABLE, KIP-890)."""


class ConcurrentTransactionsError(StreamlogError):
    """The previous transaction of this producer is still completing."""

    retriable = True


class TransactionCoordinatorFencedError(StreamlogError):
    """A transaction marker came from a coordinator that a newer one replaced (its
    coordinator epoch is older than the last marker's on the partition)."""


class TransactionAbortedError(StreamlogError):
    """The transaction was aborted (e.g. timed out); begin a new one."""


# --- consumer groups -----------------------------------------------------


class RebalanceInProgressError(StreamlogError):
    """The group is rebalancing; poll() again to rejoin."""

    retriable = True


class CommitFailedError(StreamlogError):
    """An offset commit was refused because the group moved on."""


class IllegalGenerationError(StreamlogError):
    """A request carried a generation that is no longer current."""


class NoSuchGroupGenerationError(IllegalGenerationError):
    """A request carried a generation of a group that does not exist (OffsetCommit 9 on
    answers it GROUP_ID_NOT_FOUND, older versions ILLEGAL_GENERATION, as Kafka's)."""


class UnknownMemberIdError(StreamlogError):
    """The member is not (or no longer) part of the group."""


class MemberIdRequiredError(StreamlogError):
    """A new member must join again with the member id this error carries (KIP-394: the
    coordinator knows a member before it counts it, so a client that never comes back
    costs the group no rebalance)."""

    def __init__(self, message, member_id):
        super().__init__(message)
        self.member_id = member_id


class GroupIdNotFoundError(StreamlogError):
    """The group does not exist."""


class NonEmptyGroupError(StreamlogError):
    """The group still has members, so it cannot be deleted or reset."""


class GroupSubscribedToTopicError(StreamlogError):
    """A member of the group subscribes to the topic, so the group's committed offsets of
    its partitions cannot be deleted (Kafka's GROUP_SUBSCRIBED_TO_TOPIC)."""


class InconsistentGroupProtocolError(StreamlogError):
    """The member's assignors share none with the group's."""


class FencedInstanceIdError(StreamlogError):
    """Another consumer joined with the same group_instance_id."""


class GroupMaxSizeReachedError(StreamlogError):
    """A join would take the group past the database's group.max.size members."""


class InvalidSessionTimeoutError(StreamlogError):
    """session_timeout_ms lies outside the database's group.min/max.session.timeout.ms."""


class InvalidGroupIdError(StreamlogError):
    """A group call without a usable group_id (give the consumer group_id=...)."""


class OffsetMetadataTooLargeError(StreamlogError):
    """A committed offset's metadata string is longer than offset.metadata.max.bytes."""


class WakeupError(StreamlogError):
    """consumer.wakeup() was called: a blocking call returned early on purpose."""


class RecordDeserializationError(StreamlogError):
    """A key or value deserializer raised for a record (Kafka's
    RecordDeserializationException). The consumer's position stays at that record, so each
    poll() raises this again until the record is sought past: seek(tp, offset + 1). The
    deserializer's exception is the __cause__."""

    def __init__(self, message, topic_partition, offset):
        super().__init__(message)
        self.topic_partition = topic_partition
        self.offset = offset


class IllegalStateError(StreamlogError):
    """A client call in a state that does not allow it (e.g. poll with no assignment)."""


class NoOffsetForPartitionError(InvalidOffsetError):
    """No committed offset and auto_offset_reset='none' (Kafka's sibling of
    OffsetOutOfRangeError, not a kind of it)."""


# --- replication (a cluster of brokers: streamlog.cluster) ---------------------------

class NotLeaderOrFollowerError(StreamlogError):
    """This broker does not lead the partition (it follows it, or holds no replica): a
    client refreshes its metadata and asks the leader."""

    retriable = True


class LeaderNotAvailableError(StreamlogError):
    """The partition has no leader now (no eligible replica is alive)."""

    retriable = True


class PreferredLeaderNotAvailableError(StreamlogError):
    """A preferred-leader election found the partition's first replica down or out of the
    in-sync replicas (Kafka's PREFERRED_LEADER_NOT_AVAILABLE): let it catch up first."""

    retriable = True


class ElectionNotNeededError(StreamlogError):
    """A preferred-leader election for a partition its first replica already leads, or an
    unclean one for a partition that has a leader (Kafka's ELECTION_NOT_NEEDED)."""


class EligibleLeadersNotAvailableError(StreamlogError):
    """An unclean election found no live replica to lead the partition (Kafka's
    ELIGIBLE_LEADERS_NOT_AVAILABLE)."""

    retriable = True


class OffsetNotAvailableError(StreamlogError):
    """A leader elected moments ago whose high watermark has not reached the start of its
    leader epoch yet: the offsets it would answer are older than the partition's; a
    client asks again (ListOffsets)."""

    retriable = True


class NotEnoughReplicasError(StreamlogError):
    """acks=all with fewer in-sync replicas than min.insync.replicas: nothing was written."""

    retriable = True


class NotEnoughReplicasAfterAppendError(NotEnoughReplicasError):
    """acks=all: written to the leader, but the in-sync replicas fell below
    min.insync.replicas before it was replicated; the record may or may not survive."""


class FencedLeaderEpochError(StreamlogError):
    """The request names a leader epoch older than the partition's: the sender's metadata
    is stale."""

    retriable = True


class UnknownLeaderEpochError(StreamlogError):
    """The request names a leader epoch newer than this broker knows: it is behind."""

    retriable = True


class NotCoordinatorError(StreamlogError):
    """This broker is not the coordinator of the group or transactional id."""

    retriable = True


class CoordinatorLoadInProgressError(StreamlogError):
    """This broker just became the coordinator of the group or transactional id and is
    still loading its partition of the internal topic; retry."""

    retriable = True


class CoordinatorNotAvailableError(StreamlogError):
    """No broker can coordinate the group or transactional id now (its partition of the
    internal topic has no leader)."""

    retriable = True


class InvalidReplicationFactorError(InvalidConfigurationError):
    """A replication factor below 1 or above the cluster's broker count."""


class InvalidReplicaAssignmentError(InvalidConfigurationError):
    """A manual replica assignment Kafka's controller refuses: an empty replica list, a
    broker that does not exist or one named twice, lists of different lengths, partitions
    that do not follow on."""
