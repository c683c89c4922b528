"""Hypothesis drives the group coordinator with random member requests and checks its invariants.

Members join, rejoin, sync (the leader hands in a round-robin plan), heartbeat,
commit and leave in any order, with answers taken in whenever a rule looks at
them. Session and rebalance timeouts are long, so only the requests move the
group (the sequence is deterministic). After every step:

- the state is one of Kafka's and the generation never goes down;
- a request fails only with the errors Kafka's protocol defines for it;
- every join answer carries the generation the group had when it formed, and
  its leader is a member of that generation;
- a Stable group hands out a plan in which no partition has two owners and
  every member's assignment is what the leader gave it;
- an Empty group has no members; a group with members is never Empty.
"""
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from streamlog.broker.broker import Broker
from streamlog.coordinator.assignors import Subscription
from streamlog.coordinator.group import (COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE,
                                         STABLE)
from streamlog.coordinator.group_coordinator import find_coordinator
from streamlog.errors import (IllegalGenerationError, RebalanceInProgressError,
                              UnknownMemberIdError)
from streamlog.structs import OffsetAndMetadata, TopicPartition

PARTITIONS = [TopicPartition("t", p) for p in range(6)]
LONG_MS = 600_000
PROTOCOL_ERRORS = (IllegalGenerationError, RebalanceInProgressError, UnknownMemberIdError)


class Member:
    def __init__(self, name):
        self.name = name
        self.member_id = ""
        self.generation = -1
        self.join = None      # pending join answer
        self.sync = None      # pending sync answer
        self.gone = False


class CoordinatorModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        import tempfile
        self.tmp = tempfile.TemporaryDirectory()
        self.broker = Broker(self.tmp.name + "/db", config={"offsets.topic.num.partitions": 1})
        self.broker.create_topic("t", len(PARTITIONS))
        self.c = find_coordinator(self.broker)
        self.members = []
        self.max_generation = 0
        self.plans = {}   # generation -> the leader's plan

    def teardown(self):
        self.broker.close()
        self.tmp.cleanup()

    # --- helpers ---------------------------------------------------------------------

    def _live(self):
        return [m for m in self.members if not m.gone]

    def _take_answers(self):
        for m in self._live():
            if m.join is not None and m.join.done():
                pending, m.join = m.join, None
                try:
                    answer = pending.result()
                except PROTOCOL_ERRORS:
                    continue
                m.member_id, m.generation = answer.member_id, answer.generation
                assert answer.generation >= 1
                assert answer.leader in {x.member_id for x in self.members}
            if m.sync is not None and m.sync.done():
                pending, m.sync = m.sync, None
                try:
                    assignment = pending.result()
                except PROTOCOL_ERRORS:
                    continue
                plan = self.plans.get(m.generation)
                if plan is not None:
                    assert list(assignment) == plan.get(m.member_id, [])

    def _group(self):
        return self.c._groups.get("g")

    # --- rules -------------------------------------------------------------------------

    @rule(name=st.sampled_from("abcdef"))
    def new_member_joins(self, name):
        m = Member(name)
        self.members.append(m)
        m.join = self.c.join_group("g", "", None, name, 10_000, LONG_MS, "consumer",
                                   [("range", Subscription(["t"]))], lambda *_: None)
        self._take_answers()

    @rule(i=st.integers(0, 20))
    def member_rejoins(self, i):
        live = [m for m in self._live() if m.member_id and m.join is None]
        if not live:
            return
        m = live[i % len(live)]
        try:
            m.join = self.c.join_group("g", m.member_id, None, m.name, 10_000, LONG_MS,
                                       "consumer", [("range", Subscription(["t"]))],
                                       lambda *_: None)
        except UnknownMemberIdError:
            m.gone = True
        self._take_answers()

    @rule(i=st.integers(0, 20))
    def member_syncs(self, i):
        self._take_answers()
        live = [m for m in self._live() if m.member_id and m.join is None and m.sync is None]
        if not live:
            return
        m = live[i % len(live)]
        group = self._group()
        plan = None
        if group is not None and group.leader == m.member_id and \
                group.generation == m.generation:
            ids = list(group.members)
            plan = {mid: PARTITIONS[k::len(ids)] for k, mid in enumerate(ids)}
            self.plans.setdefault(m.generation, plan)
            plan = self.plans[m.generation]
        try:
            m.sync = self.c.sync_group("g", m.member_id, m.generation, None, plan)
        except PROTOCOL_ERRORS:
            pass
        self._take_answers()

    @rule()
    def every_member_follows_the_group(self):
        """What well-behaved clients do when notified: rejoin a rebalance, then sync."""
        group = self._group()
        if group is not None and group.state == PREPARING_REBALANCE:
            for k in range(len(self.members)):
                self.member_rejoins(k)
        self._take_answers()
        for k in range(len(self.members)):
            self.member_syncs(k)

    @rule(i=st.integers(0, 20))
    def member_heartbeats_or_commits(self, i):
        live = [m for m in self._live() if m.member_id]
        if not live:
            return
        m = live[i % len(live)]
        try:
            if i % 2:
                self.c.heartbeat("g", m.member_id, m.generation)
            else:
                self.c.offset_commit("g", m.member_id, m.generation, None,
                                     {PARTITIONS[0]: OffsetAndMetadata(i)})
        except PROTOCOL_ERRORS:
            pass

    @rule(i=st.integers(0, 20))
    def member_leaves(self, i):
        live = [m for m in self._live() if m.member_id]
        if not live:
            return
        m = live[i % len(live)]
        try:
            self.c.leave_group("g", m.member_id)
        except UnknownMemberIdError:
            pass
        m.gone = True
        self._take_answers()

    # --- invariants -----------------------------------------------------------------------

    @invariant()
    def group_is_consistent(self):
        group = self._group()
        if group is None:
            return
        assert group.state in (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE)
        assert group.generation >= self.max_generation
        self.max_generation = group.generation
        if group.state == EMPTY:
            assert not group.members
        else:
            assert group.members
            assert group.leader in group.members or group.state == PREPARING_REBALANCE
        if group.state == STABLE:
            owners = {}
            for member in group.members.values():
                for tp in member.assignment:
                    assert tp not in owners, f"{tp} owned twice"
                    owners[tp] = member.member_id
            plan = self.plans.get(group.generation)
            if plan is not None:
                for member in group.members.values():
                    assert list(member.assignment) == plan.get(member.member_id, [])


CoordinatorModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40,
                                              deadline=None)
test_coordinator_model = pytest.mark.filterwarnings("ignore")(CoordinatorModel.TestCase)
