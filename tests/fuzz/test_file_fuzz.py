"""Seeded fuzz of every file of a database directory: damage one file, open the database in a
child process read-only and then writable, read everything back, and compare with an untouched
copy.

What this test owns: that no damage to a single file -- active or sealed segment, offset or
time index, the recovery-point and log-start checkpoints, partition.metadata, topic.json, the
clean-shutdown marker, the LOCK file, the metadata log `__cluster_metadata-0`, a `__consumer_offsets` log --
makes streamlog lose or alter a record silently, hang, crash, or write through a read-only open.
The damage (flip one or several bytes, truncate, zero a range, append garbage, delete, replace
with an empty file, duplicate a range) is drawn from a seed; see support/file_fuzz.py.

Allowed outcomes, per open mode, following Kafka's log recovery (KAFKA_REFERENCE.md 1.6,
Kafka's LogLoader: validate every batch after the recovery point, derive the log end from the
last whole valid batch, and treat indexes as derived data, rebuilt rather than trusted):

- intact: every record (offset, timestamp, key, value), the topics and the committed offsets
  are those of the untouched copy. Damage to an index, a checkpoint, topic.json, the marker or
  the LOCK file can only ever end here or in a typed error: none of them holds records.
- cut: the records of a partition are exactly a prefix of the untouched copy's, the partition
  whose file was damaged: what follows the first damaged batch is gone, as Kafka's recovery
  truncates it. Likewise a damaged metadata log may forget the topics created after its
  damage, and a damaged offsets log may fall back to an earlier commit of the group.
- typed error: a StreamlogError whose message names the damaged file or its partition
  directory, raised by the open or by a read, after only records identical to the copy's.

Anything else fails the test: a record with other bytes, a record missing from the middle,
records beyond the copy's, a cut or an error in a partition whose files were not damaged, an
untyped exception, a stall, death by a signal, a file changed by the read-only open.

Seeds: STREAMLOG_FUZZ_SEED sets the master seed (fixed by default, `random` draws one; see
support/seeds.py); each iteration's
seed derives from it and its number, so STREAMLOG_FUZZ_ONLY=<iteration> reruns one case alone.
STREAMLOG_FUZZ_ITERATIONS sets how many (default: every file kind with every mutation once);
STREAMLOG_FUZZ_TABLE=<path> writes the outcome table as markdown.
"""
import hashlib
import itertools
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from support import file_fuzz, seeds
from support.file_fuzz import FILE_KINDS, MUTATIONS, Reference

COMBINATIONS = list(itertools.product(FILE_KINDS, MUTATIONS))
DEFAULT_ITERATIONS = len(COMBINATIONS)


def iteration_case(master_seed, i, files):
    # Round robin over kind x mutation, so the first len(COMBINATIONS) iterations cover every
    # pair; the seed only chooses the file of the kind and where the damage goes.
    kind, mutation = COMBINATIONS[i % len(COMBINATIONS)]
    seed = int.from_bytes(hashlib.sha256(f"{master_seed}:{i}".encode()).digest()[:6], "big")
    case = file_fuzz.choose(kind, mutation, seed, files)
    case.iteration = i
    return case


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("file-fuzz") / "reference")
    file_fuzz.build_reference(root)
    files = file_fuzz.inventory(root)
    # The child's view of the untouched copy is the baseline; it must be the data written.
    scratch = str(tmp_path_factory.mktemp("file-fuzz-baseline") / "copy")
    shutil.copytree(root, scratch)
    seen = file_fuzz.run_child(scratch)
    assert "failure" not in seen, seen
    ref = Reference(seen, files)
    for mode in ("readonly", "writable"):
        got = seen[mode]
        assert {p: r["records"] for p, r in got["partitions"].items()} == ref.records, mode
        assert got["committed"] == ref.committed, mode
    assert not seen["readonly_changed"]
    for kind, select in FILE_KINDS.items():
        assert select(files), f"the reference database has no {kind} file: {sorted(files)}"
    file_fuzz.REFERENCE[0] = ref
    return root, ref


@pytest.mark.slow
def test_damaged_files_are_read_intact_cut_or_as_a_typed_error(reference, tmp_path):
    root, ref = reference
    master_seed = seeds.master_seed("STREAMLOG_FUZZ_SEED")
    iterations = int(os.environ.get("STREAMLOG_FUZZ_ITERATIONS", DEFAULT_ITERATIONS))
    only = os.environ.get("STREAMLOG_FUZZ_ONLY")
    numbers = [int(only)] if only else range(iterations)
    print(f"file fuzz: STREAMLOG_FUZZ_SEED={master_seed}, {len(numbers)} iteration(s)")

    cases = [iteration_case(master_seed, i, ref.files) for i in numbers]
    runnable = [c for c in cases if c.applicable]
    # One child per case; the children are processes, so threads are enough to keep every core
    # busy while this one waits.
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        done = list(pool.map(lambda c: file_fuzz.run_case(c, root, str(tmp_path)), runnable))

    table_path = os.environ.get("STREAMLOG_FUZZ_TABLE")
    if table_path:
        with open(table_path, "w") as f:
            f.write(file_fuzz.table(cases, master_seed, len(numbers)))

    failing = [c for c in done if c.failures]
    report = []
    for c in failing:
        report.append(
            f"- iteration {c.iteration}: {c.kind} / {c.mutation} on {c.path} ({c.what}); "
            f"reproduce: STREAMLOG_FUZZ_SEED={master_seed} STREAMLOG_FUZZ_ONLY={c.iteration} "
            f"python -m pytest {os.path.relpath(__file__)}\n    " + "\n    ".join(c.failures))
    if failing:
        pytest.fail(f"STREAMLOG_FUZZ_SEED={master_seed}: {len(failing)} of {len(done)} damaged "
                    "copies broke a rule:\n" + "\n".join(report), pytrace=False)
