"""The group coordinator: Kafka's classic group protocol, in process.

Requests mirror Kafka's -- join_group, sync_group, heartbeat, leave_group,
offset_commit, offset_fetch, describe_group, list_groups, delete_group,
delete_offsets --
and so do their answers and errors. What changes is the transport: members
are threads of this process, so

- a join or sync that must wait for other members returns a Pending answer
  at once instead of parking a network request; the member's client keeps
  working (a cooperative member keeps fetching) and is told through its
  notify(event) callback when the answer is ready, and when the group starts
  a rebalance, so it rejoins at once instead of at its next heartbeat;
- a new member in process gets its member id in the first join answer.
  Kafka's MEMBER_ID_REQUIRED round trip (KIP-394: the id is handed out, and
  the member counts only once it joins with it) is for members over the
  wire, whose answers can be lost: join_group(require_known_member_id=True).

Timeouts run on the broker's timing wheel: each member's session (pushed
forward by heartbeats, checked lazily when its task fires, so a heartbeat
costs no timer work), each rebalance's timeout (the largest
rebalance_timeout_ms of the members, Kafka's DelayedJoin), the initial
rebalance delay of a new group, and the periodic expiry of committed
offsets (offsets.retention.minutes).

Locking: one lock for every group. Notifications and other calls out of the
coordinator run after the lock is released (see _locked), so a member's
callback can never deadlock against the coordinator.
"""
import logging
import threading
import time
import uuid
from contextlib import contextmanager
from typing import NamedTuple

from ..errors import (FencedInstanceIdError, GroupIdNotFoundError, GroupMaxSizeReachedError,
                      IllegalGenerationError,
                      GroupSubscribedToTopicError, StreamlogError,
                      NotCoordinatorError,
                      InconsistentGroupProtocolError, InvalidGroupIdError, InvalidRequestError,
                      InvalidSessionTimeoutError, LogClosedError, MemberIdRequiredError,
                      NonEmptyGroupError, NoSuchGroupGenerationError,
                      OffsetMetadataTooLargeError, ReadOnlyError,
                      RebalanceInProgressError, TimerClosedError, UnknownMemberIdError,
                      UnknownTopicOrPartitionError)
from ..storage.producer_state import UNVERIFIED
from ..structs import OffsetAndMetadata, TopicPartition
from .group import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, Group,
                    Member)
from .offsets import OFFSETS_TOPIC, OffsetStore

log = logging.getLogger("streamlog.coordinator")

SERVICE = "group-coordinator"
OFFSET_METADATA_MAX_BYTES = 4096   # Kafka's offset.metadata.max.bytes

# Events passed to a member's notify(); the member's client reacts on its own thread.
REBALANCE = "rebalance"   # the group is rebalancing: join again
JOINED = "joined"         # the pending join answer is ready
SYNCED = "synced"         # the pending sync answer is ready
REMOVED = "removed"       # the member was removed (session expired, or rebalance timeout)
FENCED = "fenced"         # another member took this one's group_instance_id


def find_coordinator(broker):
    """The coordinator of the broker's groups (made on first use; closed with the broker)."""
    return broker.attach_service(SERVICE, GroupCoordinator)


def delete_topic(broker, name):
    """broker.delete_topic(name), the group coordinator loaded first when any group has
    offsets (it is otherwise made on first use), so that it hears of the deletion and
    deletes the groups' offsets of the topic (on_topic_deleted)."""
    if OFFSETS_TOPIC in broker.topics():
        find_coordinator(broker)
    return broker.delete_topic(name)


def _monotonic_ms():
    return time.monotonic() * 1000.0


class Pending:
    """An answer that arrives later: a value or an exception."""

    __slots__ = ("_event", "_value", "_error")

    def __init__(self):
        self._event = threading.Event()
        self._value = self._error = None

    def set(self, value):
        self._value = value
        self._event.set()

    def fail(self, error):
        self._error = error
        self._event.set()

    def done(self):
        return self._event.is_set()

    def wait(self, timeout=None):
        return self._event.wait(timeout)

    def result(self):
        """The answer (raising the error), which must have arrived (see done())."""
        assert self._event.is_set(), "result() before the answer arrived"
        if self._error is not None:
            raise self._error
        return self._value


class JoinResponse(NamedTuple):
    member_id: str
    generation: int
    protocol: str
    leader: str
    members: list            # [(member_id, group_instance_id, metadata)]: only for the leader
    skip_assignment: bool = False   # a static member came back: keep the current assignment


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: object
    client_id: str
    assignment: list
    metadata: object = None  # its metadata for the group's protocol (None while it has none)


class GroupDescription(NamedTuple):
    group_id: str
    state: str
    protocol_type: object
    protocol: object
    generation: int
    leader: object
    members: list            # [MemberDescription]
    offsets: dict            # {TopicPartition: CommittedOffset}


class GroupListing(NamedTuple):
    group_id: str
    state: str
    protocol_type: object


class GroupCoordinator:
    def __init__(self, broker):
        self._broker = broker
        self._config = broker.config
        self._timer = broker.timer
        self._lock = threading.RLock()
        self._after = []
        self._closed = False
        self._groups = {}
        self._store = OffsetStore(broker)
        self._load()
        self._expiry_task = None
        if not broker.readonly:
            self._schedule_expiry()

    # --- plumbing ------------------------------------------------------------------

    @contextmanager
    def _locked(self):
        """Hold the lock; run what _defer() queued after releasing it."""
        with self._lock:
            outer = self._after
            self._after = []
            try:
                yield
            finally:
                after, self._after = self._after, outer
        for fn, args in after:
            try:
                fn(*args)
            except Exception:
                log.exception("a group member's callback failed")

    def _defer(self, fn, *args):
        self._after.append((fn, args))

    def _check_open(self):
        if self._closed:
            raise LogClosedError(f"the database {self._broker.root} is closed")

    def _check_writable(self):
        self._check_open()
        if self._broker.readonly:
            raise ReadOnlyError("consumer groups need the database open for writing (members "
                                "and commits are written to it); read-only handles can "
                                "describe groups and read committed offsets")

    def _schedule(self, delay_ms, callback):
        try:
            return self._timer.add(max(int(delay_ms), 0), callback)
        except TimerClosedError:
            return None  # closing: the task's work no longer matters

    def take_over(self, partition):
        """This broker now leads `partition` of __consumer_offsets (a cluster's election):
        its groups are loaded again from what the replica holds -- committed offsets, and
        each group Empty at its last generation, its members to join again -- as Kafka's
        GroupMetadataManager loads a partition it becomes the leader of."""
        with self._locked():
            self._check_open()
            for group_id in self._store.reload_partition(partition):
                self._groups.pop(group_id, None)
                group = self._loaded_group(group_id, self._broker.clock_ms())
                if group is not None:
                    self._groups[group_id] = group

    def resign(self, partition):
        """This broker no longer leads `partition` of __consumer_offsets but stays up (a
        cluster's preferred-leader election): its groups are unloaded, as Kafka's
        GroupMetadataManager.removeGroupsForPartition (onGroupUnloaded): each goes Dead,
        its timers stop, and a member waiting on a join or sync is answered
        NOT_COORDINATOR at once, to find the new coordinator."""
        with self._locked():
            moved = NotCoordinatorError(f"this broker no longer coordinates the groups of "
                                        f"partition {partition} of __consumer_offsets")
            for group in [g for g in self._groups.values()
                          if self._store.partition_of(g.group_id).partition == partition]:
                self._unload(group, moved)

    def _unload(self, group, error):
        self._stop_group(group, error)
        for task in group.pending_members.values():
            self._cancel(task)
        group.transition(DEAD)
        del self._groups[group.group_id]

    def _stop_group(self, group, error):
        """Stop the group's timers and answer every waiting member with error."""
        self._cancel(group.rebalance_task)
        self._stop_sync_expiry(group)
        for member in group.members.values():
            self._stop_session(member)
            for waiter in (member.join_waiter, member.sync_waiter):
                if waiter is not None:
                    waiter.fail(error)
            member.join_waiter = member.sync_waiter = None

    def _load(self):
        """Groups known to the offsets log start Empty: their members died with the writer."""
        now = self._broker.clock_ms()
        groups = {}
        for group_id in self._store.known_groups():
            groups[group_id] = self._loaded_group(group_id, now)
        self._groups = groups

    def _loaded_group(self, group_id, now):
        """The Group a (re)load makes of group_id's records; None when it has none."""
        if group_id not in self._store.known_groups():
            return None
        record = self._store.groups.get(group_id)
        if record is None:
            return Group(group_id, empty_since=now)
        group = Group(group_id, record.generation, record.protocol_type,
                      empty_since=record.state_timestamp)
        if record.member_count and not self._broker.readonly:
            # The members were alive when the writer stopped; they are gone now.
            group.empty_since = now
            try:
                self._write_group_record(group, now)
            except NotCoordinatorError:
                pass   # a cluster's broker that does not lead the partition: its leader will
        elif record.member_count:
            # A reader sees the writer's group as last recorded: the members of its
            # current generation (their ids, client ids and assignments; what they
            # subscribed with is the writer's to know).
            group.state = STABLE
            group.protocol, group.leader = record.protocol, record.leader
            for member_id, instance, client_id, assignment in record.members:
                member = Member(member_id, instance, client_id, 0, 0, [], None)
                member.assignment = assignment
                group.add(member)
        return group

    def _write_group_record(self, group, now_ms):
        self._store.write_group(group.group_id, (
            group.protocol_type, group.generation, group.protocol, group.leader, now_ms,
            len(group.members), [(m.member_id, m.group_instance_id, m.client_id, m.assignment)
                                 for m in group.members.values()]), now_ms)

    def _refresh_readonly(self):
        if self._broker.readonly:
            with self._lock:
                self._store.refresh()
                self._load()

    # --- join ---------------------------------------------------------------------

    def join_group(self, group_id, member_id, group_instance_id, client_id, session_timeout_ms,
                   rebalance_timeout_ms, protocol_type, protocols, notify,
                   require_known_member_id=False, skip_assignment_known=True):
        """Join (or rejoin) the group; returns a Pending JoinResponse.

        protocols: [(name, metadata)] in the member's order of preference.
        notify(event, member_id) is called (outside any coordinator lock, on
        whatever thread caused it) with REBALANCE, JOINED, SYNCED, REMOVED or
        FENCED and the member id the event is about.
        require_known_member_id: a dynamic member without a member id gets
        MemberIdRequiredError carrying a new id, and joins with it (Kafka's
        JoinGroup v4 on). An id handed out and not used within the session
        timeout is forgotten; until then a rebalance waits for it too.
        skip_assignment_known: the member reads JoinResponse.skip_assignment (Kafka's
        JoinGroup v9 on), which changes the answer to a returning static member.
        """
        self._check_writable()
        self._validate_group_id(group_id)
        lo, hi = (self._config.group_min_session_timeout_ms,
                  self._config.group_max_session_timeout_ms)
        if not lo <= session_timeout_ms <= hi:
            raise InvalidSessionTimeoutError(
                f"session_timeout_ms={session_timeout_ms} is outside the database's range "
                f"[{lo}, {hi}] (group.min.session.timeout.ms, group.max.session.timeout.ms)")
        protocols = list(protocols)
        pending = Pending()
        with self._locked():
            self._check_open()
            group = self._groups.get(group_id)
            if group is None:
                if member_id:
                    raise UnknownMemberIdError(f"group {group_id!r} has no member {member_id!r}; "
                                               "join again without a member id")
                group = self._groups[group_id] = Group(group_id)
            if not group.accepts(protocol_type, [name for name, _ in protocols]):
                raise InconsistentGroupProtocolError(
                    f"group {group_id!r} uses protocol type {group.protocol_type!r} with "
                    f"assignors {sorted(group.candidate_protocols())}; this member offers "
                    f"{protocol_type!r} with {[n for n, _ in protocols]}: give it a "
                    "partition_assignment_strategy the other members also list")
            if not self._accepts_joining(group, member_id):
                self._refuse_joining(group, member_id)
            if not member_id:
                if group_instance_id is not None and group_instance_id in group.static_members:
                    self._rejoin_static(group, group_instance_id, client_id, session_timeout_ms,
                                        rebalance_timeout_ms, protocols, notify, pending,
                                        skip_assignment_known)
                    return pending
                new_id = f"{group_instance_id or client_id or 'consumer'}-{uuid.uuid4()}"
                if require_known_member_id and group_instance_id is None:
                    group.pending_members[new_id] = self._schedule(
                        session_timeout_ms, lambda: self._forget_pending(group_id, new_id))
                    raise MemberIdRequiredError(
                        f"join group {group_id!r} again with member id {new_id!r}", new_id)
                self._add_member(group, Member(
                    new_id, group_instance_id, client_id, session_timeout_ms,
                    rebalance_timeout_ms, protocols, notify), protocol_type, pending)
            elif member_id in group.pending_members:
                self._cancel(group.pending_members.pop(member_id))
                self._add_member(group, Member(
                    member_id, group_instance_id, client_id, session_timeout_ms,
                    rebalance_timeout_ms, protocols, notify), protocol_type, pending)
            else:
                member = self._member(group, member_id, group_instance_id)
                # Kafka's ClassicGroup.updateMember: a rejoin brings its timeouts too.
                member.session_timeout_ms = session_timeout_ms
                member.rebalance_timeout_ms = rebalance_timeout_ms
                self._stop_session(member)
                self._start_session(group, member)
                self._rejoin(group, member, protocols, pending)
        return pending

    def _accepts_joining(self, group, member_id):
        """Whether group.max.size lets member_id join (Kafka's acceptJoiningMember): while
        the group rebalances, a member already waiting, or one of fewer waiting members
        than the maximum (a group over a lowered maximum sheds its last rejoiners); once
        it has a generation, a member of it, or one of fewer members than the maximum."""
        limit = self._config.group_max_size
        if group.state in (EMPTY, DEAD):
            return True
        member = group.members.get(member_id)
        if group.state == PREPARING_REBALANCE:
            waiting = sum(m.join_waiter is not None for m in group.members.values())
            return (member is not None and member.join_waiter is not None) or waiting < limit
        return member is not None or len(group.members) < limit

    def _refuse_joining(self, group, member_id):
        """GROUP_MAX_SIZE_REACHED, the refused member (or id handed out) removed first."""
        if member_id in group.pending_members:
            self._cancel(group.pending_members.pop(member_id))
        elif member_id in group.members:
            self._remove(group, group.members[member_id], None)
            self._maybe_complete_join(group)
        raise GroupMaxSizeReachedError(
            f"group {group.group_id!r} has reached group.max.size="
            f"{self._config.group_max_size} members")

    def _add_member(self, group, member, protocol_type, pending):
        group.add(member)
        group.protocol_type = protocol_type
        member.join_waiter = pending
        if group.in_initial_delay:
            group.new_member_added = True
        self._start_session(group, member)
        if group.state == PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"{member.member_id} joined")

    def _forget_pending(self, group_id, member_id):
        with self._locked():
            group = self._groups.get(group_id)
            if group is not None and group.pending_members.pop(member_id, None) is not None:
                self._maybe_complete_join(group)   # the join no longer waits for it

    def rebalance(self, group_id, reason="requested"):
        """Start a rebalance of a group with members (Kafka does so on a member's new
        metadata; tests use this to force one). Every member must join again."""
        self._check_writable()
        with self._locked():
            group = self._groups.get(group_id)
            if group is None or not group.members:
                raise GroupIdNotFoundError(f"group {group_id!r} has no members to rebalance")
            if group.state != PREPARING_REBALANCE:
                self._prepare_rebalance(group, reason)

    def _rejoin(self, group, member, protocols, pending):
        """A known member joins again (after a rebalance began, or because it wants one)."""
        changed = protocols != member.protocols
        member.protocols = protocols
        if group.state == PREPARING_REBALANCE:
            member.join_waiter = pending
            self._maybe_complete_join(group)
        elif not changed and group.state == COMPLETING_REBALANCE or (
                not changed and group.state == STABLE and member.member_id != group.leader):
            # Nothing new to assign: repeat this generation's answer (the member missed it).
            pending.set(self._join_response(group, member))
        else:
            member.join_waiter = pending
            self._prepare_rebalance(group, f"{member.member_id} rejoined with new metadata"
                                    if changed else f"leader {member.member_id} rejoined")

    def _rejoin_static(self, group, instance_id, client_id, session_timeout_ms,
                       rebalance_timeout_ms, protocols, notify, pending, skip_assignment_known):
        """A static member restarted: the new member id replaces the old one (which is fenced).

        A Stable group whose chosen protocol stays the same does not rebalance:
        the member gets its previous assignment back (KIP-345).
        """
        old = group.members[group.static_members[instance_id]]
        leader_before = group.leader
        # The client id stays the old member's (Kafka's ClassicGroup.replaceStaticMember);
        # the timeouts and protocols are the rejoin's (updateMember).
        new = Member(f"{instance_id}-{uuid.uuid4()}", instance_id, old.client_id,
                     session_timeout_ms, rebalance_timeout_ms, protocols, notify)
        for waiter in (old.join_waiter, old.sync_waiter):
            if waiter is not None:
                waiter.fail(self._fenced(group, instance_id))
        old.join_waiter = old.sync_waiter = None
        self._stop_session(old)
        self._defer(old.notify, FENCED, old.member_id)
        group.replace(old, new)
        self._start_session(group, new)
        if group.state == STABLE and group.select_protocol() == group.protocol:
            # Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: from JoinGroup v9 the
            # leader is told to skip the assignment (and gets the members); before, the
            # answer names the leader as it was, so a returning leader syncs as a follower
            # and does not assign again.
            if skip_assignment_known:
                answer = self._join_response(group, new)
                pending.set(answer._replace(skip_assignment=group.leader == new.member_id))
            else:
                pending.set(JoinResponse(new.member_id, group.generation, group.protocol,
                                         leader_before, []))
        else:
            new.join_waiter = pending
            if group.state == PREPARING_REBALANCE:
                self._maybe_complete_join(group)
            else:
                self._prepare_rebalance(group, f"static member {instance_id} rejoined")

    def _join_response(self, group, member):
        members = []
        if member.member_id == group.leader:
            members = [(m.member_id, m.group_instance_id, m.metadata(group.protocol))
                       for m in group.members.values()]
        return JoinResponse(member.member_id, group.generation, group.protocol, group.leader,
                            members)

    def _prepare_rebalance(self, group, reason):
        if group.state == COMPLETING_REBALANCE:
            # The leader's assignment for this generation will never be used.
            for member in group.members.values():
                member.assignment = ()
                if member.sync_waiter is not None:
                    member.sync_waiter.fail(RebalanceInProgressError(
                        f"group {group.group_id!r} started another rebalance; join again"))
                    member.sync_waiter = None
        was_empty = group.state == EMPTY
        group.transition(PREPARING_REBALANCE)
        group.rebalance_epoch += 1
        self._cancel(group.rebalance_task)
        self._stop_sync_expiry(group)
        log.debug("group %s rebalancing (generation %d): %s", group.group_id, group.generation,
                  reason)
        delay = self._config.group_initial_rebalance_delay_ms
        if was_empty and delay > 0:
            # Kafka's initial delayed join: give the other members of a new group a moment,
            # a delay at a time while they keep coming, the rebalance timeout in all.
            group.in_initial_delay = True
            group.new_member_added = False
            self._schedule_initial_delay(group, delay,
                                         max(group.max_rebalance_timeout_ms() - delay, 0))
        else:
            self._arm_rebalance_timeout(group)
        for member in group.members.values():
            if member.join_waiter is None:
                self._defer(member.notify, REBALANCE, member.member_id)
        self._maybe_complete_join(group)

    def _arm_rebalance_timeout(self, group):
        epoch = group.rebalance_epoch
        group.rebalance_task = self._schedule(
            group.max_rebalance_timeout_ms(),
            lambda: self._rebalance_timed_out(group.group_id, epoch))

    def _schedule_initial_delay(self, group, delay_ms, remaining_ms):
        group_id, epoch = group.group_id, group.rebalance_epoch
        group.rebalance_task = self._schedule(delay_ms, lambda: self._initial_delay_over(
            group_id, epoch, delay_ms, remaining_ms))

    def _initial_delay_over(self, group_id, epoch, delay_ms, remaining_ms):
        """Kafka's tryCompleteInitialRebalanceElseSchedule: another stretch of the delay if
        a member joined during this one and time remains, else the join completes with the
        members there are (a member id handed out and not joined with is not waited for)."""
        with self._locked():
            group = self._groups.get(group_id)
            if group is None or group.rebalance_epoch != epoch or \
                    group.state != PREPARING_REBALANCE:
                return
            if group.new_member_added and remaining_ms != 0:
                group.new_member_added = False
                self._schedule_initial_delay(
                    group, min(self._config.group_initial_rebalance_delay_ms, remaining_ms),
                    max(remaining_ms - delay_ms, 0))
                return
            self._complete_join(group)

    def _rebalance_timed_out(self, group_id, epoch):
        with self._locked():
            group = self._groups.get(group_id)
            if group is not None and group.rebalance_epoch == epoch and \
                    group.state == PREPARING_REBALANCE:
                self._complete_join(group)

    def _maybe_complete_join(self, group):
        if group.state == PREPARING_REBALANCE and not group.in_initial_delay and \
                group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group):
        """Start the next generation with the members that rejoined (Kafka's onCompleteJoin)."""
        self._cancel(group.rebalance_task)
        group.rebalance_task = None
        group.in_initial_delay = False
        for member in [m for m in group.members.values() if m.join_waiter is None]:
            if member.group_instance_id is None:
                log.info("group %s: member %s did not rejoin within the rebalance timeout; "
                         "removed", group.group_id, member.member_id)
                self._remove(group, member, REMOVED)
            # A static member stays until its session times out (KIP-345; Kafka's
            # completeClassicGroupJoin removes only the dynamic ones): a restart within
            # session.timeout.ms keeps its place.
        joined = [m for m in group.members.values() if m.join_waiter is not None]
        if group.members and not joined:
            # Only static members, none rejoined: Kafka waits another rebalance timeout,
            # while their sessions run out.
            log.info("group %s: no member rejoined; waiting for the static members",
                     group.group_id)
            self._arm_rebalance_timeout(group)
            return
        group.generation += 1
        now = self._broker.clock_ms()
        if not group.members:
            group.protocol = group.leader = None
            group.subscribed = group.subscribed_topics()
            group.transition(EMPTY)
            group.empty_since = now
            self._write_group_record(group, now)
            return
        group.protocol = group.select_protocol()
        group.subscribed = group.subscribed_topics()
        if group.leader not in [m.member_id for m in joined]:
            group.leader = joined[0].member_id   # Kafka's maybeElectNewJoinedLeader
        group.transition(COMPLETING_REBALANCE)
        for member in joined:
            member.join_waiter.set(self._join_response(group, member))
            member.join_waiter = None
            self._touch(member)
            self._defer(member.notify, JOINED, member.member_id)
        # Every member must sync within the rebalance timeout, or leave the group (Kafka's
        # schedulePendingSync): heartbeats alone do not keep one that never syncs, and a
        # leader that never hands in the assignment would hold the group for ever.
        group.pending_sync = set(group.members)
        generation = group.generation
        group.sync_task = self._schedule(
            group.max_rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(group.group_id, generation))

    def _expire_pending_sync(self, group_id, generation):
        with self._locked():
            group = self._groups.get(group_id)
            if group is None or group.generation != generation or \
                    group.state not in (COMPLETING_REBALANCE, STABLE) or not group.pending_sync:
                return
            late = sorted(group.pending_sync)
            log.info("group %s: members %s did not sync within the rebalance timeout; removed",
                     group_id, late)
            for member_id in late:
                self._remove(group, group.members[member_id], REMOVED)
            self._prepare_rebalance(group, f"{late} did not sync")

    def _synced(self, group, member_id):
        """member_id sent SyncGroup (Kafka's removePendingSyncMember)."""
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._stop_sync_expiry(group)

    def _stop_sync_expiry(self, group):
        group.pending_sync.clear()
        self._cancel(group.sync_task)
        group.sync_task = None

    # --- sync ----------------------------------------------------------------------

    def sync_group(self, group_id, member_id, generation, group_instance_id, assignments=None,
                   protocol_type=None, protocol_name=None):
        """The leader hands in {member_id: assignment}; every member gets a Pending assignment.
        protocol_type, protocol_name: what the member believes the group uses (SyncGroup v5
        on), checked as Kafka's validateSyncGroup does."""
        self._check_writable()
        pending = Pending()
        with self._locked():
            self._check_open()
            group = self._group(group_id, member_id)
            member = self._member(group, member_id, group_instance_id)
            self._check_generation(group, generation)
            for named, used in ((protocol_type, group.protocol_type),
                                (protocol_name, group.protocol)):
                if named is not None and used is not None and named != used:
                    raise InconsistentGroupProtocolError(
                        f"group {group_id!r} uses {used!r}, not {named!r}; join again")
            if group.state == PREPARING_REBALANCE:
                raise RebalanceInProgressError(f"group {group_id!r} is rebalancing; join again")
            self._touch(member)
            self._synced(group, member_id)
            if group.state == STABLE:
                pending.set(member.assignment)
            else:  # CompletingRebalance
                member.sync_waiter = pending
                if member_id == group.leader:
                    self._install_assignment(group, assignments or {})
        return pending

    def _install_assignment(self, group, assignments):
        unknown = set(assignments) - set(group.members)
        if unknown:
            log.warning("group %s: the leader assigned partitions to unknown members %s",
                        group.group_id, sorted(unknown))
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, ())
        now = self._broker.clock_ms()
        self._write_group_record(group, now)
        group.transition(STABLE)
        for member in group.members.values():
            if member.sync_waiter is not None:
                member.sync_waiter.set(member.assignment)
                member.sync_waiter = None
                self._defer(member.notify, SYNCED, member.member_id)

    # --- heartbeat and leave ---------------------------------------------------------

    def heartbeat(self, group_id, member_id, generation, group_instance_id=None):
        """Keep the member's session alive; raises RebalanceInProgressError while rebalancing."""
        self._check_writable()
        with self._locked():
            group = self._group(group_id, member_id)
            member = self._member(group, member_id, group_instance_id)
            self._check_generation(group, generation)
            self._touch(member)
            if group.state == PREPARING_REBALANCE:
                raise RebalanceInProgressError(f"group {group_id!r} is rebalancing; join again")

    def leave_group(self, group_id, member_id, group_instance_id=None):
        """A member leaves, as Kafka's classicGroupLeaveToClassicGroup
        (GroupMetadataManager.java) answers it: without a member id (an admin's
        removeMembersFromConsumerGroup) the static member holding the instance id is
        removed, and told so; a member id handed out but not joined with yet (KIP-394) is
        forgotten, and counts as a member that left; any other member is validated first."""
        self._check_writable()
        with self._locked():
            group = self._group(group_id, member_id)
            if not member_id:
                member = group.members.get(group.static_members.get(group_instance_id))
                if group_instance_id is None or member is None:
                    raise UnknownMemberIdError(
                        f"group {group_id!r} has no member with group_instance_id "
                        f"{group_instance_id!r} to remove")
                self._remove(group, member, REMOVED)
            elif member_id in group.pending_members:
                # A valid leave all the same (Kafka's classicGroupLeaveToClassicGroup): a
                # join that waited for it completes, a settled group rebalances.
                self._cancel(group.pending_members.pop(member_id))
                self._after_removal(group, f"pending member {member_id} left")
                return
            else:
                member = self._member(group, member_id, group_instance_id)
                self._remove(group, member, None)
            self._after_removal(group, f"{member.member_id} left")

    def _remove(self, group, member, event):
        for waiter in (member.join_waiter, member.sync_waiter):
            if waiter is not None:
                waiter.fail(UnknownMemberIdError(
                    f"member {member.member_id} was removed from group {group.group_id!r}"))
        member.join_waiter = member.sync_waiter = None
        self._stop_session(member)
        group.remove(member)
        if event is not None:
            self._defer(member.notify, event, member.member_id)

    def _after_removal(self, group, reason):
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join(group)

    # --- sessions -----------------------------------------------------------------------

    def _start_session(self, group, member):
        self._touch(member)
        self._arm_session(group.group_id, member, member.session_timeout_ms)

    def _arm_session(self, group_id, member, delay_ms):
        member_id = member.member_id
        member.session_task = self._schedule(
            delay_ms + 1, lambda: self._check_session(group_id, member_id))

    def _touch(self, member):
        member.session_deadline = _monotonic_ms() + member.session_timeout_ms

    def _stop_session(self, member):
        self._cancel(member.session_task)
        member.session_task = None

    def _check_session(self, group_id, member_id):
        with self._locked():
            group = self._groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            if member is None:
                return
            now = _monotonic_ms()
            if member.awaiting:
                self._touch(member)  # waiting on the group is not a failure (Kafka: keep alive)
            if member.session_deadline > now:
                self._arm_session(group_id, member, member.session_deadline - now)
                return
            log.info("group %s: member %s missed its session timeout (%d ms); removed",
                     group_id, member_id, member.session_timeout_ms)
            member.session_task = None
            self._remove(group, member, REMOVED)
            self._after_removal(group, f"{member_id}'s session expired")

    # --- offsets -------------------------------------------------------------------------

    def offset_commit(self, group_id, member_id, generation, group_instance_id, offsets):
        """Store {TopicPartition: OffsetAndMetadata} for the group, all or nothing.

        Members commit with their generation; a consumer outside group
        management (manual assign, or an admin) commits with generation -1,
        which only an Empty group accepts.
        """
        self._check_writable()
        self._validate_group_id(group_id)
        offsets = self._validate_offsets(offsets)
        with self._locked():
            self._check_committer(group_id, member_id, generation, group_instance_id)
            written = self._store.commit(group_id, offsets, self._broker.clock_ms())
        if written is not None:
            # Outside the lock: the other groups' requests go on while the replicas copy.
            replicated = False
            try:
                self._store.wait_replicated(*written)
                replicated = True
            finally:
                with self._locked():
                    self._store.settle(*written, replicated)

    def txn_offset_commit(self, group_id, producer_id, producer_epoch, member_id, generation,
                          group_instance_id, offsets, verification=UNVERIFIED):
        """Store offsets inside the producer's open transaction (Kafka's TxnOffsetCommit):
        the same member and generation checks as offset_commit, except that a producer
        without a member (generation -1, no member id: TxnOffsetCommit before version 3)
        may commit while the group has members, and a member may commit while the group
        completes a rebalance, as Kafka's validateOffsetCommit allows; the offsets stay
        pending until the transaction's marker reaches the group's partition
        (complete_transaction). verification: the guard of a wire request that had its
        transaction verified (server/txn_handlers.py)."""
        self._check_writable()
        self._validate_group_id(group_id)
        offsets = self._validate_offsets(offsets)
        with self._locked():
            self._check_committer(group_id, member_id, generation, group_instance_id,
                                  transactional=True)
            written = self._store.commit_transactional(group_id, offsets, producer_id,
                                                       producer_epoch, self._broker.clock_ms(),
                                                       verification)
        if written is not None:
            # Outside the lock, as offset_commit's wait: Kafka appends TxnOffsetCommit with
            # acks=all, and answers once it is safe.
            self._store.wait_durable(*written)

    def offsets_partition(self, group_id):
        """The partition of __consumer_offsets that holds the group's records."""
        with self._locked():
            return self._store.partition_of(group_id)

    def complete_transaction(self, tp, producer_id, commit):
        """A transaction marker was written to tp of __consumer_offsets."""
        with self._locked():
            self._store.complete_transaction(tp, producer_id, commit)

    def _check_committer(self, group_id, member_id, generation, group_instance_id,
                         transactional=False):
        """May this member (generation -1: no member) commit the group's offsets now?

        Kafka's validateOffsetCommit (ClassicGroup.java, GroupCoordinator.scala): generation
        -1 commits freely to an Empty group; otherwise a request naming a generation, a
        member id or an instance id must come from a current member of the current
        generation (so generation -1 with a member's id is ILLEGAL_GENERATION), and one
        naming none of them may commit only to an Empty group, or transactionally
        (TxnOffsetCommit before version 3 names none)."""
        self._check_open()
        group = self._groups.get(group_id)
        if group is None:
            if generation >= 0:
                raise NoSuchGroupGenerationError(
                    f"group {group_id!r} has no generation {generation}: it does not exist")
            group = self._groups[group_id] = Group(group_id,
                                                   empty_since=self._broker.clock_ms())
        if generation < 0 and group.state == EMPTY:
            return   # an admin's, or a consumer's outside group management
        if generation < 0 and not member_id and group_instance_id is None:
            if transactional:
                return   # TxnOffsetCommit before version 3 names no member
            raise UnknownMemberIdError(
                f"group {group_id!r} has active members, so only its members may commit "
                "(with their generation); stop them first")
        member = self._member(group, member_id, group_instance_id)
        self._check_generation(group, generation)
        if transactional:
            return   # Kafka checks neither the group's state nor the member's session here
        if group.state == COMPLETING_REBALANCE:
            raise RebalanceInProgressError(
                f"group {group_id!r} is completing a rebalance; poll() to finish it")
        self._touch(member)

    def offset_problems(self, offsets):
        """{TopicPartition: error} for each offset offset_commit would refuse (Kafka's
        OffsetCommit answers per partition and commits the others)."""
        problems = {}
        for tp, value in dict(offsets).items():
            try:
                self._validate_offsets({tp: value})
            except ValueError as exc:
                problems[TopicPartition(*tp)] = InvalidRequestError(str(exc))
            except (OffsetMetadataTooLargeError, UnknownTopicOrPartitionError) as exc:
                problems[TopicPartition(*tp)] = exc
        return problems

    def _validate_offsets(self, offsets):
        out = {}
        for tp, value in dict(offsets).items():
            tp = TopicPartition(*tp)
            om = OffsetAndMetadata.of(value)
            if isinstance(om.offset, bool) or not isinstance(om.offset, int) or om.offset < 0:
                raise ValueError(f"the offset to commit for {tp} must be a non-negative int, "
                                 f"got {om.offset!r}")
            if not isinstance(om.metadata, str):
                raise ValueError(f"offset metadata for {tp} must be a str, got {om.metadata!r}")
            if isinstance(om.leader_epoch, bool) or not isinstance(om.leader_epoch, int) or \
                    not -1 <= om.leader_epoch < 1 << 31:
                raise ValueError(f"the leader epoch to commit for {tp} must be an int from -1 "
                                 f"(none) to 2**31-1, got {om.leader_epoch!r}")
            # Kafka's OffsetMetadataManager.isMetadataInvalid counts metadata.length(): Java
            # chars, UTF-16 code units, whatever the name of the setting says.
            if len(om.metadata.encode("utf-16-le", "surrogatepass")) // 2 > \
                    OFFSET_METADATA_MAX_BYTES:
                raise OffsetMetadataTooLargeError(
                    f"offset metadata for {tp} is longer than {OFFSET_METADATA_MAX_BYTES} "
                    "characters (offset.metadata.max.bytes, counted in Java chars as Kafka "
                    "counts it)")
            info = self._broker.topic(tp.topic)
            if not 0 <= tp.partition < info.partitions:
                raise UnknownTopicOrPartitionError(
                    f"topic {tp.topic!r} has partitions 0..{info.partitions - 1}, not "
                    f"{tp.partition}")
            out[tp] = om
        return out

    def offset_fetch(self, group_id, partitions=None):
        """{TopicPartition: CommittedOffset} of the group (only `partitions` if given)."""
        self._check_open()
        self._refresh_readonly()
        with self._lock:
            committed = self._store.committed(group_id)
            if partitions is None:
                return dict(committed)
            return {TopicPartition(*tp): committed.get(TopicPartition(*tp))
                    for tp in partitions}

    # --- administration ------------------------------------------------------------------

    def describe_group(self, group_id):
        self._check_open()
        self._refresh_readonly()
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                raise GroupIdNotFoundError(f"group {group_id!r} does not exist (no member has "
                                           "joined it and it has no committed offsets)")
            members = [MemberDescription(
                m.member_id, m.group_instance_id, m.client_id, m.assignment,
                m.metadata(group.protocol) if group.protocol in m.protocol_names() else None)
                for m in group.members.values()]
            return GroupDescription(group_id, group.state, group.protocol_type, group.protocol,
                                    group.generation, group.leader, members,
                                    dict(self._store.committed(group_id)))

    def offset_fetch_stable(self, group_id, partitions=None, require_stable=True):
        """(offset_fetch's answer, the partitions with an offset of the group pending in an
        open transaction), read at once: OffsetFetch with require_stable answers the second
        UNSTABLE_OFFSET_COMMIT, and a consumer waits until their transaction ends (KIP-447).
        require_stable=False: the second is empty, and not looked for (a scan of every open
        transaction's pending offsets)."""
        with self._lock:
            return self.offset_fetch(group_id, partitions), \
                self._store.pending_partitions(group_id) if require_stable else set()

    def protocol_type(self, group_id):
        """The protocol type of the group's members ("consumer", ...), None if unknown."""
        with self._lock:
            group = self._groups.get(group_id)
            return None if group is None else group.protocol_type

    def list_groups(self):
        self._check_open()
        self._refresh_readonly()
        with self._lock:
            return [GroupListing(g.group_id, g.state, g.protocol_type)
                    for _, g in sorted(self._groups.items())]

    def delete_group(self, group_id):
        """Delete an Empty group: tombstones for its offsets and its group record."""
        self._check_writable()
        with self._locked():
            group = self._groups.get(group_id)
            if group is None:
                raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
            if group.state != EMPTY:
                raise NonEmptyGroupError(
                    f"group {group_id!r} has {len(group.members)} active member(s) "
                    f"({group.state}); close its consumers before deleting it")
            self._delete(group, self._broker.clock_ms())

    def delete_offsets(self, group_id, partitions):
        """Delete the group's committed offsets of `partitions` (Kafka's OffsetDelete);
        returns {TopicPartition: None, or the error that partition's offset stays for}.

        Kafka's rules (OffsetMetadataManager.deleteOffsets, ClassicGroup.validateOffsetDelete):
        the group must exist (GroupIdNotFoundError); a group with members may only be a
        consumer group (NonEmptyGroupError otherwise), and then keeps the offsets of the
        topics its current generation subscribes to (GroupSubscribedToTopicError for each
        of their partitions); a partition with an offset -- committed, or pending in an
        open transaction, which the tombstone drops too -- gets a tombstone. A partition
        of no topic is UnknownTopicOrPartitionError (Kafka's KafkaApis checks it first).
        """
        self._check_writable()
        self._validate_group_id(group_id)
        partitions = [TopicPartition(*tp) for tp in partitions]
        with self._locked():
            self._check_open()
            group = self._groups.get(group_id)
            if group is None:
                raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
            if group.state != EMPTY and group.protocol_type != "consumer":
                raise NonEmptyGroupError(
                    f"group {group_id!r} has {len(group.members)} active member(s) "
                    f"({group.state}) of protocol type {group.protocol_type!r}; only a "
                    "consumer group's offsets can be deleted while it has members")
            results, doomed = {}, []
            held = self._store.offset_partitions(group_id)
            for tp in partitions:
                results[tp] = self._offset_delete_problem(group, tp)
                if results[tp] is None and tp in held:
                    doomed.append(tp)
            written = self._store.delete(group_id, doomed, self._broker.clock_ms())
        if written is not None:
            self._store.wait_replicated(*written)
        return results

    def on_topic_deleted(self, info):
        """A topic was deleted (Broker.delete_topic): every group's offsets of its partitions,
        committed or pending in an open transaction, get tombstones, as Kafka's
        OffsetMetadataManager.onPartitionsDeleted writes them, so a topic made again under
        the name is not read from where a group left the old one. The topic is gone
        whatever happens here: a group whose offsets partition this broker of a cluster
        does not lead is its leader's to clean, and a failure is logged."""
        written = []
        with self._locked():
            if self._closed:
                return
            now = self._broker.clock_ms()
            for group_id, doomed in sorted(self._store.offsets_of_topic(info.name).items()):
                try:
                    written.append(self._store.delete(group_id, sorted(doomed), now))
                except NotCoordinatorError:
                    pass
                except StreamlogError:
                    log.exception("group %s: the offsets of deleted topic %s stay",
                                  group_id, info.name)
        for tp, end_offset in written:
            try:
                self._store.wait_replicated(tp, end_offset)
            except StreamlogError:
                log.exception("the tombstones of deleted topic %s in %s are not replicated",
                              info.name, tp)

    def _offset_delete_problem(self, group, tp):
        """Why OffsetDelete keeps tp's offset of the group, or None."""
        info = self._broker.topics().get(tp.topic)
        if info is None or not 0 <= tp.partition < info.partitions:
            return UnknownTopicOrPartitionError(f"{tp} does not exist")
        if group.is_subscribed_to(tp.topic):
            return GroupSubscribedToTopicError(
                f"a member of group {group.group_id!r} subscribes to topic {tp.topic!r}, "
                f"so its offset of {tp} stays; stop the group's consumers or unsubscribe "
                "them from the topic first")
        return None

    def _delete(self, group, now_ms):
        # The offsets pending in open transactions go too, or their commit markers would
        # bring them back to a deleted group (Kafka's OffsetMetadataManager.deleteAllOffsets).
        self._store.delete(group.group_id, sorted(self._store.offset_partitions(group.group_id)),
                           now_ms, group_record=True)
        group.transition(DEAD)
        del self._groups[group.group_id]

    def alter_offsets(self, group_id, offsets):
        """Set an inactive group's committed offsets (the admin path of reset-offsets)."""
        with self._locked():
            group = self._groups.get(group_id)
            if group is not None and group.state != EMPTY:
                raise NonEmptyGroupError(
                    f"group {group_id!r} has active members ({group.state}); offsets can only be "
                    "changed while no consumer of the group is running")
        self.offset_commit(group_id, "", -1, None, offsets)

    # --- offset expiry ---------------------------------------------------------------------

    def _schedule_expiry(self):
        self._expiry_task = self._schedule(self._config.offsets_retention_check_interval_ms,
                                           self._expiry_tick)

    def _expiry_tick(self):
        try:
            self.expire_offsets()
        except Exception:
            log.exception("expiring committed offsets failed")
        if not self._closed:
            self._schedule_expiry()

    def expire_offsets(self, now_ms=None):
        """Drop offsets past offsets.retention.minutes (Kafka's rules); returns how many.

        An Empty consumer group loses all its offsets once it has been Empty
        that long; an offsets-only group loses each offset that long after
        its commit; a Stable group loses only offsets of topics its current
        generation does not subscribe to (Group.offset_expiry_start and
        is_subscribed_to, the rule OffsetDelete follows too: the subscriptions
        taken when the generation started, as Kafka's ClassicGroup keeps them,
        even after a static member rejoined with others without a rebalance).
        An offset pending in an open transaction keeps
        the committed offset of its partition, whose tombstone would drop it,
        and keeps the group, even one with no committed offset (Kafka's
        OffsetMetadataManager.cleanupExpiredOffsets, since KAFKA-19163).
        An Empty group without offsets is deleted.
        """
        if self._closed or self._broker.readonly:
            return 0
        now = self._broker.clock_ms() if now_ms is None else now_ms
        retention = self._config.offsets_retention_minutes * 60_000
        expired_count = 0
        with self._locked():
            for group in list(self._groups.values()):
                committed = self._store.committed(group.group_id)
                start = group.offset_expiry_start()
                expired = [] if start is None else [
                    tp for tp, c in committed.items()
                    if not group.is_subscribed_to(tp.topic) and now - start(c) >= retention]
                pending = self._store.pending_partitions(group.group_id)
                expired = [tp for tp in expired if tp not in pending]
                if expired:
                    self._store.delete(group.group_id, expired, now)
                    expired_count += len(expired)
                # The tombstones above spare every pending offset: `pending` still holds.
                if group.state == EMPTY and not pending and \
                        not self._store.committed(group.group_id):
                    self._delete(group, now)  # nothing left to remember (Kafka: -> Dead)
        return expired_count

    # --- checks --------------------------------------------------------------------------

    @staticmethod
    def _validate_group_id(group_id):
        if not isinstance(group_id, str) or not group_id:
            raise InvalidGroupIdError(f"group_id must be a non-empty string, got {group_id!r}")

    def _group(self, group_id, member_id):
        group = self._groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"group {group_id!r} does not exist, so it has no member "
                                       f"{member_id!r}; join it first")
        return group

    def _member(self, group, member_id, group_instance_id):
        """The member, after Kafka's validateMember (ClassicGroup.java): an instance id
        must be the group's and map to member_id (FENCED_INSTANCE_ID: another consumer took
        it over), and member_id must be a member."""
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is None:
                raise UnknownMemberIdError(
                    f"group {group.group_id!r} has no member with group_instance_id "
                    f"{group_instance_id!r} (it left, or was removed after missing its "
                    "session timeout); join again")
            if current != member_id:
                raise self._fenced(group, group_instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(
                f"{member_id!r} is not a member of group {group.group_id!r} (it left, or was "
                "removed after missing its session timeout); join again")
        return member

    @staticmethod
    def _fenced(group, instance_id):
        return FencedInstanceIdError(
            f"another consumer joined group {group.group_id!r} with group_instance_id "
            f"{instance_id!r}; this one is fenced and must stop (give each consumer its own "
            "group_instance_id)")

    @staticmethod
    def _check_generation(group, generation):
        if generation != group.generation:
            raise IllegalGenerationError(
                f"generation {generation} of group {group.group_id!r} is over (now "
                f"{group.generation}); the group rebalanced: join again")

    def _cancel(self, task):
        if task is not None:
            self._timer.cancel(task)

    # --- lifecycle ---------------------------------------------------------------------------

    def close(self):
        """Answer every waiting member with LogClosedError and drop the timers' work."""
        with self._locked():
            if self._closed:
                return
            self._closed = True
            self._cancel(self._expiry_task)
            closed = LogClosedError(f"the database {self._broker.root} was closed")
            for group in self._groups.values():
                self._stop_group(group, closed)
                for member in group.members.values():
                    self._defer(member.notify, REMOVED, member.member_id)
