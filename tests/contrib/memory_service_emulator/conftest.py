"""Fixtures for the emulator tests: raw HTTP callers with the headers the real client sends."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from django.test import Client

from tests.support.emulator import no_faults_armed

SYS = "000000000000000000000000"
PREFIX = "/api/v2/memory/"
DEFAULT_STRATEGIES = [{"type": "soft_delete", "trigger": {"ttl": 63072000}}]
_NO_BODY = object()


class Api:
    """Raw requests to the emulator through Django's test client, as one bearer token.

    CSRF checks are enforced, so a passing POST proves the views are CSRF-exempt.
    """

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.client = Client(enforce_csrf_checks=True)

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        headers.update(extra or {})
        return headers

    def call(
        self,
        method: str,
        path: str,
        body: Any = _NO_BODY,
        *,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        raw: bytes | None = None,
    ) -> Any:
        data: bytes | str = b""
        if raw is not None:
            data = raw
        elif body is not _NO_BODY:
            data = json.dumps(body, separators=(",", ":"))
        return self.client.generic(
            method,
            path if path.startswith("/") else PREFIX + path,
            data=data,
            content_type="application/json",
            headers=self.headers(headers),
            query_params=query,
        )

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.call("GET", path, **kwargs)

    def post(self, path: str, body: Any = _NO_BODY, **kwargs: Any) -> Any:
        return self.call("POST", path, body, **kwargs)

    def patch(self, path: str, body: Any = _NO_BODY, **kwargs: Any) -> Any:
        return self.call("PATCH", path, body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.call("DELETE", path, **kwargs)

    # Shortcuts that assert success and return the JSON.

    def space(self, **fields: Any) -> dict[str, Any]:
        response = self.post("new/", fields)
        assert response.status_code == 201, response.content
        return dict(response.json())

    def session(self, space_id: str, **fields: Any) -> dict[str, Any]:
        body = {
            "participants": [SYS],
            "description": "//chat/",
            "lifecycleStrategies": DEFAULT_STRATEGIES,
            **fields,
        }
        response = self.post(f"{space_id}/sessions/", body)
        assert response.status_code == 201, response.content
        return dict(response.json())

    def event(
        self, space_id: str, session_id: str, content: str = "hi", **fields: Any
    ) -> dict[str, Any]:
        body = {
            "type": "message",
            "body": {"content": content},
            "emitter": {"type": "agent"},
            **fields,
        }
        response = self.post(f"{space_id}/sessions/{session_id}/events/", body)
        assert response.status_code == 201, response.content
        return dict(response.json())


@pytest.fixture(autouse=True)
def _clean_faults() -> Iterator[None]:
    with no_faults_armed():
        yield


@pytest.fixture
def api(db: None) -> Api:
    return Api("token-a")


@pytest.fixture
def other(db: None) -> Api:
    return Api("token-b")


@pytest.fixture
def anonymous(db: None) -> Api:
    return Api(None)


@pytest.fixture
def space(api: Api) -> dict[str, Any]:
    return api.space()


@pytest.fixture
def session(api: Api, space: dict[str, Any]) -> dict[str, Any]:
    return api.session(space["memorySpaceId"])


@pytest.fixture
def events_path(space: dict[str, Any], session: dict[str, Any]) -> str:
    return f"{space['memorySpaceId']}/sessions/{session['id']}/events/"
