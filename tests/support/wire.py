"""Raw Kafka protocol requests for the server's tests: frames over a socket, and kio
entities encoded and decoded around them (what a client library would send)."""
import io
import struct

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32


def recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the server closed the connection"
        data += chunk
    return data


def request(sock, frame):
    """Send one request frame (without its length); the response frame's bytes."""
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    return recv_exactly(sock, size)


def encode(body, correlation_id=1, client_id="wire-test"):
    """A request frame for a kio request entity (its header included)."""
    header_cls = body.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(
        request_api_key=body.__api_key__, request_api_version=body.__version__,
        correlation_id=i32(correlation_id), client_id=client_id))
    entity_writer(type(body))(out, body)
    return out.getvalue()


def call(sock, body, correlation_id=1):
    """Send a kio request entity; its decoded response entity."""
    answer = request(sock, encode(body, correlation_id))
    response_cls = load_response_schema(body.__api_key__, body.__version__)
    header, offset = entity_reader(response_cls.__header_schema__)(answer, 0)
    assert header.correlation_id == correlation_id
    response, _ = entity_reader(response_cls)(answer[offset:], 0)
    return response


def list_offsets(sock, topic, partition, timestamp, current_leader_epoch=-1,
                 isolation_level=0):
    """One ListOffsets (v7) of one partition; its partition answer (error_code, timestamp,
    offset, leader_epoch)."""
    from kio.schema.list_offsets.v7.request import (ListOffsetsPartition, ListOffsetsRequest,
                                                    ListOffsetsTopic)
    from kio.schema.types import BrokerId
    from kio.static.primitive import i8, i64
    answer = call(sock, ListOffsetsRequest(
        replica_id=BrokerId(-1), isolation_level=i8(isolation_level), topics=(ListOffsetsTopic(
            name=topic, partitions=(ListOffsetsPartition(
                partition_index=i32(partition), current_leader_epoch=i32(current_leader_epoch),
                timestamp=i64(timestamp)),)),)))
    return answer.topics[0].partitions[0]


# A fetch's max_wait that no machine's slowness comes near, for the tests that a fetch is
# answered without its long poll: such a fetch is answered long before it, a fetch that
# waits out its max_wait is not answered within ANSWER_BOUND_S.
NEVER_S = 15 * 60
ANSWER_BOUND_S = 120.0


def call_without_long_poll(sock, body, correlation_id=1):
    """call() for a request whose max_wait is NEVER_S: its response, or AssertionError if
    none came within ANSWER_BOUND_S (the server was waiting out the max_wait).

    The bound only ends a failing test: no verdict rests on how fast the answer came."""
    previous = sock.gettimeout()
    sock.settimeout(ANSWER_BOUND_S)
    try:
        return call(sock, body, correlation_id)
    except TimeoutError:
        raise AssertionError(f"no answer within {ANSWER_BOUND_S:g} s: the fetch was waiting "
                             f"out its max_wait ({NEVER_S} s)") from None
    finally:
        sock.settimeout(previous)
