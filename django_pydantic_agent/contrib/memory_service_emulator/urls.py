"""URLs of the Memory Service emulator.

Include them at ``<prefix>/memory/`` so that ``DATAROBOT_ENDPOINT=<server>/<prefix>`` reaches
them, e.g. ``path("api/v2/memory/", include(...urls))``; or use :func:`memory_service_urls`,
which also answers the bare mount path (no trailing slash) with 404 instead of letting
``APPEND_SLASH`` redirect it. Every path under the mount that matches no route (including any
route without its trailing slash) answers a JSON 404, never a redirect.
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path, re_path

from django_pydantic_agent.contrib.memory_service_emulator import views

app_name = "memory_service_emulator"

urlpatterns: list[URLPattern] = [
    path("", views.space_list, name="space-list"),
    path("new/", views.space_create, name="space-create"),
    path("<str:sp>/", views.space_detail, name="space-detail"),
    path("<str:sp>/sessions/", views.session_list, name="session-list"),
    path("<str:sp>/sessions/<str:ss>/", views.session_detail, name="session-detail"),
    path("<str:sp>/sessions/<str:ss>/events/", views.event_list, name="event-list"),
    path("<str:sp>/sessions/<str:ss>/events/batch/", views.event_batch, name="event-batch"),
    path("<str:sp>/sessions/<str:ss>/events/<int:seq>/", views.event_detail, name="event-detail"),
    # Anything else under the mount, slash or not, is a JSON 404 (and never a slash redirect).
    re_path(r"^.*$", views.not_found, name="not-found"),
]


def memory_service_urls(prefix: str = "api/v2/memory/") -> list[URLPattern | URLResolver]:
    """URL patterns mounting the emulator at ``prefix``, including a 404 for the bare prefix.

    Use as ``urlpatterns += memory_service_urls("api/v2/memory/")``. ``prefix`` must end with
    ``/`` and must not start with one.
    """
    if not prefix.endswith("/") or prefix.startswith("/"):
        raise ValueError(
            f"Emulator prefix {prefix!r} must end with '/' and not start with one, "
            "e.g. 'api/v2/memory/'."
        )
    return [
        path(prefix.rstrip("/"), views.not_found, name="memory-service-emulator-root"),
        path(prefix, include("django_pydantic_agent.contrib.memory_service_emulator.urls")),
    ]
