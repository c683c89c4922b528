"""Timers on the native hierarchical timing wheel (native/timing_wheel.c).

This module owns three things:

- TimingWheel: Python callbacks on one native wheel, moved by the caller's
  clock (advance(now_ms)). No thread, no lock: one thread at a time.
- SystemTimer: a TimingWheel behind a lock with its own reaper thread, which
  sleeps exactly until the next bucket expires and runs expired callbacks on
  itself. This is what the broker owns and what the purgatory and the clients'
  timeouts (long-poll fetch, linger, session, rebalance, transaction) use.
- TaskIdWheel (from streamlog.native): the bulk interface, int64 task ids in
  numpy arrays in, fired ids out into a caller buffer, one FFI crossing per
  batch and no Python object per task.

Semantics shared by all three (docs/TIMER.md has the design):

1. A task's deadline is the wheel's clock + delay_ms (a negative delay counts
   as 0); add_at takes the deadline itself. The clock of a TimingWheel is the
   latest now_ms given to advance (start_ms at first); a SystemTimer's is
   monotonic_ms(), or the clock it was given.
2. The deadline is rounded UP to a multiple of tick_ms and the task fires at
   the first advance whose now_ms reaches that: never before the deadline,
   less than one tick after it. (Kafka's wheel rounds down and may fire up to
   tick_ms - 1 ms early; streamlog trades that for the never-early promise.)
   With the default tick_ms=1 the rule is exactly "deadline <= now_ms".
3. A task that is already due when added (deadline rounded up <= the current
   tick) fires at the next advance, not inside add: add never runs user code.
4. Callbacks run after their tasks were taken off the wheel, in deadline
   order. A task added by a callback during advance(now_ms) whose deadline is
   <= now_ms fires within that same advance, so after advance(now_ms) returns
   nothing due at now_ms is left. (So a callback that re-adds itself with
   delay 0 keeps advance busy forever: re-arm with delay_ms >= 1.)
5. cancel(handle) is O(1) and returns True only if the task was still pending;
   from then on it never fires. Handles of fired, cancelled or unknown tasks
   give False, never an error. Once a task has been taken off the wheel (even
   if its callback has not run yet), cancel returns False.
"""
import logging
import threading
import time

from .errors import TimerClosedError
from . import native

if native.AVAILABLE:
    from .native import TaskIdWheel
else:  # no compiler at install, or STREAMLOG_NO_NATIVE=1: the reference, same interface
    from .timer_py import TaskIdWheel

__all__ = ["TimingWheel", "SystemTimer", "TaskIdWheel", "monotonic_ms"]

_log = logging.getLogger(__name__)


def monotonic_ms():
    """The timers' default clock: milliseconds of time.monotonic_ns(), rounded down."""
    return time.monotonic_ns() // 1_000_000


class TimingWheel:
    """Callbacks on a native hierarchical timing wheel, moved by advance(now_ms).

    Not thread-safe and has no thread: the caller owns the clock (a test, an
    event loop, or SystemTimer's reaper). Memory is freed by close() or when
    the object is collected.
    """

    __slots__ = ("_core", "_callbacks", "_add", "_add_at", "_cancel", "_take", "_batch", "_adds")

    def __init__(self, tick_ms=1, wheel_size=20, start_ms=0):
        self._core = TaskIdWheel(tick_ms, wheel_size, start_ms)
        # handle -> callback, exactly for the tasks pending in the C wheel:
        # the C side holds no Python objects (rejected: ffi.new_handle per
        # task, which costs more than the whole add).
        self._callbacks = {}
        self._add = self._core.add
        self._add_at = self._core.add_at
        self._cancel = self._core.cancel
        self._take = self._core.advance_handles
        self._batch = self._core.batch
        # Counts adds so that advance knows, without another FFI call,
        # whether callbacks may have added tasks that are already due.
        self._adds = 0

    # -- adding and cancelling --------------------------------------------

    def add(self, delay_ms, callback):
        """Run callback() once delay_ms has passed on the wheel's clock; return a handle."""
        handle = self._add(delay_ms)
        self._callbacks[handle] = callback
        self._adds += 1
        return handle

    def add_at(self, deadline_ms, callback):
        """Run callback() once the wheel's clock reaches deadline_ms; return a handle."""
        handle = self._add_at(deadline_ms)
        self._callbacks[handle] = callback
        self._adds += 1
        return handle

    def add_many(self, delays_ms, callbacks):
        """Add one task per (delay, callback) in one native call; return the handles (numpy)."""
        if len(delays_ms) != len(callbacks):
            raise ValueError("delays_ms and callbacks differ in length")
        handles = self._core.add_many(delays_ms)
        self._callbacks.update(zip(handles.tolist(), callbacks, strict=True))
        self._adds += 1
        return handles

    def cancel(self, handle):
        """Cancel in O(1). True if the task was pending: it will never run."""
        if self._cancel(handle):
            del self._callbacks[handle]
            return True
        return False

    def cancel_many(self, handles):
        """Cancel many handles in one native call; return how many were pending."""
        handles = list(handles)
        cancelled = self._core.cancel_many(handles)
        pop = self._callbacks.pop
        for handle in handles:
            # Present in the dict exactly when it was pending, i.e. just cancelled.
            pop(handle, None)
        return cancelled

    # -- moving the clock ---------------------------------------------------

    def expire(self, now_ms):
        """Move the clock to now_ms and take every due task off; return their callbacks, not run."""
        callbacks = []
        pop = self._callbacks.pop
        while True:
            handles = self._take(now_ms)
            callbacks.extend(map(pop, handles))
            if len(handles) < self._batch:  # a short batch: nothing due is left
                return callbacks

    def advance(self, now_ms):
        """Move the clock to now_ms and run every due callback; return how many ran.

        A callback that raises does not stop the others: they all run, then
        the first exception is re-raised (later ones are logged).
        """
        fired = 0
        error = None
        pop = self._callbacks.pop
        while True:
            handles = self._take(now_ms)
            if not handles:
                break
            # Take the whole batch's callbacks first: a callback may cancel a
            # batch-mate, which must find it already gone (cancel -> False).
            batch = list(map(pop, handles))
            fired += len(batch)
            adds_before = self._adds
            for callback in batch:
                try:
                    callback()
                except Exception as exc:
                    if error is None:
                        error = exc
                    else:
                        _log.exception("timer callback %r raised", callback)
            if len(handles) < self._batch and self._adds == adds_before:
                break  # a short batch and no new tasks: nothing due is left
        if error is not None:
            raise error
        return fired

    # -- state ----------------------------------------------------------------

    def next_expiration(self):
        """Earliest time advance has work, or None.

        No later than any pending task's deadline rounded up, except that a
        task added (add_at) with a deadline already past counts as due at the
        wheel's current tick: the native wheel answers that tick for it (the
        Python reference answers the deadline).
        """
        return self._core.next_expiration()

    def expiration(self, handle):
        """The pending task's deadline rounded up to tick_ms, or None if it is not pending."""
        return self._core.expiration(handle)

    def __len__(self):
        return len(self._callbacks)

    @property
    def size(self):
        return len(self._callbacks)

    @property
    def now_ms(self):
        return self._core.now_ms

    @property
    def tick_ms(self):
        return self._core.tick_ms

    @property
    def wheel_size(self):
        return self._core.wheel_size

    @property
    def levels(self):
        return self._core.levels

    def check(self):
        """0 if the native wheel's invariants hold, else the number of the first broken one."""
        return self._core.check()

    def close(self):
        """Free the native wheel; pending tasks are dropped. Idempotent."""
        self._core.close()
        self._callbacks.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_NEVER = float("inf")  # the reaper sleeps with no deadline
_AWAKE = float("-inf")  # the reaper is running: adds need not wake it
# The wheel clamps deadlines to [0, 2^62] ms (docs/TIMER.md); SystemTimer clamps
# before the native call, where a deadline past int64 would raise OverflowError.
_MAX_DEADLINE_MS = 1 << 62
# Condition.wait raises OverflowError above threading.TIMEOUT_MAX (~292 years):
# a far-off task makes the reaper wake once then and sleep again, harmlessly.
_MAX_WAIT_S = threading.TIMEOUT_MAX
# After an unexpected error in the reaper's own code (not a callback's), it
# pauses this long before trying again, so a persistent fault logs a few times
# a second instead of spinning a core.
_REAPER_RETRY_S = 0.1


class SystemTimer:
    """A thread-safe timer: a TimingWheel, a lock, and one reaper thread.

    add/cancel may be called from any thread. The reaper sleeps on a
    Condition until the next bucket expiration (no fixed-interval polling:
    with nothing pending it sleeps until a task is added), is woken early by
    an add whose deadline is earlier than that, and runs expired callbacks on
    itself, never on the caller's thread and never under the lock (callbacks
    may add and cancel). A callback that raises is logged and the reaper
    carries on; so does an unexpected error in the reaper's own code (logged,
    retried after a short pause), since a dead reaper would silently stop
    every later task. close() stops and joins the reaper; tasks still pending
    are dropped, not run.

    Deadlines are clamped to [0, 2^62] ms, as the wheel does (a task that far
    off never comes due), and the reaper's sleeps to threading.TIMEOUT_MAX.

    clock_ms: a function returning integer milliseconds (for tests); the
    default is monotonic_ms. With the default clock a delay is counted from
    the real time of the add rounded up to the millisecond, so no task fires
    before add time + delay_ms even at sub-millisecond resolution, and the
    reaper's sleeps aim at the exact millisecond boundary.
    """

    def __init__(self, name="timer", tick_ms=1, wheel_size=20, clock_ms=None):
        self.name = name
        self._precise = clock_ms is None
        self._clock = monotonic_ms if clock_ms is None else clock_ms
        self._cond = threading.Condition(threading.Lock())
        self._wheel = TimingWheel(tick_ms, wheel_size, start_ms=self._clock())
        self._closed = False
        self._wake_at = _AWAKE
        self._thread = threading.Thread(target=self._reap, name=f"streamlog-timer-{name}",
                                        daemon=True)
        self._thread.start()

    def _now_for_deadline(self):
        if self._precise:
            return -(-time.monotonic_ns() // 1_000_000)  # rounded up
        return self._clock()

    def _seconds_until(self, t_ms):
        if self._precise:
            return (t_ms * 1_000_000 - time.monotonic_ns()) / 1e9
        return (t_ms - self._clock()) / 1000.0

    def add(self, delay_ms, callback):
        """Run callback() on the reaper thread once delay_ms has passed; return a handle.

        Delays beyond the wheel's range (deadline past 2^62 ms) are clamped,
        not refused: such a task simply never comes due.
        """
        return self.add_at(self._now_for_deadline() + max(delay_ms, 0), callback)

    def add_at(self, deadline_ms, callback):
        """Run callback() on the reaper thread once the clock reaches deadline_ms.

        deadline_ms is clamped to [0, 2^62], as the wheel itself does.
        """
        deadline_ms = min(max(deadline_ms, 0), _MAX_DEADLINE_MS)
        with self._cond:
            if self._closed:
                raise TimerClosedError(f"timer {self.name!r} is closed (its broker was closed); "
                                       "open the database again to schedule work")
            handle = self._wheel.add_at(deadline_ms, callback)
            if deadline_ms < self._wake_at:
                self._cond.notify()
        return handle

    def add_many(self, delays_ms, callbacks):
        """add() for many tasks under one lock acquisition and one native call; returns handles."""
        if len(delays_ms) != len(callbacks):
            raise ValueError("delays_ms and callbacks differ in length")
        base_ms = self._now_for_deadline()
        with self._cond:
            if self._closed:
                raise TimerClosedError(f"timer {self.name!r} is closed (its broker was closed); "
                                       "open the database again to schedule work")
            # The wheel counts delays from its own clock (the reaper's last
            # advance), which is behind base_ms: shift them by the gap, and
            # clamp so that no deadline passes 2^62 (nor int64 in the native call).
            wheel_now_ms = self._wheel.now_ms
            shift_ms = base_ms - wheel_now_ms
            limit_ms = _MAX_DEADLINE_MS - wheel_now_ms
            handles = self._wheel.add_many(
                [min(max(int(d), 0) + shift_ms, limit_ms) for d in delays_ms], callbacks)
            if len(delays_ms) and base_ms + max(int(min(delays_ms)), 0) < self._wake_at:
                self._cond.notify()
        return handles

    def cancel(self, handle):
        """True if the task was pending (it will never run); False otherwise, also after close()."""
        with self._cond:
            if self._closed:
                return False
            return self._wheel.cancel(handle)

    def next_expiration(self):
        with self._cond:
            return None if self._closed else self._wheel.next_expiration()

    def __len__(self):
        with self._cond:
            return 0 if self._closed else len(self._wheel)

    @property
    def size(self):
        return len(self)

    @property
    def closed(self):
        return self._closed

    @property
    def thread(self):
        """The reaper thread (for tests and diagnostics)."""
        return self._thread

    def wakeup(self):
        """Make the reaper read the clock now (for an injected clock that jumped)."""
        with self._cond:
            self._cond.notify()

    def _reap(self):
        while True:
            try:
                expired = self._wait_for_expired()
            except Exception:
                # A bug here must not end the thread: every later task of this
                # timer (every long poll, linger and session of the broker)
                # would silently never fire. Rejected: letting it die and
                # restarting it from add, which would still lose the pending ones.
                _log.exception("timer %r: the reaper failed; it retries in %.1f s",
                               self.name, _REAPER_RETRY_S)
                time.sleep(_REAPER_RETRY_S)
                continue
            if expired is None:
                return
            for callback in expired:
                try:
                    callback()
                except Exception:
                    _log.exception("timer %r: task %r raised; the timer carries on",
                                   self.name, callback)

    def _wait_for_expired(self):
        """Sleep until tasks are due; return their callbacks (taken off), or None once closed."""
        wheel = self._wheel
        cond = self._cond
        with cond:
            try:
                while True:
                    if self._closed:
                        return None
                    expired = wheel.expire(self._clock())
                    if expired:
                        return expired
                    next_ms = wheel.next_expiration()
                    if next_ms is None:
                        self._wake_at = _NEVER
                        cond.wait()
                    else:
                        self._wake_at = next_ms
                        timeout_s = self._seconds_until(next_ms)
                        if timeout_s > 0:
                            cond.wait(min(timeout_s, _MAX_WAIT_S))
                    self._wake_at = _AWAKE
            finally:
                self._wake_at = _AWAKE

    def close(self, timeout_s=None):
        """Stop the reaper and join it (unless called from a callback); drop pending tasks."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        with self._cond:
            # The reaper checks _closed under this lock before touching the
            # wheel, so freeing it here is safe even if the join timed out.
            self._wheel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
