"""Pure-Python reference of the native timing wheel's interface (native.TaskIdWheel).

Same observable behaviour, not the same algorithm: a binary heap of
(deadline, sequence, handle) with lazy cancellation instead of hierarchical
wheels. Deadlines are rounded up to tick_ms; a task is handed out by the first
advance whose now_ms reaches its rounded deadline, in deadline order (ties in
the order added); cancel is True only while the task is pending; stale and
unknown handles answer False. It runs when the extension is absent or
STREAMLOG_NO_NATIVE=1 is set, and the tests hold the native wheel to it.
"""
import heapq
import itertools

import numpy as np

from .errors import TimerClosedError

_MAX_DEADLINE_MS = 1 << 62
_MAX_TICK_MS = 1 << 32
_MAX_WHEEL_SIZE = 1 << 16
_BATCH = 4096


class TaskIdWheel:
    batch = _BATCH

    def __init__(self, tick_ms=1, wheel_size=20, start_ms=0):
        if not (1 <= tick_ms <= _MAX_TICK_MS and 2 <= wheel_size <= _MAX_WHEEL_SIZE
                and start_ms >= 0):
            raise ValueError(
                "invalid argument for the timing wheel (tick_ms in [1, 2^32], wheel_size in "
                f"[2, 65536], start_ms >= 0): got tick_ms={tick_ms}, wheel_size={wheel_size}, "
                f"start_ms={start_ms}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self._now = start_ms
        self._heap = []
        self._pending = {}  # handle -> (deadline, task_id)
        self._handles = itertools.count(1)
        self._closed = False

    def _check_open(self):
        if self._closed:
            raise TimerClosedError("the timing wheel is closed; create a new one")

    def _round_up(self, deadline_ms):
        deadline_ms = min(max(deadline_ms, 0), _MAX_DEADLINE_MS)
        rounded = -(-deadline_ms // self.tick_ms) * self.tick_ms
        # As the native wheel: deadlines are clamped to 2^62, so one whose round-up would
        # pass that limit goes one tick down instead.
        return rounded if rounded <= _MAX_DEADLINE_MS else rounded - self.tick_ms

    def add(self, delay_ms, task_id=0):
        return self.add_at(self._now + max(delay_ms, 0), task_id)

    def add_at(self, deadline_ms, task_id=0):
        self._check_open()
        handle = next(self._handles)
        deadline = self._round_up(deadline_ms)
        self._pending[handle] = (deadline, task_id)
        heapq.heappush(self._heap, (deadline, handle))
        return handle

    def add_many(self, delays_ms, task_ids=None):
        delays = np.ascontiguousarray(delays_ms, dtype=np.int64)
        if task_ids is not None:
            ids = np.ascontiguousarray(task_ids, dtype=np.int64)
            if len(ids) != len(delays):
                raise ValueError("delays_ms and task_ids differ in length")
        else:
            ids = np.arange(len(delays), dtype=np.int64)
        return np.array([self.add(int(d), int(i)) for d, i in zip(delays, ids, strict=True)],
                        dtype=np.int64)

    def cancel(self, handle):
        return not self._closed and self._pending.pop(int(handle), None) is not None

    def cancel_many(self, handles):
        self._check_open()
        return sum(self.cancel(h) for h in np.asarray(handles, dtype=np.int64).tolist())

    def _take(self, now_ms, cap):
        """Pop up to cap due tasks: [(handle, task_id)]."""
        self._check_open()
        self._now = max(self._now, now_ms)
        out = []
        heap = self._heap
        while heap and len(out) < cap and heap[0][0] <= self._now:
            _, handle = heapq.heappop(heap)
            entry = self._pending.pop(handle, None)
            if entry is not None:  # else cancelled: dropped lazily
                out.append((handle, entry[1]))
        return out

    def advance(self, now_ms, out_ids=None, out_handles=None):
        if out_ids is None and out_handles is None:
            raise ValueError("advance needs out_ids or out_handles")
        cap = min(len(a) for a in (out_ids, out_handles) if a is not None)
        taken = self._take(now_ms, cap)
        for i, (handle, task_id) in enumerate(taken):
            if out_ids is not None:
                out_ids[i] = task_id
            if out_handles is not None:
                out_handles[i] = handle
        return len(taken)

    def advance_handles(self, now_ms):
        return [handle for handle, _ in self._take(now_ms, _BATCH)]

    def next_expiration(self):
        heap = self._heap
        while heap and heap[0][1] not in self._pending:
            heapq.heappop(heap)  # cancelled
        return heap[0][0] if heap else None

    def expiration(self, handle):
        entry = self._pending.get(int(handle))
        return None if entry is None else entry[0]

    def __len__(self):
        return len(self._pending)

    @property
    def now_ms(self):
        return self._now

    @property
    def current_ms(self):
        return self._now // self.tick_ms * self.tick_ms

    @property
    def levels(self):
        return 1  # no hierarchy in the reference

    @property
    def closed(self):
        return self._closed

    def check(self):
        return 0

    def close(self):
        self._closed = True
        self._heap = []
        self._pending = {}
