"""Transactions on a cluster: the coordinator of a transactional id is the leader of its
partition of __transaction_state (replicated); markers go to each partition's leader and
are replicated before the transaction completes; a coordinator's death hands the id's
state to the next leader, and the producer goes on (Kafka's TransactionStateManager and
TransactionMarkerChannelManager)."""
import datetime
import socket
import threading

import pytest

from streamlog.broker.broker import Broker
from streamlog.cluster import Cluster
from streamlog.coordinator.offsets import OFFSETS_TOPIC
from streamlog.coordinator.transaction_coordinator import (TransactionCoordinator,
                                                           find_transaction_coordinator)
from streamlog.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from streamlog.errors import (ConcurrentTransactionsError, CoordinatorLoadInProgressError,
                              CoordinatorNotAvailableError, KafkaStorageError,
                              NotCoordinatorError, TransactionCoordinatorFencedError)
from streamlog.server.error_codes import failure
from streamlog.storage.record_batch import build_batch
from streamlog.structs import TopicPartition

from support import GENEROUS_S, producer_in_a_transaction, wait_until
from support.cluster_steps import led_by_another_than_preferred

confluent_kafka = pytest.importorskip("confluent_kafka")
TRANSACTION = 1


@pytest.fixture
def cluster(tmp_path):
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=1000,
                 config={"min.insync.replicas": 2}) as c:
        yield c


def committed_values(bootstrap, topic, expect, group="reader"):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest",
                                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    got = []

    def poll():
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            got.append(message.value())
        return len(got) >= expect
    try:
        wait_until(poll, f"{expect} committed records of {topic}", timeout_s=30)
        # Nothing more comes: an aborted record would have been delivered by now.
        for _ in range(10):
            poll()
    finally:
        consumer.close()
    return got


def transaction(producer, values, commit=True):
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce("out", value=value, partition=i % 3)
    producer.flush(30)
    (producer.commit_transaction if commit else producer.abort_transaction)(30)


def test_transactions_commit_abort_and_survive_their_coordinators_death(cluster):
    cluster.create_topic("out", 3, 3)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "transactional.id": "payments-tx",
                                         "reconnect.backoff.max.ms": 1000})
    producer.init_transactions(30)
    coordinator = cluster.coordinator_for("payments-tx", TRANSACTION)
    leaders = {cluster.leader("out", p) for p in range(3)}
    assert len(leaders) == 3   # the markers go to three brokers, two of them remote
    transaction(producer, [b"a1", b"a2", b"a3"])
    transaction(producer, [b"x1", b"x2", b"x3"], commit=False)
    cluster.kill(coordinator)
    assert cluster.coordinator_for("payments-tx", TRANSACTION) != coordinator
    transaction(producer, [b"b1", b"b2", b"b3"])   # the new coordinator knows the id
    assert sorted(committed_values(cluster.bootstrap_servers, "out", 6)) == \
        [b"a1", b"a2", b"a3", b"b1", b"b2", b"b3"]
    cluster.restart(coordinator)
    cluster.wait_in_sync(TRANSACTION_STATE_TOPIC)
    cluster.wait_in_sync("out")
    for p in range(3):   # every replica holds the same records and markers
        logs = {b: cluster.replica_records("out", p, b) for b in cluster.broker_ids}
        assert logs[0] == logs[1] == logs[2]
    producer.flush(10)


def test_a_marker_moves_the_high_watermark_as_a_leaders_append_does(cluster):
    """Kafka appends a marker through Partition.appendRecordsToLeader, which ends with
    maybeIncrementLeaderHW. The marker was written beside that path: on a partition with
    no follower nothing moved the high watermark past it, the commit waited out the
    marker's 30 s, and read_committed readers saw nothing (HW 1 of LEO 2, LSO 0)."""
    cluster.create_topic("alone", 1, 1)
    producer = producer_in_a_transaction(cluster.bootstrap_servers, "alone-tx", "alone", b"x",
                                         30)
    producer.commit_transaction(60)
    leader = cluster.broker(cluster.partition_state("alone", 0).leader)
    log = leader.partition_log(TopicPartition("alone", 0))
    assert (log.log_end_offset, log.high_watermark, log.last_stable_offset) == (2, 2, 2)
    assert committed_values(cluster.bootstrap_servers, "alone", 1) == [b"x"]


def test_a_new_instance_fences_the_old_one_across_a_coordinator_change(cluster):
    cluster.create_topic("out", 3, 3)
    config = {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "t2",
              "reconnect.backoff.max.ms": 1000}
    old = confluent_kafka.Producer(config)
    old.init_transactions(30)
    old.begin_transaction()
    old.produce("out", value=b"zombie", partition=0)
    old.flush(30)
    cluster.kill(cluster.coordinator_for("t2", TRANSACTION))
    new = confluent_kafka.Producer(config)
    new.init_transactions(30)        # aborts the old instance's open transaction
    transaction(new, [b"n1"])
    with pytest.raises(confluent_kafka.KafkaException):
        old.commit_transaction(10)   # fenced
    assert committed_values(cluster.bootstrap_servers, "out", 1) == [b"n1"]


# --- coordinator failover, in process --------------------------------------------------
# The transaction coordinators are called directly (as the wire handlers call them), so a
# test can stop one exactly where it wants: between two of its markers.

def in_process_cluster(tmp_path):
    # The timeout check runs once an hour: what completes a transaction here is the new
    # coordinator's take-over, not the periodic retry.
    return Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=1000,
                   config={"min.insync.replicas": 2,
                           "transaction.abort.timed.out.transaction.cleanup.interval.ms":
                           3_600_000})


def coordinator_of(cluster, transactional_id):
    broker = cluster.broker(cluster.coordinator_for(transactional_id, TRANSACTION))
    return find_transaction_coordinator(broker)


def until_served(call):
    """call()'s result once the coordinator answers it (a client retries these errors)."""
    out = []

    def attempt():
        try:
            out.append(call())
        except (NotCoordinatorError, CoordinatorLoadInProgressError,
                CoordinatorNotAvailableError, ConcurrentTransactionsError):
            return False
        return True
    wait_until(attempt, "the coordinator to answer", timeout_s=60)
    return out[0]


def send_transactional(cluster, tp, value, producer_id, epoch, sequence):
    broker = cluster.broker(cluster.leader(tp.topic, tp.partition))
    info = broker.produce(tp, build_batch([value], timestamp=1, producer_id=producer_id,
                                          producer_epoch=epoch, base_sequence=sequence,
                                          is_transactional=True), acks=-1)
    broker.replicas.wait_replicated(tp, info.last_offset + 1, 30)


def open_transaction(cluster, transactional_id, values):
    """A transaction with values[i] on partition i of "out", not ended; (pid, epoch, tps)."""
    cluster.create_topic("out", len(values), 3)
    cluster.coordinator_for(transactional_id, TRANSACTION)
    for topic in (TRANSACTION_STATE_TOPIC, "out"):
        cluster.wait_in_sync(topic)
    coordinator = until_served(lambda: coordinator_of(cluster, transactional_id))
    pid, epoch = until_served(lambda: coordinator.init_producer_id(transactional_id, 60_000))
    tps = [TopicPartition("out", p) for p in range(len(values))]
    coordinator.add_partitions(transactional_id, pid, epoch, tps)
    for tp, value in zip(tps, values, strict=True):
        send_transactional(cluster, tp, value, pid, epoch, 0)
    return pid, epoch, tps


def test_a_killed_coordinators_late_marker_is_fenced(tmp_path, monkeypatch):
    """A coordinator killed while it writes markers may still be running its EndTxn; its
    next marker must not land in the producer's next transaction (Kafka fences it by the
    coordinator epoch: ProducerStateManager's checkCoordinatorEpoch)."""
    with in_process_cluster(tmp_path) as cluster:
        pid, epoch, tps = open_transaction(cluster, "tx-z", [b"t1-0", b"t1-1", b"t1-2"])
        old = cluster.coordinator_for("tx-z", TRANSACTION)
        zombie = coordinator_of(cluster, "tx-z")
        paused, resume = threading.Event(), threading.Event()
        write = Cluster.write_txn_markers

        def stalling(self, from_broker, markers):
            if from_broker == old and markers[0][0] == tps[2]:
                paused.set()          # the old coordinator stops before its last marker
                resume.wait(60)
            return write(self, from_broker, markers)
        monkeypatch.setattr(Cluster, "write_txn_markers", stalling)
        late = []
        zombie_call = threading.Thread(target=lambda: late.append(
            failure(zombie.end_txn, "tx-z", pid, epoch, True)))
        zombie_call.start()
        assert paused.wait(60)
        killer = threading.Thread(target=cluster.kill, args=(old,))
        killer.start()   # its close waits for the stalled request
        wait_until(lambda: cluster.coordinator_for("tx-z", TRANSACTION) != old,
                   "a new coordinator")
        # The client retries EndTxn at the new coordinator, which finishes the commit.
        until_served(lambda: coordinator_of(cluster, "tx-z").end_txn("tx-z", pid, epoch, True))
        # The next transaction writes to partition 2, then the zombie's marker comes.
        coordinator_of(cluster, "tx-z").add_partitions("tx-z", pid, epoch, [tps[2]])
        send_transactional(cluster, tps[2], b"t2-aborted", pid, epoch, 1)
        leader = cluster.broker(cluster.leader("out", 2))
        with pytest.raises(TransactionCoordinatorFencedError):   # its coordinator epoch
            leader.write_txn_markers_here([(tps[2], pid, epoch, 0, True)])
        resume.set()
        zombie_call.join(60)
        killer.join(60)
        assert isinstance(late[0], NotCoordinatorError)
        assert leader.partition_log(tps[2]).last_stable_offset < \
            leader.partition_log(tps[2]).log_end_offset   # t2 is still open
        coordinator_of(cluster, "tx-z").end_txn("tx-z", pid, epoch, False)
        assert sorted(committed_values(cluster.bootstrap_servers, "out", 3)) == \
            [b"t1-0", b"t1-1", b"t1-2"]


def test_a_new_coordinator_finishes_a_commit_across_the_dead_brokers_partitions(
        tmp_path, monkeypatch):
    """The coordinator dies with PrepareCommit written and a marker missing on the
    partition it also led: the next coordinator's take-over writes it to that partition's
    new leader, without waiting for the hourly timeout check (Kafka's marker channel
    retries a partition whose leader moves)."""
    with in_process_cluster(tmp_path) as cluster:
        pid, epoch, tps = open_transaction(cluster, "tx-m", [b"m0", b"m1", b"m2"])
        old = cluster.coordinator_for("tx-m", TRANSACTION)
        own = next(tp for tp in tps if cluster.leader(tp.topic, tp.partition) == old)
        write = Broker.write_txn_markers_here

        def failing(self, markers):
            if markers[0][0] == own:
                raise KafkaStorageError("injected: the disk failed")
            return write(self, markers)
        monkeypatch.setattr(Broker, "write_txn_markers_here", failing)
        with pytest.raises(KafkaStorageError):
            coordinator_of(cluster, "tx-m").end_txn("tx-m", pid, epoch, True)
        monkeypatch.setattr(Broker, "write_txn_markers_here", write)
        cluster.kill(old)

        def state():
            view = cluster.replica_manager(cluster.coordinator_for("tx-m", TRANSACTION)).view
            view.check_coordinating("tx-m", TRANSACTION)    # loaded: memory is current
            return coordinator_of(cluster, "tx-m").describe("tx-m").state.name
        wait_until(lambda: until_served(state) == "COMPLETE_COMMIT",
                   "the new coordinator to complete the commit", timeout_s=60)
        assert sorted(committed_values(cluster.bootstrap_servers, "out", 3)) == \
            [b"m0", b"m1", b"m2"]


def test_a_new_coordinator_answers_load_in_progress_until_it_has_loaded(tmp_path,
                                                                        monkeypatch):
    """Between its election and the end of its load, a coordinator's memory of the
    partition is an older leader's: it answers COORDINATOR_LOAD_IN_PROGRESS (Kafka's
    TransactionStateManager and GroupMetadataManager while loading), and once loaded it
    fences the open transaction the dead coordinator left."""
    with in_process_cluster(tmp_path) as cluster:
        pid, epoch, tps = open_transaction(cluster, "tx-l", [b"open"])
        cluster.coordinator_for("g", 0)
        cluster.wait_in_sync(OFFSETS_TOPIC)
        old = cluster.coordinator_for("tx-l", TRANSACTION)
        release, loading = threading.Event(), threading.Event()
        take_over = TransactionCoordinator.take_over

        def slow_take_over(self, partition, coordinator_epoch):
            loading.set()
            release.wait(60)
            return take_over(self, partition, coordinator_epoch)
        monkeypatch.setattr(TransactionCoordinator, "take_over", slow_take_over)
        cluster.kill(old)
        assert loading.wait(60)
        new = cluster.coordinator_for("tx-l", TRANSACTION)
        view = cluster.replica_manager(new).view
        with pytest.raises(CoordinatorLoadInProgressError):
            view.check_coordinating("tx-l", TRANSACTION)
        with pytest.raises(CoordinatorLoadInProgressError):
            coordinator_of(cluster, "tx-l").init_producer_id("tx-l", 60_000)
        release.set()
        until_served(lambda: view.check_coordinating("tx-l", TRANSACTION))
        # The old instance's open transaction was found and fenced: its abort bumped the
        # epoch once (answered CONCURRENT_TRANSACTIONS), and the retry's epoch is the next.
        with pytest.raises(ConcurrentTransactionsError):
            coordinator_of(cluster, "tx-l").init_producer_id("tx-l", 60_000)
        new_pid, new_epoch = coordinator_of(cluster, "tx-l").init_producer_id("tx-l", 60_000)
        assert (new_pid, new_epoch) == (pid, epoch + 2)
        leader = cluster.broker(cluster.leader("out", 0))
        log = leader.partition_log(tps[0])
        assert log.last_stable_offset == log.log_end_offset   # its transaction aborted


def test_a_coordinator_load_that_failed_is_tried_again(tmp_path, monkeypatch):
    """A new coordinator whose load of its partition fails (a disk error) answers
    COORDINATOR_LOAD_IN_PROGRESS meanwhile and loads again, instead of serving that
    partition's ids from an older leader's memory, or never again."""
    with in_process_cluster(tmp_path) as cluster:
        pid, epoch, tps = open_transaction(cluster, "tx-f", [b"open"])
        old = cluster.coordinator_for("tx-f", TRANSACTION)
        failures = []
        take_over = TransactionCoordinator.take_over
        own = cluster.coordinator_partition("tx-f", TRANSACTION).partition

        def failing_once(self, partition, coordinator_epoch):
            if partition == own and not failures:
                failures.append(partition)
                raise KafkaStorageError("injected: the disk failed")
            return take_over(self, partition, coordinator_epoch)
        monkeypatch.setattr(TransactionCoordinator, "take_over", failing_once)
        cluster.kill(old)
        wait_until(lambda: failures, "the first load to fail")
        new_pid, new_epoch = until_served(
            lambda: coordinator_of(cluster, "tx-f").init_producer_id("tx-f", 60_000))
        assert (new_pid, new_epoch) == (pid, epoch + 2)   # it knew the open transaction


def test_the_transaction_admin_apis_answer_from_each_ids_coordinator_and_each_replica(cluster):
    # KIP-664 on a cluster, as kafka-transactions.sh asks: ListTransactions lists an id on
    # its coordinator only (TransactionStateManager.listTransactionStates walks the
    # partitions it leads), DescribeTransactions is routed there, and DescribeProducers is
    # answered by any replica of the partition, NOT_LEADER_OR_FOLLOWER elsewhere
    # (Partition.activeProducerState, ReplicaManager.getPartitionOrError).
    kafka = pytest.importorskip("kafka")
    cluster.create_topic("out", 3, 2)
    producer = producer_in_a_transaction(cluster.bootstrap_servers, "admin-tx", "out", b"x", 30)
    admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        listed = admin.list_transactions()
        coordinator = cluster.coordinator_for("admin-tx", TRANSACTION)
        assert {broker: [t.transactional_id for t in txns] for broker, txns in listed.items()} \
            == {b: (["admin-tx"] if b == coordinator else []) for b in cluster.broker_ids}
        described = admin.describe_transactions(["admin-tx"])["admin-tx"]
        assert (described.coordinator_id, described.state.value) == (coordinator, "Ongoing")
        state = cluster.partition_state("out", 0)
        tp = kafka.TopicPartition("out", 0)
        for broker in cluster.broker_ids:
            if broker in state.replicas:
                (entry,) = admin.describe_producers([tp], broker_id=broker)[tp].active_producers
                assert entry.current_transaction_start_offset == 0
            else:
                with pytest.raises(kafka.errors.NotLeaderForPartitionError):
                    admin.describe_producers([tp], broker_id=broker)
        producer.commit_transaction(30)
    finally:
        admin.close()


@pytest.mark.parametrize("down", ["stop", "kill"])
def test_a_restarted_replica_keeps_the_lso_below_a_marker_the_high_watermark_lacks(tmp_path,
                                                                                  down):
    """A transaction is stable only once the high watermark passes its marker (Kafka's
    ProducerStateManager.firstUnstableOffset counts its unreplicatedTxns). A replica that
    restarts with the marker in its log above its high watermark must keep that rule: here
    it is elected while the only other in-sync replica still lacks the marker, and had it
    taken the transaction for stable, read_committed readers would get its records, and
    the next leader (without the marker) would show it open again, the LSO gone back."""
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=60_000,
                 config={"min.insync.replicas": 2}) as cluster:
        cluster.create_topic("t", 1, 3)
        tp = TopicPartition("t", 0)
        leader, restarted, lagging = cluster.partition_state("t", 0).replicas
        pid = cluster.replica_manager(leader).allocate_producer_ids()[0]
        send_transactional(cluster, tp, b"t0", pid, 0, 0)
        send_transactional(cluster, tp, b"t1", pid, 0, 1)
        cluster.wait_in_sync("t")
        cluster.isolate(lagging)   # stays in the ISR (60 s), copying nothing more
        cluster.broker(leader).write_txn_markers_here([(tp, pid, 0, 0, True)])
        wait_until(lambda: cluster.partition_state("t", 0).replica_states[restarted]
                   .log_end_offset == 3, "the marker to reach one follower")
        assert cluster.broker(leader).partition_log(tp).high_watermark == 2
        if down == "kill":
            cluster.broker(restarted).partition_log(tp).flush()   # the marker survives
        getattr(cluster, down)(restarted)
        cluster.restart(restarted)
        wait_until(lambda: restarted in cluster.partition_state("t", 0).isr and
                   cluster.partition_state("t", 0).replica_states[restarted]
                   .high_watermark == 2, "the restarted follower to rejoin the ISR")
        cluster.stop(leader)
        wait_until(lambda: cluster.leader("t", 0) == restarted, "the restarted one to lead")
        new = cluster.broker(restarted)
        assert new.partition_log(tp).high_watermark == 2   # the marker at 2 is not passed
        assert new.partition_log(tp).last_stable_offset == 0
        assert new.list_offsets({tp: -1}, read_committed=True)[tp] == (0, -1)
        assert not new.fetch({tp: 0}, read_committed=True)[tp].batches
        cluster.kill(restarted)
        cluster.heal(lagging)
        wait_until(lambda: cluster.leader("t", 0) == lagging, "the lagging one to lead")
        assert cluster.broker(lagging).partition_log(tp).last_stable_offset == 0   # open


def test_a_coordinator_that_loses_its_partition_alive_unloads_it_and_is_fenced(tmp_path):
    """A preferred-leader election moves the id's __transaction_state partition away from
    a live coordinator: it answers NOT_COORDINATOR and forgets the partition's ids (Kafka's
    TransactionStateManager.removeTransactionsForTxnTopicPartition); the new leader loads
    them at a higher coordinator epoch, so a marker the old one still sends is refused
    (TRANSACTION_COORDINATOR_FENCED) once the new one has written there."""
    with in_process_cluster(tmp_path) as cluster:
        tx_tp, old = led_by_another_than_preferred(cluster, "tx-e", TRANSACTION)
        pid, epoch, tps = open_transaction(cluster, "tx-e", [b"e0", b"e1", b"e2"])
        resigned = coordinator_of(cluster, "tx-e")
        assert cluster.coordinator_for("tx-e", TRANSACTION) == old
        old_coordinator_epoch = resigned._log.coordinator_epoch("tx-e")
        new = cluster.elect_preferred_leader(tx_tp.topic, tx_tp.partition).leader
        assert cluster.coordinator_for("tx-e", TRANSACTION) == new != old
        with pytest.raises(NotCoordinatorError):
            resigned.end_txn("tx-e", pid, epoch, True)
        wait_until(lambda: "tx-e" not in resigned._log.transactions,
                   "the old coordinator to unload the partition")
        until_served(lambda: coordinator_of(cluster, "tx-e").end_txn("tx-e", pid, epoch, True))
        assert coordinator_of(cluster, "tx-e")._log.coordinator_epoch("tx-e") > \
            old_coordinator_epoch
        leader = cluster.broker(cluster.leader("out", 0))
        with pytest.raises(TransactionCoordinatorFencedError):
            leader.write_txn_markers_here([(tps[0], pid, epoch, old_coordinator_epoch, False)])
        assert sorted(committed_values(cluster.bootstrap_servers, "out", 3)) == \
            [b"e0", b"e1", b"e2"]


def test_a_state_record_needs_transaction_state_log_min_isr_replicas(tmp_path):
    # Kafka makes __transaction_state with min.insync.replicas = transaction.state.log.min.isr
    # (default 2) and unclean elections off (TransactionStateManager.transactionTopicConfigs),
    # and appends its records with acks=-1 (TransactionLog.EnforcedRequiredAcks); a
    # NOT_ENOUGH_REPLICAS is answered COORDINATOR_NOT_AVAILABLE (TransactionStateManager
    # .appendTransactionToLog). A coordinator left alone in the ISR takes no transition: one
    # it took could die with it, a commit's markers half written.
    from kio.schema.errors import ErrorCode
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.static.primitive import i16, i32Timedelta, i64

    from support.wire import call
    with Cluster(3, path=str(tmp_path / "c"), replica_lag_time_max_ms=300) as cluster:
        tp = cluster.coordinator_partition("lonely-tx", TRANSACTION)
        config = cluster.broker(0).topic(TRANSACTION_STATE_TOPIC).config
        assert (config.min_insync_replicas, config.unclean_leader_election_enable) == (2, False)
        cluster.wait_in_sync(tp.topic, [tp.partition])
        coordinator = cluster.leader(tp.topic, tp.partition)

        def init_producer_id():
            slot = cluster._slots[coordinator]
            with socket.create_connection((cluster.host, slot.port)) as sock:
                return call(sock, InitProducerIdRequest(
                    transactional_id="lonely-tx",
                    transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
                    producer_id=i64(-1), producer_epoch=i16(-1))).error_code
        followers = [b for b in cluster.broker_ids if b != coordinator]
        for broker_id in followers:
            cluster.kill(broker_id)   # each leaves the ISR at once (the controller)
        assert cluster.partition_state(tp.topic, tp.partition).isr == (coordinator,)
        end = cluster.broker(coordinator).partition_log(tp).log_end_offset
        assert init_producer_id() == ErrorCode.coordinator_not_available
        assert cluster.broker(coordinator).partition_log(tp).log_end_offset == end
        for broker_id in followers:
            cluster.restart(broker_id)
        cluster.wait_in_sync(tp.topic, [tp.partition])
        assert init_producer_id() == ErrorCode.none


def test_the_transaction_state_log_min_isr_is_a_broker_setting(tmp_path):
    with Cluster(3, path=str(tmp_path / "c"),
                 config={"transaction.state.log.min.isr": 3}) as cluster:
        cluster.coordinator_partition("any-tx", TRANSACTION)
        config = cluster.broker(1).topic(TRANSACTION_STATE_TOPIC).config
        assert config.min_insync_replicas == 3


def test_slowing_a_brokers_fetches_leaves_its_verifications_and_markers_alone(cluster):
    # Cluster.slow delays a broker's replica fetches (docs/CLUSTER.md), a slow replication
    # link; a produce's transaction verification (the leader asks the coordinator, Kafka's
    # AddPartitionsToTxnManager) and a coordinator's markers (WriteTxnMarkers) are other
    # requests between those brokers, which no fetch delay holds back.
    cluster.create_topic("out", 3, 1)
    coordinator = cluster.coordinator_for("slow-tx", TRANSACTION)
    partition = next(p for p in range(3) if cluster.leader("out", p) != coordinator)
    leader = cluster.leader("out", partition)
    done = []

    def transaction_across_the_slowed_brokers():
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                             "transactional.id": "slow-tx"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("out", value=b"v", partition=partition)
        producer.commit_transaction(30)
        done.append(True)

    for broker_id in (coordinator, leader):
        cluster.slow(broker_id, 10 ** 9)   # no fetch of theirs ends while the test runs
    thread = threading.Thread(target=transaction_across_the_slowed_brokers, daemon=True)
    thread.start()
    thread.join(GENEROUS_S)
    finished_while_slowed = list(done)
    for broker_id in (coordinator, leader):
        cluster.slow(broker_id, 0)
    thread.join(GENEROUS_S)
    assert finished_while_slowed == [True]
