"""`streamlog serve`: a Kafka listener in the foreground that says where it listens and stops
cleanly on SIGTERM, with what clients wrote on disk."""
import re
import signal
import subprocess
import sys

import pytest

import streamlog
from streamlog import TopicPartition

kafka = pytest.importorskip("kafka")


def test_serve_listens_prints_its_address_and_stops_on_sigterm(tmp_path):
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("t", partitions=2)
    child = subprocess.Popen([sys.executable, "-m", "streamlog.cli", "serve", "--path", path,
                              "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        line = child.stdout.readline()
        match = re.search(r"on (127\.0\.0\.1:\d+)", line)
        assert match, (line, child.stderr.read() if child.poll() is not None else "")
        producer = kafka.KafkaProducer(bootstrap_servers=match.group(1), acks=1)
        offsets = [producer.send("t", b"v%d" % i, partition=i % 2).get(timeout=10).offset
                   for i in range(10)]
        producer.close()
        assert offsets == [i // 2 for i in range(10)]
    finally:
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert "stopping" in out
    with streamlog.open(path) as db:   # a clean close: every acknowledged record is there
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        values = []
        while len(values) < 10:
            records = consumer.poll(timeout=5.0)
            assert records
            values += [r.value for r in records]
        assert sorted(values) == sorted(b"v%d" % i for i in range(10))


@pytest.mark.parametrize("argument, why", [
    (["--port", "99999"], "a port is 0..65535"),
    (["--port", "-1"], "a port is 0..65535"),
    (["--brokers", "0"], "must be at least 1"),
])
def test_serve_refuses_a_port_or_broker_count_out_of_range_with_a_usage_error(tmp_path,
                                                                              argument, why):
    child = subprocess.run([sys.executable, "-m", "streamlog.cli", "serve", "--path",
                            str(tmp_path / "db"), *argument], capture_output=True, text=True,
                           timeout=60)
    assert child.returncode == 2
    assert why in child.stderr and "Traceback" not in child.stderr


def test_a_server_that_cannot_bind_raises_to_its_caller_instead_of_waiting(tmp_path):
    # A port above 65535 makes the listener thread's bind raise OverflowError, not OSError:
    # serve() waited for that thread's start for good, the traceback printed by the thread.
    import threading
    outcome = []
    with streamlog.open(str(tmp_path / "db")) as db:
        def serve():
            try:
                db.serve(port=70000)
            except streamlog.StreamlogError as exc:
                outcome.append(exc)
        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive(), "serve() is still waiting for its listener"
    assert len(outcome) == 1 and "cannot listen on 127.0.0.1:70000" in str(outcome[0])


def test_a_port_in_use_is_named_as_in_use(tmp_path):
    """A port asked for and taken gave way to the next port to try, of which there was none:
    "cannot listen on 127.0.0.1:N: _ports_to_try ends with 0". Only a port picked for
    port 0 gives way; a taken one is refused with the kernel's EADDRINUSE, as Kafka's
    SocketServer refuses it ("Socket server failed to bind to ...: Address already in
    use")."""
    import errno
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with streamlog.open(str(tmp_path / "db")) as db:
            with pytest.raises(streamlog.StreamlogError,
                               match=f"cannot listen on 127.0.0.1:{port}: ") as refused:
                db.serve(port=port)
    assert isinstance(refused.value.__cause__, OSError)
    assert refused.value.__cause__.errno == errno.EADDRINUSE
