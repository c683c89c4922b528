"""Transactional ids' metadata, kept in the internal topic `__transaction_state`.

As in Kafka: a compacted topic of transaction.state.log.num.partitions
partitions (50), each transactional id's records in partition
abs(javaHashCode(id)) % n, the last record of an id its state, a tombstone
its removal. Opening the database replays the topic into memory.

Records are Kafka's own schemas (TransactionLogKey / TransactionLogValue,
version 0; big-endian, strings as int16 length + UTF-8):

    key    int16 version (0) | string transactionalId
    value  int16 version (0) | int64 producerId | int16 producerEpoch |
           int32 transactionTimeoutMs | int8 transactionStatus (TxnState id) |
           int32 count, count x {string topic | int32 count, count x int32 partition} |
           int64 transactionLastUpdateTimestampMs | int64 transactionStartTimestampMs

Thread-safety: the transaction coordinator calls this under its own lock.
"""
import struct

from ..errors import CorruptRecordError
from ..storage.keyed_log import encode_changes, replay
from ..structs import TopicPartition
from . import internal_appends
from .offsets import cached_partition_for, partition_for
from .transaction import TransactionMetadata, TxnState

TRANSACTION_STATE_TOPIC = "__transaction_state"


def transaction_state_config(broker_config):
    """__transaction_state's topic config, as Kafka's TransactionStateManager
    .transactionTopicConfigs makes it: compacted, 100 MiB segments, records stored
    uncompressed, never an unclean election, and min.insync.replicas from the brokers'
    transaction.state.log.min.isr (default 2: in a cluster a state record is taken only
    once two replicas hold it; a topic of fewer replicas counts them all)."""
    return {"cleanup.policy": "compact", "segment.bytes": 104857600,
            "compression.type": "uncompressed", "unclean.leader.election.enable": False,
            "min.insync.replicas": broker_config.transaction_state_log_min_isr}

# In a cluster, how long a state record waits for its replicas (Kafka's
# transaction.state.log's appends wait up to request.timeout.ms).
WRITE_TIMEOUT_S = 30.0

_VALUE_HEAD = struct.Struct(">hqhib")
_VALUE_TAIL = struct.Struct(">qq")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _string(text):
    data = text.encode("utf-8")
    return _I16.pack(len(data)) + data


def encode_key(transactional_id):
    return _I16.pack(0) + _string(transactional_id)


def encode_value(meta):
    by_topic = {}
    for tp in meta.partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = bytearray(_VALUE_HEAD.pack(0, meta.producer_id, meta.producer_epoch, meta.timeout_ms,
                                     int(meta.state)))
    out += _I32.pack(len(by_topic))
    for topic in sorted(by_topic):
        out += _string(topic) + _I32.pack(len(by_topic[topic]))
        for p in sorted(by_topic[topic]):
            out += _I32.pack(p)
    out += _VALUE_TAIL.pack(meta.last_update_ms, meta.start_ms)
    return bytes(out)


class _Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def string(self):
        (n,) = self.take(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("bad string length")
        text = bytes(self.data[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return text


def decode_key(data):
    reader = _Reader(data)
    (version,) = reader.take(_I16)
    if version != 0:
        raise ValueError(f"transaction log key version {version}")
    return reader.string()


def decode_value(transactional_id, data):
    reader = _Reader(data)
    version, pid, epoch, timeout, status = reader.take(_VALUE_HEAD)
    if version != 0:
        raise ValueError(f"transaction log value version {version}")
    (topics,) = reader.take(_I32)
    partitions = set()
    for _ in range(topics):
        topic = reader.string()
        (count,) = reader.take(_I32)
        for _ in range(count):
            partitions.add(TopicPartition(topic, reader.take(_I32)[0]))
    last_update, start = reader.take(_VALUE_TAIL)
    if reader.pos != len(data):
        raise ValueError("trailing bytes")
    return TransactionMetadata(transactional_id, pid, epoch, timeout, TxnState(status),
                               frozenset(partitions), last_update, start)


class TransactionLog:
    """Every transactional id's metadata, in memory and in `__transaction_state`."""

    def __init__(self, broker, partitions):
        self._broker = broker
        self._wanted_partitions = partitions
        self.transactions = {}  # transactional id -> TransactionMetadata
        self._replayed = {}
        # partition -> the leader epoch at which this broker loaded it (a cluster's): the
        # coordinator epoch its markers carry, which fences an older coordinator's.
        self._coordinator_epochs = {}
        self.partitions = 0
        if TRANSACTION_STATE_TOPIC in broker.topics():
            self.partitions = broker.topic(TRANSACTION_STATE_TOPIC).partitions
            for p in range(self.partitions):
                tp = TopicPartition(TRANSACTION_STATE_TOPIC, p)
                self._replayed[p] = replay(broker.partition_log(tp), 0,
                                           lambda k, v, _ts, tp=tp: self._apply(tp, k, v))

    def _apply(self, tp, key, value):
        try:
            transactional_id = decode_key(key)
            if value is None:
                self.transactions.pop(transactional_id, None)
            else:
                self.transactions[transactional_id] = decode_value(transactional_id, value)
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            raise CorruptRecordError(f"undecodable record in {tp}: {exc}") from None

    def partition_of(self, transactional_id):
        if not self.partitions:
            # A cluster's controller makes the topic (replicated) before a transactional
            # request reaches this broker; a database on its own makes it here.
            info = self._broker.topics().get(TRANSACTION_STATE_TOPIC) or \
                self._broker.create_topic(TRANSACTION_STATE_TOPIC, self._wanted_partitions,
                                          transaction_state_config(self._broker.config),
                                          internal=True)
            self.partitions = info.partitions
        return TopicPartition(TRANSACTION_STATE_TOPIC,
                              cached_partition_for(transactional_id, self.partitions))

    def write(self, meta, now_ms, durable=True):
        """Append meta as the id's state (fsynced unless durable=False); only then is it
        the state in memory. durable=False is for a record whose loss a stop may cost: a
        CompleteCommit/CompleteAbort, which the next open redoes from the Prepare record
        before it (markers written twice end nothing the second time)."""
        self._append(self.partition_of(meta.transactional_id),
                     [(encode_key(meta.transactional_id), encode_value(meta))], now_ms, durable)
        self.transactions[meta.transactional_id] = meta

    def remove(self, transactional_ids, now_ms):
        """Tombstone the ids (expired: TransactionStateManager.removeExpiredTransactionalIds),
        one batch per partition, not fsynced (an id a stop keeps expires at the next
        check); only then are they forgotten."""
        by_partition = {}
        for transactional_id in transactional_ids:
            by_partition.setdefault(self.partition_of(transactional_id), []).append(
                transactional_id)
        for tp, ids in sorted(by_partition.items()):
            self._append(tp, [(encode_key(i), None) for i in ids], now_ms, durable=False)
            for transactional_id in ids:
                self.transactions.pop(transactional_id, None)

    def _append(self, tp, changes, now_ms, durable):
        """Append [(key, value or None)] to tp as one batch: in a cluster, acknowledged once
        min.insync.replicas hold it (Kafka's coordinator appends with acks=all; the next
        leader loads it); on a database on its own fsynced if durable."""
        info = internal_appends.append(self._broker, tp, encode_changes(changes, now_ms))
        if internal_appends.replicated(self._broker, tp):
            internal_appends.wait_replicated(self._broker, tp, info.last_offset + 1,
                                             WRITE_TIMEOUT_S)
        elif durable:
            self._broker.partition_log(tp).flush()

    def leads(self, transactional_id):
        """Whether this broker coordinates the id (in a cluster: leads its partition, and
        has loaded it at the current leader epoch)."""
        replicas = self._broker.replicas
        return replicas is None or replicas.loaded(self.partition_of(transactional_id))

    def check_leads(self, transactional_id):
        """NotCoordinatorError / CoordinatorLoadInProgressError unless leads()."""
        replicas = self._broker.replicas
        if replicas is not None:
            replicas.check_loaded(self.partition_of(transactional_id))

    def check_none_loading(self):
        """CoordinatorLoadInProgressError while a partition this broker leads is not loaded
        yet: a listing of the ids coordinated here would miss its ids (Kafka's
        listTransactionStates answers so while any partition loads)."""
        replicas = self._broker.replicas
        info = None if replicas is None else self._broker.topics().get(TRANSACTION_STATE_TOPIC)
        for partition in range(0 if info is None else info.partitions):
            tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
            if replicas.leads(tp):
                replicas.check_loaded(tp)

    def coordinator_epoch(self, transactional_id):
        """The coordinator epoch of the id's markers: 0 on a database on its own."""
        return self._coordinator_epochs.get(self.partition_of(transactional_id).partition, 0)

    def unload_partition(self, partition):
        """Forget the ids of `partition` and its coordinator epoch (a cluster's broker that
        no longer leads it: Kafka's removeTransactionsForTxnTopicPartition)."""
        self._coordinator_epochs.pop(partition, None)
        if self.partitions:
            for transactional_id in [t for t in self.transactions
                                     if partition_for(t, self.partitions) == partition]:
                del self.transactions[transactional_id]

    def reload_partition(self, partition, coordinator_epoch):
        """Forget the ids of `partition` and replay it from its start (a cluster's broker
        that now leads it, at leader epoch coordinator_epoch); returns the ids it holds."""
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
        if not self.partitions:
            self.partition_of("")
        self.unload_partition(partition)
        self._coordinator_epochs[partition] = coordinator_epoch
        self._replayed[partition] = replay(self._broker.partition_log(tp), 0,
                                           lambda k, v, _ts: self._apply(tp, k, v),
                                           to_log_end=True)
        return [t for t in self.transactions if partition_for(t, self.partitions) == partition]
