"""The transaction admin APIs (KIP-664), through kafka-python's KafkaAdminClient as
`kafka-transactions.sh` uses them: ListTransactions, DescribeTransactions and
DescribeProducers answer what the coordinator and the partitions' logs hold, field for
field as Kafka's KafkaApis, TransactionCoordinator.handleDescribeTransactions,
TransactionStateManager.listTransactionStates and Partition.activeProducerState do (paths
relative to the apache/kafka repository's core/src/main/scala/kafka)."""
import kafka
import kafka.errors as kerrors
import pytest
from kafka.structs import TopicPartition as KafkaTopicPartition

from streamlog import TopicPartition
from streamlog.coordinator.transaction_coordinator import find_transaction_coordinator

from support.wire import call


@pytest.fixture
def admin(server):
    client = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    yield client
    client.close()


def open_transaction(db, transactional_id, partition=0):
    """A producer of transactional_id with a transaction open on t/partition."""
    producer = db.producer(transactional_id=transactional_id)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", value=b"v", partition=partition)
    producer.flush()
    return producer


def test_list_and_describe_show_each_transactional_id_as_its_coordinator_holds_it(db, admin):
    ongoing = open_transaction(db, "open-one", partition=1)
    done = db.producer(transactional_id="done-one")
    done.init_transactions()
    done.begin_transaction()
    done.send("t", value=b"w", partition=0)
    done.commit_transaction()
    coordinator = find_transaction_coordinator(db._broker)
    open_meta = coordinator.describe("open-one")

    (listing,) = admin.list_transactions().values()
    assert sorted((t.transactional_id, t.producer_id, t.state.value) for t in listing) == sorted([
        ("open-one", open_meta.producer_id, "Ongoing"),
        ("done-one", coordinator.describe("done-one").producer_id, "CompleteCommit")])
    # Filters: an empty one passes every id (listTransactionStates).
    (listing,) = admin.list_transactions(state_filters=["Ongoing"]).values()
    assert [t.transactional_id for t in listing] == ["open-one"]
    (listing,) = admin.list_transactions(producer_id_filters=[open_meta.producer_id]).values()
    assert [t.transactional_id for t in listing] == ["open-one"]
    # Version 1's duration filter: only transactions open longer than it.
    (listing,) = admin.list_transactions(state_filters=["Ongoing"],
                                         duration_filter_ms=3_600_000).values()
    assert listing == []

    described = admin.describe_transactions(["open-one", "done-one"])
    one = described["open-one"]
    assert (one.state.value, one.producer_id, one.producer_epoch) == \
        ("Ongoing", open_meta.producer_id, open_meta.producer_epoch)
    assert one.transaction_timeout_ms == 60_000
    assert one.transaction_start_time_ms == open_meta.start_ms > 0
    assert one.topic_partitions == {KafkaTopicPartition("t", 1)}
    assert described["done-one"].state.value == "CompleteCommit"
    ongoing.abort_transaction()
    assert admin.describe_transactions(["open-one"])["open-one"].state.value == "CompleteAbort"


def test_an_unknown_transactional_id_is_not_found(db, admin):
    # handleDescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator lacks.
    open_transaction(db, "known")
    with pytest.raises(kerrors.TransactionalIdNotFoundError):
        admin.describe_transactions(["nobody"])


def test_unknown_state_filters_come_back_and_match_nothing(db, server):
    # listTransactionStates: a name that is no state is returned in unknownStateFilters, and
    # a non-empty filter with no known state lists nothing.
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest
    import socket
    open_transaction(db, "known")
    with socket.create_connection((server.host, server.port)) as sock:
        answer = call(sock, ListTransactionsRequest(state_filters=("Sleeping",),
                                                    producer_id_filters=()))
    assert answer.unknown_state_filters == ("Sleeping",)
    assert answer.transaction_states == ()


def test_a_transactional_id_pattern_lists_the_ids_it_matches_whole(db, server, admin):
    # KIP-1152 (ListTransactions 2): TransactionalIdPattern, an RE2/J pattern, ANDed with
    # the other filters; empty or null passes every id; a pattern that does not compile is
    # INVALID_REGULAR_EXPRESSION for the whole request.
    import socket

    from kio.schema.errors import ErrorCode
    from kio.schema.list_transactions.v2.request import ListTransactionsRequest
    open_transaction(db, "orders-1")
    open_transaction(db, "orders-2", partition=1)
    open_transaction(db, "billing-1")

    def listed(pattern, **filters):
        with socket.create_connection((server.host, server.port)) as sock:
            answer = call(sock, ListTransactionsRequest(transactional_id_pattern=pattern,
                                                        **filters))
        return answer.error_code, sorted(t.transactional_id for t in answer.transaction_states)
    assert listed("orders-.*") == (ErrorCode.none, ["orders-1", "orders-2"])
    assert listed("orders") == (ErrorCode.none, [])           # the whole id must match
    assert listed("") == listed(None) == \
        (ErrorCode.none, ["billing-1", "orders-1", "orders-2"])
    assert listed(".*-1", state_filters=("Ongoing",)) == \
        (ErrorCode.none, ["billing-1", "orders-1"])
    assert listed(".*-1", state_filters=("CompleteCommit",)) == (ErrorCode.none, [])
    for invalid in ("orders-(", "orders(?=-1)", r"(o)\1.*"):   # lookarounds, backreferences:
        assert listed(invalid) == (ErrorCode.invalid_regular_expression, [])   # not RE2
    (listing,) = admin.list_transactions(transactional_id_pattern="billing-.*").values()
    assert [t.transactional_id for t in listing] == ["billing-1"]
    # kafka-python has no class of its own for the code: it raises one made for it.
    with pytest.raises(kerrors.UnknownError) as refused:
        admin.list_transactions(transactional_id_pattern="[")
    assert refused.value.errno == ErrorCode.invalid_regular_expression


def test_describe_producers_shows_each_producers_sequence_and_open_transaction(db, admin):
    plain = db.producer(acks="all")             # idempotent: a producer id of its own
    for _ in range(3):
        plain.send("t", value=b"p", partition=0).result()
    txn = open_transaction(db, "writer", partition=0)   # its batch at offset 3
    log = db._broker.partition_log(TopicPartition("t", 0))
    entries = {pid: (epoch, seq, first) for pid, epoch, seq, _, _, first in
               log.active_producers()}
    answer = admin.describe_producers([KafkaTopicPartition("t", 0)])
    producers = answer[KafkaTopicPartition("t", 0)].active_producers
    assert {p.producer_id: (p.producer_epoch, p.last_sequence,
                            p.current_transaction_start_offset) for p in producers} == entries
    assert sorted(first for _, _, first in entries.values()) == [-1, 3]
    assert sorted(seq for _, seq, _ in entries.values()) == [0, 2]
    assert all(p.last_timestamp > 0 for p in producers)
    txn.commit_transaction()
    producers = admin.describe_producers([KafkaTopicPartition("t", 0)])[
        KafkaTopicPartition("t", 0)].active_producers
    assert [p.current_transaction_start_offset for p in producers] == [-1, -1]


def test_describe_producers_of_an_unknown_partition(db, admin):
    # KafkaApis.handleDescribeProducersRequest: UNKNOWN_TOPIC_OR_PARTITION.
    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        admin.describe_producers([KafkaTopicPartition("t", 7)], broker_id=0)


def test_an_admin_aborts_a_hanging_transaction_with_write_txn_markers(db, admin):
    # kafka-transactions.sh abort (KafkaAdminClient.abort_transaction): a WriteTxnMarkers
    # ABORT to the partition's leader ends a transaction no coordinator will end. Its
    # marker is held to any marker's rules (ProducerAppendInfo.appendEndTxnMarker): a
    # coordinator epoch older than the last marker's is TRANSACTION_COORDINATOR_FENCED.
    from kafka.admin import AbortTransactionSpec

    from streamlog.storage.record_batch import build_batch
    broker = db._broker
    tp, ktp = TopicPartition("t", 0), KafkaTopicPartition("t", 0)
    pid, epoch = broker.init_producer_id()

    def hang(sequence):
        """A transactional batch no coordinator knows of, then a plain record after it."""
        broker.produce(tp, build_batch([b"hanging"], timestamp=1, producer_id=pid,
                                       producer_epoch=epoch, base_sequence=sequence,
                                       is_transactional=True))
        db.producer().send("t", value=b"after", partition=0).result()

    def entry():
        (found,) = [p for p in admin.describe_producers([ktp])[ktp].active_producers
                    if p.producer_id == pid]
        return found
    log = broker.partition_log(tp)
    hang(0)
    assert log.last_stable_offset == 0 and entry().current_transaction_start_offset == 0
    admin.abort_transaction(AbortTransactionSpec(ktp, pid, epoch, coordinator_epoch=5))
    assert log.last_stable_offset == log.log_end_offset == 3
    assert (entry().current_transaction_start_offset, entry().coordinator_epoch) == (-1, 5)
    consumer = db.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
    consumer.assign([tp])
    assert [r.value for r in consumer.poll(timeout=1)] == [b"after"]
    consumer.close()
    hang(1)
    with pytest.raises(kerrors.TransactionCoordinatorFencedError):
        admin.abort_transaction(AbortTransactionSpec(ktp, pid, epoch, coordinator_epoch=4))
    assert log.last_stable_offset == 3   # still open: nothing was written
