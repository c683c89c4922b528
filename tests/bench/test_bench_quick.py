"""Every benchmark still runs: each bench/*.py in --quick mode must exit 0 and print ratios.

Speed is not judged here (quick sizes are too small to mean anything); this
only keeps the benchmarks from rotting.
"""
import glob
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
SCRIPTS = sorted(glob.glob(os.path.join(BENCH, "bench_*.py")))


def test_there_are_benchmarks():
    assert SCRIPTS, "no bench/bench_*.py found"


@pytest.mark.parametrize("script", SCRIPTS, ids=[os.path.basename(s) for s in SCRIPTS])
def test_bench_runs_in_quick_mode(script):
    if os.path.basename(script) == "bench_spark.py":
        pytest.importorskip("pyspark", reason="the [spark] extra is not installed")
    result = subprocess.run([sys.executable, script, "--quick"], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "x " in result.stdout  # at least one ratio against a baseline was printed
