"""One consumer group's state: its members, generation, protocol and leader.

The states and their allowed predecessors are Kafka's classic group
protocol:

    Empty --join--> PreparingRebalance --all joined--> CompletingRebalance
      ^                 ^   |                                   | leader's sync
      |   no members    |   +-------- no members left ----------+---> Stable
      +-----------------+<------- join / leave / expiry -------------------+
    any --delete / expiry of an Empty group--> Dead

A group is plain data plus the small decisions that depend on nothing but
that data (which protocol wins the vote, whether everyone has rejoined);
timers, waiting callers and the offsets log belong to the GroupCoordinator,
which changes a Group only under its lock.
"""
from .java_order import hashmap_order, java_string_hash

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

_VALID_PREVIOUS = {
    PREPARING_REBALANCE: (STABLE, COMPLETING_REBALANCE, EMPTY),
    COMPLETING_REBALANCE: (PREPARING_REBALANCE,),
    STABLE: (COMPLETING_REBALANCE,),
    EMPTY: (PREPARING_REBALANCE,),
    DEAD: (STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD),
}


class Member:
    """A member as the coordinator sees it (the consumer side is client.group_member)."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "session_timeout_ms",
                 "rebalance_timeout_ms", "protocols", "notify", "join_waiter", "sync_waiter",
                 "assignment", "session_deadline", "session_task")

    def __init__(self, member_id, group_instance_id, client_id, session_timeout_ms,
                 rebalance_timeout_ms, protocols, notify):
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocols = protocols      # [(name, metadata)], in the member's preference order
        self.notify = notify            # notify(event, member_id): tells its client what changed
        self.join_waiter = None         # Pending join answer while the member waits for a rebalance
        self.sync_waiter = None         # Pending sync answer while it waits for the leader
        self.assignment = ()
        self.session_deadline = 0.0     # monotonic ms; heartbeats push it forward
        self.session_task = None        # the timer task that checks the deadline

    def protocol_names(self):
        return [name for name, _ in self.protocols]

    def metadata(self, protocol):
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def vote(self, candidates):
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError("a member without a candidate protocol was admitted")

    @property
    def awaiting(self):
        return self.join_waiter is not None or self.sync_waiter is not None


class Group:
    __slots__ = ("group_id", "state", "generation", "protocol_type", "protocol", "leader",
                 "members", "static_members", "empty_since", "rebalance_task",
                 "rebalance_epoch", "in_initial_delay", "new_member_added",
                 "pending_members", "pending_sync", "sync_task", "subscribed")

    def __init__(self, group_id, generation=0, protocol_type=None, empty_since=0):
        self.group_id = group_id
        self.state = EMPTY
        self.generation = generation
        self.protocol_type = protocol_type  # None until a member joins: offsets-only group
        self.protocol = None
        self.leader = None
        self.members = {}          # member_id -> Member, in joining order
        self.static_members = {}   # group_instance_id -> member_id
        self.empty_since = empty_since  # wall-clock ms the group last became Empty
        self.rebalance_task = None
        self.rebalance_epoch = 0   # tells a stale rebalance timeout from the current one
        self.in_initial_delay = False   # a new group waits for more joiners
        self.new_member_added = False   # one joined during the delay's last stretch
        self.pending_members = {}  # member id handed out (MEMBER_ID_REQUIRED) -> expiry task
        # The members of this generation that have not sent SyncGroup since its join phase
        # completed, and the task that removes them a rebalance timeout later (Kafka's
        # pendingSyncMembers and expirePendingSync).
        self.pending_sync = set()
        self.sync_task = None
        # The topics the current generation's members subscribe to (None: not known), taken
        # when a generation starts, as Kafka's ClassicGroup.initNextGeneration takes them: a
        # member joining a rebalance does not count until its generation starts.
        self.subscribed = self.subscribed_topics()

    def transition(self, state):
        assert self.state in _VALID_PREVIOUS[state], f"{self.state} -> {state}"
        self.state = state

    def add(self, member):
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove(self, member):
        del self.members[member.member_id]
        self.pending_sync.discard(member.member_id)
        if self.static_members.get(member.group_instance_id) == member.member_id:
            del self.static_members[member.group_instance_id]
        if self.leader == member.member_id:
            self.leader = None

    def replace(self, old, new):
        """A static member rejoined under a new member id: same place, same assignment."""
        self.members = {(new.member_id if mid == old.member_id else mid):
                        (new if m is old else m) for mid, m in self.members.items()}
        self.static_members[new.group_instance_id] = new.member_id
        new.assignment = old.assignment
        if old.member_id in self.pending_sync:
            self.pending_sync.remove(old.member_id)
            self.pending_sync.add(new.member_id)
        if self.leader == old.member_id:
            self.leader = new.member_id

    def accepts(self, protocol_type, protocol_names):
        """Whether a member with these protocols may join (Kafka's consistency check)."""
        if not protocol_names or not protocol_type:
            return False   # Kafka's ClassicGroup.supportsProtocols refuses either empty
        if self.state == EMPTY and not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & set(protocol_names))

    def candidate_protocols(self):
        names = None
        for member in self.members.values():
            mine = set(member.protocol_names())
            names = mine if names is None else names & mine
        return names or set()

    def select_protocol(self):
        """Each member votes for its favourite shared protocol; the most votes wins.

        A tie goes where Kafka's ClassicGroup.selectProtocol sends it: to the first of the
        tied protocols in the iteration order of the java.util.HashMap that counts the
        votes (Stream.max keeps the first of equal counts), whatever order the members
        joined in. So "range" beats "roundrobin" and "cooperative-sticky" one vote each,
        as in a Kafka cluster (a rolling upgrade to cooperative-sticky meets such ties).
        """
        candidates = self.candidate_protocols()
        votes = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(hashmap_order(votes, java_string_hash), key=votes.get)

    def all_joined(self):
        """Every member rejoined, and no member id handed out (MEMBER_ID_REQUIRED) is still
        to join with it (Kafka's ClassicGroup.hasAllMembersJoined)."""
        return not self.pending_members and \
            all(m.join_waiter is not None for m in self.members.values())

    def max_rebalance_timeout_ms(self):
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self):
        """Topics some member subscribes to, or None if the metadata does not say (Kafka's
        ClassicGroup.computeSubscribedTopics: a consumer group without members subscribes
        to nothing; a group of another protocol type, or whose members' metadata does not
        parse, is not known)."""
        if self.protocol_type != "consumer":
            return None
        if not self.members:
            return set()
        if self.protocol is None:
            return None
        topics = set()
        for member in self.members.values():
            metadata = member.metadata(self.protocol)
            if getattr(metadata, "topics", None) is None:
                return None
            topics.update(metadata.topics)
        return topics

    def offset_expiry_start(self):
        """From when an offset of this group counts its retention, as a function of the
        CommittedOffset, or None while no offset of it expires (Kafka's
        ClassicGroup.offsetExpirationCondition): an offsets-only group's from each commit;
        an Empty group's from the time it became Empty; a Stable consumer group whose
        subscriptions are known, from each commit (of the topics it is not subscribed to:
        is_subscribed_to, the caller's filter, as Kafka's cleanupExpiredOffsets)."""
        if self.protocol_type is None:
            return _commit_time
        if self.state == EMPTY:
            return lambda _committed: self.empty_since
        if self.state == STABLE and self.protocol_type == "consumer" and \
                self.subscribed is not None:
            return _commit_time
        return None

    def is_subscribed_to(self, topic):
        """Whether a member of the current generation subscribes to topic (Kafka's
        ClassicGroup.isSubscribedToTopic): when the subscriptions are not known, a consumer
        group is taken to subscribe to every topic."""
        if self.subscribed is None:
            return self.protocol_type == "consumer"
        return topic in self.subscribed


def _commit_time(committed):
    return committed.commit_timestamp
