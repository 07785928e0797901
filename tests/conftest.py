import os

import pytest
import torch

from tests.helpers import torch_threads


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """Tiny models on one thread: they gain nothing from two, and OpenMP spin-waits make them up to 10x slower on a
    busy 2-core machine (the decode smoke took 8 s on two threads and 3.5 s on one under load 3). A module that
    wants it for every test says ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def pg_url():
    """A throw-away PostgreSQL server's URL for the module (skipped where none can start, except on CI)."""
    from tests.pg import PostgresUnavailable, postgres_server

    try:
        with postgres_server() as url:
            yield url
    except PostgresUnavailable as e:
        if os.environ.get("CI"):
            raise  # CI installs PostgreSQL (.ci/run): a missing server there is a failure, not a skip
        pytest.skip(str(e))
