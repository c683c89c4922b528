"""Examples run with no arguments, README snippets run, and CI runs the README's test command."""
import glob
import os
import re
import subprocess
import sys

import pytest

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
