"""The `streamlog` command as a user runs it: the installed console script, and its output
on a terminal."""
import os
import pty
import shutil
import subprocess
import sys

import pytest


def streamlog_command():
    """Path of the `streamlog` script; the one beside this interpreter (its venv) first.

    Skips the calling test when the package was not installed with its console script.
    """
    search = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    found = shutil.which("streamlog", path=search)
    if found is None:
        pytest.skip("the `streamlog` console script is not installed beside "
                    f"{sys.executable} nor on PATH: pip install -e . creates it")
    return found


def on_a_terminal(*args, stdin=b""):
    """stderr of `streamlog ARGS` run with stderr on a pseudo-terminal."""
    main, terminal = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "streamlog.cli", *args], input=stdin,
                              stdout=subprocess.PIPE, stderr=terminal, timeout=120)
        os.close(terminal)
        terminal = None
        out = b""
        while True:
            try:
                chunk = os.read(main, 1 << 16)
            except OSError:   # EIO: the terminal side is closed and drained
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(main)
        if terminal is not None:
            os.close(terminal)
    assert done.returncode == 0
    return out.decode()
