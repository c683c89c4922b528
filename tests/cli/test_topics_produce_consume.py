"""`streamlog topics | produce | consume` through the console entry point."""
import json
import subprocess
import sys

import pytest

from support.console import on_a_terminal


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "streamlog.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "db")


def test_topics_lifecycle(path):
    created = run("topics", "create", "orders", "--partitions", "3", "--config",
                  "retention.ms=60000", "--path", path)
    assert created.returncode == 0 and "3 partition(s)" in created.stdout
    assert run("topics", "list", "--path", path).stdout.split() == ["orders"]
    described = run("topics", "describe", "orders", "--path", path).stdout
    assert "PartitionCount: 3" in described and "retention.ms=60000" in described
    assert described.count("Partition: ") == 3
    dup = run("topics", "create", "orders", "--path", path)
    assert dup.returncode == 1 and "already exists" in dup.stderr
    assert run("topics", "delete", "orders", "--path", path).returncode == 0
    assert run("topics", "list", "--path", path).stdout == ""


def test_topics_refuse_bad_input_with_exit_codes(path):
    bad_name = run("topics", "create", "no spaces", "--path", path)
    assert bad_name.returncode == 1 and "topic name" in bad_name.stderr
    bad_config = run("topics", "create", "t", "--config", "retention.ms", "--path", path)
    assert bad_config.returncode == 2 and "key=value" in bad_config.stderr
    assert run("topics", "list", "--path", path + "-missing").returncode == 2
    assert run("topics", "frob", "--path", path).returncode == 2


def test_topics_create_and_delete_without_a_name_are_usage_errors(tmp_path):
    """They exited 1 with "topic name must be a str, not NoneType" (create) and "topic None
    does not exist; create it with create_topic(None)" (delete): a missing argument is bad
    usage (exit 2), as `groups describe` without a group is; kafka-topics refuses it before
    any request too (TopicCommand.checkRequiredArgs: --topic unless --list or --describe)."""
    path = tmp_path / "db"
    created = run("topics", "create", "--path", str(path))
    assert (created.returncode, created.stderr) == (2, "streamlog topics create: name the topic\n")
    assert not path.exists()   # refused before a database was made there
    assert run("topics", "create", "t", "--path", str(path)).returncode == 0
    deleted = run("topics", "delete", "--path", str(path))
    assert (deleted.returncode, deleted.stderr) == (2, "streamlog topics delete: name the topic\n")


def test_topics_describe_with_internal_describes_the_internal_topics_too(path):
    """--internal ("list internal topics too") was ignored by describe: the internal topics
    were neither listed nor described. kafka-topics --describe covers them unless
    --exclude-internal (TopicCommand.doGetTopics)."""
    run("topics", "create", "t", "--path", path)
    run("consume", "t", "--group", "g", "--timeout-ms", "0", "--path", path)
    described = run("topics", "describe", "--internal", "--path", path).stdout
    assert "Topic: __consumer_offsets\t" in described and "Topic: t\t" in described
    assert "Topic: __consumer_offsets" not in run("topics", "describe", "--path", path).stdout


def test_produce_text_with_keys_and_consume_it_back(path):
    run("topics", "create", "t", "--partitions", "2", "--path", path)
    produced = run("produce", "t", "--path", path, "--key-separator", ":",
                   stdin="a:one\nb:two\na:three\n")
    assert produced.returncode == 0 and "produced 3 record(s)" in produced.stderr
    out = run("consume", "t", "--path", path, "--from-beginning", "--print-key",
              "--timeout-ms", "300").stdout.splitlines()
    assert sorted(out) == ["a\tone", "a\tthree", "b\ttwo"]
    assert out.index("a\tone") < out.index("a\tthree")  # one key, one partition, in order


def test_produce_json_and_consume_json(path):
    run("topics", "create", "t", "--path", path)
    lines = [{"value": "hello", "key": "k", "headers": {"h": "1"}, "timestamp": 5000},
             {"value": {"nested": True}}]
    run("produce", "t", "--path", path, "--format", "json",
        stdin="\n".join(json.dumps(line) for line in lines) + "\n")
    out = [json.loads(line) for line in run("consume", "t", "--path", path, "--from-beginning",
                                            "--format", "json", "--timeout-ms", "300"
                                            ).stdout.splitlines()]
    assert out[0]["value"] == "hello" and out[0]["key"] == "k" and out[0]["timestamp"] == 5000
    assert out[0]["headers"] == {"h": "1"} and json.loads(out[1]["value"]) == {"nested": True}
    bad = run("produce", "t", "--path", path, "--format", "json", stdin="not json\n")
    assert bad.returncode == 2 and "line 1 is not JSON" in bad.stderr
    # Headers in another form than consume prints ended in an AttributeError's traceback.
    listed = run("produce", "t", "--path", path, "--format", "json",
                 stdin='{"value": "v", "headers": ["h", "1"]}\n')
    assert listed.returncode == 2 and 'line 1: "headers" must be an object {"name": value} ' \
        'or a list of ["name", value] pairs' in listed.stderr


def test_consume_json_keeps_repeated_header_names_and_produce_reads_them_back(path):
    """Headers were printed as an object, so of two headers named "h" one was lost. Kafka
    allows a name to repeat, in order (RecordHeaders.add appends; lastHeader reads the last):
    such headers print as [name, value] pairs, others as the object they were."""
    import streamlog
    with streamlog.open(path) as db:
        db.create_topic("src")
        db.create_topic("copy")
        producer = db.producer()
        producer.send("src", value=b"v", headers=[("h", b"1"), ("x", b"\xff"), ("h", b"2")])
        producer.send("src", value=b"w", headers=[("h", b"1")])
        producer.flush()
    dumped = run("consume", "src", "--path", path, "--from-beginning", "--format", "json",
                 "--timeout-ms", "300").stdout
    first, second = (json.loads(line)["headers"] for line in dumped.splitlines())
    assert first == [["h", "1"], ["x", {"base64": "/w=="}], ["h", "2"]]
    assert second == {"h": "1"}
    copied = run("produce", "copy", "--path", path, "--format", "json", stdin=dumped)
    assert copied.returncode == 0, copied.stderr
    again = run("consume", "copy", "--path", path, "--from-beginning", "--format", "json",
                "--timeout-ms", "300").stdout
    assert [json.loads(line)["headers"] for line in again.splitlines()] == [first, second]


def test_consume_text_prints_a_null_key_or_value_as_null(path):
    """A tombstone and a record without a key printed "" for the null: a deleted key read
    as one set to the empty string. kafka-console-consumer prints "null"
    (tools/.../consumer/DefaultMessageFormatter.java, null.literal's default)."""
    import streamlog
    with streamlog.open(path) as db:
        db.create_topic("t")
        producer = db.producer()
        producer.send("t", key=b"k", value=None)
        producer.send("t", key=None, value=b"v")
        producer.send("t", key=b"", value=b"")
        producer.flush()
    out = run("consume", "t", "--path", path, "--from-beginning", "--print-key",
              "--timeout-ms", "300").stdout
    assert out.splitlines() == ["k\tnull", "null\tv", "\t"]


def test_consume_json_produced_again_gives_the_same_bytes(path):
    """consume --format json prints bytes that are not UTF-8 as {"base64": ...}; produce
    --format json stored that object as its JSON text, so piping one into the other changed
    every binary key, value and header. Kafka's records are bytes (Record.java): a copy made
    through the two commands keeps them."""
    import streamlog
    binary = bytes(range(256))
    with streamlog.open(path) as db:
        db.create_topic("src")
        db.create_topic("copy")
        db.producer().send("src", key=b"\xff\x00k", value=binary,
                           headers=[("h", b"\x80"), ("t", b"text")]).result()
    dumped = run("consume", "src", "--path", path, "--from-beginning", "--format", "json",
                 "--timeout-ms", "300").stdout
    copied = run("produce", "copy", "--path", path, "--format", "json", stdin=dumped)
    assert copied.returncode == 0, copied.stderr
    with streamlog.open(path, readonly=True) as db:
        consumer = db.consumer(auto_offset_reset="earliest")
        consumer.assign([streamlog.TopicPartition("copy", 0)])
        (record,) = consumer.poll(timeout=1)
    assert (record.key, record.value) == (b"\xff\x00k", binary)
    assert list(record.headers) == [("h", b"\x80"), ("t", b"text")]
    bad = run("produce", "copy", "--path", path, "--format", "json",
              stdin='{"value": {"base64": "not base64!"}}\n')
    assert bad.returncode == 2 and "line 1: value: " in bad.stderr
    # Other objects are still their JSON text, as before.
    run("produce", "copy", "--path", path, "--format", "json",
        stdin='{"value": {"base64": "aGk=", "more": 1}}\n')
    last = run("consume", "copy", "--path", path, "--partition", "0", "--offset", "1",
               "--format", "json",
               "--timeout-ms", "300").stdout
    assert json.loads(last)["value"] == '{"base64":"aGk=","more":1}'


def test_produce_compresses_with_every_codec_kafka_names_snappy_too(path):
    """--compression offered none, gzip, lz4 and zstd: snappy, which the library writes
    (storage/compression.py), was an argparse error. kafka-console-producer's
    --compression-codec takes 'none', 'gzip', 'snappy', 'lz4' or 'zstd'
    (tools/.../ConsoleProducer.java)."""
    pytest.importorskip("cramjam")
    run("topics", "create", "t", "--path", path)
    produced = run("produce", "t", "--path", path, "--compression", "snappy",
                   stdin="one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    dumped = run("dump", "t-0/00000000000000000000.log", "--path", path).stdout
    assert "compresscodec: snappy" in dumped
    consumed = run("consume", "t", "--path", path, "--from-beginning", "--timeout-ms", "300")
    assert consumed.stdout.split() == ["one", "two"]


def test_consume_from_offset_timestamp_and_max_messages(path):
    run("topics", "create", "t", "--path", path)
    run("produce", "t", "--path", path, "--format", "json",
        stdin="".join(json.dumps({"value": f"v{i}", "timestamp": 1000 * i}) + "\n"
                      for i in range(10)))
    def values(*extra):
        return run("consume", "t", "--path", path, "--timeout-ms", "300", *extra).stdout.split()
    assert values("--partition", "0", "--offset", "7") == ["v7", "v8", "v9"]
    assert values("--partition", "0", "--offset", "earliest") == [f"v{i}" for i in range(10)]
    assert values("--partition", "0", "--offset", "latest") == []
    # kafka-console-consumer: "The partition is required when offset is specified."
    refused = run("consume", "t", "--path", path, "--offset", "7")
    assert refused.returncode == 2 and "--offset needs --partition" in refused.stderr
    assert values("--from-timestamp", "4500") == ["v5", "v6", "v7", "v8", "v9"]
    assert values("--from-timestamp", "1970-01-01T00:00:08") == ["v8", "v9"]
    assert values("--from-beginning", "--max-messages", "2") == ["v0", "v1"]
    # kafka-console-consumer's -1 is no limit; it consumed nothing here.
    assert len(values("--from-beginning", "--max-messages", "-1")) == 10
    refused = run("consume", "t", "--path", path, "--max-messages", "-2")
    assert refused.returncode == 2 and "--max-messages takes a count >= 0, or -1" in \
        refused.stderr
    assert values() == []  # default: only new records


def test_consume_takes_offsets_and_timeouts_as_kafka_console_consumer_does(path):
    """--offset -5 was refused in the library's words ("seek offset must be in [0,
    9223372036854775807]"), and --timeout-ms -1 with "poll timeout must be >= 0 seconds, got
    -0.001".
    kafka-console-consumer refuses a negative --offset as bad usage, and reads a negative
    --timeout-ms as none: it waits for records (ConsoleConsumerOptions.parseOffset,
    parseTimeoutMs)."""
    run("topics", "create", "t", "--path", path)
    run("produce", "t", "--path", path, stdin="a\nb\nc\n")
    for offset, why in (("-5", "takes 'earliest', 'latest' or an offset >= 0, got '-5'"),
                        ("x", "takes 'earliest', 'latest' or an offset >= 0, got 'x'")):
        refused = run("consume", "t", "--path", path, "--partition", "0", "--offset", offset)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert f"argument --offset: {why}" in refused.stderr
    waited = run("consume", "t", "--path", path, "--from-beginning", "--timeout-ms", "-1",
                 "--max-messages", "3")
    assert (waited.returncode, waited.stdout.split()) == (0, ["a", "b", "c"]), waited.stderr


def test_consume_works_while_a_writer_holds_the_database(path):
    import streamlog
    with streamlog.open(path) as db:
        db.create_topic("t")
        db.producer().send("t", value=b"live").result()
        out = run("consume", "t", "--path", path, "--from-beginning", "--timeout-ms", "300")
        assert out.returncode == 0 and out.stdout.split() == ["live"]
        locked = run("produce", "t", "--path", path, stdin="x\n")
        assert locked.returncode == 1 and "open for writing by process" in locked.stderr


def test_help_for_every_command():
    for command in ("topics", "produce", "consume", "groups", "get-offsets", "delete-records",
                    "dump", "verify"):
        result = run(command, "--help")
        assert result.returncode == 0 and "usage: streamlog" in result.stdout


def _produce_on_a_terminal(path, *flags):
    """stderr of `produce` run with stderr on a pseudo-terminal, 25,000 lines on stdin."""
    return on_a_terminal("produce", "events", "--path", path, *flags,
                         stdin=b"".join(b"line-%d\n" % i for i in range(25_000)))


def test_produce_shows_a_running_count_on_a_terminal_and_none_with_quiet(path):
    assert run("topics", "create", "events", "--path", path).returncode == 0
    shown = _produce_on_a_terminal(path)
    assert "\rproduce 10,000 records" in shown and "\rproduce 20,000 records" in shown
    assert "%" not in shown               # no total is known: a count, not a percentage
    assert "produced 25000 record(s) to events" in shown
    quiet = _produce_on_a_terminal(path, "--quiet")
    assert "\rproduce" not in quiet and "produced 25000 record(s)" in quiet
    piped = run("produce", "events", "--path", path, stdin="x\n" * 25_000)   # stderr a pipe
    assert "10,000" not in piped.stderr and "produced 25000 record(s)" in piped.stderr


def test_read_only_commands_apply_the_databases_recorded_topic_defaults(path):
    # A topic compacted under the database's compact default (no policy of its own): before
    # the writer recorded its defaults (tests/api/test_topic_defaults.py), the read-only
    # `consume` and `topics describe` read it as a dense log and failed at the cleaner's gaps.
    import streamlog
    with streamlog.open(path, config={"cleanup.policy": "compact"}) as db:
        db.create_topic("t")
        producer = db.producer(linger_ms=0)
        for i in range(8):
            producer.send("t", key=b"k%d" % (i % 2), value=b"v%d" % i).result()
        db.compact("t")
    described = run("topics", "describe", "t", "--path", path)
    assert described.returncode == 0, described.stderr
    assert "FirstDirtyOffset: 8" in described.stdout
    consumed = run("consume", "t", "--path", path, "--from-beginning", "--print-key",
                   "--max-messages", "2", "--timeout-ms", "10000")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["k0\tv6", "k1\tv7"]


def test_topics_refuses_options_of_another_action_and_list_filters_by_the_topic(path):
    # kafka-topics: checkInvalidArgs refuses --partitions and --config outside create
    # ("Option ... can't be used with option ..."), and --list --topic lists the names
    # the topic filter matches (TopicFilter.IncludeList: ',' is '|', whole names).
    assert run("topics", "create", "orders", "--path", path, "--partitions", "2").returncode == 0
    assert run("topics", "create", "order-audit", "--path", path).returncode == 0
    assert run("topics", "create", "users", "--path", path).returncode == 0
    for action, extra, named in (("list", ["--partitions", "5"], "--partitions"),
                                 ("describe", ["--config", "retention.ms=1"], "--config"),
                                 ("delete", ["users", "--partitions", "9"], "--partitions"),
                                 ("create", ["more", "--internal"], "--internal")):
        refused = run("topics", action, *extra, "--path", path)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"{named} cannot be used with {action}" in refused.stderr
    assert run("topics", "list", "--path", path).stdout.split() == \
        ["order-audit", "orders", "users"]
    assert run("topics", "list", "order.*", "--path", path).stdout.split() == \
        ["order-audit", "orders"]
    assert run("topics", "list", "users,orders", "--path", path).stdout.split() == \
        ["orders", "users"]
    assert run("topics", "list", "zzz", "--path", path).stdout == ""
    assert "more" not in run("topics", "list", "--path", path).stdout
