"""The pytest plugin's fixtures, as an application's test suite uses them: installed with the
package (the pytest11 entry point), a fresh database and listener per test."""
import pytest

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")

pytest_plugins = []   # nothing to declare: the entry point loads the plugin


def test_the_plugin_is_loaded_by_its_entry_point(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("streamlog")


def test_an_application_writes_and_the_test_reads_what_it_wrote(kafka_bootstrap, kafka_records):
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce("orders", key=b"order-%d" % i, value=b"placed")   # auto-created
    assert producer.flush(10) == 0
    written = kafka_records("orders")
    assert sorted(r.key for r in written) == [b"order-%d" % i for i in range(5)]
    assert {r.value for r in written} == {b"placed"}


def test_each_test_gets_its_own_database(streamlog_db, kafka_server):
    assert streamlog_db.topics() == []          # nothing left from the test before
    consumer = kafka.KafkaConsumer(bootstrap_servers=kafka_server.bootstrap_servers)
    assert consumer.topics() == set()
    consumer.close()
