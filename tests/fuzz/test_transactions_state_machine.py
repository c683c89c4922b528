"""Hypothesis state machine: plain, idempotent and transactional producers (with retries,
aborts, fencing and restarts) against a model of what Kafka's rules make visible
(KAFKA_REFERENCE.md §5, §6.3). After every step: read_committed returns exactly the
committed records in log order, read_uncommitted every data record, and the last stable
offset is the first offset of the oldest open transaction (or the log end)."""
import shutil
import tempfile
import time

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import streamlog
from streamlog import TopicPartition
from streamlog.storage.record_batch import build_batch

TP = TopicPartition("t", 0)
TXN_IDS = ("a", "b")


class Producers(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="txn-sm-")
        self.records = []       # model: [value, state] in log order; state in
        self.counter = 0        # committed / aborted / ("open", txn id)
        self.raw = None         # (pid, next sequence, last batch bytes) of a retrying client
        self._open()

    def _open(self):
        self.db = streamlog.open(self.root, config={"transaction.state.log.num.partitions": 1})
        if "t" not in self.db.topics():
            self.db.create_topic("t", partitions=1)
        self.plain = self.db.producer()
        self.txn = {}
        self.in_txn = set()
        for tid in TXN_IDS:
            p = self.db.producer(transactional_id=tid)
            p.init_transactions()   # aborts what an earlier instance left open
            self.txn[tid] = p
        self._close_open(TXN_IDS, "aborted")

    def _close_open(self, tids, outcome):
        for record in self.records:
            if record[1] in [("open", t) for t in tids]:
                record[1] = outcome

    def _value(self):
        self.counter += 1
        return b"v%d" % self.counter

    # --- plain and idempotent -------------------------------------------------------------

    @rule()
    def plain_send(self):
        value = self._value()
        self.plain.send("t", value=value, partition=0).result()
        self.records.append([value, "committed"])

    @rule(count=st.integers(1, 3))
    def idempotent_send(self, count):
        if self.raw is None:
            self.raw = [self.db._broker.init_producer_id()[0], 0, None]
        pid, seq, _ = self.raw
        values = [self._value() for _ in range(count)]
        data = bytes(build_batch(values, timestamp=int(time.time() * 1000), producer_id=pid,
                                 producer_epoch=0, base_sequence=seq))
        info = self.db._broker.produce(TP, data)
        self.raw = [pid, seq + count, (data, info.first_offset)]
        self.records.extend([v, "committed"] for v in values)

    @precondition(lambda self: self.raw is not None and self.raw[2] is not None)
    @rule()
    def idempotent_retry(self):
        data, first = self.raw[2]
        end = self.db._broker.partition_log(TP).log_end_offset
        info = self.db._broker.produce(TP, data)   # the same batch again: not written twice
        assert info.first_offset == first
        assert self.db._broker.partition_log(TP).log_end_offset == end

    # --- transactions ------------------------------------------------------------------------

    @rule(tid=st.sampled_from(TXN_IDS))
    def begin(self, tid):
        if tid not in self.in_txn:
            self.txn[tid].begin_transaction()
            self.in_txn.add(tid)

    @rule(tid=st.sampled_from(TXN_IDS), count=st.integers(1, 3))
    def txn_send(self, tid, count):
        if tid not in self.in_txn:
            return
        p = self.txn[tid]
        for _ in range(count):
            value = self._value()
            p.send("t", value=value, partition=0)
            self.records.append([value, ("open", tid)])
        p.flush()

    @rule(tid=st.sampled_from(TXN_IDS), commit=st.booleans())
    def end(self, tid, commit):
        if tid not in self.in_txn:
            return
        if commit:
            self.txn[tid].commit_transaction()
        else:
            self.txn[tid].abort_transaction()
        self.in_txn.discard(tid)
        self._close_open([tid], "committed" if commit else "aborted")

    @rule(tid=st.sampled_from(TXN_IDS))
    def zombie_replaced(self, tid):
        """A new instance of the id: the old one's open transaction is aborted, it is fenced."""
        old = self.txn[tid]
        was_in_txn = tid in self.in_txn
        fresh = self.db.producer(transactional_id=tid)
        fresh.init_transactions()
        self._close_open([tid], "aborted")
        self.in_txn.discard(tid)
        try:
            if not was_in_txn:
                old.begin_transaction()
            old.send("t", value=b"zombie", partition=0).result()
            raise AssertionError("the replaced producer could still write")
        except streamlog.errors.ProducerFencedError:
            pass
        old.close()   # what a fenced producer's owner does
        self.txn[tid] = fresh

    @rule()
    def restart(self):
        self.db.close()
        self._open()

    # --- checks ------------------------------------------------------------------------------

    def _read(self, isolation):
        consumer = self.db.consumer(isolation_level=isolation, auto_offset_reset="earliest")
        consumer.assign([TP])
        out = []
        while records := consumer.poll(timeout=0):
            out += [r.value for r in records]
        consumer.close()
        return out

    @invariant()
    def visible_as_the_model_says(self):
        open_at = next((i for i, r in enumerate(self.records) if isinstance(r[1], tuple)), None)
        stable = self.records if open_at is None else self.records[:open_at]
        assert self._read("read_committed") == [v for v, s in stable if s == "committed"]
        assert self._read("read_uncommitted") == [v for v, _ in self.records]
        log = self.db._broker.partition_log(TP)
        if open_at is None:
            assert log.last_stable_offset == log.high_watermark
        else:
            assert log.last_stable_offset < log.high_watermark

    def teardown(self):
        self.db.close()
        shutil.rmtree(self.root, ignore_errors=True)


TestProducers = Producers.TestCase
TestProducers.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                  suppress_health_check=[HealthCheck.too_slow])
