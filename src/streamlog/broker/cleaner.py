"""The broker's log cleaner thread: compacts the logs whose cleanup.policy has compact.

Shaped like flusher.py: one daemon thread. Each round measures every open
compacted log from its checkpointed first dirty offset
(storage.cleaner_manager.log_to_clean), gives the dirtiest one that qualifies
one pass (storage.log_cleaner.clean_log) and records the pass's new first dirty
offset in `cleaner-offset-checkpoint`. With none qualifying it sleeps
log.cleaner.backoff.ms, or until compact() asks for passes now.

compact() passes are forced: each named log is cleaned whatever its dirty
ratio, after its active segment is rolled (Kafka never cleans the active
segment; a caller asking for compaction now means what was written so far).
min.compaction.lag.ms and the LSO still hold records back.

Retention of the compacted logs runs here too, between passes, when the
broker's retention check asks (request_retention): the flusher's check leaves
them to this thread, as Kafka's LogManager.cleanupLogs leaves them to its
cleaner (LogCleanerManager.deletableLogs, run after each cleaning), so that no
pass is thrown away because retention removed a segment it was reading. A log
this thread does not clean in the background (log.cleaner.enable=false, or the
log is uncleanable) keeps its retention on the flusher (Kafka then applies
none to a compacted log; bounded disk use wins here).

A pass is abandoned, nothing of it swapped in, when the log changes under it:
retention or DeleteRecords removed a segment it read (possible only while the
flusher applies the log's retention), a truncation cut one, compaction was
taken off the topic, or the log was deleted. Kafka's cleaner
lets an aborted cleaning go and cleans the log in a later round
(LogCleaner.CleanerThread.cleanLog: "task can be aborted, let it go"); the
background rounds here do the same. compact() was asked for a pass now, so it
measures a log that changed under its pass again and retries, at most
_FORCED_ATTEMPTS passes; a pass abandoned for good, or the last of them, gives
a result whose `aborted` says why.

close() stops a pass in progress at its next segment (nothing of it is swapped in).
A pass that fails (a damaged segment, a full disk) marks its log uncleanable,
as Kafka does: logged, and skipped by later rounds until the database is
reopened; compact() on it tries again and raises.

Thread-safety: compact() and close() may be called from any thread; passes run
only on the cleaner thread, so one log never has two at once.
"""
import logging
import threading
from typing import NamedTuple

from ..errors import StreamlogError
from ..storage.cleaner_manager import filthiest, log_to_clean
from ..storage.log_cleaner import CleaningAborted, clean_log

log = logging.getLogger("streamlog.broker")

# How many passes compact() gives a log that retention changes under each of them.
_FORCED_ATTEMPTS = 5

_CHANGED = ("the log changed under the pass (retention or DeleteRecords removed a segment "
            "it read, or a truncation cut one)")
_UNCOMPACTED = "compaction was taken off the topic during the pass"
_DELETED = "the log was deleted during the pass"


class CompactionResult(NamedTuple):
    """One forced pass: where the log's next pass starts, and what this one did
    (storage.log_cleaner.CleanStats), or stats None when it did nothing: nothing was
    cleanable (aborted None), or the pass was abandoned (aborted: why)."""

    tp: object
    first_dirty: int
    stats: object
    aborted: object = None   # None, or why the last pass was abandoned (nothing swapped in)


class _Request:
    def __init__(self, tps, progress):
        self.tps = tps
        self.progress = progress
        self.results = []
        self.error = None
        self.done = threading.Event()


class LogCleaner:
    def __init__(self, logs, clock_ms, enabled=True, dedupe_buffer_size=128 << 20,
                 backoff_ms=15_000):
        """logs: the broker's LogDirectory (every open log, internal ones included)."""
        self._logs = logs
        self._clock_ms = clock_ms
        self._enabled = enabled
        self.dedupe_buffer_size = dedupe_buffer_size
        self._backoff_s = backoff_ms / 1000
        self._cond = threading.Condition()
        self._requests = []
        self._closing = False
        self.uncleanable = {}   # tp -> the error that stopped its last pass
        self.passes = 0         # passes completed (tests and describe wait on it)
        self._retention_due = False
        self._thread = threading.Thread(target=self._run, name="streamlog-cleaner", daemon=True)
        self._thread.start()

    # --- requests ---------------------------------------------------------------------

    def compact(self, tps, wait=True, progress=None):
        """Clean each of tps (TopicPartitions of compacted logs) now; with wait, return
        [CompactionResult] once done (raising the first failure), else None at once.
        progress(bytes): called as the passes read."""
        request = _Request(list(tps), progress)
        with self._cond:
            if self._closing:
                raise StreamlogError("the database is closing")
            self._requests.append(request)
            self._cond.notify()
        if not wait:
            return None
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.results

    def owns_retention(self, tp, partition_log):
        """Whether tp's retention runs on this thread rather than the flusher's."""
        return self._enabled and partition_log.config.compact and tp not in self.uncleanable

    def request_retention(self):
        """Apply retention to the logs this thread owns, once no pass is running."""
        if self._enabled:
            with self._cond:
                self._retention_due = True
                self._cond.notify()

    def wake(self):
        """Measure the logs again now (a topic's config changed)."""
        with self._cond:
            self._cond.notify()

    # --- the thread -----------------------------------------------------------------------

    def _run(self):
        while True:
            with self._cond:
                if not self._requests and not self._retention_due and not self._closing:
                    self._cond.wait(self._backoff_s if self._enabled else None)
                if self._closing:
                    requests, self._requests = self._requests, []
                    for request in requests:
                        request.error = StreamlogError("the database closed before compaction")
                        request.done.set()
                    return
                requests, self._requests = self._requests, []
            for request in requests:
                self._serve(request)
            if self._enabled:
                try:
                    self._retention_if_due()
                    while not self._closing and self._clean_filthiest():
                        self._retention_if_due()
                except Exception:
                    log.exception("the log cleaner's round failed")

    def _retention_if_due(self):
        with self._cond:
            due, self._retention_due = self._retention_due, False
        if not due:
            return
        now_ms = self._clock_ms()
        for tp, partition_log in list(self._logs.logs.items()):
            if partition_log.closed or not self.owns_retention(tp, partition_log):
                continue
            try:
                partition_log.delete_old_segments(now_ms)
            except Exception:
                if not partition_log.closed:   # a log deleted meanwhile is no failure
                    log.exception("retention of %s failed", tp)

    def _serve(self, request):
        try:
            for tp in request.tps:
                partition_log = self._logs.get(tp)
                partition_log.roll()
                for _ in range(_FORCED_ATTEMPTS):
                    result = self._clean(tp, partition_log, request.progress, forced=True)
                    if result.aborted != _CHANGED:
                        break   # done, or abandoned for good (deleted, no longer compacted)
                else:
                    result = result._replace(aborted=f"{_FORCED_ATTEMPTS} passes in a row "
                                                     f"abandoned: {result.aborted}")
                request.results.append(result)
        except Exception as exc:
            request.error = exc
        finally:
            request.done.set()

    def _clean_filthiest(self):
        """One pass on the dirtiest qualifying log; False when none qualifies."""
        now_ms = self._clock_ms()
        candidates = []
        for tp, partition_log in list(self._logs.logs.items()):
            if tp in self.uncleanable or partition_log.closed or \
                    not partition_log.config.compact:
                continue
            candidates.append((tp, log_to_clean(partition_log,
                                                self._logs.cleaner_checkpoint(tp), now_ms)))
        chosen = filthiest(c for _, c in candidates)
        if chosen is None:
            return False
        tp = next(tp for tp, c in candidates if c is chosen)
        try:
            self._clean(tp, chosen.log, None, forced=False, measured=chosen)
        except Exception:
            return False   # marked uncleanable and logged by _clean
        return True

    def _clean(self, tp, partition_log, progress, forced, measured=None):
        now_ms = self._clock_ms()
        if measured is None:
            measured = log_to_clean(partition_log, self._logs.cleaner_checkpoint(tp), now_ms)
        if measured.first_uncleanable <= measured.first_dirty:
            return CompactionResult(tp, measured.first_dirty, None)
        if self._logs.cleaner_checkpoint(tp) is None:
            # Durable before the log's first swap: the entry is what tells that the log may
            # now have offset gaps (Broker.alter_topic_config keeps compaction on it).
            self._logs.write_cleaner_checkpoint(tp, measured.first_dirty)
        try:
            result = clean_log(partition_log, measured.first_dirty, measured.first_uncleanable,
                               now_ms, self.dedupe_buffer_size, progress,
                               stop=lambda: self._closing)
        except CleaningAborted:
            raise StreamlogError("the database closed during the cleaning pass") from None
        except Exception as exc:
            if partition_log.closed:
                return CompactionResult(tp, measured.first_dirty, None, _DELETED)
            self.uncleanable[tp] = exc
            log.error("cleaning %s failed; it is not cleaned again until the database is "
                      "reopened: %s", tp, exc)
            raise
        self.uncleanable.pop(tp, None)
        if result is None:   # nothing swapped in: the next pass starts where this one did
            return CompactionResult(tp, measured.first_dirty, None,
                                    _CHANGED if partition_log.config.compact else _UNCOMPACTED)
        self._logs.write_cleaner_checkpoint(tp, result.first_dirty)
        self.passes += 1
        stats = result.stats
        log.info("cleaned %s%s: %d of %d records kept, %d -> %d bytes, %.3f s", tp,
                 " (forced)" if forced else "", stats.records_kept, stats.records_read,
                 stats.bytes_read, stats.bytes_written, stats.elapsed_s)
        return CompactionResult(tp, result.first_dirty, stats)

    def close(self):
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
