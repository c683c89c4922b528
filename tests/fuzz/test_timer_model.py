"""Stateful fuzzing: the timing wheel against a plain dict model, >= 100,000 steps per run.

The model keeps every pending task's deadline and its expiration (the
deadline rounded up to tick_ms) and says which tasks an advance must fire:
exactly those whose expiration is <= now_ms, each once, never a cancelled
one, including tasks added by callbacks while the advance runs. After every
step the native wheel's own invariant check (sl_wheel_check) must pass.
"""
import functools
import itertools

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, initialize, invariant, rule,
                                 run_state_machine_as_test)

from streamlog import native
from streamlog.timer import TimingWheel

# Runs on whichever wheel is loaded: native, or the Python reference (STREAMLOG_NO_NATIVE=1).

STEPS_PER_EXAMPLE = 1_000
EXAMPLES = 40
MIN_TOTAL_STEPS = 100_000
MAX_RUNS = 10  # Hypothesis ends some examples early, so runs repeat until the steps add up

DELAYS = st.one_of(st.integers(-20, 40), st.integers(0, 3_000), st.integers(0, 10**7),
                   st.sampled_from([0, 1, 2**62, 2**63 - 1]))
STEPS = st.one_of(st.integers(0, 3), st.integers(0, 200), st.integers(0, 200_000))


class WheelVersusModel(RuleBasedStateMachine):
    steps_taken = 0
    handles = Bundle("handles")

    @initialize(tick_ms=st.sampled_from([1, 2, 5, 10]), wheel_size=st.sampled_from([2, 3, 8, 20]),
                start_ms=st.integers(0, 10_000))
    def start(self, tick_ms, wheel_size, start_ms):
        self.wheel = TimingWheel(tick_ms, wheel_size, start_ms)
        self.tick_ms = tick_ms
        self.now_ms = start_ms
        self.pending = {}  # handle -> (expiration_ms, task_id)
        self.fired = []  # (task_id, expiration_ms) in fire order, for the current advance
        self.next_id = 0
        self.checked_after_start = False

    def teardown(self):
        if hasattr(self, "wheel"):
            self.wheel.close()

    def _expiration(self, delay_ms):
        deadline = min(self.now_ms + max(delay_ms, 0), 2**62)
        rounded = -(-deadline // self.tick_ms) * self.tick_ms
        return rounded if rounded <= 2**62 else rounded - self.tick_ms

    def _fire(self, handle_box, nested_delay_ms):
        handle = handle_box[0]
        expiration, task_id = self.pending.pop(handle)
        assert expiration <= self.now_ms, "fired before its deadline"
        self.fired.append((task_id, expiration))
        if nested_delay_ms is not None:
            self._add(nested_delay_ms, None)

    def _add(self, delay_ms, nested_delay_ms):
        box = []
        handle = self.wheel.add(delay_ms, functools.partial(self._fire, box, nested_delay_ms))
        box.append(handle)
        assert handle not in self.pending
        self.pending[handle] = (self._expiration(delay_ms), self.next_id)
        self.next_id += 1
        return handle

    @rule(target=handles, delay_ms=DELAYS)
    def add(self, delay_ms):
        return self._add(delay_ms, None)

    @rule(target=handles, delay_ms=st.integers(0, 50), nested_delay_ms=st.integers(-2, 5))
    def add_task_that_adds_a_task(self, delay_ms, nested_delay_ms):
        return self._add(delay_ms, nested_delay_ms)

    @rule(handle=handles)
    def cancel(self, handle):
        was_pending = handle in self.pending
        assert self.wheel.cancel(handle) is was_pending
        self.pending.pop(handle, None)

    @rule(handle=st.integers(-(2**63), 2**63 - 1))
    def cancel_bogus_handle(self, handle):
        if handle not in self.pending:
            assert self.wheel.cancel(handle) is False

    def _advance(self, now_ms):
        self.now_ms = max(self.now_ms, now_ms)
        self.fired = []
        count = self.wheel.advance(now_ms)
        assert count == len(self.fired)
        overdue = [e for e, _ in self.pending.values() if e <= self.now_ms]
        assert not overdue, "a due task did not fire"
        expirations = [e for _, e in self.fired]
        first_nested = next((i for i, (t, _) in enumerate(self.fired) if t >= self._ids_before),
                            len(expirations))
        assert expirations[:first_nested] == sorted(expirations[:first_nested])

    @rule(step_ms=STEPS)
    def advance(self, step_ms):
        self._ids_before = self.next_id
        self._advance(self.now_ms + step_ms)

    @rule()
    def advance_to_next_expiration(self):
        nxt = self.wheel.next_expiration()
        if not self.pending:
            assert nxt is None
            return
        assert nxt is not None and nxt <= min(e for e, _ in self.pending.values())
        self._ids_before = self.next_id
        self._advance(nxt)

    @rule(back_ms=st.integers(1, 100))
    def advance_backwards_is_a_no_op_for_the_clock(self, back_ms):
        self._ids_before = self.next_id
        self._advance(self.now_ms - back_ms)
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
        for handle, (expiration, _) in itertools.islice(self.pending.items(), 3):
            assert self.wheel.expiration(handle) == expiration


def test_wheel_agrees_with_the_reference_model_for_100k_steps():
    WheelVersusModel.steps_taken = 0
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
