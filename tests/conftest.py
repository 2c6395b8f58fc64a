"""Suite-wide fixtures, and the checks that a CI leg tested what it claims to.

Feature fixtures live in the nearest ``conftest.py``. Two environment variables, set by the
tox legs, turn a skip that would hollow out a leg into a failure:

- ``REQUIRE_POSTGRES=1``: the database must be PostgreSQL, and no test marked ``postgresql``
  nor any test whose skip reason names PostgreSQL or SQLite may skip, except a test marked
  ``sqlite`` (about SQLite only).
- ``REQUIRE_HARNESS=1``: pydantic-ai-harness must be installed and no skip reason may name
  the harness; ``REQUIRE_HARNESS=0``: it must not be installed (the leg tests an install
  without the extra).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import re
import socket
import sys
from collections.abc import AsyncIterator, Generator, Iterator
from typing import cast

import pydantic_ai.models
import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.servers import basehttp
from django.db import connections

# No test may reach a real model provider: FunctionModel and TestModel still work.
pydantic_ai.models.ALLOW_MODEL_REQUESTS = False


@pytest_asyncio.fixture
async def _async_test_teardown() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    # Durable runs outlive their request (and persist after their terminal event): let those
    # the test started end before looking for tasks left running.
    runs = sys.modules.get("django_pydantic_agent.agui.runs")
    if runs is not None:
        await asyncio.wait_for(runs.RunCoordinator.wait_for_all_runs(), timeout=30)
        # A mount's first request starts its run sweeper; the test's loop ends here, so does it.
        await runs.RunCoordinator.aclose_all()
        # A cancelled model stream's helper tasks settle a moment after its producer ends.
        await asyncio.sleep(0.05)
    # Stores run the ORM in asgiref's worker thread; close its connections so PostgreSQL can
    # drop the test database at the end of the session.
    await sync_to_async(connections.close_all)()
    # Give tasks that were cancelled or finished at the very end a turn to settle.
    for _ in range(3):
        await asyncio.sleep(0)
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    for task in leaked:
        task.cancel()
    if leaked:
        names = ", ".join(sorted(repr(t.get_coro()) for t in leaked))
        pytest.fail(f"The test left {len(leaked)} asyncio task(s) running: {names}")


@pytest.fixture(autouse=True)
def _no_leaked_tasks(request: pytest.FixtureRequest) -> None:
    """After an async test: close worker-thread connections, and fail if a task was leaked.

    Every task needs an owner that ends it.
    """
    if inspect.iscoroutinefunction(getattr(request, "function", None)):
        request.getfixturevalue("_async_test_teardown")


@pytest.fixture(autouse=True)
def _mounts_take_runs() -> Iterator[None]:
    """After each test, every mount of the process takes runs again: a lifespan shutdown (or
    a drain) a test ran would otherwise leave the suite's shared mounts refusing them."""
    yield
    from django_pydantic_agent.agui.drain import Drain

    for drain in list(Drain._instances):
        drain.end()


@pytest.fixture(scope="session", autouse=True)
def _live_server_nodelay() -> Iterator[None]:
    """Answer without Nagle delays in ``live_server``.

    Django's test server writes headers and body separately, which with delayed ACKs costs
    about 40 ms per request on loopback, ten times the request itself.
    """
    original = basehttp.WSGIRequestHandler.setup

    def setup(self: basehttp.WSGIRequestHandler) -> None:
        cast(socket.socket, self.request).setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        original(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(basehttp.WSGIRequestHandler, "setup", setup)
        yield


@pytest.fixture
def harness_names_as_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let a docs snippet import the harness's spend budgets as the docs print them,
    ``pydantic_ai_harness.spend_limits``, on a release that has them only under their old
    name, ``spend`` (0.62, the extra's floor)."""
    if importlib.util.find_spec("pydantic_ai_harness") is None:
        return
    if importlib.util.find_spec("pydantic_ai_harness.spend_limits") is None:
        old = importlib.import_module("pydantic_ai_harness.spend")
        monkeypatch.setitem(sys.modules, "pydantic_ai_harness.spend_limits", old)


# -- what a leg requires ----------------------------------------------------------------------

_POSTGRES_SKIP = re.compile(r"postgres|sqlite", re.IGNORECASE)
_HARNESS_SKIP = re.compile(r"harness", re.IGNORECASE)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _engine() -> str:
    return str(settings.DATABASES["default"]["ENGINE"]).rpartition(".")[2]


def pytest_report_header() -> str:
    return (
        f"database: {_engine()}; Django {_version('django')}; "
        f"pydantic-ai-slim {_version('pydantic-ai-slim')}; "
        f"pydantic-ai-harness {_version('pydantic-ai-harness')}"
    )


def pytest_configure(config: pytest.Config) -> None:
    problems = []
    if os.environ.get("REQUIRE_POSTGRES") == "1" and _engine() != "postgresql":
        problems.append(
            f"REQUIRE_POSTGRES=1 but the database engine is {_engine()!r}: set DATABASE_URL "
            "to a PostgreSQL server."
        )
    installed = importlib.util.find_spec("pydantic_ai_harness") is not None
    wanted = os.environ.get("REQUIRE_HARNESS")
    if wanted == "1" and not installed:
        problems.append(
            "REQUIRE_HARNESS=1 but pydantic-ai-harness is not installed: "
            'pip install -e ".[harness]" in the repository.'
        )
    if wanted == "0" and installed:
        problems.append(
            "REQUIRE_HARNESS=0 but pydantic-ai-harness is installed: this leg tests an install "
            "without the harness extra; use a fresh env."
        )
    if problems:
        raise pytest.UsageError(" ".join(problems))


#: The test modules where our code meets pydantic-ai: the run path through its AG-UI adapter, the
#: storage agent and the manager, the translation of records to and from pydantic-ai messages,
#: the history window, tools and approvals. They are marked ``boundary``; the ``latest`` leg
#: runs them on the newest pydantic-ai-slim (CONTRIBUTING.md).
BOUNDARY_MODULES: frozenset[str] = frozenset(
    {
        "tests/agui/test_guarded_storage_agent.py",
        "tests/agui/test_input.py",
        "tests/agui/test_run.py",
        "tests/agui/test_runs.py",
        "tests/agui/test_runs_approval.py",
        "tests/agui/test_streaming.py",
        "tests/agui/test_tools.py",
        "tests/chat_history/test_manager.py",
        "tests/chat_history/test_seed_agent.py",
        "tests/chat_history/test_storage_agent.py",
        "tests/chat_history/test_storage_agent_targets.py",
        "tests/chat_history/test_translate.py",
        "tests/chat_history/test_window.py",
        "tests/example_project/test_agent.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    boundary = pytest.mark.boundary
    root = config.rootpath
    for item in items:
        if item.path.relative_to(root).as_posix() in BOUNDARY_MODULES:
            item.add_marker(boundary)
    if _engine() == "postgresql":
        return
    skip = pytest.mark.skip(reason="Needs PostgreSQL (marked postgresql); set DATABASE_URL.")
    for item in items:
        if item.get_closest_marker("postgresql"):
            item.add_marker(skip)


def _forbidden_skip(reason: str, item: pytest.Item | None) -> str | None:
    """Why this skip fails the leg, or ``None`` if the leg allows it."""
    about_sqlite = bool(item and item.get_closest_marker("sqlite"))
    if (
        os.environ.get("REQUIRE_POSTGRES") == "1"
        and not about_sqlite
        and (_POSTGRES_SKIP.search(reason) or (item and item.get_closest_marker("postgresql")))
    ):
        return "REQUIRE_POSTGRES=1: a PostgreSQL-only test must run here, not skip"
    if os.environ.get("REQUIRE_HARNESS") == "1" and _HARNESS_SKIP.search(reason):
        return "REQUIRE_HARNESS=1: a harness test must run here, not skip"
    return None


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        why = _forbidden_skip(reason, item)
        if why:
            report.outcome = "failed"
            report.longrepr = f"{why}. It skipped: {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if report.skipped:
        reason = _skip_reason(report)
        why = _forbidden_skip(reason, None)
        if why:
            report.outcome = "failed"
            report.longrepr = f"{why}. {collector.nodeid} skipped: {reason}"
    return report
