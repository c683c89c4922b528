"""Bad input on the wire: 10,000 random and mutated request frames, then a normal client
still produces and consumes on the same server; and 200 server starts and stops leave no
thread, socket or file behind.

The frames are mutations of real traffic: what confluent-kafka's producer, consumer (in a
group) and admin client send the server, recorded first. Each mutant flips bits, truncates,
splices random bytes, swaps the API key or version, or declares a wrong length; one in
five is random bytes. A response or a closed connection are both fine (Kafka closes a
connection on a request it cannot parse); what must not happen is a crash, a hang of the
server, a write outside the database directory, or a later client being served wrong.

STREAMLOG_SERVER_FUZZ_SEED replays a run (support/seeds.py).
"""
import os
import random
import socket
import struct
import threading

import pytest

import streamlog
from streamlog.storage.verify import verify_directory
from streamlog.testing import records

from support.seeds import master_seed

confluent_kafka = pytest.importorskip("confluent_kafka")

FRAMES = 10_000
# Requests that may wait for other members (JoinGroup, SyncGroup) are left out of the
# corpus: a mutant of them joins a group nobody completes, and holds its connection for
# the group's rebalance timeout (the server is fine; the fuzzer would only be slow).
WAITING_APIS = (11, 14)


def record_traffic(server):
    """The request frames a confluent-kafka producer, group consumer and admin send."""
    frames = []
    answer = server._answer

    def recording(frame, address):
        frames.append(bytes(frame))
        return answer(frame, address)
    server._answer = recording
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers,
                                             "compression.type": "lz4"})
        for i in range(20):
            producer.produce("t", key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"x")])
        assert producer.flush(10) == 0
        consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap_servers,
                                             "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["t"])
        got = 0
        while got < 20:
            message = consumer.poll(10)
            assert message is not None
            got += message.error() is None
        consumer.commit(asynchronous=False)
        consumer.close()
        from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        for future in admin.create_topics([NewTopic("made", 2)]).values():
            future.result(10)
        for future in admin.describe_configs([ConfigResource("topic", "t")]).values():
            future.result(10)
        admin.list_consumer_groups().result(10)
    finally:
        server._answer = answer
    return [f for f in frames if struct.unpack_from(">h", f)[0] not in WAITING_APIS]


def mutate(rng, corpus):
    if rng.random() < 0.2:
        return bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 64)))
    frame = bytearray(rng.choice(corpus))
    kind = rng.randrange(5)
    if kind == 0:      # bit flips
        for _ in range(rng.randrange(1, 9)):
            i = rng.randrange(len(frame))
            frame[i] ^= 1 << rng.randrange(8)
    elif kind == 1:    # truncated
        del frame[rng.randrange(len(frame)):]
    elif kind == 2:    # random bytes spliced in
        i = rng.randrange(len(frame) + 1)
        frame[i:i] = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 16)))
    elif kind == 3:    # another API key or version
        struct.pack_into(">hh", frame, 0, rng.randrange(-2, 80), rng.randrange(-2, 20))
    else:              # a random run of bytes overwritten
        i = rng.randrange(len(frame))
        n = rng.randrange(1, 9)
        frame[i:i + n] = bytes(rng.getrandbits(8) for _ in range(n))
    return bytes(frame)


class Fuzzer:
    def __init__(self, server):
        self.server = server
        self.sock = None
        self.answered = self.closed = self.waited = 0

    def send(self, frame, declared=None):
        if self.sock is None:
            self.sock = socket.create_connection((self.server.host, self.server.port))
            self.sock.settimeout(1.0)
        size = len(frame) if declared is None else declared
        try:
            self.sock.sendall(struct.pack(">i", size) + frame)
            head = self._read(4)
            if head is None:
                return
            self._read(struct.unpack(">i", head)[0])
            self.answered += 1
        except (ConnectionError, BrokenPipeError):
            self._drop("closed")

    def _read(self, n):
        data = b""
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except socket.timeout:
                # a request that waits (a mutated Fetch's long poll, a frame shorter than
                # its declared length): give up on this connection
                self._drop("waited")
                return None
            if not chunk:
                self._drop("closed")
                return None
            data += chunk
        return data

    def _drop(self, why):
        setattr(self, why, getattr(self, why) + 1)
        if self.sock is not None:
            self.sock.close()
        self.sock = None


def test_ten_thousand_bad_frames_then_a_client_is_served_correctly(tmp_path):
    seed = master_seed("STREAMLOG_SERVER_FUZZ_SEED")
    rng = random.Random(seed)
    db = streamlog.open(str(tmp_path / "db"))
    db.create_topic("t", partitions=2)
    try:
        with db.serve() as server:
            corpus = record_traffic(server)
            apis = {struct.unpack_from(">h", f)[0] for f in corpus}
            assert {0, 1, 3, 18, 19} <= apis, apis   # Produce, Fetch, Metadata, ...
            fuzzer = Fuzzer(server)
            for i in range(FRAMES):
                frame = mutate(rng, corpus)
                declared = None
                if i % 500 == 0:    # a length no frame may have: closed at once
                    declared = rng.choice([-1, 0, (100 << 20) + 1, 2**31 - 1])
                fuzzer.send(frame, declared)
            if fuzzer.sock is not None:
                fuzzer.sock.close()
            print(f"seed {seed}: {fuzzer.answered} answered, {fuzzer.closed} connections "
                  f"closed by the server, {fuzzer.waited} given up on")
            assert fuzzer.answered > FRAMES // 10 and fuzzer.closed > FRAMES // 10, \
                f"seed {seed}: the mutants did not reach both paths"
            # The same server still serves a normal client correctly.
            before = len(records(db, "t"))
            producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers})
            producer.produce("t", key=b"after", value=b"fuzz", partition=1)
            assert producer.flush(30) == 0, f"seed {seed}"
            consumer = confluent_kafka.Consumer({
                "bootstrap.servers": server.bootstrap_servers, "group.id": "after-fuzz",
                "auto.offset.reset": "earliest", "enable.auto.commit": False})
            consumer.assign([confluent_kafka.TopicPartition("t", 1, 0)])
            seen = []
            while b"fuzz" not in seen:
                message = consumer.poll(10)
                assert message is not None and message.error() is None, f"seed {seed}"
                seen.append(message.value())
            consumer.close()
            assert len(records(db, "t")) == before + 1
    finally:
        db.close()
    # Nothing was written outside the database directory, and what is in it verifies.
    assert sorted(os.listdir(tmp_path)) == ["db"]
    report = verify_directory(str(tmp_path / "db"))
    assert report.ok, report.problems


def _open_descriptors():
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_two_hundred_starts_and_stops_leave_nothing_open(tmp_path):
    from support.wire import request
    db = streamlog.open(str(tmp_path / "db"))
    try:
        with db.serve():   # the first start loads the codec's modules: count from after it
            pass
        threads, descriptors = set(threading.enumerate()), _open_descriptors()
        ports = set()
        for _ in range(200):
            with db.serve() as server:
                ports.add(server.port)
                with socket.create_connection((server.host, server.port)) as sock:
                    # ApiVersions v0: a worker thread answers it
                    answer = request(sock, struct.pack(">hhih", 18, 0, 7, 1) + b"x")
                    assert struct.unpack_from(">ih", answer) == (7, 0)
        leftover = [t for t in threading.enumerate() if t not in threads and t.is_alive()]
        assert leftover == []
        assert _open_descriptors() - descriptors == set()
        assert len(ports) > 1   # each start bound a listener of its own
    finally:
        db.close()
