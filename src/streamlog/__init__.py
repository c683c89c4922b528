"""streamlog: Kafka's log model embedded in one Python process.

    import streamlog
    db = streamlog.open("data/")                 # or streamlog.open() for a temporary one
    db.create_topic("events", partitions=4)
    producer = db.producer()
    producer.send("events", value=b"hello", key=b"user-1")
    producer.flush()
    consumer = db.consumer(auto_offset_reset="earliest")
    consumer.assign([streamlog.TopicPartition("events", p) for p in range(4)])
    records = consumer.poll(timeout=1.0)

The public API is exactly `__all__`; everything else is internal.
"""
from . import errors
from .client.consumer import Consumer, OffsetAndTimestamp
from .client.database import CompactionResult, Database, PartitionInfo, TopicDescription
from .client.database import open  # noqa: A004 - the API's name, as sqlite3.connect
from .client.database import RepairReport, repair
from .client.futures import FutureRecordMetadata, SendBatchResult
from .client.group_admin import GroupDescription, GroupListing, GroupMember, PartitionLag
from .client.group_member import ConsumerGroupMetadata
from .client.producer import Producer
from .client.records import Record, RecordColumns, RecordMetadata
from .errors import *  # noqa: F401,F403 - the typed errors are part of the API
from .structs import OffsetAndMetadata, TopicPartition

__version__ = "0.1.0"

__all__ = ["open", "repair", "RepairReport", "Database", "Producer", "Consumer", "TopicPartition", "Record",
           "RecordMetadata", "RecordColumns", "FutureRecordMetadata", "SendBatchResult",
           "OffsetAndTimestamp", "OffsetAndMetadata", "ConsumerGroupMetadata",
           "TopicDescription", "PartitionInfo", "CompactionResult", "GroupDescription",
           "GroupListing",
           "GroupMember", "PartitionLag", "errors",
           "__version__"] + [name for name in dir(errors) if name.endswith("Error")]
