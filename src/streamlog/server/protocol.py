"""The Kafka wire protocol's framing, through kio (generated from Kafka's own message schemas):
a request frame into its header and body, a response into the buffers to send.

Record batches pass through as bytes: a Produce request's records field is the client's
batches, appended as they are; a Fetch response's records field is built from the batches'
own views of the segment files (RecordsChunks), written out without being joined.

The versions served (SUPPORTED) are those of the APIs built so far, capped below the
versions that name topics by id only (Fetch 13, Produce 13). An ApiVersions request of a
version this side does not know is answered with version 0 and UNSUPPORTED_VERSION, listing
what is served (KIP-511), so a newer client retries at a version both know. A request of any
other API or version not served is answered with UNSUPPORTED_VERSION and nothing else
(error_response), where kio knows that response; never by dropping the connection.
"""
import dataclasses
import datetime
import struct
import sys
import types
import typing
import uuid

from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta

from .frame_guard import check_frame

API_VERSIONS = 18
NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, DESCRIBE_CONFIGS = 19, 20, 21, 32
CREATE_PARTITIONS, DESCRIBE_CLUSTER = 37, 60
OFFSET_FOR_LEADER_EPOCH = 23
ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 33, 44

# api key -> (min version, max version) served.
SUPPORTED = {
    PRODUCE: (3, 11),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 7),
    METADATA: (0, 12),
    API_VERSIONS: (0, 4),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 5),   # 6 names topics by id
    DELETE_RECORDS: (0, 2),
    DESCRIBE_CONFIGS: (1, 4),
    CREATE_PARTITIONS: (0, 3),
    DESCRIBE_CLUSTER: (0, 1),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),   # 0 and 1 are gone from Kafka 4's schemas
    # The consumer group APIs (group_handlers.py)
    10: (0, 4),   # FindCoordinator
    11: (0, 9),   # JoinGroup
    14: (0, 5),   # SyncGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    8: (2, 9),    # OffsetCommit (10 names topics by id)
    9: (1, 7),    # OffsetFetch (8 on asks for several groups at once)
    15: (0, 5),   # DescribeGroups (6 answers GROUP_ID_NOT_FOUND for an unknown group)
    16: (0, 5),   # ListGroups
    42: (0, 2),   # DeleteGroups
    47: (0, 0),   # OffsetDelete
    # InitProducerId and the transaction APIs (txn_handlers.py)
    22: (0, 4),   # InitProducerId
    24: (0, 3),   # AddPartitionsToTxn (4 on: KIP-890 verification)
    25: (0, 3),   # AddOffsetsToTxn
    26: (0, 4),   # EndTxn (5: KIP-890 epoch bump per transaction)
    28: (0, 3),   # TxnOffsetCommit
    27: (1, 1),   # WriteTxnMarkers (an admin's abort; 0 is gone from Kafka 4's schemas)
    61: (0, 0),   # DescribeProducers
    65: (0, 0),   # DescribeTransactions
    66: (0, 2),   # ListTransactions
    # The ACL APIs, SECURITY_DISABLED as without an authorizer (acl_handlers.py); version 0
    # is gone from Kafka 4's schemas
    29: (1, 3),   # DescribeAcls
    30: (1, 3),   # CreateAcls
    31: (1, 3),   # DeleteAcls
    43: (0, 2),   # ElectLeaders (elect_leaders.py)
    35: (1, 4),   # DescribeLogDirs (log_dirs.py; 0 is gone from Kafka 4's schemas)
    75: (0, 0),   # DescribeTopicPartitions (describe_topic_partitions.py)
    46: (0, 0),   # ListPartitionReassignments (partition_reassignments.py)
    50: (0, 0),   # DescribeUserScramCredentials (scram_credentials.py; 51 not served)
    74: (0, 1),   # ListConfigResources (config_resources.py)
}


class UnsupportedRequest(Exception):
    """A request of an API or version this server does not serve."""

    def __init__(self, api_key, api_version, correlation_id):
        super().__init__(f"api {api_key} version {api_version} is not served")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


def decode_request(frame):
    """(header, body) of a request frame (the bytes after its length); body None for an
    ApiVersions request of a version kio does not know (answered per KIP-511)."""
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    served = SUPPORTED.get(api_key)
    try:
        schema = load_request_schema(api_key, api_version)
    except UnknownEntity:
        schema = None
    if schema is None or served is None or not served[0] <= api_version <= served[1]:
        if api_key == API_VERSIONS:
            # A newer client's ApiVersions: its header is v2 whatever its body is.
            header, _ = entity_reader(RequestHeaderV2)(frame, 0)
            return header, None
        raise UnsupportedRequest(api_key, api_version, correlation_id)
    check_frame(schema.__header_schema__, schema, frame)   # before kio: see frame_guard.py
    frame = _client_id_decodable(frame)
    header, position = entity_reader(schema.__header_schema__)(frame, 0)
    body, _ = entity_reader(schema)(frame, position)
    return header, body


_CLIENT_ID = 8   # where a request header's client_id starts: int16 length, then UTF-8


def _client_id_decodable(frame):
    """The frame, its header's client_id made valid UTF-8 where it was not: Kafka decodes
    protocol strings with new String(bytes, UTF_8), which replaces malformed bytes with
    U+FFFD, and serves the request (a C client's client.id in Latin-1, say), where kio
    refuses the string and the connection would close."""
    (length,) = struct.unpack_from(">h", frame, _CLIENT_ID)
    start = _CLIENT_ID + 2
    raw = bytes(frame[start:start + max(length, 0)])
    try:
        raw.decode("utf-8")
        return frame
    except UnicodeDecodeError:
        fixed = raw.decode("utf-8", "replace").encode("utf-8")
        return bytes(frame[:_CLIENT_ID]) + struct.pack(">h", len(fixed)) + fixed + \
            bytes(frame[start + length:])


def response_types(api_key, api_version):
    """(response class, its module: the nested entity classes) of one API version."""
    cls = load_response_schema(api_key, api_version)
    return cls, sys.modules[cls.__module__]


def error_response(api_key, api_version, code):
    """A response of this API version saying `code`, every other field empty or zero (Kafka's
    AbstractRequest.getErrorResponse); None when kio knows no such response."""
    try:
        cls = load_response_schema(api_key, api_version)
    except UnknownEntity:
        return None
    try:
        return _blank(cls, code)
    except TypeError:   # a field type with no empty value here (delegation tokens' times)
        return None


def _blank(cls, code):
    return cls(**{f.name: _blank_value(f.type, code) for f in dataclasses.fields(cls)
                  if f.default is dataclasses.MISSING and
                  f.default_factory is dataclasses.MISSING})


def _blank_value(kind, code):
    if kind is ErrorCode:
        return code
    origin = typing.get_origin(kind)
    if origin is tuple:
        return ()
    if origin in (types.UnionType, typing.Union):
        return None
    if dataclasses.is_dataclass(kind):
        return _blank(kind, code)
    if isinstance(kind, type):
        if issubclass(kind, datetime.timedelta):
            return i32Timedelta.parse(datetime.timedelta(0))
        for base, value in ((bool, False), (int, 0), (str, ""), (bytes, b"")):
            if issubclass(kind, base):
                return kind(value)
        if issubclass(kind, uuid.UUID):
            return uuid.UUID(int=0)
    raise TypeError(f"no empty value for {kind!r}")


def build(cls, **fields):
    """An entity of cls from the fields this version has (the others are left out)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


class RecordsChunks:
    """A records field made of several buffers (batch views of segment files): kio asks for
    its length and writes it; _Chunks splices the buffers in without joining them."""

    __slots__ = ("chunks", "_size")

    def __init__(self, chunks):
        self.chunks = chunks
        self._size = sum(len(c) for c in chunks)

    def __len__(self):
        return self._size


class _Chunks:
    __slots__ = ("chunks",)

    def __init__(self):
        self.chunks = []

    def write(self, data):
        if isinstance(data, RecordsChunks):
            self.chunks.extend(data.chunks)
        else:
            self.chunks.append(data)
        return len(data)


def encode_response(correlation_id, response):
    """The buffers of a framed response: length, header (v0 or v1 as the API version wants),
    body."""
    out = _Chunks()
    header = type(response).__header_schema__
    entity_writer(header)(out, header(correlation_id=correlation_id))
    entity_writer(type(response))(out, response)
    return [struct.pack(">i", sum(len(c) for c in out.chunks))] + out.chunks
