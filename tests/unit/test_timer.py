"""streamlog.timer: TimingWheel (callbacks, caller's clock) and SystemTimer (reaper thread).

Reaper tests use an injected clock wherever they can; the few on the real
clock assert ordering ("never before the deadline") and generous upper
bounds only, never speed.
"""
import logging
import threading
import time

import numpy as np
import pytest

from streamlog import native
from streamlog.errors import TimerClosedError
from streamlog.timer import SystemTimer, TimingWheel, monotonic_ms
from support import wait_until

# Runs on whichever wheel is loaded: native, or the Python reference (STREAMLOG_NO_NATIVE=1).

GENEROUS_S = 10.0  # upper bound for "eventually" on a loaded 2-core machine


class FakeClock:
    """An injectable millisecond clock that counts how often it is read."""

    def __init__(self, now_ms=1_000):
        self.now_ms = now_ms
        self.reads = 0
        self._lock = threading.Lock()

    def __call__(self):
        with self._lock:
            self.reads += 1
            return self.now_ms

    def set(self, now_ms):
        with self._lock:
            self.now_ms = now_ms


# --- TimingWheel ------------------------------------------------------------


def test_advance_runs_due_callbacks_once_and_returns_how_many():
    wheel = TimingWheel(tick_ms=1, wheel_size=20, start_ms=0)
    fired = []
    for delay in (5, 1, 30, 5, 500):
        wheel.add(delay, lambda d=delay: fired.append(d))
    assert len(wheel) == 5
    assert wheel.advance(4) == 1 and fired == [1]
    assert wheel.advance(5) == 2 and fired == [1, 5, 5]
    assert wheel.advance(499) == 1 and fired == [1, 5, 5, 30]
    assert wheel.advance(500) == 1 and fired[-1] == 500
    assert wheel.advance(10_000) == 0 and len(wheel) == 0


def test_deadlines_are_rounded_up_to_the_tick_never_down():
    wheel = TimingWheel(tick_ms=10, wheel_size=8, start_ms=0)
    fired = []
    wheel.add(1, lambda: fired.append(1))
    wheel.add(10, lambda: fired.append(10))
    wheel.add(11, lambda: fired.append(11))
    assert wheel.advance(9) == 0  # Kafka's rounding would fire the 1 ms task at 0
    assert wheel.advance(10) == 2 and sorted(fired) == [1, 10]
    assert wheel.advance(19) == 0
    assert wheel.advance(20) == 1 and fired[-1] == 11


def test_task_added_from_a_callback_due_now_fires_in_the_same_advance():
    wheel = TimingWheel(1, 20, 0)
    fired = []

    def outer():
        fired.append("outer")
        wheel.add(0, lambda: fired.append("inner-now"))
        wheel.add(1, lambda: fired.append("inner-later"))

    wheel.add(10, outer)
    assert wheel.advance(10) == 2
    assert fired == ["outer", "inner-now"]
    assert wheel.next_expiration() == 11
    assert wheel.advance(11) == 1 and fired[-1] == "inner-later"


def test_callback_cancelling_pending_and_batch_mate_tasks():
    wheel = TimingWheel(1, 20, 0)
    fired = []
    handles = {}

    def first():
        fired.append("first")
        # Taken off the wheel in the same advance: too late to cancel.
        assert wheel.cancel(handles["mate"]) is False
        assert wheel.cancel(handles["later"]) is True

    handles["first"] = wheel.add(5, first)
    handles["mate"] = wheel.add(5, lambda: fired.append("mate"))
    handles["later"] = wheel.add(50, lambda: fired.append("later"))
    assert wheel.advance(5) == 2
    assert wheel.advance(1000) == 0
    assert fired == ["first", "mate"]
    assert wheel.cancel(handles["first"]) is False


def test_a_raising_callback_does_not_stop_the_others(caplog):
    wheel = TimingWheel(1, 20, 0)
    ran = []

    def boom(tag):
        ran.append(tag)
        raise RuntimeError(tag)

    wheel.add(1, lambda: boom("a"))
    wheel.add(1, lambda: ran.append("ok"))
    wheel.add(1, lambda: boom("b"))
    with caplog.at_level(logging.ERROR, logger="streamlog.timer"):
        with pytest.raises(RuntimeError, match="a"):
            wheel.advance(1)
    assert ran == ["a", "ok", "b"]
    assert "raised" in caplog.text and len(wheel) == 0


def test_expire_takes_callbacks_off_without_running_them():
    wheel = TimingWheel(1, 20, 0)
    ran = []
    callbacks = [lambda i=i: ran.append(i) for i in range(3)]
    for i, cb in enumerate(callbacks):
        wheel.add(i, cb)
    taken = wheel.expire(1)
    assert taken == callbacks[:2] and ran == [] and len(wheel) == 1


def test_add_many_and_cancel_many_with_callbacks():
    wheel = TimingWheel(1, 20, 0)
    fired = []
    handles = wheel.add_many([3, 1, 2, 10_000], [lambda i=i: fired.append(i) for i in range(4)])
    assert len(wheel) == 4
    assert wheel.cancel_many([handles[0], handles[0], 12345]) == 1
    assert len(wheel) == 3
    assert wheel.advance(20_000) == 3
    assert fired == [1, 2, 3]
    with pytest.raises(ValueError):
        wheel.add_many([1, 2], [print])


def test_add_at_and_expiration():
    wheel = TimingWheel(5, 20, 100)
    handle = wheel.add_at(123, lambda: None)
    assert wheel.expiration(handle) == 125
    assert wheel.now_ms == 100 and wheel.tick_ms == 5 and wheel.wheel_size == 20
    assert wheel.check() == 0


def test_closed_wheel_refuses_adds():
    wheel = TimingWheel(1, 20, 0)
    handle = wheel.add(5, lambda: None)
    wheel.close()
    assert len(wheel) == 0 and wheel.cancel(handle) is False
    with pytest.raises(TimerClosedError):
        wheel.add(1, lambda: None)


# --- SystemTimer ------------------------------------------------------------


def test_reaper_runs_callbacks_on_its_own_thread_never_before_the_deadline():
    with SystemTimer("t1") as timer:
        lock = threading.Lock()
        results = []
        done = threading.Event()
        delays = [1, 2, 3, 5, 8, 13, 21, 30]

        def make(delay, added_ns):
            def callback():
                with lock:
                    results.append((delay, added_ns, time.monotonic_ns(),
                                    threading.current_thread().name))
                    if len(results) == len(delays):
                        done.set()
            return callback

        for delay in delays:
            timer.add(delay, make(delay, time.monotonic_ns()))
        assert done.wait(GENEROUS_S)
    for delay, added_ns, fired_ns, thread_name in results:
        assert fired_ns >= added_ns + delay * 1_000_000  # never early, even by a fraction of a ms
        assert thread_name == "streamlog-timer-t1"


def test_reaper_sleeps_exactly_until_due_with_an_injected_clock():
    clock = FakeClock(1_000)
    with SystemTimer("fake", clock_ms=clock) as timer:
        fired = threading.Event()
        timer.add(50, fired.set)
        time.sleep(0.2)
        assert not fired.is_set()  # the fake clock has not moved
        clock.set(1_049)
        timer.wakeup()
        time.sleep(0.1)
        assert not fired.is_set()
        clock.set(1_050)
        timer.wakeup()
        assert fired.wait(GENEROUS_S)
        assert len(timer) == 0


def test_reaper_is_woken_early_by_an_earlier_task():
    clock = FakeClock(0)
    with SystemTimer("early", clock_ms=clock) as timer:
        timer.add(60_000, lambda: None)  # the reaper now sleeps ~60 s of real time
        time.sleep(0.1)
        fired = threading.Event()
        clock.set(100)
        timer.add(20, fired.set)  # deadline 120: the add must wake the reaper
        clock.set(120)
        # Without the early wake-up the reaper would sleep for a minute.
        assert fired.wait(GENEROUS_S)


def test_idle_reaper_does_not_poll(monkeypatch):
    clock = FakeClock(0)
    timer, timeouts = recording_timer(monkeypatch, "idle", clock)
    with timer:
        # The reaper is in its first wait (it reads the clock only before it), not merely
        # given 0.1 s to get there: a late start cannot count as a poll in the window.
        assert wait_until(lambda: timeouts == [None])
        reads = clock.reads
        time.sleep(0.5)
        assert clock.reads == reads  # nothing pending: waits without a timeout
        asleep_for_a_far_task(timer, timeouts, 3_600_000)  # an hour away on the fake clock
        reads = clock.reads
        time.sleep(0.5)
        assert clock.reads - reads <= 2  # one long wait, not a polling loop


def test_reaper_survives_a_raising_callback(caplog):
    with SystemTimer("raise") as timer:
        after = threading.Event()
        with caplog.at_level(logging.ERROR, logger="streamlog.timer"):
            timer.add(1, lambda: 1 / 0)
            timer.add(5, after.set)
            assert after.wait(GENEROUS_S)
        assert timer.thread.is_alive()
    assert "ZeroDivisionError" in caplog.text


def test_callbacks_may_add_and_cancel_on_the_reaper_thread():
    with SystemTimer("reentrant") as timer:
        done = threading.Event()
        victim = timer.add(10_000, lambda: pytest.fail("cancelled task ran"))

        def first():
            assert timer.cancel(victim) is True
            timer.add(1, done.set)

        timer.add(1, first)
        assert done.wait(GENEROUS_S)


def test_many_threads_add_and_cancel_every_task_fires_at_most_once():
    counts = {}
    lock = threading.Lock()
    all_fired = threading.Event()
    expected = set()

    def fire(key):
        with lock:
            counts[key] = counts.get(key, 0) + 1
            if set(counts) >= expected:
                all_fired.set()

    with SystemTimer("mt") as timer:
        cancelled = []

        def worker(w):
            for i in range(500):
                handle = timer.add(i % 7, lambda k=(w, i): fire(k))
                if i % 5 == 0 and timer.cancel(handle):
                    cancelled.append((w, i))

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        with lock:
            expected.update((w, i) for w in range(4) for i in range(500))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with lock:
            expected.difference_update(cancelled)
            if set(counts) >= expected:
                all_fired.set()
        assert all_fired.wait(GENEROUS_S)
        assert wait_until(lambda: len(timer) == 0)
    assert set(counts) == expected
    assert all(n == 1 for n in counts.values())


def test_system_timer_add_many_counts_delays_from_now_not_from_the_reaper_clock():
    clock = FakeClock(1_000)
    with SystemTimer("batch", clock_ms=clock) as timer:
        time.sleep(0.05)  # the reaper's wheel clock stays at 1_000
        clock.set(1_200)
        fired = []
        lock = threading.Lock()

        def record(tag):
            with lock:
                fired.append((tag, clock.now_ms))

        handles = timer.add_many([0, 30, 30, -5],
                                 [lambda t=t: record(t) for t in ("a", "b", "c", "d")])
        assert len(handles) == 4 and len(timer) == 4
        timer.wakeup()
        assert wait_until(lambda: len(fired) == 2)  # the two due at 1_200
        time.sleep(0.05)
        clock.set(1_229)
        timer.wakeup()
        time.sleep(0.1)
        assert len(fired) == 2  # 30 ms after 1_200, not after the wheel's 1_000
        clock.set(1_230)
        timer.wakeup()
        assert wait_until(lambda: len(fired) == 4)
    assert sorted(tag for tag, _ in fired) == ["a", "b", "c", "d"]
    assert all(now >= 1_230 for tag, now in fired if tag in "bc")
    with SystemTimer("mismatch") as timer, pytest.raises(ValueError):
        timer.add_many([1], [])


class RecordingCondition(threading.Condition):
    """A Condition that records the timeout of every wait (None: no timeout)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timeouts = []

    def wait(self, timeout=None):
        self.timeouts.append(timeout)
        return super().wait(timeout)


def recording_timer(monkeypatch, name, clock, **kwargs):
    """A SystemTimer whose Condition records the timeouts its reaper sleeps with."""
    with monkeypatch.context() as patch:
        # Only while the timer is built: its Condition (and its thread's own
        # internal ones, which the test ignores) are RecordingConditions.
        patch.setattr(threading, "Condition", RecordingCondition)
        timer = SystemTimer(name, clock_ms=clock, **kwargs)
    assert isinstance(timer._cond, RecordingCondition)
    return timer, timer._cond.timeouts


def test_reaper_sleeps_exactly_until_the_task_is_due_not_a_poll_interval(monkeypatch):
    clock = FakeClock(1_000)
    # 64 buckets of 1 ms: a 50 ms task sits in the first level, one bucket of its own.
    timer, timeouts = recording_timer(monkeypatch, "sleeps", clock, wheel_size=64)
    with timer:
        assert wait_until(lambda: timeouts == [None])  # idle: no timeout at all
        timer.add(50, lambda: None)
        assert wait_until(lambda: len(timeouts) >= 2)
        assert timeouts[1] == pytest.approx(0.050)
        time.sleep(0.2)  # the fake clock stands still: each re-planned sleep is 50 ms again
        assert all(t == pytest.approx(0.050) for t in timeouts[1:])
        clock.set(1_030)
        timer.wakeup()
        assert wait_until(lambda: timeouts[-1] == pytest.approx(0.020))


@pytest.mark.skipif(not native.AVAILABLE, reason="the Python reference has no buckets: it "
                    "sleeps straight to the deadline (the test above covers that)")
def test_reaper_sleeps_until_each_bucket_boundary_of_a_cascading_task(monkeypatch):
    clock = FakeClock(1_000)
    fired = threading.Event()
    # The default wheel (20 x 1 ms): a 50 ms task waits in the second level's bucket
    # [1_040, 1_060), then cascades into the first level at 1_040.
    timer, timeouts = recording_timer(monkeypatch, "cascade", clock)
    with timer:
        assert wait_until(lambda: timeouts == [None])
        timer.add(50, fired.set)
        assert wait_until(lambda: len(timeouts) >= 2)
        assert timeouts[1] == pytest.approx(0.040)
        clock.set(1_040)
        timer.wakeup()
        assert wait_until(lambda: timeouts[-1] == pytest.approx(0.010))
        assert not fired.is_set()
        clock.set(1_050)
        timer.wakeup()
        assert fired.wait(GENEROUS_S)
        assert wait_until(lambda: timeouts[-1] is None)  # idle again


def asleep_for_a_far_task(timer, timeouts, delay_ms):
    """Add a task delay_ms away and wait until the reaper sleeps towards its bucket (more
    than 50 s off); returns how many sleeps were recorded by then."""
    timer.add(delay_ms, lambda: None)
    assert wait_until(lambda: timeouts and timeouts[-1] is not None and timeouts[-1] > 50)
    return len(timeouts)


def test_reaper_is_woken_early_by_add_many_with_an_earlier_task(monkeypatch):
    clock = FakeClock(0)
    timer, timeouts = recording_timer(monkeypatch, "early-many", clock)
    with timer:
        planned = asleep_for_a_far_task(timer, timeouts, 60_000)
        fired = threading.Event()
        timer.add_many([5_000, 20], [lambda: None, fired.set])
        # Without the wake-up the reaper would still be in its long sleep.
        assert wait_until(lambda: len(timeouts) > planned)
        assert timeouts[planned] == pytest.approx(0.020)
        clock.set(20)
        timer.wakeup()
        assert fired.wait(GENEROUS_S)


def test_add_many_with_only_later_tasks_does_not_wake_the_reaper(monkeypatch):
    clock = FakeClock(0)
    timer, timeouts = recording_timer(monkeypatch, "late-many", clock)
    with timer:
        planned = asleep_for_a_far_task(timer, timeouts, 100_000)
        timer.add_many([200_000, 300_000], [lambda: None, lambda: None])
        time.sleep(0.2)
        assert len(timeouts) == planned  # still in the same sleep


def test_far_future_tasks_do_not_kill_the_reaper(caplog):
    with caplog.at_level(logging.ERROR, logger="streamlog.timer"), SystemTimer("far") as timer:
        # 10**13 ms is ~317 years: past threading.TIMEOUT_MAX as a sleep.
        for delay_ms in (2**62, 10**13, 2**63 - 1):
            timer.add(delay_ms, lambda: None)
        time.sleep(0.05)  # the reaper plans its sleep for the earliest of them
        fired = threading.Event()
        timer.add(1, fired.set)
        assert fired.wait(GENEROUS_S)
        assert timer.thread.is_alive()
        assert len(timer) == 3
    assert "reaper failed" not in caplog.text  # no error loop either: the sleep is clamped


def test_deadlines_past_the_wheel_range_are_clamped_not_refused():
    clock = FakeClock(1_000)
    limit_ms = 2**62
    with SystemTimer("clamp", clock_ms=clock) as timer:
        for add in (lambda: timer.add(2**63 - 1, lambda: None),
                    lambda: timer.add(10**30, lambda: None),
                    lambda: timer.add_at(2**63 - 1, lambda: None),
                    lambda: timer.add_at(10**30, lambda: None),
                    lambda: timer.add_many([2**63 - 1, 10**30], [lambda: None] * 2),
                    lambda: timer.add_many(np.array([2**63 - 1], dtype=np.int64),
                                           [lambda: None])):
            handles = add()
            for handle in np.atleast_1d(handles).tolist():
                assert timer._wheel.expiration(handle) == limit_ms
        assert len(timer) == 7
        fired = threading.Event()
        timer.add_at(-(10**30), fired.set)  # long past: due at once
        timer.wakeup()
        assert fired.wait(GENEROUS_S)


class FailingClock(FakeClock):
    """Raises the first time the reaper thread reads it (a bug inside the reaper's loop)."""

    def __init__(self, now_ms):
        super().__init__(now_ms)
        self.failures_left = 1

    def __call__(self):
        if (threading.current_thread().name.startswith("streamlog-timer-")
                and self.failures_left):
            self.failures_left -= 1
            raise RuntimeError("clock read failed")
        return super().__call__()


def test_reaper_survives_an_error_in_its_own_loop_and_logs_it(caplog):
    clock = FailingClock(0)
    with caplog.at_level(logging.ERROR, logger="streamlog.timer"), \
            SystemTimer("fault", clock_ms=clock) as timer:
        assert wait_until(lambda: clock.failures_left == 0)
        fired = threading.Event()
        timer.add(5, fired.set)
        clock.set(5)
        timer.wakeup()
        assert fired.wait(GENEROUS_S)
        assert timer.thread.is_alive()
    assert "reaper failed" in caplog.text and "clock read failed" in caplog.text


def test_close_stops_the_reaper_and_drops_pending_tasks():
    timer = SystemTimer("close")
    ran = []
    handle = timer.add(200, lambda: ran.append(1))
    timer.close()
    assert not timer.thread.is_alive()
    assert timer.closed and len(timer) == 0
    assert timer.cancel(handle) is False
    with pytest.raises(TimerClosedError):
        timer.add(1, lambda: None)
    time.sleep(0.3)
    assert ran == []
    timer.close()  # idempotent


def test_close_from_a_callback_does_not_deadlock():
    timer = SystemTimer("self-close")
    closed = threading.Event()

    def close_me():
        timer.close()
        closed.set()

    timer.add(1, close_me)
    assert closed.wait(GENEROUS_S)
    timer.thread.join(GENEROUS_S)
    assert not timer.thread.is_alive()


def test_monotonic_ms_is_monotonic_and_in_milliseconds():
    a = monotonic_ms()
    time.sleep(0.02)
    b = monotonic_ms()
    assert 15 <= b - a < 10_000
