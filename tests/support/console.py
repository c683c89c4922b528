"""The installed `streamlog` console script, for tests that run it as a user would."""
import os
import shutil
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
