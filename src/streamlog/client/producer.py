"""The producer: record accumulator, partitioners, acks, send_batch.

Data path: send() serializes, picks a partition and appends the record to
that partition's open batch. A batch is sealed when the next record would not
fit (batch.size, or the topic's max.message.bytes), when linger.ms runs out
(a task on the broker's timing wheel), on flush() and on close(). Sealed
batches wait in their partition's FIFO (the last one still takes records
while it waits, as in Kafka's accumulator) and are appended by whichever thread
drains it: the thread whose record filled a batch (inline), a flush(), or the
broker's appender thread, which a linger's end on the timing wheel wakes (the
wheel's reaper thread only hands the sweep over: it must never wait on a disk).
Each batch is encoded by one native call into a reused buffer. acks=0 and
acks=1 complete a batch's futures when it is appended (acks=0 reports offset
-1, as Kafka's producer does), acks="all" when the broker's flusher has
fsynced it (many batches share one fsync).

linger.ms=0 ("no artificial delay"): Kafka's producer batches anyway while
its sender thread waits on the network. Here a record sent after 50 us of
quiet (about the time one batch append takes) is appended at once, on the
sending thread -- the lowest latency for a lone record -- and during a burst
records fill batches that leave when full or at most 1 ms after their first
record.

Why no sender thread, as Kafka has: in one process the append is cheaper than
handing a batch to another thread, and a thread woken for every new batch
takes batches before they fill -- every cffi call releases the GIL, so it gets
in at once (measured: 23 records a batch and 65,000 records/s).

Invariants:
  1. A partition's batches are appended in the order they were sealed: they
     leave its FIFO one at a time under the partition's drain lock. Records of
     one partition sent from one thread therefore keep their order, also
     across send() and send_batch().
  2. A batch never exceeds min(batch.size, the topic's max.message.bytes),
     except a single record larger than batch.size, which gets a batch of its
     own; a record that cannot fit max.message.bytes (or max.request.size)
     fails in send() with RecordTooLargeError.
  3. Buffered bytes stay under buffer.memory: send() blocks up to max.block.ms
     for batches to drain, then raises KafkaTimeoutError.

Idempotence (KAFKA_REFERENCE §5): with acks="all" (or enable_idempotence=True,
which requires it, as Kafka's producer does) the producer takes a producer id
from the broker and numbers each partition's batches as it appends them, under
the partition's drain lock, so the numbers follow the log's order. The log
refuses a gap or an older epoch and answers a repeated batch with its first
offsets. In-process there is no network to retry over; a failed append (which
may or may not have reached the log) makes the producer take a fresh id, so
sequences restart at 0 and no later batch is refused for the one that failed.
With the default acks=1, idempotence is off, as Kafka's producer turns it off
when acks is not "all" and idempotence was not asked for.

Transactions (transactional_id set; client.transaction_manager holds the
states): the producer is idempotent with acks="all", its batches carry the
transactional flag, and each partition joins the open transaction at the
coordinator before its first batch is appended. A failed batch makes the
transaction abortable; aborting it then bumps the producer's epoch, so the
next transaction's sequences start at 0.
delivery.timeout.ms / request.timeout.ms have nothing to bound (Kafka's rule between them
and linger.ms is checked all the same).
"""
import contextlib
import logging
import threading
import time
from collections import deque

import numpy as np

from ..errors import (CommitFailedError, IllegalGenerationError, IllegalStateError,
                      InvalidConfigurationError, InvalidRequestError, InvalidTopicError,
                      InvalidTxnStateError, KafkaTimeoutError, ProducerClosedError,
                      ProducerFencedError, RecordTooLargeError, StreamlogError,
                      UnknownMemberIdError)
from ..storage import compression
from ..storage.record_batch import (NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
                                    RECORD_BATCH_OVERHEAD, _column, build_batch, encode_headers,
                                    set_producer)
from ..structs import TopicPartition
from ..coordinator.group_coordinator import find_coordinator
from ..coordinator.transaction_coordinator import find_transaction_coordinator
from .config import INT32_MAX, PRODUCER, resolve
from .group_member import ConsumerGroupMetadata
from .transaction_manager import ABORTABLE, IN_TRANSACTION, TransactionManager
from .futures import BatchResult, BatchSendFuture, make_future
from .murmur2 import partition_for_key, partitions_for_keys
from .partitioners import DefaultPartitioner, make_partitioner, valid_partition
from .validation import (by_topic_partition, check_column, check_headers, check_payload,
                         check_timeout, check_timestamp, check_timestamps)

log = logging.getLogger("streamlog.producer")

_RECORD_OVERHEAD = 21  # Kafka's worst case per record excluding key, value and headers
_now = time.time
# linger.ms=0: a send after this much quiet (about one batch append) goes out at once;
# during a burst a batch waits at most _IDLE_SWEEP_MS for more records.
_IDLE_S = 50e-6
_IDLE_SWEEP_MS = 1
_RENEW = ("renew",)     # Producer._producer when a fresh producer id is owed
_SEND_CLOSED = "send() on a closed producer; create a new one"


class _Batch:
    """Records of one partition to be appended as one batch."""

    __slots__ = ("tp", "keys", "values", "timestamps", "headers", "size", "keyed", "result",
                 "deadline", "encoded", "count", "buffered", "timestamp", "uniform_ts",
                 "stamped")

    def __init__(self, tp, report_offsets):
        self.tp = tp
        self.keys = []
        self.values = []
        self.timestamps = []
        self.headers = None
        self.size = RECORD_BATCH_OVERHEAD
        self.keyed = False
        self.result = BatchResult(report_offsets)
        self.deadline = 0.0     # monotonic time its linger ends
        self.timestamp = None   # the first record's timestamp...
        self.uniform_ts = True  # ...and whether every record has it (then no per-record array)
        self.encoded = None  # set for send_batch() chunks, encoded by the caller
        self.stamped = None  # (producer id, epoch, sequence) `encoded` was built with
        self.count = 0
        self.buffered = 0    # bytes counted against buffer.memory


class _Partition:
    """Per-partition producer state: the open batch, the sealed FIFO, the drain lock, the
    appended batches' outcomes waiting to complete."""

    __slots__ = ("tp", "open", "sealed", "drain_lock", "producer", "next_sequence",
                 "outcomes", "completing")

    def __init__(self, tp):
        self.tp = tp
        self.open = None
        self.sealed = deque()
        self.drain_lock = threading.Lock()
        # Outcomes of appended batches, in append order, and whether a thread is completing
        # them (Producer._complete_in_order). Under the producer's lock.
        self.outcomes = deque()
        self.completing = False
        # Idempotence: the (producer id, epoch) the partition's sequence counts under (a
        # new one starts it again at 0), and the sequence of the next batch. Under drain_lock.
        self.producer = None
        self.next_sequence = 0


class Producer:
    def __init__(self, broker, config=None, **settings):
        s = self.settings = resolve(PRODUCER, "producer", config, **settings)
        self._broker = broker
        self._txn = None
        if s["transactional.id"] is not None:
            s["acks"], s["enable.idempotence"] = _transactional_acks(s["acks"],
                                                                     s["enable.idempotence"])
            self._txn = TransactionManager(find_transaction_coordinator(broker),
                                           s["transactional.id"], s["transaction.timeout.ms"],
                                           s["max.block.ms"])
        else:
            s["acks"], s["enable.idempotence"] = _acks_and_idempotence(s["acks"],
                                                                       s["enable.idempotence"])
        # (producer id, epoch) of an idempotent producer, replaced whole (see _append); a
        # transactional one gets it from init_transactions().
        self._producer = broker.init_producer_id() \
            if s["enable.idempotence"] and self._txn is None else None
        s["delivery.timeout.ms"] = _delivery_timeout(s)
        self._timer = broker.timer
        self._acks = s["acks"]
        self._report_offsets = s["acks"] != 0
        self._codec = compression.codec_id(s["compression.type"])
        # The level of that codec, from compression.<codec>.level (KIP-390); none for snappy.
        self._level = s.get(f"compression.{s['compression.type']}.level")
        self._batch_size = s["batch.size"]
        self._linger_ms = s["linger.ms"]
        self._max_request = s["max.request.size"]
        self._buffer_memory = s["buffer.memory"]
        self._max_block_s = s["max.block.ms"] / 1000
        self._key_serializer = s["key.serializer"]
        self._value_serializer = s["value.serializer"]
        self._partitioner = make_partitioner(s["partitioner"], self._batch_size,
                                             s["partitioner.ignore.keys"])
        # Keyed records under the default partitioner: hashed inline in send().
        self._hash_keys = isinstance(self._partitioner, DefaultPartitioner) and \
            not s["partitioner.ignore.keys"]
        # send()'s fast path: keys hashed, no serializers, producer open (and, for a
        # transactional one, in a transaction: checked there).
        self._plain = self._hash_keys and self._key_serializer is None and \
            self._value_serializer is None
        # One lock for the accumulator. `with` on the raw Lock is C-level; a Condition's
        # __enter__ is a Python method, which alone cost ~0.3 us per send().
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)  # waits for room in buffer.memory
        self._partitions = {}   # TopicPartition -> _Partition
        self._incomplete = set()
        self._buffered = 0
        self._topics = {}       # topic -> (partition count, max batch bytes, [TopicPartition])
        self._metadata = broker.metadata
        self._metadata_version = broker.metadata.version
        self._local = threading.local()  # per-thread encode buffer
        self._last_send = 0.0
        self._sweep_handle = None
        self._sweep_at = None
        self._space_waiters = 0
        self._failures = []     # (count of records, error) of batches failed since the last flush
        self._closing = False
        self._closed = False

    # --- metadata ---------------------------------------------------------------

    def _topic(self, topic):
        """(partition count, batch byte limit, [TopicPartition], [_Partition], metadata version,
        the batch limit of the fast path) of topic."""
        version = self._metadata.version
        cached = self._topics.get(topic)
        if cached is None or cached[4] != version:
            info = self._broker.ensure_topic(topic)
            if info.internal:
                # The coordinators' own topics, as the wire's Produce refuses them (Kafka's
                # ReplicaManager: "Cannot append to internal topic"): a client's record
                # there is read back as a group's or a transaction's, and breaks them.
                raise InvalidTopicError(f"cannot append to internal topic {topic}")
            limit = min(info.config.max_message_bytes, self._max_request)
            tps = [TopicPartition(topic, p) for p in range(info.partitions)]
            with self._lock:
                states = [self._partitions.setdefault(tp, _Partition(tp)) for tp in tps]
            cached = self._topics[topic] = (info.partitions, limit, tps, states, version,
                                            min(self._batch_size, limit))
        return cached

    def refresh_metadata(self, topic=None):
        """Forget cached partition counts and limits (they are re-read on the next send)."""
        if topic is None:
            self._topics.clear()
        else:
            self._topics.pop(topic, None)

    def partitions_for(self, topic):
        return list(range(self._broker.ensure_topic(topic).partitions))   # internal ones too

    # --- send -------------------------------------------------------------------

    def send(self, topic, value=None, key=None, partition=None, timestamp_ms=None, headers=None,
             callback=None):
        """Queue one record; returns a future of its RecordMetadata.

        callback(metadata, exception) runs once the record is acknowledged or
        failed, on whichever thread completes it.
        """
        # The common call -- bytes key and value, the default partitioner, nothing else --
        # takes a path with nothing it does not need (each Python operation costs 0.1-0.3 us).
        if type(key) is bytes and type(value) is bytes and self._plain and partition is None \
                and headers is None and timestamp_ms is None and callback is None:
            cached = self._topics.get(topic)
            # The transaction's state read without its lock, as check_send's answer is used
            # after the lock is released: a send racing commit_transaction() is refused at
            # its batch's append either way (TransactionManager.appending).
            if cached is not None and cached[4] == self._metadata.version and \
                    (self._txn is None or self._txn.state == IN_TRANSACTION):
                size = _RECORD_OVERHEAD + 1 + len(key) + len(value)
                batch_limit = cached[5]
                if size + RECORD_BATCH_OVERHEAD <= batch_limit and \
                        self._buffered + size <= self._buffer_memory:
                    now = _now()
                    ts = int(now * 1000)
                    with self._lock:
                        p = partition_for_key(key, cached[0])
                        batch, index, drain = self._add(cached[3][p], key, value, ts, None,
                                                        size, batch_limit, now)
                    if drain is not None:
                        self._drain(drain)
                    return make_future((batch.result, index, topic, p, ts))
        return self._send(topic, value, key, partition, timestamp_ms, headers, callback)

    def _send(self, topic, value, key, partition, timestamp_ms, headers, callback):
        """send() for every call the fast path does not take."""
        if self._closing:
            raise ProducerClosedError(_SEND_CLOSED)
        if self._txn is not None:
            self._txn.check_send()
        # Every argument is checked before the record joins a batch shared with other calls'
        # records (client.validation): a bad call fails here, alone.
        if key is not None:
            if self._key_serializer is not None:
                key = self._key_serializer(key)
            if type(key) is not bytes:
                check_payload("key", key)
        if value is not None:
            if self._value_serializer is not None:
                value = self._value_serializer(value)
            if type(value) is not bytes:
                check_payload("value", value)
        timestamp_ms = check_timestamp(timestamp_ms)
        headers = check_headers(headers)
        size = _RECORD_OVERHEAD + (len(key) if key is not None else 0) + \
            (len(value) if value is not None else 0)
        size += len(encode_headers(headers)) if headers else 1
        now = _now()
        ts = int(now * 1000) if timestamp_ms is None else timestamp_ms
        count, limit, tps, states = self._topic(topic)[:4]
        if size + RECORD_BATCH_OVERHEAD > limit:
            raise RecordTooLargeError(
                f"a {size + RECORD_BATCH_OVERHEAD}-byte record exceeds the {limit}-byte limit "
                f"(min of topic {topic!r} max.message.bytes and max.request.size)")
        if self._buffered + size > self._buffer_memory:
            self._make_room(size)
        # The largest batch this record may join (invariant 2).
        batch_limit = self._batch_size if self._batch_size > size + RECORD_BATCH_OVERHEAD \
            else size + RECORD_BATCH_OVERHEAD
        if batch_limit > limit:
            batch_limit = limit
        drain = None
        with self._lock:
            sticky = False
            if partition is not None:
                p = _explicit_partition(topic, partition, count)
            elif self._hash_keys and type(key) is bytes:
                p = partition_for_key(key, count)  # Kafka's placement
            else:
                sticky = self._partitioner.uses_sticky(key)
                p = self._partitioner.partition(topic, key, count)
                if sticky:
                    state = states[p]
                    if state.open is not None and state.open.size + size > batch_limit:
                        drain = self._seal(state.open)
                        p = self._partitioner.switch(topic, count)  # its batch is full
            batch, index, drain_added = self._add(states[p], key, value, ts, headers, size,
                                                  batch_limit, now)
            if sticky:
                self._partitioner.record_appended(topic, p, size, count)
            future = make_future((batch.result, index, topic, p, ts))
            if callback is not None:
                # Before the lock is let go, while no thread can have completed the batch:
                # added later, the callback of a record another thread's drain completed
                # meanwhile ran after those of later records (Kafka's callbacks of one
                # partition run in offset order).
                future.add_done_callback(lambda f: _run_callback(callback, f))
        for state in (drain, drain_added):  # a switched sticky partition's batch, then ours
            if state is not None:
                self._drain(state)
        return future

    def _add(self, state, key, value, ts, headers, size, batch_limit, now):
        """Add one record to the partition's open batch (caller holds the lock).

        Returns (batch, index in it, the partition state to drain or None).
        """
        if self._closing:
            # close() began after send() looked: its flush() has sealed the open batches
            # under this lock, so a record added now would wait in a batch nothing appends
            # and its future would never complete (Kafka's accumulator refuses an append
            # once closed: "Producer closed while send in progress").
            raise ProducerClosedError(_SEND_CLOSED)
        batch = state.open
        drain = None
        idle = False
        if batch is None or batch.size + size > batch_limit:
            waiting = state.sealed[-1] if batch is None and state.sealed else None
            if waiting is not None and waiting.encoded is None and \
                    waiting.size + size <= batch_limit:
                # Kafka's accumulator adds to the last batch of the partition's queue while
                # it waits to be appended (a linger's end makes a batch ready, not closed).
                # Without this, a burst over many partitions left a small batch a partition
                # at each linger sweep: 13,500-16,500 appends for 10,000 partitions x 20
                # records, against 10,000.
                batch = waiting
            else:
                if batch is not None:
                    drain = self._seal(batch)
                # An idle producer sends at once: no reason to wait (and no linger sweep to
                # schedule, which would wake the reaper thread).
                idle = self._linger_ms == 0 and now - self._last_send > _IDLE_S and \
                    not state.sealed
                batch = self._new_batch(state, sweep=not idle)
        index = batch.count
        batch.count = index + 1
        batch.values.append(value)
        batch.keys.append(key)
        batch.timestamps.append(ts)
        if key is not None:
            batch.keyed = True
        if index == 0:
            batch.timestamp = ts
        elif ts != batch.timestamp:
            batch.uniform_ts = False
        if headers is not None:
            if batch.headers is None:
                batch.headers = [()] * index
            batch.headers.append(headers)
        elif batch.headers is not None:
            batch.headers.append(())
        batch.size += size
        batch.buffered += size
        self._buffered += size
        if (batch.size >= self._batch_size or idle) and batch is state.open:
            drain = self._seal(batch)  # full, or an idle producer: no reason to wait
        self._last_send = now
        return batch, index, drain

    def _make_room(self, size):
        """buffer.memory is full: send every batch now, then wait up to max.block.ms.

        As in Kafka's accumulator, exhausted memory makes every batch ready, so
        lingering batches leave at once; only batches still waiting for their
        acknowledgement (acks="all": the fsync) can make send() block.
        """
        if size > self._buffer_memory:
            raise RecordTooLargeError(f"a {size}-byte record is larger than buffer.memory "
                                      f"({self._buffer_memory} bytes)")
        with self._lock:
            states = list(self._partitions.values())
            for state in states:
                if state.open is not None:
                    self._seal(state.open)
        for state in states:
            self._drain(state)
        deadline = time.monotonic() + self._max_block_s
        with self._lock:
            while self._buffered + size > self._buffer_memory and self._buffered > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError(
                        f"buffer.memory ({self._buffer_memory} bytes) stayed full for "
                        f"max.block.ms ({self._max_block_s * 1000:.0f} ms): batches are waiting "
                        "for their acknowledgement")
                self._space_waiters += 1
                try:
                    # max.block.ms is a long: a wait past TIMEOUT_MAX would raise OverflowError.
                    self._space.wait(min(remaining, threading.TIMEOUT_MAX))
                finally:
                    self._space_waiters -= 1

    def _new_batch(self, state, sweep=True):
        batch = _Batch(state.tp, self._report_offsets)
        state.open = batch
        self._incomplete.add(batch.result)
        if sweep:
            delay_ms = self._linger_ms or _IDLE_SWEEP_MS
            batch.deadline = time.monotonic() + delay_ms / 1000
            if self._sweep_at is None or batch.deadline < self._sweep_at:
                self._schedule_sweep(batch.deadline, delay_ms)
        return batch

    def _schedule_sweep(self, at, delay_ms):
        """One task on the wheel ends the linger of every open batch (caller holds the lock).

        Rejected: a task per batch -- an add and a cancel for every batch cost
        more than the batch's encoding when batches fill in well under linger.ms.
        """
        if self._sweep_handle is not None:
            self._timer.cancel(self._sweep_handle)
        self._sweep_at = at
        self._sweep_handle = self._timer.add(delay_ms, self._sweep_due)

    def _sweep_due(self):
        """On the timer's reaper thread: hand the sweep to the broker's appender thread. The
        reaper also expires long polls and session timeouts; an append (an fsync with
        flush.messages) must not hold them."""
        self._broker.appender.submit(self, self._sweep)

    def _sweep(self):
        """Seal and append every batch whose linger is over; re-arm for the next one."""
        now = time.monotonic()
        due = []
        with self._lock:
            self._sweep_handle = self._sweep_at = None
            earliest = None
            for state in self._partitions.values():
                batch = state.open
                if batch is None:
                    continue
                if batch.deadline <= now:
                    due.append(self._seal(batch))
                elif earliest is None or batch.deadline < earliest:
                    earliest = batch.deadline
            if earliest is not None and not self._closed:
                self._schedule_sweep(earliest, max(1, int((earliest - now) * 1000) + 1))
        for state in due:
            self._drain(state)

    def _seal(self, batch):
        """Move an open batch to its partition's FIFO (caller holds the lock); returns the state."""
        state = self._partitions[batch.tp]
        if state.open is batch:
            state.open = None
        state.sealed.append(batch)
        return state

    def _drain(self, state):
        """Append the partition's sealed batches in order (invariant 1), on this thread.

        Their futures complete, and so their callbacks run, once drain_lock is let go: a
        callback may send() (Kafka's run on its sender thread, where send() is allowed),
        and a record that fills a batch of this partition drains it again -- under the
        lock, that thread would wait on itself, or on another thread whose callback waits
        on the lock it holds."""
        appended = []
        with state.drain_lock:
            while True:
                with self._lock:
                    if not state.sealed:
                        break
                    batch = state.sealed.popleft()
                self._append(batch, state, appended)
            if appended:
                with self._lock:   # under drain_lock: queued in the order appended
                    state.outcomes.extend(appended)
        # The quiet that makes the next send "idle" starts when this append ends, not when
        # its send began: an append slower than _IDLE_S (one waiting on the flusher's
        # fdatasync of the same file) made every next send idle, each record a batch of
        # its own appended at once, and so each append slow again (10,000 rec/s, not
        # 250,000, from an idempotent acks="all" producer).
        self._last_send = _now()
        if appended:
            self._complete_in_order(state)

    def _complete_in_order(self, state):
        """Complete the partition's queued outcomes in append order, one thread at a time:
        a thread that finds another at it leaves its own to that one (so does a callback's
        send() that drains this partition again), and the callbacks of a partition's
        records run in offset order, as Kafka's producer guarantees."""
        with self._lock:
            if state.completing:
                return
            state.completing = True
        try:
            while True:
                with self._lock:
                    if not state.outcomes:
                        state.completing = False
                        return
                    outcome = state.outcomes.popleft()
                self._finish(*outcome)
        except BaseException:
            with self._lock:
                state.completing = False
            raise

    # --- send_batch ----------------------------------------------------------------

    def send_batch(self, topic, values, keys=None, partition=None, timestamps=None,
                   timestamp_ms=None, headers=None):
        """Send many records in one call (the columnar fast path); returns a BatchSendFuture.

        values (and keys, timestamps, headers when given) are sequences of the
        same length. Records are partitioned as send() would (keys hashed in
        one native call; null keys fill batch.size-byte runs of one random
        partition), encoded into as few batches as the size limits allow, and
        appended in order after what send() queued before, on this thread.
        result() gives numpy arrays of each record's partition and offset.
        """
        if self._closing:
            raise ProducerClosedError("send_batch() on a closed producer; create a new one")
        if self._txn is not None:
            self._txn.check_send()
        # Checked before anything is queued (client.validation); per-record Python checks run
        # only once the columnar encoding has refused an item, to name it.
        check_column("values", values, None, optional=False)
        n = len(values)
        if self._value_serializer is not None:
            values = [None if v is None else self._value_serializer(v) for v in values]
        check_column("keys", keys, n)
        if keys is not None and self._key_serializer is not None:
            keys = [None if k is None else self._key_serializer(k) for k in keys]
        timestamps = check_timestamps(timestamps, n)
        timestamp_ms = check_timestamp(timestamp_ms)
        if headers is not None:
            headers = check_column("headers", headers, n, check_headers)
        count, limit, tps = self._topic(topic)[:3]
        if n == 0:
            return BatchSendFuture(topic, np.zeros(0, np.int32), [])
        value_blob, value_lens = _payload_column("values", values, "value")
        key_blob, key_lens = _payload_column("keys", keys, "key") if keys is not None \
            else (None, None)
        sizes = np.maximum(value_lens, 0).astype(np.int64) + _RECORD_OVERHEAD
        if key_lens is not None:
            sizes += np.maximum(key_lens, 0)
        if headers is not None:
            sizes += np.fromiter((len(encode_headers(h)) if h else 1 for h in headers),
                                 np.int64, n)
        too_big = np.flatnonzero(sizes + RECORD_BATCH_OVERHEAD > limit)
        if len(too_big):
            raise RecordTooLargeError(f"record {int(too_big[0])} of the batch exceeds the "
                                      f"{limit}-byte limit of topic {topic!r}")
        parts = self._partitions_for_batch(topic, keys, key_blob, key_lens, partition, count,
                                           sizes)
        ts_default = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        results = []
        order = np.argsort(parts, kind="stable")
        bounds = np.flatnonzero(np.diff(parts[order])) + 1
        for group in np.split(order, bounds):
            tp = tps[int(parts[group[0]])]
            batches = []
            stamp = self._expected_stamp(tp)
            for chunk in _chunks(group, sizes, limit):
                batch = self._encode_chunk(tp, values, keys, timestamps, headers,
                                           chunk.tolist(), ts_default, stamp)
                results.append((batch.result, chunk))
                batches.append(batch)
                if stamp is not None:
                    stamp = (*stamp[:2], (stamp[2] + batch.count) & INT32_MAX)
            with self._lock:
                state = self._partitions.get(tp)
                if state is None:
                    state = self._partitions[tp] = _Partition(tp)
                if state.open is not None:
                    self._seal(state.open)  # invariant 1: records sent before go first
                for batch in batches:
                    self._incomplete.add(batch.result)
                    state.sealed.append(batch)
            self._drain(state)
        return BatchSendFuture(topic, parts, results)

    def _partitions_for_batch(self, topic, keys, key_blob, key_lens, partition, count, sizes):
        n = len(sizes)
        if partition is not None:
            return np.full(n, _explicit_partition(topic, partition, count), np.int32)
        part = self._partitioner
        if isinstance(part, DefaultPartitioner):
            if keys is not None and not part.ignore_keys:
                parts = partitions_for_keys(key_blob, key_lens, count)
            else:
                parts = np.full(n, -1, np.int32)
            nulls = np.flatnonzero(parts < 0)
            if len(nulls):
                # KIP-794 in bulk: runs of batch.size bytes, each to one random partition.
                run = np.cumsum(sizes[nulls]) // max(self._batch_size, 1)
                with self._lock:
                    choices = [part._rng.randrange(count) for _ in range(int(run[-1]) + 1)]
                parts[nulls] = np.asarray(choices, np.int32)[run]
            return parts
        with self._lock:
            return np.fromiter((part.partition(topic, None if keys is None else keys[i], count)
                                for i in range(n)), np.int32, n)

    def _expected_stamp(self, tp):
        """(producer id, epoch, sequence) the next batch of tp will most likely carry, read
        without the locks: a send_batch() chunk is encoded with it, and _append re-stamps
        (and re-CRCs) only a chunk that another batch overtook. None: not idempotent, or
        batches of tp are queued ahead (their counts decide)."""
        producer = self._producer
        if producer is None or producer is _RENEW:
            return None
        state = self._partitions.get(tp)
        if state is None or state.producer is not producer:
            return (*producer, 0)
        if state.open is not None or state.sealed:
            return None
        return (*producer, state.next_sequence)

    def _encode_chunk(self, tp, values, keys, timestamps, headers, idx, ts_default, stamp):
        batch = _Batch(tp, self._report_offsets)
        vals = [values[i] for i in idx]
        ks = [keys[i] for i in idx] if keys is not None else None
        ts = [timestamps[i] for i in idx] if timestamps is not None else None
        hs = [headers[i] for i in idx] if headers is not None else None
        producer_id, epoch, sequence = stamp or (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)
        batch.encoded = build_batch(vals, keys=ks, headers=hs, timestamps=ts,
                                    timestamp=ts_default, compression_type=self._codec,
                                    compression_level=self._level,
                                    producer_id=producer_id, producer_epoch=epoch,
                                    base_sequence=sequence,
                                    is_transactional=self._txn is not None)
        batch.stamped = stamp
        batch.count = len(idx)
        return batch

    # --- appending ---------------------------------------------------------------------

    def _append(self, batch, state, appended):
        """Encode and append one batch (the caller holds state.drain_lock). Its outcome, for
        _finish, goes to `appended` (acks="all": to the flusher, once durable)."""
        producer_id, epoch, sequence = NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE
        producer = self._producer
        if producer is _RENEW:
            producer = self._renew_producer_id(_RENEW)
            if isinstance(producer, Exception):
                appended.append((batch, -1, -1, producer))
                return
        if producer is not None:
            producer_id, epoch = producer
            if state.producer is not producer:
                state.producer, state.next_sequence = producer, 0
            sequence = state.next_sequence
        try:
            with self._txn.appending(batch.tp, producer) if self._txn is not None \
                    else contextlib.nullcontext():
                info = self._encode_and_produce(batch, producer_id, epoch, sequence)
        except Exception as exc:
            if batch.encoded is None:
                # Views of the encode buffer may live on in the error's traceback, and a
                # buffer with views cannot grow: the next batch gets a new one.
                self._local.buffer = None
            if not isinstance(exc, StreamlogError):  # a bug or an OS error: say so, keep going
                log.exception("appending a batch to %s failed", batch.tp)
            if self._txn is not None:
                self._txn.fail(exc)
            elif sequence != NO_SEQUENCE:
                self._renew_producer_id(producer)
            appended.append((batch, -1, -1, exc))
            return
        if sequence != NO_SEQUENCE:
            state.next_sequence = (sequence + batch.count) & INT32_MAX  # wraps to 0 past it
        if self._acks == "all":
            first, append_time = info.first_offset, info.log_append_time
            try:
                self._broker.when_durable(
                    batch.tp, info.last_offset + 1,
                    lambda err: self._finish(batch, first, append_time, err))
            except Exception as exc:
                # The database closed between the append and this: no fsync will come, and
                # a batch never finished would hold flush() and close() for good.
                appended.append((batch, -1, -1, exc))
        else:
            appended.append((batch, info.first_offset, info.log_append_time))

    def _encode_and_produce(self, batch, producer_id, epoch, sequence):
        """The batch's bytes (encoded now unless send_batch did), appended; AppendInfo."""
        data = batch.encoded
        if data is None:
            buffer = getattr(self._local, "buffer", None)
            if buffer is None:
                buffer = self._local.buffer = bytearray()
            data = build_batch(batch.values, keys=batch.keys if batch.keyed else None,
                               headers=batch.headers,
                               timestamps=None if batch.uniform_ts else batch.timestamps,
                               timestamp=batch.timestamp, compression_type=self._codec,
                               compression_level=self._level,
                               producer_id=producer_id, producer_epoch=epoch,
                               base_sequence=sequence, is_transactional=self._txn is not None,
                               buffer=buffer)
        elif sequence != NO_SEQUENCE and batch.stamped != (producer_id, epoch, sequence):
            set_producer(data, 0, producer_id, epoch, sequence)
        try:
            return self._broker.produce(batch.tp, data)
        finally:
            if isinstance(data, memoryview):
                try:
                    data.release()  # the encode buffer is reused by the next batch
                except BufferError:
                    pass  # still viewed from a failure's traceback: replaced by _append

    def _renew_producer_id(self, failed):
        """After a failed append: whether it reached the log is unknown, so the next batch
        of that partition cannot know its sequence. A fresh producer id starts every
        partition's sequence again at 0 (Kafka's client bumps the epoch instead: the same
        effect for an idempotent producer, which no one else fences). Returns the new
        (id, epoch), or the error that kept it from coming: the producer then tries again
        at its next batch, which fails with that error meanwhile, never reusing the old id
        (a batch like the failed one would be taken for its repeat)."""
        with self._lock:
            if self._producer is not failed:
                return self._producer  # another thread renewed it already
            try:
                self._producer = self._broker.init_producer_id()
            except StreamlogError as exc:
                self._producer = _RENEW
                return exc
            return self._producer

    def _finish(self, batch, base_offset, log_append_time, error=None):
        with self._lock:
            self._buffered -= batch.buffered
            self._incomplete.discard(batch.result)
            if error is not None:
                self._failures.append((batch.count, error))
                if self._txn is not None:
                    # Written but not durable (acks="all"): the transaction may only abort,
                    # as Kafka's handleFailedBatch makes it abortable for any failed batch.
                    self._txn.fail(error)
            batch.values = batch.keys = batch.timestamps = batch.headers = batch.encoded = None
            if self._space_waiters:
                self._space.notify_all()  # room in buffer.memory
        local = self._local
        local.completing = True   # flush() from a callback of this producer is refused
        try:
            batch.result.complete(base_offset, log_append_time, error)
        finally:
            local.completing = False

    # --- flush and close ------------------------------------------------------------------

    # --- transactions (client.transaction_manager; docs/TRANSACTIONS.md) ----------------

    def _transaction(self, call):
        if self._txn is None:
            raise InvalidTxnStateError(f"{call} needs a transactional producer: create it with "
                                       "transactional_id='...'")
        if self._closing:
            raise ProducerClosedError(f"{call} on a closed producer")
        return self._txn

    def init_transactions(self):
        """Take ownership of the transactional id: a newer epoch, which fences any earlier
        producer with the same id (its open transaction is aborted)."""
        self._producer = self._transaction("init_transactions()").init()

    def begin_transaction(self):
        self._transaction("begin_transaction()").begin()

    def commit_transaction(self):
        """Send what is buffered, then commit: every record sent since begin_transaction()
        becomes visible to read_committed consumers at once. A failed batch raises here
        (the transaction can then only be aborted)."""
        txn = self._transaction("commit_transaction()")
        # Its flush() would be refused there, and the transaction left abortable for it.
        self._refuse_inside_callback("commit_transaction()")
        if txn.state == ABORTABLE:
            self.flush()   # the batch failure itself, if flush() has not reported it yet
        txn.start_ending(commit=True)   # no more sends into this transaction
        try:
            self.flush()   # a batch's failure is raised here, first
        except Exception as exc:
            txn.fail(exc)  # the transaction can only be aborted now
            raise
        txn.end(commit=True)

    def send_offsets_to_transaction(self, offsets, group_metadata):
        """Commit a consumer group's offsets as part of the open transaction: they become
        the group's committed offsets exactly when the transaction commits, and never if
        it aborts (consume-transform-produce, exactly once). offsets: {TopicPartition:
        offset or OffsetAndMetadata}; group_metadata: the consumer's group_metadata() (or,
        as Kafka's older overload, a group id)."""
        txn = self._transaction("send_offsets_to_transaction()")
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata, -1, "", None)
        elif not isinstance(group_metadata, ConsumerGroupMetadata):
            raise TypeError("send_offsets_to_transaction() takes the consumer's "
                            "group_metadata() (or a group id str), not "
                            f"{type(group_metadata).__name__}")
        if group_metadata.generation_id > 0 and not group_metadata.member_id:
            # Kafka's KafkaProducer.throwIfInvalidGroupMetadata (IllegalArgumentException).
            raise ValueError(f"group_metadata {group_metadata} has a generation but no member "
                             "id: pass the consumer's group_metadata()")
        offsets = by_topic_partition(offsets, "send_offsets_to_transaction()")
        if not offsets:
            return   # as Kafka's: nothing to commit, and the group does not join the transaction
        txn.add_offsets(group_metadata.group_id)
        pid, epoch = txn.producer
        try:
            find_coordinator(self._broker).txn_offset_commit(
                group_metadata.group_id, pid, epoch, group_metadata.member_id,
                group_metadata.generation_id, group_metadata.group_instance_id, offsets)
        except (UnknownMemberIdError, IllegalGenerationError) as exc:
            # Kafka's TxnOffsetCommitHandler: CommitFailedException, the transaction abortable.
            error = CommitFailedError(f"the transaction's offset commit failed: the consumer "
                                      f"group metadata does not match the group ({exc})")
            txn.fail(error)
            raise error from None
        except StreamlogError as exc:
            txn.fail(exc)
            raise

    def abort_transaction(self):
        """Abort: what was sent since begin_transaction() is never visible to read_committed
        consumers. Buffered records are appended first and aborted with the rest."""
        self._abort(self._transaction("abort_transaction()"))

    def _abort(self, txn):
        txn.start_ending(commit=False)
        try:
            self.flush()
        except StreamlogError:
            pass  # the transaction is being aborted: its failures no longer matter
        if txn.end(commit=False):
            self._producer = txn.producer

    def _abort_on_close(self):
        """Kafka's close() aborts a transaction its owner left open (Sender.run: "Aborting
        incomplete transaction due to shutdown"), unless forced (a zero timeout): the
        read_committed consumers of its partitions would otherwise wait for it until
        transaction.timeout.ms. A failure is logged and the close goes on, as Kafka's; the
        coordinator then aborts it at that timeout."""
        try:
            self._abort(self._txn)
        except ProducerFencedError:
            raise
        except StreamlogError as exc:
            log.warning("close(): the open transaction of %r was not aborted (%s); its "
                        "coordinator aborts it after transaction.timeout.ms",
                        self._txn.transactional_id, exc)

    def flush(self, timeout=None):
        """Append everything queued and wait until all of it is acknowledged.

        Raises the first error of the records that failed since the previous
        flush() (their futures hold it too): a program that sends without
        keeping futures must not take a failed append for a written one.
        Kafka's flush() leaves failures to futures and callbacks; here nothing
        else may be watching.

        Refused from inside a callback of this producer (IllegalStateError), as by
        Kafka's (KIP-1118): a callback runs on a thread that completes this producer's
        batches, so waiting there for the rest of them may wait for itself. With acks="all"
        that thread is the database's one flusher thread, which completes every such
        producer's batches: there it is refused from any producer's callback.
        """
        timeout = check_timeout(timeout, "flush()")
        self._refuse_inside_callback("flush()")
        self._flush(timeout)

    def _inside_callback(self):
        """True inside a callback on a thread that completes this producer's batches: one
        of its own, or, with acks="all", any callback on the flusher thread."""
        flusher = self._broker.flusher
        return getattr(self._local, "completing", False) or (
            self._acks == "all" and flusher is not None and flusher.on_its_thread())

    def _refuse_inside_callback(self, call):
        if self._inside_callback():
            raise IllegalStateError(f"{call} was called from inside a producer callback, on a "
                                    "thread that completes this producer's batches: it could "
                                    "wait on itself; call it after the callback returns "
                                    "(send() from a callback is allowed)")

    def _flush(self, timeout, closing=False):
        with self._lock:
            states = list(self._partitions.values())
            for state in states:
                if state.open is not None:
                    self._seal(state.open)
            waiting = list(self._incomplete)
        for state in states:
            self._drain(state)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for result in waiting:
                result.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
        except KafkaTimeoutError:
            if not closing:
                raise
            # Kafka's close(timeout) waits no longer ("a timeout of zero means do not wait
            # for pending send requests to complete") and raises nothing for it. The records
            # waited for are in the log already; their futures complete at their fsync.
        with self._lock:
            failures, self._failures = self._failures, []
        if failures:
            records = sum(count for count, _ in failures)
            error = failures[0][1]
            error.add_note(f"flush(): {records} record(s) in {len(failures)} batch(es) sent "
                           "since the previous flush() failed; this is the first error")
            raise error

    def close(self, timeout=None):
        """Flush, then refuse further sends (ProducerClosedError). An open transaction is
        aborted first, unless timeout is 0 (Kafka's forced close). Records not acknowledged
        within timeout are not waited for, and that is no error (Kafka's close). With timeout
        0 the records not appended yet (a batch still lingering) fail, unwritten, as Kafka's
        forced close aborts its incomplete batches."""
        timeout = check_timeout(timeout, "close()")
        if self._closed:
            return
        if self._inside_callback():
            # From a callback, as Kafka's close(): "equivalent to close(Duration.ZERO)", as
            # waiting there for the other batches may wait for itself.
            timeout = 0
        self._closing = True
        self._plain = False  # every send now takes the checked path, which refuses it
        try:
            if timeout != 0 and self._txn is not None and self._txn.open:
                self._abort_on_close()
            if timeout == 0:
                self._fail_unsent()
            self._flush(timeout, closing=True)
        except ProducerFencedError:
            # A fenced transactional producer is closed as the error told its owner to:
            # its refused batches were reported then (Kafka's close() raises nothing).
            if self._txn is None or not self._txn.fenced:
                raise
        finally:
            with self._lock:
                self._closed = True
                if self._sweep_handle is not None:
                    self._timer.cancel(self._sweep_handle)
                    self._sweep_handle = self._sweep_at = None

    def _fail_unsent(self):
        """close(timeout=0)'s: fail every batch not appended yet (Kafka's
        RecordAccumulator.abortIncompleteBatches: "will fail any unsent and unacknowledged
        records immediately"); a batch being appended meanwhile completes as it ends. No
        error of close() itself, as Kafka's close raises none for them."""
        with self._lock:
            unsent = []
            for state in self._partitions.values():
                if state.open is not None:
                    unsent.append(state.open)
                    state.open = None
                unsent.extend(state.sealed)
                state.sealed.clear()
        error = ProducerClosedError("the producer was closed with timeout 0 (a forced close) "
                                    "before this record was sent; it was not written")
        for batch in unsent:
            self._finish(batch, -1, -1, error)
        with self._lock:
            self._failures = [f for f in self._failures if f[1] is not error]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def closed(self):
        return self._closed


def _payload_column(name, column, what):
    """_column's (blob, lengths), with a bad item named instead of join's TypeError."""
    try:
        return _column(column)
    except TypeError:
        check_column(name, column, None, lambda item: check_payload(what, item))
        raise


def _explicit_partition(topic, partition, count):
    """send()'s and send_batch()'s partition=, as an int naming one of the topic's."""
    p = valid_partition(partition, count)
    if p is None:
        raise InvalidRequestError(f"topic {topic!r} has partitions 0..{count - 1}; cannot send "
                                  f"to partition {partition!r}")
    return p


def _acks_and_idempotence(acks, idempotence):
    """(acks, enable.idempotence) as given (None: not given) resolved by Kafka's rule:
    idempotence asked for needs acks="all"; not asked for, it is on exactly when acks is."""
    if acks is None:
        acks = 1  # streamlog's default; Kafka's is "all" (docs/API.md)
    if idempotence is None:
        return acks, acks == "all"
    if idempotence and acks != "all":
        raise InvalidConfigurationError(
            f"enable_idempotence=True needs acks='all' (given acks={acks!r}): an idempotent "
            "producer's batches must be acknowledged as durable; set acks='all' or leave "
            "enable_idempotence unset")
    return acks, idempotence


def _delivery_timeout(s):
    """delivery.timeout.ms by Kafka's rule (KafkaProducer.configureDeliveryTimeout): at least
    linger.ms + request.timeout.ms (capped at int32), as a record may linger, then wait for
    its request. One given smaller is refused; the default is raised to it."""
    floor = min(s["linger.ms"] + s["request.timeout.ms"], INT32_MAX)
    if s["delivery.timeout.ms"] >= floor:
        return s["delivery.timeout.ms"]
    if "delivery.timeout.ms" in s.given:
        raise InvalidConfigurationError(
            f"delivery_timeout_ms ({s['delivery.timeout.ms']}) must be at least linger_ms + "
            f"request_timeout_ms ({s['linger.ms']} + {s['request.timeout.ms']}), as in Kafka")
    return floor


def _transactional_acks(acks, idempotence):
    """A transactional producer is idempotent, with acks="all" (Kafka's rule)."""
    if idempotence is False:
        raise InvalidConfigurationError("a transactional producer is idempotent: drop "
                                        "enable_idempotence=False or transactional_id")
    if acks not in (None, "all"):
        raise InvalidConfigurationError(
            f"a transactional producer needs acks='all' (given acks={acks!r})")
    return "all", True


def _chunks(indices, sizes, limit):
    """Split record indices into runs whose encoded size stays under `limit`."""
    budget = limit - RECORD_BATCH_OVERHEAD
    run_sizes = np.cumsum(sizes[indices])
    start = 0
    while start < len(indices):
        base = run_sizes[start - 1] if start else 0
        end = int(np.searchsorted(run_sizes, base + budget, side="right"))
        end = max(end, start + 1)
        yield indices[start:end]
        start = end


def _run_callback(callback, future):
    try:
        metadata = future.result(0)
        error = None
    except Exception as exc:
        metadata, error = None, exc
    callback(metadata, error)
