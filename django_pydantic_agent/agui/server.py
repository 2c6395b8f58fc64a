"""``AGUIServer``: one pydantic-ai agent served over AG-UI, mounted with ``path(..., server.urls)``.

The server holds everything that is fixed per mount (the agent, the stores, the access policy,
the limits) and builds the per-request parts (deps, instructions) for each run. Nothing about a
request is ever stored on the agent, so one agent serves every caller concurrently.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.urls import URLPattern, path
from pydantic_ai.agent import AbstractAgent

from django_pydantic_agent.agui.access import AccessPolicy, AGUIView, call_hook
from django_pydantic_agent.agui.attachments import ATTACHMENT_NOT_FOUND, AttachmentEndpoints
from django_pydantic_agent.agui.http import json_body_limit
from django_pydantic_agent.agui.run import RUN_TOO_BIG, RunEndpoint
from django_pydantic_agent.agui.threads import NOT_FOUND as THREAD_NOT_FOUND
from django_pydantic_agent.agui.threads import TITLE_TOO_BIG, ThreadEndpoints
from django_pydantic_agent.persistence import (
    AttachmentStore,
    ConversationStore,
    NullAttachmentStore,
    NullConversationStore,
    aensure_session_key,
    is_persistent,
    serves_anonymous,
)

if TYPE_CHECKING:
    from django.http import HttpRequest

    from django_pydantic_agent.agui.access import AuthorizeHook, GetUserHook, ThrottleHook

__all__ = ["AGUIServer", "AgentDeps", "UnsafeCSRFExemptionWarning"]

#: Ten mebibytes, the default ``attachment_max_bytes``.
DEFAULT_ATTACHMENT_MAX_BYTES = 10 * 1024 * 1024
#: Default and maximum ``?limit=`` of the thread list.
DEFAULT_THREAD_LIST_LIMIT = 50

# Shared defaults: the Null stores hold no state.
_NULL_CONVERSATIONS = NullConversationStore()
_NULL_ATTACHMENTS = NullAttachmentStore()


class UnsafeCSRFExemptionWarning(UserWarning):
    """An ``AGUIServer`` is CSRF-exempt by default while authenticating with cookies.

    Emitted at construction when ``csrf_exempt`` is left unstated and no ``get_user`` hook is
    given: the session cookie then authenticates cross-site requests. Silence it by choosing:
    ``csrf_exempt=False`` (enforce, for browser clients) or ``csrf_exempt=True`` (exempt, for
    clients authenticated by a header your ``get_user`` reads).
    """


@dataclass(frozen=True, kw_only=True)
class AgentDeps:
    """The default per-run deps: the authenticated user and the request.

    Tools read ``ctx.deps.user`` (server-resolved, never client-chosen). Pass ``deps_factory``
    to ``AGUIServer`` to supply your own deps type instead.
    """

    user: Any
    request: HttpRequest


def _positive(name: str, value: object, *, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name}={value!r} is not a number; pass a positive number.")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(
            f"{name}={value!r} is not allowed; pass a positive number"
            + (" (or 0 to turn it off)." if allow_zero else ".")
        )


class AGUIServer:
    """Serve a pydantic-ai agent over AG-UI, with optional thread and attachment routes.

    ``server.urls`` is an ``include()``-able triple, mounted as ``path("agent/", server.urls)``.
    It always mounts the run endpoint (``POST``); the thread routes only when
    ``conversation_store`` persists, and the attachment routes only when ``attachment_store``
    does. Every route authenticates before it looks at the method, and answers errors as
    ``{"error": "..."}`` JSON.

    Raises ``TypeError``/``ValueError`` at construction for a wrong argument, and warns with
    ``UnsafeCSRFExemptionWarning`` when CSRF is left unstated with cookie authentication.
    """

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        *,
        conversation_store: ConversationStore = _NULL_CONVERSATIONS,
        attachment_store: AttachmentStore = _NULL_ATTACHMENTS,
        require_authenticated: bool = True,
        get_user: GetUserHook | None = None,
        authorize: AuthorizeHook | None = None,
        csrf_exempt: bool | None = None,
        throttle: ThrottleHook | None = None,
        heartbeat_seconds: float = 15.0,
        forward_reasoning: bool = True,
        attachment_max_bytes: int = DEFAULT_ATTACHMENT_MAX_BYTES,
        attachment_allowed_types: Sequence[str] = (),
        deps_factory: Callable[[HttpRequest], Any] | None = None,
        instructions: Any = None,
        namespace: str = "agent",
        expose_error_messages: bool = False,
        thread_list_limit: int = DEFAULT_THREAD_LIST_LIMIT,
        allowed_file_url_schemes: Collection[str] = (),
        max_body_bytes: int | None = None,
    ) -> None:
        if not isinstance(agent, AbstractAgent):
            raise TypeError(
                f"AGUIServer needs a pydantic-ai Agent, got {agent!r}; pass an "
                "instance such as Agent('openai:gpt-4o')."
            )
        if not isinstance(conversation_store, ConversationStore):
            raise TypeError(
                f"conversation_store={conversation_store!r} does not implement "
                "ConversationStore (async load, save, delete, list, exists, rename)."
            )
        if not isinstance(attachment_store, AttachmentStore):
            raise TypeError(
                f"attachment_store={attachment_store!r} does not implement AttachmentStore "
                "(async save, open, delete)."
            )
        for name, hook in (
            ("get_user", get_user),
            ("authorize", authorize),
            ("throttle", throttle),
            ("deps_factory", deps_factory),
        ):
            if hook is not None and not callable(hook):
                raise TypeError(f"{name}={hook!r} is not callable; pass a function or None.")
        for name, flag in (
            ("require_authenticated", require_authenticated),
            ("forward_reasoning", forward_reasoning),
            ("expose_error_messages", expose_error_messages),
        ):
            if not isinstance(flag, bool):
                raise TypeError(f"{name}={flag!r} is not a bool; pass True or False.")
        if csrf_exempt is not None and not isinstance(csrf_exempt, bool):
            raise TypeError(f"csrf_exempt={csrf_exempt!r} must be True, False or None (unstated).")
        _positive("heartbeat_seconds", heartbeat_seconds, allow_zero=True)
        _positive("attachment_max_bytes", attachment_max_bytes)
        _positive("thread_list_limit", thread_list_limit)
        if max_body_bytes is not None:
            _positive("max_body_bytes", max_body_bytes)
        if isinstance(attachment_allowed_types, str):
            raise TypeError(
                f"attachment_allowed_types={attachment_allowed_types!r} is a string; pass a "
                "sequence of MIME types such as ('image/png', 'application/pdf')."
            )
        if isinstance(allowed_file_url_schemes, str) or not all(
            isinstance(scheme, str) and scheme for scheme in allowed_file_url_schemes
        ):
            raise TypeError(
                f"allowed_file_url_schemes={allowed_file_url_schemes!r} is not a collection of "
                "URL schemes; pass for example ('https',), or () to refuse client file URLs."
            )
        if not namespace or ":" in namespace:
            raise ValueError(
                f"namespace={namespace!r} is not a usable URL namespace; pass a non-empty "
                "name without ':'."
            )
        if csrf_exempt is None and get_user is None:
            warnings.warn(
                "AGUIServer: csrf_exempt is unstated, so the endpoint is CSRF-exempt while "
                "requests authenticate with the session cookie; any site could drive the "
                "agent as a logged-in user. Pass csrf_exempt=False to enforce CSRF (browser "
                "clients send the X-CSRFToken header), or csrf_exempt=True with a get_user "
                "hook for header authentication.",
                UnsafeCSRFExemptionWarning,
                stacklevel=2,
            )

        self.agent = agent
        self.conversation_store: ConversationStore = conversation_store
        self.attachment_store: AttachmentStore = attachment_store
        self.heartbeat_seconds = float(heartbeat_seconds)
        self.forward_reasoning = forward_reasoning
        self.attachment_max_bytes = int(attachment_max_bytes)
        self.attachment_allowed_types = tuple(t.lower() for t in attachment_allowed_types)
        self.deps_factory = deps_factory
        self.instructions = instructions
        self.namespace = namespace
        self.expose_error_messages = expose_error_messages
        self.thread_list_limit = int(thread_list_limit)
        self.max_body_bytes = None if max_body_bytes is None else int(max_body_bytes)
        self.allowed_file_url_schemes = frozenset(
            scheme.lower() for scheme in allowed_file_url_schemes
        )
        self.access = AccessPolicy(
            require_authenticated=require_authenticated,
            get_user=get_user,
            authorize=authorize,
            csrf_exempt=True if csrf_exempt is None else csrf_exempt,
            throttle=throttle,
        )

        threads = ThreadEndpoints(self)
        attachments = AttachmentEndpoints(self)
        self.run_view = self._view({"POST": RunEndpoint(self)}, too_big=RUN_TOO_BIG)
        self.threads_view = self._view({"GET": threads.index})
        self.thread_view = self._view(
            {"GET": threads.get, "PATCH": threads.rename, "DELETE": threads.delete},
            not_found=THREAD_NOT_FOUND,
            too_big=TITLE_TOO_BIG,
        )
        self.attachments_view = self._view(
            {"POST": attachments.upload}, check_csrf=False, capped=False
        )
        self.attachments_view.agui_upload_max_bytes = self.attachment_max_bytes
        self.attachment_view = self._view(
            {"GET": attachments.download, "DELETE": attachments.delete},
            not_found=ATTACHMENT_NOT_FOUND,
        )

    def _view(
        self,
        handlers: dict[str, Any],
        *,
        check_csrf: bool = True,
        not_found: str = "Not found.",
        capped: bool = True,
        too_big: str = "send a smaller body.",
    ) -> AGUIView:
        return AGUIView(
            server=self,
            policy=self.access,
            handlers=handlers,
            check_csrf=check_csrf,
            not_found=not_found,
            max_body_bytes=self.json_body_limit if capped else None,
            too_big=too_big,
        )

    def json_body_limit(self) -> int:
        """The body cap of this server's JSON routes now, in bytes.

        ``max_body_bytes``, or ``DATA_UPLOAD_MAX_MEMORY_SIZE`` read at request time when that is
        ``None``. Every route except the upload route refuses a longer body with 413 before
        reading it; ``BodyLimitMiddleware`` enforces the same cap before Django's ASGI handler
        spools the body.
        """
        return json_body_limit(self.max_body_bytes)

    def __repr__(self) -> str:
        return (
            f"AGUIServer({self.agent!r}, conversation_store={self.conversation_store!r}, "
            f"attachment_store={self.attachment_store!r}, namespace={self.namespace!r})"
        )

    @property
    def persists_conversations(self) -> bool:
        """Whether runs are saved and the thread routes are mounted."""
        return is_persistent(self.conversation_store)

    @property
    def accepts_attachments(self) -> bool:
        """Whether the attachment routes are mounted."""
        return is_persistent(self.attachment_store)

    @property
    def urlpatterns(self) -> list[URLPattern]:
        """The routes this server mounts (see the class docstring for which ones)."""
        patterns = [path("", self.run_view, name="run")]
        if self.persists_conversations:
            patterns += [
                path("threads/", self.threads_view, name="threads"),
                path("threads/<str:thread_id>/", self.thread_view, name="thread"),
            ]
        if self.accepts_attachments:
            patterns += [
                path("attachments/", self.attachments_view, name="attachments"),
                path("attachments/<str:attachment_id>/", self.attachment_view, name="attachment"),
            ]
        return patterns

    @property
    def urls(self) -> tuple[list[URLPattern], str, str]:
        """``(patterns, app_name, namespace)`` for ``path("agent/", server.urls)``."""
        return self.urlpatterns, self.namespace, self.namespace

    async def ensure_anonymous_session(
        self, request: HttpRequest, store: object | None = None
    ) -> None:
        """Give an anonymous caller a session before ``store`` writes something for them.

        Stores key anonymous visitors to their session and never create one themselves (a
        cookie set after a stream started would never arrive). Called only before writes
        that create data (a run, an upload), and only when ``store`` serves anonymous
        callers, so refused or merely reading visitors never cost a session row. Without
        ``SessionMiddleware`` this does nothing, and the store refuses the visitor (403).
        ``store`` defaults to the conversation store.
        """
        if store is None:
            store = self.conversation_store
        if (
            not request.user.is_authenticated
            and hasattr(request, "session")
            and serves_anonymous(store)
        ):
            await aensure_session_key(request)

    async def owns_nothing(self, request: HttpRequest, store: object) -> bool:
        """Whether ``request`` is an anonymous caller of ``store`` without a valid session.

        Such a caller can own nothing in a store that serves visitors, so reads answer empty
        (or 404) without asking the store, and without creating a session. For a store that
        refuses visitors this is ``False``: the store is asked, and its refusal is a 403.
        """
        if request.user.is_authenticated or not serves_anonymous(store):
            return False
        session = getattr(request, "session", None)
        if session is None or session.session_key is None:
            return True
        # Loading drops a cookie naming no stored session (forged or expired).
        await sync_to_async(session.keys)()
        return not session.session_key

    async def build_deps(self, request: HttpRequest) -> Any:
        """The deps for one run: ``deps_factory(request)`` (sync or async), else ``AgentDeps``.

        A sync factory runs in a worker thread, so it may use the ORM.
        """
        if self.deps_factory is None:
            return AgentDeps(user=request.user, request=request)
        return await call_hook(self.deps_factory, request)
