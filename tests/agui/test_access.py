"""The access policy's hooks, called the ways users write them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory

from django_pydantic_agent.agui import AccessPolicy, AGUIServer
from django_pydantic_agent.agui.access import call_hook
from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.persistence import AnonymousOperationError, StoreError, StoreLimitError
from tests.agui.agents import text_agent


class AsyncCallable:
    async def __call__(self, request: Any) -> str:
        return "async object"


async def coroutine_function(request: Any) -> str:
    return "async def"


@pytest.mark.parametrize(
    ("hook", "expected"),
    [
        (lambda request: "sync", "sync"),
        (coroutine_function, "async def"),
        (AsyncCallable(), "async object"),
        (lambda request: coroutine_function(request), "async def"),
    ],
)
async def test_hooks_may_be_sync_async_or_async_callables(hook: Any, expected: str) -> None:
    assert await call_hook(hook, RequestFactory().get("/")) == expected


async def test_request_without_authentication_middleware_is_anonymous() -> None:
    server = AGUIServer(text_agent(), access=AccessPolicy(csrf_exempt=True))
    request = RequestFactory().post("/", data=b"{}", content_type="application/json")
    response = await server.run_view(request)
    assert response.status_code == 401
    assert isinstance(request.user, AnonymousUser)


async def test_throttle_returning_none_allows() -> None:
    policy = AccessPolicy(
        require_authenticated=False,
        get_user=None,
        authorize=None,
        csrf_exempt=True,
        throttle=lambda request: None,
    )
    assert await policy.check_throttle(RequestFactory().get("/")) is None


async def test_throttle_waits_at_least_one_second() -> None:
    policy = AccessPolicy(
        require_authenticated=False,
        get_user=None,
        authorize=None,
        csrf_exempt=True,
        throttle=lambda request: 0.01,
    )
    response = await policy.check_throttle(RequestFactory().get("/"))
    assert response is not None
    assert response["Retry-After"] == "1"
    assert json.loads(response.content) == {"error": "Too many requests: retry in 1 second."}


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (AnonymousOperationError("no"), 403, "This agent's attachment store does not serve"),
        (StoreLimitError("Too big: 9 bytes over max_bytes=8."), 413, "Too big"),
        (StoreError("The session ended during the request."), 409, "The session ended"),
    ],
)
def test_store_refusals_map_to_a_status_and_a_sentence(
    error: StoreError, status: int, message: str
) -> None:
    response = Refusal.of_store(error, store="attachment").response()
    assert response.status_code == status
    assert json.loads(response.content)["error"].startswith(message)
