"""DelayedOperation and DelayedOperationPurgatory (streamlog.broker.purgatory).

Single-threaded scenarios drive a TimingWheel by hand (the purgatory accepts
any timer with add/cancel); the races use a real SystemTimer and 8 threads.

Under the GIL, threads rarely switch between two particular lines, so a race
test alone would pass a check-then-set force_complete almost always. The race
tests therefore run with a tracer that yields the GIL (time.sleep(0)) before
every line of force_complete, and two-thread tests pause one thread inside
force_complete, right after its first statement (the test-and-set), while
another completes or expires the operation: exactly one of them may win.
"""
import contextlib
import random
import sys
import threading
import time

import pytest

from streamlog.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from streamlog.errors import TimerClosedError
from streamlog.timer import SystemTimer, TimingWheel

# Runs on whichever wheel is loaded: native, or the Python reference (STREAMLOG_NO_NATIVE=1).

GENEROUS_S = 20.0


class MockOperation(DelayedOperation):
    """Completes when `completable` is set; counts its callbacks."""

    def __init__(self, delay_ms, lock=None):
        super().__init__(delay_ms, lock)
        self.completable = False
        self.completions = 0
        self.expirations = 0
        self._count_lock = threading.Lock()

    def try_complete(self):
        if self.completable:
            return self.force_complete()
        return False

    def on_complete(self):
        with self._count_lock:
            self.completions += 1

    def on_expiration(self):
        with self._count_lock:
            self.expirations += 1


@pytest.fixture
def wheel():
    w = TimingWheel(tick_ms=1, wheel_size=20, start_ms=0)
    yield w
    w.close()


@pytest.fixture
def purgatory(wheel):
    p = DelayedOperationPurgatory("test", wheel)
    yield p
    p.shutdown()


def test_request_satisfaction(purgatory):
    r1, r2 = MockOperation(100_000), MockOperation(100_000)
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.try_complete_else_watch(r1, ["test1"]) is False
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.try_complete_else_watch(r2, ["test2"]) is False
    assert purgatory.check_and_complete("test2") == 0
    r1.completable = True
    assert purgatory.check_and_complete("test1") == 1
    assert purgatory.check_and_complete("test1") == 0
    r2.completable = True
    assert purgatory.check_and_complete("test2") == 1
    assert purgatory.check_and_complete("test2") == 0
    assert (r1.completions, r1.expirations, r2.completions) == (1, 0, 1)
    assert purgatory.num_delayed() == 0


def test_immediately_completable_operation_is_neither_watched_nor_timed(purgatory):
    op = MockOperation(100_000)
    op.completable = True
    assert purgatory.try_complete_else_watch(op, ["k"]) is True
    assert op.is_completed and op.completions == 1
    assert purgatory.watched() == 0 and purgatory.num_delayed() == 0


def test_try_complete_runs_under_the_operation_lock(purgatory):
    seen = []

    class Probe(MockOperation):
        def try_complete(self):
            # RLock._is_owned is private; acquire(blocking=False) from another
            # thread tells the same thing without it.
            result = []
            t = threading.Thread(target=lambda: result.append(self.lock.acquire(blocking=False)))
            t.start()
            t.join()
            seen.append(result[0])
            return False

    purgatory.try_complete_else_watch(Probe(100_000), ["k"])
    assert seen == [False, False]  # both checks ran with the lock held


def test_request_expiry_completes_once_and_calls_on_expiration(wheel, purgatory):
    r1, r2 = MockOperation(20), MockOperation(200_000)
    purgatory.try_complete_else_watch(r1, ["test1"])
    purgatory.try_complete_else_watch(r2, ["test2"])
    assert purgatory.num_delayed() == 2
    wheel.advance(19)
    assert not r1.is_completed
    wheel.advance(20)
    assert r1.is_completed and (r1.completions, r1.expirations) == (1, 1)
    assert not r2.is_completed and purgatory.num_delayed() == 1
    r1.completable = True
    assert purgatory.check_and_complete("test1") == 0  # already completed by expiry
    assert r1.completions == 1


def test_completed_operations_linger_on_other_keys_until_checked(purgatory):
    r1, r2, r3 = (MockOperation(100_000) for _ in range(3))
    purgatory.try_complete_else_watch(r1, ["test1"])
    purgatory.try_complete_else_watch(r2, ["test1", "test2"])
    purgatory.try_complete_else_watch(r3, ["test1", "test2", "test3"])
    assert purgatory.num_delayed() == 3
    assert purgatory.watched() == 6
    r2.completable = True
    assert r2.try_complete() is True  # completing cancels its timer entry at once
    assert purgatory.num_delayed() == 2
    r3.completable = True
    r3.try_complete()
    assert purgatory.num_delayed() == 1
    purgatory.check_and_complete("test1")
    assert purgatory.watched() == 4
    purgatory.check_and_complete("test2")
    assert purgatory.watched() == 2
    purgatory.check_and_complete("test3")
    assert purgatory.watched() == 1


def test_cancel_for_key_returns_the_operations_and_they_never_expire(wheel, purgatory):
    ops = [MockOperation(10_000) for _ in range(3)]
    purgatory.try_complete_else_watch(ops[0], ["key"])
    purgatory.try_complete_else_watch(ops[1], ["key"])
    purgatory.try_complete_else_watch(ops[2], ["key2"])
    cancelled = purgatory.cancel_for_key("key")
    assert cancelled == ops[:2]
    assert purgatory.num_delayed() == 1 and purgatory.watched() == 1
    assert purgatory.cancel_for_key("no such key") == []
    wheel.advance(20_000)
    assert [op.is_completed for op in ops] == [False, False, True]


def test_purge_runs_on_the_timer_once_completed_operations_pile_up(wheel):
    purgatory = DelayedOperationPurgatory("purge", wheel, purge_interval=10)
    ops = []
    for i in range(30):
        op = MockOperation(100_000)
        purgatory.try_complete_else_watch(op, [f"k{i}", "shared"])
        ops.append(op)
    for op in ops[:25]:
        op.completable = True
        op.try_complete()  # completed, still on the watch lists
    assert purgatory.watched() == 60
    # One more watched operation takes the estimate past purge_interval + delayed.
    purgatory.try_complete_else_watch(MockOperation(100_000), ["another"])
    assert purgatory.watched() == 61  # not purged on the caller's thread...
    wheel.advance(wheel.now_ms)  # ...but by a task on the timer
    assert purgatory.watched() == 2 * 5 + 1
    assert purgatory.num_delayed() == 6
    purgatory.shutdown()


def test_purge_returns_how_many_entries_it_removed(purgatory):
    op = MockOperation(100_000)
    purgatory.try_complete_else_watch(op, ["a", "b", "c"])
    op.completable = True
    op.try_complete()
    assert purgatory.purge() == 3
    assert purgatory.watched() == 0


def test_shutdown_cancels_timers_and_refuses_new_operations(wheel):
    purgatory = DelayedOperationPurgatory("down", wheel)
    op = MockOperation(50)
    purgatory.try_complete_else_watch(op, ["k"])
    purgatory.shutdown()
    assert purgatory.watched() == 0 and purgatory.num_delayed() == 0
    wheel.advance(1_000)
    assert not op.is_completed
    with pytest.raises(TimerClosedError):
        purgatory.try_complete_else_watch(MockOperation(5), ["k"])
    with pytest.raises(ValueError):
        DelayedOperationPurgatory("x", wheel).try_complete_else_watch(MockOperation(5), [])


def test_purgatory_without_a_timer_owns_and_closes_one():
    purgatory = DelayedOperationPurgatory("own")
    op = MockOperation(5)
    purgatory.try_complete_else_watch(op, ["k"])
    deadline = time.monotonic() + GENEROUS_S
    while not op.is_completed and time.monotonic() < deadline:
        time.sleep(0.005)
    assert op.completions == 1 and op.expirations == 1
    timer = purgatory._timer
    purgatory.shutdown()
    assert timer.closed


class MinBytesFetch(DelayedOperation):
    """A long-poll fetch: complete once min_bytes are there, or at max_wait_ms with what is."""

    def __init__(self, log, min_bytes, max_wait_ms):
        super().__init__(max_wait_ms)
        self.log, self.min_bytes = log, min_bytes
        self.response = None
        self.expired = False

    def try_complete(self):
        if sum(len(b) for b in self.log) >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self):
        self.response = b"".join(self.log)

    def on_expiration(self):
        self.expired = True


def test_long_poll_fetch_completes_on_append_or_on_max_wait(wheel, purgatory):
    log = []
    early = MinBytesFetch(log, min_bytes=5, max_wait_ms=500)
    late = MinBytesFetch(log, min_bytes=100, max_wait_ms=500)
    assert purgatory.try_complete_else_watch(early, [("events", 0)]) is False
    assert purgatory.try_complete_else_watch(late, [("events", 0)]) is False
    log.append(b"abc")
    assert purgatory.check_and_complete(("events", 0)) == 0
    log.append(b"defg")
    assert purgatory.check_and_complete(("events", 0)) == 1  # the append satisfied `early`
    assert early.response == b"abcdefg" and not early.expired
    wheel.advance(500)
    assert late.response == b"abcdefg" and late.expired


# --- races ------------------------------------------------------------------------


@contextlib.contextmanager
def preempting_inside(function_name):
    """Yield the GIL before every line of functions named function_name, in threads started here.

    Covers the current thread and every thread started inside the block (the
    SystemTimer's reaper too, if it is created inside); their tracer stays for
    their lifetime, the hook for new threads is removed on exit.
    """
    def line(frame, event, arg):
        if event == "line":
            time.sleep(0)  # another thread may run between any two lines here
        return line

    def call(frame, event, arg):
        return line if frame.f_code.co_name == function_name else None

    previous_thread_hook = threading.gettrace()
    previous = sys.gettrace()
    threading.settrace(call)
    sys.settrace(call)
    try:
        yield
    finally:
        sys.settrace(previous)
        threading.settrace(previous_thread_hook)


def test_each_operation_completes_exactly_once_with_8_threads_racing_the_timer():
    with preempting_inside("force_complete"):
        race_completers_against_the_timer()


def race_completers_against_the_timer():
    rng = random.Random(42)
    keys = [f"key{i}" for i in range(16)]
    with SystemTimer("race") as timer:
        purgatory = DelayedOperationPurgatory("race", timer, purge_interval=50)
        ops = []
        for _ in range(2_000):
            op = MockOperation(rng.randint(0, 15))
            ops.append((op, rng.sample(keys, 3)))
        stop = threading.Event()
        errors = []

        def completer(seed):
            local = random.Random(seed)
            try:
                while not stop.is_set():
                    op, op_keys = ops[local.randrange(len(ops))]
                    op.completable = True
                    purgatory.check_and_complete(local.choice(op_keys))
                    if local.random() < 0.05:
                        ops[local.randrange(len(ops))][0].force_complete()
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def adder():
            try:
                for op, op_keys in ops:
                    purgatory.try_complete_else_watch(op, op_keys)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=adder)]
        threads += [threading.Thread(target=completer, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        threads[0].join(GENEROUS_S)
        deadline = time.monotonic() + GENEROUS_S
        while not all(op.is_completed for op, _ in ops) and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join(GENEROUS_S)
        # The reaper may still be running expiries it took off the wheel (a completed
        # operation's run() returns at once, but the tracer slows it): wait for a task
        # due after all of theirs, which runs after them, before reading the counts.
        drained = threading.Event()
        timer.add(16, drained.set)
        assert drained.wait(GENEROUS_S)
        assert not errors
        assert all(op.is_completed for op, _ in ops)
        assert [op.completions for op, _ in ops] == [1] * len(ops)
        assert all(op.expirations in (0, 1) for op, _ in ops)
        expired = sum(op.expirations for op, _ in ops)
        assert 0 < expired < len(ops)  # both paths really raced
        assert purgatory.num_delayed() == 0
        purgatory.shutdown()


def test_force_complete_has_exactly_one_winner_among_8_threads_and_the_timer():
    with preempting_inside("force_complete"), SystemTimer("cas") as timer:
        for _ in range(200):
            op = MockOperation(0)
            barrier = threading.Barrier(8)
            wins = []

            def racer(barrier=barrier, op=op, wins=wins):
                barrier.wait()
                if op.force_complete():
                    wins.append(1)

            timer_ran = threading.Event()

            def expire(op=op, timer_ran=timer_ran):
                op.run()
                timer_ran.set()

            threads = [threading.Thread(target=racer) for _ in range(8)]
            for t in threads:
                t.start()
            timer.add(0, expire)
            for t in threads:
                t.join()
            assert timer_ran.wait(GENEROUS_S)
            assert op.completions == 1
            assert len(wins) + op.expirations == 1


class PausedInsideForceComplete:
    """Runs target() on a thread that stops inside force_complete after its first statement.

    The first statement is where the completed flag is tested and set; the
    thread waits there (holding whatever that statement took) until resume().
    """

    def __init__(self, target):
        self.paused = threading.Event()
        self._resume = threading.Event()
        self.result = []
        self._thread = threading.Thread(target=self._run, args=(target,))

    def _tracer(self, frame, event, arg):
        if frame.f_code.co_name != "force_complete" or self.paused.is_set():
            return None
        lines = []

        def line(frame, event, arg):
            if event == "line":
                lines.append(frame.f_lineno)
                if len(lines) == 2:  # the first statement has run, the second not yet
                    self.paused.set()
                    self._resume.wait(GENEROUS_S)
            return line
        return line

    def _run(self, target):
        sys.settrace(self._tracer)
        try:
            self.result.append(target())
        finally:
            sys.settrace(None)

    def start(self):
        self._thread.start()
        assert self.paused.wait(GENEROUS_S), "never reached force_complete"
        return self

    def resume(self):
        self._resume.set()
        self._thread.join(GENEROUS_S)
        assert not self._thread.is_alive()
        return self.result[0] if self.result else None


def test_force_complete_paused_after_its_check_and_a_second_force_complete_has_one_winner():
    op = MockOperation(100_000)
    first = PausedInsideForceComplete(op.force_complete).start()
    second = op.force_complete()
    assert [first.resume(), second].count(True) == 1
    assert op.completions == 1


def test_force_complete_paused_after_its_check_and_the_timer_expiring_it_has_one_winner(
        wheel, purgatory):
    op = MockOperation(10)
    purgatory.try_complete_else_watch(op, ["k"])
    first = PausedInsideForceComplete(op.force_complete).start()
    wheel.advance(10)  # the expiry: run() = force_complete(), then on_expiration() if it won
    won = first.resume()
    assert op.completions == 1
    assert (won, op.expirations) in ((True, 0), (False, 1))
    assert purgatory.num_delayed() == 0


def test_expiry_paused_after_its_check_and_check_and_complete_has_one_winner(wheel, purgatory):
    op = MockOperation(10)
    purgatory.try_complete_else_watch(op, ["k"])
    expiry = PausedInsideForceComplete(lambda: wheel.advance(10)).start()
    op.completable = True
    completed_by_check = purgatory.check_and_complete("k")
    assert expiry.resume() == 1  # the expiry task ran
    assert op.completions == 1
    assert completed_by_check + op.expirations == 1
