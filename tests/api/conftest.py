"""Fixtures for the behaviour tests, which use the public API only (`import streamlog`)."""
import threading

import pytest

import streamlog
from streamlog.broker.delayed_fetch import DelayedFetch


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    yield database
    database.close()


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "db")


@pytest.fixture
def completions(monkeypatch):
    """Names of the threads that completed a DelayedFetch (ran its on_complete), in order."""
    names = []
    real_on_complete = DelayedFetch.on_complete

    def on_complete(self):
        names.append(threading.current_thread().name)
        real_on_complete(self)

    monkeypatch.setattr(DelayedFetch, "on_complete", on_complete)
    return names
