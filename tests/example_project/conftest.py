"""Fixtures for the example project's tests; puts ``example_project/`` on ``sys.path``.

That makes the example's modules importable here (``chat.agent``, ``example_project.urls``)
without making them part of the test suite's own settings.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings

from tests.example_project.support import EXAMPLE_ATTACHMENT_MAX_BYTES, EXAMPLE_DIR

if str(EXAMPLE_DIR) not in sys.path:
    sys.path.insert(0, str(EXAMPLE_DIR))


@pytest.fixture
def example_urls() -> Iterator[None]:
    """Serve ``example_project.urls`` with the chat app installed and no pause between words.

    The test settings lack the example's own settings, so the ones its URLconf reads are set
    here (to the example's defaults). The URLconf builds its server once, at first import.
    """
    with override_settings(
        AGENT_MODEL="",
        DEMO_WORD_DELAY=0,
        AGENT_HEARTBEAT_SECONDS=15,
        AGENT_RUN_HEARTBEAT_SECONDS=None,
        AGENT_RUN_LEASE_SECONDS=None,
        AGENT_SWEEP_SECONDS=None,
        AGENT_DRAIN_SECONDS=25,
        AGENT_ON_WORKER_LOSS=None,
        AGENT_ATTACHMENT_MAX_BYTES=EXAMPLE_ATTACHMENT_MAX_BYTES,
        AGENT_ATTACHMENT_TYPES=("text/*", "image/*", "application/pdf", "application/json"),
        AGENT_REQUESTS_PER_MINUTE=0,
        AGENT_MAX_THREADS=200,
        AGENT_MAX_FILES=200,
        AGENT_MAX_UPLOAD_BYTES=200 * 1024 * 1024,
        AGENT_STORE="default",
        AGENT_MEMORY_SERVICE_ENDPOINT="",
        AGENT_MEMORY_SERVICE_TOKEN="",
        AGENT_MEMORY_SPACE="example-project-chat",
        AGENT_WEBHOOK_URL="",
        AGENT_WEBHOOK_SECRET="",
        AGENT_WEBHOOK_ALLOW_LOOPBACK=False,
        INSTALLED_APPS=[*settings.INSTALLED_APPS, "chat"],
        ROOT_URLCONF="example_project.urls",
    ):
        yield
