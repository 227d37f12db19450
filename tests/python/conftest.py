"""Fixtures the Python tests share."""

import shutil
import tempfile

import pytest


@pytest.fixture
def folder():
    """A new folder under /tmp, removed after the test: short, as a socket path has at most 107 bytes."""
    path = tempfile.mkdtemp(prefix="hs-")
    yield path
    shutil.rmtree(path, ignore_errors=True)
