"""The pytest plugin's fixtures, as an application's test suite uses them: installed with the
package (the pytest11 entry point), a fresh database and listener per test."""
import os
import subprocess
import sys

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


def test_the_helpers_wait_for_records_and_lag_and_name_the_first_difference(
        kafka_bootstrap, kafka_wait_for_records, kafka_wait_for_lag, kafka_faults):
    from streamlog.testing import assert_records
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap,
                                         "linger.ms": 50})
    for i in range(3):
        producer.produce("events", key=b"k%d" % i, value=b"v%d" % i, partition=0,
                         headers=[("trace", b"%d" % i)])
    # The application's producer delivers in the background: wait for what it sends.
    written = kafka_wait_for_records("events", 3)
    assert_records(written, keys=[b"k0", b"k1", b"k2"],
                   headers=[[("trace", b"0")], [("trace", b"1")], [("trace", b"2")]])
    with pytest.raises(AssertionError, match=r"record 1 \(events\[0\] offset 1\) has value "
                                             r"b'v1', expected b'other'"):
        assert_records(written, values=[b"v0", b"other", b"v2"])
    with pytest.raises(AssertionError, match="3 record"):
        assert_records(written, keys=[b"k0"])
    with pytest.raises(AssertionError, match="holds 3 record"):
        kafka_wait_for_records("events", 4, timeout=0.1)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": kafka_bootstrap,
                                         "group.id": "app", "auto.offset.reset": "earliest"})
    consumer.subscribe(["events"])
    seen = 0
    while seen < 3:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        seen += 1
    consumer.commit(asynchronous=False)
    from streamlog import TopicPartition
    assert kafka_wait_for_lag("app") == {TopicPartition("events", 0): 0}   # one partition
    consumer.close()
    with pytest.raises(AssertionError, match="'nobody' did not reach lag"):
        kafka_wait_for_lag("nobody", timeout=0.1)
    assert kafka_faults.pending() == 0


def test_the_fixtures_run_in_parallel_workers_under_xdist(tmp_path):
    # No global state: each worker's tests get their own databases and ports.
    pytest.importorskip("xdist")
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                           "test_with_fake_kafka.py")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2",
                             "-p", "no:cacheprovider", example], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "3 passed" in result.stdout


def test_records_are_what_a_read_committed_consumer_sees(streamlog_db):
    from streamlog.testing import records, wait_for_records
    producer = streamlog_db.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"a", partition=0)
    producer.send("t", b"b", partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("t", b"c", partition=0)
    producer.send("t", b"d", partition=0)
    producer.abort_transaction()
    producer.close()
    # Six offsets (four records, two markers); two records committed.
    assert [r.value for r in records(streamlog_db, "t")] == [b"a", b"b"]
    assert [r.value for r in records(streamlog_db, "t", "read_uncommitted")] == \
        [b"a", b"b", b"c", b"d"]
    with pytest.raises(AssertionError, match="holds 2 record"):
        wait_for_records(streamlog_db, "t", 3, timeout=0.2)
