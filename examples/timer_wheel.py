"""Timers and delayed operations in streamlog, in about a page. Run: python examples/timer_wheel.py

1. A TimingWheel driven by hand: callbacks fire when advance() reaches their deadline.
2. A long-poll fetch in a purgatory: it completes as soon as enough bytes are
   appended (check_and_complete on the partition), or when fetch_max_wait_ms
   runs out on the broker's SystemTimer reaper thread.
"""
import threading

from streamlog.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from streamlog.timer import SystemTimer, TimingWheel


def wheel_by_hand():
    wheel = TimingWheel(tick_ms=1, wheel_size=20, start_ms=0)
    fired = []
    for delay_ms in (5, 50, 5_000):
        wheel.add(delay_ms, lambda d=delay_ms: fired.append(d))
    lost = wheel.add(10, lambda: fired.append("never"))
    wheel.cancel(lost)
    print("pending:", len(wheel), "next expiration:", wheel.next_expiration())
    while len(wheel):
        now_ms = wheel.next_expiration()  # jump straight to the next due bucket
        wheel.advance(now_ms)
        print(f"  advanced to {now_ms:>5} ms, fired so far: {fired}")
    wheel.close()


class LongPollFetch(DelayedOperation):
    """Wait for fetch_min_bytes on a partition, at most fetch_max_wait_ms."""

    def __init__(self, partition_log, fetch_min_bytes, fetch_max_wait_ms):
        super().__init__(fetch_max_wait_ms)
        self.partition_log = partition_log
        self.fetch_min_bytes = fetch_min_bytes
        self.done = threading.Event()
        self.expired = threading.Event()

    def try_complete(self):
        if sum(map(len, self.partition_log)) >= self.fetch_min_bytes:
            return self.force_complete()
        return False

    def on_complete(self):
        # Exactly once, by whichever came first: the append or the timer.
        self.response = b"".join(self.partition_log)
        self.done.set()

    def on_expiration(self):
        # Runs after on_complete when the wait ran out (e.g. to count expired fetches).
        self.expired.set()


def long_poll_in_a_purgatory():
    with SystemTimer("example") as timer:
        fetches = DelayedOperationPurgatory("fetch", timer)
        partition = ("events", 0)
        log = []

        quick = LongPollFetch(log, fetch_min_bytes=4, fetch_max_wait_ms=5_000)
        fetches.try_complete_else_watch(quick, [partition])
        log.append(b"hello")  # an append to the partition...
        fetches.check_and_complete(partition)  # ...wakes the fetches watching it
        quick.done.wait(5)
        print(f"  fetch 1 completed by the append: {quick.response!r}, "
              f"expired: {quick.expired.is_set()}")

        slow = LongPollFetch(log, fetch_min_bytes=1_000, fetch_max_wait_ms=30)
        fetches.try_complete_else_watch(slow, [partition])
        slow.expired.wait(5)
        print(f"  fetch 2 completed when its 30 ms ran out: {slow.response!r}, "
              f"expired: {slow.expired.is_set()}")
        fetches.shutdown()


if __name__ == "__main__":
    print("1. TimingWheel by hand")
    wheel_by_hand()
    print("2. long-poll fetch in a purgatory")
    long_poll_in_a_purgatory()
