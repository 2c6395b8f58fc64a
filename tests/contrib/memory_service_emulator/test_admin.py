"""The read-only admin pages show what clients stored."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.test import Client

from tests.contrib.memory_service_emulator.conftest import Api


def test_admin_lists_rows_and_refuses_writes(
    api: Api, session: dict[str, Any], events_path: str
) -> None:
    api.event(session["memorySpaceId"], session["id"], content="stored")
    admin = User.objects.create_superuser("root", "root@example.com", "pw")
    browser = Client()
    browser.force_login(admin)
    base = "/admin/django_pydantic_agent_memory_emulator"
    for model, needle in (
        ("emulatedmemoryspace", session["memorySpaceId"]),
        ("emulatedsession", session["id"]),
        ("emulatedevent", "message"),
    ):
        page = browser.get(f"{base}/{model}/")
        assert page.status_code == 200
        assert needle in page.content.decode()
        assert browser.get(f"{base}/{model}/add/").status_code == 403
    search = browser.get(f"{base}/emulatedsession/", {"q": session["id"]})
    assert session["id"] in search.content.decode()


def test_admin_search_tolerates_free_text(api: Api, session: dict[str, Any]) -> None:
    admin = User.objects.create_superuser("root", "root@example.com", "pw")
    browser = Client()
    browser.force_login(admin)
    base = "/admin/django_pydantic_agent_memory_emulator"
    for model in ("emulatedmemoryspace", "emulatedsession", "emulatedevent"):
        assert browser.get(f"{base}/{model}/", {"q": "not a uuid"}).status_code == 200
