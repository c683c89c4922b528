"""The cluster's controller: replica assignment, leaders, leader epochs, in-sync replica
sets and producer id blocks, in one metadata log (KRaft's role, in one process).

Every change is a record in `<cluster>/controller/__cluster_metadata-0` (keyed_log.py:
the last value of a key wins), written and fsynced before it is applied and pushed to the
live brokers' replica managers (broker/replica_manager.py), in the order it was made. A
controller opened on an existing directory replays the log: the cluster restarts where it
stopped.

Kafka's rules kept here (metadata/.../controller/ReplicationControlManager.java,
PartitionChangeBuilder.java):
  - Assignment without racks (Kafka's rack-unaware placer, with a fixed start and shift
    instead of random ones, so a test's layout is reproducible): partition p's first
    replica is broker (p mod n); the others follow it shifted, the shift growing every n
    partitions.
  - Election: the first replica in assignment order that is alive and in the ISR; else,
    only with unclean.leader.election.enable, the first alive replica, which becomes the
    whole ISR (it may lack acknowledged records: an unclean election loses data); else
    no leader (-1). Every leader change bumps the leader epoch. A preferred-leader
    election (asked for: elect_preferred_leader) hands leadership back to the first
    replica when it is alive and in the ISR, its live leader becoming a follower. An
    unclean election asked for (elect_unclean_leader) gives a leaderless partition its
    first live replica whatever unclean.leader.election.enable says.
  - A broker that dies leaves every ISR, except where it is the last member (Kafka
    without eligible leader replicas keeps it: the partition then waits for it).
  - Each start of a broker gets a new broker epoch (KRaft's registration: BrokerRegistration
    epoch, KIP-903), larger than any before in this process; replica managers tell a
    restarted follower's fetches from its earlier incarnation's by it. Kept in memory: a
    cluster that reopens starts every broker, and every leader's view of its followers,
    afresh.
  - AlterPartition carries every ISR change a leader has pending (AlterPartitionManager
    sends them in one request); the accepted ones are written in one batch. A change is
    applied only when it names the current leader epoch and partition epoch, keeps the
    leader in the ISR, and lists only live replicas, each at its current broker epoch
    where the leader names one (KIP-903's INELIGIBLE_REPLICA: a follower that restarted
    after the leader saw it fetch may lack what it had); each applied change bumps the
    partition epoch.
"""
import logging
import os
import threading
import uuid

import msgpack

from ..broker.lock import DirectoryLock
from ..broker.metadata import check_name_free, normalized_overrides, overrides_after
from ..broker.replica_manager import NO_LEADER, PartitionState
from ..errors import (DatabaseLockedError, ElectionNotNeededError,
                      EligibleLeadersNotAvailableError, InvalidPartitionsError,
                      InvalidReplicationFactorError, InvalidRequestError,
                      PreferredLeaderNotAvailableError,
                      UnknownTopicOrPartitionError)
from ..storage.keyed_log import encode_changes, replay
from ..storage.log_config import LogConfig
from ..storage.partition_log import PartitionLog, wall_clock_ms
from ..structs import TopicPartition

log = logging.getLogger("streamlog.cluster")

PRODUCER_ID_BLOCK_SIZE = 1000
_METADATA_DIR = "__cluster_metadata-0"
_PRODUCER_IDS_KEY = b"producer_ids"


def assign_replicas(partitions, replication_factor, broker_ids, first_partition=0):
    """{partition: (broker ids)} by Kafka's rack-unaware placement (see the module doc)."""
    n = len(broker_ids)
    if not 1 <= replication_factor <= n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is not in 1..{n}: the cluster has {n} "
            "brokers")
    out = {}
    for p in range(first_partition, first_partition + partitions):
        first = p % n
        shift = p // n
        replicas = [broker_ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(broker_ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = tuple(replicas)
    return out


class Controller:
    def __init__(self, directory, broker_ids, topic_defaults=None):
        """topic_defaults: the cluster-wide topic configs (LogConfig) under each topic's
        overrides, the brokers' own."""
        self.broker_ids = tuple(broker_ids)
        self.topic_defaults = topic_defaults or LogConfig()
        self.partitions = {}     # TopicPartition -> PartitionState
        # name -> {"partitions": n, "replication_factor": r, "config": {overrides}, "id",
        # "internal"}
        self.topics = {}
        # The ids of the topics a tombstone in the log deleted: the proof a restarting broker
        # needs before it deletes a topic of its own that the controller does not have.
        self.deleted_topic_ids = set()
        self.alive = set()
        self.broker_epochs = {}  # broker id -> the broker epoch of its current incarnation
        self._next_broker_epoch = 0
        self._managers = {}      # broker id -> ReplicaManager of the live broker
        self._next_producer_id = 0
        self._lock = threading.RLock()
        self._producer_ids_lock = threading.Lock()
        os.makedirs(directory, exist_ok=True)
        # Before the log is opened: its open recovers it (cuts a tail it finds torn, rebuilds
        # and trims its indexes), which must never happen under a live controller of the
        # same cluster in another process.
        self._dir_lock = DirectoryLock(directory)
        try:
            self._dir_lock.acquire()
        except DatabaseLockedError as exc:
            who = f"process {exc.holder}" if exc.holder else "another process"
            raise DatabaseLockedError(
                f"the cluster in {os.path.dirname(directory)} is open in {who}; one process "
                "at a time: close it there first", exc.path, exc.holder) from None
        self._log = None
        try:
            self._log = PartitionLog(os.path.join(directory, _METADATA_DIR), LogConfig())
            replay(self._log, 0, self._replay_record)
        except BaseException:
            if self._log is not None:
                self._log.close(flush=False)
            self._dir_lock.release()
            raise

    # --- the metadata log ---------------------------------------------------------

    def _replay_record(self, key, value, _timestamp_ms):
        kind, _, name = key.partition(b":")
        data = None if value is None else msgpack.unpackb(value)
        if key == _PRODUCER_IDS_KEY:
            self._next_producer_id = data
        elif kind == b"topic":
            if data is None:
                deleted = self.topics.pop(name.decode(), None)
                if deleted is not None:
                    self.deleted_topic_ids.add(deleted["id"])
            else:
                self.topics[name.decode()] = data
        elif kind == b"partition":
            topic, _, partition = name.decode().rpartition(":")
            tp = TopicPartition(topic, int(partition))
            if data is None:
                self.partitions.pop(tp, None)
            else:
                self.partitions[tp] = PartitionState(data[0], data[1], tuple(data[2]),
                                                     tuple(data[3]), data[4])

    def _write(self, changes, before_visible=None):
        """Append [(key, value or None)] as one batch, fsync it, then apply it here.
        before_visible(): runs between the fsync and the apply (see _change)."""
        encoded = [(k, None if v is None else msgpack.packb(v)) for k, v in changes]
        self._log.append(encode_changes(encoded, wall_clock_ms()))
        self._log.flush()
        if before_visible is not None:
            before_visible()
        for key, value in encoded:
            self._replay_record(key, value, 0)

    @staticmethod
    def _partition_change(tp, state):
        return (f"partition:{tp.topic}:{tp.partition}".encode(),
                None if state is None else [state.leader, state.leader_epoch,
                                            list(state.replicas), list(state.isr),
                                            state.partition_epoch])

    def _change(self, states):
        """Record {tp: PartitionState}, push each to the live brokers, and only then make
        it what Metadata answers: a client never learns of a leader before that broker
        leads (a request it sent there would meet a follower, and an idempotent
        producer's pipeline could straddle the change: OUT_OF_ORDER_SEQUENCE for the
        requests behind the refused ones)."""
        def push():
            for tp, state in states.items():
                self._push(tp, state)
        self._write([self._partition_change(tp, st) for tp, st in states.items()], push)

    def _push(self, tp, state):
        managers = [(broker_id, self._managers.get(broker_id)) for broker_id in
                    sorted(self.alive)]
        for broker_id, manager in managers:
            if manager is not None:
                self._apply(broker_id, manager, tp, state)
        # The followers' fetches waiting at their leaders end if a follower now has more to
        # fetch (ReplicaFetcher: a new topic's first acks=all write need not wait them out).
        for _, manager in managers:
            if manager is not None:
                manager.wake_fetchers()

    @staticmethod
    def _apply(broker_id, manager, tp, state):
        """One broker takes a state; its failure (a full disk, a log it could not open) is
        that broker's, logged, and never stops the others from taking it."""
        try:
            manager.apply(tp, state)
        except Exception:
            log.exception("broker %d could not take the state of %s: %s", broker_id, tp, state)

    # --- brokers ------------------------------------------------------------------

    def broker_up(self, broker_id, manager):
        """A broker (re)started: it gets the state of every partition it holds; leaderless
        partitions it can lead get a leader."""
        with self._lock:
            manager.broker_epoch = self._next_broker_epoch
            self._next_broker_epoch += 1
            self.broker_epochs[broker_id] = manager.broker_epoch
            self.alive.add(broker_id)
            self._managers[broker_id] = manager
            for tp, state in sorted(self.partitions.items()):
                if broker_id in state.replicas:
                    self._apply(broker_id, manager, tp, state)
            elected = {}
            for tp, state in sorted(self.partitions.items()):
                if state.leader == NO_LEADER and broker_id in state.replicas:
                    new = self._elect(tp, state)
                    if new.leader != NO_LEADER:
                        elected[tp] = new
            if elected:
                self._change(elected)

    def broker_down(self, broker_id):
        """A broker stopped or died: it leaves the ISRs; partitions it led elect again."""
        with self._lock:
            self.alive.discard(broker_id)
            self.broker_epochs.pop(broker_id, None)
            manager = self._managers.pop(broker_id, None)
            if manager is not None:
                manager.fence()   # it leads nothing from now on, whatever it last heard
            changed = {}
            for tp, state in sorted(self.partitions.items()):
                if broker_id not in state.isr and state.leader != broker_id:
                    continue
                isr = tuple(r for r in state.isr if r != broker_id) or state.isr
                new = state._replace(isr=isr, partition_epoch=state.partition_epoch + 1)
                if state.leader == broker_id:
                    new = self._elect(tp, new)
                if new != state:
                    changed[tp] = new
            if changed:
                self._change(changed)

    def _elect(self, tp, state, unclean=None):
        """state with a new leader (see the module doc), its epoch bumped; or leaderless.
        unclean: whether a replica out of the ISR may lead (None: as the topic's
        unclean.leader.election.enable says)."""
        if unclean is None:
            unclean = self._config(tp.topic).unclean_leader_election_enable
        leader, isr = NO_LEADER, state.isr
        for replica in state.replicas:
            if replica in self.alive and replica in state.isr:
                leader = replica
                break
        else:
            if unclean:
                for replica in state.replicas:
                    if replica in self.alive:
                        leader, isr = replica, (replica,)
                        log.warning("unclean election: broker %d leads %s; records only "
                                    "the old ISR %s had are lost", replica, tp, list(state.isr))
                        break
        if leader == state.leader:
            return state
        return state._replace(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                              partition_epoch=state.partition_epoch + 1)

    def elect_preferred_leader(self, tp):
        """Make tp's first replica its leader again (Kafka's ElectLeaders, PREFERRED:
        ReplicationControlManager.electLeader), with a new leader epoch; the leader it
        replaces stays alive as a follower. ElectionNotNeededError when it leads already,
        PreferredLeaderNotAvailableError when it is down or out of the ISR."""
        with self._lock:
            state = self._state(tp)
            preferred = state.replicas[0]
            if state.leader == preferred:
                raise ElectionNotNeededError(f"broker {preferred} leads {tp} already")
            if preferred not in self.alive or preferred not in state.isr:
                raise PreferredLeaderNotAvailableError(
                    f"broker {preferred}, the preferred leader of {tp}, is "
                    f"{'not in the ISR' if preferred in self.alive else 'down'}")
            new = state._replace(leader=preferred, leader_epoch=state.leader_epoch + 1,
                                 partition_epoch=state.partition_epoch + 1)
            self._change({tp: new})
            return new

    def elect_unclean_leader(self, tp):
        """Give a leaderless tp a leader, out of the ISR if need be (Kafka's ElectLeaders,
        UNCLEAN: ReplicationControlManager.electLeader, PartitionChangeBuilder
        .electAnyLeader): the first live in-sync replica, else the first live replica,
        whatever the topic's unclean.leader.election.enable (asking for it is the
        permission). ElectionNotNeededError when tp has a leader,
        EligibleLeadersNotAvailableError when no replica is alive."""
        with self._lock:
            state = self._state(tp)
            if state.leader != NO_LEADER:
                raise ElectionNotNeededError(f"broker {state.leader} leads {tp}")
            new = self._elect(tp, state, unclean=True)
            if new.leader == NO_LEADER:
                raise EligibleLeadersNotAvailableError(f"no replica of {tp} is alive")
            self._change({tp: new})
            return new

    def _state(self, tp):
        """tp's PartitionState; UnknownTopicOrPartitionError when it has none."""
        state = self.partitions.get(tp)
        if state is None:
            raise UnknownTopicOrPartitionError(f"{tp} does not exist", tp.topic)
        return state

    def _config(self, topic):
        return self.topic_defaults.with_overrides(self.topics.get(topic, {}).get("config", {}),
                                                  check=False)

    # --- requests from brokers ------------------------------------------------------

    def alter_partitions(self, broker_id, changes):
        """A leader's ISR changes, all it has pending, in one request (Kafka's AlterPartition,
        which AlterPartitionManager fills with every item waiting to be sent): changes =
        [(tp, leader_epoch, partition_epoch, isr, broker_epochs)], broker_epochs naming each
        member's broker epoch as the leader knows it (-1: unknown). Each change is judged
        alone; the accepted ones are written in one fsynced batch and pushed together.
        Returns {tp: the new PartitionState, or None when refused}."""
        with self._lock:
            answers = {tp: self._isr_change(broker_id, tp, leader_epoch, partition_epoch, isr,
                                            broker_epochs)
                       for tp, leader_epoch, partition_epoch, isr, broker_epochs in changes}
            accepted = {tp: new for tp, new in answers.items() if new is not None}
            if accepted:
                self._change(accepted)
            return answers

    def _isr_change(self, broker_id, tp, leader_epoch, partition_epoch, isr, broker_epochs):
        """tp's state with the ISR a leader asks for, or None when refused (see the module
        doc)."""
        state = self.partitions.get(tp)
        if state is None or state.leader != broker_id or \
                state.leader_epoch != leader_epoch or \
                state.partition_epoch != partition_epoch or broker_id not in isr or \
                any(r not in state.replicas for r in isr):
            return None
        ineligible = self._ineligible_replicas(isr, broker_epochs)
        if ineligible:
            log.info("refused the ISR %s of %s from broker %d: %s", list(isr), tp,
                     broker_id, "; ".join(ineligible))
            return None
        return state._replace(isr=tuple(isr), partition_epoch=partition_epoch + 1)

    def _ineligible_replicas(self, isr, broker_epochs):
        """Why members of a proposed ISR may not be in it (ReplicationControlManager.
        ineligibleReplicasForIsr, Kafka's INELIGIBLE_REPLICA): a broker not in the cluster
        now, or one named with a broker epoch other than its current one (it restarted
        since the leader saw it fetch; -1 skips the check)."""
        reasons = []
        for replica_id in isr:
            current = self.broker_epochs.get(replica_id)
            named = broker_epochs.get(replica_id, -1)
            if replica_id not in self.alive or current is None:
                reasons.append(f"broker {replica_id} is not in the cluster")
            elif named != -1 and named != current:
                reasons.append(f"broker {replica_id} is named at broker epoch {named}, "
                               f"its current one is {current}")
        return reasons

    def allocate_producer_ids(self, broker_id):
        """A block of producer ids no broker of the cluster was given before. Under a lock
        of its own: a transaction coordinator asks while holding its lock, and a push of
        this controller (under its main lock) may wait for that lock (a takeover)."""
        with self._producer_ids_lock:
            first = self._next_producer_id
            self._write([(_PRODUCER_IDS_KEY, first + PRODUCER_ID_BLOCK_SIZE)])
            return range(first, first + PRODUCER_ID_BLOCK_SIZE)

    # --- topics ---------------------------------------------------------------------

    def create_topic(self, name, partitions, replication_factor, config=None, create_local=None,
                     internal=False, assignment=None, made_with=()):
        """Assign and record a topic's partitions; create_local(broker id) makes its logs
        on each live broker (create_local(broker id, name, topic record)), before the states
        reach them. assignment: {partition: (broker ids)} chosen by the caller (checked),
        in place of the placement. made_with: the names made by the same CreateTopics
        request (check_name_free). Returns {tp: PartitionState}."""
        with self._lock:
            # The brokers' registries would refuse a name colliding with a topic's too, but
            # only once the first of them is asked to make it.
            check_name_free(name, self.topics, made_with)
            if partitions < 1:
                raise InvalidRequestError(f"a topic needs at least one partition, not "
                                          f"{partitions}")
            config = normalized_overrides(config or {})
            self.topic_defaults.with_overrides(config)   # refused before anything is written
            if assignment is None:
                assignment = assign_replicas(partitions, replication_factor, self.broker_ids)
            topic = {"partitions": partitions, "replication_factor": replication_factor,
                     "config": config, "id": uuid.uuid4().hex, "internal": internal}
            return self._add_partitions(name, topic, assignment, create_local)

    def _add_partitions(self, name, topic, assignment, create_local):
        """Make the partitions of `assignment` on the live brokers, record the topic and
        their first states (leader: the first live replica; epoch 0), push them."""
        for broker_id in sorted(self.alive):
            if create_local is not None:
                create_local(broker_id, name, topic)
        states = {}
        for p, replicas in assignment.items():
            isr = tuple(r for r in replicas if r in self.alive)
            states[TopicPartition(name, p)] = PartitionState(
                isr[0] if isr else NO_LEADER, 0, replicas, isr or replicas, 0)
        self._write([(f"topic:{name}".encode(), topic)])
        self._change(states)
        return states

    def alter_topic_config(self, name, overrides, remove=(), check_local=None,
                           alter_local=None):
        """Change a topic's config overrides as Kafka's ConfigurationControlManager does: one
        record of this log, whatever broker was asked, which every broker then applies and
        elections read (an override that stayed on the asked broker alone would let this
        controller elect by a config no longer the topic's). check_local(broker id, name,
        overrides, remove) lets each live broker refuse first (what its logs allow); then
        the record is written and alter_local(broker id, name, new overrides) applies it on
        each live broker; a broker down now takes it when it returns. Returns the new
        overrides."""
        with self._lock:
            topic = self.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist", name)
            merged = overrides_after(normalized_overrides(topic["config"]), overrides, remove)
            self.topic_defaults.with_overrides(merged)   # refused before anything is written
            live = sorted(self.alive)
            for broker_id in live:
                if check_local is not None:
                    check_local(broker_id, name, overrides, remove)
            self._write([(f"topic:{name}".encode(), dict(topic, config=merged))])
            for broker_id in live:
                if alter_local is not None:
                    alter_local(broker_id, name, merged)
            return merged

    def delete_topic(self, name, delete_local=None):
        """Delete a topic: delete_local(broker id, name) on each live broker first, then
        the topic's records are tombstoned (a broker down now deletes it when it returns)."""
        with self._lock:
            topic = self.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist", name)
            for broker_id in sorted(self.alive):
                if delete_local is not None:
                    delete_local(broker_id, name)
            self._write([(f"topic:{name}".encode(), None)] + [
                self._partition_change(TopicPartition(name, p), None)
                for p in range(topic["partitions"])])

    def create_partitions(self, name, total, create_local=None, assignment=None):
        """Grow a topic to `total` partitions, the new ones assigned as create_topic's are
        (or as `assignment` says, checked by the caller); create_local(broker id, name,
        topic record) makes them on each live broker."""
        with self._lock:
            topic = self.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist", name)
            current = topic["partitions"]
            if total <= current:
                raise InvalidPartitionsError(f"topic {name!r} has {current} partitions; a "
                                             "count only grows")
            if assignment is None:
                assignment = assign_replicas(total - current, topic["replication_factor"],
                                             self.broker_ids, first_partition=current)
            return self._add_partitions(name, dict(topic, partitions=total), assignment,
                                        create_local)

    def close(self):
        with self._lock:
            try:
                self._log.close()
            finally:
                self._dir_lock.release()
