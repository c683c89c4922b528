"""`streamlog repair` through the console entry point: what it prints and its exit codes."""
import os
import subprocess
import sys

import streamlog

METADATA = "__cluster_metadata-0"


def run(*args):
    return subprocess.run([sys.executable, "-m", "streamlog.cli", *args], capture_output=True,
                          text=True)


def make_lost_database(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("orders", partitions=2, config={"retention.ms": 60_000})
        db.producer(acks="all").send("orders", value=b"one", partition=1).result()
    os.rename(os.path.join(root, METADATA), str(tmp_path / "lost"))
    return root


def test_repair_prints_what_it_did_and_the_database_opens(tmp_path):
    root = make_lost_database(tmp_path)
    refused = run("topics", "list", "--path", root)
    # Not a database as it stands: the path is refused (exit 2), and repair is named.
    assert refused.returncode == 2 and "streamlog repair" in refused.stderr

    dry = run("repair", root, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "recovered with 2 partition(s)" in dry.stdout
    assert dry.stdout.splitlines()[-1] == "dry run: nothing was changed"
    assert not os.path.exists(os.path.join(root, METADATA))

    done = run("repair", "--path", root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "wrote a new metadata log: 1 topic(s)"
    listed = run("topics", "describe", "orders", "--path", root)
    assert listed.returncode == 0 and "retention.ms=60000" in listed.stdout.replace(" ", "")
    assert run("repair", root).stdout.splitlines()[-1] == "nothing to repair"


def test_repair_exits_1_and_names_what_it_could_not_recover(tmp_path):
    root = make_lost_database(tmp_path)
    os.makedirs(os.path.join(root, "photos-2024"))
    result = run("repair", root)
    assert result.returncode == 1
    assert f"not recovered: {os.path.join(root, 'photos-2024')}: no partition.metadata" \
        in result.stdout
    assert os.path.isdir(os.path.join(root, "photos-2024"))


def test_repair_refuses_while_a_writer_holds_the_database(tmp_path):
    root = str(tmp_path / "db")
    with streamlog.open(root):
        result = run("repair", root)
    assert result.returncode == 1 and "is open for writing by process" in result.stderr
