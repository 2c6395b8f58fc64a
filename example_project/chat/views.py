"""The chat page."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, resolve, reverse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET


def _upload_limits() -> dict[str, Any] | None:
    """The mounted upload route's cap and types, or ``None`` when uploads are not mounted.

    Read from the server behind the route (every view ``AGUIServer.urls`` mounts carries it as
    ``agui_server``), so the page states the limits the endpoint actually enforces.
    """
    try:
        url = reverse("agent:attachments")
    except NoReverseMatch:
        return None
    server = resolve(url).func.agui_server  # type: ignore[attr-defined]
    return {
        "url": url,
        "max_bytes": server.attachment_max_bytes,
        "accept": ",".join(server.attachment_allowed_types),
    }


@require_GET
@login_required
@ensure_csrf_cookie
def chat(request: HttpRequest) -> HttpResponse:
    """Render the chat page; its script streams runs from the AG-UI endpoint."""
    return render(
        request,
        "chat/index.html",
        # The run endpoint of the AGUIServer mounted with the default namespace, "agent".
        {"agent_url": reverse("agent:run"), "uploads": _upload_limits()},
    )
