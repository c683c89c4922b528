"""`streamlog dump` and `streamlog verify` through the console entry point."""
import os
import re
import subprocess
import sys

from streamlog.storage.log_directory import LogDirectory
from streamlog.structs import TopicPartition

from support import config, make_batch, segment_files


def make_root(tmp_path, batches=30):
    root = str(tmp_path / "db")
    d = LogDirectory(root)
    log = d.open_log(TopicPartition("orders", 0), config(segment_bytes=3000,
                                                         index_interval_bytes=100))
    for b in range(batches):
        log.append(make_batch(b, 4))
    d.close()
    return root


def run(*args):
    return subprocess.run([sys.executable, "-m", "streamlog.cli", *args], capture_output=True,
                          text=True)


def test_dump_lists_batches_and_records(tmp_path):
    root = make_root(tmp_path)
    seg = segment_files(os.path.join(root, "orders-0"))[0]
    out = run("dump", seg).stdout.splitlines()
    assert out[0] == f"Dumping {seg}"
    assert out[1].startswith("baseOffset: 0 lastOffset: 3 count: 4 ")
    assert "isvalid: true" in out[1] and "compresscodec: none" in out[1]
    assert not any(line.startswith("|") for line in out)
    with_records = run("dump", "--print-records", seg).stdout
    assert "| offset: 0 CreateTime: 1000000 keySize: 2 valueSize: 13 headerKeys: [] " \
           "key: k0 payload: b000000-r0000" in with_records


def test_dump_of_an_index_lists_entries(tmp_path):
    root = make_root(tmp_path)
    index = segment_files(os.path.join(root, "orders-0"), ".index")[0]
    lines = run("dump", index).stdout.splitlines()[1:]
    assert lines and all(line.startswith("offset: ") and " position: " in line for line in lines)


def test_verify_passes_on_a_healthy_directory_and_shows_progress(tmp_path):
    root = make_root(tmp_path)
    result = run("verify", root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("OK: 1 partition(s)")
    assert "120 record(s)" in result.stdout
    assert "verify [" in result.stderr and "100.0%" in result.stderr
    assert run("dump", "--verify", root).returncode == 0


def test_verify_of_a_directory_that_is_no_database_is_refused_not_passed(tmp_path):
    """It printed "OK: 0 partition(s) ..." and exited 0 for any folder (/etc): an OK that
    vouched for a mistyped path. A database with no topic still has its files."""
    elsewhere = tmp_path / "photos"
    (elsewhere / "2024").mkdir(parents=True)
    (elsewhere / "notes.txt").write_text("x")
    for args in (("verify", str(elsewhere)), ("dump", "--verify", str(elsewhere))):
        result = run(*args)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "holds no partition and no file of a database" in result.stderr
        assert "OK" not in result.stdout and "Traceback" not in result.stderr
    import streamlog
    empty = str(tmp_path / "empty-db")
    streamlog.open(empty).close()
    result = run("verify", empty)
    assert result.returncode == 0 and result.stdout.startswith("OK: "), result.stderr


def test_dump_verify_reports_and_shows_progress_as_verify_does(tmp_path):
    root = make_root(tmp_path)
    log_bytes = sum(os.path.getsize(p) for p in segment_files(os.path.join(root, "orders-0")))
    verify, dump = run("verify", root), run("dump", "--verify", root)
    assert dump.returncode == 0, dump.stdout + dump.stderr
    assert dump.stdout == verify.stdout == (
        f"OK: 1 partition(s), 2 segment(s), 30 batch(es), 120 record(s), {log_bytes} bytes "
        f"checked in {root}\n")
    progress = dump.stderr.splitlines()
    assert progress and all(line.startswith("verify [") for line in progress), dump.stderr
    # stderr is not a terminal here: whole lines, the last one the finished total
    finished = re.fullmatch(r"verify \[#{30}\] 100\.0% (.+)/(.+?) *", progress[-1])
    assert finished, f"the last progress line is not the finished total: {progress[-1]!r}"
    assert finished.group(1) == finished.group(2) == f"{log_bytes / 1024:.1f} KiB"
    quiet = run("dump", "--verify", "--quiet", root)
    assert quiet.stdout == dump.stdout and quiet.stderr == ""


def test_verify_names_the_corrupt_file_and_exits_1(tmp_path):
    root = make_root(tmp_path)
    seg = segment_files(os.path.join(root, "orders-0"))[0]
    with open(seg, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0x55]))
    result = run("verify", "--quiet", root)
    assert result.returncode == 1
    assert f"PROBLEM: {seg}" in result.stdout and "CRC" in result.stdout
    assert result.stderr == ""


def test_verify_flags_an_index_that_disagrees_with_the_log(tmp_path):
    root = make_root(tmp_path)
    index = segment_files(os.path.join(root, "orders-0"), ".index")[0]
    with open(index, "r+b") as f:
        f.seek(4)
        f.write((123).to_bytes(4, "big"))  # the first entry's position
    result = run("verify", "--quiet", root)
    assert result.returncode == 1 and "does not point at the batch" in result.stdout


def test_bad_usage_exits_2(tmp_path):
    assert run("verify", str(tmp_path / "missing")).returncode == 2
    assert run("dump", str(tmp_path / "not-a-segment.txt")).returncode == 2
    assert run("frobnicate").returncode == 2


def test_verify_and_dump_verify_take_the_directory_as_path_too(tmp_path):
    root = make_root(tmp_path)
    positional = run("verify", "--quiet", root)
    assert positional.returncode == 0 and positional.stdout.startswith("OK: ")
    for args in (("verify", "--path", root), ("dump", "--verify", "--path", root),
                 ("verify", root, "--path", root + "/"),
                 ("dump", "--verify", root, "--path", root)):
        result = run(*args, "--quiet")
        assert (result.returncode, result.stdout) == (0, positional.stdout), args


def test_dump_path_makes_segment_files_relative_to_the_database(tmp_path):
    root = make_root(tmp_path)
    seg = segment_files(os.path.join(root, "orders-0"))[0]
    relative = os.path.relpath(seg, root)  # orders-0/00000000000000000000.log
    by_path = run("dump", relative, "--path", root)
    assert by_path.returncode == 0, by_path.stderr
    assert by_path.stdout.splitlines()[0] == f"Dumping {os.path.join(root, relative)}"
    assert by_path.stdout.splitlines()[1:] == run("dump", seg).stdout.splitlines()[1:]
    assert run("dump", seg, "--path", root).returncode == 0  # an absolute FILE stays as it is


def test_directory_missing_or_given_twice_differently_exits_2(tmp_path):
    root = make_root(tmp_path)
    other = str(tmp_path)
    for args in (("verify",), ("dump", "--verify"), ("dump",), ("dump", "--path", root)):
        result = run(*args)
        assert result.returncode == 2 and result.stdout == "", args
        assert "--path DIR" in result.stderr, args
    for args in (("verify", other, "--path", root), ("dump", "--verify", other, "--path", root)):
        result = run(*args)
        assert result.returncode == 2 and "given twice" in result.stderr, args


def test_verify_reports_offsets_no_segment_holds(tmp_path):
    """A removed first segment (below the checkpointed log start) and a removed middle one (in a
    topic that topic.json says is not compacted) are both missing offsets; a compacted topic may
    have holes between segments."""
    import streamlog
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        for topic, policy in (("plain", "delete"), ("keyed", "compact")):
            db.create_topic(topic, config={"segment.bytes": 400, "cleanup.policy": policy})
            producer = db.producer(linger_ms=0)
            for i in range(60):
                producer.send(topic, key=b"k%d" % i, value=b"v%03d" % i).result()
    assert run("verify", "--quiet", root).returncode == 0
    plain, keyed = os.path.join(root, "plain-0"), os.path.join(root, "keyed-0")
    plain_logs, keyed_logs = segment_files(plain), segment_files(keyed)
    assert len(plain_logs) >= 4 and len(keyed_logs) >= 3
    for path in (plain_logs[0], plain_logs[2], keyed_logs[1]):
        os.unlink(path)
    result = run("verify", "--quiet", root)
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("PROBLEM")]
    first_base = int(os.path.basename(plain_logs[1]).split(".")[0])
    third_base = int(os.path.basename(plain_logs[3]).split(".")[0])
    assert any(f"{plain}: offsets 0..{first_base - 1} are missing" in p for p in problems), problems
    assert any(f"{plain_logs[3]}: offsets" in p and f"..{third_base - 1} are missing" in p
               for p in problems), problems
    assert not any(keyed in p for p in problems), problems


def test_verify_does_not_judge_holes_in_a_topic_compacted_by_the_database_default(tmp_path):
    """topic.json records a topic's own overrides only: a topic compacted by the database's
    default cleanup.policy sets none, and a hole between its segments is not reported."""
    import streamlog
    root = str(tmp_path / "db")
    with streamlog.open(root, config={"cleanup.policy": "compact"}) as db:
        db.create_topic("keyed", config={"segment.bytes": 400})
        producer = db.producer(linger_ms=0)
        for i in range(60):
            producer.send("keyed", key=b"k%d" % i, value=b"v%03d" % i).result()
    logs = segment_files(os.path.join(root, "keyed-0"))
    assert len(logs) >= 3
    os.unlink(logs[1])
    result = run("verify", "--quiet", root)
    assert result.returncode == 0, result.stdout


def test_verify_reports_a_batch_whose_base_offset_skips_offsets(tmp_path):
    """baseOffset is outside the batch CRC: a flip that moves it up leaves a valid batch, and
    only the density of a log that is not compacted shows the damage."""
    import streamlog
    root = str(tmp_path / "db")
    with streamlog.open(root) as db:
        db.create_topic("plain", config={"cleanup.policy": "delete"})
        producer = db.producer(linger_ms=0)
        for i in range(10):
            producer.send("plain", value=b"v%03d" % i).result()
    path = segment_files(os.path.join(root, "plain-0"))[0]
    data = bytearray(open(path, "rb").read())
    position = 0
    for _ in range(4):   # to the fifth batch (offset 4)
        position += 12 + int.from_bytes(data[position + 8:position + 12], "big")
    assert int.from_bytes(data[position:position + 8], "big") == 4
    data[position:position + 8] = (4 + 256).to_bytes(8, "big")
    open(path, "wb").write(data)
    result = run("verify", "--quiet", root)
    assert result.returncode == 1
    assert f"{path} at byte {position}: offsets 4..259 are missing" in result.stdout, result.stdout


def test_verify_of_a_live_writer_accepts_an_active_segment_without_index_files(tmp_path):
    """A writer makes a new segment's index files at its first entry or at its seal: verify,
    run while the writer is open, must not call the active segment's missing ones damage; a
    sealed segment without them still is."""
    root = str(tmp_path / "db")
    d = LogDirectory(root)
    log = d.open_log(TopicPartition("orders", 0), config(segment_bytes=3000,
                                                         index_interval_bytes=100))
    for b in range(30):
        log.append(make_batch(b, 4))
    log.roll()
    log.append(make_batch(30, 4))       # below index_interval_bytes: no index file yet
    active = log.active_segment
    assert not os.path.exists(active.offset_index.path)
    try:
        result = run("verify", "--quiet", root)
        assert result.returncode == 0, result.stdout + result.stderr
        sealed = log.segments[0].offset_index.path
        os.rename(sealed, sealed + ".away")
        result = run("verify", "--quiet", root)
        assert result.returncode == 1 and "index file is missing" in result.stdout
        os.rename(sealed + ".away", sealed)
    finally:
        d.close()


def test_dump_into_a_pipe_closed_early_ends_quietly(tmp_path):
    """`streamlog dump FILE | head -1`: the write to the closed pipe was caught as an error
    reading FILE, so the command printed "streamlog dump: [Errno 32] Broken pipe" and
    exited 2. A reader that has gone is no failure of the command: it ends with exit 0 and
    nothing on stderr, as `consume ... | head` does."""
    root = make_root(tmp_path)
    seg = segment_files(os.path.join(root, "orders-0"))[0]
    # 10 x 14 KB: more than a pipe holds, so the command is still writing when it closes.
    dumping = subprocess.Popen([sys.executable, "-m", "streamlog.cli", "dump",
                                "--print-records", *[seg] * 10],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert dumping.stdout.readline() == f"Dumping {seg}\n".encode()
    dumping.stdout.close()
    assert (dumping.wait(timeout=60), dumping.stderr.read()) == (0, b"")


def test_dump_refuses_a_negative_max_value_bytes(tmp_path):
    """--max-value-bytes -1 was taken as a slice end: each key and payload lost its last
    byte and gained "...", exit 0. A count of bytes is 0 or more."""
    root = make_root(tmp_path)
    seg = segment_files(os.path.join(root, "orders-0"))[0]
    refused = run("dump", "--print-records", "--max-value-bytes", "-1", seg)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "argument --max-value-bytes: must be at least 0, got -1" in refused.stderr
    assert " key: ... payload: ..." in run("dump", "--print-records", "--max-value-bytes", "0",
                                           seg).stdout
