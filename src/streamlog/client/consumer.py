"""The consumer: assigned partitions, positions, long-poll fetches, records or columns.

poll() returns what is already fetched and decoded, else fetches from every
assigned, unpaused partition that has nothing buffered and waits in the
broker (a DelayedFetch on the timing wheel) until fetch.min.bytes arrive or
fetch.max.wait.ms pass -- woken by the append itself, never by sleeping in a
loop -- and repeats until records come or the poll's timeout ends.

A partition's position is the next offset poll() will return. It starts at
the auto.offset.reset end (earliest: the log start; latest: the log end; none:
NoOffsetForPartitionError), moves past each record returned and past
control batches and compaction gaps, and is reset the same way when a fetch
finds it out of range (OffsetOutOfRangeError under "none").

Records are decoded a whole batch at a time: one native call makes every
Record of the batch (native/py_per_record.c); poll_batch() returns columns
instead (client.records.RecordColumns), never a Python object per record.

Partitions come from assign() (the application picks them) or from
subscribe() (the consumer joins its group_id's group and the group's
assignor picks them; see group_member). With a group, positions of newly
assigned partitions start at the group's committed offsets, and commit()
stores positions in the group.

Thread-safety: as Kafka's consumer, one thread at a time; a second thread
entering poll/seek/assign while one is inside raises IllegalStateError (the
same thread may re-enter from a rebalance listener). wakeup() and close()
may be called from any thread: wakeup() makes the poll in progress (or the
next one) raise WakeupError; close() ends a poll in progress, then leaves
the group.
"""
import functools
import heapq
import logging
import math
import threading
import time
from collections import deque
from typing import NamedTuple

import numpy as np

from ..errors import (CorruptRecordError, IllegalStateError, InvalidGroupIdError,
                      KafkaTimeoutError, NoOffsetForPartitionError, OffsetOutOfRangeError,
                      RecordDeserializationError, StreamlogError, UnknownTopicOrPartitionError,
                      WakeupError)
from ..parsing import LONG_MAX
from ..storage import codec
from ..storage.record_batch import CONTROL_ABORT, NO_PARTITION_LEADER_EPOCH
from ..structs import OffsetAndMetadata, TopicPartition
from .config import CONSUMER, resolve
from .group_member import GroupMembership, parse_subscription
from .records import Record, RecordColumns
from .validation import by_topic_partition, check_timeout, topic_partitions

log = logging.getLogger("streamlog.consumer")

EARLIEST, LATEST = -2, -1
# How soon a partition whose committed offset is pending in a transaction is looked at
# again (Kafka's consumer retries after retry.backoff.ms, 100 ms).
_UNSTABLE_RETRY_S = 0.1


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class _Buffered:
    """Fetched, not yet returned data of one partition."""

    __slots__ = ("batches", "records", "batch", "index", "batch_end", "aborted", "aborting")

    def __init__(self, batches, aborted=None):
        self.batches = deque(batches)
        self.records = None  # decoded Records of the current batch
        self.batch = None    # the batch they are of (None: it is queued in batches again)
        self.index = 0
        self.batch_end = 0   # where the position goes once they are all returned
        # read_committed (Kafka's CompletedFetch): the fetch's aborted transactions, a heap
        # by first offset, and the producers whose aborted transaction is being read past.
        self.aborted = None
        self.aborting = set()
        if aborted:
            self.aborted = [(t.first_offset, t.producer_id) for t in aborted]
            heapq.heapify(self.aborted)

    def skips(self, batch):
        """True for a batch of an aborted transaction (read_committed): never returned."""
        aborted = self.aborted
        while aborted and aborted[0][0] <= batch.last_offset:
            self.aborting.add(heapq.heappop(aborted)[1])
        if batch.is_control:
            if batch.control_type() == CONTROL_ABORT:
                self.aborting.discard(batch.producer_id)
            return False
        return batch.is_transactional and batch.producer_id in self.aborting

    def empty(self):
        return not self.batches and (self.records is None or self.index >= len(self.records))


def _one_thread(method):
    """A call that reads or moves positions, guarded as poll() is: refused while another
    thread is inside the consumer (Kafka's acquireAndEnsureOpen), so a seek() cannot land
    in the middle of a poll() that is moving the same position."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        self._enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._exit()
    return guarded


class Consumer:
    def __init__(self, broker, config=None, **settings):
        s = self.settings = resolve(CONSUMER, "consumer", config, **settings)
        self._broker = broker
        self._reset_policy = s["auto.offset.reset"]
        self._max_wait_ms = s["fetch.max.wait.ms"]
        self._min_bytes = s["fetch.min.bytes"]
        self._read_committed = s["isolation.level"] == "read_committed"
        self._max_bytes = s["fetch.max.bytes"]
        self._partition_max_bytes = s["max.partition.fetch.bytes"]
        self._max_poll_records = s["max.poll.records"]
        self._key_deserializer = s["key.deserializer"]
        self._value_deserializer = s["value.deserializer"]
        self._verify = s["check.crcs"]
        self._api_timeout_s = s["default.api.timeout.ms"] / 1000
        self._assignment = []
        self._positions = {}
        # The leader epoch of the batch the position was taken from, or of the committed
        # offset it was set to (Kafka's FetchPosition.offsetEpoch): committed with it. A
        # position from seek() or a reset has none.
        self._position_epochs = {}
        # seek_to_beginning()/seek_to_end() asked for, found at the next poll() or position()
        # (Kafka's SubscriptionState.requestOffsetReset): {tp: EARLIEST or LATEST}.
        self._seeking_to = {}
        self._paused = set()
        self._buffers = {}
        self._start = 0
        self._closed = False
        self._closing = False
        # Reentrant: rebalance listeners run inside poll() and may seek() or commit().
        self._in_use = threading.RLock()
        self._manual = False             # assign() was used (exclusive with subscribe())
        self._wakeup_requested = False
        self._missing_reported = set()   # assigned partitions said not to exist (_topic_missing)
        self._wait = threading.Event()   # ends the wait of a poll with nothing to fetch
        self._wakeup_key = ("consumer", id(self))
        self._group = None
        if s["group.id"] is not None:
            self._group = GroupMembership(broker, s, owner=self)

    # --- guard -------------------------------------------------------------------------

    def _ensure_open(self):
        """Every call but close() and wakeup() is refused once the consumer is closed, as by
        Kafka's consumer (acquireAndEnsureOpen: "This consumer has already been closed."):
        a closed consumer has no assignment to answer from, nor a group."""
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _enter(self):
        self._ensure_open()
        if not self._in_use.acquire(blocking=False):
            if self._closing:  # close() from another thread holds it while it leaves the group
                raise IllegalStateError("the consumer is closed")
            raise IllegalStateError("a consumer is used by one thread at a time; this one is "
                                    "busy in another thread")

    def _exit(self):
        self._in_use.release()

    def _require_group(self, call):
        if self._group is None:
            raise InvalidGroupIdError(f"{call} needs a consumer group: make the consumer with "
                                      "group_id=...")
        return self._group

    # --- assignment --------------------------------------------------------------------

    def assign(self, partitions):
        """Read exactly these TopicPartitions (no group management); none is unsubscribe(),
        as in Kafka (ClassicKafkaConsumer.assign)."""
        self._enter()
        try:
            given = topic_partitions(partitions, "assign()")
            if not given:
                self.unsubscribe()
                return
            if self._group is not None and self._group.subscribed:
                raise IllegalStateError("the consumer is subscribed; assign() and subscribe() "
                                        "are exclusive: unsubscribe() first")
            tps = []
            for tp in given:
                info = self._broker.topic(tp.topic)
                if not 0 <= tp.partition < info.partitions:
                    raise UnknownTopicOrPartitionError(
                        f"topic {tp.topic!r} has partitions 0..{info.partitions - 1}, not "
                        f"{tp.partition}")
                if tp not in tps:
                    tps.append(tp)
            if self._group is not None:
                # Kafka's ClassicKafkaConsumer.assign: the partitions given up have no
                # rebalance to commit them, so the auto-commit runs first if it is due.
                self._group.maybe_auto_commit()
            self.replace_assignment(tps)
            self._manual = bool(tps)
        finally:
            self._exit()

    def subscribe(self, topics=None, pattern=None, listener=None):
        """Join the group (group_id) and read the partitions its assignor gives this consumer.

        topics: a list of topic names; or pattern: a regex (str or compiled)
        every current and future topic name fully matching it. listener: an
        object with any of on_partitions_revoked(partitions),
        on_partitions_assigned(partitions), on_partitions_lost(partitions),
        called inside poll() on this thread. The group is joined by poll().
        """
        self._enter()
        try:
            group = self._require_group("subscribe()")
            topics, pattern = parse_subscription(topics, pattern)
            if topics == []:
                # Kafka's KafkaConsumer.subscribe: "If the given list of topics is empty, it is
                # treated the same as unsubscribe()".
                self.unsubscribe()
                return
            if self._manual:
                raise IllegalStateError("the consumer has partitions from assign(); assign() and "
                                        "subscribe() are exclusive: unsubscribe() first")
            if listener is not None and not any(
                    callable(getattr(listener, name, None)) for name in
                    ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost")):
                raise TypeError(f"listener {listener!r} has none of on_partitions_revoked, "
                                "on_partitions_assigned, on_partitions_lost")
            group.subscribe(topics, pattern, listener)
        finally:
            self._exit()

    def subscription(self):
        """The topics subscribed to (those matching the pattern, for a pattern)."""
        self._ensure_open()
        return self._group.subscription() if self._group is not None else set()

    def unsubscribe(self):
        """Leave the group (revoking its partitions) or drop the assign()ed partitions."""
        self._enter()
        try:
            if self._group is not None and self._group.subscribed:
                self._group.unsubscribe()
            self.replace_assignment([])
            self._manual = False
        finally:
            self._exit()

    def assignment(self):
        self._ensure_open()
        return set(self._assignment)

    # --- what the group membership drives (see group_member.GroupMembership) --------------

    def replace_assignment(self, partitions):
        """Make `partitions` the assignment; state of partitions not in it is dropped."""
        tps = list(partitions)
        kept = set(tps)
        for tp in list(self._positions):
            if tp not in kept:
                self._forget_position(tp)
        for tp in list(self._buffers):
            if tp not in kept:
                self._buffers.pop(tp, None)
        for tp in list(self._seeking_to):
            if tp not in kept:
                del self._seeking_to[tp]
        self._paused &= kept
        self._assignment = tps

    def start_from_committed(self, partitions):
        """Newly assigned partitions start at the group's committed offsets, else at
        auto_offset_reset: found at the next poll() or position() (_initialize_positions),
        as Kafka's consumer finds them (updateFetchPositions)."""
        for tp in partitions:
            self._forget_position(tp)
            self._seeking_to.pop(tp, None)

    def _forget_position(self, tp):
        self._positions.pop(tp, None)
        self._position_epochs.pop(tp, None)
        self._buffers.pop(tp, None)

    def _initialize_positions(self, tps):
        """Kafka's updateFetchPositions for assigned partitions without a position, subscribed
        or assign()ed alike: with a group, its committed offset is the position. Returns the
        partitions whose committed offset is pending in an open transaction: they get none
        until it ends, as Kafka's consumer fetches committed offsets with require_stable and
        retries while they are unstable (ConsumerCoordinator.fetchCommittedOffsets,
        KIP-447), so a consumer taking over a partition does not read again what a
        committing transaction consumed. The others are left to _reset (auto_offset_reset)."""
        tps = [tp for tp in tps if tp not in self._seeking_to]   # _reset finds those
        if self._group is None or not tps:
            return set()
        committed, unstable = self._group.stable_committed(tps)
        for tp, found in committed.items():
            if found is not None and tp not in unstable:
                self._positions[tp] = found.offset
                self._position_epochs[tp] = found.leader_epoch
                self._buffers.pop(tp, None)
        return unstable

    def consumed_offsets(self):
        """{tp: OffsetAndMetadata(position, "", its leader epoch)} for every assigned
        partition with a position (Kafka's SubscriptionState.allConsumed)."""
        return {tp: OffsetAndMetadata(self._positions[tp], "",
                                      self._position_epochs.get(tp, NO_PARTITION_LEADER_EPOCH))
                for tp in self._assignment if tp in self._positions}

    def wake(self):
        """End the wait of the poll in progress (any thread); it then looks at what changed."""
        self._wait.set()
        self._broker.wakeup(self._wakeup_key)

    def _interrupted(self):
        return self._wakeup_requested or self._closing or (
            self._group is not None and self._group.interrupted())

    @_one_thread
    def pause(self, partitions):
        self._paused.update(self._assigned(partitions, "pause()"))

    @_one_thread
    def resume(self, partitions):
        self._paused.difference_update(self._assigned(partitions, "resume()"))

    def paused(self):
        self._ensure_open()
        return set(self._paused)

    def _assigned(self, partitions, call):
        out = []
        for tp in topic_partitions(partitions, call):
            if tp not in self._assignment:
                raise IllegalStateError(f"{tp} is not assigned to this consumer")
            out.append(tp)
        return out

    # --- positions ----------------------------------------------------------------------

    @_one_thread
    def position(self, tp):
        """The offset of the next record poll() returns for tp."""
        tp = self._assigned([tp], "position()")[0]
        if tp not in self._positions:
            self._until_stable(lambda: (None, self._initialize_positions([tp])))
            if tp not in self._positions:
                self._reset(tp)
        return self._positions[tp]

    def _until_stable(self, attempt):
        """attempt() -> (result, the partitions whose committed offset is pending in an open
        transaction); tried again every 100 ms while there are any, up to
        default.api.timeout.ms (then KafkaTimeoutError), as Kafka's consumer retries an
        OffsetFetch answered UNSTABLE_OFFSET_COMMIT. Returns the result."""
        deadline = time.monotonic() + self._api_timeout_s
        while True:
            result, unstable = attempt()
            if not unstable:
                return result
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"the group's committed offsets of {sorted(unstable)} stayed pending in an "
                    f"open transaction for default.api.timeout.ms "
                    f"({self._api_timeout_s * 1000:.0f} ms)")
            time.sleep(_UNSTABLE_RETRY_S)

    @_one_thread
    def seek(self, tp, offset):
        tp = self._assigned([tp], "seek()")[0]
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"seek offset must be an int, not {type(offset).__name__}")
        if not 0 <= offset <= LONG_MAX:
            raise ValueError(f"seek offset must be in [0, {LONG_MAX}], got {offset}")
        self._forget_position(tp)
        self._positions[tp] = offset
        self._seeking_to.pop(tp, None)

    @_one_thread
    def seek_to_beginning(self, partitions=None):
        self._seek_to(partitions, EARLIEST, "seek_to_beginning()")

    @_one_thread
    def seek_to_end(self, partitions=None):
        self._seek_to(partitions, LATEST, "seek_to_end()")

    def _seek_to(self, partitions, which, call):
        """Kafka's seekToBeginning/seekToEnd: evaluated lazily, by the next poll() or
        position() (so records appended in between count), and none or an empty list
        means every assigned partition."""
        tps = (self._assigned(partitions, call) if partitions is not None else []) \
            or list(self._assignment)
        for tp in tps:
            self._forget_position(tp)
            self._seeking_to[tp] = which

    def _reset(self, tp, out_of_range=None):
        """The position from a pending seek_to_beginning()/seek_to_end(), else from
        auto_offset_reset."""
        which = self._seeking_to.get(tp)
        if which is None:
            if self._reset_policy == "none":
                if out_of_range is not None:
                    raise OffsetOutOfRangeError(
                        f"offset {out_of_range} is out of range for {tp} and auto_offset_reset "
                        "is 'none': seek() to a valid offset", tp, out_of_range)
                raise NoOffsetForPartitionError(
                    f"no position for {tp} and auto_offset_reset is 'none': seek() first", tp)
            which = EARLIEST if self._reset_policy == "earliest" else LATEST
        offset = self._broker.list_offsets({tp: which},
                                           read_committed=self._read_committed)[tp][0]
        self._forget_position(tp)
        self._positions[tp] = offset
        self._seeking_to.pop(tp, None)

    def beginning_offsets(self, partitions):
        self._ensure_open()
        return {tp: o for tp, (o, _) in self._broker.list_offsets(
            {tp: EARLIEST for tp in topic_partitions(partitions, "beginning_offsets()")}
        ).items()}

    def end_offsets(self, partitions):
        """{tp: the offset after the last record this consumer may read}: the high
        watermark, or the last stable offset under read_committed (as Kafka's)."""
        self._ensure_open()
        return {tp: o for tp, (o, _) in self._broker.list_offsets(
            {tp: LATEST for tp in topic_partitions(partitions, "end_offsets()")},
            read_committed=self._read_committed).items()}

    def offsets_for_times(self, timestamps):
        """{tp: ms} -> {tp: OffsetAndTimestamp of the first record at or after it, or None};
        under read_committed, None for a record at or past the last stable offset (Kafka's)."""
        self._ensure_open()
        timestamps = by_topic_partition(timestamps, "offsets_for_times()", "ms")
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamp for {tp} must be a non-negative int (ms), got {ts!r}")
        found = self._broker.list_offsets(timestamps,
                                          read_committed=self._read_committed)
        return {tp: (OffsetAndTimestamp(*v) if v is not None else None)
                for tp, v in found.items()}

    # --- poll ------------------------------------------------------------------------------

    def poll(self, timeout=None, max_records=None):
        """Records from the assigned partitions: at most max_records (max.poll.records).

        Returns as soon as any record is available; waits up to `timeout`
        seconds (None: until records arrive) and then returns [].
        """
        return self._poll(timeout, self._max_poll_records if max_records is None else max_records,
                          columns=False)

    def poll_batch(self, timeout=None, max_records=None, include_headers=False):
        """Like poll(), but a list of RecordColumns (one per partition with data), of raw
        keys and values (no deserializers).

        max_records: at most this many (None: all that was fetched; max_poll_records
        bounds poll() only). include_headers: also decode every record's headers into
        the columns' `headers` (per-record Python work, so only when asked).
        """
        return self._poll(timeout, max_records, columns=True, headers=include_headers)

    def _poll(self, timeout, max_records, columns, headers=False):
        timeout = check_timeout(timeout, "poll")
        if max_records is not None and (isinstance(max_records, bool) or
                                        not isinstance(max_records, int) or max_records < 1):
            raise ValueError(f"max_records must be a positive int, got {max_records!r}")
        self._enter()
        try:
            group = self._group
            if not (self._manual or (group is not None and group.subscribed)):
                raise IllegalStateError("the consumer has no partitions: call assign() or "
                                        "subscribe() first")
            deadline = None if timeout is None else time.monotonic() + max(timeout, 0)
            first = True
            while True:
                self._wait.clear()  # before looking: a wake() from now on ends the next wait
                if self._wakeup_requested:
                    self._wakeup_requested = False
                    raise WakeupError("wakeup() was called: the poll was interrupted")
                if self._closing:
                    return []
                if group is not None:
                    group.poll()
                out = self._drain(max_records, columns, headers)
                if out:
                    return out
                if deadline is None:
                    wait_ms = self._max_wait_ms
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 and not first:
                        return []
                    # Rounded up: a poll never returns before its timeout has passed.
                    wait_ms = min(math.ceil(max(remaining, 0) * 1000), self._max_wait_ms)
                first = False
                self._fetch(wait_ms)
        finally:
            self._exit()

    def __iter__(self):
        """Records, one at a time, until the consumer is closed (from any thread).

        A loop left early (a break, an exception in its body) gives back the records of its
        last poll that it had not received: their partitions' positions go back to the
        first of them, so the commit of close() or of a rebalance covers only the records
        the loop received, as Kafka's consumer commits what poll() handed the application.
        Python gives them back when the loop lets go of the iterator (one kept in a
        variable: when it is closed or dropped)."""
        while not self._closing:
            try:
                records = self.poll(timeout=1.0)
            except IllegalStateError:
                if self._closing:
                    return  # close() began in another thread between the check and the poll
                raise
            positions = dict(self._positions)
            handed = 0
            try:
                for record in records:
                    handed += 1
                    yield record
            finally:
                if handed < len(records):
                    self._give_back(records[handed:], positions)

    def _give_back(self, records, positions):
        """__iter__'s: the positions of records' partitions back to their first record,
        where they are still what the poll left (a seek since stands)."""
        if self._closing:
            return
        first = {}
        for record in records:
            first.setdefault(TopicPartition(record.topic, record.partition), record.offset)
        try:
            self._enter()
        except IllegalStateError:
            return   # closed meanwhile, or in use by another thread: nothing to give back to
        try:
            for tp, offset in first.items():
                if tp in self._assignment and self._positions.get(tp) == positions.get(tp):
                    self._forget_position(tp)
                    self._positions[tp] = offset
        finally:
            self._exit()

    # --- fetching ----------------------------------------------------------------------

    def _fetch(self, wait_ms):
        positions = {}
        wanted = [tp for tp in self._assignment if tp not in self._paused and (
            tp not in self._buffers or self._buffers[tp].empty())]
        unstable = self._initialize_positions([tp for tp in wanted if tp not in self._positions])
        if unstable:   # look again soon: no wake() comes when the transaction ends
            wait_ms = min(wait_ms, _UNSTABLE_RETRY_S * 1000)
        for tp in wanted:
            if tp in unstable:
                continue   # no position until the transaction holding its offset ends
            if tp not in self._positions:
                try:
                    self._reset(tp)
                except UnknownTopicOrPartitionError as exc:
                    self._topic_missing(tp, exc)
                    continue
            positions[tp] = self._positions[tp]
        if not positions:
            # Nothing to fetch (all paused, or the group is still assigning): wait for a wake().
            if wait_ms > 0 and not self._interrupted():
                self._wait.wait(wait_ms / 1000)
            return
        result = self._broker.fetch(positions, wait_ms, self._min_bytes, self._max_bytes,
                                    self._partition_max_bytes, wakeup_key=self._wakeup_key,
                                    interrupted=self._interrupted,
                                    read_committed=self._read_committed)
        # A partition's error fails this poll only once the others' records are buffered,
        # which the next poll returns first, as Kafka's FetchCollector drops the failed
        # partition's fetch alone: raised at once, it left them unread, and, when it came
        # first, for good.
        failed = None
        for tp, data in result.items():
            if data.error is not None:
                try:
                    if isinstance(data.error, OffsetOutOfRangeError):
                        self._reset(tp, out_of_range=positions[tp])
                    elif isinstance(data.error, UnknownTopicOrPartitionError):
                        self._topic_missing(tp, data.error)
                    else:
                        raise data.error
                except StreamlogError as exc:
                    failed = failed or exc
                continue
            if data.batches and self._positions.get(tp) == positions[tp]:
                self._buffers[tp] = _Buffered(data.batches, data.aborted_transactions)
        if failed is not None:
            raise failed

    def _topic_missing(self, tp, exc):
        """UNKNOWN_TOPIC_OR_PARTITION for an assigned partition: not an error of the poll,
        as Kafka's consumer takes it (FetchCollector.handleInitializeErrors logs it and
        refreshes its metadata). A topic being created gets its records once it is; one
        deleted under a group is dropped by the next rebalance; one deleted under assign()
        is said once, and its partitions read nothing until the topic is back."""
        if exc.retriable or not self._manual or tp in self._missing_reported:
            return
        self._missing_reported.add(tp)
        log.warning("%s is assigned but does not exist (deleted?): %s; it reads nothing "
                    "until it exists again", tp, exc)

    def _drain(self, max_records, columns, headers=False):
        out = []
        wanted = max_records if max_records is not None else float("inf")
        n = len(self._assignment)
        got = 0
        for i in range(n):
            tp = self._assignment[(self._start + i) % n]
            buffered = self._buffers.get(tp)
            if buffered is None or tp in self._paused:
                continue
            try:
                if columns:
                    chunk = self._take_columns(tp, buffered, wanted - got, headers)
                    if chunk is not None:
                        out.append(chunk)
                        got += len(chunk)
                else:
                    got += self._take_records(tp, buffered, wanted - got, out)
            except (CorruptRecordError, RecordDeserializationError):
                # Kafka's FetchCollector: the records taken so far are returned (their
                # positions have moved past them); the bad batch stays buffered at the
                # position, so the next poll raises this again, until a seek past it.
                if out:
                    break
                raise
            if buffered.empty():
                del self._buffers[tp]
            if got >= wanted:
                break
        self._start = (self._start + 1) % max(n, 1)
        return out

    def _next_batch(self, tp, buffered):
        """The next batch with records at or above the position, or None; skips the rest."""
        while buffered.batches:
            batch = buffered.batches.popleft()
            position = self._positions[tp]
            if batch.last_offset < position:
                continue
            self._position_epochs[tp] = batch.partition_leader_epoch
            if (buffered.aborted is not None or buffered.aborting) and \
                    batch.producer_id >= 0 and buffered.skips(batch):
                self._positions[tp] = batch.next_offset
                continue
            if batch.is_control:
                self._positions[tp] = batch.next_offset
                continue
            return batch
        return None

    def _take_records(self, tp, buffered, wanted, out):
        taken = 0
        while taken < wanted:
            if buffered.records is None or buffered.index >= len(buffered.records):
                if buffered.records is not None:
                    self._positions[tp] = max(self._positions[tp], buffered.batch_end)
                    buffered.records = None
                batch = self._next_batch(tp, buffered)
                if batch is None:
                    break
                try:
                    records, end, decoded_from = self._decode(tp, batch), batch.next_offset, batch
                except RecordDeserializationError as exc:
                    buffered.batches.appendleft(batch)   # met again from the failing record
                    if not exc.decoded:
                        raise
                    # The records before the one that failed go out first; the position
                    # then stops at it (the batch is queued again already).
                    records, end, decoded_from = exc.decoded, exc.offset, None
                except CorruptRecordError:
                    buffered.batches.appendleft(batch)
                    raise
                buffered.records, buffered.batch_end = records, end
                buffered.batch, buffered.index = decoded_from, 0
                continue
            records = buffered.records
            end = min(len(records), buffered.index + int(min(wanted - taken, len(records))))
            part = records[buffered.index:end] if buffered.index or end < len(records) \
                else records
            out.extend(part)
            taken += len(part)
            buffered.index = end
            self._positions[tp] = part[-1].offset + 1
            if end >= len(records):
                self._positions[tp] = max(self._positions[tp], buffered.batch_end)
                buffered.records = None
        return taken

    def _decode(self, tp, batch):
        """The batch's Records at or above the position: one native call makes them all.

        (Rejected, measured on 1M-record drains: zipping numpy columns into
        Records in Python, and marshal-built tuples copied into Records --
        both leave every Record tracked by the cyclic GC, whose collections
        then cost more than the decoding; see native/py_per_record.c.)
        """
        records, _ = batch.tuples(self._verify, tp.topic, tp.partition, self._positions[tp],
                                  Record)
        return self._deserialize(tp, records)

    def _deserialize(self, tp, records):
        """records with their keys and values deserialized; RecordDeserializationError for
        the first that fails, carrying the ones before it (`decoded`)."""
        kd, vd = self._key_deserializer, self._value_deserializer
        if kd is None and vd is None:
            return records
        out = []
        for r in records:
            try:
                out.append(r._replace(
                    key=kd(r.key) if kd is not None and r.key is not None else r.key,
                    value=vd(r.value) if vd is not None and r.value is not None else r.value))
            except Exception as exc:
                error = RecordDeserializationError(
                    f"cannot deserialize the record of {tp} at offset {r.offset} ({exc!r}); "
                    f"seek past it to go on: seek({tp}, {r.offset + 1})", tp, r.offset)
                error.decoded = out
                raise error from exc
        return out

    def _take_columns(self, tp, buffered, wanted, headers=False):
        """Every buffered batch of tp (up to `wanted` records) as one RecordColumns."""
        if buffered.records is not None:
            # Left over from poll(), decoded (and deserialized): its batch is read again as
            # columns, from the position poll() left.
            if buffered.batch is not None:
                buffered.batches.appendleft(buffered.batch)
            buffered.records = buffered.batch = None
        pieces = []
        count = 0
        timestamp_type = 0
        while count < wanted:
            batch = self._next_batch(tp, buffered)
            if batch is None:
                break
            try:
                recs = batch.records(self._verify)
            except CorruptRecordError:
                buffered.batches.appendleft(batch)   # met again by the next poll
                raise
            offsets = recs.offsets
            keep = offsets >= self._positions[tp]
            if not keep.all():
                offsets = offsets[keep]
            if count + len(offsets) > wanted:
                # Take part of this batch; put it back for the next poll.
                take = int(wanted - count)
                keep = np.flatnonzero(keep)[:take]
                buffered.batches.appendleft(batch)
                offsets = recs.offsets[keep]
            else:
                keep = np.flatnonzero(keep) if not keep.all() else None
            pieces.append((recs, keep))
            timestamp_type = batch.timestamp_type
            count += len(offsets)
            self._positions[tp] = int(offsets[-1]) + 1 if len(offsets) else self._positions[tp]
            if keep is None or len(keep) == len(recs):
                self._positions[tp] = max(self._positions[tp], batch.next_offset)
        if not pieces:
            return None
        return _assemble(tp, timestamp_type, pieces, headers)

    # --- lifecycle --------------------------------------------------------------------------

    # --- group offsets -------------------------------------------------------------------

    def commit(self, offsets=None, asynchronous=False, callback=None):
        """Store offsets in the group: {tp: offset | OffsetAndMetadata}, or (None) the positions.

        A committed offset is the next record to read (the position after
        the last processed record). Synchronous by default: raises
        CommitFailedError if the group rebalanced away from this member's
        generation. asynchronous=True returns at once; callback(offsets,
        error_or_None) then runs on this thread during a later poll().
        """
        self._enter()
        try:
            group = self._require_group("commit()")
            if offsets is None:
                offsets = self.consumed_offsets()
            group.commit(offsets, asynchronous=asynchronous, callback=callback)
        finally:
            self._exit()

    def committed(self, partitions):
        """{tp: OffsetAndMetadata or None}: the group's committed offsets, once none of them
        is pending in an open transaction (Kafka's committed() asks for stable offsets)."""
        self._ensure_open()
        group = self._require_group("committed()")
        tps = topic_partitions(partitions, "committed()")
        return self._until_stable(lambda: group.stable_committed(tps))

    def group_metadata(self):
        """ConsumerGroupMetadata(group_id, generation_id, member_id, group_instance_id)."""
        self._ensure_open()
        return self._require_group("group_metadata()").group_metadata()

    def wakeup(self):
        """Make the poll() in progress, or the next one, raise WakeupError (any thread)."""
        self._wakeup_requested = True
        self.wake()

    # --- lifecycle --------------------------------------------------------------------------

    def close(self):
        """Leave the group (auto-committing first) and release everything (any thread)."""
        if self._closed:
            return
        self._closing = True
        self.wake()
        with self._in_use:  # a poll in another thread returns at once and lets go
            if self._closed:
                return
            try:
                if self._group is not None:
                    self._group.close()
            finally:
                self._closed = True
                self._buffers.clear()

    @property
    def closed(self):
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _select(pos, lens, keep):
    return (pos, lens) if keep is None else (pos[keep], lens[keep])


def _assemble(tp, timestamp_type, pieces, with_headers):
    """Concatenate per-batch columns into one RecordColumns."""
    offsets, stamps, keys, values = [], [], [], []
    headers = [] if with_headers else None
    for recs, keep in pieces:
        if with_headers:
            per_record = [tuple(h) or None for h in recs.headers()]
            headers.extend(per_record if keep is None else [per_record[i] for i in keep])
        o, t = recs.offsets, recs.timestamps
        offsets.append(o if keep is None else o[keep])
        stamps.append(t if keep is None else t[keep])
        keys.append((recs.buf, *_select(recs.key_pos, recs.key_lens, keep)))
        values.append((recs.buf, *_select(recs.value_pos, recs.value_lens, keep)))
    return RecordColumns(tp.topic, tp.partition, timestamp_type, np.concatenate(offsets),
                         np.concatenate(stamps), _binary(keys), _binary(values), headers)


def _binary(pieces):
    """(data, offsets, nulls) of one column from each batch's (buf, pos, lens)."""
    data, offsets = codec.gather_many(pieces)
    return data, offsets, np.concatenate([lens for _, _, lens in pieces]) < 0

