"""The thread drawer routes: list, load, rename and delete the caller's conversations.

Mounted only when the server's conversation store persists. Every answer is owner-scoped by the
store: a thread id belonging to someone else is a 404 exactly like a missing one, and the JSON
never carries an owner id. A thread id outside the id alphabet (``ids.py``) cannot exist, so it
is a 404 on every route (the view checks it after authentication). An anonymous caller without a
session owns nothing: reads answer empty, and no session is created for them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse

from django_pydantic_agent.agui.branches import branches_json, switch_branch
from django_pydantic_agent.agui.errors import store_refusal
from django_pydantic_agent.agui.http import error_response, read_json_body, refuse_input
from django_pydantic_agent.agui.input import NESTED_TOO_DEEPLY
from django_pydantic_agent.agui.owners import owns_nothing
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.persistence import (
    ConversationMeta,
    ConversationStore,
    StoreError,
    is_persistent,
)
from django_pydantic_agent.persistence.branching import branch_points
from django_pydantic_agent.persistence.wire import BOOKKEEPING_KEY

__all__ = ["MAX_TITLE_LENGTH", "NOT_FOUND", "TITLE_TOO_BIG", "ThreadEndpoints"]

#: The longest title ``PATCH threads/<id>/`` accepts, in characters.
MAX_TITLE_LENGTH = 200

#: The 404 message of every thread route.
NOT_FOUND = "No such thread."
#: What the 413 of ``PATCH threads/<id>/`` asks the caller to send instead.
TITLE_TOO_BIG = "send only the title."


def _with_status(message: Any) -> Any:
    """``message`` with a top-level ``status`` (``complete`` / ``active`` / ``interrupted`` /
    ``errored``): the store's own key, or its bookkeeping's, else ``complete``.

    The message that carries a failed run's outcome (its last, ``chatHistory.runOutcome`` of
    type ``error``) reads ``errored`` even when its own text was complete, so a page reloaded
    after a crash still shows the answer as failed.
    """
    if not isinstance(message, dict):
        return message
    status = message.get("status")
    if not isinstance(status, str):
        metadata = message.get("metadata")
        book = metadata.get("django_pydantic_agent") if isinstance(metadata, dict) else None
        status = book.get("status") if isinstance(book, dict) else None
        status = status if isinstance(status, str) else "complete"
    records = message.get(BOOKKEEPING_KEY)
    outcome = records.get("runOutcome") if isinstance(records, dict) else None
    if status == "complete" and isinstance(outcome, dict) and outcome.get("type") == "error":
        status = "errored"
    return message if message.get("status") == status else {**message, "status": status}


def _meta_json(meta: ConversationMeta) -> dict[str, Any]:
    """One thread-drawer row on the wire: no owner id, ever."""
    return {
        "threadId": meta.thread_id,
        "title": meta.title,
        "preview": meta.preview,
        "updatedAt": meta.updated_at.isoformat() if meta.updated_at else None,
    }


class ThreadEndpoints:
    """Handlers for ``threads/`` and ``threads/<thread_id>/`` over one conversation store.

    ``list_limit`` is the default and largest ``?limit=`` of the list; ``body_limit()`` the
    byte cap of a rename's JSON body, read per request. ``active_run(request, thread_id)``, when
    given, returns the caller's running run on the thread (``{"runId", "lastSeq"}`` or ``None``).
    ``settle(request, thread_id)``, when given, returns once this worker's runs of the caller
    that already sent their terminal event have stored it (``thread_id`` ``None``: every
    thread), so a client that reads right after its stream ended sees its last words.
    """

    def __init__(
        self,
        store: ConversationStore,
        *,
        list_limit: int,
        body_limit: Callable[[], int],
        active_run: Callable[[HttpRequest, str], Awaitable[dict[str, Any] | None]] | None = None,
        settle: Callable[[HttpRequest, str | None], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self._list_limit = list_limit
        self._body_limit = body_limit
        self._active_run = active_run
        self._settle = settle

    def routes(self) -> list[Route]:
        """``threads/`` and ``threads/<thread_id>/``, mounted when the store persists."""
        mounted = is_persistent(self._store)
        return [
            Route(path="threads/", name="threads", handlers={"GET": self.index}, mounted=mounted),
            Route(
                path="threads/<str:thread_id>/",
                name="thread",
                handlers={"GET": self.get, "PATCH": self.rename, "DELETE": self.delete},
                not_found=NOT_FOUND,
                too_big=TITLE_TOO_BIG,
                mounted=mounted,
            ),
        ]

    async def _owns_nothing(self, request: HttpRequest) -> bool:
        return await owns_nothing(request, self._store)

    async def index(self, request: HttpRequest) -> HttpResponseBase:
        """``GET threads/?limit=N``: the caller's threads, most recent first.

        ``limit`` defaults to, and is capped at, ``list_limit`` (the server's
        ``thread_list_limit``); a value that is not a positive integer is a 400.
        """
        cap = self._list_limit
        raw = request.GET.get("limit")
        limit = cap
        if raw is not None:
            try:
                limit = int(raw)
            except ValueError:
                limit = 0
            if limit < 1:
                return refuse_input(
                    request,
                    f"limit must be a positive integer (at most {cap}); omit it for {cap}.",
                )
            limit = min(limit, cap)
        if await self._owns_nothing(request):
            return JsonResponse({"threads": []})
        if self._settle is not None:
            await self._settle(request, None)
        try:
            metas = await self._store.list(request=request, limit=limit)
        except StoreError as exc:
            return store_refusal(exc, store="conversation")
        return JsonResponse({"threads": [_meta_json(meta) for meta in metas[:limit]]})

    async def get(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``GET threads/<id>/``: ``{"threadId", "messages", "activeRun", "branches"}``, or 404.

        ``messages`` are the active branch as stored (each with its ``status``); ``activeRun``
        is the caller's running run on the thread, ``{"runId", "lastSeq"}`` to reattach with,
        or ``null``; ``branches`` maps each message that has siblings to ``{"siblings": [ids],
        "index": i}`` (``agui.branches``).
        """
        if await self._owns_nothing(request):
            return error_response(404, NOT_FOUND)
        if self._settle is not None:
            await self._settle(request, thread_id)
        try:
            conversation = await self._store.load(thread_id, request=request)
        except StoreError as exc:
            return store_refusal(exc, store="conversation")
        if conversation is None:
            return error_response(404, NOT_FOUND)
        active = None if self._active_run is None else await self._active_run(request, thread_id)
        try:
            points = await branch_points(self._store, thread_id, request=request)
        except StoreError as exc:
            return store_refusal(exc, store="conversation")
        return JsonResponse(
            {
                "threadId": thread_id,
                "messages": [_with_status(message) for message in conversation.messages],
                "activeRun": active,
                "branches": branches_json(points),
            }
        )

    async def rename(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``PATCH threads/<id>/`` with ``{"title": "..."}``: 200, 400, 404, 413 or 415.

        A body with ``"activeMessageId"`` switches branches instead (``agui.branches``).

        The body must be ``application/json`` (415) within ``DATA_UPLOAD_MAX_MEMORY_SIZE``
        (413). Whitespace in the title is collapsed; it must then be a non-empty string of at
        most ``MAX_TITLE_LENGTH`` printable characters (400).
        """
        body = read_json_body(request, limit=self._body_limit(), too_big=TITLE_TOO_BIG)
        if not isinstance(body, bytes):
            return body
        try:
            payload = json.loads(body)
        except RecursionError:
            return refuse_input(request, NESTED_TOO_DEEPLY)
        except (ValueError, UnicodeDecodeError):
            payload = None
        if isinstance(payload, dict) and "activeMessageId" in payload:
            return await switch_branch(
                self._store, request, thread_id, payload, active_run=self._active_run
            )
        title = payload.get("title") if isinstance(payload, dict) else None
        if not isinstance(title, str) or not title.strip():
            return refuse_input(
                request,
                'Send a JSON object with a non-empty string "title", e.g. {"title": "Plans"}.',
            )
        title = " ".join(title.split())
        if len(title) > MAX_TITLE_LENGTH:
            return refuse_input(
                request,
                f"The title is {len(title)} characters long; the limit is {MAX_TITLE_LENGTH}.",
            )
        if not title.isprintable():
            return refuse_input(
                request,
                "The title contains control characters, unpaired surrogates or other "
                "non-printable characters; send plain text.",
            )
        if await self._owns_nothing(request):
            return error_response(404, NOT_FOUND)
        try:
            if not await self._store.exists(thread_id, request=request):
                return error_response(404, NOT_FOUND)
            await self._store.rename(thread_id, title, request=request)
        except StoreError as exc:
            return store_refusal(exc, store="conversation")
        return JsonResponse({"threadId": thread_id, "title": title})

    async def delete(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``DELETE threads/<id>/``: 204 whether or not the thread existed (ids in the alphabet)."""
        if await self._owns_nothing(request):
            return HttpResponse(status=204)
        try:
            await self._store.delete(thread_id, request=request)
        except StoreError as exc:
            return store_refusal(exc, store="conversation")
        return HttpResponse(status=204)
