"""Transport and auth: checklist items 1-5, 69, slash handling, 405s and the request counter."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pydantic_agent.contrib.memory_service_emulator import request_counter
from django_pydantic_agent.contrib.memory_service_emulator.urls import memory_service_urls
from tests.contrib.memory_service_emulator.conftest import Api

GUARDED = "tests.contrib.memory_service_emulator.urls"


@pytest.mark.parametrize("append_slash", [True, False])
def test_paths_without_the_slash_are_404_not_redirects(
    api: Api, space: dict[str, Any], append_slash: bool
) -> None:
    space_id = space["memorySpaceId"]
    with override_settings(APPEND_SLASH=append_slash, ROOT_URLCONF=GUARDED):
        for path in (
            "/api/v2/memory",
            "/api/v2/memory/new",
            f"/api/v2/memory/{space_id}",
            f"/api/v2/memory/{space_id}/sessions",
            f"/api/v2/memory/{space_id}/sessions/x/events/batch",
        ):
            response = api.get(path)
            assert response.status_code == 404, path
            assert response["Content-Type"] == "application/json"
            assert "slash" in response.json()["detail"]
        # Unauthenticated callers get the same 404: no route, no auth question.
        assert Api(None).get("/api/v2/memory").status_code == 404
        assert api.get("/api/v2/memory/").status_code == 200


@pytest.mark.parametrize("append_slash", [True, False])
def test_plain_include_mount_never_redirects(api: Api, append_slash: bool) -> None:
    with override_settings(APPEND_SLASH=append_slash):
        # The bare mount is outside the emulator's URLconf: Django's own 404, not a 301.
        assert api.get("/api/v2/memory").status_code == 404
        response = api.post("/api/v2/memory/new", {})
        assert response.status_code == 404
        assert response.json()["detail"]


def test_mount_helper_validates_the_prefix() -> None:
    for prefix in ("api/v2/memory", "/api/v2/memory/"):
        with pytest.raises(ValueError, match="must end with '/'"):
            memory_service_urls(prefix)


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer ", "Basic abc", "Bearer two words", "token-a"],
)
def test_missing_or_malformed_authorization_is_401(
    anonymous: Api, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path in (("GET", ""), ("POST", "new/"), ("DELETE", "x/")):
        response = anonymous.call(method, path, {}, headers=headers)
        assert response.status_code == 401
        assert response["Content-Type"] == "application/json"
        assert "Authorization" in response.json()["detail"]
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_scheme_is_case_insensitive(anonymous: Api) -> None:
    response = anonymous.get("", headers={"Authorization": "bearer token-a"})
    assert response.status_code == 200


def test_token_table_when_configured(api: Api, other: Api) -> None:
    with override_settings(MEMORY_SERVICE_EMULATOR={"TOKENS": ["token-a"]}):
        assert api.get("").status_code == 200
        refused = other.get("")
        assert refused.status_code == 401
        assert "token-b" not in refused.json()["detail"]  # tokens are never echoed


def test_misconfigured_setting_names_the_fix(api: Api) -> None:
    with (
        override_settings(MEMORY_SERVICE_EMULATOR=["TOKENS"]),
        pytest.raises(ImproperlyConfigured, match="must be a dict"),
    ):
        api.get("")


def test_success_bodies_are_json_objects(api: Api, events_path: str) -> None:
    responses = [
        api.get(""),
        api.get(events_path),
        api.post(
            events_path, {"type": "message", "body": {"content": "x"}, "emitter": {"type": "agent"}}
        ),
    ]
    for response in responses:
        assert response.status_code < 300
        assert response["Content-Type"] == "application/json"
        assert isinstance(response.json(), dict)


def test_unsupported_methods_are_405_with_allow(api: Api, space: dict[str, Any]) -> None:
    response = api.call("PUT", f"{space['memorySpaceId']}/", {})
    assert response.status_code == 405
    assert response["Allow"] == "DELETE, GET, PATCH"
    assert "PUT" in response.json()["detail"]
    assert api.get("new/").status_code == 405
    assert api.delete("").status_code == 405


def test_oversized_body_is_413_json(api: Api) -> None:
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10):
        response = api.post("new/", {"description": "x" * 50})
    assert response.status_code == 413
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in response.json()["detail"]


def test_counter_counts_by_method_and_route(api: Api, anonymous: Api) -> None:
    space_id = api.space()["memorySpaceId"]
    api.get(f"{space_id}/")
    api.get(f"{space_id}/")
    api.patch(f"{space_id}/", {"description": "x"})
    anonymous.get("")
    api.get("/api/v2/memory/nowhere")
    assert request_counter.count(method="POST", route="space-create") == 1
    assert request_counter.count(method="get", route="space-detail") == 2
    assert request_counter.count(route="space-detail") == 3
    assert request_counter.count(route="space-list") == 1
    assert request_counter.count(route="not-found") == 1
    assert request_counter.count() == 6
    assert request_counter.snapshot()[("PATCH", "space-detail")] == 1
    request_counter.reset()
    assert request_counter.count() == 0


def test_every_error_body_carries_a_usable_detail(
    api: Api, anonymous: Api, session: dict[str, Any], events_path: str
) -> None:
    space_id = session["memorySpaceId"]
    errors = [
        anonymous.get(""),  # 401
        api.get("nope/"),  # 404
        api.call("PUT", "", {}),  # 405
        api.post("new/", {"deduplicationKey": ""}),  # 422
        api.get(f"{space_id}/sessions/", query={"participants": "x"}),  # 400
        api.post(events_path, {"body": {"content": "x"}, "emitter": {"type": "user"}}),  # 400
    ]
    api.space(deduplicationKey="dup")
    errors.append(api.post("new/", {"deduplicationKey": "dup"}))  # 409
    for response in errors:
        assert 400 <= response.status_code < 500
        assert response["Content-Type"] == "application/json"
        detail = response.json()["detail"]
        if isinstance(detail, list):
            assert isinstance(detail[0]["msg"], str)
            assert detail[0]["msg"]
        else:
            assert isinstance(detail, str)
            assert detail.endswith(".")
