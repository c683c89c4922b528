"""The consumer's long poll: a fetch parked in the purgatory until data arrives.

A fetch that finds fewer than fetch_min_bytes waits as a DelayedFetch,
watched under each of its partitions. An append to one of them calls
check_and_complete, which completes the wait as soon as enough data is
readable (or a partition is gone, or its position is out of range: an error
answer is also an answer); otherwise the timing wheel expires it after
fetch_max_wait_ms. A fetch may also be watched under a wake-up key of its
consumer: Broker.wakeup(key) answers it at once (a rebalance needs the
consumer's attention, or the application called consumer.wakeup()). Either
way the waiting thread wakes on `done` and reads.
"""
import threading

from .purgatory import DelayedOperation


def _bytes_available(log, offset, wanted, upper):
    """Bytes of the whole batches readable from offset, counted until `wanted` is reached.

    A read returns the whole batches that fit its budget, so it leaves out the
    batch that would cross `wanted`: summing one read alone never saw 80 + 1070
    bytes as reaching 1000, and the fetch waited for fetch.max.wait.ms. So read
    on from where it stopped: the next read returns at least the batch holding
    its offset (min_one_batch). As Kafka's DelayedFetch, which counts the bytes
    between the fetch position and the high watermark.
    """
    total = 0
    while total < wanted:
        fetched = log.read(offset, wanted - total, max_offset=upper)
        if not fetched.batches:
            break
        total += fetched.size
        offset = fetched.batches[-1].next_offset
        if offset >= upper:
            break
    return total


class DelayedFetch(DelayedOperation):
    def __init__(self, delay_ms, partitions, positions, min_bytes, interrupted=None,
                 read_committed=False, partition_max_bytes=None):
        super().__init__(delay_ms)
        # {tp: the most bytes the fetch reads of tp}: no more of tp counts towards
        # min_bytes (Kafka's DelayedFetch.tryComplete caps each partition's bytes available
        # by its fetch's maxBytes), or the wait would end for bytes the read leaves out.
        self.partition_max_bytes = partition_max_bytes or {}
        # read_committed: only what is below the last stable offset counts (Kafka's
        # DelayedFetch with FetchIsolation.TXN_COMMITTED); a marker moving it wakes us.
        self.read_committed = read_committed
        self.partitions = partitions  # the broker's live map: tp -> PartitionLog
        self.positions = positions    # tp -> fetch offset
        self.min_bytes = min_bytes
        self.done = threading.Event()
        self.woken = False            # set by Broker.wakeup: answer now, with what there is
        # The waiter's own "something happened" flag, checked before and after the op is
        # watched, so a wakeup(key) that ran before the watch existed is not lost.
        self.interrupted = interrupted

    def try_complete(self):
        if self.woken or (self.interrupted is not None and self.interrupted()):
            return self.force_complete()
        available = 0
        for tp, offset in self.positions.items():
            log = self.partitions.get(tp)
            if log is None or log.closed or not \
                    log.log_start_offset <= offset <= log.log_end_offset:
                return self.force_complete()
            upper = log.last_stable_offset if self.read_committed else log.high_watermark
            if upper > offset:
                if self.min_bytes <= 1:
                    return self.force_complete()
                limit = self.partition_max_bytes.get(tp, self.min_bytes)
                available += min(_bytes_available(log, offset,
                                                  min(self.min_bytes - available, limit), upper),
                                 limit)
                if available >= self.min_bytes:
                    return self.force_complete()
        return False

    def on_complete(self):
        self.done.set()
