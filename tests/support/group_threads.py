"""Consumers of a group, each polling on its own thread, for the group behaviour tests.

A GroupReader subscribes, polls until stopped, records every record it got
and every listener call with the assignment it had, and commits after
processing (and on revocation, the at-least-once pattern that makes an
orderly rebalance lose and repeat nothing). Waiting helpers poll a
condition with a generous deadline: timing never decides a verdict, it
only bounds how long a broken build takes to fail.
"""
import threading

import streamlog

from . import GENEROUS_S, wait_until  # noqa: F401 - the group tests import both from here


class GroupReader(threading.Thread):
    def __init__(self, db, topics, name, group_id="g", commit=True, **settings):
        super().__init__(name=name, daemon=True)
        self.db, self.topics, self.group_id = db, topics, group_id
        self.commit, self.settings = commit, settings
        self.records = []
        self.events = []              # (method, partitions, assignment before the call)
        self.assignments = []         # assignment() after each poll
        self.commit_failures = 0
        self.error = None
        self.consumer = None
        self.stop_event = threading.Event()
        self.lock = threading.Lock()

    # listener ----------------------------------------------------------------------
    def _event(self, method, partitions):
        with self.lock:
            self.events.append((method, sorted(partitions), sorted(self.consumer.assignment())))

    def on_partitions_revoked(self, partitions):
        self._event("revoked", partitions)
        if self.commit:
            self.consumer.commit()

    def on_partitions_assigned(self, partitions):
        self._event("assigned", partitions)

    def on_partitions_lost(self, partitions):
        self._event("lost", partitions)

    # thread -------------------------------------------------------------------------
    def run(self):
        try:
            self.consumer = self.db.consumer(group_id=self.group_id, client_id=self.name,
                                             auto_offset_reset="earliest",
                                             enable_auto_commit=False, **self.settings)
            self.consumer.subscribe(self.topics, listener=self)
            while not self.stop_event.is_set():
                got = self.consumer.poll(timeout=0.05)
                with self.lock:
                    self.records.extend(got)
                    self.assignments.append(sorted(self.consumer.assignment()))
                if got and self.commit:
                    try:
                        self.consumer.commit()
                    except (streamlog.CommitFailedError, streamlog.RebalanceInProgressError):
                        self.commit_failures += 1   # the records will be read again
            self.consumer.close()
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def assignment(self):
        with self.lock:
            return self.assignments[-1] if self.assignments else []

    def finish(self):
        self.stop_event.set()
        self.join(GENEROUS_S)
        assert not self.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error


def partitions_of(db, topic):
    return [streamlog.TopicPartition(topic, p.partition)
            for p in db.describe_topic(topic).partitions]
