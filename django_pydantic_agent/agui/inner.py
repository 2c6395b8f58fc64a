"""The inner pydantic-ai agent, adapted to one AG-UI run: adapter, deps, and its event filters.

``build_adapter`` wraps the mount's agent in pydantic-ai's ``AGUIAdapter`` for one
``RunAgentInput``, converting the posted history up front so an unusable one is refused before
streaming. It is built once per run: a stateless run hands the one its intake built to
``PydanticAIAgent.run``; a durable run checks the posted history with ``check_convertible`` and
builds its adapter from the stored history. Its event stream logs the agent's own failures and
redacts their ``RUN_ERROR`` (see ``errors.redact_run_error``). ``PydanticAIAgent`` is the same
adapter as a chat-history ``AGUIAgent`` (what ``AGUIStorageAgent`` wraps): one per run, it never
raises (a failure is a redacted ``RUN_ERROR``) and puts the run's token usage on
``RUN_FINISHED``. ``build_deps`` makes the per-run deps, and ``without_reasoning`` drops
chain-of-thought events. Nothing about a request is ever stored on the agent.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ag_ui.core import (
    BaseEvent,
    EventType,
    Message,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TokenUsage,
    ToolMessage,
    UserMessage,
)
from django.http import HttpRequest
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.ui.ag_ui import AGUIAdapter, AGUIEventStream

from django_pydantic_agent.agui.access import call_hook
from django_pydantic_agent.agui.attachment_fence import with_attachment_fences
from django_pydantic_agent.agui.errors import redact_run_error, run_error
from django_pydantic_agent.agui.spend import budget_refusal
from django_pydantic_agent.agui.sse import aclose
from django_pydantic_agent.chat_history import AGUIAgent
from django_pydantic_agent.chat_history.manager import TERMINAL_EVENT_TYPES
from django_pydantic_agent.chat_history.summaries import (
    StoredSummary,
    WrittenSummary,
    summary_request,
    written_summary,
)
from django_pydantic_agent.persistence.conversation import RunScope, enter_run_scope

if TYPE_CHECKING:
    from pydantic_ai.agent import AgentRunResult
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.ui import UIEventStream

    from django_pydantic_agent.agui.options import RunOptions
    from django_pydantic_agent.agui.spend import SpendGate

__all__ = [
    "AgentDeps",
    "PydanticAIAgent",
    "RedactingAGUIAdapter",
    "build_adapter",
    "build_deps",
    "check_convertible",
    "log_run_failure",
    "run_agent",
    "without_reasoning",
]

logger = logging.getLogger("django_pydantic_agent.agui")

# Read once: a member read through its class (``EventType.X``) costs a descriptor call.
_RUN_STARTED: Final = EventType.RUN_STARTED
_REASONING_TYPES: Final = frozenset(t for t in EventType if t.value.startswith("REASONING_"))


@dataclass(frozen=True, kw_only=True)
class AgentDeps:
    """The default per-run deps: the authenticated user and the request.

    Tools read ``ctx.deps.user`` (server-resolved, never client-chosen), and
    ``tools.read_attachment`` reads ``attachment_store``. Pass ``deps_factory``
    to ``AGUIServer`` to supply your own deps type instead.
    """

    user: Any
    request: HttpRequest
    #: The mount's attachment store (``None`` when uploads are off), for ``tools.read_attachment``.
    attachment_store: Any = None


async def build_deps(
    deps_factory: Callable[[HttpRequest], Any] | None,
    request: HttpRequest,
    *,
    attachment_store: Any = None,
) -> Any:
    """The deps for one run: ``deps_factory(request)`` (sync or async), else ``AgentDeps``.

    A sync factory runs in a worker thread, so it may use the ORM.
    """
    if deps_factory is None:
        return AgentDeps(user=request.user, request=request, attachment_store=attachment_store)
    return await call_hook(deps_factory, request)


async def run_agent(
    agent: AbstractAgent[Any, Any],
    options: RunOptions,
    request: HttpRequest,
    accept: str | None,
    *,
    owner_id: str,
    thread_id: str,
    attachment_store: Any = None,
    spend: SpendGate | None = None,
    scope: RunScope | None = None,
) -> PydanticAIAgent:
    """The inner agent of one run, with its deps (``deps_factory``, else ``AgentDeps``); with
    spend limits, the capability and the run's owner and thread for its scopes; on a stored
    thread, the run's owner and thread (``scope``) for its history."""
    deps = await build_deps(options.deps_factory, request, attachment_store=attachment_store)
    return PydanticAIAgent(
        agent,
        deps=deps,
        accept=accept,
        instructions=options.instructions,
        allowed_file_url_schemes=options.allowed_file_url_schemes,
        expose_error_messages=options.expose_error_messages,
        forward_reasoning=options.forward_reasoning,
        run_options=None if spend is None else spend.run_options(owner_id, thread_id),
        scope=scope,
    )


def log_run_failure(run_input: RunAgentInput | None, error: BaseException) -> None:
    """Log that the run of ``run_input`` failed with ``error``, traceback included."""
    logger.error(
        "The agent run %r on thread %r failed.",
        run_input.run_id if run_input else None,
        run_input.thread_id if run_input else None,
        exc_info=error,
    )


@dataclass
class _RedactingEventStream(AGUIEventStream[Any, Any]):
    """The AG-UI event stream with the agent's failures logged and their ``RUN_ERROR`` redacted."""

    expose_error_messages: bool = field(default=False, kw_only=True)

    async def on_error(self, error: Exception) -> AsyncIterator[BaseEvent]:
        refusal = budget_refusal(error)
        if refusal is not None:
            # A policy the client is told about, not a failure: no traceback, no redaction.
            run_id = getattr(self.run_input, "run_id", None)
            logger.info("The agent run %r stopped: %s", run_id, refusal.message)
            yield refusal.event()
            return
        log_run_failure(self.run_input, error)
        async for event in super().on_error(error):
            if isinstance(event, RunErrorEvent):
                yield redact_run_error(event, expose=self.expose_error_messages)
            else:  # pragma: no cover - the AG-UI stream yields only RUN_ERROR here
                yield event


@dataclass
class RedactingAGUIAdapter(AGUIAdapter[Any, Any]):
    """``AGUIAdapter`` whose event stream logs and redacts errors (``expose_error_messages``),
    and whose model history names the files each user message quotes (``attachment_fence``)."""

    expose_error_messages: bool = field(default=False, kw_only=True)

    @classmethod
    def load_messages(
        cls, messages: Sequence[Message], *, preserve_file_data: bool = False
    ) -> list[ModelMessage]:
        """The pydantic-ai history of ``messages``, each quoted attachment listed in its fence."""
        return super().load_messages(
            with_attachment_fences(messages), preserve_file_data=preserve_file_data
        )

    def build_event_stream(self) -> UIEventStream[RunAgentInput, BaseEvent, Any, Any]:
        return _RedactingEventStream(
            self.run_input,
            accept=self.accept,
            ag_ui_version=self.ag_ui_version,
            manage_system_prompt=self.manage_system_prompt,
            preserve_file_data=self.preserve_file_data,
            expose_error_messages=self.expose_error_messages,
        )


def build_adapter(
    agent: AbstractAgent[Any, Any],
    run_input: RunAgentInput,
    *,
    accept: str | None,
    allowed_file_url_schemes: Collection[str],
    expose_error_messages: bool,
) -> RedactingAGUIAdapter:
    """The adapter running ``agent`` for ``run_input``, its history already converted.

    Raises ``ValueError`` or ``TypeError`` when the posted messages cannot be converted to the
    model's history (for example a file part with neither url nor data, or a URL scheme not in
    ``allowed_file_url_schemes``); ``input.unconvertible_history_problem`` words the refusal.
    """
    adapter = RedactingAGUIAdapter(
        agent=agent,
        run_input=run_input,
        accept=accept,
        allowed_file_url_schemes=frozenset(allowed_file_url_schemes),
        expose_error_messages=expose_error_messages,
    )
    adapter.messages  # noqa: B018 - converts (and caches) the history, or raises
    return adapter


def check_convertible(run_input: RunAgentInput) -> None:
    """Convert what a durable run may take of ``run_input``'s messages as ``build_adapter``
    would, building no adapter.

    The durable path checks the posted messages with it. Its run's adapter is built from the
    stored history, which takes of a client only new user messages and results of pending
    tool calls, so only those can fail to convert there:

    - every user message but one of plain text, which always converts;
    - the messages from the last assistant message on, from the one that made the calls the
      tool results among them answer if that is older.

    What else a client posts back (one that keeps a transcript, as ``@ag-ui/client`` does,
    posts all of it) is either
    stored already, and ignored, or refused by the storage agent; converting it all cost a
    turn on a thread of 10,000 messages about 0.4 s (docs/benchmarks.md).

    Raises ``ValueError`` or ``TypeError`` exactly when ``build_adapter`` would on those.
    """
    messages = run_input.messages
    start = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=0)
    answers = {m.tool_call_id for m in messages[start:] if isinstance(m, ToolMessage)}
    for index in range(start, -1, -1):
        if not answers:
            break
        made = {call.id for call in getattr(messages[index], "tool_calls", None) or ()}
        if made & answers:
            start = index
            answers -= made
    users = [
        m
        for m in messages[:start]
        if isinstance(m, UserMessage)
        and (not isinstance(m.content, str) or getattr(m, "encrypted_value", None))
    ]
    RedactingAGUIAdapter.load_messages([*users, *messages[start:]])


async def without_reasoning(events: AsyncIterator[BaseEvent]) -> AsyncIterator[BaseEvent]:
    """Drop every ``REASONING_*`` event, so chain-of-thought never reaches the browser."""
    async for event in events:
        if event.type not in _REASONING_TYPES:
            yield event


def token_usage(result: AgentRunResult[Any]) -> list[TokenUsage]:
    """``RUN_FINISHED.usage`` of a completed run: one ``TokenUsage`` for its model."""
    usage = result.usage
    response = result.response
    return [
        TokenUsage(
            provider=response.provider_name,
            model=response.model_name,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.input_tokens + usage.output_tokens,
            reasoning_tokens=usage.output_reasoning_tokens or None,
            cached_input_tokens=usage.cache_read_tokens or None,
            cache_write_input_tokens=usage.cache_write_tokens or None,
        )
    ]


class PydanticAIAgent(AGUIAgent):
    """The mount's pydantic-ai agent as a chat-history ``AGUIAgent``, built for one run.

    ``run(input)`` converts ``input`` (the history ``AGUIStorageAgent`` replays, or the posted
    one) with ``build_adapter`` and streams the adapter's events, reasoning dropped unless
    ``forward_reasoning``. It never raises: a failure, even while converting the history, is
    logged and ends the stream with ``RUN_ERROR`` (after a ``RUN_STARTED``), redacted unless
    ``expose_error_messages``. ``RUN_FINISHED`` carries the run's token usage. On a stored
    thread, ``scope`` (the request's owner and the thread) is the run's: its conversation id
    is derived from it, and it is set on the running task (``persistence.conversation``).
    ``run_options`` go to the agent's run as they are (the mount's spend capability and its
    metadata).
    """

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        *,
        deps: Any,
        accept: str | None,
        instructions: Any,
        allowed_file_url_schemes: Collection[str],
        expose_error_messages: bool,
        forward_reasoning: bool,
        scope: RunScope | None = None,
        run_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = agent.name or "agent"
        self._scope = scope
        self.run_options = dict(run_options or {})
        self._agent = agent
        self._deps = deps
        self._accept = accept
        self._instructions = instructions
        self._schemes = allowed_file_url_schemes
        self._expose = expose_error_messages
        self._forward_reasoning = forward_reasoning
        self.replayed_summary: StoredSummary | None = None
        """The stored compaction summary the run's model is sent ahead of its history."""
        self.written_summary: WrittenSummary | None = None
        """The summary a compaction capability wrote during the run, once it completed."""

    @property
    def deps(self) -> Any:
        """The deps this run's agent gets."""
        return self._deps

    async def run(
        self, input: RunAgentInput, *, adapter: RedactingAGUIAdapter | None = None
    ) -> AsyncGenerator[BaseEvent, None]:
        """Stream the run of ``input``; ``adapter``, when given, is the one already built for
        it (``build_adapter``), so the history is not converted twice."""
        usage: list[TokenUsage] = []

        async def complete(result: AgentRunResult[Any]) -> None:
            usage.extend(token_usage(result))
            self.written_summary = written_summary(result.all_messages(), self.replayed_summary)

        started = ended = False
        summary = self.replayed_summary
        try:
            if adapter is None:
                adapter = build_adapter(
                    self._agent,
                    input,
                    accept=self._accept,
                    allowed_file_url_schemes=self._schemes,
                    expose_error_messages=self._expose,
                )
            source = adapter.run_stream(
                deps=self._deps,
                instructions=self._instructions,
                on_complete=complete,
                message_history=None if summary is None else [summary_request(summary)],
                conversation_id=None if self._scope is None else self._scope.conversation_id,
                **self.run_options,
            )
            if self._scope is not None:
                # The run's own task (a producer runs in a context of its own): the tools of
                # this run, and the tasks they start, see whose history they may read.
                enter_run_scope(self._scope)
            events = source if self._forward_reasoning else without_reasoning(source)
            try:
                async for event in events:
                    kind = event.type
                    started = started or kind == _RUN_STARTED
                    ended = kind in TERMINAL_EVENT_TYPES
                    if isinstance(event, RunFinishedEvent) and usage and not event.usage:
                        event.usage = usage
                    yield event
            finally:
                await aclose(events)
                await aclose(source)  # in case a filter failed without closing it
        except Exception as exc:
            log_run_failure(input, exc)
            if ended:  # pragma: no cover - pydantic-ai yields nothing after the terminal event
                return
            if not started:
                yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
            yield run_error(exc, expose=self._expose)
