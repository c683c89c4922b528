"""The library's errors as Kafka's error codes, for every handler of the server.

One table, most specific class first (a subclass before its base): the first entry the
exception is an instance of gives the code; UNKNOWN_SERVER_ERROR when none fits.
"""
import logging

from kio.schema.errors import ErrorCode

from .. import errors

log = logging.getLogger("streamlog.server")


class UnsupportedRequestVersionError(errors.StreamlogError):
    """A request asks at its version for what only a later one (or none) serves."""


_ERROR_CODES = [
    # replication
    (errors.NotLeaderOrFollowerError, ErrorCode.not_leader_or_follower),
    (errors.LeaderNotAvailableError, ErrorCode.leader_not_available),
    (errors.OffsetNotAvailableError, ErrorCode.offset_not_available),
    (errors.NotEnoughReplicasAfterAppendError, ErrorCode.not_enough_replicas_after_append),
    (errors.NotEnoughReplicasError, ErrorCode.not_enough_replicas),
    (errors.FencedLeaderEpochError, ErrorCode.fenced_leader_epoch),
    (errors.UnknownLeaderEpochError, ErrorCode.unknown_leader_epoch),
    (errors.NotCoordinatorError, ErrorCode.not_coordinator),
    (errors.CoordinatorNotAvailableError, ErrorCode.coordinator_not_available),
    (errors.CoordinatorLoadInProgressError, ErrorCode.coordinator_load_in_progress),
    (errors.InvalidReplicationFactorError, ErrorCode.invalid_replication_factor),
    (errors.InvalidReplicaAssignmentError, ErrorCode.invalid_replica_assignment),
    (errors.ElectionNotNeededError, ErrorCode.election_not_needed),
    (errors.PreferredLeaderNotAvailableError, ErrorCode.preferred_leader_not_available),
    (errors.EligibleLeadersNotAvailableError, ErrorCode.eligible_leaders_not_available),
    # storage and topics
    (errors.UnknownTopicOrPartitionError, ErrorCode.unknown_topic_or_partition),
    (errors.TopicAlreadyExistsError, ErrorCode.topic_already_exists),
    (errors.InvalidTopicError, ErrorCode.invalid_topic_exception),
    (errors.InvalidPartitionsError, ErrorCode.invalid_partitions),
    (errors.InvalidConfigurationError, ErrorCode.invalid_config),
    (errors.ReadOnlyError, ErrorCode.policy_violation),
    (errors.PolicyViolationError, ErrorCode.policy_violation),
    (errors.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (errors.RecordBatchTooLargeError, ErrorCode.record_list_too_large),
    (errors.RecordTooLargeError, ErrorCode.message_too_large),
    (errors.CorruptInputBatchError, ErrorCode.corrupt_message),
    (errors.InvalidRecordError, ErrorCode.invalid_record),
    (errors.InvalidTimestampError, ErrorCode.invalid_timestamp),
    (errors.CorruptRecordError, ErrorCode.corrupt_message),
    (errors.UnsupportedCompressionTypeError, ErrorCode.unsupported_compression_type),
    (errors.InvalidRegularExpressionError, ErrorCode.invalid_regular_expression),
    (errors.InvalidRequestError, ErrorCode.invalid_request),
    (errors.RequestTimedOutError, ErrorCode.request_timed_out),
    (errors.KafkaStorageError, ErrorCode.kafka_storage_error),
    (errors.LogClosedError, ErrorCode.not_leader_or_follower),
    # producers and transactions
    (errors.DuplicateSequenceError, ErrorCode.duplicate_sequence_number),
    (errors.OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (errors.InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (errors.ProducerFencedError, ErrorCode.producer_fenced),
    (errors.InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (errors.InvalidProducerIdMappingError, ErrorCode.invalid_producer_id_mapping),
    (errors.InvalidTransactionTimeoutError, ErrorCode.invalid_transaction_timeout),
    (errors.ConcurrentTransactionsError, ErrorCode.concurrent_transactions),
    (errors.TransactionAbortableError, ErrorCode.transaction_abortable),
    (errors.TransactionalIdAuthorizationError, ErrorCode.transactional_id_authorization_failed),
    (errors.TransactionalIdNotFoundError, ErrorCode.transactional_id_not_found),
    (errors.TransactionCoordinatorFencedError, ErrorCode.transaction_coordinator_fenced),
    # consumer groups
    (errors.RebalanceInProgressError, ErrorCode.rebalance_in_progress),
    (errors.IllegalGenerationError, ErrorCode.illegal_generation),
    (errors.CommitFailedError, ErrorCode.illegal_generation),
    (errors.MemberIdRequiredError, ErrorCode.member_id_required),
    (errors.UnknownMemberIdError, ErrorCode.unknown_member_id),
    (errors.InconsistentGroupProtocolError, ErrorCode.inconsistent_group_protocol),
    (errors.FencedInstanceIdError, ErrorCode.fenced_instance_id),
    (errors.InvalidSessionTimeoutError, ErrorCode.invalid_session_timeout),
    (errors.GroupMaxSizeReachedError, ErrorCode.group_max_size_reached),
    (errors.InvalidGroupIdError, ErrorCode.invalid_group_id),
    (errors.GroupIdNotFoundError, ErrorCode.group_id_not_found),
    (errors.NonEmptyGroupError, ErrorCode.non_empty_group),
    (errors.GroupSubscribedToTopicError, ErrorCode.group_subscribed_to_topic),
    (errors.OffsetMetadataTooLargeError, ErrorCode.offset_metadata_too_large),
    (UnsupportedRequestVersionError, ErrorCode.unsupported_version),
]


class InjectedError(errors.StreamlogError):
    """An error code a test asked the server to answer (faults.py)."""

    def __init__(self, code):
        super().__init__(f"{code.name.upper()}, injected by a test")
        self.code = code


def failure(call, *args, bad_values=False):
    """What call(*args) raised that a handler answers as an error code: a StreamlogError,
    and with bad_values a ValueError (the library's checks of a value the request gave,
    answered INVALID_REQUEST); None when it returned."""
    try:
        call(*args)
    except errors.StreamlogError as exc:
        return exc
    except ValueError as exc:
        if not bad_values:
            raise
        return errors.InvalidRequestError(str(exc))
    return None


def error_message(exc):
    """An error's message for a response's error_message field (None: no error), cut to
    what a legacy string holds comfortably."""
    return None if exc is None else str(exc)[:1000]


def error_code(exc):
    """Kafka's error code for an exception (None: no error)."""
    if exc is None:
        return ErrorCode.none
    if isinstance(exc, InjectedError):
        return exc.code
    for cls, code in _ERROR_CODES:
        if isinstance(exc, cls):
            return code
    # Clients treat it as fatal: say which error had no code of its own.
    log.warning("answering UNKNOWN_SERVER_ERROR for %s: %s", type(exc).__name__, exc)
    return ErrorCode.unknown_server_error
