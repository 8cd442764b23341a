"""Fixtures: the idemd servers tests/clients.sh started.

IDEMD_URL, IDEMD_API_KEY (tenant acme), IDEMD_API_KEY_2 (tenant globex)
and IDEMD_LIMITED_URL (the same database, with an issue rate of 1/s and a
1 MiB in-flight body budget) come from tests/clients.sh.
"""

import os
import uuid

import pytest

import idemd

URL = os.environ.get("IDEMD_URL", "")
LIMITED_URL = os.environ.get("IDEMD_LIMITED_URL", "")
API_KEY = os.environ.get("IDEMD_API_KEY", "")
API_KEY_2 = os.environ.get("IDEMD_API_KEY_2", "")

POLICY = dict(token_ttl_seconds=3600, retention_seconds=86400, lease_seconds=30)


def pytest_collection_modifyitems(config, items):
    if not URL or not API_KEY:
        skip = pytest.mark.skip(reason="IDEMD_URL and IDEMD_API_KEY are not set (run tests/clients.sh)")
        for item in items:
            item.add_marker(skip)


def pytest_report_header(config):
    return "idemd package: %s" % os.path.dirname(idemd.__file__)


def uniq(prefix):
    return "%s.%s" % (prefix, uuid.uuid4().hex[:10])


@pytest.fixture
def client():
    return idemd.Client(URL, API_KEY, retry=idemd.Retry(attempts=3, base_delay=0.05))


@pytest.fixture
def aclient():
    return idemd.AsyncClient(URL, API_KEY, retry=idemd.Retry(attempts=3, base_delay=0.05))


@pytest.fixture
def op(client):
    name = uniq("op")
    client.put_operation(name, **POLICY)
    return name


@pytest.fixture
def key():
    return uniq("k")
