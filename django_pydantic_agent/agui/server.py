"""``AGUIServer``: one pydantic-ai agent served over AG-UI, mounted with ``path(..., server.urls)``.

The server only composes. Its constructor checks every argument, builds the frozen options of
``options.py``, and constructs each handler with just what it uses; the handlers never see the
server. Nothing about a request is ever stored on the agent or the server, so one agent serves
every caller concurrently.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from django.urls import URLPattern, path
from pydantic_ai.agent import AbstractAgent

from django_pydantic_agent.agui.access import AccessPolicy
from django_pydantic_agent.agui.attachments import ATTACHMENT_NOT_FOUND, AttachmentEndpoints
from django_pydantic_agent.agui.inner import AgentDeps, build_deps
from django_pydantic_agent.agui.options import (
    DEFAULT_ATTACHMENT_MAX_BYTES,
    DEFAULT_THREAD_LIST_LIMIT,
    AttachmentOptions,
    BodyLimit,
    ConcurrentRuns,
    OnDisconnect,
    RunOptions,
    check_callable,
    check_choice,
    check_flag,
    check_positive,
    check_run_lease,
    file_url_schemes,
    mime_types,
)
from django_pydantic_agent.agui.owners import ensure_anonymous_session, owns_nothing
from django_pydantic_agent.agui.run import RUN_TOO_BIG, RunEndpoint
from django_pydantic_agent.agui.runs import (
    DEFAULT_SWEEP_INTERVAL_SECONDS,
    RUN_NOT_FOUND,
    RunCoordinator,
    RunEndpoints,
)
from django_pydantic_agent.agui.sse import DEFAULT_STREAM_COALESCE_SECONDS
from django_pydantic_agent.agui.threads import NOT_FOUND as THREAD_NOT_FOUND
from django_pydantic_agent.agui.threads import TITLE_TOO_BIG, ThreadEndpoints
from django_pydantic_agent.agui.views import AGUIView, Handler
from django_pydantic_agent.persistence import (
    AttachmentStore,
    ConversationStore,
    NullAttachmentStore,
    NullConversationStore,
    is_persistent,
    own_run_store,
)
from django_pydantic_agent.persistence.runs import (
    DEFAULT_LEASE_SECONDS,
    CacheRunStore,
    RunRecord,
    RunStore,
)

if TYPE_CHECKING:
    from django.http import HttpRequest

    from django_pydantic_agent.agui.access import AuthorizeHook, GetUserHook, ThrottleHook

__all__ = ["AGUIServer", "AgentDeps", "UnsafeCSRFExemptionWarning"]

# Shared defaults: the Null stores hold no state.
_NULL_CONVERSATIONS = NullConversationStore()
_NULL_ATTACHMENTS = NullAttachmentStore()


def default_run_store(
    store: ConversationStore, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
) -> RunStore:
    """Where runs on ``store`` are recorded: its own ``run_store()`` (looked up through
    wrappers), else ``CacheRunStore`` in Django's default cache (with ``lease_seconds``)."""
    found = own_run_store(store)
    return found if found is not None else CacheRunStore(lease=lease_seconds)


class UnsafeCSRFExemptionWarning(UserWarning):
    """An ``AGUIServer`` is CSRF-exempt by default while authenticating with cookies.

    Emitted at construction when ``csrf_exempt`` is left unstated and no ``get_user`` hook is
    given: the session cookie then authenticates cross-site requests. Silence it by choosing:
    ``csrf_exempt=False`` (enforce, for browser clients) or ``csrf_exempt=True`` (exempt, for
    clients authenticated by a header your ``get_user`` reads).
    """


class AGUIServer:
    """Serve a pydantic-ai agent over AG-UI, with optional thread and attachment routes.

    ``server.urls`` is an ``include()``-able triple, mounted as ``path("agent/", server.urls)``.
    It always mounts the run endpoint (``POST``); the thread routes only when
    ``conversation_store`` persists, and the attachment routes only when ``attachment_store``
    does. Every route authenticates before it looks at the method, and answers errors as
    ``{"error": "..."}`` JSON.

    Raises ``TypeError``/``ValueError`` at construction for a wrong argument, and warns with
    ``UnsafeCSRFExemptionWarning`` when CSRF is left unstated with cookie authentication.

    What the handlers were built with is readable, frozen: ``access`` (``AccessPolicy``),
    ``run_options`` (``RunOptions``), ``attachment_options`` (``AttachmentOptions``) and
    ``body_limit`` (``BodyLimit``); the individual arguments read back as properties.
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
        stream_coalesce_seconds: float = DEFAULT_STREAM_COALESCE_SECONDS,
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
        on_disconnect: OnDisconnect = "continue",
        concurrent_runs: ConcurrentRuns = "reject",
        run_store: RunStore | None = None,
        run_heartbeat_seconds: float = 10.0,
        run_lease_seconds: float = DEFAULT_LEASE_SECONDS,
        sweep_interval_seconds: float = DEFAULT_SWEEP_INTERVAL_SECONDS,
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
            check_callable(name, hook)
        for name, flag in (
            ("require_authenticated", require_authenticated),
            ("forward_reasoning", forward_reasoning),
            ("expose_error_messages", expose_error_messages),
        ):
            check_flag(name, flag)
        if csrf_exempt is not None and not isinstance(csrf_exempt, bool):
            raise TypeError(f"csrf_exempt={csrf_exempt!r} must be True, False or None (unstated).")
        check_positive("heartbeat_seconds", heartbeat_seconds, allow_zero=True)
        check_positive("stream_coalesce_seconds", stream_coalesce_seconds, allow_zero=True)
        check_positive("attachment_max_bytes", attachment_max_bytes)
        check_positive("thread_list_limit", thread_list_limit)
        if max_body_bytes is not None:
            check_positive("max_body_bytes", max_body_bytes)
        check_positive("run_heartbeat_seconds", run_heartbeat_seconds)
        check_positive("run_lease_seconds", run_lease_seconds)
        check_run_lease(run_lease_seconds, run_heartbeat_seconds)
        check_positive("sweep_interval_seconds", sweep_interval_seconds, allow_zero=True)
        check_choice("on_disconnect", on_disconnect, ("continue", "cancel"))
        check_choice("concurrent_runs", concurrent_runs, ("reject", "interrupt"))
        if run_store is not None and not isinstance(run_store, RunStore):
            raise TypeError(
                f"run_store={run_store!r} does not implement RunStore (async start, heartbeat, "
                "finish, get, active_run_for_thread, sweep)."
            )
        allowed_types = mime_types(attachment_allowed_types)
        schemes = file_url_schemes(allowed_file_url_schemes)
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
        self.namespace = namespace
        self.thread_list_limit = int(thread_list_limit)
        self.access = AccessPolicy(
            require_authenticated=require_authenticated,
            get_user=get_user,
            authorize=authorize,
            csrf_exempt=True if csrf_exempt is None else csrf_exempt,
            throttle=throttle,
        )
        self.body_limit = BodyLimit(
            max_body_bytes=None if max_body_bytes is None else int(max_body_bytes)
        )
        self.run_options = RunOptions(
            heartbeat_seconds=float(heartbeat_seconds),
            stream_coalesce_seconds=float(stream_coalesce_seconds),
            forward_reasoning=forward_reasoning,
            expose_error_messages=expose_error_messages,
            allowed_file_url_schemes=schemes,
            instructions=instructions,
            deps_factory=deps_factory,
            on_disconnect=on_disconnect,
            concurrent_runs=concurrent_runs,
            run_heartbeat_seconds=float(run_heartbeat_seconds),
            run_lease_seconds=float(run_lease_seconds),
            sweep_interval_seconds=float(sweep_interval_seconds),
        )
        self.run_store: RunStore | None = None
        if is_persistent(conversation_store):
            self.run_store = (
                run_store
                if run_store is not None
                else default_run_store(conversation_store, lease_seconds=run_lease_seconds)
            )
        self.attachment_options = AttachmentOptions(
            max_bytes=int(attachment_max_bytes), allowed_types=allowed_types
        )

        run = RunEndpoint(
            agent,
            conversation_store,
            access=self.access,
            body_limit=self.body_limit,
            options=self.run_options,
            run_store=self.run_store,
            attachment_store=attachment_store if is_persistent(attachment_store) else None,
        )
        self.run_endpoint = run
        self.coordinator: RunCoordinator | None = run.coordinator
        threads = ThreadEndpoints(
            conversation_store,
            list_limit=self.thread_list_limit,
            body_limit=self.body_limit,
            active_run=run.active_run,
            settle=run.settle,
        )
        attachments = AttachmentEndpoints(
            attachment_store, access=self.access, options=self.attachment_options
        )
        self.run_view = self._view({"POST": run}, too_big=RUN_TOO_BIG)
        self.threads_view = self._view({"GET": threads.index})
        self.thread_view = self._view(
            {"GET": threads.get, "PATCH": threads.rename, "DELETE": threads.delete},
            not_found=THREAD_NOT_FOUND,
            too_big=TITLE_TOO_BIG,
        )
        if run.coordinator is not None:
            runs = RunEndpoints(
                run.coordinator,
                conversation_store,
                repositories=run.repositories,
                heartbeat_seconds=self.run_options.heartbeat_seconds,
                coalesce_seconds=self.run_options.stream_coalesce_seconds,
            )
            self.run_reattach_view = self._view({"GET": runs.reattach}, not_found=RUN_NOT_FOUND)
            self.run_cancel_view = self._view({"POST": runs.cancel}, not_found=RUN_NOT_FOUND)
        self.attachments_view = self._view(
            {"POST": attachments.upload}, check_csrf=False, capped=False
        )
        self.attachments_view.agui_upload_max_bytes = self.attachment_options.max_bytes
        self.attachment_view = self._view(
            {"GET": attachments.download, "DELETE": attachments.delete},
            not_found=ATTACHMENT_NOT_FOUND,
        )

    def _view(
        self,
        handlers: dict[str, Handler],
        *,
        check_csrf: bool = True,
        not_found: str = "Not found.",
        capped: bool = True,
        too_big: str = "send a smaller body.",
    ) -> AGUIView:
        view = AGUIView(
            policy=self.access,
            handlers=handlers,
            check_csrf=check_csrf,
            not_found=not_found,
            max_body_bytes=self.body_limit if capped else None,
            too_big=too_big,
            on_request=None if self.coordinator is None else self.coordinator.start_sweeper,
        )
        # A marker for discovery (system checks, pages stating the limits); the view never
        # reads it.
        view.agui_server = self
        return view

    # The arguments as given, read from the options the handlers were built with.

    @property
    def heartbeat_seconds(self) -> float:
        """Seconds of silence before an SSE heartbeat; ``0.0`` when turned off."""
        return self.run_options.heartbeat_seconds

    @property
    def stream_coalesce_seconds(self) -> float:
        """The shortest interval between two writes of a busy stream; ``0.0`` when off."""
        return self.run_options.stream_coalesce_seconds

    @property
    def run_heartbeat_seconds(self) -> float:
        """Seconds between a durable run's heartbeats (its lease renewal)."""
        return self.run_options.run_heartbeat_seconds

    @property
    def run_lease_seconds(self) -> float:
        """Seconds without a heartbeat after which a run is swept as ``errored``."""
        return self.run_options.run_lease_seconds

    @property
    def sweep_interval_seconds(self) -> float:
        """Seconds between sweeps of stale runs; ``0.0`` when the server never sweeps."""
        return self.run_options.sweep_interval_seconds

    # The sweeper, for projects that start it themselves (ASGI lifespan, a management loop).

    def start_sweeper(self) -> bool:
        """Start this mount's periodic sweep of stale runs now; whether it is running.

        The mount's first request starts it anyway; call this from an ASGI lifespan
        start-up (inside the running event loop) to sweep before any request arrives.
        ``False`` without durable runs, with ``sweep_interval_seconds=0``, or outside an
        event loop.
        """
        return self.coordinator is not None and self.coordinator.start_sweeper()

    async def sweep(self) -> list[RunRecord] | None:
        """Sweep stale runs once now (see ``RunCoordinator.sweep``): the run records swept,
        ``None`` when another worker swept within the interval or runs are not durable."""
        return None if self.coordinator is None else await self.coordinator.sweep()

    async def aclose(self) -> None:
        """Stop the sweeper and wait for it (ASGI lifespan shutdown); runs are not touched."""
        if self.coordinator is not None:
            await self.coordinator.aclose()

    @property
    def forward_reasoning(self) -> bool:
        """Whether ``REASONING_*`` events reach the client."""
        return self.run_options.forward_reasoning

    @property
    def expose_error_messages(self) -> bool:
        """Whether ``RUN_ERROR`` carries the exception's text."""
        return self.run_options.expose_error_messages

    @property
    def allowed_file_url_schemes(self) -> frozenset[str]:
        """The lower-cased URL schemes a client may name in a file part."""
        return self.run_options.allowed_file_url_schemes

    @property
    def instructions(self) -> Any:
        """The extra instructions passed to every run."""
        return self.run_options.instructions

    @property
    def deps_factory(self) -> Callable[[HttpRequest], Any] | None:
        """The ``deps_factory`` hook, or ``None`` for ``AgentDeps``."""
        return self.run_options.deps_factory

    @property
    def attachment_max_bytes(self) -> int:
        """The largest upload accepted, in bytes."""
        return self.attachment_options.max_bytes

    @property
    def attachment_allowed_types(self) -> tuple[str, ...]:
        """The lower-cased MIME types accepted for uploads; ``()`` accepts any."""
        return self.attachment_options.allowed_types

    @property
    def max_body_bytes(self) -> int | None:
        """The JSON routes' body cap as given, or ``None`` for ``DATA_UPLOAD_MAX_MEMORY_SIZE``."""
        return self.body_limit.max_body_bytes

    def json_body_limit(self) -> int:
        """The body cap of this server's JSON routes now, in bytes.

        ``max_body_bytes``, or ``DATA_UPLOAD_MAX_MEMORY_SIZE`` read at request time when that is
        ``None``. Every route except the upload route refuses a longer body with 413 before
        reading it; ``BodyLimitMiddleware`` enforces the same cap before Django's ASGI handler
        spools the body.
        """
        return self.body_limit()

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
                path(
                    "runs/<str:thread_id>/<str:run_id>/",
                    self.run_reattach_view,
                    name="run-reattach",
                ),
                path(
                    "runs/<str:thread_id>/<str:run_id>/cancel/",
                    self.run_cancel_view,
                    name="run-cancel",
                ),
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
        """Give an anonymous caller a session before ``store`` writes for them (``owners.py``).

        ``store`` defaults to the conversation store.
        """
        await ensure_anonymous_session(request, self.conversation_store if store is None else store)

    async def owns_nothing(self, request: HttpRequest, store: object) -> bool:
        """Whether ``request`` is an anonymous caller of ``store`` without a valid session."""
        return await owns_nothing(request, store)

    async def build_deps(self, request: HttpRequest) -> Any:
        """The deps for one run: ``deps_factory(request)`` (sync or async), else ``AgentDeps``."""
        return await build_deps(
            self.run_options.deps_factory,
            request,
            attachment_store=self.attachment_store if self.accepts_attachments else None,
        )
