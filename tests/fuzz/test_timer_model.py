"""Stateful fuzzing: the timing wheel against a plain dict model, >= 100,000 steps per run.

The model keeps every pending task's deadline and its expiration (the
deadline rounded up to tick_ms) and says which tasks an advance must fire:
exactly those whose expiration is <= now_ms, each once, never a cancelled
one, including tasks added by callbacks while the advance runs; expire must
take the same tasks off without running them. Every TimingWheel entry point
is driven: add, add_at, add_many, cancel, cancel_many, advance, expire. After
every step the native wheel's own invariant check (sl_wheel_check) must pass.

Inputs that cannot change the wheel are not rules of their own any more (a
bogus-handle cancel and a backwards advance took almost a third of the
steps): every cancel and cancel_many also tries handles derived from a real
one that the wheel never gave out, at no cost in steps, and an advance step is
now and then backwards. The test checks the mix of steps it ran.

The native wheel is under test unless STREAMLOG_NO_NATIVE asks for the Python
reference (CI's pure-Python pass): a build that silently fell back to the
reference must not pass as the fuzzed native wheel.
"""
import collections
import functools
import itertools
import os
from typing import ClassVar, NamedTuple

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, initialize, invariant, multiple,
                                 rule, run_state_machine_as_test)

from streamlog import native
from streamlog.timer import TimingWheel

NATIVE_EXPECTED = os.environ.get("STREAMLOG_NO_NATIVE", "") in ("", "0")  # as streamlog.native

STEPS_PER_EXAMPLE = 1_000
EXAMPLES = 20  # per run: short runs make the last one overshoot 100,000 steps by less
MIN_TOTAL_STEPS = 100_000
MAX_RUNS = 20  # Hypothesis ends some examples early, so runs repeat until the steps add up

DELAYS = st.one_of(st.integers(-20, 40), st.integers(0, 3_000), st.integers(0, 10**7),
                   st.sampled_from([0, 1, 2**62, 2**63 - 1]))


class At(NamedTuple):
    """An absolute deadline for add_at (a plain int there is relative to the model's clock)."""

    ms: int


# add_at: an int is a deadline relative to the model's clock (negative: already past), an
# At an absolute one. One branch choice and one value per draw, as DELAYS.
DEADLINES = st.one_of(st.integers(-50, 40), st.integers(-20_000, 3_000), st.integers(0, 10**7),
                      st.sampled_from([At(0), At(2**62), At(2**63 - 1)]))
# add_many: one choice per delay (values at the tick and level edges of the wheels
# fuzzed, and the extremes); the clock it counts from is what varies.
BATCH_DELAYS = st.sampled_from([-20, 0, 1, 2, 3, 7, 8, 9, 19, 20, 21, 63, 64, 65, 399, 400, 401,
                                1_000, 8_000, 10**7, 2**62, 2**63 - 1])
STEPS = st.one_of(st.integers(0, 3), st.integers(0, 200), st.integers(0, 200_000))
BACKWARDS = st.integers(-100, -1)  # moves nothing: the wheel's clock never goes back
NO_OP_STEPS = ("advance_backwards",)


def counted(name):
    """Count the steps of a rule (or of a kind of input inside one) in WheelVersusModel.mix."""
    WheelVersusModel.mix[name] += 1


class WheelVersusModel(RuleBasedStateMachine):
    steps_taken = 0
    mix: ClassVar[collections.Counter] = collections.Counter()  # steps run, by rule or input
    handles = Bundle("handles")

    @initialize(tick_ms=st.sampled_from([1, 2, 5, 10]), wheel_size=st.sampled_from([2, 3, 8, 20]),
                start_ms=st.integers(0, 10_000))
    def start(self, tick_ms, wheel_size, start_ms):
        self.wheel = TimingWheel(tick_ms, wheel_size, start_ms)
        if NATIVE_EXPECTED:
            assert isinstance(self.wheel._core, native.TaskIdWheel), (
                f"the native wheel is not what is fuzzed ({native.UNAVAILABLE_REASON}); "
                "set STREAMLOG_NO_NATIVE=1 to fuzz the Python reference")
        self.tick_ms = tick_ms
        self.now_ms = start_ms
        self.pending = {}  # handle -> (expiration_ms, task_id, order key: see _record)
        self.issued = set()  # every handle the wheel gave out (the others are bogus)
        self.fired = []  # (task_id, order key) in fire order, for the current advance
        self.next_id = 0
        self.checked_after_start = False

    def teardown(self):
        if hasattr(self, "wheel"):
            self.wheel.close()

    def _expiration_at(self, deadline_ms):
        deadline = min(max(deadline_ms, 0), 2**62)
        rounded = -(-deadline // self.tick_ms) * self.tick_ms
        return rounded if rounded <= 2**62 else rounded - self.tick_ms

    def _expiration(self, delay_ms):
        return self._expiration_at(self.now_ms + max(delay_ms, 0))

    def _record(self, handle, expiration):
        assert handle not in self.pending
        # The order key: a deadline already past when added (add_at) counts as due at
        # the current tick. Such tasks fire at the next advance, before any later one,
        # but among themselves the native wheel keeps add order, not deadline order.
        current_ms = self.now_ms - self.now_ms % self.tick_ms
        self.pending[handle] = (expiration, self.next_id, max(expiration, current_ms))
        self.issued.add(handle)
        self.next_id += 1

    def _fire(self, handle_box, nested_delay_ms):
        handle = handle_box[0]
        expiration, task_id, order_key = self.pending.pop(handle)
        assert expiration <= self.now_ms, "fired before its deadline"
        self.fired.append((task_id, order_key))
        if nested_delay_ms is not None:
            self._add(nested_delay_ms, None)

    def _callback(self, nested_delay_ms):
        box = []  # the handle, known only once added
        return box, functools.partial(self._fire, box, nested_delay_ms)

    def _add(self, delay_ms, nested_delay_ms):
        box, callback = self._callback(nested_delay_ms)
        handle = self.wheel.add(delay_ms, callback)
        box.append(handle)
        self._record(handle, self._expiration(delay_ms))
        return handle

    @rule(target=handles, delay_ms=DELAYS)
    def add(self, delay_ms):
        counted("add")
        return self._add(delay_ms, None)

    @rule(target=handles, delay_ms=st.integers(0, 50), nested_delay_ms=st.integers(-2, 5))
    def add_task_that_adds_a_task(self, delay_ms, nested_delay_ms):
        counted("add_task_that_adds_a_task")
        return self._add(delay_ms, nested_delay_ms)

    @rule(target=handles, deadline=DEADLINES)
    def add_at(self, deadline):
        counted("add_at")
        deadline_ms = deadline.ms if isinstance(deadline, At) else self.now_ms + deadline
        box, callback = self._callback(None)
        handle = self.wheel.add_at(deadline_ms, callback)
        box.append(handle)
        self._record(handle, self._expiration_at(deadline_ms))
        return handle

    @rule(target=handles, delays_ms=st.lists(BATCH_DELAYS, max_size=4))
    def add_many(self, delays_ms):
        counted("add_many")
        pairs = [self._callback(None) for _ in delays_ms]
        boxes = [box for box, _ in pairs]
        callbacks = [callback for _, callback in pairs]
        handles = self.wheel.add_many(delays_ms, callbacks).tolist()
        assert len(handles) == len(delays_ms) and len(set(handles)) == len(handles)
        for box, handle, delay_ms in zip(boxes, handles, delays_ms, strict=True):
            box.append(handle)
            self._record(handle, self._expiration(delay_ms))
        return multiple(*handles)

    def _bogus_handles(self, handle):
        """Two handles the wheel (almost surely) never gave out, derived from a real one.

        Derived rather than drawn, so checking them costs no Hypothesis draws (a
        rule of their own spent a seventh of the steps on them): the same slot in
        another generation (the stale-handle case), and an arbitrary int64.
        """
        return handle ^ (1 << 40), (handle * 0x9E3779B97F4A7C15) % 2**64 - 2**63

    def _cancel(self, handle):
        was_pending = handle in self.pending
        assert self.wheel.cancel(handle) is was_pending
        self.pending.pop(handle, None)

    @rule(handle=handles)
    def cancel(self, handle):
        counted("cancel")
        self._cancel(handle)
        for bogus in self._bogus_handles(handle):  # pending only if they alias a real one
            self._cancel(bogus)

    @rule(handles=st.lists(handles, max_size=3))
    def cancel_many(self, handles):
        counted("cancel_many")
        if handles:
            handles = handles + [handles[0]] + list(self._bogus_handles(handles[-1]))
        # A duplicate counts once: the second cancel of a handle finds it gone.
        expected = len({h for h in handles if h in self.pending})
        assert self.wheel.cancel_many(handles) == expected
        for h in handles:
            self.pending.pop(h, None)

    def _advance(self, now_ms):
        self.now_ms = max(self.now_ms, now_ms)
        self.fired = []
        count = self.wheel.advance(now_ms)
        assert count == len(self.fired)
        overdue = [e for e, _, _ in self.pending.values() if e <= self.now_ms]
        assert not overdue, "a due task did not fire"
        keys = [k for _, k in self.fired]
        first_nested = next((i for i, (t, _) in enumerate(self.fired) if t >= self._ids_before),
                            len(keys))
        assert keys[:first_nested] == sorted(keys[:first_nested])
        assert self.wheel.now_ms == self.now_ms

    @rule(step_ms=st.one_of(STEPS, BACKWARDS))
    def advance(self, step_ms):
        counted("advance" if step_ms >= 0 else "advance_backwards")
        self._ids_before = self.next_id
        self._advance(self.now_ms + step_ms)  # a step back is a no-op for the clock

    @rule()
    def advance_to_next_expiration(self):
        counted("advance_to_next_expiration")
        nxt = self.wheel.next_expiration()
        if not self.pending:
            assert nxt is None
            return
        # For a task added with a deadline already past, the native wheel answers the
        # current tick (when advance has work for it), not the past deadline: compare keys.
        assert nxt is not None and nxt <= min(key for _, _, key in self.pending.values())
        self._ids_before = self.next_id
        self._advance(nxt)

    @rule(step_ms=STEPS)
    def expire(self, step_ms):
        counted("expire")
        self.now_ms += step_ms
        callbacks = self.wheel.expire(self.now_ms)
        taken = [cb.args[0][0] for cb in callbacks]  # each callback's handle box
        due = {h for h, (e, _, _) in self.pending.items() if e <= self.now_ms}
        assert len(taken) == len(set(taken)) and set(taken) == due
        keys = [self.pending[h][2] for h in taken]
        assert keys == sorted(keys)
        for h in taken:
            del self.pending[h]
            assert self.wheel.cancel(h) is False  # off the wheel, though never run
        assert self.wheel.now_ms == self.now_ms

    @invariant()
    def agrees_with_the_model(self):
        if not hasattr(self, "wheel"):
            return
        if self.checked_after_start:  # counts rule steps, not the check after initialize
            WheelVersusModel.steps_taken += 1
        self.checked_after_start = True
        assert len(self.wheel) == len(self.pending)
        assert self.wheel.check() == 0
        for handle, (expiration, _, _) in itertools.islice(self.pending.items(), 3):
            assert self.wheel.expiration(handle) == expiration


@pytest.mark.slow
def test_wheel_agrees_with_the_reference_model_for_100k_steps():
    if NATIVE_EXPECTED:
        assert native.AVAILABLE, (f"the native wheel did not load ({native.UNAVAILABLE_REASON}); "
                                  "set STREAMLOG_NO_NATIVE=1 to fuzz the Python reference")
    WheelVersusModel.steps_taken = 0
    WheelVersusModel.mix.clear()
    runs = 0
    while WheelVersusModel.steps_taken < MIN_TOTAL_STEPS and runs < MAX_RUNS:
        runs += 1
        run_state_machine_as_test(
            WheelVersusModel,
            # No example database: replaying stored examples would spend the
            # step budget on old inputs (a failure still shrinks and prints).
            settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS_PER_EXAMPLE,
                              deadline=None, database=None,
                              phases=(Phase.generate, Phase.shrink),
                              suppress_health_check=list(HealthCheck)))
    assert WheelVersusModel.steps_taken >= MIN_TOTAL_STEPS, WheelVersusModel.steps_taken
    mix = WheelVersusModel.mix
    total = sum(mix.values())
    assert sum(mix[name] for name in NO_OP_STEPS) < 0.10 * total, mix
    for name in ("add", "add_at", "add_many", "cancel", "cancel_many", "advance", "expire",
                 "add_task_that_adds_a_task", "advance_to_next_expiration"):
        assert mix[name] >= 0.02 * total, (name, mix)  # each ran, not just in principle
