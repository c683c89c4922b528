"""`streamlog groups list | describe | delete | reset-offsets` through the console entry point."""
import subprocess
import sys
import textwrap

import pytest

import streamlog


def run(*args):
    return subprocess.run([sys.executable, "-m", "streamlog.cli", "groups", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def path(tmp_path):
    """A database with topic t (2 partitions x 10 records) and group g that read 4 + 10."""
    path = str(tmp_path / "db")
    with streamlog.open(path) as db:
        db.create_topic("t", partitions=2)
        producer = db.producer()
        for i in range(20):
            producer.send("t", value=b"%d" % i, partition=i % 2)
        producer.flush()
        consumer = db.consumer(group_id="g", enable_auto_commit=False)
        consumer.assign([streamlog.TopicPartition("t", 0), streamlog.TopicPartition("t", 1)])
        consumer.commit({streamlog.TopicPartition("t", 0): 4,
                         streamlog.TopicPartition("t", 1): 10})
    return path


def rows(output):
    return [line.split("\t") for line in output.strip().splitlines()]


def test_list_and_describe_show_offsets_and_lag(path):
    listed = run("list", "--path", path)
    assert listed.returncode == 0 and rows(listed.stdout) == [["g", "Empty", "-"]]
    described = run("describe", "g", "--path", path)
    assert described.returncode == 0
    lines = rows(described.stdout)
    assert "TotalLag: 6" in described.stdout
    assert lines[1][:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert [line[:5] for line in lines[2:]] == [["t", "0", "4", "10", "6"],
                                                ["t", "1", "10", "10", "0"]]


def test_reset_offsets_is_a_dry_run_until_execute(path):
    dry = run("reset-offsets", "g", "--path", path, "--all-topics", "--shift-by", "-3")
    assert dry.returncode == 0 and "dry run" in dry.stdout
    assert rows(dry.stdout)[1:3] == [["t", "0", "1"], ["t", "1", "7"]]
    assert "\t4\t10\t6" in run("describe", "g", "--path", path).stdout   # unchanged
    done = run("reset-offsets", "g", "--path", path, "--topic", "t:1", "--to-earliest",
               "--execute")
    assert done.returncode == 0 and "reset 1 offset(s)" in done.stdout
    assert "TotalLag: 16" in run("describe", "g", "--path", path).stdout
    assert run("reset-offsets", "g", "--path", path, "--topic", "t", "--to-offset", "99",
               "--execute").returncode == 0
    assert "TotalLag: 0" in run("describe", "g", "--path", path).stdout  # clamped to the end


def test_reset_offsets_and_delete_refuse_bad_requests(path):
    none = run("reset-offsets", "g", "--path", path, "--all-topics")
    assert none.returncode == 2 and "exactly one of" in none.stderr
    two = run("reset-offsets", "g", "--path", path, "--all-topics", "--to-latest",
              "--to-earliest")
    assert two.returncode == 2
    where = run("reset-offsets", "g", "--path", path, "--to-latest")
    assert where.returncode == 2 and "--topic" in where.stderr
    bad_partition = run("reset-offsets", "g", "--path", path, "--topic", "t:5", "--to-latest")
    assert bad_partition.returncode == 1 and "no partition 5" in bad_partition.stderr
    assert run("describe", "--path", path).returncode == 2                  # no group named
    missing = run("describe", "nope", "--path", path)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert run("list", "--path", path + "-missing").returncode == 2


@pytest.mark.parametrize("spec", ["t:", "t:0,,1", "t:,"])
def test_reset_offsets_refuses_a_topic_whose_partition_list_has_a_blank(path, spec):
    """--topic t: printed an empty plan and exited 0 (and t:0,,1 dropped the blank), so a
    mistyped partition list reset nothing, silently. kafka-consumer-groups refuses both:
    "Invalid topic arg 't:', expected topic name and partitions", and "Invalid partition ''"
    for an empty item (ConsumerGroupCommand.parseTopicsWithPartitions)."""
    refused = run("reset-offsets", "g", "--path", path, "--topic", spec, "--to-earliest")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert f"--topic takes TOPIC or TOPIC:P1,P2, got {spec!r}" in refused.stderr


def test_delete_refuses_a_group_with_live_members_in_the_writer(path):
    # A writer process keeps a member in the group; the CLI cannot even take the lock.
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, streamlog
        with streamlog.open({path!r}) as db:
            c = db.consumer(group_id="g")
            c.subscribe(["t"])
            while not c.assignment():
                c.poll(timeout=0.1)
            print("member", flush=True)
            sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "member"
        described = run("describe", "g", "--path", path)      # read-only: works meanwhile
        assert described.returncode == 0 and "State: Stable" in described.stdout
        refused = run("delete", "g", "--path", path)
        assert refused.returncode == 1 and f"by process {holder.pid}" in refused.stderr
    finally:
        holder.communicate("\n", timeout=60)
    assert run("delete", "g", "--path", path).returncode == 0
    assert run("list", "--path", path).stdout == ""
