"""A consumer's side of group membership: join, sync, heartbeats, commits, listeners.

This is Kafka's ConsumerCoordinator, for a coordinator in the same process.
The consumer's thread drives it from poll(): each poll takes the membership
as far as it can go without waiting --

    UNJOINED --join sent--> JOINING --answer; the leader assigns--> SYNCING
        ^                                                               |
        +--- rebalance / removed / generation over <--- STABLE <--------+

-- and then fetches (a cooperative member keeps fetching the partitions it
owns while the group rebalances; an eager one has revoked them all before
joining). The coordinator's notify() callback and the heartbeat task only
ever raise a flag and wake the poll (the long-poll fetch is watched under
this member's wake-up key); every change of state happens on the consumer's
thread, so listeners run there, as in Kafka.

Heartbeats run on the broker's timer thread every heartbeat_interval_ms,
whether or not the application polls. The same task enforces
max_poll_interval_ms: past it, a dynamic member leaves the group (a static
one just stops heartbeating and lets its session expire), and the next
poll() reports its partitions lost and joins again.

Subscriptions sent with a join carry, per assignor, what that assignor
needs: cooperative-capable assignors get the partitions the member owns
now; eager-only ones (range, roundrobin, sticky) get the previous
assignment, which is what Kafka's sticky assignor keeps in its user data.
"""
import logging
import re
import threading
import time
from typing import NamedTuple

from ..coordinator.assignors import (COOPERATIVE, EAGER, Subscription, get_assignor,
                                     reassigned_before_revoked, rebalance_protocol,
                                     supported_protocols)
from ..coordinator.group_coordinator import FENCED, REMOVED, find_coordinator
from ..errors import (CommitFailedError, FencedInstanceIdError, IllegalGenerationError,
                      IllegalStateError, InvalidConfigurationError,
                      InvalidRegularExpressionError, InvalidRequestError,
                      RebalanceInProgressError, StreamlogError, UnknownMemberIdError)
from ..structs import OffsetAndMetadata, TopicPartition
from .validation import by_topic_partition

log = logging.getLogger("streamlog.consumer")

UNJOINED, JOINING, SYNCING, STABLE = "unjoined", "joining", "syncing", "stable"
PROTOCOL_TYPE = "consumer"
_GROUP_ERRORS = (IllegalGenerationError, UnknownMemberIdError, RebalanceInProgressError)


class ConsumerGroupMetadata(NamedTuple):
    """What a transactional producer needs to commit offsets for this consumer's group."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: object


class GroupMembership:
    """One consumer's membership of its group (made when the consumer has a group_id).

    The owner (the Consumer) keeps the assignment and positions and provides
    assignment(), replace_assignment(tps), start_from_committed(tps),
    consumed_offsets() and wake() (end any wait of its poll()).
    """

    def __init__(self, broker, settings, owner):
        self._broker = broker
        self._owner = owner   # the Consumer: owns assignment and positions
        self.group_id = settings["group.id"]
        self.instance_id = settings["group.instance.id"]
        self._client_id = settings["client.id"]
        self._session_timeout_ms = settings["session.timeout.ms"]
        self._heartbeat_interval_ms = settings["heartbeat.interval.ms"]
        self._max_poll_interval_ms = settings["max.poll.interval.ms"]
        self._exclude_internal = settings["exclude.internal.topics"]
        if self._heartbeat_interval_ms >= self._session_timeout_ms:
            raise InvalidConfigurationError(
                f"heartbeat_interval_ms ({self._heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self._session_timeout_ms})")
        self._assignors = [get_assignor(a) for a in settings["partition.assignment.strategy"]]
        names = [a.name for a in self._assignors]
        if len(set(names)) != len(names):
            raise InvalidConfigurationError(f"partition_assignment_strategy names an assignor "
                                            f"twice: {names}")
        self.protocol = rebalance_protocol(self._assignors)
        self._coordinator = find_coordinator(broker)

        self.member_id = ""
        self.generation = -1
        self.assignor_name = None
        self._leader_view = None     # leader: ({topic: partitions} it assigned, all topics)
        self._state = UNJOINED
        self._pending = None
        self._rejoin = False
        self._previous = []          # the last assignment (eager-only assignors' history)

        self._topics = None          # subscribed topic names (matched, for a pattern)
        self._pattern = None
        self._listener = None
        self._metadata_version = None

        self._lock = threading.Lock()   # last poll time and what the timer thread decides
        self._last_poll = time.monotonic()
        self._left_for_poll_timeout = None
        self._removed = None         # member id the coordinator removed
        self._fenced = None
        self._woken = False          # set from other threads; read by the consumer thread
        self._heartbeat_task = None
        self._heartbeats = True      # tests turn heartbeats off to simulate a dead member
        self._closed = False

        self._auto_commit = settings["enable.auto.commit"]
        self._auto_commit_ms = settings["auto.commit.interval.ms"]
        self._next_auto_commit = time.monotonic() + self._auto_commit_ms / 1000
        self._last_committed = {}
        self._commit_callbacks = []

    # --- subscription ------------------------------------------------------------

    @property
    def subscribed(self):
        return self._topics is not None

    def subscribe(self, topics, pattern, listener):
        self._listener = listener
        self._pattern = pattern
        topics = self._match(pattern) if pattern is not None else sorted(set(topics))
        # The same topics again need no rebalance (Kafka's rejoinNeededOrPending compares
        # the joined subscription): an eager one would revoke and re-read them all.
        if topics != self._topics:
            self._rejoin = True
        self._topics = topics
        self._metadata_version = self._broker.metadata.version

    def subscription(self):
        return set(self._topics or ())

    def _match(self, pattern):
        return sorted(name for name, info in self._broker.topics().items()
                      if pattern.fullmatch(name) and not (info.internal and
                                                          self._exclude_internal))

    def unsubscribe(self):
        if self.subscribed:
            self._revoke_all("unsubscribed", lost=self.generation < 0)
            self._leave("the consumer unsubscribed")
        self._topics = self._pattern = self._listener = None
        self._state = UNJOINED

    # --- wake-ups from other threads --------------------------------------------------

    def _notify(self, event, member_id):
        if event == REMOVED:
            self._removed = member_id
        elif event == FENCED:
            self._fenced = member_id
        self._wake()

    def _wake(self):
        # The flag first: the owner's wait checks it, so a wake-up racing the start of a
        # wait is never lost.
        self._woken = True
        self._owner.wake()

    def interrupted(self):
        """True when something needs poll()'s attention (checked by a waiting fetch)."""
        return self._woken

    # --- the poll-time step ------------------------------------------------------------

    def poll(self):
        """Advance the membership as far as it goes without waiting (consumer's thread)."""
        with self._lock:
            self._last_poll = time.monotonic()
            left, self._left_for_poll_timeout = self._left_for_poll_timeout, None
        woken, self._woken = self._woken, False
        self._run_commit_callbacks()
        if self._fenced is not None and self._fenced == self.member_id:
            raise FencedInstanceIdError(
                f"another consumer joined group {self.group_id!r} with group_instance_id "
                f"{self.instance_id!r}; this consumer is fenced: close it")
        if left is not None and left == self.member_id:
            self._lose(f"poll() was not called within max_poll_interval_ms "
                       f"({self._max_poll_interval_ms} ms), so the member left the group",
                       reset_member=True)
        if self._removed is not None and self._removed == self.member_id:
            self._removed = None
            self._lose("the coordinator removed the member (session timeout, or it did not "
                       "rejoin within the rebalance timeout)", reset_member=True)
        if not self.subscribed:
            self.maybe_auto_commit()
            return
        self._check_metadata()
        self.maybe_auto_commit()
        while self._advance():
            pass
        if woken and self._state == STABLE:
            # Checked after the answers are taken in: a rebalance may have started while
            # this member was syncing, and one wake-up flag covers both notifications.
            self._check_membership()
            while self._advance():
                pass

    def _advance(self):
        if self._state in (UNJOINED, STABLE) and (self._rejoin or self._state == UNJOINED):
            self._join()
            return True
        if self._state in (JOINING, SYNCING) and self._pending.done():
            if self._state == JOINING:
                self._on_join_answer()
            else:
                self._on_sync_answer()
            return True
        return False

    @property
    def stable(self):
        return self._state == STABLE

    def _check_membership(self):
        """After a notification: is this member still in the current generation?"""
        try:
            self._coordinator.heartbeat(self.group_id, self.member_id, self.generation,
                                        self.instance_id)
        except RebalanceInProgressError:
            self._rejoin = True
        except IllegalGenerationError:
            self._lose("the group moved to a new generation without this member",
                       reset_member=False)
        except UnknownMemberIdError:
            self._lose("the member is no longer in the group", reset_member=True)

    def _check_metadata(self):
        version = self._broker.metadata.version
        if version == self._metadata_version:
            return
        self._metadata_version = version
        if self._pattern is not None:
            matched = self._match(self._pattern)
            if matched != self._topics:
                log.info("group %s: pattern %s now matches %s", self.group_id,
                         self._pattern.pattern, matched)
                self._topics = matched
                self._rejoin = True
        if self._leader_view is not None and self._state == STABLE:
            counts, topics = self._leader_view
            if self._partition_counts(topics) != counts:
                log.info("group %s: the leader saw partitions of subscribed topics change",
                         self.group_id)
                self._rejoin = True

    def _partition_counts(self, topics):
        known = self._broker.topics()
        return {t: known[t].partitions for t in sorted(topics) if t in known}

    # --- join / sync ------------------------------------------------------------------

    def _join(self):
        if self._state == STABLE or self._owner.assignment():
            self._prepare_join()
        owned = sorted(self._owner.assignment())
        protocols = []
        for assignor in self._assignors:
            cooperative = COOPERATIVE in supported_protocols(assignor)
            protocols.append((assignor.name, Subscription(
                list(self._topics), owned if cooperative else list(self._previous),
                self.generation, self.instance_id)))
        try:
            self._pending = self._coordinator.join_group(
                self.group_id, self.member_id, self.instance_id, self._client_id,
                self._session_timeout_ms, self._max_poll_interval_ms, PROTOCOL_TYPE, protocols,
                self._notify)
        except UnknownMemberIdError:
            self._reset_member(reset_member=True)
            return
        self._state = JOINING
        self._rejoin = False
        self._start_heartbeats()

    def _prepare_join(self):
        """Before (re)joining (Kafka's onJoinPrepare).

        Without a generation the partitions are lost (another member may have
        them already); otherwise what was consumed is committed (auto-commit)
        and an eager member revokes everything, a cooperative one only the
        partitions of topics it no longer subscribes to.
        """
        if self.generation < 0:
            self._revoke_all("the member has no generation", lost=True)
            return
        if self._auto_commit:
            self._commit_quietly("before rebalancing")
        if self.protocol == EAGER:
            # Called even with nothing to revoke, as Kafka's onJoinPrepare does: "with eager
            # rebalancing, onPartitionsRevoked will always be called at the start of a
            # rebalance" (ConsumerRebalanceListener).
            self._revoke(sorted(self._owner.assignment()), even_none=True)
            return
        gone = [tp for tp in self._owner.assignment() if tp.topic not in self._topics]
        if gone:
            self._revoke(sorted(gone))

    def _on_join_answer(self):
        try:
            answer = self._pending.result()
        except (UnknownMemberIdError, IllegalGenerationError, RebalanceInProgressError) as exc:
            self._rejoin_after(exc)
            return
        with self._lock:
            self.member_id = answer.member_id
            self.generation = answer.generation
        self.assignor_name = answer.protocol
        assignments = None
        self._leader_view = None
        if answer.leader == answer.member_id and not answer.skip_assignment:
            assignments = self._assign(answer)
        try:
            self._pending = self._coordinator.sync_group(
                self.group_id, self.member_id, self.generation, self.instance_id, assignments)
        except (UnknownMemberIdError, IllegalGenerationError, RebalanceInProgressError) as exc:
            self._rejoin_after(exc)
            return
        self._state = SYNCING

    def _assign(self, answer):
        """The leader's job: run the chosen assignor over every member's subscription."""
        assignor = next(a for a in self._assignors if a.name == answer.protocol)
        subscriptions = {member_id: Subscription(*metadata)._replace(group_instance_id=instance)
                         for member_id, instance, metadata in answer.members}
        topics = set()
        for sub in subscriptions.values():
            topics.update(sub.topics)
        counts = self._partition_counts(topics)
        plan = assignor.assign(dict(counts), subscriptions)
        if self.protocol == COOPERATIVE:
            moving = reassigned_before_revoked(subscriptions, plan)
            if moving:
                raise IllegalStateError(
                    f"assignor {assignor.name!r} gave {moving} to new owners in the round their "
                    "current owners still claim them; under the cooperative protocol a "
                    "partition is revoked in one round and assigned in a follow-up one")
        self._leader_view = (counts, topics)
        return {member: sorted(TopicPartition(*tp) for tp in tps) for member, tps in plan.items()}

    def _on_sync_answer(self):
        try:
            assignment = [TopicPartition(*tp) for tp in self._pending.result()]
        except (UnknownMemberIdError, IllegalGenerationError, RebalanceInProgressError) as exc:
            self._rejoin_after(exc)
            return
        self._state = STABLE
        self._pending = None
        owned = set(self._owner.assignment())
        new = set(assignment)
        revoked, added = sorted(owned - new), sorted(new - owned)
        self._previous = sorted(new)
        errors = []
        if revoked:
            self._call("on_partitions_revoked", revoked, errors)
        self._owner.replace_assignment(sorted(new))
        self._owner.start_from_committed(added)
        log.info("group %s generation %d: member %s assigned %s (added %s, revoked %s)",
                 self.group_id, self.generation, self.member_id, sorted(new), added, revoked)
        self._call("on_partitions_assigned", added, errors)
        if revoked and self.protocol == COOPERATIVE:
            # KIP-429: partitions given up now go to their new owner in a follow-up round.
            self._rejoin = True
        if errors:
            raise errors[0]

    def _rejoin_after(self, error):
        """A join or sync answered with a group error: join again (Kafka's handlers)."""
        if isinstance(error, RebalanceInProgressError):
            self._state = UNJOINED   # same member, same generation: just another round
            self._pending = None
            self._rejoin = True
        else:
            self._reset_member(reset_member=isinstance(error, UnknownMemberIdError))

    def _reset_member(self, reset_member):
        with self._lock:
            if reset_member:
                self.member_id = ""
            self.generation = -1
        self._state = UNJOINED
        self._pending = None
        self._rejoin = True

    def _lose(self, why, reset_member):
        """The member is out of the group: its partitions are lost, not revoked (no commit)."""
        log.warning("group %s: %s; its partitions are lost and it will rejoin", self.group_id,
                    why)
        self._revoke_all(why, lost=True)
        self._reset_member(reset_member)

    def _revoke_all(self, why, lost=False):
        log.debug("group %s: revoking every partition: %s", self.group_id, why)
        self._revoke(sorted(self._owner.assignment()), lost)

    def _revoke(self, partitions, lost=False, even_none=False):
        if not partitions and not even_none:
            return
        errors = []
        self._call("on_partitions_lost" if lost else "on_partitions_revoked", partitions, errors)
        gone = set(partitions)
        self._owner.replace_assignment([tp for tp in self._owner.assignment() if tp not in gone])
        if errors:
            raise errors[0]

    def _call(self, method, partitions, errors):
        listener = self._listener
        if listener is None:
            return
        fn = getattr(listener, method, None)
        if fn is None and method == "on_partitions_lost":
            fn = getattr(listener, "on_partitions_revoked", None)  # Kafka's default
        if fn is None:
            return
        try:
            fn(list(partitions))
        except Exception as exc:  # the rebalance step finishes first; poll() raises it after
            errors.append(exc)

    # --- heartbeats --------------------------------------------------------------------

    def _start_heartbeats(self):
        if self._heartbeat_task is None and not self._closed:
            self._heartbeat_task = self._broker.timer.add(self._heartbeat_interval_ms,
                                                          self._heartbeat)

    def _heartbeat(self):
        """On the timer thread: keep the session alive; enforce max_poll_interval_ms."""
        self._heartbeat_task = None
        if self._closed:
            return
        member_id, generation = self.member_id, self.generation
        with self._lock:
            stale = (time.monotonic() - self._last_poll) * 1000 > self._max_poll_interval_ms
            if stale and member_id and self._left_for_poll_timeout is None:
                self._left_for_poll_timeout = member_id
        if stale and member_id:
            log.warning("group %s: poll() not called for over max_poll_interval_ms (%d ms): "
                        "member %s leaves the group", self.group_id,
                        self._max_poll_interval_ms, member_id)
            if self.instance_id is None:
                self._leave_quietly(member_id)
            self._wake()
            return  # heartbeats restart with the next join
        if self._heartbeats and member_id and generation >= 0:
            try:
                self._coordinator.heartbeat(self.group_id, member_id, generation,
                                            self.instance_id)
            except _GROUP_ERRORS:
                self._wake()
            except FencedInstanceIdError:
                self._fenced = member_id
                self._wake()
            except Exception:
                return  # the database is closing
        try:
            self._heartbeat_task = self._broker.timer.add(self._heartbeat_interval_ms,
                                                          self._heartbeat)
        except Exception:
            pass  # the timer closed with the database

    def stop_heartbeats(self):
        """Test hook: behave like a member whose process froze (its session will expire)."""
        self._heartbeats = False

    # --- commits ----------------------------------------------------------------------

    def commit(self, offsets, asynchronous=False, callback=None):
        """Commit {TopicPartition: offset | OffsetAndMetadata} for the group."""
        offsets = {tp: OffsetAndMetadata.of(v)
                   for tp, v in by_topic_partition(offsets, "commit()").items()}
        if asynchronous:
            try:
                self._commit(offsets)
                error = None
            except (CommitFailedError, RebalanceInProgressError) as exc:
                error = exc
            if callback is not None:
                # Kafka runs commit callbacks on the consumer's thread in a later call.
                self._commit_callbacks.append((callback, offsets, error))
            elif error is not None:
                log.warning("group %s: asynchronous commit failed: %s", self.group_id, error)
            return
        self._run_commit_callbacks()
        self._commit(offsets)

    def _commit(self, offsets):
        """Commit offsets; a partition the coordinator refuses (its topic deleted, its
        metadata too long) fails alone, after the others are stored, as Kafka's OffsetCommit
        answers per partition: all or nothing, a deleted topic's position kept the live
        topics' from being committed before a rebalance, which then read them again."""
        if not offsets:
            return
        problems = {tp: exc for tp, exc in self._coordinator.offset_problems(offsets).items()
                    if not isinstance(exc, InvalidRequestError)}   # bad arguments: ValueError
        offsets = {tp: om for tp, om in offsets.items() if TopicPartition(*tp) not in problems}
        if offsets:
            self._commit_valid(offsets)
        if problems:
            raise next(iter(problems.values()))

    def _commit_valid(self, offsets):
        managed = self.subscribed
        if managed and self.generation < 0:
            raise CommitFailedError(
                f"the consumer is not in a generation of group {self.group_id!r} (it is "
                "joining): poll() to finish joining, then commit")
        try:
            self._coordinator.offset_commit(
                self.group_id, self.member_id if managed else "",
                self.generation if managed else -1, self.instance_id if managed else None,
                offsets)
        except (IllegalGenerationError, UnknownMemberIdError) as exc:
            if managed and self._state in (JOINING, SYNCING):
                # The group already formed the generation this member is joining; its
                # partitions are still its own until poll() takes in the answer (Kafka's
                # RebalanceInProgressException: retriable).
                raise RebalanceInProgressError(
                    f"group {self.group_id!r} is rebalancing and this member has not finished "
                    "rejoining: call poll() to complete the rebalance, then commit again"
                ) from None
            if managed:
                self._rejoin = True
                raise CommitFailedError(
                    f"commit refused: group {self.group_id!r} has rebalanced since this member "
                    f"joined generation {self.generation} ({exc}), so its partitions may belong "
                    "to another member now. This happens when the time between poll() calls "
                    "exceeds max_poll_interval_ms: process fewer records per poll "
                    "(max_poll_records) or raise max_poll_interval_ms. poll() rejoins the "
                    "group.") from None
            raise CommitFailedError(
                f"commit refused: group {self.group_id!r} has active members, and a consumer "
                "outside the group (assign()) may only commit to a group with none") from None
        except RebalanceInProgressError:
            raise RebalanceInProgressError(
                f"group {self.group_id!r} is completing a rebalance; call poll() to finish it, "
                "then commit") from None
        self._last_committed.update(offsets)

    def _commit_quietly(self, when):
        """The auto-commit on close and before a rebalance: a failure is logged, whatever it
        is, as Kafka's maybeAutoCommitOffsetsSync logs it (ConsumerCoordinator): close()
        must leave the group, and a commit no one asked for must not fail the call (a
        read-only database, a topic deleted meanwhile)."""
        offsets = self._owner.consumed_offsets()
        try:
            self._commit(offsets)
        except StreamlogError as exc:
            log.warning("group %s: committing %s failed: %s", self.group_id, when, exc)

    def maybe_auto_commit(self):
        """Commit the positions that changed, once auto.commit.interval.ms has passed since
        the last auto-commit (Kafka's maybeAutoCommitOffsetsAsync): at each poll(), and by
        assign() before it drops partitions."""
        if not self._auto_commit or time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self._auto_commit_ms / 1000
        if self.subscribed and self._state != STABLE:
            return
        changed = {tp: om for tp, om in self._owner.consumed_offsets().items()
                   if self._last_committed.get(tp) != om}
        if changed:
            try:
                self._commit(changed)
            except FencedInstanceIdError:
                raise  # Kafka's consumer raises a fenced static member's commit in poll()
            except StreamlogError as exc:
                # Logged, as Kafka's autoCommitOffsetsAsync logs it: poll() goes on.
                log.warning("group %s: auto-commit failed: %s", self.group_id, exc)

    def _run_commit_callbacks(self):
        while self._commit_callbacks:
            callback, offsets, error = self._commit_callbacks.pop(0)
            callback(offsets, error)

    def stable_committed(self, partitions):
        """({tp: OffsetAndMetadata or None}, the partitions whose offset is pending in an
        open transaction): what a consumer starts from, once none of its is pending."""
        found, pending = self._coordinator.offset_fetch_stable(self.group_id, partitions)
        return ({tp: (None if c is None else
                      OffsetAndMetadata(c.offset, c.metadata, c.leader_epoch))
                 for tp, c in found.items()}, pending & set(found))

    def group_metadata(self):
        return ConsumerGroupMetadata(self.group_id, self.generation, self.member_id,
                                     self.instance_id)

    # --- leaving ---------------------------------------------------------------------

    def _leave(self, why):
        if self.member_id and self.instance_id is None:
            log.info("group %s: member %s leaves (%s)", self.group_id, self.member_id, why)
            self._leave_quietly(self.member_id)
        self._reset_member(reset_member=True)
        self._rejoin = False

    def _leave_quietly(self, member_id):
        try:
            self._coordinator.leave_group(self.group_id, member_id, self.instance_id)
        except (UnknownMemberIdError, FencedInstanceIdError):
            pass  # already out of the group

    def close(self):
        """Commit (auto-commit), revoke, and leave the group (static members stay)."""
        if self._closed:
            return
        try:
            self._run_commit_callbacks()
            if self._auto_commit and (not self.subscribed or self.generation >= 0):
                self._commit_quietly("on close")
            if self.subscribed:
                self._revoke_all("the consumer is closing", lost=self.generation < 0)
                self._leave("the consumer closed")
        finally:
            self._closed = True
            if self._heartbeat_task is not None:
                self._broker.timer.cancel(self._heartbeat_task)


def parse_subscription(topics, pattern):
    """(topics list or None, compiled pattern or None) from subscribe()'s arguments."""
    if isinstance(topics, re.Pattern):
        topics, pattern = None, topics
    if pattern is not None:
        if topics:
            raise IllegalStateError("subscribe() takes topics or a pattern, not both")
        if isinstance(pattern, str):
            try:
                pattern = re.compile(pattern)
            except re.error as exc:
                raise InvalidRegularExpressionError(
                    f"subscribe() pattern {pattern!r} is not a valid regular expression: "
                    f"{exc}") from None
        if not isinstance(pattern, re.Pattern):
            raise TypeError(f"pattern must be a str or compiled regex, got {pattern!r}")
        return None, pattern
    if isinstance(topics, str):
        topics = [topics]
    if topics is None:
        raise TypeError("subscribe() needs a list of topics or a pattern")
    topics = list(topics)
    for topic in topics:
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topics must be non-empty strings, got {topic!r}")
    return topics, None
