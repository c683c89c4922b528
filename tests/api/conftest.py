"""Fixtures for the behaviour tests, which use the public API only (`import streamlog`)."""
import pytest

import streamlog


@pytest.fixture
def db(tmp_path):
    database = streamlog.open(str(tmp_path / "db"))
    yield database
    database.close()


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "db")
