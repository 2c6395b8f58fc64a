"""The run endpoints: ``RunAgentInput`` JSON in, an AG-UI event stream out as SSE.

Both refuse what they can before streaming (``input.accept_run``: the body, its checks, the
attachment references, the history's conversion), then stream one of two ways:

- ``StatelessRunEndpoint`` (a Null store): the mount's agent runs on the posted history inside
  the request (``inner.PydanticAIAgent``, with the adapter the intake built), and a client
  disconnect ends the run;
- ``DurableRunEndpoint`` (any other store): the request owner's chat-history repositories
  (``owners.owner_repositories``) back an ``AGUIStorageAgent`` wrapping ``PydanticAIAgent``,
  claimed and started by the mount's ``runs.RunCoordinator``. The stored history is what the
  agent sees; a posted turn that is not stored and is not a new user message or an answer to a
  stored open call is refused with ``RUN_ERROR`` ``INVALID_INPUT`` and nothing is written.
  The request only reads the run's log, so a disconnect stops the reading, not the run
  (``on_disconnect="cancel"`` cancels it instead). A store failure ends the stream with
  ``RUN_ERROR`` ``STORE_*``.

Every frame carries ``id: <run_id>:<seq>``, the run's per-run sequence number.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any

from ag_ui.core import BaseEvent, EventType, RunAgentInput, RunStartedEvent
from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponseBase
from pydantic_ai.agent import AbstractAgent

from django_pydantic_agent.agui.access import AccessPolicy
from django_pydantic_agent.agui.drain import Drain
from django_pydantic_agent.agui.engine import RunEngine
from django_pydantic_agent.agui.errors import (
    REDACTED_RUN_ERROR,
    REDACTED_SAVE_ERROR,
    STORE_FAILED_CODE,
    STORE_LIMIT_CODE,
    STORE_REFUSED_CODE,
    run_error,
    store_refusal_event,
)
from django_pydantic_agent.agui.inner import (
    PydanticAIAgent,
    RedactingAGUIAdapter,
    build_adapter,
    check_convertible,
    log_run_failure,
    run_agent,
    without_reasoning,
)
from django_pydantic_agent.agui.input import (
    NESTED_TOO_DEEPLY,
    RUN_TOO_BIG,
    AcceptedRun,
    accept_run,
    parse_run_input,
)
from django_pydantic_agent.agui.options import RunOptions
from django_pydantic_agent.agui.spend import SpendGate
from django_pydantic_agent.agui.sse import (
    SSE_HEARTBEAT,
    aclose,
    encode_event,
    event_id,
    run_response,
    sse_response,
    warn_if_wsgi,
    with_heartbeat,
)
from django_pydantic_agent.agui.views import ABANDONED_HOOK, Route
from django_pydantic_agent.chat_history import (
    AGUIStorageAgent,
    HistoryWindow,
    Message,
    translate_messages,
)
from django_pydantic_agent.chat_history.errors import RunFencedError
from django_pydantic_agent.chat_history.manager import TERMINAL_EVENT_TYPES
from django_pydantic_agent.persistence import (
    AnonymousOperationError,
    AttachmentStore,
    StoreError,
    resolve_owner_id,
)

__all__ = [
    "NESTED_TOO_DEEPLY",
    "REDACTED_RUN_ERROR",
    "REDACTED_SAVE_ERROR",
    "RUN_TOO_BIG",
    "SSE_HEARTBEAT",
    "STORE_FAILED_CODE",
    "STORE_LIMIT_CODE",
    "STORE_REFUSED_CODE",
    "DurableRunEndpoint",
    "GuardedStorageAgent",
    "StatelessRunEndpoint",
    "parse_run_input",
    "stateless_frames",
    "with_heartbeat",
    "without_reasoning",
]

logger = logging.getLogger("django_pydantic_agent.agui")


def stateless_frames(
    events: AsyncIterator[BaseEvent],
    run_id: str,
    *,
    heartbeat_seconds: float | None,
    coalesce_seconds: float,
) -> AsyncIterator[str]:
    """The stateless stream: ``events`` as SSE frames numbered from 1 (``id: <run_id>:<seq>``),
    with heartbeats and coalesced writes (``with_heartbeat``) when either is set."""

    async def numbered() -> AsyncIterator[str]:
        seq = 0
        try:
            async for event in events:
                seq += 1
                yield encode_event(event, event_id=event_id(run_id, seq))
        finally:
            await aclose(events)

    frames: AsyncIterator[str] = numbered()
    if heartbeat_seconds or coalesce_seconds:
        frames = with_heartbeat(frames, heartbeat_seconds, coalesce=coalesce_seconds)
    return frames


def _resumed(run_id: str) -> Callable[[Sequence[Message]], list[Any]]:
    """The history a resumed run ``run_id`` hands its model: the stored one without what the
    run left unfinished on its first worker (its ``interrupted`` answer stays in the thread,
    for the reader; the model answers the turn again, after whatever the run completed, such
    as a tool call and its result)."""

    def translate(messages: Sequence[Message]) -> list[Any]:
        kept = [m for m in messages if m.run_id != run_id or m.status == "complete"]
        return translate_messages(kept)

    return translate


class GuardedStorageAgent:
    """The storage agent of one run, with its store failures turned into ``RUN_ERROR``
    (``STORE_REFUSED`` / ``STORE_LIMIT`` for a refusal, ``STORE_FAILED`` redacted for anything
    else), so a client learns its run was not kept.

    The inner agent ends its own failures with ``RUN_ERROR`` (``InnerAgent``), so what the
    storage agent raises is the store's: before the stream, or on a new thread while the
    chat and the user message are written behind it.

    ``RUN_STARTED`` goes out at once, before the store is read: a client sees its run start
    without waiting for the thread's lookup. The one the run then emits (the inner agent's,
    with the same thread and run ids) is not forwarded twice; the storage agent still folds it.
    """

    def __init__(self, agent: AGUIStorageAgent, *, expose_error_messages: bool) -> None:
        self.agent = agent
        self._expose = expose_error_messages

    @classmethod
    def factory(
        cls, *, expose_error_messages: bool, history: HistoryWindow | None = None
    ) -> Callable[..., GuardedStorageAgent]:
        """The ``RunCoordinator`` agent factory: ``(chat_repo, message_repo, user_uuid, inner)``
        to the guarded storage agent of one run, replaying the ``history`` window."""

        def build(
            chat_repo: Any,
            message_repo: Any,
            user_uuid: uuid.UUID,
            inner: PydanticAIAgent,
            resumed_run: str | None = None,
        ) -> GuardedStorageAgent:
            translate = translate_messages if resumed_run is None else _resumed(resumed_run)
            agent = AGUIStorageAgent(
                inner.name,
                user_uuid,
                chat_repo,
                message_repo,
                inner,
                translate=translate,
                history=history,
                store_before_end=True,
            )
            return cls(agent, expose_error_messages=expose_error_messages)

        return build

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        yield RunStartedEvent(
            thread_id=input.thread_id,
            run_id=input.run_id,
            parent_run_id=input.parent_run_id,
            timestamp=int(time.time() * 1000),
        )
        echoed = False
        last: BaseEvent | None = None  # the event forwarded last
        stream = self.agent.run(input)
        try:
            async for last in stream:
                if not echoed and last.type == EventType.RUN_STARTED:
                    echoed = True
                    continue
                yield last
        except RunFencedError:
            raise  # another worker runs it on: this worker's readers get nothing more
        except Exception as exc:
            if last is not None and last.type in TERMINAL_EVENT_TYPES:
                raise  # it failed after its terminal event: nothing to tell the client
            log_run_failure(input, exc)
            if isinstance(exc, StoreError):
                yield store_refusal_event(exc, store="conversation")
            else:
                yield run_error(
                    exc,
                    expose=self._expose,
                    code=STORE_FAILED_CODE,
                    redacted=REDACTED_SAVE_ERROR,
                )
        finally:
            await stream.aclose()


class _RunEndpoint:
    """What both run endpoints share: the throttle, the intake, and the per-run inner agent.

    ``access`` supplies the throttle, ``body_limit()`` the body cap per request, and ``options``
    how the agent runs and streams; ``attachment_store`` (``None`` when uploads are off) is
    where quoted attachment references are looked up, and what the default deps carry.
    ``spend`` (``None`` without ``AGUIServer(spend=...)``) is the mount's budget gate: a run a spent
    budget would stop is refused with a JSON 429 before it is claimed or stored.
    ``drain`` says whether the mount still takes runs.
    """

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        *,
        access: AccessPolicy,
        body_limit: Callable[[], int],
        options: RunOptions,
        attachment_store: AttachmentStore | None = None,
        spend: SpendGate | None = None,
        drain: Drain | None = None,
    ) -> None:
        self._agent = agent
        self._drain = drain
        self._access = access
        self._body_limit = body_limit
        self._options = options
        self._attachment_store = attachment_store
        self._spend = spend

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        """Refuse the run, or stream it as SSE.

        Every refusal happens before streaming starts and is a JSON error: 503 with
        ``Retry-After`` while the worker drains, 429 (throttle), then the intake's 415, 413
        and 400 (``input.accept_run``), then the endpoint's own.
        Afterwards, failures are ``RUN_ERROR``, and every stream ends with ``RUN_FINISHED``
        or ``RUN_ERROR``.
        """
        if self._drain is not None and self._drain.draining:
            return self._drain.refusal()
        refusal = await self._access.check_throttle(request)
        if refusal is not None:
            return refusal
        accepted = await accept_run(
            request,
            agent=self._agent,
            attachment_store=self._attachment_store,
            limit=self._body_limit(),
            convert=self._convert,
            reads_newest=self._reads_newest(),
        )
        warn_if_wsgi(request)
        return await self._stream(request, accepted)

    def routes(self) -> list[Route]:
        """The run route: ``POST <mount>/``."""
        return [Route(path="", name="run", handlers={"POST": self}, too_big=RUN_TOO_BIG)]

    def _convert(self, run_input: RunAgentInput, accept: str | None) -> Any:
        raise NotImplementedError

    def _reads_newest(self) -> int | None:
        """How many of the newest posted messages a run reads (``None``: all of them)."""
        return None

    async def _stream(self, request: HttpRequest, accepted: AcceptedRun[Any]) -> HttpResponseBase:
        raise NotImplementedError


class StatelessRunEndpoint(_RunEndpoint):
    """The ``POST <mount>/`` handler of a Null store: the agent runs on the posted history
    inside the request; nothing is saved, and a client disconnect ends the run."""

    def _convert(self, run_input: RunAgentInput, accept: str | None) -> RedactingAGUIAdapter:
        options = self._options
        return build_adapter(
            self._agent,
            run_input,
            accept=accept,
            allowed_file_url_schemes=options.allowed_file_url_schemes,
            expose_error_messages=options.expose_error_messages,
        )

    async def _stream(
        self, request: HttpRequest, accepted: AcceptedRun[RedactingAGUIAdapter]
    ) -> HttpResponseBase:
        run_input = accepted.run_input
        owner_id = await self.spend_owner(request)
        inner = await run_agent(
            self._agent,
            self._options,
            request,
            accepted.accept,
            owner_id=owner_id,
            thread_id=run_input.thread_id,
            attachment_store=self._attachment_store,
            spend=self._spend,
        )
        if self._spend is not None:
            await self._spend.refuse(
                deps=inner.deps,
                owner_id=owner_id,
                thread_id=run_input.thread_id,
                run_id=run_input.run_id,
            )
        events = inner.run(run_input, adapter=accepted.converted)
        return sse_response(
            stateless_frames(
                events,
                accepted.run_input.run_id,
                heartbeat_seconds=self._options.heartbeat_seconds,
                coalesce_seconds=self._options.stream_coalesce_seconds,
            )
        )

    async def spend_owner(self, request: HttpRequest) -> str:
        """Who spends on this stateless mount, for the budget scopes: the user, or the visitor's
        session; visitors without a session share ``"anonymous"`` (nothing keys them apart)."""
        if self._spend is None:
            return ""
        try:
            return await sync_to_async(resolve_owner_id)(request, allow_anonymous=True)
        except AnonymousOperationError:
            return "anonymous"


class DurableRunEndpoint(_RunEndpoint):
    """The ``POST <mount>/`` handler of a persisting store: the mount's ``engine`` starts the
    run (``engine.RunEngine.start``: its refusals, 403, 413, 429 and 409, come before any
    stream), and the response reads its log as SSE."""

    def __init__(
        self,
        engine: RunEngine,
        *,
        access: AccessPolicy,
        body_limit: Callable[[], int],
        drain: Drain | None = None,
    ) -> None:
        super().__init__(
            engine.agent,
            access=access,
            body_limit=body_limit,
            options=engine.options,
            attachment_store=engine.attachment_store,
            spend=engine.spend,
            drain=drain,
        )
        self.engine = engine

    def _convert(self, run_input: RunAgentInput, accept: str | None) -> None:
        # The run's adapter is built from the stored history; the posted one is only checked.
        check_convertible(run_input)

    def _reads_newest(self) -> int | None:
        # The storage agent checks no more (``chat_history.window.checked_history``).
        return self.engine.history.max_posted

    async def _stream(self, request: HttpRequest, accepted: AcceptedRun[None]) -> HttpResponseBase:
        run_input = accepted.run_input
        handle = await self.engine.start(request, run_input, accepted.accept)
        options = self._options
        cancel = options.on_disconnect == "cancel"
        response = run_response(
            self.engine.follow(handle, cancel_on_close=cancel),
            run_input.run_id,
            heartbeat_seconds=options.heartbeat_seconds,
            coalesce_seconds=options.stream_coalesce_seconds,
        )
        if cancel:
            # Once the request is over: a client that left before the response was sent never
            # had a reader to close, and the run of one that was served has ended (a no-op).
            setattr(response, ABANDONED_HOOK, handle.cancel)
        return response
