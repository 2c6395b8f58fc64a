"""Settings for ``tests/e2e/test_agui_client_runs.py``'s server: the example project, as
``make demo`` runs it, plus one mount whose agent crashes (``runs_urls.py``)."""

from __future__ import annotations

from example_project.settings import *  # noqa: F403 (the example's settings, unchanged)

ROOT_URLCONF = "tests.e2e.runs_urls"
