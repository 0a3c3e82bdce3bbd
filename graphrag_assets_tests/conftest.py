import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from graphrag_assets.models.probe import _ANSWERED, _PROBE_FAILED
from graphrag_assets_tests import TEST_STATE
from graphrag_assets_tests.model_server import FakeOpenAIServer
from graphrag_assets_tests.postgres import PostgresServer, binaries
from graphrag_assets_tests.workspaces import (  # noqa: F401 (tests import them from here too)
    CHROMIUM,
    CHROMIUM_FLAGS,
    INDEX_ASSETS,
    OFFLINE_MODELS,
    REPO,
    SAMPLE_CORPUS,
    TOOL_CACHE,
    Workspace,
    chat_resource,
    embedding_resource,
    index,
    materialization_metadata,
    open_instance,
    stored,
    table,
)


def require_chromium() -> None:
    """Debian's Chromium, which .ci/run installs: a failure in CI when it is missing, a skip elsewhere."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium package")
        pytest.skip(f"{CHROMIUM} is not installed here (apt-get install chromium)")


@pytest.fixture
def workspace(tmp_path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture
def model_server():
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="session")
def llm_index(tmp_path_factory):
    return index(tmp_path_factory.mktemp("llm"))


@pytest.fixture(scope="session")
def offline_index(tmp_path_factory):
    return index(tmp_path_factory.mktemp("offline"), offline=True)


@pytest.fixture
def s3(monkeypatch):
    """moto's S3 server on 127.0.0.1, reached as any S3-compatible endpoint is (AWS_ENDPOINT_URL and the other
    variables of the environment); yields a boto3 client of it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        for name, value in {
            "AWS_ACCESS_KEY_ID": "graphrag",
            "AWS_SECRET_ACCESS_KEY": "not-a-real-secret",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",  # obstore refuses plain HTTP unless told
        }.items():
            monkeypatch.setenv(name, value)
        yield boto3.client("s3", endpoint_url=endpoint)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    if binaries() is None:
        pytest.skip("PostgreSQL is not installed: bin/test installs Debian's postgresql when run as root with apt-get")
    with PostgresServer() as server:
        yield server


# bin/test's two pytest-xdist workers take whole files in collection order (--no-loadscope-reorder), so the
# longest go first: by number of tests the shared-store and webserver files (5 and 4 minutes) came last, and one
# worker ran them alone.
LONGEST_FILES_FIRST = (
    "test_front_ends.py",  # installs Open WebUI on a new machine
    "test_shared_store.py",
    "test_webserver.py",
    "test_msgraphrag.py",
    "test_server.py",
    "test_cli.py",
    "test_batch_api.py",
    "test_budget.py",
    "test_concurrency.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: place for place, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort: the rest keep their order


def pytest_sessionfinish(session):
    shutil.rmtree(TEST_STATE, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    """Tests skipped for want of a Debian package are said last, where nobody misses them."""
    for package in ("chromium", "postgresql"):
        skipped = [r for r in terminalreporter.stats.get("skipped", []) if package in str(r.longrepr).lower()]
        if skipped:
            terminalreporter.write_line(
                f"NOTE: {len(skipped)} test(s) skipped: Debian's {package} is not installed "
                "(bin/test installs it when run as root with apt-get)",
                yellow=True,
            )


@pytest.fixture(autouse=True)
def no_dagster_instance_left_entered():
    """A test that leaves an instance entered (a context built on a persistent instance and never closed) breaks
    every later Definitions load once that instance is collected; fail the test that did it, not a later one."""
    yield
    from dagster._core.storage.defs_state.base import DefsStateStorage

    assert DefsStateStorage.get() is None, "this test left a Dagster instance entered: close its context with `with`"


@pytest.fixture(autouse=True)
def endpoints_start_unknown():
    """The client remembers, per process, which endpoints answered or failed their probe lately. Each test starts its
    own server, and a later one can get an earlier one's port: without this, it would skip the probe of a hanging
    server, or refuse a healthy one, for what another test's server did."""
    _ANSWERED.clear()
    _PROBE_FAILED.clear()
    yield
