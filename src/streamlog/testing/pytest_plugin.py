"""The pytest plugin (registered through the `pytest11` entry point, so installing streamlog is
enough): a fresh database behind a Kafka listener per test, for application code that uses
confluent-kafka, kafka-python or aiokafka unchanged.

Fixtures:
    streamlog_db          a temporary database, topics auto-created as a default Kafka
                          broker does
    kafka_server          a Kafka listener on it (127.0.0.1, a free port)
    kafka_bootstrap       its bootstrap string, "127.0.0.1:<port>"
    kafka_records         records(topic): every record the application wrote to topic
                          (as a read_committed consumer sees them)
    kafka_wait_for_records wait_for_records(topic, count, timeout=10): the records once
                          there are at least count
    kafka_wait_for_lag    wait_for_lag(group, lag=0, topics=None, timeout=30)
    kafka_faults          the server's fault injection (server.faults: errors, latency,
                          disconnects, rebalances, fencing)
    kafka_cluster         three replicated brokers in this process (streamlog.cluster.
                          Cluster): bootstrap_servers, kill / stop / restart / isolate /
                          slow a broker, partition_state (docs/CLUSTER.md)
No state is shared between tests: each gets its own directory and port, so tests run in
parallel (pytest-xdist) as they are.
"""
import functools

import pytest

from . import cluster, fake_kafka_database, records, wait_for_lag, wait_for_records


@pytest.fixture
def streamlog_db():
    db = fake_kafka_database()
    yield db
    db.close()


@pytest.fixture
def kafka_server(streamlog_db):
    with streamlog_db.serve() as server:
        yield server


@pytest.fixture
def kafka_bootstrap(kafka_server):
    return kafka_server.bootstrap_servers


@pytest.fixture
def kafka_records(streamlog_db):
    return functools.partial(records, streamlog_db)


@pytest.fixture
def kafka_wait_for_records(streamlog_db):
    return functools.partial(wait_for_records, streamlog_db)


@pytest.fixture
def kafka_wait_for_lag(streamlog_db):
    return functools.partial(wait_for_lag, streamlog_db)


@pytest.fixture
def kafka_faults(kafka_server):
    return kafka_server.faults


@pytest.fixture
def kafka_cluster():
    with cluster(3) as brokers:
        yield brokers
