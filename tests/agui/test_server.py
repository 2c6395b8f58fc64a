"""``AGUIServer`` construction, mounting and per-run parts."""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import replace
from typing import Any

import pytest
from django.test import RequestFactory
from django.urls import path, reverse

from django_pydantic_agent.agui import (
    AccessPolicy,
    AgentDeps,
    AGUIServer,
    AGUIView,
    AttachmentOptions,
    MountOptions,
    RunOptions,
    UnsafeCSRFExemptionWarning,
)
from django_pydantic_agent.agui import server as server_module
from django_pydantic_agent.agui.inner import build_deps
from django_pydantic_agent.agui.owners import ensure_anonymous_session, owns_nothing
from django_pydantic_agent.chat_history import HistoryWindow
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
    "access",
    [
        AccessPolicy(csrf_exempt=True),
        AccessPolicy(csrf_exempt=False),
        AccessPolicy(get_user=lambda request: None),
    ],
)
def test_a_stated_csrf_choice_or_header_auth_does_not_warn(access: AccessPolicy) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AGUIServer(text_agent(), access=access)


def test_csrf_false_marks_views_enforced() -> None:
    server = AGUIServer(text_agent(), access=AccessPolicy(csrf_exempt=False))
    assert server.run_view.agui_csrf_enforced is True
    # Django's middleware is bypassed; the server runs the same check after authentication.
    assert server.run_view.csrf_exempt is True


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"agent": "openai:gpt-4o"}, TypeError, "needs a pydantic-ai Agent"),
        ({"conversation_store": object()}, TypeError, "does not implement ConversationStore"),
        ({"attachment_store": object()}, TypeError, "does not implement AttachmentStore"),
        ({"run_store": object()}, TypeError, "does not implement RunStore"),
        ({"access": {"csrf_exempt": True}}, TypeError, "access={'csrf_exempt': True} is not"),
        ({"runs": {"heartbeat_seconds": 5}}, TypeError, "is not a RunOptions; pass runs="),
        ({"attachments": 2048}, TypeError, "attachments=2048 is not an? AttachmentOptions"),
        ({"history": "all"}, TypeError, "history='all' is not a HistoryWindow"),
        ({"mount": "agent"}, TypeError, "mount='agent' is not a MountOptions"),
        ({"spend": 5}, TypeError, "spend=5 is not a pydantic-ai-harness SpendLimits"),
        ({"bogus": 1}, TypeError, "unexpected keyword argument 'bogus'"),
    ],
)
def test_bad_arguments_fail_at_construction(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    agent = kwargs.pop("agent", text_agent())
    with pytest.raises(error, match=message.replace("(", r"\(").replace("[", r"\[")):
        AGUIServer(agent, access=kwargs.pop("access", AccessPolicy(csrf_exempt=True)), **kwargs)


def test_stateless_server_mounts_only_the_run_endpoint() -> None:
    server = AGUIServer(text_agent(), access=AccessPolicy(csrf_exempt=True))
    patterns, app_name, namespace = server.urls
    assert [p.name for p in patterns] == ["run"]
    assert app_name == namespace == "agent"
    assert isinstance(server.conversation_store, NullConversationStore)
    assert isinstance(server.attachment_store, NullAttachmentStore)
    assert not server.persists_conversations
    assert not server.accepts_attachments


# The routes a server with a conversation store mounts, in order (attachments come after).
_CONVERSATION_ROUTES = [
    "run",
    "threads-import",
    "thread-export",
    "thread-fork",
    "message-feedback",
    "shares",
    "thread-share",
    "shared",
    "threads",
    "thread",
    "run-reattach",
    "run-cancel",
    "usage",
]


def test_persisting_server_mounts_every_route_with_a_back_pointer() -> None:
    store = DefaultConversationStore()
    files = DefaultAttachmentStore()
    server = AGUIServer(
        text_agent(),
        conversation_store=store,
        attachment_store=files,
        access=AccessPolicy(csrf_exempt=True),
    )
    patterns, _, _ = server.urls
    # With attachments, a share link can serve the files its snapshot quotes.
    routes = list(_CONVERSATION_ROUTES)
    routes.insert(routes.index("shared") + 1, "shared-attachment")
    assert [p.name for p in patterns] == [*routes, "attachments", "attachment"]
    for pattern in patterns:
        assert isinstance(pattern.callback, AGUIView)
        assert pattern.callback.agui_server is server
    assert server.conversation_store is store
    assert server.attachment_store is files
    assert server.attachments_view.agui_upload_max_bytes == server.attachments.max_bytes
    assert server.run_view.allowed_methods == ("POST",)
    assert "DefaultConversationStore" in repr(server)


def test_only_conversations_mounts_no_attachment_routes() -> None:
    server = AGUIServer(
        text_agent(),
        conversation_store=DefaultConversationStore(),
        access=AccessPolicy(csrf_exempt=True),
    )
    assert [p.name for p in server.urlpatterns] == _CONVERSATION_ROUTES


@pytest.mark.urls("tests.agui.urls")
def test_routes_reverse_by_namespace() -> None:
    assert reverse("scripted:run") == "/agent/"
    assert reverse("capped:threads") == "/capped/threads/"
    assert reverse("capped:thread", kwargs={"thread_id": "t1"}) == "/capped/threads/t1/"
    assert reverse("capped:attachment", args=["a1"]) == "/capped/attachments/a1/"
    assert urls.scripted.run_view.agui_server is urls.scripted


async def test_default_deps_carry_user_and_request() -> None:
    server = AGUIServer(text_agent(), access=AccessPolicy(csrf_exempt=True))
    request = RequestFactory().post("/")
    request.user = "someone"  # type: ignore[assignment]
    deps = await build_deps(server.runs.deps_factory, request, attachment_store=None)
    assert deps == AgentDeps(user="someone", request=request)


async def test_deps_factory_sync_and_async() -> None:
    request = RequestFactory().post("/")

    def sync_factory(req: Any) -> dict[str, Any]:
        return {"sync": req}

    async def async_factory(req: Any) -> dict[str, Any]:
        return {"async": req}

    sync_server = AGUIServer(
        text_agent(),
        access=AccessPolicy(csrf_exempt=True),
        runs=RunOptions(deps_factory=sync_factory),
    )
    async_server = AGUIServer(
        text_agent(),
        access=AccessPolicy(csrf_exempt=True),
        runs=RunOptions(deps_factory=async_factory),
    )
    for server, built in [(sync_server, {"sync": request}), (async_server, {"async": request})]:
        assert await build_deps(server.runs.deps_factory, request, attachment_store=None) == built


instructions_server = AGUIServer(
    echo_instructions_agent(),
    access=AccessPolicy(csrf_exempt=True),
    runs=RunOptions(instructions="Answer in French."),
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
        AGUIServer(
            text_agent(),
            access=AccessPolicy(csrf_exempt=True),
            runs=RunOptions(allowed_file_url_schemes=schemes),
        )


def test_client_file_urls_are_refused_unless_allowed() -> None:
    default = AGUIServer(text_agent(), access=AccessPolicy(csrf_exempt=True))
    assert default.runs.allowed_file_url_schemes == frozenset()
    server = AGUIServer(
        text_agent(),
        access=AccessPolicy(csrf_exempt=True),
        runs=RunOptions(allowed_file_url_schemes=["HTTPS"]),
    )
    assert server.runs.allowed_file_url_schemes == frozenset({"https"})


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
    # The conversation store refuses visitors.
    await ensure_anonymous_session(request, urls.refusing.conversation_store)
    assert request.session.session_key is None
    await ensure_anonymous_session(request, urls.anonymous.conversation_store)
    assert request.session.session_key


def test_the_options_read_back_as_the_handlers_got_them() -> None:
    def factory(request: Any) -> None:
        return None

    runs = RunOptions(
        heartbeat_seconds=3,
        stream_coalesce_seconds=0,
        forward_reasoning=False,
        expose_error_messages=True,
        instructions="Be brief.",
        deps_factory=factory,
    )
    window = HistoryWindow(max_messages=10)
    server = AGUIServer(
        text_agent(),
        access=AccessPolicy(csrf_exempt=True),
        runs=runs,
        attachments=AttachmentOptions(max_bytes=2048, allowed_types=["Image/PNG"]),
        history=window,
        mount=MountOptions(max_body_bytes=4096, thread_list_limit=7),
    )
    # Stateless: nothing to resume, so on_worker_loss is decided as "error".
    assert server.runs == replace(runs, on_worker_loss="error")
    assert server.runs.heartbeat_seconds == 3.0
    assert isinstance(server.runs.heartbeat_seconds, float)
    assert server.runs.stream_coalesce_seconds == 0.0
    assert server.history is window
    assert server.attachments == AttachmentOptions(max_bytes=2048, allowed_types=("image/png",))
    assert server.mount.body_limit() == server.run_view.agui_max_body_bytes == 4096
    assert server.mount.thread_list_limit == 7
    default = AGUIServer(text_agent(), access=AccessPolicy(csrf_exempt=True))
    assert default.runs.stream_coalesce_seconds == 0.002
    assert default.history == HistoryWindow()
    assert (default.runs.run_heartbeat_seconds, default.runs.run_lease_seconds) == (2.0, 8.0)
    assert default.runs.sweep_interval_seconds == 5.0
    # Frozen: a handler's configuration cannot change under it.
    with pytest.raises(AttributeError):
        server.runs.heartbeat_seconds = 0  # type: ignore[misc]


@pytest.mark.django_db(transaction=True)
async def test_an_anonymous_caller_without_a_session_owns_nothing() -> None:
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.sessions.backends.db import SessionStore

    request = RequestFactory().get("/")
    request.user = AnonymousUser()
    request.session = SessionStore()
    assert await owns_nothing(request, urls.anonymous.conversation_store)
    assert not await owns_nothing(request, urls.refusing.conversation_store)


def _hook(request: Any) -> None:
    return None


def _spend_limits() -> Any:
    from django_pydantic_agent._harness_spend import SpendLimits

    return SpendLimits[None](budgets=[])


_HARNESS = pytest.mark.skipif(
    importlib.util.find_spec("pydantic_ai_harness") is None,
    reason='needs the harness extra: pip install -e ".[harness]"',
)

#: Every flat keyword of the previews: a value, where it is now (argument, field; "" for the
#: argument itself), the value read back there, and the new spelling the warning names.
FLAT_KEYWORDS = [
    ("require_authenticated", False, "access", False, "AccessPolicy(require_authenticated=False)"),
    ("get_user", _hook, "access", _hook, "AccessPolicy(get_user=_hook)"),
    ("authorize", _hook, "access", _hook, "AccessPolicy(authorize=_hook)"),
    ("csrf_exempt", False, "access", False, "AccessPolicy(csrf_exempt=False)"),
    ("throttle", _hook, "access", _hook, "AccessPolicy(throttle=_hook)"),
    ("heartbeat_seconds", 5, "runs", 5.0, "RunOptions(heartbeat_seconds=5)"),
    ("stream_coalesce_seconds", 0, "runs", 0.0, "RunOptions(stream_coalesce_seconds=0)"),
    ("forward_reasoning", False, "runs", False, "RunOptions(forward_reasoning=False)"),
    ("expose_error_messages", True, "runs", True, "RunOptions(expose_error_messages=True)"),
    (
        "allowed_file_url_schemes",
        ("HTTPS",),
        "runs",
        frozenset({"https"}),
        "RunOptions(allowed_file_url_schemes=('HTTPS',))",
    ),
    ("instructions", "Be brief.", "runs", "Be brief.", "RunOptions(instructions='Be brief.')"),
    ("deps_factory", _hook, "runs", _hook, "RunOptions(deps_factory=_hook)"),
    ("on_disconnect", "cancel", "runs", "cancel", "RunOptions(on_disconnect='cancel')"),
    (
        "concurrent_runs",
        "interrupt",
        "runs",
        "interrupt",
        "RunOptions(concurrent_runs='interrupt')",
    ),
    ("run_heartbeat_seconds", 1, "runs", 1.0, "RunOptions(run_heartbeat_seconds=1)"),
    ("run_lease_seconds", 20, "runs", 20.0, "RunOptions(run_lease_seconds=20)"),
    ("sweep_interval_seconds", 0, "runs", 0.0, "RunOptions(sweep_interval_seconds=0)"),
    ("drain_seconds", 3, "runs", 3.0, "RunOptions(drain_seconds=3)"),
    ("on_worker_loss", "error", "runs", "error", "RunOptions(on_worker_loss='error')"),
    ("max_resumes", 5, "runs", 5, "RunOptions(max_resumes=5)"),
    ("attachment_max_bytes", 2048, "attachments", 2048, "AttachmentOptions(max_bytes=2048)"),
    (
        "attachment_allowed_types",
        ["Image/PNG"],
        "attachments",
        ("image/png",),
        "AttachmentOptions(allowed_types=['Image/PNG'])",
    ),
    ("namespace", "old", "mount", "old", "MountOptions(namespace='old')"),
    ("thread_list_limit", 7, "mount", 7, "MountOptions(thread_list_limit=7)"),
    ("max_body_bytes", 4096, "mount", 4096, "MountOptions(max_body_bytes=4096)"),
]
_FIELDS = {"attachment_max_bytes": "max_bytes", "attachment_allowed_types": "allowed_types"}


@pytest.mark.filterwarnings("ignore::django_pydantic_agent.agui.UnsafeCSRFExemptionWarning")
@pytest.mark.parametrize(
    ("keyword", "value", "argument", "read_back", "spelling"),
    FLAT_KEYWORDS,
    ids=[row[0] for row in FLAT_KEYWORDS],
)
def test_a_flat_keyword_still_works_and_warns_with_its_new_spelling(
    keyword: str, value: Any, argument: str, read_back: Any, spelling: str
) -> None:
    # A durable mount, so every run option applies (and "error" is not the resolved default).
    base: dict[str, Any] = {"conversation_store": DefaultConversationStore()}
    if argument != "access":
        base["access"] = AccessPolicy(csrf_exempt=True)
    with pytest.warns(DeprecationWarning, match="is deprecated; pass") as caught:
        server = AGUIServer(text_agent(), **base, **{keyword: value})
    [warning] = [w for w in caught if w.category is DeprecationWarning]
    assert str(warning.message) == f"{keyword}= is deprecated; pass {argument}={spelling}."
    assert warning.filename == __file__  # the line constructing the server
    assert getattr(getattr(server, argument), _FIELDS.get(keyword, keyword)) == read_back
    # The spelling the warning names builds the same options.
    new = AGUIServer(text_agent(), **base, **{argument: eval(spelling)})
    assert getattr(new, argument) == getattr(server, argument)


@_HARNESS
def test_spend_limits_is_spend_renamed() -> None:
    limits = _spend_limits()
    with pytest.warns(DeprecationWarning, match=r"^spend_limits= is deprecated; pass spend="):
        server = AGUIServer(
            text_agent(), access=AccessPolicy(csrf_exempt=True), spend_limits=limits
        )
    assert server.spend is not None
    assert server.spend.limits is limits
    with pytest.raises(TypeError, match="got both spend_limits= and spend="):
        AGUIServer(text_agent(), spend=limits, spend_limits=limits)


def test_the_flat_keywords_cover_every_argument_of_the_previews() -> None:
    unchanged = {"conversation_store", "attachment_store", "run_store", "history"}
    flat = {row[0] for row in FLAT_KEYWORDS} | {"spend_limits"}
    assert len(flat) + len(unchanged) == 30  # and the agent: 31 arguments
    assert flat == set(server_module._FLAT_KEYWORDS)


def test_flat_keywords_warn_once_per_call_naming_every_new_spelling() -> None:
    with pytest.warns(DeprecationWarning, match="are deprecated") as caught:
        server = AGUIServer(
            text_agent(),
            heartbeat_seconds=5,
            csrf_exempt=True,
            run_lease_seconds=20.0,
            namespace="old",
        )
    assert [str(w.message) for w in caught] == [
        "heartbeat_seconds=, csrf_exempt=, run_lease_seconds= and namespace= are deprecated; "
        "pass runs=RunOptions(heartbeat_seconds=5, run_lease_seconds=20.0), "
        "access=AccessPolicy(csrf_exempt=True), mount=MountOptions(namespace='old')."
    ]
    assert server.urls[1] == "old"
    assert server.runs.run_lease_seconds == 20.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"heartbeat_seconds": 5, "runs": RunOptions()},
            r"got both heartbeat_seconds= and runs=; pass only "
            r"runs=RunOptions\(heartbeat_seconds=\.\.\.\)",
        ),
        (
            {"attachment_max_bytes": 5, "attachments": AttachmentOptions()},
            r"got both attachment_max_bytes= and attachments=; pass only "
            r"attachments=AttachmentOptions\(max_bytes=\.\.\.\)",
        ),
        (
            {"csrf_exempt": True, "access": AccessPolicy()},
            r"got both csrf_exempt= and access=",
        ),
        ({"namespace": "x", "mount": MountOptions()}, r"got both namespace= and mount="),
    ],
)
def test_a_flat_keyword_with_the_options_object_holding_it_is_a_type_error(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        AGUIServer(text_agent(), **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"conversation_store": DefaultConversationStore()},
        {"attachment_store": DefaultAttachmentStore()},
        {"run_store": DefaultConversationStore().run_store()},
        {"history": HistoryWindow.whole()},
    ],
    ids=["conversation_store", "attachment_store", "run_store", "history"],
)
def test_the_arguments_that_kept_their_place_do_not_warn(kwargs: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        server = AGUIServer(text_agent(), access=AccessPolicy(csrf_exempt=True), **kwargs)
    [(name, value)] = kwargs.items()
    assert getattr(server, name) is value or name == "run_store"
