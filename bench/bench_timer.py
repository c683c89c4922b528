#!/usr/bin/env python3
"""Benchmark of the native timing wheel against a heapq timer queue run in the same process.

    python bench/bench_timer.py [--quick] [--repeats N] [--json FILE]

--quick runs tiny sizes in a few seconds (the test suite does, so the bench
cannot rot); the full run takes about a minute.

Prints, in one run:
 (a) Python-driven: N adds through TimingWheel.add with a Python callback,
     cancel every other handle, then advance from next expiration to next
     expiration until everything fired; total operations/s against a heapq
     timer queue written in Python doing the same work (lazy cancellation),
     and the ratio (target >= 2x).
 (b) C-internal: the same work through TaskIdWheel.add_many / cancel_many /
     advance into a numpy buffer, one FFI crossing per batch (target >= 10M
     operations/s).
 (c) the SystemTimer reaper's lateness (fire time - deadline) p50 / p99 for
     timers with delays uniform in 1..50 ms: added one by one from a Python
     loop (the adding thread competes for the GIL, as a producer would), and
     scheduled ahead so that only the reaper's wake-up precision shows.

Operations = adds + cancels + fires. Delays for (a) and (b) are uniform in
1..30,000 ms (the range of Kafka's request and session timeouts) on the
default wheel (tick_ms=1, wheel_size=20), so most tasks start three or four
wheels up and cascade down. Times are best of interleaved repeats
(bench/harness.py); the machine is shared, so compare ratios measured in the
same run, not bare times. Exit status 1 when a full run misses a target.
"""
import gc
import heapq
import os
import random
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
import harness  # noqa: E402

from streamlog.native import TaskIdWheel  # noqa: E402
from streamlog.timer import SystemTimer, TimingWheel  # noqa: E402

MAX_DELAY_MS = 30_000
TICK_MS, WHEEL_SIZE = 1, 20
C_TARGET_OPS = 10_000_000
SEED = 20240601


class HeapqTimer:
    """The baseline: a binary heap of [deadline, seq, callback] with lazy cancellation."""

    def __init__(self, start_ms=0):
        self._heap = []
        self._seq = 0
        self._live = 0
        self.now_ms = start_ms

    def add(self, delay_ms, callback):
        entry = [self.now_ms + max(delay_ms, 0), self._seq, callback]
        self._seq += 1
        self._live += 1
        heapq.heappush(self._heap, entry)
        return entry

    def cancel(self, entry):
        if entry[2] is None:
            return False
        entry[2] = None
        self._live -= 1
        return True

    def next_expiration(self):
        heap = self._heap
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def advance(self, now_ms):
        self.now_ms = max(self.now_ms, now_ms)
        heap = self._heap
        pop = heapq.heappop
        fired = 0
        while heap and heap[0][0] <= now_ms:
            entry = pop(heap)
            callback = entry[2]
            if callback is not None:
                entry[2] = None
                self._live -= 1
                callback()
                fired += 1
        return fired

    def __len__(self):
        return self._live


def _noop():
    pass


def run_python_driven(timer, delays):
    """Add every delay with a Python callback, cancel every other handle, advance until empty."""
    add = timer.add
    handles = [add(delay, _noop) for delay in delays]
    cancel = timer.cancel
    cancelled = sum(1 for handle in handles[::2] if cancel(handle))
    fired = 0
    advance, next_expiration = timer.advance, timer.next_expiration
    while len(timer):
        fired += advance(next_expiration())
    assert fired + cancelled == len(delays), (fired, cancelled)


def run_c_internal(delays_ms, out):
    """The same work in three kinds of native call: add_many, cancel_many, advance into `out`."""
    wheel = TaskIdWheel(TICK_MS, WHEEL_SIZE, 0)
    ids = np.arange(len(delays_ms), dtype=np.int64)
    end_ms = int(delays_ms.max())
    handles = wheel.add_many(delays_ms, ids)
    cancelled = wheel.cancel_many(handles[::2])
    fired = 0
    while True:
        n = wheel.advance(end_ms, out)
        fired += n
        if n < len(out):
            break
    assert fired + cancelled == len(delays_ms) and len(wheel) == 0
    wheel.close()


def run_reaper_lateness(count, max_delay_ms, seed, ahead):
    """Lateness (fire time - deadline) of `count` SystemTimer tasks, delays uniform 1..max.

    ahead=False: added one by one from a Python loop with add(delay), so the
    adding thread is still running Python while the first timers come due and
    the reaper may wait for the GIL (up to the 5 ms switch interval), and each
    deadline is the add time rounded up to the millisecond (never early) plus
    the delay. ahead=True: add_at(start + delay) with start far enough ahead
    that every add is done before the first fires, deadlines on exact
    millisecond boundaries: the reaper's own wake-up precision.
    """
    rng = random.Random(seed)
    delays = [rng.randint(1, max_delay_ms) for _ in range(count)]
    lateness_ns = []
    lock = threading.Lock()
    done = threading.Event()

    def make(deadline_ns):
        def callback():
            late = time.monotonic_ns() - deadline_ns
            with lock:
                lateness_ns.append(late)
                if len(lateness_ns) == count:
                    done.set()
        return callback

    with SystemTimer("bench") as timer:
        if ahead:
            start_ms = time.monotonic_ns() // 1_000_000 + 500
            for delay in delays:
                timer.add_at(start_ms + delay, make((start_ms + delay) * 1_000_000))
            if time.monotonic_ns() >= (start_ms + 1) * 1_000_000:
                raise RuntimeError("adding took longer than the 500 ms head start")
        else:
            for delay in delays:
                timer.add(delay, make(time.monotonic_ns() + delay * 1_000_000))
        if not done.wait(60):
            raise RuntimeError("reaper did not fire every timer within 60 s")
    ms = np.array(lateness_ns, dtype=np.float64) / 1e6
    return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)),
            "max": float(ms.max()), "min": float(ms.min()), "early": int((ms < 0).sum())}


def main():
    args = harness.parse_args(__doc__.splitlines()[0])
    n = 20_000 if args.quick else 1_000_000
    reaper_count, reaper_max_delay_ms = (500, 20) if args.quick else (10_000, 50)
    results = harness.Results("bench_timer")
    results.header()
    rng = random.Random(SEED)
    delays = [rng.randint(1, MAX_DELAY_MS) for _ in range(n)]
    ops = 2 * n  # n adds + the cancelled half + the fired half
    print(f"workload: {n:,} adds, delays uniform 1..{MAX_DELAY_MS:,} ms, cancel every other "
          f"handle, advance until all fired; wheel tick_ms={TICK_MS}, wheel_size={WHEEL_SIZE}; "
          f"best of {args.repeats}")
    if args.quick:
        print("(--quick: sizes too small for the targets, which are judged on full runs only)")

    t_wheel, t_heapq = harness.best_of(
        args.repeats,
        lambda: run_python_driven(TimingWheel(TICK_MS, WHEEL_SIZE, 0), delays),
        lambda: run_python_driven(HeapqTimer(0), delays))
    results.add("(a) Python-driven TimingWheel.add/cancel/advance", ops / t_wheel, "ops/s",
                t_heapq / t_wheel, 2.0, "heapq")
    results.add("    heapq timer queue in Python, lazy cancellation", ops / t_heapq, "ops/s")

    delays_ms = np.array(delays, dtype=np.int64)
    out = np.empty(65_536, dtype=np.int64)
    (t_c,) = harness.best_of(max(args.repeats, 3), lambda: run_c_internal(delays_ms, out))
    results.add("(b) C-internal add_many/cancel_many/advance", ops / t_c, "ops/s",
                ops / t_c / C_TARGET_OPS, 1.0, "of 10M ops/s")
    results.add("    same work, ratio to the heapq queue", ops / t_c, "ops/s", t_heapq / t_c, None,
                "heapq")

    print(f"(c) reaper lateness = fire time - deadline, {reaper_count:,} SystemTimer tasks, "
          f"delays uniform 1..{reaper_max_delay_ms} ms")
    for ahead, how in ((False, "add(delay) in a loop"), (True, "add_at, scheduled ahead")):
        # Start from a collected heap: a full collection triggered by the
        # garbage of (a) and (b) stalls every thread for ~20 ms and would be
        # charged to the reaper.
        gc.collect()
        late = run_reaper_lateness(reaper_count, reaper_max_delay_ms, SEED, ahead)
        for stat in ("p50", "p99", "max"):
            results.add(f"    reaper lateness {stat}, {how}", late[stat] * 1000, "us")
        if late["early"]:
            raise AssertionError(f"{late['early']} timers fired before their deadline")
    results.write_json(args.json)
    return harness.exit_code(results, args.quick)


if __name__ == "__main__":
    sys.exit(main())
