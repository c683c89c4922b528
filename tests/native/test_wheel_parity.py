"""The native timing wheel and its Python reference fire the same tasks at the same times."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlog import native, timer_py

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason=str(native.UNAVAILABLE_REASON))

step = st.one_of(
    st.tuples(st.just("add"), st.integers(-5, 30_000)),
    st.tuples(st.just("cancel"), st.integers(0, 60)),
    st.tuples(st.just("advance"), st.integers(0, 5_000)))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 7), st.integers(2, 16), st.integers(0, 10**6),
       st.lists(step, min_size=1, max_size=120))
def test_native_and_reference_agree(tick_ms, wheel_size, start_ms, steps):
    wheels = [native.TaskIdWheel(tick_ms, wheel_size, start_ms),
              timer_py.TaskIdWheel(tick_ms, wheel_size, start_ms)]
    handles = [[], []]  # per wheel, in add order: the i-th add of each is the same task
    now = start_ms
    next_id = 0
    out = np.empty(64, dtype=np.int64)
    for op, arg in steps:
        if op == "add":
            for w, hs in zip(wheels, handles, strict=True):
                hs.append(w.add(arg, next_id))
            next_id += 1
        elif op == "cancel" and handles[0]:
            i = arg % len(handles[0])
            assert wheels[0].cancel(handles[0][i]) == wheels[1].cancel(handles[1][i])
        elif op == "advance":
            now += arg
            fired = []
            for w in wheels:
                ids = []
                while True:
                    n = w.advance(now, out_ids=out)
                    ids.extend(out[:n].tolist())
                    if n < len(out):
                        break
                fired.append(sorted(ids))
            assert fired[0] == fired[1]
        assert len(wheels[0]) == len(wheels[1])
        ours, ref = wheels[0].next_expiration(), wheels[1].next_expiration()
        assert (ours is None) == (ref is None)
        if ref is not None:
            assert ours <= ref  # native reports a bucket boundary, never later than the task
    for hs_native, hs_ref in zip(*handles, strict=True):
        assert wheels[0].expiration(hs_native) == wheels[1].expiration(hs_ref)
