"""`streamlog compact` through the console entry point: a pass now, its report and progress,
the describe columns of compacted topics, and its refusals."""
import subprocess
import sys

import pytest


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "streamlog.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def path(tmp_path):
    path = str(tmp_path / "db")
    assert run("topics", "create", "prices", "--config", "cleanup.policy=compact",
               "--config", "segment.bytes=20000", "--path", path).returncode == 0
    lines = "".join(f"item-{i % 5}:{i}\n" for i in range(3000))
    assert run("produce", "prices", "--key-separator", ":", "--quiet", "--path", path,
               stdin=lines).returncode == 0
    return path


def test_compact_cleans_the_topic_and_says_what_it_kept(path):
    done = run("compact", "prices", "--path", path)
    assert done.returncode == 0, done.stderr
    assert "prices-0: kept 5 of 3,000 records" in done.stdout
    assert "compact [" in done.stderr                     # the progress bar
    consumed = run("consume", "prices", "--from-beginning", "--print-key", "--path", path,
                   "--timeout-ms", "300", "--quiet")
    assert consumed.stdout.split("\n")[:-1] == [f"item-{i % 5}\t{i}" for i in range(2995, 3000)]
    described = run("topics", "describe", "prices", "--path", path).stdout
    assert "FirstDirtyOffset: 3000" in described and "DirtyRatio: 0.00" in described
    again = run("compact", "--path", path, "--quiet")     # every compacted log
    assert again.returncode == 0 and "prices-0: nothing to clean" in again.stdout
    assert run("verify", path, "--quiet").returncode == 0


def test_compact_refuses_a_topic_that_is_not_compacted(path):
    assert run("topics", "create", "events", "--path", path).returncode == 0
    refused = run("compact", "events", "--path", path)
    assert refused.returncode == 1 and "not compacted" in refused.stderr
    missing = run("compact", "nope", "--path", path)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_compact_says_when_a_pass_was_abandoned(path, monkeypatch, capfd):
    # Every pass finds its log changed under it (storage.log_cleaner.clean_log returns None:
    # retention removed a segment it read); the report must not say "nothing to clean", and
    # the exit status says the command did not do what it was asked (1, as a failed operation).
    from streamlog import cli
    monkeypatch.setattr("streamlog.broker.cleaner.clean_log", lambda *args, **kwargs: None)
    assert cli.main(["compact", "prices", "--path", path, "--quiet"]) == 1
    out = capfd.readouterr().out
    assert "prices-0: not cleaned, 5 passes in a row abandoned: the log changed" in out
    assert "nothing to clean" not in out
