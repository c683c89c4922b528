"""Delayed operations and their purgatory, as in Kafka's DelayedOperation design.

Owns DelayedOperation, the base class of a request that waits inside the
broker for a condition or a timeout -- today the consumer's long-poll fetch
waiting for fetch_min_bytes (broker/delayed_fetch.py); the producer's linger
and the group coordinator's session and rebalance timeouts are plain
SystemTimer tasks (see docs/TIMER.md) -- and DelayedOperationPurgatory, which
keeps operations on watch lists under keys (a TopicPartition, a consumer's
wake-up key), completes them when check_and_complete(key) finds their
condition true, and expires them on a timer (streamlog.timer.SystemTimer, or
anything with add(delay_ms, callback) -> handle and cancel(handle) -> bool).

Life of an operation (the function behind each transition in brackets)::

    new --[try_complete_else_watch: try_complete() true]-------> COMPLETED
    new --[try_complete_else_watch: false twice]---------------> WATCHED + TIMED
    WATCHED + TIMED --[check_and_complete(key): try_complete()]--> COMPLETED
    WATCHED + TIMED --[timer fires: run()]------> COMPLETED, then on_expiration()
    WATCHED + TIMED --[cancel_for_key(key) / shutdown()]--> CANCELLED (never expires)

Entering COMPLETED is force_complete(): an atomic test-and-set of the
completed flag, then the timer entry is cancelled, then on_complete() runs.
Only the thread that wins the test-and-set runs on_complete, so an operation
completes exactly once even when check_and_complete on several threads and
the timer's expiry race. A completed operation may linger on other keys'
watch lists until check_and_complete on that key or a purge removes it.

Thread-safety: every public method may be called from any thread. Watch
lists are sharded by key hash, each shard with its own lock, held only to
read or edit the list -- never while try_complete or on_complete run (those
run under the operation's own lock), so completing an operation may itself
call check_and_complete on other keys.
"""
import functools
import threading

from ..errors import TimerClosedError
from ..timer import SystemTimer

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]


class DelayedOperation:
    """An operation that completes when its condition holds, or when delay_ms runs out.

    Subclasses implement try_complete() (check the condition; if it holds,
    return self.force_complete()), on_complete() (the work to do once,
    e.g. send the fetch response) and optionally on_expiration() (runs after
    on_complete when the delay ran out, e.g. count an expired fetch).

    lock: the lock try_complete runs under (default: a fresh RLock); pass a
    shared one when the condition reads state guarded by it, e.g. a group's
    lock for a join that waits on the group.
    """

    def __init__(self, delay_ms, lock=None):
        self.delay_ms = delay_ms
        self.lock = threading.RLock() if lock is None else lock
        # A Lock used as a one-shot flag: acquire(blocking=False) is an atomic
        # test-and-set (CPython has no compare-and-set on attributes; a check
        # then assignment could let two threads both see "not completed").
        self._completed = threading.Lock()
        self._timer_entry = None  # (timer, handle, on_removed) while on a timer

    @property
    def is_completed(self):
        return self._completed.locked()

    def force_complete(self):
        """Complete unless done: cancel the timer entry, run on_complete; True if this call did."""
        if not self._completed.acquire(blocking=False):
            return False
        self.cancel()
        self.on_complete()
        return True

    def cancel(self):
        """Take the operation off its timer without completing it (it will not expire)."""
        entry = self._timer_entry
        if entry is not None:
            self._timer_entry = None
            timer, handle, on_removed = entry
            # Two threads may both get here with the same entry; the timer's
            # cancel is true for one of them only, so on_removed runs once.
            if timer.cancel(handle):
                on_removed()

    def run(self):
        """Timer expiry: complete, and if this was the completing call, run on_expiration."""
        if self.force_complete():
            self.on_expiration()

    def safe_try_complete(self):
        """try_complete() under the operation's lock (False at once if already completed)."""
        if self.is_completed:
            return False
        with self.lock:
            return self.try_complete()

    # -- for subclasses -----------------------------------------------------

    def try_complete(self):
        """Check the condition; if it holds return self.force_complete(), else False."""
        raise NotImplementedError

    def on_complete(self):
        """The operation's work, run exactly once by whoever completes it."""
        raise NotImplementedError

    def on_expiration(self):
        """Runs after on_complete when the completion came from the delay running out."""


class _Shard:
    __slots__ = ("lock", "watchers")

    def __init__(self):
        self.lock = threading.Lock()
        self.watchers = {}  # key -> list of operations, in watch order


def _drop_completed(ops):
    """Remove completed operations in place; return how many were removed."""
    before = len(ops)
    ops[:] = [op for op in ops if not op.is_completed]
    return before - len(ops)


class DelayedOperationPurgatory:
    """Operations waiting on keys, completed by check_and_complete or expired by a timer.

    timer: the broker's SystemTimer (shared by several purgatories), or None
    to own a private one that shutdown() closes. purge_interval: when the
    estimated number of watched operations exceeds the number still on the
    timer by more than this, completed operations are purged from every watch
    list (as a task on the timer's thread, not the caller's).
    """

    def __init__(self, name, timer=None, purge_interval=1000, shards=512):
        if shards < 1:
            raise ValueError("shards must be >= 1")
        self.name = name
        self.purge_interval = purge_interval
        self._owns_timer = timer is None
        self._timer = SystemTimer(f"purgatory-{name}") if timer is None else timer
        self._shards = [_Shard() for _ in range(shards)]
        self._count_lock = threading.Lock()
        self._delayed = 0  # this purgatory's operations currently on the timer
        self._estimated = 0  # operations watched since the last purge (an estimate, as in Kafka)
        self._purge_scheduled = False
        self._shut_down = False

    def _shard(self, key):
        return self._shards[hash(key) % len(self._shards)]

    # -- watching -------------------------------------------------------------

    def try_complete_else_watch(self, op, keys):
        """Complete op now if its condition holds; else watch it under every key and time it.

        The condition is checked, the operation watched, then checked again:
        a check_and_complete(key) that ran between the first check and the
        watch would otherwise have missed it. Returns True if this call
        completed it.
        """
        keys = list(keys)
        if not keys:
            raise ValueError("an operation must be watched under at least one key")
        if self._shut_down:
            raise TimerClosedError(f"purgatory {self.name!r} is shut down (its broker was closed)")
        with op.lock:
            if op.try_complete():
                return True
            for key in keys:
                if op.is_completed:  # completed by another thread meanwhile
                    break
                shard = self._shard(key)
                with shard.lock:
                    shard.watchers.setdefault(key, []).append(op)
            self._note_watched()
            if op.try_complete():
                return True
        if not op.is_completed:
            self._add_to_timer(op)
        return False

    def _add_to_timer(self, op):
        with self._count_lock:
            self._delayed += 1
        try:
            handle = self._timer.add(op.delay_ms, functools.partial(self._expire, op))
        except BaseException:
            self._timer_entry_removed()
            raise
        op._timer_entry = (self._timer, handle, self._timer_entry_removed)
        if op.is_completed:
            # Completed between the check and the add: its force_complete saw
            # no timer entry yet, so drop the entry here.
            op.cancel()

    def _expire(self, op):
        self._timer_entry_removed()
        op.run()

    def _timer_entry_removed(self):
        with self._count_lock:
            self._delayed -= 1

    def _note_watched(self):
        with self._count_lock:
            self._estimated += 1
            due = (not self._purge_scheduled
                   and self._estimated - self._delayed > self.purge_interval)
            if due:
                self._purge_scheduled = True
        if due:
            try:
                self._timer.add(0, self._run_scheduled_purge)
            except TimerClosedError:
                self._purge_scheduled = False

    # -- completing -------------------------------------------------------------

    def check_and_complete(self, key):
        """Try to complete every operation watched under key; return how many this call completed.

        Call it after the key's state changed (data appended to the
        partition, a member joined the group). Completed operations are
        dropped from the key's list, and the key when its list empties.
        """
        shard = self._shard(key)
        with shard.lock:
            ops = shard.watchers.get(key)
            if not ops:
                return 0
            snapshot = list(ops)
        completed = 0
        for op in snapshot:
            if not op.is_completed and op.safe_try_complete():
                completed += 1
        with shard.lock:
            ops = shard.watchers.get(key)
            if ops is not None:
                # Filter the live list, not the snapshot: operations watched
                # meanwhile must stay.
                _drop_completed(ops)
                if not ops:
                    del shard.watchers[key]
        return completed

    def cancel_for_key(self, key):
        """Stop watching key: take its operations off the timer, not completed; return them."""
        shard = self._shard(key)
        with shard.lock:
            ops = shard.watchers.pop(key, [])
        for op in ops:
            op.cancel()
        with self._count_lock:
            self._estimated = max(self._estimated - len(ops), 0)
        return ops

    # -- housekeeping -------------------------------------------------------------

    def _run_scheduled_purge(self):
        self._purge_scheduled = False
        self.purge()

    def purge(self):
        """Remove completed operations from every watch list now; return how many were removed."""
        with self._count_lock:
            self._estimated = self._delayed
        purged = 0
        for shard in self._shards:
            with shard.lock:
                emptied = []
                for key, ops in shard.watchers.items():
                    purged += _drop_completed(ops)
                    if not ops:
                        emptied.append(key)
                for key in emptied:
                    del shard.watchers[key]
        return purged

    def watched(self):
        """Watch-list entries: an operation counts once per key, completed ones until purged."""
        total = 0
        for shard in self._shards:
            with shard.lock:
                total += sum(len(ops) for ops in shard.watchers.values())
        return total

    def num_delayed(self):
        """Number of this purgatory's operations still on the timer."""
        with self._count_lock:
            return self._delayed

    def shutdown(self):
        """Cancel every watched operation's timer entry (none will expire); refuse new ones.

        Closes the timer only if this purgatory created it.
        """
        self._shut_down = True
        ops = []
        for shard in self._shards:
            with shard.lock:
                for watched in shard.watchers.values():
                    ops.extend(watched)
                shard.watchers.clear()
        for op in ops:
            op.cancel()
        if self._owns_timer:
            self._timer.close()
