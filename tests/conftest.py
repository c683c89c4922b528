"""Suite-wide settings: hypothesis profiles and the native-module expectation.

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


def pytest_sessionstart(session):
    from streamlog import native
    if os.environ.get("STREAMLOG_EXPECT_NATIVE") == "1" and not native.AVAILABLE:
        raise pytest.UsageError(f"STREAMLOG_EXPECT_NATIVE=1 but the native module did not load: "
                                f"{native.UNAVAILABLE_REASON}")


@pytest.fixture
def log_dir(tmp_path):
    """A fresh partition directory path (not yet created)."""
    return str(tmp_path / "topic-0")
