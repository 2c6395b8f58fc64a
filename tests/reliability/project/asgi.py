"""``uvicorn tests.reliability.project.asgi:application`` (from the repository root)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.reliability.project.settings")

application = get_asgi_application()
