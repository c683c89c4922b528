"""The producer's futures: one shared result per batch, one light future per record.

As in Kafka's producer, every record of a batch shares the batch's
BatchResult (base offset, log-append time or error) and its own future holds
only that result and its index in the batch: a send() pays for a small
__slots__ object, not for a lock and an event per record.
(Rejected: concurrent.futures.Future per record -- its Condition alone costs
more than the rest of send().)

The record futures follow the concurrent.futures API (result, exception,
done, add_done_callback) and also answer Kafka's get().
"""
import logging
import threading
from functools import partial

from ..errors import KafkaTimeoutError
from .records import RecordMetadata

log = logging.getLogger("streamlog.producer")

# Guards the waiter lists of every BatchResult: held for a few instructions, and
# only by threads that wait on or complete a result someone is waiting for.
_waiters_lock = threading.Lock()


class BatchResult:
    """The outcome of one batch append, completed exactly once.

    No Event per batch (its Condition costs more than appending the batch's
    records): a thread that waits before completion parks on a lock of its
    own, registered in `_waiters`; most results are read after they are done.
    """

    __slots__ = ("base_offset", "log_append_time", "error", "done", "_waiters", "_callbacks",
                 "report_offsets")

    def __init__(self, report_offsets=True):
        self.base_offset = -1
        self.log_append_time = -1
        self.error = None
        self.done = False
        self._waiters = None
        self._callbacks = None
        self.report_offsets = report_offsets  # False under acks=0: offsets come back -1

    def complete(self, base_offset, log_append_time=-1, error=None):
        with _waiters_lock:
            if self.done:
                return
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
            self.done = True
            waiters, self._waiters = self._waiters, None
            callbacks, self._callbacks = self._callbacks, None
        for lock in waiters or ():
            lock.release()
        for callback in callbacks or ():
            _run(callback)

    def wait(self, timeout=None):
        if self.done:
            return
        with _waiters_lock:
            if self.done:
                return
            lock = threading.Lock()
            lock.acquire()
            if self._waiters is None:
                self._waiters = []
            self._waiters.append(lock)
        # Past what a thread can wait (inf, centuries): no bound, not an OverflowError.
        forever = timeout is None or timeout >= threading.TIMEOUT_MAX
        if not lock.acquire(timeout=-1 if forever else max(timeout, 0)):
            with _waiters_lock:
                if self._waiters is not None and lock in self._waiters:
                    self._waiters.remove(lock)
            if not self.done:
                raise KafkaTimeoutError(f"the record was not acknowledged within {timeout} s")

    def on_done(self, callback):
        with _waiters_lock:
            if not self.done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        _run(callback)  # done already (an idle producer appends inside send())


def _run(callback):
    """Run a user's callback; what it raises is logged, never raised into the thread that
    completes the batch or adds the callback: a send() whose record is already appended
    must not fail (its caller would send it again), and the batch's other callbacks must
    still run. Kafka's ProducerBatch.completeFutureAndFireCallbacks logs it the same way."""
    try:
        callback()
    except Exception:
        log.exception("a producer callback raised")


class FutureRecordMetadata(tuple):
    """The future of one sent record: result() -> RecordMetadata.

    A tuple (batch result, index in the batch, topic, partition, timestamp):
    send() makes one per record, and a tuple subclass built with
    tuple.__new__ costs a third of a __slots__ object with an __init__.
    """

    __slots__ = ()

    def done(self):
        return self[0].done

    def result(self, timeout=None):
        batch, index, topic, partition, timestamp = self
        batch.wait(timeout)
        if batch.error is not None:
            raise batch.error
        offset = batch.base_offset + index if batch.report_offsets else -1
        ts = batch.log_append_time if batch.log_append_time >= 0 else timestamp
        return RecordMetadata(topic, partition, offset, ts)

    get = result  # Kafka's Future.get()

    def exception(self, timeout=None):
        self[0].wait(timeout)
        return self[0].error

    def add_done_callback(self, fn):
        """fn(future) once the record is acknowledged or failed (maybe at once)."""
        self[0].on_done(lambda: fn(self))

    def __repr__(self):
        batch = self[0]
        state = "pending" if not batch.done else ("error" if batch.error else "done")
        return f"<FutureRecordMetadata {self[2]}-{self[3]} {state}>"

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)


make_future = partial(tuple.__new__, FutureRecordMetadata)


class BatchSendFuture:
    """The future of a send_batch(): result() -> SendBatchResult (offsets per record)."""

    def __init__(self, topic, partitions, parts):
        self._topic = topic
        self._partitions = partitions  # numpy int32, one per input record
        self._parts = parts            # [(BatchResult, numpy indices of its records)]

    def done(self):
        return all(r.done for r, _ in self._parts)

    def result(self, timeout=None):
        import numpy as np
        offsets = np.full(len(self._partitions), -1, dtype=np.int64)
        for batch, indices in self._parts:
            batch.wait(timeout)
            if batch.error is not None:
                raise batch.error
            if batch.report_offsets:
                offsets[indices] = batch.base_offset + np.arange(len(indices), dtype=np.int64)
        return SendBatchResult(self._topic, self._partitions, offsets)

    get = result


class SendBatchResult:
    """Where the records of a send_batch() landed: numpy arrays aligned with the input."""

    __slots__ = ("topic", "partitions", "offsets")

    def __init__(self, topic, partitions, offsets):
        self.topic = topic
        self.partitions = partitions
        self.offsets = offsets

    def __len__(self):
        return len(self.offsets)

    def __getitem__(self, i):
        return RecordMetadata(self.topic, int(self.partitions[i]), int(self.offsets[i]), -1)
