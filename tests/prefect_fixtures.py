"""Prefect test fixtures of the orchestration area, loaded with `pytest_plugins = ["prefect_fixtures"]`.

Importing this module points PREFECT_HOME at a fresh temporary folder BEFORE prefect is imported
(prefect reads its settings at import), so tests never touch ~/.prefect. Registered as a plugin,
the session fixture exists once however many test modules ask for it: one `prefect_test_harness`
(a temporary SQLite API server, ~10-20 s to start) per test session.
"""

from __future__ import annotations

import os
import tempfile

if "prefect" not in __import__("sys").modules:
    _HOME = tempfile.mkdtemp(prefix="prefect-home-")
    os.environ["PREFECT_HOME"] = _HOME
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # Result files of flows that run outside a workspace (the harness's own) stay in the temp home.
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", os.path.join(_HOME, "storage"))

import pytest


@pytest.fixture(scope="session")
def prefect_harness():
    """A temporary Prefect API for the whole session (flows, tasks, artifacts, concurrency)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture()
def prefect_client(prefect_harness):
    """A synchronous client of the harness API, for reading back states and artifacts."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        yield client
