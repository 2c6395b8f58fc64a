"""``VercelAITransport``: the AI SDK's chat routes over an ``AGUIServer``'s durable runs.

Mounted where ``useChat`` looks, without a trailing slash (the SDK's URLs have none)::

    path("api/chat", VercelAITransport(server).urls)

- ``POST api/chat``: the body ``DefaultChatTransport`` sends, a run of the server's engine,
  answered as a UI message stream (``vercel_ai.stream``);
- ``GET api/chat/<id>/stream``: 204 when the caller runs nothing on the thread, else the
  running run's answer from its start, then live, wherever the run is;
- ``POST api/chat/<id>/stop``: 202, the running run is cancelled on whichever worker has it;
- ``GET api/chat/<id>``: the thread as ``UIMessage[]``, for ``useChat``'s ``messages``.

Every route goes through the server's access policy (authentication, CSRF, throttle, body
cap) in an ``AGUIView``; the thread and attachment routes stay the server's. The transport
takes what it uses from the server and keeps no reference to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.exceptions import DisallowedHost, ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.urls import NoReverseMatch, Resolver404, URLPattern, path, register_converter
from django.urls import resolve as resolve_url
from django.urls import reverse as reverse_url

from django_pydantic_agent.agui.access import AccessPolicy
from django_pydantic_agent.agui.drain import Drain
from django_pydantic_agent.agui.engine import RunEngine
from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.http import error_response
from django_pydantic_agent.agui.inner import check_convertible
from django_pydantic_agent.agui.input import RUN_TOO_BIG, accept_run, server_tool_names
from django_pydantic_agent.agui.owners import owns_nothing
from django_pydantic_agent.agui.sse import warn_if_wsgi
from django_pydantic_agent.agui.threads import NOT_FOUND, stored_thread
from django_pydantic_agent.agui.views import ABANDONED_HOOK, AGUIView, Route
from django_pydantic_agent.vercel_ai.messages import last_answer, ui_messages
from django_pydantic_agent.vercel_ai.request import (
    ChatRequest,
    chat_run_input,
    parse_chat_request,
)
from django_pydantic_agent.vercel_ai.stream import UIMessageStreamEncoder, ui_message_response

__all__ = ["ChatIdConverter", "VercelAITransport"]


class ChatIdConverter:
    """A chat id as the path segment after the mount: ``/<id>``, the slash included, so the
    routes extend a mount that has no trailing slash (``path("api/chat", ...)``) without a
    pattern that starts with ``/`` (Django's ``urls.W002``)."""

    regex = "/[^/]+"

    def to_python(self, value: str) -> str:
        return value[1:]

    def to_url(self, value: str) -> str:
        return f"/{value}"


register_converter(ChatIdConverter, "vercel_ai_chat_id")


class VercelAITransport:
    """The AI SDK's UI message stream protocol on ``server``'s runs, threads and stores.

    ``server`` must persist conversations (its ``engine`` runs durable runs): the transport
    is server-authoritative, as the AG-UI routes are. ``namespace`` names the routes
    (``vercel_ai:chat``, ``:stream``, ``:stop``, ``:thread``). Raises
    ``ImproperlyConfigured`` for a stateless server.
    """

    def __init__(self, server: Any, *, namespace: str = "vercel_ai") -> None:
        engine = getattr(server, "engine", None)
        if engine is None:
            raise ImproperlyConfigured(
                f"VercelAITransport needs an AGUIServer whose conversation store persists "
                f"(its runs are durable and its history the server's); {server!r} is "
                "stateless. Pass conversation_store=DefaultConversationStore() (or another "
                "persisting store) to the AGUIServer."
            )
        self.engine: RunEngine = engine
        self.namespace = namespace
        self._store = server.conversation_store
        self._access: AccessPolicy = server.access
        self._body_limit: Callable[[], int] = server.mount.body_limit
        self._drain: Drain = server.drain_state
        self._agui_namespace = server.mount.namespace
        self._attachment_view = getattr(server, "attachment_view", None)
        self._server_tools = server_tool_names(engine.agent)
        self._routes = [(route, self._view(route, server)) for route in self.routes()]

    def _view(self, route: Route, server: Any) -> AGUIView:
        coordinator = self.engine.coordinator
        view = AGUIView.for_route(
            route,
            policy=self._access,
            body_limit=self._body_limit,
            on_request=coordinator.start_sweeper,
        )
        # The discovery marker every mounted view carries (system checks); never read here.
        view.agui_server = server
        return view

    def routes(self) -> list[Route]:
        """The four routes (see the module docstring)."""
        chat = "<vercel_ai_chat_id:thread_id>"
        return [
            Route(path="", name="chat", handlers={"POST": self.chat}, too_big=RUN_TOO_BIG),
            Route(
                path=f"{chat}/stream",
                name="stream",
                handlers={"GET": self.stream},
                not_found=NOT_FOUND,
            ),
            Route(path=f"{chat}/stop", name="stop", handlers={"POST": self.stop}),
            Route(path=chat, name="thread", handlers={"GET": self.thread}, not_found=NOT_FOUND),
        ]

    @property
    def urlpatterns(self) -> list[URLPattern]:
        return [path(route.path, view, name=route.name) for route, view in self._routes]

    @property
    def urls(self) -> tuple[list[URLPattern], str, str]:
        """``(patterns, app_name, namespace)`` for ``path("api/chat", transport.urls)``."""
        return self.urlpatterns, self.namespace, self.namespace

    # -- attachments: the server's route, both ways -------------------------------------------

    def _attachment_url(self, ref: dict[str, Any]) -> str | None:
        """Where the server's attachment route serves ``ref`` (its own ``url`` if the route
        is not mounted; ``None`` without either)."""
        try:
            return reverse_url(
                f"{self._agui_namespace}:attachment", kwargs={"attachment_id": ref["id"]}
            )
        except NoReverseMatch:
            url = ref.get("url")
            return url if isinstance(url, str) else None

    def _attachment_id(self, request: HttpRequest) -> Any:
        def attachment_id(url: str) -> str | None:
            """The upload ``url`` downloads from the server's attachment route (a path, or a
            URL on the request's own host), or ``None``."""
            if self._attachment_view is None:
                return None
            parts = urlsplit(url)
            if parts.scheme not in ("", "http", "https"):
                return None
            if parts.netloc:
                try:
                    host = request.get_host()
                except DisallowedHost:
                    return None
                if parts.netloc != host:
                    return None
            try:
                match = resolve_url(unquote(parts.path))
            except Resolver404:
                return None
            if match.func is not self._attachment_view:
                return None
            return str(match.kwargs["attachment_id"])

        return attachment_id

    # -- the routes ----------------------------------------------------------------------------

    async def chat(self, request: HttpRequest) -> HttpResponseBase:
        """``POST``: the run ``useChat`` asks for, as a UI message stream.

        Refused before any stream (a ``Refusal`` the view answers as JSON ``{"error", ...}``):
        503 while the worker drains,
        429 (throttle, or a spent budget with ``code``/``resetsAt``), 415, 413 and 400 (the
        body, its checks, its attachment references), 403 and 413 from the store, 409 for a
        busy thread. A message the stored history refuses ends the stream with ``error``
        (the AG-UI ``RUN_ERROR`` text) and ``finish`` carrying its code.
        """
        if self._drain.draining:
            return self._drain.refusal()
        throttled = await self._access.check_throttle(request)
        if throttled is not None:
            return throttled
        posted: list[ChatRequest] = []
        attachment_id = self._attachment_id(request)

        def parse(body: bytes) -> Any:
            chat = parse_chat_request(body)
            posted.append(chat)
            return chat_run_input(chat, run_id=uuid.uuid4().hex, attachment_id=attachment_id)

        engine = self.engine
        accepted = await accept_run(
            request,
            agent=engine.agent,
            attachment_store=engine.attachment_store,
            limit=self._body_limit(),
            convert=lambda run_input, accept: check_convertible(run_input),
            parse=parse,
        )
        warn_if_wsgi(request)
        handle = await engine.start(request, accepted.run_input, accepted.accept)
        options = engine.options
        cancel = options.on_disconnect == "cancel"
        encoder = UIMessageStreamEncoder(
            message_id=posted[0].continued_message_id, server_tools=self._server_tools
        )
        response = ui_message_response(
            engine.follow(handle, cancel_on_close=cancel),
            encoder,
            heartbeat_seconds=options.heartbeat_seconds,
            coalesce_seconds=options.stream_coalesce_seconds,
        )
        if cancel:
            setattr(response, ABANDONED_HOOK, handle.cancel)
        return response

    async def stream(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``GET <id>/stream``: 204 when the caller runs nothing on the thread; else the
        running run's answer from its start (the stored part of an answer it continues,
        replayed, then its log), then live, until it ends."""
        engine = self.engine
        active = await engine.active_run(request, thread_id)
        if active is None:
            return HttpResponse(status=204)
        try:
            owner_id, record = await engine.locate(request, thread_id, active["runId"])
            message_id: str | None = None
            replayed: list[dict[str, Any]] = []
            if not record.resumes:
                # A resumed run's log opens with the thread as stored: no need to read it.
                message_id, replayed = await self._answer_so_far(request, thread_id, record.run_id)
            stream = await engine.read(request, owner_id, record, 0)
        except Refusal as refusal:
            if refusal.status == 404:
                return HttpResponse(status=204)  # it ended and went: nothing to resume
            raise
        options = engine.options
        encoder = UIMessageStreamEncoder(message_id=message_id, server_tools=self._server_tools)
        return ui_message_response(
            stream,
            encoder,
            heartbeat_seconds=options.heartbeat_seconds,
            coalesce_seconds=options.stream_coalesce_seconds,
            replayed=replayed,
        )

    async def _answer_so_far(
        self, request: HttpRequest, thread_id: str, run_id: str
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """``(the answer's id, its stored messages from earlier runs)`` of the answer run
        ``run_id`` writes: an answer a tool output or an approval continues began in an
        earlier run, and its log holds only what it adds."""
        thread = await stored_thread(self._store, thread_id, request=request) or []
        answer = last_answer(thread)
        if not answer:
            return None, []  # nothing of the answer stored yet: the run's log has it all
        asked = thread[-len(answer) - 1] if len(thread) > len(answer) else None
        if asked is not None and asked.get("runId") == run_id:
            return str(answer[0].get("id")), []  # the run answers its own new message
        # A tool output or an approval continued an answer of an earlier run: replay what
        # the earlier runs stored, up to this run's first message.
        first = next((i for i, m in enumerate(answer) if m.get("runId") == run_id), len(answer))
        return str(answer[0].get("id")), answer[:first]

    async def stop(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``POST <id>/stop``: 202 ``{"runId", "status": "cancelling", "cancelled": true}``
        while the caller's running run on the thread stops (its partial answer is stored
        ``interrupted``, and its stream ends with ``abort`` and ``finish``); 200 ``{"runId":
        null, "status": "idle", "cancelled": false}`` when nothing runs, which is also the
        answer for a thread of someone else's. Any body is ignored."""
        engine = self.engine
        idle = JsonResponse({"runId": None, "status": "idle", "cancelled": False})
        active = await engine.active_run(request, thread_id)
        if active is None:
            return idle
        try:
            status, body = await engine.cancel(request, thread_id, active["runId"])
        except Refusal:
            return idle
        return JsonResponse(body, status=status)

    async def thread(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``GET <id>``: the thread's active branch as ``UIMessage[]`` (``vercel_ai.messages``),
        or 404 for a thread the caller does not have."""
        if await owns_nothing(request, self._store):
            return error_response(404, NOT_FOUND)
        await self.engine.settle(request, thread_id)
        messages = await stored_thread(self._store, thread_id, request=request)
        if messages is None:
            return error_response(404, NOT_FOUND)
        shown = ui_messages(
            messages, attachment_url=self._attachment_url, server_tools=self._server_tools
        )
        return JsonResponse(
            [message.model_dump(mode="json", by_alias=True) for message in shown], safe=False
        )
