"""Branches and forks on the thread routes.

A thread's messages form a tree: a run that regenerates an answer or edits a user message
starts a new branch (``chat_history._inbound``), and ``GET threads/<id>/`` returns the active
branch with ``branches``, for each message that has siblings ``{"siblings": [ids], "index":
i}``. ``PATCH threads/<id>/ {"activeMessageId": "<id>"}`` makes the branch through that
message the active one (409 while a run streams on the thread); ``POST threads/<id>/fork/
{"messageId": "<id>"}`` answers 201 ``{"threadId"}``, a new thread of the caller holding the
active branch up to and including that message. Owner-scoped like every thread route: another
owner's thread is the same 404 as a missing one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.http import read_json_object
from django_pydantic_agent.agui.owners import owns_nothing
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.persistence import ConversationStore, is_persistent
from django_pydantic_agent.persistence.branching import BranchPoint, activate_branch, fork_thread

__all__ = [
    "BUSY",
    "FORK_TOO_BIG",
    "MESSAGE_NOT_FOUND",
    "BranchEndpoints",
    "branches_json",
    "message_id_problem",
    "switch_branch",
]

#: The 404 message of a message id the thread's branch does not hold.
MESSAGE_NOT_FOUND = (
    "No such message on this thread; send an id that GET threads/<id>/ returned (a message or "
    "one of its siblings)."
)
#: The 409 of a branch switch while a run streams on the thread.
BUSY = (
    "A run is streaming on this thread; wait for it to finish (or cancel it), then switch branches."
)
#: What the 413 of ``POST threads/<id>/fork/`` asks the caller to send instead.
FORK_TOO_BIG = 'send only {"messageId": "<id>"}.'

_MAX_ID = 255
_NOT_FOUND = "No such thread."

ActiveRun = Callable[[HttpRequest, str], Awaitable[dict[str, Any] | None]]


def branches_json(points: dict[str, BranchPoint]) -> dict[str, Any]:
    """The ``branches`` of a thread on the wire: ``{id: {"siblings": [...], "index": i}}``."""
    return {
        key: {"siblings": list(point.siblings), "index": point.index}
        for key, point in points.items()
    }


def message_id_problem(payload: Any, key: str) -> str | None:
    """Why ``payload[key]`` is not a usable message id, or ``None``."""
    value = payload.get(key) if isinstance(payload, dict) else None
    if not isinstance(value, str) or not value or len(value) > _MAX_ID:
        return (
            f'Send a JSON object with a string "{key}" of 1 to {_MAX_ID} characters, e.g. '
            f'{{"{key}": "msg-1"}}.'
        )
    return None


async def switch_branch(
    store: ConversationStore,
    request: HttpRequest,
    thread_id: str,
    payload: dict[str, Any],
    *,
    active_run: ActiveRun | None,
) -> HttpResponseBase:
    """``PATCH threads/<id>/ {"activeMessageId"}``: 200 ``{"threadId", "activeMessageId"}``,
    400 for a bad id, 404 for a missing thread or message, 409 while a run streams."""
    problem = message_id_problem(payload, "activeMessageId")
    if problem is not None:
        raise Refusal.invalid(request, problem)
    message_id = payload["activeMessageId"]
    if await owns_nothing(request, store) or not await store.exists(thread_id, request=request):
        raise Refusal(404, _NOT_FOUND)
    if active_run is not None and await active_run(request, thread_id) is not None:
        raise Refusal(409, BUSY)
    if not await activate_branch(store, thread_id, message_id, request=request):
        raise Refusal(404, MESSAGE_NOT_FOUND)
    return JsonResponse({"threadId": thread_id, "activeMessageId": message_id})


class BranchEndpoints:
    """The fork route over one conversation store (``body_limit()``: the JSON body cap)."""

    def __init__(self, store: ConversationStore, *, body_limit: Callable[[], int]) -> None:
        self._store = store
        self._body_limit = body_limit

    def routes(self) -> list[Route]:
        """``threads/<thread_id>/fork/``, mounted when the store persists."""
        return [
            Route(
                path="threads/<str:thread_id>/fork/",
                name="thread-fork",
                handlers={"POST": self.fork},
                not_found=_NOT_FOUND,
                too_big=FORK_TOO_BIG,
                mounted=is_persistent(self._store),
            )
        ]

    async def fork(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``POST threads/<id>/fork/ {"messageId"}``: 201 ``{"threadId"}`` of the new thread;
        400 for a bad body, 404 for a missing thread or message, 413/415 for the body, the
        store's refusal (413 over the thread quota)."""
        payload = read_json_object(
            request,
            limit=self._body_limit(),
            too_big=FORK_TOO_BIG,
            not_object=message_id_problem(None, "messageId") or "",
        )
        problem = message_id_problem(payload, "messageId")
        if problem is not None:
            raise Refusal.invalid(request, problem)
        store = self._store
        if await owns_nothing(request, store) or not await store.exists(thread_id, request=request):
            raise Refusal(404, _NOT_FOUND)
        new_id = await fork_thread(store, thread_id, payload["messageId"], request=request)
        if new_id is None:
            raise Refusal(404, MESSAGE_NOT_FOUND)
        return JsonResponse({"threadId": new_id}, status=201)
