"""Examples run with no arguments, README snippets and its CLI block run, and CI runs the
README's test command."""
import glob
import os
import re
import subprocess
import sys

import pytest


from support.console import streamlog_command

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLES = sorted(p for p in glob.glob(os.path.join(ROOT, "examples", "*.py"))
                  if not os.path.basename(p).startswith("spark_"))


def readme():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("example", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
def test_example_runs_without_arguments(example, tmp_path):
    result = subprocess.run([sys.executable, example], capture_output=True, text=True,
                            cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip()


def test_readme_python_snippets_run(tmp_path):
    snippets = re.findall(r"```python\n(.*?)```", readme(), re.S)
    assert snippets
    for code in snippets:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                cwd=tmp_path, timeout=300)
        assert result.returncode == 0, code + result.stderr


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one():
    first_block = re.search(r"```bash\n(.*?)```", readme(), re.S).group(1).splitlines()
    install_and_run, install_and_test = (line.split("#")[0].strip() for line in first_block[:2])
    assert install_and_run.startswith("pip install") and "examples/" in install_and_run
    assert os.path.exists(os.path.join(ROOT, install_and_run.split("python ")[-1]))
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        assert install_and_test in f.read()


def test_readme_cli_block_runs_as_written_on_a_fresh_directory(tmp_path):
    """Every line, top to bottom, in an empty directory: nothing is prepared for it (the group
    the block describes is made by its own `consume --group` line)."""
    (block,) = [b for b in re.findall(r"```bash\n(.*?)```", readme(), re.S)
                if "streamlog topics create" in b]
    command = streamlog_command()
    env = dict(os.environ, PATH=os.path.dirname(command) + os.pathsep + os.environ["PATH"])
    results = {}
    for line in block.splitlines():
        result = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"{line}\n{result.stdout}{result.stderr}"
        words = line.split("|")[-1].split()
        key = " ".join(words[1:3])  # "topics create", "consume events", ...
        results[key + (" --group" if "--group" in words else "")] = result
    assert results["topics create"].stdout == "created topic events with 4 partition(s)\n"
    assert "produced 2 record(s) to events" in results["produce events"].stderr
    assert sorted(results["consume events"].stdout.splitlines()) == ["user-1\thello",
                                                                     "user-2\tworld"]
    described = results["topics describe"].stdout
    assert "PartitionCount: 4" in described and "retention.ms=86400000" in described
    assert results["dump events-0/00000000000000000000.log"].stdout.startswith(
        "Dumping data/events-0/00000000000000000000.log\n")
    assert results["verify --path"].stdout.startswith("OK: ")
    assert sorted(results["consume events --group"].stdout.splitlines()) == ["hello", "world"]
    described = results["groups describe"].stdout
    assert "Group: billing" in described and "TotalLag: 0" in described
    assert "reset 4 offset(s) of group billing" in results["groups reset-offsets"].stdout
    # delete-records moved partition 0's log start to its high watermark, -1 in the file.
    deleted = results["delete-records --offset-json-file"].stdout.splitlines()
    assert deleted[-1].startswith("partition: events-0\tlow_watermark: ")
    high_watermark = deleted[-1].rsplit(" ", 1)[1]
    assert results["get-offsets --topic"].stdout.splitlines() == \
        [f"events:0:{high_watermark}", "events:1:0", "events:2:0", "events:3:0"]
