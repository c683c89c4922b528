"""The server tests' shared fixture: a Kafka listener on the test module's `db`."""
import pytest


@pytest.fixture
def server(db):
    with db.serve() as kafka_server:
        yield kafka_server
