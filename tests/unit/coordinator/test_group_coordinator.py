"""GroupCoordinator: Kafka's group state machine, driven request by request.

Members here are plain objects calling the coordinator the way a consumer's
GroupMembership does; waits on the timing wheel (sessions, rebalance
timeouts) use small timeouts and a generous bound on how long to wait for
the outcome, so timing never decides a verdict.
"""
import contextlib
import dataclasses
import threading
import time

import pytest

from streamlog.broker.broker import Broker
from streamlog.coordinator.assignors import Subscription
from streamlog.coordinator.group import (COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE,
                                         STABLE)
from streamlog.coordinator.group_coordinator import (FENCED, JOINED, REBALANCE, REMOVED,
                                                     SYNCED, find_coordinator)
from streamlog.errors import (FencedInstanceIdError, GroupIdNotFoundError, GroupMaxSizeReachedError,
                              GroupSubscribedToTopicError, IllegalGenerationError, InconsistentGroupProtocolError,
                              InvalidGroupIdError, InvalidSessionTimeoutError,
                              MemberIdRequiredError, NonEmptyGroupError, OffsetMetadataTooLargeError,
                              RebalanceInProgressError, UnknownMemberIdError,
                              UnknownTopicOrPartitionError)
from streamlog.structs import OffsetAndMetadata, TopicPartition

from support import wait_until

GENEROUS_S = 20.0
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
SUB = Subscription(["t"])


@pytest.fixture
def broker(tmp_path):
    b = Broker(str(tmp_path / "db"), config={"group.min.session.timeout.ms": 10,
                                             "offsets.topic.num.partitions": 3})
    b.create_topic("t", 2)
    yield b
    b.close()


@pytest.fixture
def coordinator(broker):
    return find_coordinator(broker)


class Client:
    """A member as the coordinator sees it: requests out, notifications in."""

    def __init__(self, coordinator, group="g", instance=None, session_ms=10_000,
                 rebalance_ms=10_000, protocols=(("range", SUB),)):
        self.c = coordinator
        self.group, self.instance = group, instance
        self.session_ms, self.rebalance_ms = session_ms, rebalance_ms
        self.protocols = list(protocols)
        self.member_id, self.generation = "", -1
        self.events = []
        self.changed = threading.Condition()

    def notify(self, event, member_id):
        with self.changed:
            self.events.append((event, member_id))
            self.changed.notify_all()

    def wait_for(self, event):
        with self.changed:
            assert self.changed.wait_for(lambda: any(e == event for e, _ in self.events),
                                         GENEROUS_S), f"no {event} event: {self.events}"

    def join(self, require_known_member_id=False, skip_assignment_known=True):
        return self.c.join_group(self.group, self.member_id, self.instance, "client",
                                 self.session_ms, self.rebalance_ms, "consumer", self.protocols,
                                 self.notify, require_known_member_id=require_known_member_id,
                                 skip_assignment_known=skip_assignment_known)

    def joined(self, pending):
        answer = result(pending)
        self.member_id, self.generation = answer.member_id, answer.generation
        return answer

    def sync(self, assignments=None, **protocol):
        return self.c.sync_group(self.group, self.member_id, self.generation, self.instance,
                                 assignments, **protocol)

    def heartbeat(self):
        self.c.heartbeat(self.group, self.member_id, self.generation, self.instance)

    def commit(self, offsets):
        self.c.offset_commit(self.group, self.member_id, self.generation, self.instance, offsets)


def result(pending):
    assert pending.wait(GENEROUS_S), "the answer never came"
    return pending.result()


def join_alone(a):
    """a joins an empty group, leads it and takes both partitions."""
    a.joined(a.join())
    result(a.sync({a.member_id: [TP0, TP1]}))


def form_group(a, b):
    """a joins alone and takes everything; b joins; after the rebalance a has TP0, b TP1."""
    join_alone(a)
    b_pending = b.join()
    a.joined(a.join())
    b.joined(b_pending)
    a.sync({a.member_id: [TP0], b.member_id: [TP1]})
    assert result(b.sync()) == [TP1]


def state(coordinator, group="g"):
    return coordinator.describe_group(group).state


def test_first_member_leads_and_the_group_becomes_stable(coordinator):
    a = Client(coordinator)
    answer = a.joined(a.join())
    assert answer.leader == a.member_id and answer.generation == 1
    assert answer.protocol == "range"
    assert answer.members == [(a.member_id, None, SUB)]
    assert state(coordinator) == COMPLETING_REBALANCE
    assert result(a.sync({a.member_id: [TP0, TP1]})) == [TP0, TP1]
    assert state(coordinator) == STABLE
    a.heartbeat()


def test_a_second_member_triggers_a_rebalance_that_waits_for_the_first(coordinator):
    a = Client(coordinator)
    join_alone(a)
    b = Client(coordinator)
    b_pending = b.join()
    assert not b_pending.done()
    assert state(coordinator) == PREPARING_REBALANCE
    a.wait_for(REBALANCE)
    with pytest.raises(RebalanceInProgressError):
        a.heartbeat()
    a_answer = a.joined(a.join())
    b_answer = b.joined(b_pending)
    assert a_answer.generation == b_answer.generation == 2
    assert a_answer.leader == b_answer.leader == a.member_id      # the leader stays
    assert {m for m, _, _ in a_answer.members} == {a.member_id, b.member_id}
    assert b_answer.members == []                                  # only the leader sees them
    b.wait_for(JOINED)
    b_sync = b.sync()
    assert not b_sync.done()                                       # waits for the leader
    a.sync({a.member_id: [TP0], b.member_id: [TP1]})
    assert result(b_sync) == [TP1]
    b.wait_for(SYNCED)
    assert state(coordinator) == STABLE


def test_stale_generations_and_unknown_members_are_refused(coordinator):
    a = Client(coordinator)
    a.joined(a.join())
    result(a.sync({a.member_id: [TP0]}))
    stale = a.generation
    b = Client(coordinator)
    b_pending = b.join()
    a.joined(a.join())
    b.joined(b_pending)
    with pytest.raises(IllegalGenerationError):
        coordinator.sync_group("g", a.member_id, stale, None, {})
    with pytest.raises(IllegalGenerationError):
        coordinator.heartbeat("g", a.member_id, stale)
    with pytest.raises(IllegalGenerationError):
        coordinator.offset_commit("g", a.member_id, stale, None, {TP0: OffsetAndMetadata(1)})
    with pytest.raises(RebalanceInProgressError):  # CompletingRebalance: sync first
        a.commit({TP0: OffsetAndMetadata(1)})
    with pytest.raises(UnknownMemberIdError):
        coordinator.heartbeat("g", "nobody", a.generation)
    with pytest.raises(UnknownMemberIdError):  # an outsider may not commit to an active group
        coordinator.offset_commit("g", "", -1, None, {TP0: OffsetAndMetadata(1)})
    a.sync({a.member_id: [TP0], b.member_id: [TP1]})
    a.commit({TP0: OffsetAndMetadata(5, "meta")})
    assert coordinator.offset_fetch("g", [TP0, TP1]) == {
        TP0: coordinator.offset_fetch("g")[TP0], TP1: None}
    assert coordinator.offset_fetch("g")[TP0][:2] == (5, "meta")


def txn_commit(coordinator, member_id, generation, instance=None, group="g"):
    coordinator.txn_offset_commit(group, 1000, 0, member_id, generation, instance,
                                  {TP0: OffsetAndMetadata(3)})


def test_a_transactional_commit_follows_kafkas_member_checks_but_not_the_groups_state(
        coordinator):
    # Kafka: ClassicGroup.java:823-862 (validateOffsetCommit), the same rules as
    # GroupCoordinator.scala:1018-1054. A member may commit transactionally while the group
    # is CompletingRebalance (REBALANCE_IN_PROGRESS is for OffsetCommit only, line 855);
    # generation -1 with a member's id is checked as a member's, then ILLEGAL_GENERATION.
    a = Client(coordinator)
    a.joined(a.join())
    assert state(coordinator) == COMPLETING_REBALANCE
    txn_commit(coordinator, a.member_id, a.generation)
    with pytest.raises(RebalanceInProgressError):
        a.commit({TP0: OffsetAndMetadata(1)})
    for commit in (lambda *args: txn_commit(coordinator, *args),
                   lambda *args: coordinator.offset_commit("g", *args, {TP0: 1})):
        with pytest.raises(IllegalGenerationError):
            commit(a.member_id, -1, None)
        with pytest.raises(UnknownMemberIdError):
            commit("nobody", -1, None)
    txn_commit(coordinator, "", -1)   # no member named (TxnOffsetCommit before v3): allowed
    with pytest.raises(UnknownMemberIdError):
        coordinator.offset_commit("g", "", -1, None, {TP0: 1})
    result(a.sync({a.member_id: [TP0, TP1]}))
    a.commit({TP0: OffsetAndMetadata(1)})
    coordinator.leave_group("g", a.member_id)
    txn_commit(coordinator, a.member_id, -1)   # generation -1 to an Empty group: anyone


def test_an_instance_id_must_be_the_groups_and_the_members(coordinator):
    # Kafka's validateMember (ClassicGroup.java:791-811), used by OffsetCommit,
    # TxnOffsetCommit, Heartbeat, SyncGroup and JoinGroup alike: an instance id the group
    # does not know is UNKNOWN_MEMBER_ID, one that maps to another member id
    # FENCED_INSTANCE_ID.
    a = Client(coordinator, instance="app-1")
    join_alone(a)
    for call in (lambda m, g, i: txn_commit(coordinator, m, g, i),
                 lambda m, g, i: coordinator.offset_commit("g", m, g, i, {TP0: 1}),
                 lambda m, g, i: coordinator.heartbeat("g", m, g, i)):
        with pytest.raises(UnknownMemberIdError):
            call(a.member_id, a.generation, "app-9")
        with pytest.raises(FencedInstanceIdError):
            call("other", a.generation, "app-1")
        call(a.member_id, a.generation, "app-1")
    with pytest.raises(UnknownMemberIdError):
        txn_commit(coordinator, "", -1, "app-9")
    with pytest.raises(FencedInstanceIdError):
        txn_commit(coordinator, "", -1, "app-1")


def test_leaving_rebalances_the_rest_and_the_last_leaves_an_empty_group(coordinator):
    a, b = Client(coordinator), Client(coordinator)
    form_group(a, b)
    coordinator.leave_group("g", a.member_id)
    b.wait_for(REBALANCE)
    answer = b.joined(b.join())
    assert answer.leader == b.member_id and answer.generation == 3
    result(b.sync({b.member_id: [TP0, TP1]}))
    coordinator.leave_group("g", b.member_id)
    d = coordinator.describe_group("g")
    assert d.state == EMPTY and d.members == [] and d.generation == 4


def test_an_admin_removes_a_static_member_by_its_instance_id_alone(coordinator):
    # Kafka's classicGroupLeaveToClassicGroup (GroupMetadataManager.java): a LeaveGroup
    # member without a member id (UNKNOWN_MEMBER_ID, as removeMembersFromConsumerGroup
    # sends it) removes the static member holding the instance id; an instance id no
    # member holds is UNKNOWN_MEMBER_ID.
    a, b = Client(coordinator, instance="app-1"), Client(coordinator)
    form_group(a, b)
    coordinator.leave_group("g", "", "app-1")
    a.wait_for(REMOVED)
    b.wait_for(REBALANCE)
    assert [m.member_id for m in coordinator.describe_group("g").members] == [b.member_id]
    for instance in ("app-1", None):
        with pytest.raises(UnknownMemberIdError):
            coordinator.leave_group("g", "", instance)


def test_a_member_id_handed_out_but_not_joined_with_leaves_as_a_member_does(coordinator):
    # Kafka's classicGroupLeaveToClassicGroup: a pending member (KIP-394) that leaves is
    # forgotten without an error, and counts among the members that left: a Stable group
    # rebalances (maybePrepareRebalanceOrCompleteJoin), a join that waited for it
    # completes at once (maybeCompleteJoinPhase) rather than at the rebalance timeout.
    a, b = Client(coordinator, rebalance_ms=600_000), Client(coordinator)
    join_alone(a)
    with pytest.raises(MemberIdRequiredError) as required:
        b.join(require_known_member_id=True)
    coordinator.leave_group("g", required.value.member_id)
    assert required.value.member_id not in coordinator._groups["g"].pending_members
    assert state(coordinator) == PREPARING_REBALANCE
    a.wait_for(REBALANCE)
    with pytest.raises(MemberIdRequiredError) as required:
        b.join(require_known_member_id=True)
    waiting = a.join()
    assert not waiting.wait(0.05)   # the join waits for the id handed out
    coordinator.leave_group("g", required.value.member_id)
    assert a.joined(waiting).members == [(a.member_id, None, SUB)]
    assert state(coordinator) == COMPLETING_REBALANCE


def test_members_that_never_sync_are_removed_a_rebalance_timeout_after_the_join(coordinator):
    # Kafka's schedulePendingSync / expirePendingSync: heartbeats alone do not keep a member
    # that never sends SyncGroup; it is removed and the group rebalances.
    a = Client(coordinator, rebalance_ms=200)
    b = Client(coordinator, rebalance_ms=200)
    join_alone(a)
    b_pending = b.join()
    a.joined(a.join())
    b.joined(b_pending)
    result(a.sync({a.member_id: [TP0], b.member_id: [TP1]}))   # b never syncs
    assert state(coordinator) == STABLE

    def b_removed():
        try:
            b.heartbeat()
        except UnknownMemberIdError:
            return True
        return False
    wait_until(b_removed, "b removed although it heartbeats")
    a.wait_for(REBALANCE)
    assert [m.member_id for m in coordinator.describe_group("g").members] == [a.member_id]

    # A leader that never hands in the assignment holds no group for ever either: the
    # follower waiting on its sync is told to rejoin, and leads the next generation.
    c = Client(coordinator, group="h", rebalance_ms=200)
    d = Client(coordinator, group="h", rebalance_ms=200)
    c.joined(c.join())
    result(c.sync({c.member_id: [TP0, TP1]}))
    d_pending = d.join()
    c.joined(c.join())   # generation 2, c leads it and never syncs
    d.joined(d_pending)
    waiting = d.sync()
    assert waiting.wait(GENEROUS_S)
    with pytest.raises(RebalanceInProgressError):
        waiting.result()
    c.wait_for(REMOVED)
    answer = d.joined(d.join())
    assert answer.leader == d.member_id and answer.members == [(d.member_id, None, SUB)]


def test_a_rejoin_brings_its_session_and_rebalance_timeouts(coordinator):
    # Kafka's ClassicGroup.updateMember takes both timeouts from every rejoin.
    a = Client(coordinator, session_ms=600_000, rebalance_ms=600_000)
    join_alone(a)
    a.session_ms = 100
    a.joined(a.join())
    result(a.sync({a.member_id: [TP0, TP1]}))
    a.wait_for(REMOVED)   # 100 ms without a heartbeat, not 600 s
    assert state(coordinator) == EMPTY


def test_a_returning_static_member_keeps_the_client_id_it_joined_with(coordinator):
    # Kafka's ClassicGroup.replaceStaticMember keeps the old member's client id and host.
    a = Client(coordinator, instance="app-1")
    join_alone(a)
    answer = result(coordinator.join_group("g", "", "app-1", "another-client", 10_000,
                                           10_000, "consumer", [("range", SUB)],
                                           a.notify))
    (member,) = coordinator.describe_group("g").members
    assert member.member_id == answer.member_id != a.member_id
    assert member.client_id == "client"


def test_a_member_that_stops_heartbeating_is_removed_after_its_session(coordinator):
    a = Client(coordinator, session_ms=10_000)
    b = Client(coordinator, session_ms=50)
    form_group(a, b)
    # b never heartbeats again: its session (50 ms) runs out on the timing wheel.
    b.wait_for(REMOVED)
    a.wait_for(REBALANCE)
    assert [m.member_id for m in coordinator.describe_group("g").members] == [a.member_id]
    with pytest.raises(UnknownMemberIdError):
        b.heartbeat()


def test_a_new_member_that_must_know_its_id_joins_twice_and_counts_only_the_second_time(
        coordinator):
    # KIP-394 (Kafka's GroupCoordinator, JoinGroup v4 on): a dynamic member without an id
    # gets MEMBER_ID_REQUIRED with a new id and is not a member until it joins with it.
    a = Client(coordinator)
    with pytest.raises(MemberIdRequiredError) as required:
        a.join(require_known_member_id=True)
    handed_out = required.value.member_id
    assert handed_out.startswith("client-")
    assert coordinator.describe_group("g").members == []   # nothing to rebalance for yet
    a.member_id = handed_out
    answer = a.joined(a.join(require_known_member_id=True))
    assert answer.member_id == handed_out and answer.leader == handed_out
    # A static member is known by its instance id: no second round trip.
    b = Client(coordinator, group="s", instance="i-1")
    assert b.joined(b.join(require_known_member_id=True)).member_id.startswith("i-1-")


def test_an_unused_member_id_is_forgotten_after_the_session_timeout(coordinator):
    a = Client(coordinator, session_ms=30)
    with pytest.raises(MemberIdRequiredError) as required:
        a.join(require_known_member_id=True)
    a.member_id = required.value.member_id
    # Joining before the session ends would make it a member, so watch the handed-out ids
    # (coordinator state) until the session timer forgets it; then the id is unknown.
    group = coordinator._groups["g"]
    wait_until(lambda: a.member_id not in group.pending_members, "the unused id to expire")
    with pytest.raises(UnknownMemberIdError):
        a.join(require_known_member_id=True)


def test_a_forced_rebalance_makes_every_member_join_again(coordinator):
    a, b = Client(coordinator), Client(coordinator)
    form_group(a, b)
    generation = a.generation
    coordinator.rebalance("g", "a test asked")
    assert state(coordinator) == PREPARING_REBALANCE
    a.wait_for(REBALANCE)
    with pytest.raises(RebalanceInProgressError):
        b.heartbeat()
    b_pending = b.join()
    a.joined(a.join())
    assert b.joined(b_pending).generation == generation + 1
    with pytest.raises(GroupIdNotFoundError):
        coordinator.rebalance("nobody-here")


def test_describe_shows_each_members_metadata_for_the_chosen_protocol(coordinator):
    a = Client(coordinator)
    join_alone(a)
    (member,) = coordinator.describe_group("g").members
    assert member.metadata == SUB and member.assignment == [TP0, TP1]


def test_a_member_waiting_for_its_join_answer_is_not_expired(coordinator):
    a = Client(coordinator, session_ms=10_000, rebalance_ms=60_000)
    join_alone(a)
    b = Client(coordinator, session_ms=20, rebalance_ms=60_000)
    b_pending = b.join()                       # waits for a, which takes its time
    done = threading.Event()
    threading.Timer(0.3, done.set).start()     # many of b's sessions long
    done.wait()
    assert not b_pending.done() and not b.events
    a.joined(a.join())
    assert b.joined(b_pending).generation == 2


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(coordinator):
    a = Client(coordinator, rebalance_ms=100)
    join_alone(a)
    b = Client(coordinator, rebalance_ms=100)
    answer = b.joined(b.join())   # a never rejoins; b's join completes when a is dropped
    assert answer.leader == b.member_id and answer.generation == 2
    a.wait_for(REMOVED)
    assert [m.member_id for m in coordinator.describe_group("g").members] == [b.member_id]


def test_a_static_member_returning_while_stable_gets_its_assignment_without_rebalance(
        coordinator):
    # Kafka's updateStaticMemberThenRebalanceOrCompleteJoin, JoinGroup v9 on: the same
    # generation, no rebalance; only a returning leader is told to skip the assignment.
    a = Client(coordinator, instance="app-1")
    b = Client(coordinator, instance="app-2")
    form_group(a, b)
    generation, old_id = b.generation, b.member_id
    a.events.clear()

    restarted = Client(coordinator, instance="app-2")
    answer = restarted.joined(restarted.join())
    assert not answer.skip_assignment and answer.generation == generation
    assert answer.member_id != old_id and answer.leader == a.member_id and answer.members == []
    assert result(restarted.sync()) == [TP1]
    assert state(coordinator) == STABLE
    assert not any(e == REBALANCE for e, _ in a.events)
    b.wait_for(FENCED)
    with pytest.raises(FencedInstanceIdError):
        b.heartbeat()

    leader = Client(coordinator, instance="app-1")
    answer = leader.joined(leader.join())
    assert answer.skip_assignment and answer.leader == leader.member_id
    assert [m[0] for m in answer.members] == [leader.member_id, restarted.member_id]
    assert result(leader.sync()) == [TP0]
    assert state(coordinator) == STABLE


def test_a_returning_static_leader_before_join_group_v9_is_answered_as_a_follower(coordinator):
    """Before v9 a member cannot be told to skip the assignment: Kafka names the leader as
    it was before the replacement, so the returning leader syncs as a follower. Told it led
    a group with no members, it assigned nothing and asked for a rebalance."""
    a = Client(coordinator, instance="app-1")
    b = Client(coordinator, instance="app-2")
    form_group(a, b)
    restarted = Client(coordinator, instance="app-1")
    answer = restarted.joined(restarted.join(skip_assignment_known=False))
    assert answer.leader == a.member_id != answer.member_id
    assert not answer.skip_assignment and answer.members == []
    assert result(restarted.sync()) == [TP0]
    assert state(coordinator) == STABLE


def test_a_static_member_that_misses_the_rebalance_keeps_its_place(coordinator):
    """Kafka's completeClassicGroupJoin removes only the dynamic members that did not
    rejoin: a static one stays until its session ends (KIP-345), and the leader assigns
    to it too. It was removed at the rebalance timeout. Like every member of the new
    generation, it must then sync within the rebalance timeout (expirePendingSync), or
    it is removed, its session (60 s) notwithstanding."""
    a = Client(coordinator, instance="app-1", session_ms=60_000, rebalance_ms=100)
    join_alone(a)
    # The largest rebalance timeout of the members (1 s) bounds the join and the syncs: a
    # margin for the checks between them.
    b = Client(coordinator, rebalance_ms=1000)
    answer = b.joined(b.join())   # a does not rejoin; the join completes at the timeout
    assert answer.generation == 2 and answer.leader == b.member_id   # a joined leader
    assert sorted(m[0] for m in answer.members) == sorted([a.member_id, b.member_id])
    assert REMOVED not in [e for e, _ in a.events]
    assert [m.group_instance_id for m in coordinator.describe_group("g").members] == \
        ["app-1", None]
    result(b.sync({a.member_id: [TP0], b.member_id: [TP1]}))
    a.wait_for(REMOVED)
    assert [m.member_id for m in coordinator.describe_group("g").members] == [b.member_id]


def test_a_rebalance_waits_for_a_member_id_it_handed_out(coordinator):
    """Kafka's hasAllMembersJoined counts the pending members (KIP-394): a rebalance
    completed without the member that was told to join again with its new id, and that
    join then started a second rebalance."""
    a, b, c = Client(coordinator), Client(coordinator, session_ms=10_000), Client(coordinator)
    join_alone(a)
    with pytest.raises(MemberIdRequiredError) as required:
        b.join(require_known_member_id=True)
    b.member_id = required.value.member_id
    c_pending = c.join()
    a_pending = a.join()
    assert state(coordinator) == PREPARING_REBALANCE and not a_pending.done()
    b_pending = b.join(require_known_member_id=True)
    answers = [x.joined(p) for x, p in ((a, a_pending), (b, b_pending), (c, c_pending))]
    assert {answer.generation for answer in answers} == {2}
    assert state(coordinator) == COMPLETING_REBALANCE


def test_a_handed_out_member_id_that_expires_lets_the_rebalance_complete(coordinator):
    a, b, c = Client(coordinator), Client(coordinator, session_ms=30), Client(coordinator)
    join_alone(a)
    with pytest.raises(MemberIdRequiredError):
        b.join(require_known_member_id=True)
    c_pending = c.join()
    a_pending = a.join()
    # Bounded waits: the join completes once b's id expires (its 30 ms session).
    assert c.joined(c_pending).generation == 2 and a.joined(a_pending).generation == 2
    assert len(coordinator.describe_group("g").members) == 2


def test_sync_checks_the_protocol_type_and_name_it_is_given(coordinator):
    # Kafka's validateSyncGroup (SyncGroup v5 on): INCONSISTENT_GROUP_PROTOCOL.
    a = Client(coordinator)
    a.joined(a.join())
    with pytest.raises(InconsistentGroupProtocolError):
        a.sync({a.member_id: [TP0]}, protocol_name="roundrobin")
    with pytest.raises(InconsistentGroupProtocolError):
        a.sync({a.member_id: [TP0]}, protocol_type="connect")
    assert result(a.sync({a.member_id: [TP0]}, protocol_type="consumer",
                         protocol_name="range")) == [TP0]


def test_join_checks(coordinator):
    with pytest.raises(InvalidSessionTimeoutError):
        Client(coordinator, session_ms=5).join()
    with pytest.raises(InvalidGroupIdError):
        Client(coordinator, group="").join()
    a = Client(coordinator)
    a.joined(a.join())
    with pytest.raises(InconsistentGroupProtocolError):
        Client(coordinator, protocols=[("roundrobin", SUB)]).join()
    # Kafka's ClassicGroup.supportsProtocols: an empty protocol type, even on a new group.
    with pytest.raises(InconsistentGroupProtocolError):
        coordinator.join_group("new", "", None, "c", 10_000, 10_000, "", [("range", SUB)],
                               lambda *_: None)
    with pytest.raises(UnknownMemberIdError):
        coordinator.join_group("other", "ghost", None, "c", 10_000, 10_000, "consumer",
                               [("range", [])], lambda *_: None)


@pytest.mark.parametrize("first, second", [
    ("roundrobin", "range"), ("range", "roundrobin"), ("cooperative-sticky", "range")])
def test_a_tied_vote_goes_where_kafkas_hash_map_of_votes_puts_it(coordinator, first, second):
    # Kafka's ClassicGroup.selectProtocol: Stream.max over a HashMap of the votes keeps the
    # first tied protocol in the map's bucket order (sticky, range, roundrobin,
    # cooperative-sticky), not the first voter's.
    a = Client(coordinator, protocols=[(first, SUB), (second, SUB)])
    b = Client(coordinator, protocols=[(second, SUB), (first, SUB)])
    a.joined(a.join())
    result(a.sync({}))
    b_pending = b.join()
    assert a.joined(a.join()).protocol == "range"   # one vote each
    b.joined(b_pending)


def test_the_assignor_is_the_most_preferred_common_one(coordinator):
    a = Client(coordinator, protocols=[("roundrobin", SUB), ("range", SUB)])
    b = Client(coordinator, protocols=[("range", SUB), ("roundrobin", SUB)])
    a.joined(a.join())
    result(a.sync({}))
    b_pending = b.join()
    a.joined(a.join())
    b.joined(b_pending)
    c = Client(coordinator, protocols=[("range", SUB)])
    c_pending = c.join()
    a_pending, b_pending = a.join(), b.join()
    assert c.joined(c_pending).protocol == "range"       # the only one all three offer
    assert a.joined(a_pending).generation == b.joined(b_pending).generation == 3


def test_commit_checks(coordinator):
    with pytest.raises(ValueError):
        coordinator.offset_commit("g", "", -1, None, {TP0: OffsetAndMetadata(-1)})
    with pytest.raises(UnknownTopicOrPartitionError):
        coordinator.offset_commit("g", "", -1, None, {TopicPartition("t", 9): 1})
    with pytest.raises(OffsetMetadataTooLargeError):
        coordinator.offset_commit("g", "", -1, None, {TP0: OffsetAndMetadata(1, "x" * 4097)})
    # Counted in Java chars (Kafka's isMetadataInvalid: metadata.length()): 4,096 euro signs
    # (12,288 UTF-8 bytes) fit, 2,049 characters above U+FFFF (two chars each) do not.
    with pytest.raises(OffsetMetadataTooLargeError):
        coordinator.offset_commit("g", "", -1, None,
                                  {TP0: OffsetAndMetadata(1, "\U0001f600" * 2049)})
    with pytest.raises(IllegalGenerationError):
        coordinator.offset_commit("new", "m", 3, None, {TP0: 1})
    with pytest.raises(GroupIdNotFoundError):
        coordinator.describe_group("g")  # nothing above was stored
    coordinator.offset_commit("g", "", -1, None, {TP0: 1, TP1: OffsetAndMetadata(2, "x")})
    assert {tp: c[:2] for tp, c in coordinator.offset_fetch("g").items()} == {
        TP0: (1, ""), TP1: (2, "x")}
    coordinator.offset_commit("g", "", -1, None, {TP0: OffsetAndMetadata(3, "\u20ac" * 4096)})
    assert coordinator.offset_fetch("g")[TP0][:2] == (3, "\u20ac" * 4096)


def test_delete_group_refuses_active_groups_and_forgets_the_rest(coordinator, broker):
    a = Client(coordinator)
    a.joined(a.join())
    with pytest.raises(NonEmptyGroupError):
        coordinator.delete_group("g")
    with pytest.raises(NonEmptyGroupError):
        coordinator.alter_offsets("g", {TP0: OffsetAndMetadata(3)})
    coordinator.leave_group("g", a.member_id)
    coordinator.alter_offsets("g", {TP0: OffsetAndMetadata(3)})
    coordinator.delete_group("g")
    assert coordinator.list_groups() == []
    assert coordinator.offset_fetch("g") == {}
    with pytest.raises(GroupIdNotFoundError):
        coordinator.delete_group("g")


def test_delete_offsets_keeps_those_of_the_topics_the_generation_subscribes_to(coordinator,
                                                                               broker):
    # Kafka's OffsetMetadataManager.deleteOffsets: GROUP_SUBSCRIBED_TO_TOPIC for each
    # partition of a topic the group subscribes to (ClassicGroup.isSubscribedToTopic, from
    # the subscriptions taken when a generation starts: initNextGeneration), the others'
    # offsets deleted; an unknown group is GROUP_ID_NOT_FOUND.
    broker.create_topic("u", 1)
    tpu = TopicPartition("u", 0)
    with pytest.raises(GroupIdNotFoundError):
        coordinator.delete_offsets("g", [TP0])
    coordinator.offset_commit("g", "", -1, None, {TP0: 1, TP1: 1, tpu: 1})
    assert coordinator.delete_offsets("g", [TP0]) == {TP0: None}   # no member: any offset
    assert set(coordinator.offset_fetch("g")) == {TP1, tpu}
    a = Client(coordinator)
    join_alone(a)                                                   # subscribes to "t"
    outcome = coordinator.delete_offsets("g", [TP1, TopicPartition("t", 9)])
    assert isinstance(outcome[TP1], GroupSubscribedToTopicError)
    assert isinstance(outcome[TopicPartition("t", 9)], UnknownTopicOrPartitionError)
    # A member joining with "u" counts once its generation starts: while the group
    # rebalances, "u" is still no generation's topic and its offset goes.
    b = Client(coordinator, protocols=(("range", Subscription(["u"])),))
    b_pending = b.join()
    assert state(coordinator) == PREPARING_REBALANCE
    assert coordinator.delete_offsets("g", [tpu]) == {tpu: None}
    assert set(coordinator.offset_fetch("g")) == {TP1}
    a.joined(a.join())
    b.joined(b_pending)
    assert isinstance(coordinator.delete_offsets("g", [tpu])[tpu], GroupSubscribedToTopicError)
    assert set(coordinator.offset_fetch("g")) == {TP1}


def test_delete_offsets_of_a_group_with_members_of_another_kind(coordinator):
    # ClassicGroup.validateOffsetDelete: a group with members that is not a consumer group
    # is NON_EMPTY_GROUP; a consumer group whose subscriptions do not parse is taken to
    # subscribe to every topic (isSubscribedToTopic's orElse(usesConsumerGroupProtocol)).
    connect = coordinator.join_group("h", "", None, "c", 10_000, 10_000, "connect",
                                     [("default", b"\x00")], lambda *_: None)
    result(connect)
    with pytest.raises(NonEmptyGroupError):
        coordinator.delete_offsets("h", [TP0])
    opaque = Client(coordinator, protocols=(("range", b"not the consumer protocol"),))
    opaque.joined(opaque.join())
    assert isinstance(coordinator.delete_offsets("g", [TP0])[TP0], GroupSubscribedToTopicError)
    coordinator.leave_group("g", opaque.member_id)
    assert coordinator.delete_offsets("g", [TP0]) == {TP0: None}    # Empty again


def test_deleting_an_offset_drops_it_from_an_open_transaction_too(coordinator):
    # Kafka's OffsetMetadataManager.replay: an offset's tombstone removes it from every
    # open transaction of the group, so the commit marker does not bring it back.
    coordinator.txn_offset_commit("g", 1000, 0, "", -1, None, {TP0: OffsetAndMetadata(3),
                                                              TP1: OffsetAndMetadata(4)})
    assert coordinator.offset_fetch_stable("g")[1] == {TP0, TP1}
    assert coordinator.delete_offsets("g", [TP0]) == {TP0: None}
    assert coordinator.offset_fetch_stable("g")[1] == {TP1}
    coordinator.complete_transaction(coordinator.offsets_partition("g"), 1000, commit=True)
    assert {tp: c.offset for tp, c in coordinator.offset_fetch("g").items()} == {TP1: 4}


def test_deleting_a_topic_deletes_every_groups_offsets_of_it(coordinator, broker, tmp_path):
    # Kafka's broker tells its GroupCoordinator of deleted partitions
    # (BrokerMetadataPublisher: onPartitionsDeleted), and OffsetMetadataManager
    # .onPartitionsDeleted writes a tombstone for each group's offset of them, committed or
    # pending in an open transaction: a topic made again under the name starts with no
    # committed offset, where the old ones would skip its first records.
    broker.create_topic("u", 1)
    tpu = TopicPartition("u", 0)
    coordinator.offset_commit("g", "", -1, None, {TP0: 5, TP1: 6, tpu: 1})
    coordinator.offset_commit("h", "", -1, None, {TP1: 2})
    coordinator.txn_offset_commit("p", 1000, 0, "", -1, None, {TP0: OffsetAndMetadata(3)})
    broker.delete_topic("t")
    assert set(coordinator.offset_fetch("g")) == {tpu}
    assert coordinator.offset_fetch("h") == {} and coordinator.offset_fetch_stable("p")[1] == set()
    coordinator.complete_transaction(coordinator.offsets_partition("p"), 1000, commit=True)
    assert coordinator.offset_fetch("p") == {}
    broker.create_topic("t", 2)
    assert coordinator.offset_fetch("g", [TP0, TP1]) == {TP0: None, TP1: None}
    # The tombstones are in the log: the offsets stay deleted when it is read again.
    broker.close()
    reopened = Broker(str(tmp_path / "db"), config={"offsets.topic.num.partitions": 3})
    try:
        assert set(find_coordinator(reopened).offset_fetch("g")) == {tpu}
    finally:
        reopened.close()


def test_deleting_a_group_drops_its_offsets_pending_in_open_transactions(coordinator):
    # Kafka's OffsetMetadataManager.deleteAllOffsets: a tombstone for each partition with a
    # committed or a pending offset, so no commit marker brings one back to a deleted group.
    coordinator.offset_commit("g", "", -1, None, {TP0: 1})
    coordinator.txn_offset_commit("g", 1000, 0, "", -1, None, {TP1: OffsetAndMetadata(4)})
    coordinator.delete_group("g")
    coordinator.complete_transaction(coordinator.offsets_partition("g"), 1000, commit=True)
    assert coordinator.offset_fetch("g") == {}


def test_expiry_spares_an_offset_and_its_group_while_a_transaction_holds_one(coordinator,
                                                                             broker):
    # OffsetMetadataManager.cleanupExpiredOffsets: an offset with a pending transactional
    # offset of its partition does not expire yet, and a group with an open transaction
    # is not removed; the transaction's commit then gives the offset it holds.
    retention_ms = broker.config.offsets_retention_minutes * 60_000
    coordinator.offset_commit("solo", "", -1, None, {TP0: 1})
    t0 = coordinator.offset_fetch("solo")[TP0].commit_timestamp
    coordinator.txn_offset_commit("solo", 1000, 0, "", -1, None, {TP0: OffsetAndMetadata(7)})
    assert coordinator.expire_offsets(t0 + retention_ms) == 0
    assert coordinator.describe_group("solo").state == EMPTY
    coordinator.complete_transaction(coordinator.offsets_partition("solo"), 1000, commit=True)
    assert coordinator.offset_fetch("solo")[TP0].offset == 7


def test_expiry_keeps_an_empty_group_whose_only_offsets_are_pending_in_a_transaction(
        coordinator, broker):
    # Kafka keeps an Empty group while an open transaction holds offsets for it, committed
    # offsets or none: OffsetMetadataManager.cleanupExpiredOffsets answers false for a
    # group in its openTransactions (for one without committed offsets since KAFKA-19163,
    # apache/kafka#19496), so GroupCoordinatorShard.cleanupGroupMetadata does not call
    # GroupMetadataManager.maybeDeleteGroup; the classic coordinator agrees (its
    # GroupMetadataManager.cleanupGroupMetadata deletes an Empty group only without
    # GroupMetadata.hasOffsets, which counts pendingTransactionalOffsetCommits).
    retention_ms = broker.config.offsets_retention_minutes * 60_000
    a = Client(coordinator)
    join_alone(a)
    coordinator.leave_group("g", a.member_id)
    coordinator.txn_offset_commit("g", 1000, 0, "", -1, None, {TP0: OffsetAndMetadata(5)})
    before = coordinator.describe_group("g")
    assert (before.state, before.protocol_type, before.offsets) == (EMPTY, "consumer", {})
    later = broker.clock_ms() + 2 * retention_ms
    assert coordinator.expire_offsets(later) == 0
    assert coordinator.describe_group("g") == before
    # The commit gives the group its offset; Empty past retention, the next cleanup then
    # expires it and deletes the group, which nothing holds any more.
    coordinator.complete_transaction(coordinator.offsets_partition("g"), 1000, commit=True)
    assert coordinator.offset_fetch("g")[TP0].offset == 5
    assert coordinator.expire_offsets(later) == 1
    with pytest.raises(GroupIdNotFoundError):
        coordinator.describe_group("g")


def test_groups_and_offsets_survive_a_reopen_and_come_back_empty(tmp_path):
    path = str(tmp_path / "db")
    broker = Broker(path, config={"offsets.topic.num.partitions": 3})
    broker.create_topic("t", 2)
    coordinator = find_coordinator(broker)
    a = Client(coordinator)
    join_alone(a)
    a.commit({TP0: OffsetAndMetadata(11)})
    broker.close()   # the member dies with the process

    broker = Broker(path)
    try:
        coordinator = find_coordinator(broker)
        d = coordinator.describe_group("g")
        assert d.state == EMPTY and d.generation == 1 and d.protocol_type == "consumer"
        assert d.offsets[TP0].offset == 11
        b = Client(coordinator)
        assert b.joined(b.join()).generation == 2
    finally:
        broker.close()


def test_offsets_expire_by_kafkas_rules(coordinator, broker):
    retention_ms = broker.config.offsets_retention_minutes * 60_000
    # An offsets-only group: each offset expires retention after its commit.
    coordinator.offset_commit("solo", "", -1, None, {TP0: 1})
    t0 = coordinator.offset_fetch("solo")[TP0].commit_timestamp
    assert coordinator.expire_offsets(t0 + retention_ms - 1) == 0
    assert coordinator.expire_offsets(t0 + retention_ms) == 1
    assert "solo" not in [g.group_id for g in coordinator.list_groups()]  # nothing left

    # A consumer group: offsets live while it has members; expire retention after it empties.
    a = Client(coordinator, group="app")
    join_alone(a)
    a.commit({TP0: 5})
    now = coordinator.offset_fetch("app")[TP0].commit_timestamp
    assert coordinator.expire_offsets(now + 10 * retention_ms) == 0   # Stable, subscribed
    coordinator.leave_group("app", a.member_id)
    empty_since = broker.clock_ms()
    assert coordinator.expire_offsets(empty_since + retention_ms - 1000) == 0
    assert coordinator.expire_offsets(empty_since + retention_ms + 1000) == 1
    with pytest.raises(GroupIdNotFoundError):
        coordinator.describe_group("app")


def test_a_stable_group_loses_only_offsets_of_topics_it_no_longer_subscribes(coordinator,
                                                                             broker):
    broker.create_topic("old", 1)
    old = TopicPartition("old", 0)
    coordinator.offset_commit("app", "", -1, None, {old: 1, TP0: 2})
    committed_at = coordinator.offset_fetch("app")[old].commit_timestamp
    a = Client(coordinator, group="app")      # subscribes to "t" only
    join_alone(a)
    retention_ms = broker.config.offsets_retention_minutes * 60_000
    assert coordinator.expire_offsets(committed_at + retention_ms) == 1
    assert set(coordinator.offset_fetch("app")) == {TP0}


def test_a_stable_group_keeps_offsets_of_its_generations_subscriptions_until_the_next(
        coordinator, broker):
    # A static member that restarts while the group is Stable with other subscriptions but
    # the same protocol gets its assignment back without a rebalance (Kafka's
    # GroupMetadataManager: "Static member which joins during Stable stage and doesn't
    # affect the selected protocol will not trigger a rebalance"). The generation still
    # subscribes to what it started with: ClassicGroup.subscribedTopics changes only in
    # initNextGeneration, and cleanupExpiredOffsets keeps every topic isSubscribedToTopic
    # names -- the rule OffsetDelete follows too.
    broker.create_topic("old", 1)
    old = TopicPartition("old", 0)
    a = Client(coordinator, group="app", instance="app-1",
               protocols=[("range", Subscription(["t", "old"]))])
    join_alone(a)
    a.commit({old: 1})
    committed_at = coordinator.offset_fetch("app")[old].commit_timestamp
    retention_ms = broker.config.offsets_retention_minutes * 60_000

    restarted = Client(coordinator, group="app", instance="app-1")   # subscribes to "t"
    assert restarted.joined(restarted.join()).skip_assignment
    assert state(coordinator, "app") == STABLE
    assert coordinator.expire_offsets(committed_at + retention_ms) == 0
    assert isinstance(coordinator.delete_offsets("app", [old])[old],
                      GroupSubscribedToTopicError)
    assert set(coordinator.offset_fetch("app")) == {old}

    coordinator.rebalance("app")   # the next generation subscribes to "t" only
    restarted.joined(restarted.join())
    result(restarted.sync({restarted.member_id: [TP0, TP1]}))
    assert coordinator.expire_offsets(committed_at + retention_ms) == 1
    assert coordinator.offset_fetch("app") == {}


class ManualClock:
    """The broker's wall clock (clock_ms), moved only by the test."""

    def __init__(self, now_ms=1_750_000_000_000):
        self.now_ms = now_ms

    def __call__(self):
        return self.now_ms


def count_expiry_runs(coordinator):
    """Count the expiry task's runs: it calls coordinator.expire_offsets() on the timer thread."""
    runs = [0]
    expire = coordinator.expire_offsets

    def counted(now_ms=None):
        try:
            return expire(now_ms)
        finally:
            runs[0] += 1

    coordinator.expire_offsets = counted
    return runs


def wait_for_two_runs(runs):
    """Two more runs: the second one began after this call, so it read the clock as set now."""
    target = runs[0] + 2
    deadline = time.monotonic() + GENEROUS_S
    while runs[0] < target:
        assert time.monotonic() < deadline, "the expiry task stopped running"
        time.sleep(0.005)


def test_the_expiry_task_drops_offsets_of_a_group_empty_for_the_retention_across_a_reopen(
        tmp_path):
    """offsets.retention.check.interval.ms runs the expiry on the timer; the clock is manual.

    The group empties at t0. Its group record keeps t0, so after a reopen it
    has still been Empty since t0 (not since the reopen): its offsets go
    once t0 + offsets.retention.minutes has come, and stay gone.
    """
    path = str(tmp_path / "db")
    clock = ManualClock()
    config = {"offsets.topic.num.partitions": 3, "offsets.retention.minutes": 1,
              "offsets.retention.check.interval.ms": 10}
    retention_ms = 60_000
    broker = Broker(path, config=config, clock_ms=clock)
    broker.create_topic("t", 2)
    coordinator = find_coordinator(broker)
    a = Client(coordinator)
    join_alone(a)
    a.commit({TP0: OffsetAndMetadata(5)})
    clock.now_ms += retention_ms   # members keep a group's offsets however old they are
    wait_for_two_runs(count_expiry_runs(coordinator))
    assert coordinator.offset_fetch("g")[TP0].offset == 5
    coordinator.leave_group("g", a.member_id)
    empty_since = clock.now_ms
    assert state(coordinator) == EMPTY
    clock.now_ms = empty_since + retention_ms // 2
    wait_for_two_runs(count_expiry_runs(coordinator))
    assert coordinator.offset_fetch("g")[TP0].offset == 5
    broker.close()

    clock.now_ms = empty_since + retention_ms - 1
    broker = Broker(path, config=config, clock_ms=clock)
    try:
        coordinator = find_coordinator(broker)
        runs = count_expiry_runs(coordinator)
        wait_for_two_runs(runs)
        assert coordinator.offset_fetch("g")[TP0].offset == 5   # 1 ms to go
        clock.now_ms = empty_since + retention_ms
        wait_for_two_runs(runs)
        assert coordinator.offset_fetch("g") == {}
        with pytest.raises(GroupIdNotFoundError):   # nothing left: the group is forgotten
            coordinator.describe_group("g")
    finally:
        broker.close()

    broker = Broker(path, config=config, clock_ms=clock)
    try:
        coordinator = find_coordinator(broker)
        assert coordinator.offset_fetch("g") == {} and coordinator.list_groups() == []
    finally:
        broker.close()


@contextlib.contextmanager
def coordinator_configured(tmp_path, **config):
    """The coordinator of a broker of its own, opened with these database configs."""
    broker = Broker(str(tmp_path / "db"), config=dict(config, **{
        "offsets.topic.num.partitions": 1}))
    try:
        broker.create_topic("t", 2)
        yield find_coordinator(broker)
    finally:
        broker.close()


def test_the_initial_delay_ends_with_the_members_there_are(tmp_path):
    # Kafka's tryCompleteInitialRebalanceElseSchedule: when the delay runs out the join
    # completes, without waiting for a member id handed out (KIP-394) and not joined with.
    with coordinator_configured(tmp_path, **{"group.initial.rebalance.delay.ms": 200}) \
            as coordinator:
        a = Client(coordinator, rebalance_ms=600_000)
        b = Client(coordinator, session_ms=600_000)
        waiting = a.join()
        with pytest.raises(MemberIdRequiredError):
            b.join(require_known_member_id=True)
        assert not waiting.wait(0.05)   # the delay first
        assert [m[0] for m in a.joined(waiting).members] == [a.member_id]
        assert state(coordinator) == COMPLETING_REBALANCE


def test_group_max_size_refuses_the_member_past_it(tmp_path):
    # Kafka's acceptJoiningMember: a new member of a group with a generation is refused
    # at group.max.size members; one already in it rejoins. While the group rebalances,
    # the members waiting count: one that has not rejoined yet, past the maximum, is
    # refused and removed (a lowered maximum sheds the last rejoiners).
    with coordinator_configured(tmp_path, **{"group.max.size": 2}) as coordinator:
        a, b, c = (Client(coordinator) for _ in range(3))
        form_group(a, b)
        with pytest.raises(GroupMaxSizeReachedError):
            c.join()
        with pytest.raises(GroupMaxSizeReachedError):
            c.join(require_known_member_id=True)   # no id handed out either
        assert len(coordinator.describe_group("g").members) == 2
        a_pending = a.join()                   # the leader rejoins: the group rebalances
        assert state(coordinator) == PREPARING_REBALANCE
        coordinator._config = dataclasses.replace(coordinator._config, group_max_size=1)
        with pytest.raises(GroupMaxSizeReachedError):
            b.join()                           # one waits already: b is past the maximum
        assert [m.member_id for m in coordinator.describe_group("g").members] == [a.member_id]
        assert a.joined(a_pending).members == [(a.member_id, None, SUB)]
