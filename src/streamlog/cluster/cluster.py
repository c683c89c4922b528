"""N brokers in one process: each its own database directory, broker id and Kafka
listener, one controller, replica fetchers between them, and the faults a test asks for.

Layout of a cluster directory::

    <path>/controller/__cluster_metadata-0/   the controller's metadata log (controller.py)
    <path>/broker-<id>/                       each broker's database (a streamlog database,
                                              with replication-offset-checkpoint and, per
                                              replicated partition, leader-epoch-checkpoint)

Faults (what a test can do):
  - stop(id): a clean shutdown (logs flushed, checkpoints written);
  - kill(id): no clean shutdown, and the tail of every replicated log that was never
    fsynced is lost, as a power cut loses the page cache (the broker's threads stop, its
    listener closes, its files are closed unflushed);
  - restart(id): the same directory, id and port: clients reconnect to the address they
    know; it recovers, truncates as a follower and catches up;
  - isolate(id) / heal(id): cut / restore the replication links between the broker and
    every other (the controller stays reachable, as a KRaft controller quorum elsewhere
    would be); isolate(id, clients=True) also stops its listener;
  - slow(id, delay_ms): the broker's fetches from its leaders each wait delay_ms first
    (a waiting one goes on once the delay is lowered or cleared, or the cluster closes).

partition_state(topic, partition) reads the controller's decision and each live replica's
log end offset and high watermark, for tests to wait on and assert.
"""
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from typing import NamedTuple

from ..broker.broker import Broker
from ..broker.metadata import normalized_overrides
from ..coordinator import GROUP_COORDINATOR, TRANSACTION_COORDINATOR
from ..coordinator.group_coordinator import find_coordinator
from ..coordinator.offsets import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIG, cached_partition_for
from ..coordinator.transaction_coordinator import find_transaction_coordinator
from ..coordinator.transaction_log import TRANSACTION_STATE_TOPIC, transaction_state_config
from ..broker.replica_manager import DEFAULT_REPLICA_LAG_TIME_MAX_MS, NO_LEADER, ReplicaManager
from ..errors import (CoordinatorNotAvailableError, InvalidRequestError, LeaderNotAvailableError,
                      NotCoordinatorError, NotLeaderOrFollowerError, RequestTimedOutError,
                      StreamlogError, TopicAlreadyExistsError, UnknownTopicOrPartitionError)
from ..storage.partition_log import wall_clock_ms
from ..storage.record_batch import build_batch
from ..structs import TopicPartition
from .controller import Controller, assign_replicas
from .replica_fetcher import REPLICA_FETCH_WAIT_MAX_MS, LinkDown, ReplicaFetcher

log = logging.getLogger("streamlog.cluster")

# How long a transaction marker waits for its replicas (Kafka's request.timeout.ms).
MARKER_TIMEOUT_S = 30.0
# How long a marker waits for its partition to have a leader again (a coordinator's lock is
# held meanwhile; the transaction stays Prepare* past it, and the timeout check retries).
MARKER_LEADER_WAIT_S = 5.0


class ReplicaInfo(NamedTuple):
    broker_id: int
    alive: bool
    log_end_offset: int     # -1 when the broker is down
    high_watermark: int


class PartitionStatus(NamedTuple):
    """cluster.partition_state(): the controller's view and each replica's offsets."""

    leader: int
    leader_epoch: int
    replicas: tuple
    isr: tuple
    offline_replicas: tuple
    replica_states: dict    # broker id -> ReplicaInfo

    @property
    def high_watermark(self):
        info = self.replica_states.get(self.leader)
        return -1 if info is None else info.high_watermark


class _Slot:
    """One broker of the cluster, up or down."""

    def __init__(self, broker_id, root):
        self.broker_id = broker_id
        self.root = root
        self.port = 0
        self.broker = None
        self.server = None
        self.manager = None


class ClusterView:
    """What one broker's request handlers ask of the cluster (server/handlers.py): who
    the brokers are, where a partition's leader is, which broker coordinates a group,
    and topic creation and leader elections through the controller."""

    def __init__(self, cluster, node_id):
        self._cluster = cluster
        self.node_id = node_id

    @property
    def controller_id(self):
        return min(self._cluster.controller.alive, default=self.node_id)

    def brokers(self):
        """[(broker id, host, port)] of the brokers clients can reach now."""
        return self._cluster.reachable_brokers()

    def broker_ids(self):
        """Every broker of the cluster, down ones too (each stays registered, as a Kafka
        broker does until it is unregistered)."""
        return list(self._cluster.broker_ids)

    def partition_state(self, tp):
        return self._cluster.controller.partitions.get(tp)

    def coordinator_for(self, key, key_type=GROUP_COORDINATOR):
        return self._cluster.coordinator_for(key, key_type)

    def coordinator_partition(self, key, key_type=GROUP_COORDINATOR):
        """The partition of the internal topic that holds key (the topic made on the first
        ask, through the controller)."""
        return self._cluster.coordinator_partition(key, key_type)

    def check_coordinating(self, key, key_type=GROUP_COORDINATOR):
        """For a coordinator's request about key: NotCoordinatorError when another broker
        coordinates it (the client asks FindCoordinator again), CoordinatorLoadInProgressError
        while this one is still loading the key's partition after its election (what it
        holds in memory is from before: Kafka answers COORDINATOR_LOAD_IN_PROGRESS)."""
        tp = self._cluster.coordinator_partition(key, key_type)
        if self._cluster.partition_coordinator(tp, key) != self.node_id:
            raise NotCoordinatorError(f"broker {self.node_id} does not coordinate {key!r}")
        manager = self._cluster.replica_manager(self.node_id)
        if manager is None:
            raise NotCoordinatorError(f"broker {self.node_id} is down")
        manager.check_loaded(tp)

    def transaction_coordinator(self, transactional_id):
        """The transaction coordinator of transactional_id as this broker reaches it (a
        produce's verification asks it, as Kafka's AddPartitionsToTxnManager does): LinkDown
        when cut off from it, CoordinatorLoadInProgressError while it is still loading."""
        tp = self._cluster.coordinator_partition(transactional_id, TRANSACTION_COORDINATOR)
        broker_id = self._cluster.partition_coordinator(tp, transactional_id)
        manager = self._cluster.link(self.node_id, broker_id) if broker_id != self.node_id \
            else self._cluster.replica_manager(broker_id)
        broker = None if manager is None else self._cluster.broker(broker_id)
        if broker is None:
            raise CoordinatorNotAvailableError(f"broker {broker_id} is down")
        manager.check_loaded(tp)
        return find_transaction_coordinator(broker)

    def write_txn_markers(self, markers):
        return self._cluster.write_txn_markers(self.node_id, markers)

    def create_topic(self, name, partitions, replication_factor, config, assignment=None,
                     made_with=()):
        return self._cluster.create_topic(name, partitions, replication_factor, config,
                                          assignment, made_with)

    def placement(self, partitions, replication_factor):
        """{partition: (broker ids)} a new topic would be given (CreateTopics with
        validate_only), checked as create_topic checks it; nothing is created."""
        return assign_replicas(partitions, self._cluster.replication_factor(replication_factor),
                               self._cluster.controller.broker_ids)

    def delete_topic(self, name):
        return self._cluster.delete_topic(name)

    def alter_topic_config(self, name, overrides, remove=()):
        return self._cluster.alter_topic_config(name, overrides, remove)

    def create_partitions(self, name, total, assignment=None):
        return self._cluster.create_partitions(name, total, assignment)

    def elect_leader(self, tp, unclean):
        """ElectLeaders of one partition: a preferred election, or an unclean one."""
        elect = self._cluster.elect_unclean_leader if unclean \
            else self._cluster.elect_preferred_leader
        return elect(tp.topic, tp.partition)


class Cluster:
    def __init__(self, brokers=3, path=None, config=None, host="127.0.0.1", port=0,
                 replica_lag_time_max_ms=DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 replica_fetch_wait_max_ms=REPLICA_FETCH_WAIT_MAX_MS, cluster_id=None):
        """brokers: how many (ids 0..n-1); path: the cluster's directory (None: a temporary
        one, removed at close); config: each broker's database config (topic defaults
        such as min.insync.replicas included); port: broker i listens on port + i (0: any
        free port each, kept across its restarts)."""
        if brokers < 1:
            raise InvalidRequestError(f"a cluster needs at least one broker, not {brokers}")
        self.temporary = path is None
        self.path = tempfile.mkdtemp(prefix="streamlog-cluster-") if path is None \
            else os.path.abspath(path)
        self.host = host
        self.config = dict(config or {})
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.replica_fetch_wait_max_ms = min(replica_fetch_wait_max_ms,
                                             max(replica_lag_time_max_ms // 3, 1))
        self.cluster_id = cluster_id or "streamlog-cluster"
        self._lock = threading.RLock()
        self._cut = set()             # frozenset({a, b}) of cut replication links
        self._slow = {}               # follower id -> seconds each of its fetches waits
        # Notified when a delay changes, a fetcher stops or the cluster closes: a slowed
        # fetch waits on it, so neither a heal nor a close waits the old delay out.
        self._slow_changed = threading.Condition(self._lock)
        self._fetchers = {}
        self._closed = False
        self.controller = Controller(os.path.join(self.path, "controller"), range(brokers),
                                     Broker.config_from(self.config).topic_defaults)
        self._slots = {i: _Slot(i, os.path.join(self.path, f"broker-{i}"))
                       for i in range(brokers)}
        for i, slot in self._slots.items():
            slot.port = port + i if port else 0
        try:
            for broker_id in self._slots:
                self._start(broker_id)
        except BaseException:
            self.close()
            raise

    # --- brokers up and down ---------------------------------------------------------

    def _start(self, broker_id):
        from ..server import KafkaServer   # kio is imported only by what serves
        slot = self._slots[broker_id]
        broker = Broker(slot.root, config=self.config)
        try:
            self._sync_topics(broker)
            manager = ReplicaManager(broker, broker_id, self.controller,
                                     self.replica_lag_time_max_ms)
            manager.view = ClusterView(self, broker_id)
            broker.replicas = manager
            # The coordinators exist from the start: an election may hand this broker
            # partitions of their internal topics to load at any moment.
            groups = find_coordinator(broker)
            transactions = find_transaction_coordinator(broker)

            def take_over(tp, leader_epoch):
                if tp.topic == OFFSETS_TOPIC:
                    groups.take_over(tp.partition)
                elif tp.topic == TRANSACTION_STATE_TOPIC:
                    # The leader epoch is the coordinator epoch of the markers it writes.
                    transactions.take_over(tp.partition, leader_epoch)
            manager.leadership_listeners.append(take_over)

            def resign(tp):
                if tp.topic == OFFSETS_TOPIC:
                    groups.resign(tp.partition)
                elif tp.topic == TRANSACTION_STATE_TOPIC:
                    transactions.resign(tp.partition)
            manager.resignation_listeners.append(resign)
            server = KafkaServer(broker, self.host, slot.port, cluster_id=self.cluster_id)
        except BaseException:
            broker.close()
            raise
        slot.broker, slot.manager, slot.server = broker, manager, server
        slot.port = server.port
        self.controller.broker_up(broker_id, manager)
        with self._lock:
            for other in self._slots:
                if other != broker_id:
                    self._start_fetcher(broker_id, other)
                    self._start_fetcher(other, broker_id)

    def _sync_topics(self, broker):
        """Make a (re)starting broker's topics the controller's: what it missed while it was
        down is created, grown or deleted. A local topic the controller does not know, or
        knows under another id, is deleted only where the controller's log proves it deleted
        that topic id; otherwise (the controller's log lost or cut short) its directories are
        set aside, every file kept: Kafka's LogManager moves such stray logs aside
        (LogManager.isStrayKraftReplica, asyncDelete(isStray = true)), never deletes them."""
        topics = self.controller.topics
        for name, info in sorted(broker.topics().items()):
            wanted = topics.get(name)
            if (wanted is None and not info.internal) or \
                    (wanted is not None and wanted["id"] != info.topic_id):
                broker.delete_topic(name, keep_files=info.topic_id
                                    not in self.controller.deleted_topic_ids)
        for name, topic in sorted(topics.items()):
            self._create_local(broker, name, topic)

    @classmethod
    def _create_local(cls, broker, name, topic):
        """The controller's topic record made real on one broker: created, or grown, with
        the record's config."""
        info = broker.topics().get(name)
        if info is None:
            broker.create_topic(name, topic["partitions"], topic["config"],
                                internal=topic.get("internal", False), topic_id=topic["id"])
            return
        if info.partitions < topic["partitions"]:
            broker.create_partitions(name, topic["partitions"])
        cls._apply_config(broker, name, normalized_overrides(topic["config"]))

    @staticmethod
    def _apply_config(broker, name, overrides):
        """Make `overrides` a broker's whole set for the topic. A broker that cannot take
        them (its disk, or its compacted logs when it was down as compaction was taken off)
        keeps its own, logged: the controller's record stays the topic's config."""
        current = broker.topic(name).overrides
        if current == overrides:
            return
        try:
            broker.alter_topic_config(name, overrides,
                                      [key for key in current if key not in overrides])
        except Exception:
            log.exception("broker %s could not take the config %s of topic %r", broker.root,
                          overrides, name)

    def _start_fetcher(self, follower_id, leader_id):
        key = (follower_id, leader_id)
        old = self._fetchers.get(key)
        if old is None or old.stopped:
            self._fetchers[key] = ReplicaFetcher(self, follower_id, leader_id,
                                                 self.replica_fetch_wait_max_ms)

    def _stop_fetchers(self, broker_id):
        """Tell the broker's fetchers to stop; returns them, for the caller to wake
        (_wake_waiting_fetches, once the controller let the broker go) and join once the
        broker is out of the cluster (a fetcher in a long poll must not delay a kill)."""
        with self._lock:
            stopping = [f for (a, _), f in self._fetchers.items() if a == broker_id]
            for fetcher in stopping:
                fetcher.stop()
            for key in [k for k in self._fetchers if k[0] == broker_id]:
                del self._fetchers[key]
            self._slow_changed.notify_all()
        return stopping

    def _wake_waiting_fetches(self):
        """Every broker's waits end now: the idle fetchers' waits for a change of state,
        and the fetches of brokers the controller let go, waiting at their leaders (their
        asker is no longer registered), which answer. Joining a stopped fetcher then takes
        no replica.fetch.wait.max.ms."""
        for slot in self._slots.values():
            if slot.manager is not None:
                slot.manager.wake_fetchers()

    def stop(self, broker_id):
        """A clean shutdown of one broker."""
        self._down(broker_id, clean=True)

    def kill(self, broker_id):
        """A crash of one broker that also loses what it never fsynced (see module doc)."""
        self._down(broker_id, clean=False)

    def _down(self, broker_id, clean):
        slot = self._slot(broker_id)
        if slot.broker is None:
            return
        fetchers = self._stop_fetchers(broker_id)
        # The controller first: the moment clients see the listener go, every other broker
        # already names the new leaders (a client's first metadata refresh finds them).
        self.controller.broker_down(broker_id)
        self._wake_waiting_fetches()
        slot.server.close()
        for fetcher in fetchers:
            fetcher.join(5)
        broker, slot.broker, slot.server, slot.manager = slot.broker, None, None, None
        if clean:
            broker.close()
            return
        for tp in list(broker.partitions):
            if broker.replicas.manages(tp):
                partition_log = broker.partitions[tp]
                with contextlib.suppress(StreamlogError):
                    partition_log.truncate_to(partition_log.recovery_point)
        broker.crash()

    def restart(self, broker_id):
        """Start a stopped or killed broker again: same directory, id and port."""
        slot = self._slot(broker_id)
        if slot.broker is not None:
            return
        self._start(broker_id)

    def _slot(self, broker_id):
        slot = self._slots.get(broker_id)
        if slot is None:
            raise InvalidRequestError(f"no broker {broker_id}; the cluster has "
                                      f"{sorted(self._slots)}")
        return slot

    def alive(self, broker_id):
        return self._slot(broker_id).broker is not None

    # --- network faults -------------------------------------------------------------

    def isolate(self, broker_id, clients=False):
        """Cut the broker's replication links to every other broker (and, with clients,
        its listener)."""
        slot = self._slot(broker_id)
        with self._lock:
            for other in self._slots:
                if other != broker_id:
                    self._cut.add(frozenset((broker_id, other)))
        if clients and slot.server is not None:
            slot.server.stop_listening()
            slot.server.drop_connections()

    def heal(self, broker_id=None):
        """Restore the links isolate() cut (of one broker, or all) and its listener."""
        with self._lock:
            self._cut = {c for c in self._cut if broker_id is not None and broker_id not in c}
        for slot in self._slots.values():
            if (broker_id is None or slot.broker_id == broker_id) and slot.server is not None \
                    and not slot.server.listening:
                slot.server.start_listening()

    def slow(self, broker_id, delay_ms):
        """Delay each of the broker's fetches from its leaders by delay_ms (0: no delay)."""
        self._slot(broker_id)
        with self._lock:
            if delay_ms > 0:
                self._slow[broker_id] = delay_ms / 1000
            else:
                self._slow.pop(broker_id, None)
            self._slow_changed.notify_all()

    def fetch_link(self, follower_id, leader_id, fetcher):
        """link() for a replica fetch: first waits the follower's slow() delay. fetcher:
        the ReplicaFetcher asking, whose stop ends that wait."""
        self._wait_slowed(follower_id, fetcher)
        return self.link(follower_id, leader_id)

    def link(self, from_id, to_id):
        """The replica manager of broker to_id as broker from_id reaches it; LinkDown if it
        cannot (isolate(), or to_id down)."""
        if frozenset((from_id, to_id)) in self._cut:
            raise LinkDown(f"broker {from_id} cannot reach broker {to_id}")
        manager = self.replica_manager(to_id)
        if manager is None:
            raise LinkDown(f"broker {to_id} is down")
        return manager

    def _wait_slowed(self, follower_id, fetcher):
        """A slowed broker's call waits its delay, measured from now against the delay as
        it stands: less once slow() lowers or clears it, none once the fetcher asking is
        stopped or the cluster closes."""
        start = time.monotonic()
        with self._lock:
            while not self._closed and not (fetcher is not None and fetcher.stopped):
                remaining = start + self._slow.get(follower_id, 0) - time.monotonic()
                if remaining <= 0:
                    return
                self._slow_changed.wait(remaining)

    # --- what brokers and tests ask -----------------------------------------------------

    def replica_manager(self, broker_id):
        slot = self._slots.get(broker_id)
        return None if slot is None else slot.manager

    def broker(self, broker_id):
        """The live Broker of broker_id (None when it is down)."""
        return self._slot(broker_id).broker

    @property
    def broker_ids(self):
        return tuple(self._slots)

    @property
    def bootstrap_servers(self):
        """Every broker's listener, comma-separated (the ports stay across restarts)."""
        return ",".join(f"{self.host}:{s.port}" for s in self._slots.values() if s.port)

    def reachable_brokers(self):
        """The live brokers' addresses (one isolated from clients is still listed, as a
        registered Kafka broker is: clients find out by failing to connect)."""
        return [(s.broker_id, self.host, s.port) for s in self._slots.values()
                if s.server is not None]

    def coordinator_for(self, key, key_type=GROUP_COORDINATOR):
        """The broker that coordinates a group (key_type 0) or a transactional id (1): the
        leader of the key's partition of the internal topic, which is made (replicated
        min(3, brokers) times, as Kafka's offsets.topic.replication.factor) on the first
        ask, as Kafka makes it; CoordinatorNotAvailableError while that partition has no
        leader."""
        return self.partition_coordinator(self.coordinator_partition(key, key_type), key)

    def partition_coordinator(self, tp, key):
        """The leader of tp, the partition of the internal topic that holds key."""
        state = self.controller.partitions.get(tp)
        if state is None:
            # The topic is recorded before its partitions' first states, which reach the
            # brokers first (Controller._add_partitions): another request is creating it.
            raise CoordinatorNotAvailableError(f"{tp.topic} is being created")
        leader = state.leader
        if leader == NO_LEADER:
            raise CoordinatorNotAvailableError(f"the partition of {tp.topic} that holds {key!r} "
                                               "has no leader now")
        return leader

    def coordinator_partition(self, key, key_type=GROUP_COORDINATOR):
        """The partition of the internal topic that holds key (made on the first ask)."""
        broker_config = self._broker_config()
        if key_type == GROUP_COORDINATOR:
            topic, config = OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIG
            partitions = broker_config.offsets_topic_num_partitions
        elif key_type == TRANSACTION_COORDINATOR:
            topic, config = TRANSACTION_STATE_TOPIC, transaction_state_config(broker_config)
            partitions = broker_config.transaction_state_log_num_partitions
        else:
            raise InvalidRequestError(f"coordinator key type {key_type} is not served")
        self._ensure_internal_topic(topic, partitions, config)
        count = self.controller.topics[topic]["partitions"]
        return TopicPartition(topic, cached_partition_for(key, count))

    def _broker_config(self):
        return Broker.config_from(self.config)

    def _ensure_internal_topic(self, name, partitions, config):
        if name in self.controller.topics:
            return
        with contextlib.suppress(TopicAlreadyExistsError):
            self.controller.create_topic(name, partitions, self.replication_factor(None),
                                         config, self._on_live_broker(self._create_local),
                                         internal=True)

    def create_topic(self, name, partitions=1, replication_factor=None, config=None,
                     assignment=None, made_with=()):
        """A topic replicated replication_factor times (default: min(3, brokers)), created
        through the controller on every live broker. Returns {partition: PartitionState}.
        assignment ({partition: (broker ids)}, the first one leading; a wire client's
        manual replica assignment, checked by the server) places the replicas instead.
        made_with: the names made by the same CreateTopics request (check_name_free)."""
        states = self.controller.create_topic(name, partitions,
                                              self.replication_factor(replication_factor), config,
                                              self._on_live_broker(self._create_local),
                                              assignment=assignment, made_with=made_with)
        return {tp.partition: state for tp, state in states.items()}

    def replication_factor(self, asked):
        """The replication factor of a new topic: `asked`, or (None, -1) the default,
        min(3, brokers)."""
        return min(3, len(self._slots)) if asked in (None, -1) else asked

    def alter_topic_config(self, name, overrides, remove=()):
        """Set a topic's config overrides (remove: configs taken back to their defaults) on
        every broker, through the controller (one down now takes them when it restarts).
        Returns the topic's overrides."""
        return self.controller.alter_topic_config(
            name, overrides, remove,
            check_local=self._on_live_broker(
                lambda broker, *change: broker.check_config_change(*change)),
            alter_local=self._on_live_broker(self._apply_config))

    def delete_topic(self, name):
        """Delete a topic on every broker (one down now deletes it when it restarts)."""
        self.controller.delete_topic(name, self._on_live_broker(
            lambda broker, topic_name: broker.delete_topic(topic_name)))

    def create_partitions(self, name, total, assignment=None):
        """Grow a topic to `total` partitions, replicated as its first ones are (on the
        brokers `assignment` names, as create_topic's)."""
        states = self.controller.create_partitions(name, total,
                                                   self._on_live_broker(self._create_local),
                                                   assignment)
        return {tp.partition: state for tp, state in states.items()}

    def elect_preferred_leader(self, topic, partition):
        """Hand the partition's leadership back to its first replica (Kafka's preferred
        leader election), which must be alive and in sync; the leader it replaces goes on
        as a follower. Returns the new PartitionState."""
        return self.controller.elect_preferred_leader(TopicPartition(topic, partition))

    def elect_unclean_leader(self, topic, partition):
        """Give a partition that has no leader one, its first live replica if none in sync
        is alive (Kafka's unclean election, asked for: it may lose acknowledged records).
        ElectionNotNeededError when it has a leader, EligibleLeadersNotAvailableError
        when no replica is alive. Returns the new PartitionState."""
        return self.controller.elect_unclean_leader(TopicPartition(topic, partition))

    def _on_live_broker(self, action):
        """action(broker, ...) as a controller callback taking a broker id."""
        def call(broker_id, *args):
            broker = self._slots[broker_id].broker
            if broker is not None:
                action(broker, *args)
        return call

    def partition_state(self, topic, partition):
        tp = TopicPartition(topic, partition)
        state = self.controller.partitions.get(tp)
        if state is None:
            raise InvalidRequestError(f"{tp} is not a partition of this cluster")
        replicas = {}
        for broker_id in state.replicas:
            broker = self._slots[broker_id].broker
            partition_log = None if broker is None else broker.partitions.get(tp)
            if partition_log is None:
                replicas[broker_id] = ReplicaInfo(broker_id, False, -1, -1)
            else:
                replicas[broker_id] = ReplicaInfo(broker_id, True,
                                                  partition_log.log_end_offset,
                                                  partition_log.high_watermark)
        offline = tuple(r for r in state.replicas if not replicas[r].alive)
        return PartitionStatus(state.leader, state.leader_epoch, state.replicas, state.isr,
                               offline, replicas)

    def write_txn_markers(self, from_broker, markers):
        """A transaction coordinator's markers, each written by its partition's leader and
        replicated before the next (Kafka's WriteTxnMarkers with acks=all); a group's
        pending transactional offsets apply on the broker that leads their partition.

        A partition whose leader is moving is retried until it has one (for up to
        MARKER_LEADER_WAIT_S), as Kafka's marker channel retries NOT_LEADER_OR_FOLLOWER: a
        new coordinator finishing a dead one's transaction meets the dead broker's
        partitions mid-election. A coordinator the cluster let go writes nothing more (its
        request may still be running when it is killed)."""
        out = {}
        for marker in markers:
            deadline = time.monotonic() + MARKER_LEADER_WAIT_S
            while True:
                if from_broker not in self.controller.alive:
                    raise NotCoordinatorError(f"broker {from_broker} left the cluster; it "
                                              "coordinates no transaction")
                try:
                    out[marker[0]] = self._write_marker(from_broker, marker)
                    break
                except (LeaderNotAvailableError, NotLeaderOrFollowerError):
                    if time.monotonic() >= deadline or self._closed:
                        raise
                    time.sleep(0.01)
        return out

    def _write_marker(self, from_broker, marker):
        tp, producer_id, commit = marker[0], marker[1], marker[4]
        state = self.controller.partitions.get(tp)
        if state is None:
            raise UnknownTopicOrPartitionError(f"{tp} does not exist", tp.topic)
        if state.leader == NO_LEADER:
            raise LeaderNotAvailableError(f"{tp} has no leader now")
        if state.leader != from_broker:
            self.link(from_broker, state.leader)   # LinkDown when cut off from it
        broker = self._slots[state.leader].broker
        if broker is None:
            raise NotLeaderOrFollowerError(f"the leader of {tp} is down")
        info = broker.write_txn_markers_here([marker])[tp]
        broker.replicas.wait_replicated(tp, info.last_offset + 1, MARKER_TIMEOUT_S)
        if tp.topic == OFFSETS_TOPIC:
            find_coordinator(broker).complete_transaction(tp, producer_id, commit)
        return info

    def produce(self, topic, partition, values, acks="all", timeout=10.0, key=None):
        """Append values (bytes each) as one batch on the partition's leader, in process;
        returns the first offset. acks="all" waits until the in-sync replicas have it
        (NotEnoughReplicasError / NotEnoughReplicasAfterAppendError as Kafka answers;
        RequestTimedOutError after timeout); acks=1 returns after the leader's append.
        Errors of a leaderless or moving partition are raised (NotLeaderOrFollowerError,
        LeaderNotAvailableError), not retried: the caller decides."""
        tp = TopicPartition(topic, partition)
        state = self.controller.partitions.get(tp)
        if state is None:
            raise InvalidRequestError(f"{tp} is not a partition of this cluster")
        if state.leader == NO_LEADER:
            raise LeaderNotAvailableError(f"{tp} has no leader now")
        broker = self._slots[state.leader].broker
        if broker is None:
            raise NotLeaderOrFollowerError(f"the leader of {tp} is down")
        all_acks = acks in ("all", -1)
        batch = build_batch(list(values), keys=None if key is None else [key] * len(values),
                            timestamp=wall_clock_ms())
        info = broker.produce(tp, batch, acks=-1 if all_acks else 1)
        if all_acks:
            done, result = threading.Event(), []
            broker.replicas.when_replicated(tp, info.last_offset + 1,
                                            lambda error: (result.append(error), done.set()))
            if not done.wait(timeout):
                raise RequestTimedOutError(f"offsets {info.first_offset}..{info.last_offset}"
                                           f" of {tp} not replicated in {timeout} s")
            if result[0] is not None:
                raise result[0]
        return info.first_offset

    def replica_records(self, topic, partition, broker_id):
        """[(offset, value)] of one replica's whole log, up to its log end (not only the
        high watermark): what that broker holds, to compare replicas."""
        broker = self._slot(broker_id).broker
        if broker is None:
            raise InvalidRequestError(f"broker {broker_id} is down")
        partition_log = broker.partition_log(TopicPartition(topic, partition))
        out, offset = [], partition_log.log_start_offset
        while offset < partition_log.log_end_offset:
            fetched = partition_log.read(offset, 1 << 20, below_high_watermark=False)
            if not fetched.batches:
                break
            for batch in fetched.batches:
                if not batch.is_control:
                    out += [(o, v) for o, _, _, v, _ in batch.records() if o >= offset]
                offset = batch.next_offset
        return out

    def leader(self, topic, partition):
        """The leader's broker id, or -1."""
        return self.partition_state(topic, partition).leader

    def wait_for(self, predicate, timeout=30, interval=0.01, message=None):
        """Poll predicate() until it is true; StreamlogError with message after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise StreamlogError(message or f"cluster state not reached in {timeout} s")
            time.sleep(interval)

    def wait_in_sync(self, topic, partitions=None, timeout=30, offsets=True):
        """Wait until every partition of topic has a leader and its whole replica set in
        the ISR, and (offsets=True) every replica's LEO equal to the leader's high
        watermark: nothing left to copy. offsets=False only waits for the full ISRs (with
        producers writing, the logs are seldom all equal at one instant)."""
        count = self.controller.topics[topic]["partitions"]

        def synced():
            for p in (range(count) if partitions is None else partitions):
                st = self.partition_state(topic, p)
                if st.leader == NO_LEADER or set(st.isr) != set(st.replicas) or (offsets and any(
                        r.log_end_offset != st.high_watermark
                        for r in st.replica_states.values())):
                    return False
            return True
        return self.wait_for(synced, timeout, message=f"{topic} not in sync in {timeout} s")

    # --- lifecycle -----------------------------------------------------------------------

    def close(self):
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._slow_changed.notify_all()
            fetchers = list(self._fetchers.values())
            for fetcher in fetchers:
                fetcher.stop()
        for broker_id, slot in self._slots.items():
            if slot.broker is not None:
                self.controller.broker_down(broker_id)
        self._wake_waiting_fetches()
        for fetcher in fetchers:
            fetcher.join(5)
        for slot in self._slots.values():
            if slot.server is not None:
                slot.server.close()
        for slot in self._slots.values():
            if slot.broker is not None:
                slot.broker.close()
                slot.broker = slot.server = slot.manager = None
        self.controller.close()
        if self.temporary:
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

