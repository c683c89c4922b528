"""Suite-wide settings: hypothesis profiles, the native-module expectation, and the
long tests first.

STREAMLOG_EXPECT_NATIVE=1 (set by .ci/run) makes the session fail at once if
the compiled module did not load, so a broken build can never pass as the
pure-Python fallback.
"""
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, derandomize=False, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(items):
    """The long system tests (marked slow) run first. Under pytest-xdist's worksteal
    scheduling (pyproject addopts) a worker that runs out takes pending tests from the
    other, but never the one it is running: a long test started last would leave one
    worker busy for minutes while the other has nothing to do."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_sessionstart(session):
    from streamlog import native
    if os.environ.get("STREAMLOG_EXPECT_NATIVE") == "1" and not native.AVAILABLE:
        raise pytest.UsageError(f"STREAMLOG_EXPECT_NATIVE=1 but the native module did not load: "
                                f"{native.UNAVAILABLE_REASON}")


@pytest.fixture
def log_dir(tmp_path):
    """A fresh partition directory path (not yet created)."""
    return str(tmp_path / "topic-0")
