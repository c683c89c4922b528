"""The server tests' shared fixtures: a Kafka listener on the test module's `db`, and a raw
socket to it (support/wire.py speaks the protocol over it). `db` here is a database with a
topic "t" of two partitions, for the modules that need no other (a module's own `db`
overrides it)."""
import socket

import pytest

import streamlog


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    database.create_topic("t", partitions=2)
    yield database
    database.close()


@pytest.fixture
def server(db):
    with db.serve() as kafka_server:
        yield kafka_server


@pytest.fixture
def sock(server):
    with socket.create_connection((server.host, server.port)) as s:
        yield s
