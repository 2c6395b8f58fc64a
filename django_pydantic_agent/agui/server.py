"""``AGUIServer``: one pydantic-ai agent served over AG-UI, mounted with ``path(..., server.urls)``.

The server only composes. Its constructor builds the frozen options of ``options.py`` (each
checks its own values) and the handlers, each with just what it uses; the handlers never see
the server. One route table, the rows each handler states (``routes()``), drives both the
views and ``urlpatterns``. Nothing about a request is ever stored on the agent or the server,
so one agent serves every caller concurrently.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from django.urls import URLPattern, path
from pydantic_ai.agent import AbstractAgent

from django_pydantic_agent.agui.access import AccessPolicy
from django_pydantic_agent.agui.attachments import AttachmentEndpoints
from django_pydantic_agent.agui.branches import BranchEndpoints
from django_pydantic_agent.agui.drain import DEFAULT_DRAIN_SECONDS, Drain, DrainReport
from django_pydantic_agent.agui.engine import RunEngine
from django_pydantic_agent.agui.inner import AgentDeps, build_deps
from django_pydantic_agent.agui.options import (
    DEFAULT_ATTACHMENT_MAX_BYTES,
    DEFAULT_MAX_RESUMES,
    DEFAULT_RUN_HEARTBEAT_SECONDS,
    DEFAULT_SWEEP_INTERVAL_SECONDS,
    DEFAULT_THREAD_LIST_LIMIT,
    AttachmentOptions,
    BodyLimit,
    ConcurrentRuns,
    MountOptions,
    OnDisconnect,
    OnWorkerLoss,
    RunOptions,
    UnsafeCSRFExemptionWarning,
    csrf_exemption,
)
from django_pydantic_agent.agui.owners import ensure_anonymous_session, owns_nothing, request_owner
from django_pydantic_agent.agui.reattach import RunEndpoints
from django_pydantic_agent.agui.run import (
    DurableRunEndpoint,
    GuardedStorageAgent,
    StatelessRunEndpoint,
)
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.agui.spend import SpendGate
from django_pydantic_agent.agui.sse import DEFAULT_STREAM_COALESCE_SECONDS
from django_pydantic_agent.agui.threads import ThreadEndpoints
from django_pydantic_agent.agui.transfer import TransferEndpoints
from django_pydantic_agent.agui.usage import UsageEndpoint
from django_pydantic_agent.agui.views import AGUIView, Route
from django_pydantic_agent.chat_history.protocols import implements, missing_members
from django_pydantic_agent.chat_history.window import HistoryWindow
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
    ResumableRunStore,
    RunRecord,
    RunStore,
)
from django_pydantic_agent.persistence.usage import UsageLedger

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


def _checked(name: str, value: Any, contract: type, methods: str) -> Any:
    """``value``, or a ``TypeError`` naming it and what it lacks when it does not implement
    ``contract`` (a wrapper that forwards through ``__getattr__`` implements what it wraps)."""
    missing = missing_members(value, contract)
    if missing:
        raise TypeError(
            f"{name}={value!r} does not implement {contract.__name__} ({methods}): it has no "
            f"{', '.join(missing)}."
        )
    return value


class _Option:
    """An ``AGUIServer`` argument read back from the options object that holds it."""

    def __init__(self, options: str, field: str = "") -> None:
        self._options = options
        self._field = field

    def __set_name__(self, owner: type, name: str) -> None:
        self._field = self._field or name

    def __get__(self, server: Any, owner: type | None = None) -> Any:
        if server is None:
            return self
        return getattr(getattr(server, self._options), self._field)


class AGUIServer:
    """Serve a pydantic-ai agent over AG-UI, with optional thread and attachment routes.

    ``server.urls`` is an ``include()``-able triple, mounted as ``path("agent/", server.urls)``.
    It always mounts the run endpoint (``POST``); the thread and run routes only when
    ``conversation_store`` persists, and the attachment routes only when ``attachment_store``
    does. Every route authenticates before it looks at the method, and answers errors as
    ``{"error": "..."}`` JSON. ``spend_limits`` (a pydantic-ai-harness ``SpendLimits``) is
    given to every run, scoped by the server (``agui.spend``), and a run a spent budget would
    stop is refused with a JSON 429; the ``usage/`` route shows the caller their usage and
    budgets when the run store keeps the ledger or there are spend limits.

    Raises ``TypeError``/``ValueError`` at construction for a wrong argument (the options
    objects check their own values), and warns with ``UnsafeCSRFExemptionWarning`` when CSRF
    is left unstated with cookie authentication.

    What the handlers were built with is readable, frozen: ``access`` (``AccessPolicy``),
    ``run_options`` (``RunOptions``), ``attachment_options`` (``AttachmentOptions``),
    ``mount_options`` (``MountOptions``) and ``body_limit`` (``BodyLimit``); each argument also
    reads back under its own name (``server.heartbeat_seconds``), and each route's view as
    ``<route name>_view`` (``server.run_view``, ``server.thread_view``, ...).
    """

    # The arguments as given, read from the options the handlers were built with.
    heartbeat_seconds = _Option("run_options")
    stream_coalesce_seconds = _Option("run_options")
    run_heartbeat_seconds = _Option("run_options")
    run_lease_seconds = _Option("run_options")
    sweep_interval_seconds = _Option("run_options")
    drain_seconds = _Option("run_options")
    on_worker_loss = _Option("run_options")
    max_resumes = _Option("run_options")
    forward_reasoning = _Option("run_options")
    expose_error_messages = _Option("run_options")
    allowed_file_url_schemes = _Option("run_options")
    instructions = _Option("run_options")
    deps_factory = _Option("run_options")
    history = _Option("run_options")
    attachment_max_bytes = _Option("attachment_options", "max_bytes")
    attachment_allowed_types = _Option("attachment_options", "allowed_types")
    max_body_bytes = _Option("body_limit")
    namespace = _Option("mount_options")
    thread_list_limit = _Option("mount_options")

    # The views of the route table (the run routes only with durable runs).
    run_view: AGUIView
    threads_view: AGUIView
    thread_view: AGUIView
    thread_fork_view: AGUIView
    thread_export_view: AGUIView
    threads_import_view: AGUIView
    run_reattach_view: AGUIView
    run_cancel_view: AGUIView
    attachments_view: AGUIView
    attachment_view: AGUIView
    usage_view: AGUIView

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
        run_heartbeat_seconds: float = DEFAULT_RUN_HEARTBEAT_SECONDS,
        run_lease_seconds: float = DEFAULT_LEASE_SECONDS,
        sweep_interval_seconds: float = DEFAULT_SWEEP_INTERVAL_SECONDS,
        spend_limits: Any = None,
        drain_seconds: float = DEFAULT_DRAIN_SECONDS,
        on_worker_loss: OnWorkerLoss | None = None,
        max_resumes: int = DEFAULT_MAX_RESUMES,
        history: HistoryWindow | None = None,
    ) -> None:
        if not isinstance(agent, AbstractAgent):
            raise TypeError(
                f"AGUIServer needs a pydantic-ai Agent, got {agent!r}; pass an "
                "instance such as Agent('openai:gpt-4o')."
            )
        self.agent = agent
        self.conversation_store: ConversationStore = _checked(
            "conversation_store",
            conversation_store,
            ConversationStore,
            "async load, save, delete, list, exists, rename",
        )
        self.attachment_store: AttachmentStore = _checked(
            "attachment_store", attachment_store, AttachmentStore, "async save, open, delete"
        )
        self.access = AccessPolicy(
            require_authenticated=require_authenticated,
            get_user=get_user,
            authorize=authorize,
            csrf_exempt=csrf_exemption(csrf_exempt, header_auth=get_user is not None),
            throttle=throttle,
        )
        self.body_limit = BodyLimit(max_body_bytes=max_body_bytes)
        if run_store is None and is_persistent(conversation_store):
            run_store = default_run_store(conversation_store, lease_seconds=run_lease_seconds)
        if on_worker_loss is None:
            resumable = implements(run_store, ResumableRunStore)
            on_worker_loss = "resume" if resumable else "error"
        elif on_worker_loss == "resume" and not implements(run_store, ResumableRunStore):
            raise ValueError(
                f"on_worker_loss='resume' needs a run store another worker can take runs over "
                f"from (a ResumableRunStore, such as DefaultConversationStore's); "
                f"{run_store!r} is not one. Pass on_worker_loss='error', or such a store."
            )
        self.run_options = RunOptions(
            heartbeat_seconds=heartbeat_seconds,
            stream_coalesce_seconds=stream_coalesce_seconds,
            forward_reasoning=forward_reasoning,
            expose_error_messages=expose_error_messages,
            allowed_file_url_schemes=allowed_file_url_schemes,  # type: ignore[arg-type]
            instructions=instructions,
            deps_factory=deps_factory,
            on_disconnect=on_disconnect,
            concurrent_runs=concurrent_runs,
            run_heartbeat_seconds=run_heartbeat_seconds,
            run_lease_seconds=run_lease_seconds,
            sweep_interval_seconds=sweep_interval_seconds,
            drain_seconds=drain_seconds,
            on_worker_loss=on_worker_loss,
            max_resumes=max_resumes,
            history=HistoryWindow() if history is None else history,
        )
        self.attachment_options = AttachmentOptions(
            max_bytes=attachment_max_bytes,
            allowed_types=attachment_allowed_types,  # type: ignore[arg-type]
        )
        self.mount_options = MountOptions(namespace=namespace, thread_list_limit=thread_list_limit)
        self.run_store: RunStore | None = (
            None
            if run_store is None
            else _checked(
                "run_store",
                run_store,
                RunStore,
                "async start, heartbeat, finish, get, active_run_for_thread, sweep",
            )
        )
        #: The mount's budget gate over ``spend_limits`` (``None`` without them).
        self.spend: SpendGate | None = None if spend_limits is None else SpendGate(spend_limits)
        self.coordinator: RunCoordinator | None = None
        #: The durable run engine (``None`` on a stateless mount): what a transport streams.
        self.engine: RunEngine | None = None
        self.drain_state: Drain
        self._routes = self._compose()
        for route, view in self._routes:
            setattr(self, route.attribute, view)

    def _compose(self) -> list[tuple[Route, AGUIView]]:
        """Build the handlers over the options, and a view for each row of their routes."""
        options, store = self.run_options, self.conversation_store
        uploads = self.attachment_store if is_persistent(self.attachment_store) else None
        run: StatelessRunEndpoint | DurableRunEndpoint
        if is_persistent(store):
            if self.run_store is None:
                self.run_store = default_run_store(store, lease_seconds=options.run_lease_seconds)
            self.coordinator = RunCoordinator(
                GuardedStorageAgent.factory(
                    expose_error_messages=options.expose_error_messages, history=options.history
                ),
                run_store=self.run_store,
                heartbeat_seconds=options.run_heartbeat_seconds,
                lease_seconds=options.run_lease_seconds,
                sweep_interval_seconds=options.sweep_interval_seconds,
                concurrent_runs=options.concurrent_runs,
                wait_seconds=options.interrupt_wait_seconds,
                on_worker_loss=options.on_worker_loss,
                max_resumes=options.max_resumes,
            )
            self.drain_state = Drain(
                seconds=options.drain_seconds,
                runs=self.coordinator.drain,
                start=self.coordinator.start_sweeper,
                close=self.coordinator.aclose,
                undo=self.coordinator.end_drain,
            )
            self.engine = RunEngine(
                self.agent,
                store,
                coordinator=self.coordinator,
                options=options,
                attachment_store=uploads,
                spend=self.spend,
            )
            run = DurableRunEndpoint(
                self.engine, access=self.access, body_limit=self.body_limit, drain=self.drain_state
            )
            self.coordinator.resumer = self.engine.resume
            threads = ThreadEndpoints(
                store,
                list_limit=self.thread_list_limit,
                body_limit=self.body_limit,
                active_run=self.engine.active_run,
                settle=self.engine.settle,
                model_view=self.engine.model_view,
            )
            runs = RunEndpoints(self.engine)
            table = [*run.routes(), *self._tree_routes(store, uploads)]
            table += [*threads.routes(), *runs.routes()]
            ledger = self.run_store if implements(self.run_store, UsageLedger) else None

            async def owner(request: HttpRequest) -> str | None:
                if await owns_nothing(request, store):
                    return None
                return await request_owner(request, store)
        else:
            self.drain_state = Drain(seconds=options.drain_seconds)
            run = StatelessRunEndpoint(
                self.agent,
                access=self.access,
                body_limit=self.body_limit,
                options=options,
                attachment_store=uploads,
                spend=self.spend,
                drain=self.drain_state,
            )
            ledger, owner = None, run.spend_owner
            threads = ThreadEndpoints(
                store, list_limit=self.thread_list_limit, body_limit=self.body_limit
            )
            table = [*run.routes(), *self._tree_routes(store, uploads), *threads.routes()]
            self.run_store = None  # stateless: nothing of a run outlives its request
        self.run_endpoint = run
        deps = functools.partial(build_deps, options.deps_factory, attachment_store=uploads)
        usage = UsageEndpoint(owner=owner, ledger=ledger, spend=self.spend, deps=deps)
        table += usage.routes()
        attachments = AttachmentEndpoints(
            self.attachment_store, access=self.access, options=self.attachment_options
        )
        table += attachments.routes()
        on_request = None if self.coordinator is None else self.coordinator.start_sweeper
        routes = []
        for route in table:
            view = AGUIView.for_route(
                route, policy=self.access, body_limit=self.body_limit, on_request=on_request
            )
            # A marker for discovery (system checks, pages stating the limits); the view never
            # reads it.
            view.agui_server = self
            routes.append((route, view))
        return routes

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

    # The drain, for ASGI servers without the lifespan protocol (agui.drain has the rest).

    @property
    def draining(self) -> bool:
        """Whether this mount has begun draining (new runs are answered 503)."""
        return self.drain_state.draining

    def begin_drain(self) -> None:
        """Take no new runs (a JSON 503 with ``Retry-After``) and, inside an event loop, start
        draining the running ones: ``drain_seconds`` to end, then they are handed over."""
        self.drain_state.begin()

    async def drain(self) -> DrainReport:
        """``begin_drain()``, then return once this mount's runs are drained: how many finished
        here and how many were handed over to another worker."""
        return await self.drain_state.wait()

    async def aclose(self) -> None:
        """Stop the sweeper and wait for it (ASGI lifespan shutdown); runs are not touched."""
        if self.coordinator is not None:
            await self.coordinator.aclose()

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

    def _tree_routes(
        self, store: ConversationStore, uploads: AttachmentStore | None
    ) -> list[Route]:
        """The fork, export and import routes; ahead of ``threads/<id>/`` in the table, so
        ``threads/import/`` is not read as a thread id."""
        forks = BranchEndpoints(store, body_limit=self.body_limit)
        transfer = TransferEndpoints(store, attachment_store=uploads, body_limit=self.body_limit)
        return [*transfer.routes(), *forks.routes()]

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
        return [
            path(route.path, view, name=route.name) for route, view in self._routes if route.mounted
        ]

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
