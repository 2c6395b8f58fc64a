"""The ASGI application ``bench.live`` serves: ``bench.site`` behind ``BodyLimitMiddleware``, as
docs/deployment.md deploys the package (uploads over their cap are refused unread)."""

from __future__ import annotations

from django.core.asgi import get_asgi_application

from django_pydantic_agent.agui.asgi import BodyLimitMiddleware

application = BodyLimitMiddleware(get_asgi_application())
