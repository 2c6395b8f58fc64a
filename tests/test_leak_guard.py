"""The suite's own guard: an async test that leaves a task running must fail."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

pytest_plugins = ["pytester"]


def test_a_leaked_task_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "from tests.conftest import _async_test_teardown, _no_leaked_tasks  # noqa: F401\n"
    )
    pytester.makepyfile(
        textwrap.dedent(
            """
            import asyncio

            async def test_leaks():
                asyncio.get_running_loop().create_task(asyncio.sleep(60))

            async def test_cleans_up():
                task = asyncio.get_running_loop().create_task(asyncio.sleep(60))
                task.cancel()
            """
        )
    )
    result = pytester.runpytest_inprocess(
        "-p",
        "no:cacheprovider",
        "-o",
        "asyncio_mode=auto",
        "-p",
        "no:django",
        "-o",
        "addopts=",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
    )
    # The leaking test body passes; its teardown is the error that fails the run.
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*left 1 asyncio task(s) running*"])


async def test_a_finished_task_is_not_a_leak() -> None:
    await asyncio.get_running_loop().create_task(asyncio.sleep(0))
