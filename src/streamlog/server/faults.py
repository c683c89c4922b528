"""Faults a test asks a server for: error codes answered instead of work, latency, dropped
connections, a forced rebalance, a fenced transactional id (server.faults).

    server.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=2, topic="orders")
    server.faults.delay("Fetch", 0.5)
    server.faults.disconnect("JoinGroup")
    server.faults.drop_connections()
    server.faults.rebalance("billing")
    server.faults.fence("payments-tx")
    server.faults.clear()

An injected error replaces the request's work: a Produce's batches for a matching partition
are not appended, a Fetch does not read it. Produce and Fetch take it per partition (topic=,
partition= narrow it); every other API answers it as the response's top-level error code
(the APIs without one refuse an injection up front). count=None keeps a fault until
clear(); otherwise it is used up by that many matching requests (partitions, for Produce
and Fetch). Faults are checked on the worker thread that answers the request, under one
lock; what they cost a request that matches none is one dictionary lookup.
"""
import dataclasses
import sys
import threading

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from .. import errors
from .error_codes import InjectedError
from .protocol import FETCH, NO_THROTTLE, PRODUCE, SUPPORTED, error_response

FIND_COORDINATOR = 10
_PER_PARTITION = (PRODUCE, FETCH)


def api_key(api):
    """An API's key from its key or its name ("Produce", "JoinGroup", case-insensitive)."""
    if isinstance(api, int) and not isinstance(api, bool) and api in SUPPORTED:
        return api
    names = _api_names()
    key = names.get(str(api).lower().replace("_", "").replace("request", ""))
    if key is None:
        raise ValueError(f"unknown or unserved Kafka API {api!r}; served: "
                         f"{', '.join(sorted(_api_display_names()))}")
    return key


def error_code_of(error):
    """A Kafka error code from a code, a name ("NOT_LEADER_OR_FOLLOWER") or an ErrorCode."""
    try:
        if isinstance(error, ErrorCode):
            code = error
        elif isinstance(error, int) and not isinstance(error, bool):
            code = ErrorCode(error)
        else:
            code = ErrorCode[str(error).lower()]
    except (KeyError, ValueError):
        code = None
    if code is None or code == ErrorCode.none:
        raise ValueError(f"unknown Kafka error code {error!r} (give a name such as "
                         "'NOT_LEADER_OR_FOLLOWER', or its number; NONE is no error)")
    return code


def _api_display_names():
    return {load_request_schema(key, high).__name__.removesuffix("Request"): key
            for key, (_, high) in SUPPORTED.items()}


def _api_names():
    return {name.lower(): key for name, key in _api_display_names().items()}


def _has_top_level_error(key):
    """Whether every served version's response carries a top-level error code (or, for
    FindCoordinator 4 on, one per key asked: injected_response fills those)."""
    low, high = SUPPORTED[key]
    return key == FIND_COORDINATOR or all(
        any(f.name == "error_code" for f in dataclasses.fields(
            load_response_schema(key, version))) for version in range(low, high + 1))


def injected_response(key, version, body, code):
    """The response answering an injected error to an API other than Produce and Fetch:
    the top-level error code, every other field empty (Kafka's error responses); for
    FindCoordinator 4 on, the error for each key the request asked about."""
    if key == FIND_COORDINATOR and version >= 4:
        cls = load_response_schema(key, version)
        types = sys.modules[cls.__module__]
        return cls(throttle_time=NO_THROTTLE, coordinators=tuple(
            types.Coordinator(key=k, node_id=i32(-1), host="", port=i32(-1), error_code=code,
                              error_message="injected by a test")
            for k in body.coordinator_keys))
    return error_response(key, version, code)


@dataclasses.dataclass
class _Fault:
    api: int
    kind: str               # "error", "delay" or "disconnect"
    count: object           # None: until cleared
    code: object = None
    seconds: float = 0.0
    topic: object = None
    partition: object = None

    def matches(self, key, tp=None):
        if self.api is not None and self.api != key:
            return False
        if tp is None:
            return self.topic is None and self.partition is None
        return (self.topic is None or self.topic == tp.topic) and \
            (self.partition is None or self.partition == tp.partition)


class Faults:
    def __init__(self, broker, server):
        self._broker = broker
        self._server = server   # network.KafkaServer
        self._lock = threading.Lock()
        self._faults = []

    # --- what a test asks for ----------------------------------------------------------

    def error(self, api, error, count=1, topic=None, partition=None):
        """Answer `error` to the next `count` matching requests (None: until clear())."""
        key, code = api_key(api), error_code_of(error)
        if key not in _PER_PARTITION:
            if topic is not None or partition is not None:
                raise ValueError("topic= and partition= narrow Produce and Fetch faults only")
            if not _has_top_level_error(key):
                raise ValueError(f"{api!r} responses carry no top-level error code in every "
                                 "version served; inject per partition into Produce or "
                                 "Fetch, or into an API that has one (FindCoordinator, "
                                 "JoinGroup, SyncGroup, Heartbeat, InitProducerId, EndTxn, "
                                 "...)")
        self._add(_Fault(key, "error", self._count(count), code=code, topic=topic,
                         partition=partition))

    def delay(self, api, seconds, count=None):
        """Hold matching requests (api None: every request) `seconds` before answering."""
        if not seconds >= 0:
            raise ValueError(f"seconds={seconds!r}: give a delay of 0 or more")
        self._add(_Fault(None if api is None else api_key(api), "delay", self._count(count),
                         seconds=float(seconds)))

    def disconnect(self, api, count=1):
        """Close the connection of the next `count` matching requests instead of answering
        (the request is not served: nothing is appended)."""
        self._add(_Fault(None if api is None else api_key(api), "disconnect",
                         self._count(count)))

    def drop_connections(self):
        """Close every client connection now (KafkaServer.drop_connections)."""
        self._server.drop_connections()

    def rebalance(self, group_id):
        """Start a rebalance of the group now: every member must join again."""
        from ..coordinator.group_coordinator import find_coordinator
        find_coordinator(self._broker).rebalance(group_id, "a fault injected by a test")

    def fence(self, transactional_id):
        """Bump the transactional id's epoch, as a new instance's init_transactions() would:
        its current producer is fenced, its open transaction aborted."""
        from ..coordinator.transaction_coordinator import (find_transaction_coordinator,
                                                           init_producer_id_retrying)
        coordinator = find_transaction_coordinator(self._broker)
        current = coordinator.describe(transactional_id)
        if current is None:
            raise errors.InvalidRequestError(f"no producer has used transactional id "
                                             f"{transactional_id!r}: nothing to fence")
        init_producer_id_retrying(coordinator, transactional_id, current.timeout_ms)

    def clear(self):
        """Remove every fault not yet used up."""
        with self._lock:
            self._faults = []

    def pending(self):
        """How many faults are still armed."""
        with self._lock:
            return len(self._faults)

    # --- what the server asks ---------------------------------------------------------

    def before(self, key, connection):
        """Called before a request is handled: waits out a delay (or until the request's
        connection closes), returns "disconnect", an InjectedError to answer, or None."""
        if not self._faults:
            return None
        delay, outcome = 0.0, None
        with self._lock:
            for fault in list(self._faults):
                if fault.kind == "delay" and fault.matches(key):
                    delay += fault.seconds
                    self._use(fault)
                elif outcome is None and fault.kind == "disconnect" and fault.matches(key):
                    outcome = "disconnect"
                    self._use(fault)
                elif outcome is None and fault.kind == "error" and \
                        key not in _PER_PARTITION and fault.matches(key):
                    outcome = InjectedError(fault.code)
                    self._use(fault)
        if delay:
            connection.closed.wait(delay)
        return outcome

    def partition_error(self, key, tp):
        """The InjectedError for one partition of a Produce or Fetch, or None."""
        if not self._faults:
            return None
        with self._lock:
            for fault in self._faults:
                if fault.kind == "error" and fault.matches(key, tp):
                    self._use(fault)
                    return InjectedError(fault.code)
        return None

    def _use(self, fault):
        if fault.count is not None:
            fault.count -= 1
            if fault.count <= 0:
                self._faults.remove(fault)

    def _add(self, fault):
        with self._lock:
            self._faults.append(fault)

    @staticmethod
    def _count(count):
        if count is not None and (not isinstance(count, int) or count < 1):
            raise ValueError(f"count={count!r}: give a positive number, or None for "
                             "until clear()")
        return count
