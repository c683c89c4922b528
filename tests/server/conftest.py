"""The server tests' shared fixtures: a Kafka listener on the test module's `db`, and a raw
socket to it (support/wire.py speaks the protocol over it)."""
import socket

import pytest


@pytest.fixture
def server(db):
    with db.serve() as kafka_server:
        yield kafka_server


@pytest.fixture
def sock(server):
    with socket.create_connection((server.host, server.port)) as s:
        yield s
