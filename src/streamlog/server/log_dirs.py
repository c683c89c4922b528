"""DescribeLogDirs (key 35) on the wire: the broker's log directory (a database has one:
its own), and each partition log in it (kafka-python's `describe_log_dirs`,
`kafka-log-dirs.sh`), as Kafka's ReplicaManager.describeLogDirs answers:

- the directory's absolute path, and (v4) the total and usable bytes of its volume
  (Java's FileStore.getTotalSpace / getUsableSpace: os.statvfs's blocks and blocks
  available to an unprivileged user, times the fragment size);
- per partition log asked for (a null list: every log), its size in bytes (the segments'
  sum, UnifiedLog.size), its offset lag (getLogEndOffsetLag: max(high watermark - log
  end, 0), so 0 for a current replica) and is_future_key false (no log here is an
  AlterReplicaLogDirs move); a partition the broker holds no log of is left out, and so
  is a topic left with none;
- the directory unreadable: KAFKA_STORAGE_ERROR for it, nothing else.

A broker of a cluster lists the logs of the replicas it holds and its own internal
topics', as a Kafka broker's LogManager holds only those; the database's own metadata log
is not listed (Kafka keeps the KRaft metadata log apart from LogManager's logs).
"""
import logging
import os

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from .. import errors
from ..structs import TopicPartition
from .error_codes import error_code
from .protocol import NO_THROTTLE, build, response_types

DESCRIBE_LOG_DIRS = 35

log = logging.getLogger("streamlog.server")


class LogDirsHandlers:
    def __init__(self, broker):
        self.broker = broker

    @property
    def table(self):
        return {DESCRIBE_LOG_DIRS: self.describe_log_dirs}

    def describe_log_dirs(self, version, body, context):
        cls, types = response_types(DESCRIBE_LOG_DIRS, version)
        asked = None if body.topics is None else {
            TopicPartition(t.topic, int(p)) for t in body.topics for p in t.partitions}
        root = self.broker.root
        try:
            usage = os.statvfs(root)
            topics = self._topics(types, asked)
        except (OSError, errors.StreamlogError) as exc:
            # ReplicaManager.describeLogDirs: an offline or failing directory answers its
            # error alone.
            log.warning("cannot describe log directory %s: %s", root, exc)
            code = error_code(exc) if isinstance(exc, errors.StreamlogError) \
                else ErrorCode.kafka_storage_error
            result = build(types.DescribeLogDirsResult, error_code=code, log_dir=root,
                           topics=(), total_bytes=i64(-1), usable_bytes=i64(-1))
        else:
            result = build(types.DescribeLogDirsResult, error_code=ErrorCode.none,
                           log_dir=root, topics=topics,
                           total_bytes=i64(usage.f_blocks * usage.f_frsize),
                           usable_bytes=i64(usage.f_bavail * usage.f_frsize))
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     results=(result,))

    def _topics(self, types, asked):
        by_topic = {}
        for tp, partition_log in sorted(self._held_logs().items()):
            if asked is not None and tp not in asked:
                continue
            by_topic.setdefault(tp.topic, []).append(build(
                types.DescribeLogDirsPartition, partition_index=i32(tp.partition),
                partition_size=i64(partition_log.size_in_bytes),
                offset_lag=i64(max(partition_log.high_watermark -
                                   partition_log.log_end_offset, 0)),
                is_future_key=False))
        return tuple(build(types.DescribeLogDirsTopic, name=name, partitions=tuple(parts))
                     for name, parts in by_topic.items())

    def _held_logs(self):
        """{tp: PartitionLog} of the logs this broker holds, as Kafka's LogManager.allLogs:
        every topic's on a database on its own; in a cluster its replicas' and its own
        internal topics' (it keeps every partition's log, empty where it holds no
        replica)."""
        topics = self.broker.topics()
        replicas = self.broker.replicas
        return {tp: partition_log for tp, partition_log in self.broker.partitions.items()
                if tp.topic in topics and not partition_log.closed and
                (replicas is None or replicas.manages(tp) or topics[tp.topic].internal)}
