"""The command fails the way a command should: one line naming the problem in terms of
commands, a non-zero exit, never a traceback; and it says what it did before it failed."""
import os
import selectors
import signal
import subprocess
import sys

import pytest

import streamlog

from support.child import run_py
from support.console import on_a_terminal


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "streamlog.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


def one_line_error(result, code=1):
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "db")


def test_a_missing_topic_is_named_with_the_command_that_creates_it(path):
    """It said "create it with create_topic('x')", and produce with empty input printed
    "produced 0 record(s)" and exited 0."""
    assert run("topics", "create", "events", "--path", path).returncode == 0
    produced = one_line_error(run("produce", "nope", "--path", path, stdin=""))
    assert f"create it with: streamlog topics create nope --path {path}" in produced
    assert "create_topic" not in produced and "produced" not in produced
    consumed = one_line_error(run("consume", "nope", "--path", path))
    assert f"streamlog topics create nope --path {path}" in consumed


def test_a_bad_line_says_how_many_records_went_before_it(path):
    assert run("topics", "create", "events", "--path", path).returncode == 0
    failed = run("produce", "events", "--key-separator", ":", "--path", path,
                 stdin="a:1\nb:2\nno separator\nc:3\n")
    message = one_line_error(failed, code=2)
    assert "line 3" in message and "the 2 record(s) before it were produced" in message
    shown = run("consume", "events", "--from-beginning", "--path", path)
    assert shown.stdout.splitlines() == ["1", "2"]
    json_failed = run("produce", "events", "--format", "json", "--path", path,
                      stdin='{"value": "x"}\n{"value": "y", "timestamp": "soon"}\n')
    message = one_line_error(json_failed, code=2)
    assert "line 2" in message and "timestamp_ms" in message and "1 record(s)" in message


def test_a_writing_command_beside_a_writer_names_the_commands_that_still_work(path):
    with streamlog.open(path) as db:
        db.create_topic("events")
        message = one_line_error(run("topics", "create", "more", "--path", path))
        assert f"process {os.getpid()}" in message
        assert "readonly=True" not in message
        assert "consume (without --group), topics list|describe" in message
        assert run("topics", "list", "--path", path).stdout == "events\n"  # and it does


def test_a_path_that_is_a_file_is_one_line(tmp_path):
    target = tmp_path / "hostname"
    target.write_text("box\n")
    for args in (["topics", "create", "t"], ["produce", "t"], ["topics", "list"]):
        message = one_line_error(run(*args, "--path", str(target), stdin=""), code=2)
        assert str(target) in message
    assert target.read_text() == "box\n"


CLI = """
    import sys
    from streamlog.cli import main
    sys.exit(main(sys.argv[1:]))
"""


def test_permission_problems_are_one_line_naming_the_path(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    db = str(tmp_path / "db")
    assert run("topics", "create", "t", "--path", db).returncode == 0
    os.chmod(locked, 0o555)
    os.chmod(db, 0o555)
    try:
        under_parent = run_py(CLI, "topics", "create", "t", "--path", str(locked / "new"),
                              honour_permissions=True)
        unwritable = run_py(CLI, "topics", "create", "u", "--path", db, honour_permissions=True)
        readable = run_py(CLI, "topics", "list", "--path", db, honour_permissions=True)
    finally:
        os.chmod(locked, 0o755)
        os.chmod(db, 0o755)
    assert str(locked / "new") in one_line_error(under_parent)
    message = one_line_error(unwritable)
    assert db in message and "permission" in message
    assert readable.returncode == 0 and readable.stdout == "t\n"  # read-only still works


def test_a_directory_that_holds_no_database_is_refused_with_exit_2(tmp_path):
    # The module's contract: a command that needs an existing database refuses a path
    # that names none with exit 2 (bad usage), as it refuses a missing path.
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in (("topics", "list"), ("get-offsets",), ("groups", "list"),
                    ("consume", "t")):
        message = one_line_error(run(*command, "--path", str(empty)), code=2)
        assert f"{empty} is not a streamlog database" in message
    assert os.listdir(empty) == []


def test_an_input_file_that_cannot_be_read_exits_2_and_dumps_nothing(path, tmp_path):
    assert run("topics", "create", "t", "--path", path).returncode == 0
    missing_json = tmp_path / "missing.json"
    message = one_line_error(run("delete-records", "--path", path, "--offset-json-file",
                                 str(missing_json)), code=2)
    assert str(missing_json) in message
    missing_segment = os.path.join(path, "t-0", "00000000000000000099.log")
    dumped = run("dump", missing_segment)
    assert one_line_error(dumped, code=2) == \
        f"streamlog dump: {missing_segment}: no such file"
    assert dumped.stdout == ""   # no "Dumping ..." header for a file that is not there


def test_dump_of_a_file_that_is_not_a_segment_exits_non_zero(tmp_path):
    garbage = tmp_path / "00000000000000000000.log"
    garbage.write_bytes(b"these are my notes, not record batches\n" * 3)
    dumped = run("dump", str(garbage))
    assert dumped.returncode == 1 and "not a segment file" in dumped.stderr
    named_wrong = tmp_path / "notes.txt"
    named_wrong.write_text("x")
    assert run("dump", str(named_wrong)).returncode == 2


def test_consume_shows_a_running_count_and_rate_on_a_terminal(path):
    assert run("topics", "create", "events", "--path", path).returncode == 0
    assert run("produce", "events", "--path", path, stdin="x\n" * 3000).returncode == 0
    shown = on_a_terminal("consume", "events", "--from-beginning", "--timeout-ms", "200",
                          "--path", path)
    assert "\rconsume " in shown and " records/s)" in shown
    assert "consumed 3000 record(s)" in shown
    quiet = on_a_terminal("consume", "events", "--from-beginning", "--timeout-ms", "200",
                          "--quiet", "--path", path)
    assert "\rconsume" not in quiet and "consumed 3000 record(s)" in quiet
    piped = run("consume", "events", "--from-beginning", "--timeout-ms", "200", "--path", path)
    assert "records/s" not in piped.stderr and "consumed 3000 record(s)" in piped.stderr


def _following(path, *args):
    """`streamlog consume ARGS` left running, stdout a pipe, and buffered as a user's is
    (without the PYTHONUNBUFFERED a test environment may set)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.Popen([sys.executable, "-m", "streamlog.cli", "consume", *args,
                             "--path", path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


def _lines(stream, count, within_s=30):
    """The next count lines of a running command's stdout; fails if they are not there
    within within_s (a generous bound: they are printed at once, or never)."""
    data = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        while data.count(b"\n") < count:
            assert selector.select(within_s), f"no more lines after {data!r}"
            chunk = os.read(stream.fileno(), 1 << 16)   # unbuffered: select sees the rest
            assert chunk, f"stdout closed after {data!r}"
            data += chunk
    return data.decode().splitlines(keepends=True)[:count]


def test_consume_into_a_pipe_prints_each_poll_before_waiting_for_more(path):
    """Printed records stayed in stdout's buffer until the command ended (a timeout of
    --timeout-ms, or never with -1), so `consume ... | grep` showed nothing while it
    followed the topic. kafka-console-consumer's output is System.out, which flushes each
    record (tools/.../consumer/ConsoleConsumer.java, process)."""
    assert run("topics", "create", "events", "--path", path).returncode == 0
    assert run("produce", "events", "--path", path, stdin="a\nb\nc\n").returncode == 0
    following = _following(path, "events", "--from-beginning", "--timeout-ms", "600000")
    try:
        assert _lines(following.stdout, 3) == ["a\n", "b\n", "c\n"]
    finally:
        following.send_signal(signal.SIGINT)
        following.wait(timeout=60)


def test_ctrl_c_in_consume_with_a_group_commits_what_it_printed(path):
    """Ctrl-C raised KeyboardInterrupt out of the poll loop, past the commit: the group kept
    no offset, and the next `consume --group` printed the same records again.
    kafka-console-consumer's shutdown hook wakes the consumer up and closes it, which
    commits what was consumed (tools/.../consumer/ConsoleConsumer.java, addShutdownHook)."""
    assert run("topics", "create", "events", "--path", path).returncode == 0
    assert run("produce", "events", "--path", path, stdin="a\nb\nc\n").returncode == 0
    following = _following(path, "events", "--group", "g", "--from-beginning",
                           "--timeout-ms", "600000")
    try:
        assert _lines(following.stdout, 3) == ["a\n", "b\n", "c\n"]
    finally:
        following.send_signal(signal.SIGINT)
        assert following.wait(timeout=60) == 130
    assert "events\t0\t3\t3\t0\t" in run("groups", "describe", "g", "--path", path).stdout
    # --from-beginning: where the group has no committed offset.
    assert run("consume", "events", "--group", "g", "--from-beginning", "--path", path
               ).stdout == ""
    assert b"consumed 3 record(s)" in following.stderr.read()   # said, as on a timeout


def test_consume_with_a_group_commits_only_what_it_printed(path):
    assert run("topics", "create", "events", "--path", path).returncode == 0
    assert run("produce", "events", "--path", path, stdin="".join(
        f"v{i}\n" for i in range(10))).returncode == 0
    first = run("consume", "events", "--group", "g", "--from-beginning", "--max-messages", "4",
                "--path", path)
    assert first.stdout.splitlines() == ["v0", "v1", "v2", "v3"]
    rest = run("consume", "events", "--group", "g", "--path", path)
    assert rest.stdout.splitlines() == [f"v{i}" for i in range(4, 10)]
    assert "TotalLag: 0" in run("groups", "describe", "g", "--path", path).stdout


@pytest.mark.parametrize("command", [("compact",), ("topics", "delete", "t"),
                                     ("topics", "list"), ("groups", "list"), ("consume", "t"),
                                     ("produce", "t")])
def test_a_mistyped_path_is_refused_and_no_database_is_made_there(tmp_path, command):
    """`compact` and `topics delete` made a new, empty database at a path that did not exist
    (compact then said "__cluster_metadata-0: nothing to clean" and exited 0), and `produce`
    made one and then failed, exit 1, for want of the topic, which a new database cannot
    have. A command that reads or changes an existing database refuses such a path, as the
    others did already."""
    missing = tmp_path / "no-such-db"
    error = one_line_error(run(*command, "--path", str(missing)), code=2)
    assert error == f"streamlog {command[0]}: {missing} is not a directory"
    assert not missing.exists()


def test_a_time_that_is_no_time_names_the_option_and_its_forms(path):
    """--from-timestamp yesterday said only "Invalid isoformat string: 'yesterday'"."""
    assert run("topics", "create", "t", "--path", path).returncode == 0
    error = one_line_error(run("consume", "t", "--path", path, "--from-timestamp", "yesterday"),
                           code=2)
    assert error.startswith("streamlog consume: --from-timestamp takes milliseconds since the "
                            "epoch or an ISO-8601 time") and error.endswith("got 'yesterday'")
    error = one_line_error(run("groups", "reset-offsets", "g", "--path", path, "--all-topics",
                               "--to-datetime", "noon"), code=2)
    assert "--to-datetime takes milliseconds since the epoch" in error
