"""System test: kill -9 a writer in the middle of a stream of appends, reopen, check.

Twenty times in a row on one log root: start the writer, let it append for a
random moment, SIGKILL it, then reopen the root in this process. The log must
hold exactly a prefix of the written sequence (dense offsets, every value the
function of its offset), contain everything the writer reported fsynced, pass
`verify`, and accept the next writer.
"""
import os
import random
import signal
import subprocess
import sys
import time

from streamlog.storage.log_directory import LogDirectory
from streamlog.storage.verify import verify_directory

from support import kill9_writer as writer
from support import read_all

REPETITIONS = 20


def start_writer(root):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, writer.__file__, root], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)


def run_and_kill(root, rng):
    proc = start_writer(root)
    opened = proc.stdout.readline()
    assert opened.startswith("opened"), proc.stderr.read()
    synced = 0
    wanted_syncs = rng.randint(1, 3)
    for _ in range(wanted_syncs):
        line = proc.stdout.readline()
        assert line.startswith("synced"), line + proc.stderr.read()
        synced = int(line.split()[1])
    time.sleep(rng.uniform(0, 0.01))  # land somewhere inside the next appends
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return int(opened.split()[1]), synced


def test_sigkilled_writer_leaves_a_recoverable_prefix(tmp_path):
    root = str(tmp_path / "root")
    rng = random.Random(20261121)
    previous_end = 0
    truncations = 0
    for rep in range(REPETITIONS):
        opened_at, synced = run_and_kill(root, rng)
        assert opened_at >= previous_end  # the writer saw everything kept so far
        directory = LogDirectory(root)
        assert not directory.clean_shutdown
        log = directory.open_log(writer.TP, writer.CONFIG)
        truncations += log.recovery_report.truncated_bytes > 0
        rows = read_all(log, start=0, max_bytes=1 << 20)
        offsets = [r[0] for r in rows]
        assert offsets == list(range(len(rows))), f"rep {rep}: offsets not dense from 0"
        assert all(r[3] == writer.value_for(r[0]) for r in rows), f"rep {rep}: wrong values"
        assert len(rows) % writer.RECORDS_PER_BATCH == 0  # whole batches only
        assert len(rows) >= synced, f"rep {rep}: lost fsynced data ({len(rows)} < {synced})"
        previous_end = len(rows)
        log.close(flush=False)  # leave the root as a crash left it (no clean marker)
        report = verify_directory(root)
        assert report.ok, [str(p) for p in report.problems]
    assert previous_end > 0
    print(f"{REPETITIONS} kills, {previous_end} records kept, {truncations} torn tails cut")
