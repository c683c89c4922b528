"""The native timing wheel (native/timing_wheel.c) through its binding, native.TaskIdWheel.

Scenarios follow Kafka's timer and timing-wheel tests, with streamlog's
rounding: a task fires at the first advance whose now_ms reaches its deadline
rounded up to tick_ms -- never early, less than one tick late.
"""
import random

import numpy as np
import pytest

from streamlog import native
from streamlog.errors import TimerClosedError

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason=str(native.UNAVAILABLE_REASON))

TaskIdWheel = native.TaskIdWheel


def step_until(wheel, end_ms, step_ms=1, cap=64):
    """Advance one step at a time to end_ms; return {task_id: [now_ms at which it fired, ...]}."""
    out = np.empty(cap, dtype=np.int64)
    fired = {}
    now = wheel.now_ms - step_ms  # the first advance is at the current time itself
    while now < end_ms:
        now = min(now + step_ms, end_ms)
        while True:
            n = wheel.advance(now, out)
            for task_id in out[:n].tolist():
                fired.setdefault(task_id, []).append(now)
            if n < cap:
                break
        assert wheel.check() == 0
    return fired


def drain_all(wheel):
    """Jump from one next_expiration to the next until empty; return (ids in fire order, steps)."""
    out = np.empty(1024, dtype=np.int64)
    ids, steps = [], 0
    while len(wheel):
        steps += 1
        t = wheel.next_expiration()
        while True:
            n = wheel.advance(t, out)
            ids.extend(out[:n].tolist())
            if n < len(out):
                break
    return ids, steps


def test_create_rejects_arguments_out_of_range():
    for tick_ms, wheel_size, start_ms in [(0, 20, 0), (1, 1, 0), (1, 20, -1), (1, 1 << 17, 0),
                                          ((1 << 32) + 1, 20, 0)]:
        with pytest.raises(ValueError):
            TaskIdWheel(tick_ms, wheel_size, start_ms)


def test_current_time_is_the_clock_rounded_down_to_the_tick():
    wheel = TaskIdWheel(tick_ms=10, wheel_size=5, start_ms=1005)
    assert (wheel.now_ms, wheel.current_ms) == (1005, 1000)
    wheel.advance(1009, np.empty(1, dtype=np.int64))
    assert (wheel.now_ms, wheel.current_ms) == (1009, 1000)
    wheel.advance(1010, np.empty(1, dtype=np.int64))
    assert wheel.current_ms == 1010


def test_clock_never_moves_backwards():
    wheel = TaskIdWheel(1, 20, 0)
    out = np.empty(4, dtype=np.int64)
    wheel.advance(100, out)
    wheel.advance(50, out)
    assert wheel.now_ms == 100
    wheel.add(5, task_id=1)
    assert wheel.expiration(wheel.add(5, task_id=2)) == 105


def test_overflow_wheels_are_created_on_demand_and_reused():
    wheel = TaskIdWheel(tick_ms=10, wheel_size=5, start_ms=1000)  # interval 50
    assert wheel.levels == 1
    wheel.add(40)
    assert wheel.levels == 1
    wheel.add(50 + 10)  # beyond the first wheel
    assert wheel.levels == 2
    wheel.add(50 + 11)
    assert wheel.levels == 2
    wheel.add(50 * 5 * 5 + 1)  # beyond the third wheel (250 * 5 = 1250)
    assert wheel.levels == 4
    assert wheel.check() == 0


@pytest.mark.parametrize("tick_ms, wheel_size", [(1, 20), (1, 3), (10, 5), (7, 4), (3, 2)])
def test_each_task_fires_once_never_early_and_within_one_tick(tick_ms, wheel_size):
    interval = tick_ms * wheel_size
    start_ms = 1003
    delays = [0, 1, tick_ms - 1, tick_ms, tick_ms + 1, 2 * tick_ms, interval - 1, interval,
              interval + 1, interval * wheel_size - 1, interval * wheel_size,
              interval * wheel_size + 1,  # beyond the second wheel
              interval * wheel_size ** 2 + 3,  # beyond the third wheel
              interval * wheel_size ** 3 + 17]  # beyond the fourth
    rng = random.Random(tick_ms * 1000 + wheel_size)
    delays += [rng.randint(0, interval * wheel_size ** 2) for _ in range(200)]
    wheel = TaskIdWheel(tick_ms, wheel_size, start_ms)
    for task_id, delay in enumerate(delays):
        wheel.add(delay, task_id)
    assert len(wheel) == len(delays)
    fired = step_until(wheel, start_ms + max(delays) + 2 * tick_ms)
    assert sorted(fired) == list(range(len(delays)))
    for task_id, delay in enumerate(delays):
        (fired_at,) = fired[task_id]  # exactly once
        deadline = start_ms + delay
        assert deadline <= fired_at < deadline + tick_ms, (task_id, delay, fired_at)
    assert len(wheel) == 0


def test_kafka_task_expiration_scenario_fires_every_task_once():
    # Tasks at 0..4, two at each of 10..99, one at each of 100..499, on a
    # 1 ms x 3 wheel so that most of them live in overflow wheels.
    wheel = TaskIdWheel(tick_ms=1, wheel_size=3, start_ms=0)
    expected = (list(range(5)) + [i for i in range(10, 100) for _ in range(2)]
                + list(range(100, 500)))
    order = list(expected)
    random.Random(7).shuffle(order)
    for delay in order:
        wheel.add(delay, task_id=delay)
    ids, _ = drain_all(wheel)
    assert sorted(ids) == expected
    assert ids == sorted(ids)  # handed out in deadline order


def test_already_expired_tasks_fire_at_the_next_advance_not_inside_add():
    wheel = TaskIdWheel(1, 3, 500)
    for delay in range(-5, 0):
        wheel.add(delay, task_id=delay)
    wheel.add_at(10, task_id=99)  # a deadline long past
    assert len(wheel) == 6
    assert wheel.next_expiration() <= 500
    out = np.empty(16, dtype=np.int64)
    n = wheel.advance(500, out)  # the same now: no time has to pass
    assert sorted(out[:n].tolist()) == [-5, -4, -3, -2, -1, 99]


def test_cancelled_tasks_never_fire_and_cancel_is_true_only_once():
    wheel = TaskIdWheel(1, 20, 0)
    handles = [wheel.add(d, task_id=d) for d in range(0, 2000, 3)]
    cancelled = set(range(0, 2000, 3)[::2])
    for handle, delay in zip(handles, range(0, 2000, 3), strict=True):
        if delay in cancelled:
            assert wheel.cancel(handle) is True
            assert wheel.cancel(handle) is False
    assert wheel.check() == 0
    fired = step_until(wheel, 2100, step_ms=7)
    assert set(fired) == set(range(0, 2000, 3)) - cancelled
    assert all(len(times) == 1 for times in fired.values())


def test_stale_and_foreign_handles_are_rejected_safely():
    wheel = TaskIdWheel(1, 20, 0)
    first = wheel.add(5, task_id=1)
    out = np.empty(4, dtype=np.int64)
    assert wheel.advance(5, out) == 1
    assert wheel.cancel(first) is False  # already fired
    second = wheel.add(5, task_id=2)  # reuses the freed slot with a new generation
    assert second != first and (second & 0xFFFFFFFF) == (first & 0xFFFFFFFF)
    assert wheel.cancel(first) is False
    assert wheel.expiration(second) == 10
    for bogus in [0, -1, 1, 2**32, 2**62, 2**63 - 1, -(2**63), 12345678901]:
        assert wheel.cancel(bogus) is False
        assert wheel.expiration(bogus) is None
    assert len(wheel) == 1
    assert wheel.cancel(second) is True


def test_next_expiration_jumps_straight_to_due_buckets():
    wheel = TaskIdWheel(1, 20, 0)
    assert wheel.next_expiration() is None
    wheel.add(100_000, task_id=7)  # several wheels up
    ids, steps = drain_all(wheel)
    assert ids == [7]
    assert steps <= wheel.levels  # one jump per cascade, no walking through empty ticks
    assert wheel.now_ms == 100_000


def test_next_expiration_skips_buckets_emptied_by_cancel():
    wheel = TaskIdWheel(1, 20, 0)
    early = wheel.add(5)
    wheel.add(15)
    assert wheel.next_expiration() == 5
    wheel.cancel(early)
    assert wheel.next_expiration() == 15
    assert wheel.check() == 0


def test_next_expiration_is_a_lower_bound_of_every_pending_deadline():
    wheel = TaskIdWheel(5, 4, 0)
    rng = random.Random(3)
    handles = [wheel.add(rng.randint(0, 10_000)) for _ in range(300)]
    for handle in handles[::3]:
        wheel.cancel(handle)
    while len(wheel):
        pending = [wheel.expiration(h) for h in handles if wheel.expiration(h) is not None]
        nxt = wheel.next_expiration()
        assert nxt <= min(pending)
        wheel.advance(nxt, np.empty(len(handles), dtype=np.int64))
        assert all(wheel.expiration(h) is None or wheel.expiration(h) > nxt for h in handles)


def test_small_output_buffer_drains_in_expiration_order_over_several_calls():
    wheel = TaskIdWheel(1, 4, 0)
    rng = random.Random(11)
    deadlines = {}
    for task_id in range(500):
        delay = rng.randint(0, 3000)
        handle = wheel.add(delay, task_id)
        deadlines[task_id] = wheel.expiration(handle)
    out = np.empty(7, dtype=np.int64)
    got = []
    while True:
        n = wheel.advance(5000, out)
        assert wheel.check() == 0
        got.extend(out[:n].tolist())
        if n < len(out):
            break
    assert sorted(got) == list(range(500))
    assert [deadlines[i] for i in got] == sorted(deadlines[i] for i in got)


def test_task_added_while_an_advance_is_unfinished_counts_from_the_new_clock():
    wheel = TaskIdWheel(1, 4, 0)
    for task_id in range(100):
        wheel.add(1000 + task_id, task_id)
    out = np.empty(10, dtype=np.int64)
    assert wheel.advance(5000, out) == 10  # stops with 90 due tasks left
    handle = wheel.add(3, task_id=999)
    assert wheel.expiration(handle) == 5003
    got = []
    while (n := wheel.advance(5000, out)) > 0:
        got.extend(out[:n].tolist())
    assert 999 not in got and len(got) == 90
    assert wheel.advance(5002, out) == 0
    assert wheel.advance(5003, out) == 1 and out[0] == 999


def test_add_many_cancel_many_and_ids_default_to_the_index():
    wheel = TaskIdWheel(1, 20, 0)
    handles = wheel.add_many(np.array([5, 1, 3], dtype=np.int64))
    assert handles.dtype == np.int64 and len(handles) == 3
    more = wheel.add_many([2, 4], task_ids=[20, 40])
    assert wheel.cancel_many(np.array([handles[0], more[1], 0, -5], dtype=np.int64)) == 2
    out_ids = np.empty(8, dtype=np.int64)
    out_handles = np.empty(8, dtype=np.int64)
    n = wheel.advance(10, out_ids, out_handles)
    assert out_ids[:n].tolist() == [1, 20, 2]
    assert out_handles[:n].tolist() == [handles[1], more[0], handles[2]]
    with pytest.raises(ValueError):
        wheel.add_many([1, 2], task_ids=[1])
    with pytest.raises(ValueError):
        wheel.add_many(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError):
        wheel.advance(20, np.empty(4, dtype=np.int32))
    with pytest.raises(ValueError):
        wheel.advance(20)
    assert wheel.add_many([]).tolist() == []


def test_huge_delays_are_clamped_not_overflowed():
    wheel = TaskIdWheel(7, 2, 0)
    a = wheel.add(2**62)
    b = wheel.add(2**63 - 1)
    c = wheel.add_at(2**63 - 1)
    assert wheel.check() == 0
    for handle in (a, b, c):
        assert 2**62 - 7 < wheel.expiration(handle) <= 2**62
    ids, _ = drain_all(wheel)
    assert len(ids) == 3 and wheel.check() == 0


def test_slab_grows_and_reuses_freed_entries():
    wheel = TaskIdWheel(1, 20, 0)
    out = np.empty(100_000, dtype=np.int64)
    for _ in range(3):
        wheel.add_many(np.arange(50_000, dtype=np.int64) % 997)
        assert wheel.advance(wheel.now_ms + 1000, out) == 50_000
        assert wheel.check() == 0 and len(wheel) == 0


def test_closed_wheel_refuses_adds_and_ignores_cancels():
    wheel = TaskIdWheel(1, 20, 0)
    handle = wheel.add(5)
    wheel.close()
    wheel.close()
    assert wheel.closed
    with pytest.raises(TimerClosedError):
        wheel.add(1)
    with pytest.raises(TimerClosedError):
        wheel.advance(10, np.empty(1, dtype=np.int64))
    assert wheel.cancel(handle) is False
    assert len(wheel) == 0 and wheel.next_expiration() is None
