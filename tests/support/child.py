"""Python code run in a child process, for scenarios pytest must survive or cannot play itself.

run_py(code, *args): the child's CompletedProcess (text, stdout and stderr captured). A child
killed by a signal has returncode -signal.

honour_permissions=True makes file permission bits bind the child even when the tests run as
root (CI does): the child starts without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, the two
capabilities that let root read and write past them. Where the process may not drop them, the
calling test is skipped with the reason.
"""
import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def _drop_permission_override():
    # Dropped from the bounding set before exec: the interpreter the child execs, though
    # uid 0, starts without them.
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            os._exit(77)


def run_py(code, *args, honour_permissions=False, timeout=120):
    preexec = None
    if honour_permissions and os.geteuid() == 0:
        if not sys.platform.startswith("linux"):
            pytest.skip("root ignores permission bits, and only Linux lets a child drop that")
        preexec = _drop_permission_override
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                            capture_output=True, text=True, timeout=timeout,
                            preexec_fn=preexec)
    if preexec is not None and result.returncode == 77:
        pytest.skip("this process may not drop CAP_DAC_OVERRIDE (no CAP_SETPCAP)")
    return result
