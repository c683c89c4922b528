"""The listener: Kafka clients' connections to one database, served in background threads.

One thread runs an asyncio event loop that accepts connections and reads their frames; the
requests run on a small pool of worker threads (a Fetch may wait for data, a Produce with
acks=all for its fsync), never on the loop. A connection's requests are answered one at a
time, in order, as Kafka's broker does (it reads a connection's next request only once the
last one's response is queued), so responses never overtake each other.

A request of an API or version not served is answered UNSUPPORTED_VERSION (protocol.py); a
frame that does not decode closes that one connection (logged); the server and every other
connection go on.

Lifecycle: KafkaServer() binds (port 0: a free port below the kernel's ephemeral range,
which no client connection can take while the listener is down) and starts serving; close() stops accepting, closes every
connection, waits for the requests in progress, and ends the threads. For resilience tests,
stop_listening() / start_listening() take the listener down and up again on the same port
(the threads stay), drop_connections() closes every client connection, and `faults`
(faults.py) injects errors, latency and disconnects.
"""
import asyncio
import concurrent.futures
import errno
import functools
import logging
import random
import struct
import threading

from kio.schema.errors import ErrorCode

from .. import errors
from .error_codes import InjectedError
from .faults import Faults, injected_response
from .handlers import CloseConnection, Connection, Handlers
from .protocol import UnsupportedRequest, decode_request, encode_response, error_response

log = logging.getLogger("streamlog.server")

# The largest request frame accepted (Kafka's socket.request.max.bytes default).
MAX_REQUEST_BYTES = 100 << 20
# Worker threads (started as needed): a JoinGroup or SyncGroup waits on one until its
# group settles, a Fetch until data comes or its max_wait, so each waiting client holds
# one; requests beyond them queue. Sized for a test suite's clients, not a fleet's.
_WORKERS = 256


# Where a listener asked for any port looks first (Linux's ephemeral range starts at 32768
# by default): below the range, where no connection's local end is ever put.
_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_LOWEST_CHOSEN_PORT = 10000
_TRIES_BELOW_THE_RANGE = 32


def _ports_to_try(port):
    """port itself when it names one; for 0, random ports below the ephemeral range, then 0
    (the kernel's choice) if they are all taken or the range is not known."""
    if port != 0:
        yield port
        return
    try:
        with open(_EPHEMERAL_RANGE) as f:
            lowest_ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        lowest_ephemeral = 0
    if lowest_ephemeral > _LOWEST_CHOSEN_PORT + _TRIES_BELOW_THE_RANGE:
        for _ in range(_TRIES_BELOW_THE_RANGE):
            yield random.randrange(_LOWEST_CHOSEN_PORT, lowest_ephemeral)
    yield 0


class KafkaServer:
    def __init__(self, broker, host="127.0.0.1", port=0, cluster_id="streamlog"):
        self._broker = broker
        self.faults = Faults(broker, self)
        self._handlers = Handlers(broker, cluster_id, self.faults)
        self._pool = concurrent.futures.ThreadPoolExecutor(_WORKERS,
                                                           thread_name_prefix="streamlog-kafka")
        self._loop = asyncio.new_event_loop()
        self._connections = set()
        self._closed = False
        started = threading.Event()
        failure = []

        def run():
            asyncio.set_event_loop(self._loop)
            try:
                self._server = self._loop.run_until_complete(self._bind(host, port))
            except Exception as exc:   # any: the caller waits on `started`
                # OSError (a port taken), but also OverflowError (a port above 65535), a
                # host that does not parse...: each raised to the caller, never a thread's
                # traceback with the caller waiting for good.
                failure.append(exc)
                started.set()
                return
            started.set()
            self._loop.run_forever()
        self._thread = threading.Thread(target=run, name="streamlog-kafka-listener",
                                        daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            self._thread.join()
            self._loop.close()
            self._pool.shutdown()
            raise errors.StreamlogError(f"cannot listen on {host}:{port}: {failure[0]}") \
                from failure[0]
        self.host, self.port = self._server.sockets[0].getsockname()[:2]

    async def _bind(self, host, port):
        """The asyncio server listening on host:port; for port 0, on a free port below the
        kernel's range of ephemeral ports where it has one: a port from that range, freed
        by stop_listening() or by a cluster's broker going down, can be taken meanwhile by
        any client connection's local end, and the listener could not come back on it."""
        for candidate in _ports_to_try(port):
            try:
                return await asyncio.start_server(self._serve_connection, host, candidate)
            except OSError as exc:
                # Only a port picked here gives way to the next; a port asked for is taken.
                if port != 0 or candidate == 0 or exc.errno != errno.EADDRINUSE:
                    raise
        raise AssertionError("_ports_to_try ends with 0")

    @property
    def bootstrap_servers(self):
        return f"{self.host}:{self.port}"

    @property
    def closed(self):
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<streamlog.KafkaServer {self.bootstrap_servers}{' closed' if self._closed else ''}>"

    # --- connections ------------------------------------------------------------------

    async def _serve_connection(self, reader, writer):
        if self._closed or not self._server.is_serving():
            writer.close()   # accepted just before the listener stopped: refused after all
            return
        task = asyncio.current_task()
        self._connections.add(task)
        connection = Connection(*writer.get_extra_info("sockname")[:2])
        peer = writer.get_extra_info("peername")
        loop = asyncio.get_running_loop()
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                if not 0 < size <= MAX_REQUEST_BYTES:
                    log.warning("closing %s: a %d-byte request frame", peer, size)
                    return
                frame = await reader.readexactly(size)
                chunks = await loop.run_in_executor(self._pool, self._answer, frame,
                                                    connection)
                if chunks is not None:
                    writer.writelines(chunks)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass   # the client went away, or the server closes
        except RuntimeError as exc:
            if "shutdown" not in str(exc):
                raise
            # the interpreter exits with the server still open: its worker pool is gone
        except CloseConnection as exc:
            log.warning("closing %s: %s", peer, exc)
        finally:
            self._connections.discard(task)
            connection.closed.set()
            self._broker.wakeup(connection)   # its waiting Fetch, if any, answers now
            writer.close()

    def _answer(self, frame, connection):
        """The framed response to one request frame (on a worker thread); None for none."""
        try:
            header, body = decode_request(frame)
        except UnsupportedRequest as exc:
            response = error_response(exc.api_key, exc.api_version, ErrorCode.unsupported_version)
            if response is None:   # an API or version no Kafka release defines
                raise CloseConnection(str(exc)) from None
            return encode_response(exc.correlation_id, response)
        except Exception as exc:   # a frame kio cannot read: this connection only
            raise CloseConnection(f"a request that does not decode ({exc})") from None
        injected = self.faults.before(header.request_api_key, connection)
        if injected == "disconnect":
            raise CloseConnection("a disconnect injected by a test")
        if isinstance(injected, InjectedError):
            return encode_response(header.correlation_id, injected_response(
                header.request_api_key, header.request_api_version, body, injected.code))
        try:
            response = self._handlers.handle(header, body, connection)
            return None if response is None else \
                encode_response(header.correlation_id, response)
        except CloseConnection:
            raise
        except Exception as exc:
            # A fault of this server, not of the request (handling or encoding the answer):
            # answered UNKNOWN_SERVER_ERROR, as Kafka's KafkaApis.handleError does, and the
            # connection kept.
            log.exception("request api %d v%d failed", header.request_api_key,
                          header.request_api_version)
            response = error_response(header.request_api_key, header.request_api_version,
                                      ErrorCode.unknown_server_error)
            if response is None:
                raise CloseConnection(f"the request failed ({exc})") from None
            return encode_response(header.correlation_id, response)

    # --- faults ---------------------------------------------------------------------

    def _on_loop(self, coroutine_function):
        if self._closed:
            raise errors.LogClosedError(f"the server {self.bootstrap_servers} is closed")
        return asyncio.run_coroutine_threadsafe(coroutine_function(), self._loop).result(10)

    async def _cancel_connections(self, until_none=True):
        """Close every connection, and wait until each has woken its waiting request (so
        that no worker thread is left waiting for a client that is gone). until_none: also
        those that start meanwhile (the listener is closed: none will be served)."""
        while self._connections:
            tasks = list(self._connections)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if not until_none:
                return

    def drop_connections(self):
        """Close every client connection now (clients see the broker go away and reconnect;
        requests in progress are not answered)."""
        self._on_loop(functools.partial(self._cancel_connections, until_none=False))

    def stop_listening(self):
        """Stop accepting connections and close every open one, as a broker that went down;
        start_listening() comes back on the same port."""
        async def stop():
            self._server.close()
            await self._cancel_connections()
            await self._server.wait_closed()
        self._on_loop(stop)

    @property
    def listening(self):
        """Whether clients can connect now (False after stop_listening or close)."""
        return not self._closed and self._server.is_serving()

    def start_listening(self):
        """Listen again on the same host and port after stop_listening()."""
        async def start():
            if self._server.is_serving():
                return
            self._server = await asyncio.start_server(self._serve_connection, self.host,
                                                      self.port)
        self._on_loop(start)

    # --- lifecycle ------------------------------------------------------------------

    def close(self):
        if self._closed:
            return
        self._closed = True

        async def shutdown():
            self._server.close()
            await self._cancel_connections()
            await self._server.wait_closed()
        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._pool.shutdown(wait=True)
            self._loop.close()
