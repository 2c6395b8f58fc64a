"""``uvicorn tests.reliability.project.asgi:application`` (from the repository root).

Django's application behind ``BodyLimitMiddleware``, as docs/getting-started.md deploys it.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.reliability.project.settings")

from django_pydantic_agent.agui import BodyLimitMiddleware

application = BodyLimitMiddleware(get_asgi_application())
