"""The installed `streamlog` command (the console script), not `python -m streamlog.cli`."""
import subprocess

import pytest

from support.console import streamlog_command


def run(*args):
    return subprocess.run([streamlog_command(), *args], capture_output=True, text=True,
                          timeout=120)


def test_the_installed_command_runs_and_lists_every_command():
    result = run("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: streamlog")
    for command in ("topics", "produce", "consume", "groups", "dump", "verify"):
        assert command in result.stdout


@pytest.mark.parametrize("args", [("topics", "create"), ("produce",), ("consume",),
                                  ("groups", "reset-offsets"), ("dump",), ("verify",)],
                         ids=" ".join)
def test_help_of_a_subcommand_exits_0_and_shows_path(args):
    result = run(*args, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: streamlog {args[0]}") and "--path" in result.stdout


def test_bad_usage_of_the_installed_command_exits_2():
    result = run("topics", "create")  # no --path
    assert result.returncode == 2 and "--path" in result.stderr


def test_the_installed_command_says_the_installed_version():
    # Every command-line tool answers --version; this one says the version pip installed
    # (pyproject.toml), which streamlog.__version__ must match.
    from importlib.metadata import version

    import streamlog
    result = run("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"streamlog {version('streamlog')}\n"
    assert streamlog.__version__ == version("streamlog")
