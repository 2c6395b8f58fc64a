"""``AGUIServer``: one pydantic-ai agent served over AG-UI, mounted with ``path(..., server.urls)``.

The server only composes. It takes its stores and one options object per concern (``access``,
``runs``, ``attachments``, ``history``, ``spend``, ``mount``; each checks its own values),
builds the handlers, each with just what it uses, and never lets them see it. One route
table, the rows each handler states (``routes()``), drives both the views and
``urlpatterns``. Nothing about a request is ever stored on the agent or the server, so one
agent serves every caller concurrently.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, Final, TypeVar

from django.urls import URLPattern, path
from pydantic_ai.agent import AbstractAgent

from django_pydantic_agent.agui.access import AccessPolicy
from django_pydantic_agent.agui.attachments import AttachmentEndpoints
from django_pydantic_agent.agui.branches import BranchEndpoints
from django_pydantic_agent.agui.drain import Drain, DrainReport
from django_pydantic_agent.agui.engine import RunEngine
from django_pydantic_agent.agui.feedback import FeedbackEndpoints
from django_pydantic_agent.agui.inner import AgentDeps, build_deps
from django_pydantic_agent.agui.options import (
    AttachmentOptions,
    MountOptions,
    OnWorkerLoss,
    RunOptions,
    UnsafeCSRFExemptionWarning,
    csrf_exemption,
)
from django_pydantic_agent.agui.owners import owns_nothing, request_owner
from django_pydantic_agent.agui.reattach import RunEndpoints
from django_pydantic_agent.agui.run import (
    DurableRunEndpoint,
    GuardedStorageAgent,
    StatelessRunEndpoint,
)
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.agui.spend import SpendGate
from django_pydantic_agent.agui.threads import ThreadEndpoints
from django_pydantic_agent.agui.transfer import TransferEndpoints
from django_pydantic_agent.agui.usage import OwnerOf, UsageEndpoint
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

__all__ = ["AGUIServer", "AgentDeps", "UnsafeCSRFExemptionWarning"]

_T = TypeVar("_T")

# Shared defaults: the Null stores hold no state.
_NULL_CONVERSATIONS = NullConversationStore()
_NULL_ATTACHMENTS = NullAttachmentStore()

#: The options objects, by the argument that takes each.
_OPTIONS: Final[dict[str, type]] = {
    "access": AccessPolicy,
    "runs": RunOptions,
    "attachments": AttachmentOptions,
    "mount": MountOptions,
}
#: The flat keywords of the previews (deprecated, gone in the next release): where each is
#: now, as (argument, field of its options object); ``spend_limits`` is ``spend`` renamed.
#: Fields added since have none (``tests/agui/test_server.py`` pins the 26).
_FLAT_KEYWORDS: Final[dict[str, tuple[str, str]]] = {
    **{f.name: ("access", f.name) for f in fields(AccessPolicy)},
    **{f.name: ("runs", f.name) for f in fields(RunOptions) if f.name != "interrupt_wait_seconds"},
    "attachment_max_bytes": ("attachments", "max_bytes"),
    "attachment_allowed_types": ("attachments", "allowed_types"),
    **{f.name: ("mount", f.name) for f in fields(MountOptions)},
    "spend_limits": ("spend", ""),
}


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


def _option(name: str, value: _T | None, kind: type[_T]) -> _T:
    """``value``, ``kind()`` for ``None``, or a ``TypeError`` naming it when it is no ``kind``."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        article = "an" if kind.__name__[0] in "AEIOU" else "a"
        raise TypeError(
            f"{name}={value!r} is not {article} {kind.__name__}; pass {name}={kind.__name__}(...) "
            f"with the fields to change, or leave {name} out for the defaults."
        )
    return value


def _spelled(value: object) -> str:
    """``value`` as a project would write it: a function by its name, else its ``repr``."""
    return getattr(value, "__qualname__", None) or repr(value)


def _regroup(flat: dict[str, Any], given: dict[str, Any]) -> None:
    """Fold the deprecated flat keywords ``flat`` into ``given`` (argument name to value, ``None``
    when not passed): each options object is built from its flat keywords, and one
    ``DeprecationWarning`` names the new spelling of them all.

    Raises ``TypeError`` for an unknown keyword, and for a flat keyword passed along with the
    argument that now holds it.
    """
    grouped: dict[str, dict[str, Any]] = {}
    for name, value in flat.items():
        if name not in _FLAT_KEYWORDS:
            raise TypeError(f"AGUIServer() got an unexpected keyword argument {name!r}")
        argument, field = _FLAT_KEYWORDS[name]
        if given[argument] is not None:
            holder = f"{_OPTIONS[argument].__name__}({field}=...)" if field else "..."
            raise TypeError(
                f"AGUIServer() got both {name}= and {argument}=; pass only "
                f"{argument}={holder} ({name}= is deprecated)."
            )
        grouped.setdefault(argument, {})[field] = value
    spellings = []
    for argument, values in grouped.items():
        kind = _OPTIONS.get(argument)
        if kind is None:
            given[argument] = values[""]
            spellings.append(f"{argument}={_spelled(values[''])}")
        else:
            given[argument] = kind(**values)
            parts = ", ".join(f"{field}={_spelled(value)}" for field, value in values.items())
            spellings.append(f"{argument}={kind.__name__}({parts})")
    names = [f"{name}=" for name in flat]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    warnings.warn(
        f"{listed} {'is' if len(names) == 1 else 'are'} deprecated; pass {', '.join(spellings)}.",
        DeprecationWarning,
        stacklevel=3,
    )


def _worker_loss(chosen: OnWorkerLoss | None, run_store: object) -> OnWorkerLoss:
    """``RunOptions.on_worker_loss`` decided: ``None`` resumes where ``run_store`` can take runs
    over; ``"resume"`` where it cannot is a ``ValueError``."""
    resumable = implements(run_store, ResumableRunStore)
    if chosen is None:
        return "resume" if resumable else "error"
    if chosen == "resume" and not resumable:
        raise ValueError(
            f"on_worker_loss='resume' needs a run store another worker can take runs over "
            f"from (a ResumableRunStore, such as DefaultConversationStore's); "
            f"{run_store!r} is not one. Pass on_worker_loss='error', or such a store."
        )
    return chosen


class AGUIServer:
    """Serve a pydantic-ai agent over AG-UI, with optional thread and attachment routes.

    ``server.urls`` is an ``include()``-able triple, mounted as ``path("agent/", server.urls)``.
    It always mounts the run endpoint (``POST``); the thread and run routes only when
    ``conversation_store`` persists, and the attachment routes only when ``attachment_store``
    does. Every route authenticates before it looks at the method, and answers errors as
    ``{"error": "..."}`` JSON. ``spend`` (a pydantic-ai-harness ``SpendLimits``) is given to
    every run, scoped by the server (``agui.spend``), and a run a spent budget would stop is
    refused with a JSON 429; the ``usage/`` route shows the caller their usage and budgets when
    the run store keeps the ledger or there are spend limits.

    Raises ``TypeError``/``ValueError`` at construction for a wrong argument (the options
    objects check their own values), and warns with ``UnsafeCSRFExemptionWarning`` when CSRF
    is left unstated with cookie authentication. The flat keywords of the previews
    (``heartbeat_seconds=``, ...) still work for one release, with a ``DeprecationWarning``.

    The options read back as given, defaults filled in: ``access`` (its ``csrf_exempt``
    decided), ``runs`` (its ``on_worker_loss`` decided), ``attachments``, ``history``,
    ``mount``; ``spend`` is the budget gate (``SpendGate``, ``None`` without limits). Each
    route's view is ``<route name>_view`` (``server.run_view``, ``server.thread_view``, ...).
    """

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
    #: The durable run engine (``None`` on a stateless mount): what a transport streams.
    engine: RunEngine | None

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        *,
        conversation_store: ConversationStore = _NULL_CONVERSATIONS,
        attachment_store: AttachmentStore = _NULL_ATTACHMENTS,
        run_store: RunStore | None = None,
        access: AccessPolicy | None = None,
        runs: RunOptions | None = None,
        attachments: AttachmentOptions | None = None,
        history: HistoryWindow | None = None,
        spend: Any = None,
        mount: MountOptions | None = None,
        **flat: Any,
    ) -> None:
        if not isinstance(agent, AbstractAgent):
            raise TypeError(
                f"AGUIServer needs a pydantic-ai Agent, got {agent!r}; pass an "
                "instance such as Agent('openai:gpt-4o')."
            )
        given: dict[str, Any] = {
            "access": access,
            "runs": runs,
            "attachments": attachments,
            "mount": mount,
            "spend": spend,
        }
        if flat:
            _regroup(flat, given)
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
        policy = _option("access", given["access"], AccessPolicy)
        header_auth = policy.get_user is not None
        self.access = replace(
            policy, csrf_exempt=csrf_exemption(policy.csrf_exempt, header_auth=header_auth)
        )
        runs = _option("runs", given["runs"], RunOptions)
        if run_store is not None:
            run_store = _checked(
                "run_store",
                run_store,
                RunStore,
                "async start, heartbeat, finish, get, active_run_for_thread, sweep",
            )
        elif is_persistent(conversation_store):
            run_store = default_run_store(conversation_store, lease_seconds=runs.run_lease_seconds)
        self.runs = replace(runs, on_worker_loss=_worker_loss(runs.on_worker_loss, run_store))
        self.attachments = _option("attachments", given["attachments"], AttachmentOptions)
        self.history = _option("history", history, HistoryWindow)
        self.mount = _option("mount", given["mount"], MountOptions)
        #: The mount's budget gate over the ``spend`` limits (``None`` without them).
        self.spend: SpendGate | None = None if given["spend"] is None else SpendGate(given["spend"])
        # Stateless: nothing of a run outlives its request.
        self.run_store = run_store if is_persistent(conversation_store) else None
        self._routes = self._compose()
        for route, view in self._routes:
            setattr(self, route.attribute, view)

    def _compose(self) -> list[tuple[Route, AGUIView]]:
        """Build the handlers over the options, and a view for each row of their routes.

        One walk for both kinds of mount: a run store (the conversation store persists) adds
        the run coordinator, and with it the durable run endpoint, the run routes and what the
        thread routes read of running runs.
        """
        store, runs, mount = self.conversation_store, self.runs, self.mount
        uploads = self.attachment_store if is_persistent(self.attachment_store) else None
        self.coordinator = coordinator = self._coordinator()
        drain_steps: dict[str, Any] = {}
        if coordinator is not None:
            drain_steps = {
                "runs": coordinator.drain,
                "start": coordinator.start_sweeper,
                "close": coordinator.aclose,
                "undo": coordinator.end_drain,
            }
        self.drain_state = Drain(seconds=runs.drain_seconds, **drain_steps)
        shared: dict[str, Any] = {
            "access": self.access,
            "body_limit": mount.body_limit,
            "options": runs,
            "attachment_store": uploads,
            "spend": self.spend,
            "drain": self.drain_state,
        }
        run: StatelessRunEndpoint | DurableRunEndpoint
        owner: OwnerOf
        live: dict[str, Any] = {}
        run_routes: list[Route] = []
        self.engine = None
        if coordinator is None:
            run = StatelessRunEndpoint(self.agent, **shared)
            owner = run.spend_owner
        else:
            self.engine = engine = RunEngine(
                self.agent,
                store,
                coordinator=coordinator,
                options=runs,
                history=self.history,
                attachment_store=uploads,
                spend=self.spend,
            )
            run = DurableRunEndpoint(
                engine, access=self.access, body_limit=mount.body_limit, drain=self.drain_state
            )
            coordinator.resumer = engine.resume
            owner = functools.partial(_stored_owner, store)
            live = {
                "active_run": engine.active_run,
                "settle": engine.settle,
                "model_view": engine.model_view,
            }
            run_routes = RunEndpoints(engine).routes()
        self.run_endpoint = run
        threads = ThreadEndpoints(
            store, list_limit=mount.thread_list_limit, body_limit=mount.body_limit, **live
        )
        # Fork, export and import go ahead of ``threads/<id>/``, so ``threads/import/`` is not
        # read as a thread id.
        transfer = TransferEndpoints(store, attachment_store=uploads, body_limit=mount.body_limit)
        forks = BranchEndpoints(store, body_limit=mount.body_limit)
        feedback = FeedbackEndpoints(store, body_limit=mount.body_limit)
        ledger = self.run_store if implements(self.run_store, UsageLedger) else None
        deps = functools.partial(build_deps, runs.deps_factory, attachment_store=uploads)
        usage = UsageEndpoint(owner=owner, ledger=ledger, spend=self.spend, deps=deps)
        attachments = AttachmentEndpoints(
            self.attachment_store, access=self.access, options=self.attachments
        )
        table = [
            *run.routes(),
            *transfer.routes(),
            *forks.routes(),
            *feedback.routes(),
            *threads.routes(),
            *run_routes,
            *usage.routes(),
            *attachments.routes(),
        ]
        on_request = None if coordinator is None else coordinator.start_sweeper
        routes = []
        for route in table:
            view = AGUIView.for_route(
                route, policy=self.access, body_limit=mount.body_limit, on_request=on_request
            )
            # A marker for discovery (system checks, pages stating the limits); the view never
            # reads it.
            view.agui_server = self
            routes.append((route, view))
        return routes

    def _coordinator(self) -> RunCoordinator | None:
        """The mount's run manager over its run store (``None`` when runs are stateless)."""
        if self.run_store is None:
            return None
        runs = self.runs
        return RunCoordinator(
            GuardedStorageAgent.factory(
                expose_error_messages=runs.expose_error_messages, history=self.history
            ),
            run_store=self.run_store,
            heartbeat_seconds=runs.run_heartbeat_seconds,
            lease_seconds=runs.run_lease_seconds,
            sweep_interval_seconds=runs.sweep_interval_seconds,
            concurrent_runs=runs.concurrent_runs,
            wait_seconds=runs.interrupt_wait_seconds,
            on_worker_loss=runs.on_worker_loss or "error",  # decided in __init__
            max_resumes=runs.max_resumes,
        )

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

    def __repr__(self) -> str:
        return (
            f"AGUIServer({self.agent!r}, conversation_store={self.conversation_store!r}, "
            f"attachment_store={self.attachment_store!r}, mount={self.mount!r})"
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
        return [
            path(route.path, view, name=route.name) for route, view in self._routes if route.mounted
        ]

    @property
    def urls(self) -> tuple[list[URLPattern], str, str]:
        """``(patterns, app_name, namespace)`` for ``path("agent/", server.urls)``."""
        return self.urlpatterns, self.mount.namespace, self.mount.namespace


async def _stored_owner(store: ConversationStore, request: HttpRequest) -> str | None:
    """Whose usage ``request`` reads on a persisting mount: the store's owner, ``None`` for an
    anonymous caller without a session."""
    if await owns_nothing(request, store):
        return None
    return await request_owner(request, store)
