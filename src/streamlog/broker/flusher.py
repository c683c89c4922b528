"""The broker's background I/O thread: group commits, flush.ms, retention, checkpoints.

Group commit (acks="all"): a producer whose batch must be durable registers
(partition, offset, callback) here. The thread takes every waiting request at
once, fsyncs each partition concerned once (PartitionLog.flush covers
everything appended before it started), and runs the callbacks of every
request the new recovery point covers. Appends continue meanwhile and queue
for the next round, so one fsync serves as many batches as arrived while the
previous one was on the disk.

Periodic work is scheduled on the broker's timing wheel, but the timer tasks
only raise a flag and wake this thread: the reaper thread must never wait on
a disk, or every long poll and session timeout would wait with it.

Thread-safety: add_waiter may be called from any thread; everything else
runs on the flusher thread. close() finishes pending waiters first.
"""
import logging
import threading

log = logging.getLogger("streamlog.broker")

RETENTION, CHECKPOINT, FLUSH_MS = "retention", "checkpoint", "flush.ms"
PRODUCER_EXPIRATION = "producer.id.expiration"


class LogFlusher:
    def __init__(self, broker, timer, intervals_ms):
        self._broker = broker
        self._timer = timer
        self._intervals_ms = intervals_ms  # kind -> interval
        self._cond = threading.Condition()
        self._waiters = {}   # tp -> [(offset, callback)]
        self._due = set()
        self._closing = False
        self._handles = {}
        self._thread = threading.Thread(target=self._run, name="streamlog-flusher", daemon=True)
        self._thread.start()
        for kind in intervals_ms:
            self._schedule(kind)

    # --- requests --------------------------------------------------------------

    def on_its_thread(self):
        """True on the flusher thread (its waiters' callbacks run there): a wait there for a
        fsync would wait for ever."""
        return threading.current_thread() is self._thread

    def add_waiter(self, tp, offset, callback):
        """Call callback(error or None) once everything below `offset` of tp is fsynced."""
        with self._cond:
            if self._closing:
                raise RuntimeError("the database is closing")
            self._waiters.setdefault(tp, []).append((offset, callback))
            self._cond.notify()

    def request(self, kind):
        """Ask for a periodic job now (tests, and the CLI's explicit retention run)."""
        with self._cond:
            self._due.add(kind)
            self._cond.notify()

    def _schedule(self, kind):
        def fire():
            self.request(kind)
            if not self._closing:
                self._schedule(kind)
        try:
            self._handles[kind] = self._timer.add(self._intervals_ms[kind], fire)
        except Exception:  # the timer closed under us: the broker is shutting down
            pass

    # --- the thread ---------------------------------------------------------------

    def _run(self):
        while True:
            with self._cond:
                while not self._waiters and not self._due and not self._closing:
                    self._cond.wait()
                waiters, self._waiters = self._waiters, {}
                due, self._due = self._due, set()
                closing = self._closing
            if waiters:
                self._group_commit(waiters)
            for kind in sorted(due):
                self._periodic(kind)
            if closing:
                with self._cond:
                    if not self._waiters:
                        return

    def _group_commit(self, waiters):
        for tp, pending in waiters.items():
            error = None
            try:
                partition_log = self._broker.partition_log(tp)
                # flush_to: another thread's flush (a coordinator's) may have covered them.
                durable = partition_log.flush_to(max(offset for offset, _ in pending))
            except Exception as exc:  # e.g. the topic was deleted, or fsync failed
                error, durable = exc, -1
            for offset, callback in pending:
                ok = error is None and offset <= durable
                try:
                    callback(None if ok else error or RuntimeError(
                        f"{tp} was not flushed up to {offset}"))
                except Exception:
                    log.exception("durability callback for %s failed", tp)

    def _periodic(self, kind):
        try:
            if kind == RETENTION:
                self._broker.apply_retention()
            elif kind == CHECKPOINT:
                self._broker.write_checkpoints()
            elif kind == FLUSH_MS:
                self._broker.flush_on_time()
            elif kind == PRODUCER_EXPIRATION:
                self._broker.expire_producers()
        except Exception:
            log.exception("periodic %s job failed", kind)

    def close(self):
        with self._cond:
            self._closing = True
            self._cond.notify()
        for handle in self._handles.values():
            self._timer.cancel(handle)
        self._thread.join()
