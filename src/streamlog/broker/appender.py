"""The broker's appender thread: work that a timer task hands off because it may wait on a disk.

The timing wheel's reaper thread also expires long polls, session and rebalance timeouts and
heartbeats; a task of its that appends (and, with flush.messages, fsyncs) would hold all of them
for as long as the disk takes. So such a task only submits the work here (the producer's linger
sweep, client.producer) and returns; this thread runs submitted callables one at a time, in the
order submitted. A callable already waiting is not queued twice (submit's `key`).

Rejected: a thread per producer, as Kafka's Sender -- threads grow with producers, while the
work here is rare (only batches whose linger ran out; full batches are appended by the thread
that filled them) and the disk is one.

Thread-safety: submit() from any thread; close() once, after the producers are closed: it runs
what is queued, then stops the thread.
"""
import logging
import threading
from collections import OrderedDict

log = logging.getLogger("streamlog.broker")


class Appender:
    def __init__(self, name="streamlog-appender"):
        self._name = name
        self._cond = threading.Condition()
        self._queue = OrderedDict()  # key -> callable, in submission order
        self._closing = False
        self._thread = None

    def submit(self, key, work):
        """Run work() on the appender thread (started on first use); False once closing."""
        with self._cond:
            if self._closing:
                return False
            if key not in self._queue:
                self._queue[key] = work
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
            return True

    def _run(self):
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                _, work = self._queue.popitem(last=False)
            try:
                work()
            except Exception:  # a failed append fails its batch's futures; this thread goes on
                log.exception("background append failed")

    def close(self):
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
