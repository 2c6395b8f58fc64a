"""``AGUIServer`` construction, mounting and per-run parts."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from django.test import RequestFactory
from django.urls import path, reverse

from django_pydantic_agent.agui import AgentDeps, AGUIServer, AGUIView, UnsafeCSRFExemptionWarning
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from django_pydantic_agent.persistence import NullAttachmentStore, NullConversationStore
from tests.agui import urls
from tests.agui.agents import echo_instructions_agent, text_agent
from tests.agui.conftest import logged_in, run_body, sse_events


def test_unstated_csrf_with_cookie_auth_warns() -> None:
    with pytest.warns(UnsafeCSRFExemptionWarning, match="csrf_exempt=False"):
        server = AGUIServer(text_agent())
    assert server.run_view.agui_csrf_enforced is False


@pytest.mark.parametrize(
    "kwargs",
    [{"csrf_exempt": True}, {"csrf_exempt": False}, {"get_user": lambda request: None}],
)
def test_a_stated_csrf_choice_or_header_auth_does_not_warn(kwargs: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AGUIServer(text_agent(), **kwargs)


def test_csrf_false_marks_views_enforced() -> None:
    server = AGUIServer(text_agent(), csrf_exempt=False)
    assert server.run_view.agui_csrf_enforced is True
    # Django's middleware is bypassed; the server runs the same check after authentication.
    assert server.run_view.csrf_exempt is True


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"agent": "openai:gpt-4o"}, TypeError, "needs a pydantic-ai Agent"),
        ({"conversation_store": object()}, TypeError, "does not implement ConversationStore"),
        ({"attachment_store": object()}, TypeError, "does not implement AttachmentStore"),
        ({"get_user": "myapp.auth.get_user"}, TypeError, "get_user='myapp.auth.get_user'"),
        ({"throttle": 5}, TypeError, "throttle=5 is not callable"),
        ({"csrf_exempt": "yes"}, TypeError, "csrf_exempt='yes'"),
        ({"require_authenticated": "no"}, TypeError, "require_authenticated='no'"),
        ({"forward_reasoning": None}, TypeError, "forward_reasoning=None"),
        ({"heartbeat_seconds": -1}, ValueError, "heartbeat_seconds=-1"),
        ({"heartbeat_seconds": "15"}, TypeError, "heartbeat_seconds='15'"),
        ({"stream_coalesce_seconds": -0.5}, ValueError, "stream_coalesce_seconds=-0.5"),
        ({"stream_coalesce_seconds": None}, TypeError, "stream_coalesce_seconds=None"),
        ({"attachment_max_bytes": 0}, ValueError, "attachment_max_bytes=0"),
        ({"thread_list_limit": True}, TypeError, "thread_list_limit=True"),
        ({"max_body_bytes": 0}, ValueError, "max_body_bytes=0"),
        ({"max_body_bytes": "1MB"}, TypeError, "max_body_bytes='1MB'"),
        ({"attachment_allowed_types": "image/png"}, TypeError, "is a string"),
        ({"namespace": "a:b"}, ValueError, "namespace='a:b'"),
        ({"namespace": ""}, ValueError, "namespace=''"),
    ],
)
def test_bad_arguments_fail_at_construction(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    agent = kwargs.pop("agent", text_agent())
    with pytest.raises(error, match=message.replace("(", r"\(").replace("[", r"\[")):
        AGUIServer(agent, csrf_exempt=kwargs.pop("csrf_exempt", True), **kwargs)


def test_stateless_server_mounts_only_the_run_endpoint() -> None:
    server = AGUIServer(text_agent(), csrf_exempt=True)
    patterns, app_name, namespace = server.urls
    assert [p.name for p in patterns] == ["run"]
    assert app_name == namespace == "agent"
    assert isinstance(server.conversation_store, NullConversationStore)
    assert isinstance(server.attachment_store, NullAttachmentStore)
    assert not server.persists_conversations
    assert not server.accepts_attachments


def test_persisting_server_mounts_every_route_with_a_back_pointer() -> None:
    store = DefaultConversationStore()
    files = DefaultAttachmentStore()
    server = AGUIServer(
        text_agent(), conversation_store=store, attachment_store=files, csrf_exempt=True
    )
    patterns, _, _ = server.urls
    assert [p.name for p in patterns] == [
        "run",
        "threads-import",
        "thread-export",
        "thread-fork",
        "threads",
        "thread",
        "run-reattach",
        "run-cancel",
        "usage",
        "attachments",
        "attachment",
    ]
    for pattern in patterns:
        assert isinstance(pattern.callback, AGUIView)
        assert pattern.callback.agui_server is server
    assert server.conversation_store is store
    assert server.attachment_store is files
    assert server.attachments_view.agui_upload_max_bytes == server.attachment_max_bytes
    assert server.run_view.allowed_methods == ("POST",)
    assert "DefaultConversationStore" in repr(server)


def test_only_conversations_mounts_no_attachment_routes() -> None:
    server = AGUIServer(
        text_agent(), conversation_store=DefaultConversationStore(), csrf_exempt=True
    )
    assert [p.name for p in server.urlpatterns] == [
        "run",
        "threads-import",
        "thread-export",
        "thread-fork",
        "threads",
        "thread",
        "run-reattach",
        "run-cancel",
        "usage",
    ]


@pytest.mark.urls("tests.agui.urls")
def test_routes_reverse_by_namespace() -> None:
    assert reverse("scripted:run") == "/agent/"
    assert reverse("capped:threads") == "/capped/threads/"
    assert reverse("capped:thread", kwargs={"thread_id": "t1"}) == "/capped/threads/t1/"
    assert reverse("capped:attachment", args=["a1"]) == "/capped/attachments/a1/"
    assert urls.scripted.run_view.agui_server is urls.scripted


async def test_default_deps_carry_user_and_request() -> None:
    server = AGUIServer(text_agent(), csrf_exempt=True)
    request = RequestFactory().post("/")
    request.user = "someone"  # type: ignore[assignment]
    deps = await server.build_deps(request)
    assert deps == AgentDeps(user="someone", request=request)


async def test_deps_factory_sync_and_async() -> None:
    request = RequestFactory().post("/")

    def sync_factory(req: Any) -> dict[str, Any]:
        return {"sync": req}

    async def async_factory(req: Any) -> dict[str, Any]:
        return {"async": req}

    sync_server = AGUIServer(text_agent(), csrf_exempt=True, deps_factory=sync_factory)
    async_server = AGUIServer(text_agent(), csrf_exempt=True, deps_factory=async_factory)
    assert await sync_server.build_deps(request) == {"sync": request}
    assert await async_server.build_deps(request) == {"async": request}


instructions_server = AGUIServer(
    echo_instructions_agent(), csrf_exempt=True, instructions="Answer in French."
)
# This module doubles as a URLconf: the shared routes plus one instructed server.
urlpatterns = [*urls.urlpatterns, path("instructed/", instructions_server.urls)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.agui.test_server")
async def test_instructions_are_passed_per_run(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await http.post("/instructed/", json=run_body())
    text = "".join(
        e["delta"] for e in sse_events(response.text) if e["type"] == "TEXT_MESSAGE_CONTENT"
    )
    assert text == "instructions=Answer in French."


@pytest.mark.parametrize("schemes", ["https", ("https", ""), (1,)])
def test_allowed_file_url_schemes_must_be_a_collection_of_schemes(schemes: Any) -> None:
    with pytest.raises(TypeError, match="allowed_file_url_schemes"):
        AGUIServer(text_agent(), csrf_exempt=True, allowed_file_url_schemes=schemes)


def test_client_file_urls_are_refused_unless_allowed() -> None:
    assert AGUIServer(text_agent(), csrf_exempt=True).allowed_file_url_schemes == frozenset()
    server = AGUIServer(text_agent(), csrf_exempt=True, allowed_file_url_schemes=["HTTPS"])
    assert server.allowed_file_url_schemes == frozenset({"https"})


def test_which_stores_serve_anonymous_callers() -> None:
    from django_pydantic_agent.agui.owners import serves_anonymous
    from django_pydantic_agent.persistence import (
        DjangoSessionConversationStore,
        ScopedConversationStore,
    )

    assert not serves_anonymous(DefaultConversationStore())
    assert serves_anonymous(DefaultConversationStore(allow_anonymous=True))
    assert not serves_anonymous(ScopedConversationStore(DefaultConversationStore(), scope="a"))
    assert serves_anonymous(
        ScopedConversationStore(DefaultConversationStore(allow_anonymous=True), scope="a")
    )
    assert serves_anonymous(DjangoSessionConversationStore())
    assert not serves_anonymous(DefaultAttachmentStore())


@pytest.mark.django_db(transaction=True)
async def test_the_session_is_created_only_for_a_store_serving_visitors() -> None:
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.sessions.backends.db import SessionStore

    request = RequestFactory().post("/")
    request.user = AnonymousUser()
    request.session = SessionStore()
    await urls.refusing.ensure_anonymous_session(request)  # the conversation store refuses
    assert request.session.session_key is None
    await urls.anonymous.ensure_anonymous_session(request)
    assert request.session.session_key


def test_the_arguments_read_back_from_the_options_the_handlers_got() -> None:
    def factory(request: Any) -> None:
        return None

    server = AGUIServer(
        text_agent(),
        csrf_exempt=True,
        heartbeat_seconds=3,
        stream_coalesce_seconds=0,
        forward_reasoning=False,
        expose_error_messages=True,
        instructions="Be brief.",
        deps_factory=factory,
        attachment_max_bytes=2048,
        attachment_allowed_types=["Image/PNG"],
        max_body_bytes=4096,
        thread_list_limit=7,
    )
    assert server.heartbeat_seconds == 3.0
    assert isinstance(server.heartbeat_seconds, float)
    assert server.stream_coalesce_seconds == 0.0
    assert AGUIServer(text_agent(), csrf_exempt=True).stream_coalesce_seconds == 0.002
    assert server.forward_reasoning is False
    assert server.expose_error_messages is True
    assert server.instructions == "Be brief."
    assert server.deps_factory is factory
    assert server.attachment_max_bytes == server.attachment_options.max_bytes == 2048
    assert server.attachment_allowed_types == ("image/png",)
    assert server.max_body_bytes == 4096
    assert server.json_body_limit() == 4096
    assert server.run_view.agui_max_body_bytes == 4096
    assert server.thread_list_limit == 7
    # Frozen: a handler's configuration cannot change under it.
    with pytest.raises(AttributeError):
        server.run_options.heartbeat_seconds = 0  # type: ignore[misc]


@pytest.mark.django_db(transaction=True)
async def test_an_anonymous_caller_without_a_session_owns_nothing() -> None:
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.sessions.backends.db import SessionStore

    request = RequestFactory().get("/")
    request.user = AnonymousUser()
    request.session = SessionStore()
    assert await urls.anonymous.owns_nothing(request, urls.anonymous.conversation_store)
    assert not await urls.refusing.owns_nothing(request, urls.refusing.conversation_store)
