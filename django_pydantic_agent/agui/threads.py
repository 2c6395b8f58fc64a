"""The thread drawer routes: list, load, rename and delete the caller's conversations.

Mounted only when the server's conversation store persists. Every answer is owner-scoped by the
store: a thread id belonging to someone else is a 404 exactly like a missing one, and the JSON
never carries an owner id. A thread id outside the id alphabet (``ids.py``) cannot exist, so it
is a 404 on every route (the view checks it after authentication). An anonymous caller without a
session owns nothing: reads answer empty, and no session is created for them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse

from django_pydantic_agent.agui.branches import branches_json, switch_branch
from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.http import read_json_object
from django_pydantic_agent.agui.owners import owns_nothing
from django_pydantic_agent.agui.thread_query import BAD_CURSOR, QueryError, read_query, sign_cursor
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.persistence import (
    ConversationMeta,
    ConversationStore,
    is_persistent,
)
from django_pydantic_agent.persistence.branching import branch_points
from django_pydantic_agent.persistence.features import store_features
from django_pydantic_agent.persistence.feedback import thread_feedback, with_feedback
from django_pydantic_agent.persistence.listing import (
    ArchiveUnsupportedError,
    CursorError,
    ThreadHit,
    archive_thread,
    find_threads,
)
from django_pydantic_agent.persistence.wire import BOOKKEEPING_KEY, strip_branches

__all__ = [
    "CANNOT_ARCHIVE",
    "MAX_TITLE_LENGTH",
    "NOT_FOUND",
    "TITLE_TOO_BIG",
    "ThreadEndpoints",
    "stored_thread",
]

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


async def stored_thread(store: Any, thread_id: str, *, request: HttpRequest) -> list[Any] | None:
    """The owner's thread as ``GET threads/<id>/`` answers its ``messages``: the active branch
    as stored, each with its ``status``; ``None`` for a thread the owner does not have.

    A reattach's ``MESSAGES_SNAPSHOT`` is built from it too, so a client that applies the
    snapshot shows exactly what a reload shows. Whatever the store raises propagates.
    """
    conversation = await store.load(thread_id, request=request)
    if conversation is None:
        return None
    return [_with_status(m) for m in strip_branches(conversation.messages)]


def _meta_json(meta: ConversationMeta) -> dict[str, Any]:
    """One thread-drawer row on the wire: no owner id, ever."""
    return {
        "threadId": meta.thread_id,
        "title": meta.title,
        "preview": meta.preview,
        "updatedAt": meta.updated_at.isoformat() if meta.updated_at else None,
        "archived": meta.archived,
    }


def _hit_json(hit: ThreadHit, *, search: bool) -> dict[str, Any]:
    """A row of ``GET threads/``: the drawer row, and its ``snippet`` in a search."""
    row = _meta_json(hit.meta)
    if search:
        row["snippet"] = hit.snippet
    return row


_PATCH_SHAPE = (
    'Send a JSON object with a non-empty string "title" and/or a boolean "archived", '
    'e.g. {"title": "Plans"} or {"archived": true}.'
)
#: The 400 of ``{"archived": ...}`` on a store that keeps no archived flag.
CANNOT_ARCHIVE = "This server's conversation store cannot archive threads."


def _read_title(title: Any) -> tuple[str, str | None]:
    """``(normalised title, None)``, or ``("", the 400's sentence)`` for a bad title."""
    if not isinstance(title, str) or not title.strip():
        return "", _PATCH_SHAPE
    title = " ".join(title.split())
    if len(title) > MAX_TITLE_LENGTH:
        return "", f"The title is {len(title)} characters long; the limit is {MAX_TITLE_LENGTH}."
    if not title.isprintable():
        return "", (
            "The title contains control characters, unpaired surrogates or other "
            "non-printable characters; send plain text."
        )
    return title, None


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
        model_view: Callable[[HttpRequest, str], Awaitable[dict[str, Any] | None]] | None = None,
    ) -> None:
        self._store = store
        self._feedback = store_features(store).feedback
        self._model_view = model_view
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
        """``GET threads/``: the caller's threads, ``{"threads": [...], "nextCursor"}``.

        Most recent first, or ranked by relevance with ``?q=`` (each row then carries a
        ``snippet``); archived threads only with ``?archived=1`` (``all``: both);
        ``?updated_after=`` / ``?updated_before=`` bound the last activity; ``?cursor=`` is
        the previous page's ``nextCursor`` (``null`` on the last page). ``limit`` defaults to,
        and is capped at, ``list_limit`` (``MountOptions.thread_list_limit``). A parameter
        that cannot be read, or a cursor that was altered or made for other filters, is a 400.
        """
        try:
            query = read_query(request.GET, cap=self._list_limit)
        except QueryError as exc:
            raise Refusal.invalid(request, str(exc)) from None
        if await self._owns_nothing(request):
            return JsonResponse({"threads": [], "nextCursor": None})
        if self._settle is not None:
            await self._settle(request, None)
        try:
            page = await find_threads(self._store, query, request=request)
        except CursorError:
            raise Refusal.invalid(request, BAD_CURSOR) from None
        rows = [_hit_json(hit, search=bool(query.terms)) for hit in page.hits[: query.limit]]
        return JsonResponse({"threads": rows, "nextCursor": sign_cursor(page.next_position, query)})

    async def get(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``GET threads/<id>/``: ``{"threadId", "messages", "activeRun", "branches"}``, or 404.

        ``messages`` are the active branch as stored (each with its ``status``, and its
        ``feedback`` ``{"rating", "comment"}`` when it has some); ``activeRun``
        is the caller's running run on the thread, ``{"runId", "lastSeq"}`` to reattach with,
        or ``null``; ``branches`` maps each message that has siblings to ``{"siblings": [ids],
        "index": i}`` (``agui.branches``); ``modelView`` (durable runs only) is what the next
        run's model is sent: ``{"startsAt": <id of its first message, null when it is the
        whole thread>, "messages": <how many stored messages>, "summary": <the stored
        compaction summary sent ahead of them, or null>}``.
        """
        if await self._owns_nothing(request):
            raise Refusal(404, NOT_FOUND)
        if self._settle is not None:
            await self._settle(request, thread_id)
        messages = await stored_thread(self._store, thread_id, request=request)
        if messages is None:
            raise Refusal(404, NOT_FOUND)
        if self._feedback:
            ratings = await thread_feedback(self._store, thread_id, request=request)
            messages = with_feedback(messages, ratings)
        active = None if self._active_run is None else await self._active_run(request, thread_id)
        points = await branch_points(self._store, thread_id, request=request)
        body: dict[str, Any] = {
            "threadId": thread_id,
            "messages": messages,
            "activeRun": active,
            "branches": branches_json(points),
        }
        if self._model_view is not None:
            body["modelView"] = await self._model_view(request, thread_id)
        return JsonResponse(body)

    async def rename(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``PATCH threads/<id>/`` with ``{"title": "..."}`` and/or ``{"archived": bool}``: 200,
        400, 404, 413 or 415.

        A body with ``"activeMessageId"`` switches branches instead (``agui.branches``).

        The body must be ``application/json`` (415) within ``DATA_UPLOAD_MAX_MEMORY_SIZE``
        (413). Whitespace in the title is collapsed; it must then be a non-empty string of at
        most ``MAX_TITLE_LENGTH`` printable characters (400). ``archived`` must be a boolean
        (400), and the store must keep the flag (400 otherwise). Nothing changes unless every
        field is valid. The answer echoes the fields that were set.
        """
        payload = read_json_object(
            request, limit=self._body_limit(), too_big=TITLE_TOO_BIG, not_object=_PATCH_SHAPE
        )
        if "activeMessageId" in payload:
            return await switch_branch(
                self._store, request, thread_id, payload, active_run=self._active_run
            )
        if not ({"title", "archived"} & payload.keys()):
            raise Refusal.invalid(request, _PATCH_SHAPE)
        changes: dict[str, Any] = {}
        if "title" in payload:
            title, problem = _read_title(payload["title"])
            if problem is not None:
                raise Refusal.invalid(request, problem)
            changes["title"] = title
        if "archived" in payload:
            archived = payload["archived"]
            if not isinstance(archived, bool):
                raise Refusal.invalid(request, '"archived" must be true or false.')
            changes["archived"] = archived
        if await self._owns_nothing(request) or not await self._store.exists(
            thread_id, request=request
        ):
            raise Refusal(404, NOT_FOUND)
        if "archived" in changes:
            try:
                found = await archive_thread(
                    self._store, thread_id, changes["archived"], request=request
                )
            except ArchiveUnsupportedError:
                raise Refusal.invalid(request, CANNOT_ARCHIVE) from None
            if not found:
                raise Refusal(404, NOT_FOUND)
        if "title" in changes:
            await self._store.rename(thread_id, changes["title"], request=request)
        return JsonResponse({"threadId": thread_id, **changes})

    async def delete(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``DELETE threads/<id>/``: 204 whether or not the thread existed (ids in the alphabet)."""
        if not await self._owns_nothing(request):
            await self._store.delete(thread_id, request=request)
        return HttpResponse(status=204)
